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
//!   `sweep_interval` (1 s by default). At most `max_keys` keys are held
//!   (1,000,000 by default); see [`MemoryStoreBuilder::max_keys`] for what
//!   happens when that bound is reached. A sliding log holds at most one
//!   entry per distinct admission time inside its window, so at most `L`.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use self::slot::{KeyStates, LockedHit, Slot, decide_all};
use super::{Hit, Store, check_cost, validate_key};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

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
        f.debug_struct("MemoryStore")
            .field("keys", &self.inner.keys.load(Ordering::Relaxed))
            .field("max_keys", &self.inner.max_keys)
            .finish_non_exhaustive()
    }
}

struct Inner<K, C> {
    map: DashMap<K, Slot, Hasher>,
    clock: C,
    keys: AtomicUsize,
    max_keys: usize,
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
}

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C = MonotonicClock> {
    clock: C,
    max_keys: usize,
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
            sweep_interval: Some(Duration::from_secs(1)),
            shards: 128,
        }
    }
}

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
            sweep_interval: self.sweep_interval,
            shards: self.shards,
        }
    }

    /// The most keys held at once (default 1,000,000).
    ///
    /// When a new key arrives and the store is full, the store first sweeps
    /// idle keys (at most once per tenth of the sweep interval, so a flood
    /// of new keys does not turn into a flood of sweeps). If it is still
    /// full, the new key's request fails with [`Error::StoreFull`]: the
    /// state of live keys is never dropped to make room, since that would
    /// let their clients past their limits. Requests for keys already held
    /// are decided as usual. The server turns `StoreFull` into its failure
    /// policy (deny, allow or local).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
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
            keys: AtomicUsize::new(0),
            max_keys: self.max_keys,
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
        let mut removed = 0;
        self.map.retain(|_, slot| {
            let keep = !slot.states.get_mut().is_idle(now);
            removed += usize::from(!keep);
            keep
        });
        self.keys.fetch_sub(removed, Ordering::Relaxed);
        let len = self.keys.load(Ordering::Relaxed);
        if removed > 0 && self.map.capacity() > 4 * len + 4096 {
            self.map.shrink_to_fit();
        }
        removed
    }

    /// Makes sure one more key fits, sweeping if the store is full.
    fn make_room(&self, now: u64) -> Result<()> {
        if self.keys.load(Ordering::Relaxed) < self.max_keys {
            return Ok(());
        }
        let due = self.next_forced_sweep.load(Ordering::Relaxed);
        if now >= due
            && self
                .next_forced_sweep
                .compare_exchange(
                    due,
                    now + self.forced_sweep_gap,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.sweep();
        }
        if self.keys.load(Ordering::Relaxed) < self.max_keys {
            Ok(())
        } else {
            Err(Error::StoreFull {
                max_keys: self.max_keys,
            })
        }
    }

    fn insert_key<Q>(&self, key: &Q) -> Result<dashmap::mapref::one::RefMut<'_, K, Slot>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.make_room(self.clock.now_micros())?;
        let slot = match self.map.entry(key.to_owned()) {
            Entry::Occupied(entry) => entry.into_ref(),
            Entry::Vacant(entry) => {
                self.keys.fetch_add(1, Ordering::Relaxed);
                entry.insert(Slot::default())
            }
        };
        Ok(slot)
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
        // The clock is read under the lock: a sweep that dropped the key as
        // idle used an earlier time, so the fresh state is equivalent. Read
        // before the lock, a sweep in between could drop entries that still
        // count at the (older) time of this decision.
        //
        // The shard's write lock makes the key's mutex unnecessary here:
        // batches, which lock keys one by one, hold the shard's read lock.
        if let Some(mut slot) = inner.map.get_mut(key) {
            let now = inner.clock.now_micros();
            return decide_key(slot.states.get_mut(), rules, now, cost);
        }
        if cost == 0 {
            let now = inner.clock.now_micros();
            return decide_key(&mut KeyStates::default(), rules, now, 0);
        }
        let mut slot = inner.insert_key(key)?;
        let now = inner.clock.now_micros();
        decide_key(slot.states.get_mut(), rules, now, cost)
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
                slot.states.get_mut().dry_run(rules, now, cost)
            }
            None => KeyStates::default().dry_run(rules, inner.clock.now_micros(), cost),
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
        // The first hit of each distinct key stands for the key.
        let key_of: Vec<usize> = hits
            .iter()
            .enumerate()
            .map(|(i, hit)| hits[..i].iter().position(|h| h.key == hit.key).unwrap_or(i))
            .collect();
        let consumes = |k: usize| {
            hits.iter()
                .zip(&key_of)
                .any(|(h, &of)| of == k && h.cost > 0)
        };
        loop {
            for (i, hit) in hits.iter().enumerate() {
                if key_of[i] == i && consumes(i) && !inner.map.contains_key(hit.key) {
                    drop(inner.insert_key(hit.key)?);
                }
            }
            // Hold every key's shard (read) lock so none is swept, then lock
            // the keys in address order so batches cannot deadlock.
            let mut slots = Vec::new();
            let mut swept_meanwhile = false;
            for (i, hit) in hits.iter().enumerate() {
                if key_of[i] != i {
                    continue;
                }
                match inner.map.get(hit.key) {
                    Some(slot) => slots.push((i, Some(slot))),
                    None if consumes(i) => swept_meanwhile = true,
                    None => slots.push((i, None)),
                }
            }
            if swept_meanwhile {
                continue;
            }
            slots
                .sort_by_key(|(_, slot)| slot.as_ref().map_or(0, |s| &**s as *const Slot as usize));
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
            let now = inner.clock.now_micros();
            let locked: Vec<LockedHit> = hits
                .iter()
                .zip(&key_of)
                .map(|(hit, &of)| LockedHit {
                    key: slots.iter().position(|(i, _)| *i == of).unwrap_or(0),
                    rule: hit.rule,
                    cost: hit.cost,
                })
                .collect();
            return decide_all(&mut states, &locked, now);
        }
    }

    /// Forgets `key` under every rule. Returns whether it was held.
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.inner.map.remove(key).is_some();
        if removed {
            self.inner.keys.fetch_sub(1, Ordering::Relaxed);
        }
        removed
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
        self.inner.keys.load(Ordering::Relaxed)
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
fn decide_key(states: &mut KeyStates, rules: &[Rule], now: u64, cost: u64) -> Result<Decision> {
    if let [rule] = rules {
        return Ok(states.decide_one(*rule, now, cost));
    }
    let hits: Vec<LockedHit> = rules
        .iter()
        .map(|&rule| LockedHit { key: 0, rule, cost })
        .collect();
    let decisions = decide_all(&mut [states], &hits, now)?;
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
            Err(Error::StoreFull { max_keys: 2 })
        );
        assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
        // Once key 2 is idle, the full store sweeps it to make room.
        clock.advance(Duration::from_millis(2000));
        assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
        assert!(s.acquire(&3, &[rule], 1).unwrap().allowed());
        assert_eq!(s.len(), 2);
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
