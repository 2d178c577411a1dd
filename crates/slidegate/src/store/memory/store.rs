//! The memory store's handle: its own API (any key type), the [`Store`]
//! trait for string keys, and the counts of what it holds.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;

use super::batch::{Locked, LockedHit, decide_all};
use super::bounds::Bounds;
use super::inner::{BatchKeys, Inner};
use super::map::{Map, Shard};
use super::reserve::{Reserved, reserve_all};
use super::slot::Slot;
use super::stored_key::StoredKey;
use crate::algorithm::options::blocked;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::checks::{check_batch, check_cost, check_waits, validate_keys};
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::key::validate_key;
use crate::store::lease::{Lease, Settled};
use crate::store::reserve::{BatchReservation, Reservation, wait_micros};

/// The in-process store. Cheap to clone: clones share the same state.
///
/// Generic over the key type and the clock. The default key type,
/// [`CompactString`], keeps string keys of up to 24 bytes inline in the
/// map's entry (longer ones on the heap, as a `String` does), and is looked
/// up by `&str` or `&String`; any `Clone + Hash + Eq` type (`u64`,
/// `IpAddr`, …) is looked up by itself, and other pairs through
/// [`StoredKey`]. [`Store`] is implemented for the default key type.
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
pub struct MemoryStore<K = CompactString, C: Clock = MonotonicClock> {
    pub(super) inner: Arc<Inner<K, C>>,
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, rules, 0)
    }

    /// What a request of `cost` would get now, recording nothing: unlike
    /// [`peek`](Self::peek), which asks about a cost of 1, this asks about
    /// `cost` itself.
    pub fn dry_run<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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
                    slot.check(state, now, cost.min(rule.burst()), &inner.bounds, held);
                if cost > rule.burst() {
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let inner = &*self.inner;
        let hash = inner.map.hash(key);
        let mut shard = inner.map.lock(inner.map.shard_of(hash));
        match shard.table.find_entry(hash, |e| e.key.matches(key)) {
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
    /// [`MAX_WAIT`](crate::store::MAX_WAIT)): the admission is recorded
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        check_batch(hits)?;
        check_waits(hits.iter().map(|hit| hit.rule))?;
        let reserved = self.reserve_hits(hits, max_wait)?;
        Ok(BatchReservation::new(reserved.decisions, reserved.wait))
    }

    fn reserve_hits<Q>(&self, hits: &[Hit<'_, Q>], max_wait: Duration) -> Result<Reserved>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
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

    /// Bytes held, as [`max_bytes`](crate::store::memory::MemoryStoreBuilder::max_bytes) counts
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
        K: StoredKey<Q>,
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

/// For the default key type alone: one implementation lets
/// `MemoryStore::builder().build()` infer its key type where a [`Store`]
/// is wanted.
impl<C: Clock> Store for MemoryStore<CompactString, C> {
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

    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        MemoryStore::reserve_lease(self, key, rules, cost, time)
    }

    async fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        MemoryStore::reserve_lease_wait(self, key, rules, cost, time, max_wait).await
    }

    async fn commit(&self, id: &str, key: Option<&str>, cost: u64) -> Result<Settled> {
        MemoryStore::commit(self, id, key, cost)
    }

    async fn release(&self, id: &str, key: Option<&str>) -> Result<Settled> {
        MemoryStore::release(self, id, key)
    }
}
