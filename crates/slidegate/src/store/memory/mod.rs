//! The in-process store: a sharded hash table from key to the states of
//! its rules.
//!
//! - **Hot path**: one hash lookup under the key's shard lock (one of 128
//!   by default), one algorithm step. No global lock: keys in different
//!   shards never wait for each other. Batches over several keys lock
//!   their shards in index order.
//! - **One cache line per key**: the key and its slot fill 64 bytes (for
//!   keys of up to 24 bytes, a `String` or a `u64`). The slot refers to
//!   its rule by an index into the shard's rule table, and keeps a sliding
//!   log's first entries inline, their times as deltas at the width the
//!   window needs; longer logs move their entries to a ring and keep their
//!   summary inline, so that a denial still reads one line.
//! - **Exactness**: a key is only ever removed under its shard's lock, and
//!   only when all its states are idle (equivalent to fresh ones). So
//!   sweeping never loses a hit.
//! - **Bounded memory**: idle keys are swept by a background thread every
//!   `sweep_interval` (1 s by default). Three bounds hold whatever callers
//!   send: at most `max_keys` keys (1,000,000 by default), at most
//!   `max_bytes` bytes (1 GiB by default: keys, states and sliding-log
//!   buffers, counted where they are allocated), at most
//!   `max_rules_per_key` rules per key (16 by default). A request that
//!   would need more than a bound allows is refused with a typed error and
//!   records nothing; see [`MemoryStoreBuilder::max_bytes`]. A sliding log
//!   holds at most one entry per distinct admission time inside its
//!   window, so at most `L`, and never more than the byte bound.
//! - **Batches** are linear in their length: keys and (key, rule) pairs
//!   are indexed by hashing (by scanning, up to 16 hits), never by
//!   comparing every hit with every other.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::MutexGuard;

use self::batch::{Locked, LockedHit, SCAN_UP_TO, decide_all};
use self::bounds::Bounds;
use self::map::{Entry, Map, Shard};
use self::reserve::{Reserved, reserve_all};
use self::rules::{MAX_RULES, RuleTable};
use self::slot::{Slot, key_bytes};
use super::checks::{check_batch, check_cost, check_waits, validate_keys};
use super::contract::Store;
use super::hit::Hit;
use super::key::validate_key;
use super::reserve::{BatchReservation, Reservation, wait_micros};
use crate::algorithm::options::blocked;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

mod batch;
mod bounds;
mod log;
mod map;
mod reserve;
mod rules;
mod slot;
mod states;
#[cfg(test)]
mod tests;

type Hasher = foldhash::fast::RandomState;

/// The in-process store. Cheap to clone: clones share the same state.
///
/// Generic over the key type (`String` by default, any `Hash + Eq` type
/// such as `u64` or `IpAddr`) and the clock.
///
/// ```
/// use slidegate::{MemoryStore, Rule};
/// let store = MemoryStore::new();
/// let per_second = Rule::parse("10/s")?;
/// let per_hour = Rule::parse("1000/h")?;
/// let decision = store.acquire("user:42", &[per_second, per_hour], 1)?;
/// assert!(decision.allowed());
/// assert_eq!(decision.remaining(), 9);
/// # Ok::<(), slidegate::Error>(())
/// ```
pub struct MemoryStore<K = String, C: Clock = MonotonicClock> {
    inner: Arc<Inner<K, C>>,
}

impl<K, C: Clock> Clone for MemoryStore<K, C> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, C: Clock> std::fmt::Debug for MemoryStore<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bounds = &self.inner.bounds;
        f.debug_struct("MemoryStore")
            .field("keys", &bounds.keys())
            .field("max_keys", &bounds.max_keys())
            .field("bytes", &bounds.bytes())
            .field("max_bytes", &bounds.max_bytes())
            .field("max_rules_per_key", &bounds.max_rules())
            .finish_non_exhaustive()
    }
}

struct Inner<K, C> {
    map: Map<K>,
    clock: C,
    bounds: Bounds,
    /// The earliest time a full store may sweep again on the request path.
    next_forced_sweep: AtomicU64,
    forced_sweep_gap: u64,
    sweeper: OnceLock<Thread>,
}

impl<K, C> Drop for Inner<K, C> {
    fn drop(&mut self) {
        if let Some(thread) = self.sweeper.get() {
            thread.unpark();
        }
    }
}

