//! Configuring a resilient store: its deadline, breakers, failure policy
//! and deny cache.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::breaker::{Breaker, Settings};
use super::deny_cache::DenyCache;
use super::gate::Nodes;
use super::policy::FailurePolicy;
use super::shared::Shared;
use super::store::ResilientStore;
use crate::clock::{Clock, MonotonicClock};
use crate::store::changes::ChangeListener;
use crate::store::contract::Store;
use crate::store::memory::MemoryStore;

/// The default of [`ResilientStoreBuilder::local_max_bytes`]: 256 MiB.
pub const DEFAULT_LOCAL_MAX_BYTES: usize = 256 << 20;

/// The default of [`ResilientStoreBuilder::deny_cache_max_age`]: 10 s.
pub const DEFAULT_DENY_CACHE_MAX_AGE: Duration = Duration::from_secs(10);

/// Configures a [`ResilientStore`].
pub struct ResilientStoreBuilder<S> {
    store: S,
    policy: FailurePolicy,
    timeout: Duration,
    policy_retry_after: Duration,
    failure_threshold: u32,
    cooldown: (Duration, Duration),
    max_in_flight: usize,
    deny_cache: Option<usize>,
    deny_cache_max_age: Duration,
    local_max_keys: usize,
    local_max_bytes: usize,
    clock: Option<Arc<dyn Clock>>,
}

impl<S: Store> ResilientStore<S> {
    /// A builder wrapping `store`.
    pub fn builder(store: S) -> ResilientStoreBuilder<S> {
        ResilientStoreBuilder {
            store,
            policy: FailurePolicy::Local,
            timeout: Duration::from_millis(50),
            policy_retry_after: Duration::from_secs(1),
            failure_threshold: 5,
            cooldown: (Duration::from_millis(200), Duration::from_secs(1)),
            max_in_flight: 1024,
            deny_cache: Some(100_000),
            deny_cache_max_age: DEFAULT_DENY_CACHE_MAX_AGE,
            local_max_keys: 100_000,
            local_max_bytes: DEFAULT_LOCAL_MAX_BYTES,
            clock: None,
        }
    }
}

impl<S> fmt::Debug for ResilientStoreBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResilientStoreBuilder")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<S: Store> ResilientStoreBuilder<S> {
    /// The failure policy (default [`FailurePolicy::Local`]).
    pub fn policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The deadline of one backend call (default 50 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `retry_after` of a denial by [`FailurePolicy::Deny`] (default 1 s).
    pub fn policy_retry_after(mut self, retry_after: Duration) -> Self {
        self.policy_retry_after = retry_after;
        self
    }

    /// Failures in a row that open the circuit (default 5).
    pub fn failure_threshold(mut self, failures: u32) -> Self {
        self.failure_threshold = failures;
        self
    }

    /// The first and the longest cool-down of an open circuit (default
    /// 200 ms, doubling up to 1 s). The longest one bounds how long
    /// decisions stay with the policy after the backend is back.
    pub fn cooldown(mut self, first: Duration, longest: Duration) -> Self {
        self.cooldown = (first, longest);
        self
    }

    /// Most backend calls in flight at once (default 1024). A decision
    /// beyond them waits for one to end, and is decided by the policy if
    /// none ends before its deadline ([`timeout`](Self::timeout)).
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = calls.max(1);
        self
    }

    /// The local deny cache and its bound in entries (default on, 100,000);
    /// `None` turns it off.
    pub fn deny_cache(mut self, max_entries: Option<usize>) -> Self {
        self.deny_cache = max_entries;
        self
    }

    /// How long a cached denial is answered instead of the backend at
    /// most, whatever its `retry_after` (default
    /// [`DEFAULT_DENY_CACHE_MAX_AGE`], 10 s): the longest a change to the
    /// backend's state that no change feed reports (a key deleted by hand,
    /// writes lost in a failover) can go unseen by the cache. The client
    /// is still told the whole wait, and while the backend cannot be asked
    /// the denial is answered until that wait ends. Each key denied for
    /// longer costs one backend call per max age.
    pub fn deny_cache_max_age(mut self, max_age: Duration) -> Self {
        self.deny_cache_max_age = max_age;
        self
    }

    /// The bound of the local fallback store in keys (default 100,000).
    pub fn local_max_keys(mut self, keys: usize) -> Self {
        self.local_max_keys = keys;
        self
    }

    /// The bound of the local fallback store in bytes (default
    /// [`DEFAULT_LOCAL_MAX_BYTES`], 256 MiB), as
    /// [`MemoryStoreBuilder::max_bytes`](crate::MemoryStoreBuilder::max_bytes)
    /// counts them. A request the full local store cannot take is denied,
    /// as when it holds `local_max_keys` keys.
    pub fn local_max_bytes(mut self, bytes: usize) -> Self {
        self.local_max_bytes = bytes;
        self
    }

    /// The clock of the deny cache and of the local fallback store (a
    /// [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Builds the store.
    pub fn build(self) -> ResilientStore<S> {
        let clock: Arc<dyn Clock> = self
            .clock
            .unwrap_or_else(|| Arc::new(MonotonicClock::new()));
        let deny_cache = self.deny_cache.map(|entries| {
            let cache = Arc::new(DenyCache::new(
                entries,
                self.deny_cache_max_age,
                Arc::clone(&clock),
            ));
            // Distrusted before the feed is asked for: it may vouch at once.
            cache.watched();
            let listener: Arc<dyn ChangeListener> = Arc::clone(&cache) as _;
            if !self.store.watch_changes(Arc::downgrade(&listener)) {
                cache.unwatched();
            }
            cache
        });
        let settings = Settings {
            threshold: self.failure_threshold,
            min_cooldown: self.cooldown.0,
            max_cooldown: self.cooldown.1,
        };
        ResilientStore {
            shared: Arc::new(Shared {
                store: self.store,
                policy: self.policy,
                timeout: self.timeout,
                policy_retry_after: self.policy_retry_after,
                breaker: Arc::new(Breaker::new("store", settings)),
                nodes: Arc::new(Nodes::new(settings)),
                in_flight: Semaphore::new(self.max_in_flight),
                local: MemoryStore::builder()
                    .clock(Arc::clone(&clock))
                    .max_keys(self.local_max_keys)
                    .max_bytes(self.local_max_bytes)
                    .build(),
                deny_cache,
                clock,
            }),
        }
    }
}
