//! What every clone of a memory store shares (the sharded map, the clock,
//! the bounds), and the decisions made under its shards' locks.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::thread::Thread;

use parking_lot::MutexGuard;

use super::batch::{Locked, LockedHit, SCAN_UP_TO, decide_all};
use super::bounds::Bounds;
use super::leases::LeaseBook;
use super::map::{Entry, Map, Shard};
use super::rules::RuleTable;
use super::slot::{Slot, key_bytes};
use super::stored_key::StoredKey;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::hit::Hit;

type Hasher = foldhash::fast::RandomState;

/// What every clone of a [`MemoryStore`](super::MemoryStore) shares.
pub(super) struct Inner<K, C> {
    pub(super) map: Map<K>,
    pub(super) clock: C,
    pub(super) bounds: Bounds,
    /// The earliest time a full store may sweep again on the request path.
    pub(super) next_forced_sweep: AtomicU64,
    pub(super) forced_sweep_gap: u64,
    pub(super) sweeper: OnceLock<Thread>,
    /// Every lease, by id.
    pub(super) leases: LeaseBook<K>,
    /// Wakes the requests waiting for places when some are given back.
    pub(super) freed: tokio::sync::Notify,
}

impl<K, C> Drop for Inner<K, C> {
    fn drop(&mut self) {
        if let Some(thread) = self.sweeper.get() {
            thread.unpark();
        }
    }
}

impl<K, C> Inner<K, C>
where
    K: Hash + Eq,
    C: Clock,
{
    /// Takes one key (and its bytes) from the bounds.
    pub(super) fn add_key<Q: ?Sized>(&self, key: &Q) -> Result<u32>
    where
        K: StoredKey<Q>,
    {
        let bytes = key_bytes::<Entry<K>>(K::held_bytes(key));
        self.bounds.try_add_key(bytes as usize)?;
        Ok(bytes)
    }

    #[inline]
    pub(super) fn acquire<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.map.hash(key);
        let mut shard = self.map.lock(self.map.shard_of(hash));
        let Shard { table, rules: held } = &mut *shard;
        // The clock is read under the lock: a sweep that dropped the key as
        // idle used an earlier time, so the fresh state is equivalent. Read
        // before the lock, a sweep in between could drop entries that still
        // count at the (older) time of this decision.
        if let Some(entry) = Map::find(table, hash, key) {
            let now = self.clock.now_micros();
            return decide_key(&mut entry.slot, held, rules, now, cost, &self.bounds);
        }
        let now = self.clock.now_micros();
        if cost == 0 {
            return decide_key(&mut Slot::empty(0), held, rules, now, 0, &self.bounds);
        }
        // Before copying the key: a flood of new keys on a full store
        // costs no allocation.
        let bytes = self.add_key(key)?;
        let entry = self
            .map
            .insert(table, hash, K::from_lookup(key), Slot::empty(bytes));
        decide_key(&mut entry.slot, held, rules, now, cost, &self.bounds)
    }

    /// Locks the shards of `hits`' keys and decides them with `decide`
    /// ([`decide_all`], or [`reserve_all`]).
    pub(super) fn acquire_batch<Q, T>(
        &self,
        hits: &[Hit<'_, Q>],
        index: &BatchKeys,
        decide: impl FnOnce(&mut Locked<'_, '_>, &[LockedHit], u64, &Bounds) -> Result<T>,
    ) -> Result<T>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let key = |distinct: usize| hits[index.keys[distinct].0].key;
        let hashes: Vec<u64> = (0..index.keys.len())
            .map(|d| self.map.hash(key(d)))
            .collect();
        // Lock every key's shard, in index order so that batches cannot
        // deadlock.
        let mut shards: Vec<usize> = hashes.iter().map(|&h| self.map.shard_of(h)).collect();
        shards.sort_unstable();
        shards.dedup();
        let table_of: Vec<usize> = hashes
            .iter()
            .map(|&h| shards.partition_point(|&s| s < self.map.shard_of(h)))
            .collect();
        let mut guards: Vec<MutexGuard<'_, Shard<K>>> =
            shards.iter().map(|&s| self.map.lock(s)).collect();
        // Under the locks, for the reason given in `acquire`.
        let now = self.clock.now_micros();
        // Each key's slot is taken out of its table for the decision (an
        // empty one stands in, unseen: the shard is locked) and put back.
        let mut slots = Vec::with_capacity(hashes.len());
        let mut taken = Vec::with_capacity(hashes.len());
        let mut added = Vec::with_capacity(hashes.len());
        let mut refused = None;
        for (d, &(_, consumes)) in index.keys.iter().enumerate() {
            let table = &mut guards[table_of[d]].table;
            let (slot, held, new) = match Map::find(table, hashes[d], key(d)) {
                Some(entry) => (
                    std::mem::replace(&mut entry.slot, Slot::empty(0)),
                    true,
                    false,
                ),
                None if consumes => match self.add_key(key(d)) {
                    Ok(bytes) => {
                        self.map
                            .insert(table, hashes[d], K::from_lookup(key(d)), Slot::empty(0));
                        (Slot::empty(bytes), true, true)
                    }
                    Err(full) => {
                        refused = Some(full);
                        break;
                    }
                },
                None => (Slot::empty(0), false, false),
            };
            slots.push(slot);
            taken.push(held);
            added.push(new);
        }
        let decisions = match refused {
            Some(full) => Err(full),
            None => {
                let locked: Vec<LockedHit> = hits
                    .iter()
                    .zip(&index.key_of)
                    .map(|(hit, &distinct)| LockedHit::new(distinct, hit.rule, hit.cost))
                    .collect();
                let mut tables: Vec<&mut RuleTable> =
                    guards.iter_mut().map(|shard| &mut shard.rules).collect();
                let mut keys = Locked {
                    slots: &mut slots,
                    tables: &mut tables,
                    table_of: &table_of,
                };
                decide(&mut keys, &locked, now, &self.bounds)
            }
        };
        for (d, slot) in slots.into_iter().enumerate() {
            if !taken[d] {
                continue;
            }
            let Shard { table, rules } = &mut *guards[table_of[d]];
            // A key this batch added but recorded nothing in (the batch
            // was refused, or failed) is taken out again: its fresh states
            // would otherwise outlive the refusal, and a window counter's
            // would keep the window of `now` if the clock stepped back.
            if added[d] && slot.is_idle(now, rules) {
                if let Ok(entry) = table.find_entry(hashes[d], |e| e.key.matches(key(d))) {
                    entry.remove();
                    self.bounds.remove_keys(1, slot.bytes());
                }
            } else if let Some(entry) = Map::find(table, hashes[d], key(d)) {
                entry.slot = slot;
            }
        }
        decisions
    }
}