/// Counts of what a [`MemoryStore`] holds, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Keys in the map.
    pub keys: usize,
    /// (key, rule) states.
    pub states: usize,
    /// Sliding log entries across all keys.
    pub log_entries: usize,
    /// Heap bytes held by the states beyond the map's own table.
    pub heap_bytes: usize,
    /// What the keys themselves cost, as the byte bound counts them: per
    /// key its map entry (key, slot, the table's control byte) and the
    /// key's own bytes. `key_bytes + heap_bytes` is what
    /// [`MemoryStore::bytes`] counts, and never more than `max_bytes`.
    pub key_bytes: usize,
}

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C = MonotonicClock> {
    clock: C,
    max_keys: usize,
    max_bytes: usize,
    max_rules_per_key: usize,
    sweep_interval: Option<Duration>,
    shards: usize,
}

impl MemoryStore<String, MonotonicClock> {
    /// A store with `String` keys and the default settings.
    pub fn new() -> Self {
        MemoryStore::builder().build()
    }

    /// A builder for other settings, key types or clocks.
    pub fn builder() -> MemoryStoreBuilder<MonotonicClock> {
        MemoryStoreBuilder {
            clock: MonotonicClock::new(),
            max_keys: 1_000_000,
            max_bytes: DEFAULT_MAX_BYTES,
            max_rules_per_key: DEFAULT_MAX_RULES_PER_KEY,
            sweep_interval: Some(Duration::from_secs(1)),
            shards: 128,
        }
    }
}

/// The default of [`MemoryStoreBuilder::max_bytes`]: 1 GiB.
pub const DEFAULT_MAX_BYTES: usize = 1 << 30;

/// The default of [`MemoryStoreBuilder::max_rules_per_key`]: 16.
pub const DEFAULT_MAX_RULES_PER_KEY: usize = 16;

/// The most [`MemoryStoreBuilder::max_rules_per_key`] accepts: a key's
/// rules are found by a scan, which this keeps short.
pub const MAX_RULES_PER_KEY: usize = 256;

impl Default for MemoryStore<String, MonotonicClock> {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// The clock (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryStoreBuilder<C2> {
        MemoryStoreBuilder {
            clock,
            max_keys: self.max_keys,
            max_bytes: self.max_bytes,
            max_rules_per_key: self.max_rules_per_key,
            sweep_interval: self.sweep_interval,
            shards: self.shards,
        }
    }

    /// The most keys held at once (default 1,000,000).
    ///
    /// When a new key arrives and the store is full, the store first sweeps
    /// idle keys (at most once per tenth of the sweep interval, so a flood
    /// of new keys does not turn into a flood of sweeps). If it is still
    /// full, the new key's request fails with [`Error::StoreFull`]
    /// ([`StoreBound::Keys`](crate::StoreBound::Keys)): the
    /// state of live keys is never dropped to make room, since that would
    /// let their clients past their limits. Requests for keys already held
    /// are decided as usual. The server turns `StoreFull` into its failure
    /// policy (deny, allow or local); the middleware denies.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The most bytes held at once (default [`DEFAULT_MAX_BYTES`], 1 GiB).
    ///
    /// Counted: per key its map entry (the key and its slot, padded to a
    /// 64-byte cache line, and the table's control byte), the key's own
    /// bytes (the text of a string key), and the heap of its states
    /// (sliding-log rings and buffers by capacity, the box of a key with
    /// several rules). Not counted: the hash table's spare room (up to as
    /// much again as the entries, right after it grows), the rules each
    /// shard's slots refer to (at most 128 of 24 bytes per shard) and the
    /// allocator's own overhead, so the process' memory can exceed the
    /// bound by a margin; what callers control (how many keys, rules, and
    /// admissions inside a window) cannot grow past it.
    ///
    /// A request that would need more (a new key, a new rule on a key, a
    /// sliding log that must grow to record an admission) first makes the
    /// store sweep idle keys, as [`max_keys`](Self::max_keys) does; if
    /// that frees nothing, it fails with [`Error::StoreFull`]
    /// ([`StoreBound::Bytes`](crate::StoreBound::Bytes)) and records
    /// nothing. Denials, probes and admissions that fit the buffers held
    /// never need more. A log grows by doubling, so a key under a huge
    /// limit and a long window stops growing when its next doubling does
    /// not fit; it is then served as long as admissions fit its buffer
    /// (same microsecond, or entries that expired).
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The most rules one key holds at once (default
    /// [`DEFAULT_MAX_RULES_PER_KEY`], 16; at most [`MAX_RULES_PER_KEY`]).
    ///
    /// A key keeps one state per rule it is used with; without a bound, a
    /// caller choosing its own rules (an API taking a limit and a window)
    /// could pile up states on one key and make every lookup on it slower.
    /// A new rule on a key that holds this many takes the place of an idle
    /// one (equivalent to a fresh state, so no answer changes); when none
    /// is idle the request fails with [`Error::TooManyRules`], which is bad
    /// input (not a store failure: no failure policy turns it into an
    /// admission). A key's rules are found by a scan of at most this many.
    pub fn max_rules_per_key(mut self, max_rules: usize) -> Self {
        self.max_rules_per_key = max_rules.clamp(1, MAX_RULES_PER_KEY);
        self
    }

    /// How often a background thread drops idle keys (default 1 s).
    /// `None` turns it off: call [`MemoryStore::sweep`] yourself.
    pub fn sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// The number of map shards, rounded up to a power of two (default 128).
    /// More shards make each sweep step lock less, and two threads less
    /// likely to want the same lock.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(2, 1 << 16).next_power_of_two();
        self
    }

    /// Builds the store. Keys can be any `Hash + Eq` type.
    pub fn build<K>(self) -> MemoryStore<K, C>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let gap = self
            .sweep_interval
            .unwrap_or(Duration::from_secs(1))
            .as_micros()
            / 10;
        let inner = Arc::new(Inner {
            map: Map::new(self.shards),
            clock: self.clock,
            bounds: Bounds::new(self.max_keys, self.max_bytes, self.max_rules_per_key),
            next_forced_sweep: AtomicU64::new(0),
            forced_sweep_gap: u64::try_from(gap).unwrap_or(u64::MAX),
            sweeper: OnceLock::new(),
        });
        if let Some(interval) = self.sweep_interval {
            spawn_sweeper(&inner, interval);
        }
        MemoryStore { inner }
    }
}

