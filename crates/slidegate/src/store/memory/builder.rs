//! Configuring a memory store: its bounds, shards, sweeping and clock.

use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use compact_str::CompactString;

use super::bounds::Bounds;
use super::inner::Inner;
use super::leases::LeaseBook;
use super::map::Map;
use super::store::MemoryStore;
use super::sweep::spawn_sweeper;
use crate::clock::{Clock, MonotonicClock};
use crate::store::lease::DEFAULT_MAX_LEASES;

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C = MonotonicClock> {
    clock: C,
    max_keys: usize,
    max_bytes: usize,
    max_rules_per_key: usize,
    sweep_interval: Option<Duration>,
    /// `None`: [`default_shards`] for the machine and `max_keys`.
    shards: Option<usize>,
    max_leases: usize,
}

impl MemoryStore<CompactString, MonotonicClock> {
    /// A store with string keys (kept as [`CompactString`], inline up to
    /// 24 bytes) and the default settings.
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
            shards: None,
            max_leases: DEFAULT_MAX_LEASES,
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

/// The most shards a store has.
const MAX_SHARDS: usize = 1 << 16;

/// The most keys one sweep step (one shard's table, under its lock) holds
/// on average in a full store with the default shard count: a request for
/// a key of that shard waits for at most one such step (about 0.9 ms at a
/// million keys in BENCHMARKS.md's measure).
pub(crate) const SWEEP_STEP_KEYS: usize = 1 << 15;

/// The default shard count of a store of at most `max_keys` keys on a
/// machine running `parallelism` threads at once: four a thread (as
/// dashmap has), so that two threads seldom want the same lock, and at
/// least `max_keys / SWEEP_STEP_KEYS`, so that a sweep step stays short;
/// a power of two from 2 to 65,536.
///
/// Not more: a decision reads its shard's lock, rules and control bytes,
/// and with more shards than that those lines no longer stay in the L1
/// cache next to the keys' entries.
pub(crate) fn default_shards(parallelism: usize, max_keys: usize) -> usize {
    let for_threads = parallelism.saturating_mul(4);
    let for_sweep = max_keys.div_ceil(SWEEP_STEP_KEYS);
    for_threads
        .max(for_sweep)
        .clamp(2, MAX_SHARDS)
        .next_power_of_two()
}

impl Default for MemoryStore<CompactString, MonotonicClock> {
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
            max_leases: self.max_leases,
        }
    }

    /// The most keys held at once (default 1,000,000).
    ///
    /// When a new key arrives and the store is full, the store first sweeps
    /// idle keys (at most once per tenth of the sweep interval, so a flood
    /// of new keys does not turn into a flood of sweeps). If it is still
    /// full, the new key's request fails with [`Error::StoreFull`](crate::Error::StoreFull)
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
    /// heap bytes (the text of a string key longer than the 24 bytes a
    /// [`CompactString`] holds inline, by capacity: none for a shorter
    /// one), and the heap of its states
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
    /// that frees nothing, it fails with [`Error::StoreFull`](crate::Error::StoreFull)
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
    /// is idle the request fails with [`Error::TooManyRules`](crate::Error::TooManyRules), which is bad
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

    /// The most leases open at once
    /// ([`DEFAULT_MAX_LEASES`](crate::store::DEFAULT_MAX_LEASES) by
    /// default): one more is refused with
    /// [`Error::TooManyLeases`](crate::Error::TooManyLeases), nothing
    /// recorded. A lease stops counting once settled or expired. The
    /// records leases leave behind are counted in
    /// [`max_bytes`](Self::max_bytes) too.
    pub fn max_leases(mut self, max_leases: usize) -> Self {
        self.max_leases = max_leases;
        self
    }

    /// The number of map shards, rounded up to a power of two from 2 to
    /// 65,536.
    ///
    /// By default four per thread the machine runs at once
    /// ([`std::thread::available_parallelism`]), as dashmap's default, and
    /// at least one per 32,768 of [`max_keys`](Self::max_keys), rounded up
    /// to a power of two: 32 for the default million keys on up to eight
    /// threads, 64 on 16, 256 on 64.
    ///
    /// More shards make each sweep step lock fewer keys (a step holds one
    /// shard's lock while it looks at all its keys), and two threads less
    /// likely to want the same lock; fewer keep each shard's lock, rules
    /// and table control bytes in the L1 cache beside the keys' entries.
    /// At 10,000 keys a decision missed the L1 cache 2.1 times with 128
    /// shards, 1.35 times with 32 (see BENCHMARKS.md).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards.clamp(2, MAX_SHARDS).next_power_of_two());
        self
    }

    /// Builds the store. Keys can be any `Hash + Eq` type, looked up by
    /// what it implements [`StoredKey`](super::StoredKey) for (itself,
    /// for a `Clone` type; `str` for the default [`CompactString`]).
    pub fn build<K>(self) -> MemoryStore<K, C>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let gap = self
            .sweep_interval
            .unwrap_or(Duration::from_secs(1))
            .as_micros()
            / 10;
        let shards = self.shards.unwrap_or_else(|| {
            let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
            default_shards(parallelism, self.max_keys)
        });
        let inner = Arc::new(Inner {
            map: Map::new(shards),
            clock: self.clock,
            bounds: Bounds::new(self.max_keys, self.max_bytes, self.max_rules_per_key),
            next_forced_sweep: AtomicU64::new(0),
            forced_sweep_gap: u64::try_from(gap).unwrap_or(u64::MAX),
            sweeper: OnceLock::new(),
            leases: LeaseBook::new(self.max_leases),
            freed: tokio::sync::Notify::new(),
        });
        if let Some(interval) = self.sweep_interval {
            spawn_sweeper(&inner, interval);
        }
        MemoryStore { inner }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_four_shards_a_thread_as_a_power_of_two() {
        assert_eq!(default_shards(1, 1_000), 4);
        assert_eq!(default_shards(2, 10_000), 8);
        assert_eq!(default_shards(3, 10_000), 16);
        assert_eq!(default_shards(64, 1_000_000), 256);
        assert_eq!(default_shards(1 << 20, 1_000), MAX_SHARDS);
    }

    #[test]
    fn a_full_store_s_sweep_step_holds_at_most_sweep_step_keys_by_default() {
        assert_eq!(default_shards(2, 1_000_000), 32);
        for parallelism in [1, 2, 8, 64] {
            for max_keys in [1, 10_000, 1_000_000, 10_000_000, 1 << 30] {
                let shards = default_shards(parallelism, max_keys);
                assert!(shards.is_power_of_two());
                assert!(
                    max_keys.div_ceil(shards) <= SWEEP_STEP_KEYS,
                    "{max_keys} keys in {shards} shards ({parallelism} threads)"
                );
            }
        }
    }

    #[test]
    fn a_built_store_has_the_default_shards_for_its_machine_and_max_keys() {
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        for max_keys in [1_000, 1_000_000, 50_000_000] {
            let store: MemoryStore<u64> = MemoryStore::builder()
                .max_keys(max_keys)
                .sweep_interval(None)
                .build();
            assert_eq!(
                store.inner.map.shards(),
                default_shards(parallelism, max_keys),
                "{max_keys} keys"
            );
        }
        let store: MemoryStore<u64> = MemoryStore::builder()
            .shards(3)
            .sweep_interval(None)
            .build();
        assert_eq!(store.inner.map.shards(), 4, "an explicit count, rounded up");
    }
}
