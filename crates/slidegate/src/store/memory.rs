//! The in-process store: a sharded concurrent map from key to the states of
//! its rules.
//!
//! - **Hot path**: one hash lookup under the key's shard lock (one of 128
//!   by default), one algorithm step. No global lock: keys in different
//!   shards never wait for each other. Batches over several keys hold their
//!   shards' read locks and lock the keys one by one, in address order.
//! - **Exactness**: a key is only ever removed under its shard's write lock,
//!   which waits for every decision in flight on that shard, and only when
//!   all its states are idle (equivalent to fresh ones). So sweeping never
//!   loses a hit.
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

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use self::bounds::Bounds;
use self::slot::{KeyStates, LockedHit, SCAN_UP_TO, Slot, decide_all, key_bytes};
use super::{Hit, Store, check_cost, validate_key};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

mod bounds;
mod slot;

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
    map: DashMap<K, Slot, Hasher>,
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
    /// Counted: per key its map entry (the key, its slot, the table's
    /// control byte: `size_of`), the key's own bytes (the text of a string
    /// key), and the heap of its states (sliding-log buffers by capacity,
    /// the vector of a key's second and later rules). Not counted: the hash
    /// table's spare room (up to as much again as the entries, right after
    /// it grows) and the allocator's own overhead, so the process' memory
    /// can exceed the bound by a margin; what callers control (how many
    /// keys, rules, and admissions inside a window) cannot grow past it.
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
    /// More shards make each sweep step and each insert lock less.
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
            map: DashMap::with_hasher_and_shard_amount(Hasher::default(), self.shards),
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
        let now = self.clock.now_micros();
        let (mut removed, mut bytes) = (0, 0);
        self.map.retain(|_, slot| {
            let states = slot.states.get_mut();
            let keep = !states.is_idle(now);
            if !keep {
                removed += 1;
                bytes += states.bytes();
            }
            keep
        });
        self.bounds.remove_keys(removed, bytes);
        let len = self.bounds.keys();
        if removed > 0 && self.map.capacity() > 4 * len + 4096 {
            self.map.shrink_to_fit();
        }
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

    /// The slot of `key`, inserted if it is not held, when the bounds let
    /// one more key in.
    fn insert_key<Q>(&self, key: &Q) -> Result<dashmap::mapref::one::RefMut<'_, K, Slot>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Before copying the key: a flood of new keys on a full store
        // costs no allocation.
        if self.bounds.keys_full() {
            return Err(self.bounds.keys_error());
        }
        match self.map.entry(key.to_owned()) {
            Entry::Occupied(entry) => Ok(entry.into_ref()),
            Entry::Vacant(entry) => {
                let bytes = key_bytes::<K, Q>(key);
                self.bounds.try_add_key(bytes)?;
                Ok(entry.insert(Slot::new(bytes)))
            }
        }
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, rules: &[Rule], cost: u64) -> Result<Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The clock is read under the lock: a sweep that dropped the key as
        // idle used an earlier time, so the fresh state is equivalent. Read
        // before the lock, a sweep in between could drop entries that still
        // count at the (older) time of this decision.
        //
        // The shard's write lock makes the key's mutex unnecessary here:
        // batches, which lock keys one by one, hold the shard's read lock.
        if let Some(mut slot) = self.map.get_mut(key) {
            let now = self.clock.now_micros();
            return decide_key(slot.states.get_mut(), rules, now, cost, &self.bounds);
        }
        if cost == 0 {
            let now = self.clock.now_micros();
            return decide_key(&mut KeyStates::default(), rules, now, 0, &self.bounds);
        }
        let mut slot = self.insert_key(key)?;
        let now = self.clock.now_micros();
        decide_key(slot.states.get_mut(), rules, now, cost, &self.bounds)
    }

    fn acquire_batch<Q>(&self, hits: &[Hit<'_, Q>], index: &BatchKeys) -> Result<Vec<Decision>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        loop {
            for &(first, consumes) in &index.keys {
                let key = hits[first].key;
                if consumes && !self.map.contains_key(key) {
                    drop(self.insert_key(key)?);
                }
            }
            // Hold every key's shard (read) lock so none is swept, then lock
            // the keys in address order so batches cannot deadlock.
            let mut slots = Vec::with_capacity(index.keys.len());
            let mut swept_meanwhile = false;
            for (distinct, &(first, consumes)) in index.keys.iter().enumerate() {
                match self.map.get(hits[first].key) {
                    Some(slot) => slots.push((distinct, Some(slot))),
                    None if consumes => {
                        swept_meanwhile = true;
                        break;
                    }
                    None => slots.push((distinct, None)),
                }
            }
            if swept_meanwhile {
                continue;
            }
            slots
                .sort_by_key(|(_, slot)| slot.as_ref().map_or(0, |s| &**s as *const Slot as usize));
            // Where each distinct key ended up in that order.
            let mut place = vec![0; slots.len()];
            for (at, (distinct, _)) in slots.iter().enumerate() {
                place[*distinct] = at;
            }
            let mut guards: Vec<_> = slots
                .iter()
                .map(|(_, slot)| slot.as_ref().map(|s| s.states.lock()))
                .collect();
            let mut absent: Vec<KeyStates> = slots.iter().map(|_| KeyStates::default()).collect();
            let mut states: Vec<&mut KeyStates> = guards
                .iter_mut()
                .zip(absent.iter_mut())
                .map(|(guard, empty)| match guard {
                    Some(guard) => &mut **guard,
                    None => empty,
                })
                .collect();
            // Under the locks, for the reason given in `acquire`.
            let now = self.clock.now_micros();
            let locked: Vec<LockedHit> = hits
                .iter()
                .zip(&index.key_of)
                .map(|(hit, &distinct)| LockedHit {
                    key: place[distinct],
                    rule: hit.rule,
                    cost: hit.cost,
                })
                .collect();
            return decide_all(&mut states, &locked, now, &self.bounds);
        }
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
        let decisions = match inner.map.get_mut(key) {
            Some(mut slot) => {
                let now = inner.clock.now_micros();
                slot.states
                    .get_mut()
                    .dry_run(rules, now, cost, &inner.bounds)
            }
            None => {
                KeyStates::default().dry_run(rules, inner.clock.now_micros(), cost, &inner.bounds)
            }
        };
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
        if hits.is_empty() {
            return Err(Error::NoRules);
        }
        for hit in hits {
            check_cost(&[hit.rule], hit.cost)?;
        }
        let inner = &*self.inner;
        let index = BatchKeys::new(hits);
        match inner.acquire_batch(hits, &index) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire_batch(hits, &index))
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
        match self.inner.map.remove(key) {
            Some((_, slot)) => {
                let bytes = slot.states.into_inner().bytes();
                self.inner.bounds.remove_keys(1, bytes);
                true
            }
            None => false,
        }
    }

    /// Like [`acquire`](Self::acquire), but when denied, sleeps until the
    /// request would pass and tries again, while the total wait stays within
    /// `max_wait`; see [`Store::acquire_wait`].
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
        let deadline = std::time::Instant::now() + max_wait;
        loop {
            let decision = self.acquire(key, rules, cost)?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if decision.allowed() || decision.retry_after() > left {
                return Ok(decision);
            }
            tokio::time::sleep(decision.retry_after()).await;
        }
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
        let slot = self.inner.map.get(key)?;
        let states = slot.states.lock();
        states
            .iter()
            .find(|(r, _)| *r == rule)
            .and_then(|(_, state)| match state {
                crate::algorithm::State::SlidingLog(log) => Some(log.entries().collect()),
                _ => None,
            })
    }

    /// Counts what the store holds. Walks every key: for tests and
    /// diagnostics, not for the hot path.
    pub fn stats(&self) -> MemoryStats {
        let mut stats = MemoryStats::default();
        for entry in self.inner.map.iter() {
            let states = entry.value().states.lock();
            stats.keys += 1;
            stats.heap_bytes += states.heap_bytes();
            stats.key_bytes += states.key_bytes();
            for (_, state) in states.iter() {
                stats.states += 1;
                if let crate::algorithm::State::SlidingLog(log) = state {
                    stats.log_entries += log.len();
                }
            }
        }
        stats
    }
}