fn spawn_sweeper<K, C>(inner: &Arc<Inner<K, C>>, interval: Duration)
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    let weak: Weak<Inner<K, C>> = Arc::downgrade(inner);
    let spawned = std::thread::Builder::new()
        .name("slidegate-sweeper".into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                let Some(inner) = weak.upgrade() else { return };
                inner.sweep();
            }
        });
    // Without the thread the store still works; it sweeps when full.
    if let Ok(handle) = spawned {
        let _ = inner.sweeper.set(handle.thread().clone());
    }
}

impl<K, C> Inner<K, C>
where
    K: Hash + Eq,
    C: Clock,
{
    fn sweep(&self) -> usize {
        let (mut removed, mut bytes) = (0, 0);
        for shard in 0..self.map.shards() {
            let mut shard = self.map.lock(shard);
            let Shard { table, rules } = &mut *shard;
            let now = self.clock.now_micros();
            table.retain(|entry| {
                let idle = entry.slot.is_idle(now, rules);
                if idle {
                    removed += 1;
                    bytes += entry.slot.bytes();
                }
                !idle
            });
            self.map.shrink(table);
            if rules.len() > MAX_RULES / 2 {
                compact_rules(table, rules);
            }
        }
        self.bounds.remove_keys(removed, bytes);
        removed
    }

    /// Sweeps on the request path, at most once per `forced_sweep_gap`;
    /// true when that freed some keys.
    fn sweep_if_due(&self, now: u64) -> bool {
        let due = self.next_forced_sweep.load(Ordering::Relaxed);
        now >= due
            && self
                .next_forced_sweep
                .compare_exchange(
                    due,
                    now + self.forced_sweep_gap,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
            && self.sweep() > 0
    }

    /// After `full`, a sweep if one is due, then `again`; `full` when no
    /// sweep freed anything.
    #[cold]
    fn after_sweep<T>(&self, full: Error, again: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.sweep_if_due(self.clock.now_micros()) {
            again()
        } else {
            Err(full)
        }
    }

    /// Takes one key (and its bytes) from the bounds.
    fn add_key<Q: ?Sized>(&self, key: &Q) -> Result<u32> {
        let bytes = key_bytes::<Entry<K>, Q>(key);
        self.bounds.try_add_key(bytes as usize)?;
        Ok(bytes)
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
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
            .insert(table, hash, key.to_owned(), Slot::empty(bytes));
        decide_key(&mut entry.slot, held, rules, now, cost, &self.bounds)
    }

    /// Locks the shards of `hits`' keys and decides them with `decide`
    /// ([`decide_all`], or [`reserve_all`]).
    fn acquire_batch<Q, T>(
        &self,
        hits: &[Hit<'_, Q>],
        index: &BatchKeys,
        decide: impl FnOnce(&mut Locked<'_, '_>, &[LockedHit], u64, &Bounds) -> Result<T>,
    ) -> Result<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
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
                            .insert(table, hashes[d], key(d).to_owned(), Slot::empty(0));
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
                if let Ok(entry) = table.find_entry(hashes[d], |e| e.key.borrow() == key(d)) {
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

/// Keeps only the rules a shard's slots refer to.
fn compact_rules<K>(table: &mut hashbrown::HashTable<Entry<K>>, rules: &mut RuleTable) {
    let mut used = vec![false; rules.len()];
    for entry in table.iter() {
        if let Some(id) = entry.slot.rule_id() {
            used[usize::from(id)] = true;
        }
    }
    let renumbered = rules.compact(&used);
    for entry in table.iter_mut() {
        entry.slot.renumber(&renumbered);
    }
}

/// The distinct keys of a batch, found in one pass.
struct BatchKeys {
    /// For each hit, the number of its key among the distinct keys.
    key_of: Vec<usize>,
    /// For each distinct key, its first hit and whether any hit on it
    /// consumes (only those keys are created).
    keys: Vec<(usize, bool)>,
}

impl BatchKeys {
    fn new<Q: Hash + Eq + ?Sized>(hits: &[Hit<'_, Q>]) -> BatchKeys {
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

impl<K, C> MemoryStore<K, C>
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    /// Decides one request of `cost` for `key` under every rule in `rules`,
    /// all-or-nothing. `cost` 0 checks without consuming.
    #[inline]
    pub fn acquire<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        check_cost(rules, cost)?;
        let inner = &*self.inner;
        match inner.acquire(key, rules, cost) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire(key, rules, cost))
            }
            answer => answer,
        }
    }

    /// The state of `key` under `rules`, consuming nothing.
    pub fn peek<Q>(&self, key: &Q, rules: &[Rule]) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, rules, 0)
    }

    /// What a request of `cost` would get now, recording nothing: unlike
    /// [`peek`](Self::peek), which asks about a cost of 1, this asks about
    /// `cost` itself.
    pub fn dry_run<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        check_cost(rules, cost)?;
        let inner = &*self.inner;
        let hash = inner.map.hash(key);
        let mut shard = inner.map.lock(inner.map.shard_of(hash));
        let Shard { table, rules: held } = &mut *shard;
        let now = inner.clock.now_micros();
        let mut absent = Slot::empty(0);
        let slot = match Map::find(table, hash, key) {
            Some(entry) => &mut entry.slot,
            None => &mut absent,
        };
        let decisions: Vec<Decision> = rules
            .iter()
            .map(|&rule| {
                let state = rule.without_options();
                let mut decision =
                    slot.check(state, now, cost.min(rule.limit()), &inner.bounds, held);
                if cost > rule.limit() {
                    decision.allowed = false;
                }
                if rule.block_micros() > 0 {
                    decision = blocked(decision, slot.blocked_until(state), now);
                }
                decision
            })
            .collect();
        Decision::combine(&decisions).ok_or(Error::NoRules)
    }

    /// Decides several hits, possibly on different keys, all-or-nothing:
    /// if any is denied, none is recorded (the ones that would have passed
    /// report the state as it is). One decision per hit, in order.
    pub fn acquire_batch<Q>(&self, hits: &[Hit<'_, Q>]) -> Result<Vec<Decision>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        check_batch(hits)?;
        let inner = &*self.inner;
        let index = BatchKeys::new(hits);
        match inner.acquire_batch(hits, &index, decide_all) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire_batch(hits, &index, decide_all))
            }
            answer => answer,
        }
    }

    /// Forgets `key` under every rule. Returns whether it was held.
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let inner = &*self.inner;
        let hash = inner.map.hash(key);
        let mut shard = inner.map.lock(inner.map.shard_of(hash));
        match shard.table.find_entry(hash, |e| e.key.borrow() == key) {
            Ok(entry) => {
                let (entry, _) = entry.remove();
                inner.bounds.remove_keys(1, entry.slot.bytes());
                true
            }
            Err(_) => false,
        }
    }

    /// Reserves the earliest time at which a request of `cost` for `key`
    /// passes every rule in `rules`, if that is within `max_wait` (at most
    /// [`MAX_WAIT`](super::reserve::MAX_WAIT)): the admission is recorded
    /// at that time now, in one step, and the caller proceeds once
    /// [`wait`](Reservation::wait) has passed, without asking again.
    /// Beyond `max_wait` nothing is recorded and the decision is the
    /// denial [`acquire`](Self::acquire) gives. See [`Store::reserve`].
    pub fn reserve<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        check_cost(rules, cost)?;
        check_waits(rules.iter().copied())?;
        let hits: Vec<Hit<'_, Q>> = rules.iter().map(|&rule| Hit { key, rule, cost }).collect();
        let reserved = self.reserve_hits(&hits, max_wait)?;
        let decision = Decision::combine(&reserved.decisions).ok_or(Error::NoRules)?;
        Ok(Reservation::new(decision, reserved.wait))
    }

    /// [`reserve`](Self::reserve) for several hits, possibly on different
    /// keys, all-or-nothing: one time for all of them, the latest at which
    /// any of them fits. One decision per hit, in order.
    pub fn reserve_batch<Q>(
        &self,
        hits: &[Hit<'_, Q>],
        max_wait: Duration,
    ) -> Result<BatchReservation>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        check_batch(hits)?;
        check_waits(hits.iter().map(|hit| hit.rule))?;
        let reserved = self.reserve_hits(hits, max_wait)?;
        Ok(BatchReservation::new(reserved.decisions, reserved.wait))
    }

    fn reserve_hits<Q>(&self, hits: &[Hit<'_, Q>], max_wait: Duration) -> Result<Reserved>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let max_wait = wait_micros(max_wait);
        let reserve = |keys: &mut Locked<'_, '_>, locked: &[LockedHit], now, bounds: &Bounds| {
            reserve_all(keys, locked, now, max_wait, bounds)
        };
        let inner = &*self.inner;
        let index = BatchKeys::new(hits);
        match inner.acquire_batch(hits, &index, reserve) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire_batch(hits, &index, reserve))
            }
            answer => answer,
        }
    }

    /// Like [`acquire`](Self::acquire), but a request that would pass
    /// within `max_wait` is [reserved](Self::reserve) and returns, allowed,
    /// once its time comes; beyond `max_wait` it returns the denial at
    /// once, without sleeping in vain. See [`Store::acquire_wait`].
    pub async fn acquire_wait<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Ok(self
            .reserve(key, rules, cost, max_wait)?
            .wait_for_turn()
            .await)
    }

    /// Drops every idle key now; returns how many were dropped. The
    /// background sweeper calls this every `sweep_interval`.
    pub fn sweep(&self) -> usize {
        self.inner.sweep()
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.inner.bounds.keys()
    }

    /// Bytes held, as [`max_bytes`](MemoryStoreBuilder::max_bytes) counts
    /// them: a counter, cheap to read (for metrics).
    pub fn bytes(&self) -> usize {
        self.inner.bounds.bytes()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The admissions a sliding-log rule of `key` holds now, as
    /// `(time µs, cost)` pairs, oldest first (`None` for other algorithms or
    /// when there is no state). For tests and diagnostics.
    pub fn admissions<Q>(&self, key: &Q, rule: Rule) -> Option<Vec<(u64, u64)>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let inner = &*self.inner;
        let hash = inner.map.hash(key);
        let mut shard = inner.map.lock(inner.map.shard_of(hash));
        let Shard { table, rules } = &mut *shard;
        Map::find(table, hash, key)?
            .slot
            .admissions(rule.without_options(), rules)
    }

    /// Counts what the store holds. Walks every key: for tests and
    /// diagnostics, not for the hot path.
    pub fn stats(&self) -> MemoryStats {
        let mut stats = MemoryStats::default();
        for shard in 0..self.inner.map.shards() {
            let shard = self.inner.map.lock(shard);
            for entry in shard.table.iter() {
                let (states, entries) = entry.slot.count();
                stats.keys += 1;
                stats.states += states;
                stats.log_entries += entries;
                stats.heap_bytes += entry.slot.heap_bytes();
                stats.key_bytes += entry.slot.key_bytes();
            }
        }
        stats
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

impl<C: Clock> Store for MemoryStore<String, C> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        validate_key(key)?;
        MemoryStore::acquire(self, key, rules, cost)
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        validate_keys(hits)?;
        MemoryStore::acquire_batch(self, hits)
    }

    async fn reset(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        MemoryStore::reset(self, key);
        Ok(())
    }

    async fn ready(&self) -> Result<()> {
        Ok(())
    }

    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision>> {
        Some(validate_key(key).and_then(|()| MemoryStore::acquire(self, key, rules, cost)))
    }

    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> Result<BatchReservation> {
        validate_keys(hits)?;
        MemoryStore::reserve_batch(self, hits, max_wait)
    }
}