/// The distinct keys of a batch, found in one pass.
pub(super) struct BatchKeys {
    /// For each hit, the number of its key among the distinct keys.
    pub(super) key_of: Vec<usize>,
    /// For each distinct key, its first hit and whether any hit on it
    /// consumes (only those keys are created).
    pub(super) keys: Vec<(usize, bool)>,
}

impl BatchKeys {
    /// The distinct keys of `hits`.
    pub(super) fn new<Q: Hash + Eq + ?Sized>(hits: &[Hit<'_, Q>]) -> BatchKeys {
        let mut key_of = Vec::with_capacity(hits.len());
        let mut keys: Vec<(usize, bool)> = Vec::new();
        let mut seen: Option<HashMap<&Q, usize, Hasher>> = (hits.len() > SCAN_UP_TO)
            .then(|| HashMap::with_capacity_and_hasher(hits.len(), Hasher::default()));
        for (i, hit) in hits.iter().enumerate() {
            let known = match &mut seen {
                Some(seen) => *seen.entry(hit.key).or_insert(keys.len()),
                None => keys
                    .iter()
                    .position(|&(first, _)| hits[first].key == hit.key)
                    .unwrap_or(keys.len()),
            };
            if known == keys.len() {
                keys.push((i, false));
            }
            keys[known].1 |= hit.cost > 0;
            key_of.push(known);
        }
        BatchKeys { key_of, keys }
    }
}

#[inline]
fn decide_key(
    slot: &mut Slot,
    held: &mut RuleTable,
    rules: &[Rule],
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Result<Decision> {
    // A rule with options (a report, a lockout) takes the batch's steps,
    // which know them; the common rule keeps its own.
    if let [rule] = rules
        && !rule.has_options()
    {
        return slot.decide_one(*rule, now, cost, bounds, held);
    }
    let hits: Vec<LockedHit> = rules
        .iter()
        .map(|&rule| LockedHit::new(0, rule, cost))
        .collect();
    let mut keys = Locked {
        slots: std::slice::from_mut(slot),
        tables: &mut [held],
        table_of: &[0],
    };
    let decisions = decide_all(&mut keys, &hits, now, bounds)?;
    Decision::combine(&decisions).ok_or(Error::NoRules)
}