#[inline]
fn decide_key(
    states: &mut KeyStates,
    rules: &[Rule],
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Result<Decision> {
    if let [rule] = rules {
        return states.decide_one(*rule, now, cost, bounds);
    }
    let hits: Vec<LockedHit> = rules
        .iter()
        .map(|&rule| LockedHit { key: 0, rule, cost })
        .collect();
    let decisions = decide_all(&mut [states], &hits, now, bounds)?;
    Decision::combine(&decisions).ok_or(Error::NoRules)
}

impl<C: Clock> Store for MemoryStore<String, C> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        validate_key(key)?;
        MemoryStore::acquire(self, key, rules, cost)
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        for hit in hits {
            validate_key(hit.key)?;
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn store(clock: &ManualClock) -> MemoryStore<String, ManualClock> {
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build()
    }

    #[test]
    fn several_rules_pass_or_fail_together() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let small = Rule::parse("2/1s").unwrap();
        let big = Rule::parse("3/1m").unwrap();
        assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
        assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
        let denied = s.acquire("k", &[small, big], 1).unwrap();
        assert!(!denied.allowed());
        assert_eq!(denied.limit(), 2);
        // The minute rule was not charged by the denial.
        clock.advance(Duration::from_millis(1001));
        assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
        let d = s.acquire("k", &[small, big], 1).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.limit(), 3);
        assert_eq!(s.peek("k", &[big]).unwrap().remaining(), 0);
    }

    #[test]
    fn batch_over_keys_is_all_or_nothing() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let rule = Rule::parse("1/1s").unwrap();
        s.acquire("b", &[rule], 1).unwrap();
        let ds = s
            .acquire_batch(&[Hit::new("a", rule, 1), Hit::new("b", rule, 1)])
            .unwrap();
        assert!(ds[0].allowed() && !ds[1].allowed());
        assert_eq!(ds[0].remaining(), 1, "a was not charged");
        assert!(s.acquire("a", &[rule], 1).unwrap().allowed());
    }

    #[test]
    fn duplicate_hits_add_up() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let rule = Rule::parse("3/1s").unwrap();
        let ds = s
            .acquire_batch(&[Hit::new("a", rule, 2), Hit::new("a", rule, 1)])
            .unwrap();
        assert!(ds.iter().all(Decision::allowed));
        assert_eq!(ds[1].remaining(), 0);
        assert!(matches!(
            s.acquire_batch(&[Hit::new("b", rule, 2), Hit::new("b", rule, 2)]),
            Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
        ));
    }

    #[test]
    fn probes_do_not_create_keys() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let rule = Rule::parse("3/1s").unwrap();
        let p = s.peek("nobody", &[rule]).unwrap();
        assert!(p.allowed());
        assert_eq!(p.remaining(), 3);
        assert!(s.is_empty());
        s.acquire_batch(&[Hit::new("x", rule, 0)]).unwrap();
        assert!(s.is_empty());
    }

    #[test]
    fn sweep_drops_only_idle_keys() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let rule = Rule::parse("3/1s").unwrap();
        s.acquire("old", &[rule], 1).unwrap();
        clock.advance(Duration::from_millis(500));
        s.acquire("new", &[rule], 1).unwrap();
        clock.advance(Duration::from_millis(501));
        assert_eq!(s.sweep(), 1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.peek("new", &[rule]).unwrap().remaining(), 2);
    }

    #[test]
    fn a_full_store_refuses_new_keys_but_serves_held_ones() {
        let clock = ManualClock::new();
        let s: MemoryStore<u64, _> = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_keys(2)
            .build();
        let rule = Rule::parse("5/1s").unwrap();
        s.acquire(&1, &[rule], 1).unwrap();
        s.acquire(&2, &[rule], 1).unwrap();
        assert_eq!(
            s.acquire(&3, &[rule], 1),
            Err(Error::StoreFull {
                bound: crate::StoreBound::Keys(2)
            })
        );
        assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
        // Once key 2 is idle, the full store sweeps it to make room.
        clock.advance(Duration::from_millis(2000));
        assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
        assert!(s.acquire(&3, &[rule], 1).unwrap().allowed());
        assert_eq!(s.len(), 2);
    }

    /// What the store counts is what it holds, and within the bound.
    fn assert_within<K, C>(s: &MemoryStore<K, C>, max_bytes: usize)
    where
        K: Hash + Eq + Send + Sync + 'static,
        C: Clock,
    {
        let stats = s.stats();
        assert_eq!(stats.key_bytes + stats.heap_bytes, s.bytes(), "{stats:?}");
        assert!(s.bytes() <= max_bytes, "{} > {max_bytes}", s.bytes());
    }

    fn bytes_full(max_bytes: usize) -> Error {
        Error::StoreFull {
            bound: crate::StoreBound::Bytes(max_bytes),
        }
    }

    fn bounded(clock: &ManualClock, max_bytes: usize) -> MemoryStore<String, ManualClock> {
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_bytes(max_bytes)
            .build()
    }

    #[test]
    fn a_flood_of_keys_stays_within_the_byte_bound() {
        const MAX: usize = 64 * 1024;
        let clock = ManualClock::new();
        let s = bounded(&clock, MAX);
        let rule = Rule::parse("5/1m").unwrap();
        let mut refused = 0;
        for k in 0..10_000 {
            match s.acquire(&format!("client:{k}"), &[rule], 1) {
                Ok(d) => assert!(d.allowed()),
                Err(e) => {
                    assert_eq!(e, bytes_full(MAX));
                    refused += 1;
                }
            }
            clock.advance(Duration::from_micros(1));
        }
        assert!(refused > 9_000, "{refused} refused");
        assert!(s.len() > 100, "{} keys held", s.len());
        assert_within(&s, MAX);
    }

    #[test]
    fn a_flood_of_rules_on_one_key_stays_within_the_byte_bound() {
        const MAX: usize = 16 * 1024;
        let clock = ManualClock::new();
        let s: MemoryStore<String, ManualClock> = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_bytes(MAX)
            .max_rules_per_key(MAX_RULES_PER_KEY)
            .build();
        let mut refused = 0;
        for limit in 1..=MAX_RULES_PER_KEY as u64 {
            let rule = Rule::parse(&format!("{limit}/1h")).unwrap();
            match s.acquire("victim", &[rule], 1) {
                Ok(d) => assert!(d.allowed()),
                Err(e) => {
                    assert_eq!(e, bytes_full(MAX));
                    refused += 1;
                }
            }
            assert_within(&s, MAX);
        }
        assert!(refused > 0);
        assert!(s.stats().states < MAX_RULES_PER_KEY);
    }

    #[test]
    fn admissions_under_a_huge_limit_and_a_long_window_stay_within_the_byte_bound() {
        const MAX: usize = 64 * 1024;
        let clock = ManualClock::new();
        let s = bounded(&clock, MAX);
        let huge = Rule::parse("1000000000000/3650d").unwrap();
        let small = Rule::parse("3/1h").unwrap();
        s.acquire("held", &[small], 1).unwrap();
        let mut admitted = 0;
        let full = loop {
            match s.acquire("greedy", &[huge], 1) {
                Ok(d) => assert!(d.allowed()),
                Err(e) => break e,
            }
            admitted += 1;
            clock.advance(Duration::from_micros(1));
        };
        assert_eq!(full, bytes_full(MAX));
        assert!(admitted >= 1024, "{admitted} admitted");
        assert_within(&s, MAX);
        let entries = s.stats().log_entries;
        // The full store still decides what fits what it holds (the held
        // key's admissions and denials), and refuses what would grow it.
        assert!(s.acquire("held", &[small], 2).unwrap().allowed());
        assert!(!s.acquire("held", &[small], 1).unwrap().allowed());
        assert_eq!(s.acquire("greedy", &[huge], 1), Err(bytes_full(MAX)));
        clock.advance(Duration::from_micros(1));
        assert_eq!(s.acquire("greedy", &[huge], 1), Err(bytes_full(MAX)));
        assert_eq!(s.stats().log_entries, entries + 1, "only held's entry");
        assert_within(&s, MAX);
    }

    #[test]
    fn denials_and_probes_on_a_full_store_take_no_bytes() {
        const MAX: usize = 4096;
        let clock = ManualClock::new();
        let s = bounded(&clock, MAX);
        let rule = Rule::parse("1/1h").unwrap();
        let mut k = 0;
        while s.acquire(&format!("k{k}"), &[rule], 1).is_ok() {
            k += 1;
        }
        let held = s.bytes();
        for _ in 0..100 {
            assert!(!s.acquire("k0", &[rule], 1).unwrap().allowed());
            assert!(s.peek("new", &[rule]).unwrap().allowed());
            assert!(s.dry_run("k1", &[rule], 1).map(|d| !d.allowed()).unwrap());
        }
        assert_eq!(s.bytes(), held);
        assert_within(&s, MAX);
    }

    #[test]
    fn the_bytes_come_back_when_keys_are_swept_or_reset() {
        let clock = ManualClock::new();
        let s = bounded(&clock, 1 << 20);
        let rules = [
            Rule::parse("500/1s").unwrap(),
            Rule::parse("900/2s").unwrap(),
        ];
        for k in 0..100 {
            for _ in 0..20 {
                s.acquire(&format!("k{k}"), &rules, 1).unwrap();
                clock.advance(Duration::from_micros(3));
            }
        }
        assert_within(&s, 1 << 20);
        assert!(s.bytes() > 100 * 20 * 16);
        assert!(s.reset("k0"));
        assert_within(&s, 1 << 20);
        clock.advance(Duration::from_secs(3));
        assert_eq!(s.sweep(), 99);
        assert_eq!((s.bytes(), s.stats()), (0, MemoryStats::default()));
    }

    #[test]
    fn a_full_byte_bound_sweeps_idle_keys_to_make_room() {
        const MAX: usize = 4096;
        let clock = ManualClock::new();
        let s = bounded(&clock, MAX);
        let rule = Rule::parse("1/1s").unwrap();
        let mut k = 0;
        while s.acquire(&format!("k{k}"), &[rule], 1).is_ok() {
            k += 1;
        }
        clock.advance(Duration::from_millis(1001));
        assert!(s.acquire("newcomer", &[rule], 1).unwrap().allowed());
        assert_eq!(s.len(), 1);
        assert_within(&s, MAX);
    }

    #[test]
    fn the_rules_cap_replaces_idle_states_and_refuses_otherwise() {
        let clock = ManualClock::new();
        let s: MemoryStore<String, ManualClock> = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .max_rules_per_key(2)
            .build();
        let second = Rule::parse("5/1s").unwrap();
        let hour = Rule::parse("5/1h").unwrap();
        let third = Rule::parse("7/1s").unwrap();
        s.acquire("k", &[second], 1).unwrap();
        s.acquire("k", &[hour], 1).unwrap();
        assert_eq!(
            s.acquire("k", &[third], 1),
            Err(Error::TooManyRules { max: 2 })
        );
        assert!(!Error::TooManyRules { max: 2 }.is_store_failure());
        clock.advance(Duration::from_millis(1001));
        assert!(s.acquire("k", &[third], 1).unwrap().allowed());
        assert_eq!(s.peek("k", &[hour]).unwrap().remaining(), 4);
        assert_eq!(s.stats().states, 2);
    }

    #[test]
    fn batches_with_many_repeated_keys_add_up_per_key() {
        let clock = ManualClock::new();
        let s = store(&clock);
        let rule = Rule::parse("50/1s").unwrap();
        let names: Vec<String> = (0..10).map(|k| format!("k{k}")).collect();
        let hits: Vec<Hit<'_>> = (0..400)
            .map(|i| Hit::new(names[i % 10].as_str(), rule, 1))
            .collect();
        let ds = s.acquire_batch(&hits).unwrap();
        assert!(ds.iter().all(Decision::allowed));
        assert_eq!(ds[399].remaining(), 10);
        assert_eq!(s.peek("k3", &[rule]).unwrap().remaining(), 10);
        // 11 more on k3 cannot pass together: nothing recorded anywhere.
        let more: Vec<Hit<'_>> = (0..11).map(|_| Hit::new("k3", rule, 1)).collect();
        let mut hits = hits[..20].to_vec();
        hits.extend(more);
        let ds = s.acquire_batch(&hits).unwrap();
        assert!(!ds.iter().all(Decision::allowed));
        assert_eq!(s.peek("k0", &[rule]).unwrap().remaining(), 10);
    }

    #[test]
    fn a_denied_decision_keeps_the_state_its_check_moved_as_redis_does() {
        use crate::{Algorithm, Rate};
        let t0 = 1_763_800_000_000_000;
        let clock = ManualClock::at(t0);
        let s = store(&clock);
        let fixed = Rule::new(Rate::new(10, Duration::from_micros(968_420)).unwrap())
            .with_algorithm(Algorithm::FixedWindow);
        let w = 2_709_207;
        let counter = Rule::new(Rate::new(3, Duration::from_micros(w)).unwrap())
            .with_algorithm(Algorithm::SlidingCounter);
        s.acquire("k", &[fixed], 10).unwrap();
        // Denied by the fixed window; the counter's window was rolled to t0's.
        assert!(!s.acquire("k", &[fixed, counter], 1).unwrap().allowed());
        let back = 3_676_405;
        clock.set(t0 - back);
        // The counter's window does not step back with the clock.
        let d = s.acquire("k", &[counter], 3).unwrap();
        let start = t0 - t0 % w;
        assert_eq!(
            d.reset_after(),
            Duration::from_micros(start + 2 * w - (t0 - back))
        );
    }

    #[test]
    fn the_background_sweeper_empties_the_store() {
        let clock = ManualClock::new();
        let s: MemoryStore<u64, _> = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(Some(Duration::from_millis(10)))
            .build();
        let rule = Rule::parse("5/1s").unwrap();
        for k in 0..1000 {
            s.acquire(&k, &[rule], 1).unwrap();
        }
        clock.advance(Duration::from_secs(2));
        let start = std::time::Instant::now();
        while !s.is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(s.stats(), MemoryStats::default());
    }
}
