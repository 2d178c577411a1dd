//! A store that keeps answering when its backend does not.
//!
//! [`ResilientStore`] wraps any [`Store`] (typically the Redis store) with:
//!
//! - a **deadline** per call (`timeout`, default 50 ms): a stalled backend
//!   costs at most that much;
//! - a **circuit breaker**: after `failure_threshold` failures in a row no
//!   call is made at all; after a cool-down (200 ms, doubling to 1 s) one
//!   probe goes through, and the first success closes it again. A backend
//!   that is down is probed at least once a second, however long it was
//!   down, so decisions go back to it about a second after it returns. A
//!   probe whose caller leaves before its deadline gives its turn back (the
//!   next probe goes one cool-down later); one still unanswered at its
//!   deadline is a failure. On a Redis Cluster there is one breaker per
//!   master: a dead master degrades only the keys it serves
//!   ([`open_circuits`](ResilientStore::open_circuits) names them);
//! - a **bound on calls in flight** (`max_in_flight`, default 1024): a
//!   decision beyond it waits for a call to end, within its own deadline,
//!   and is answered by the policy if none ends in time;
//! - a **failure policy** for every decision the backend could not make:
//!   [`FailurePolicy::Deny`], [`FailurePolicy::Allow`], or
//!   [`FailurePolicy::Local`] (the default: an in-process store with the
//!   same rules, per instance). Such decisions say
//!   [`degraded`](crate::Decision::degraded);
//! - an exact **local deny cache** (on by default): once the backend denies
//!   a request with `retry_after = d`, the same key, rules and an equal or
//!   larger cost are denied locally for `d`, without a call. Batches use it
//!   too: a hit denied on its own counter is remembered, and a batch whose
//!   every hit is denied that way is answered without a call. A denial is
//!   held for `d` from when the request was sent, and the client told to
//!   wait `d` from when the answer came back: the cache never denies after
//!   the backend would admit, and never says to come back before the
//!   request can pass. A backend shared with other processes (Redis) tells
//!   the cache of their resets ([`Store::watch_changes`]): it drops what
//!   they touch as it hears of them, and answers nothing while it cannot
//!   hear them (see [`RedisStore`](crate::RedisStore)'s change feed for
//!   the bound). A denial is answered instead of the backend for at most
//!   [`deny_cache_max_age`](ResilientStoreBuilder::deny_cache_max_age)
//!   (default 10 s): the bound for changes no feed reports (a key deleted
//!   by hand). When the backend cannot be asked, its denials are answered
//!   until their wait ends, before the failure policy.
//!
//! Bad input (an invalid key, a cost above the limit) is an error as
//! always: no policy applies to it.
//!
//! ```
//! use slidegate::store::resilient::{FailurePolicy, ResilientStore};
//! use slidegate::{MemoryStore, Rule, Store};
//! # tokio_test_block(async {
//! let store = ResilientStore::builder(MemoryStore::new())
//!     .policy(FailurePolicy::Deny)
//!     .timeout(std::time::Duration::from_millis(20))
//!     .build();
//! let d = store.acquire("user:1", &[Rule::parse("10/s")?], 1).await?;
//! assert!(d.allowed() && !d.degraded());
//! # Ok::<(), slidegate::Error>(())
//! # });
//! # fn tokio_test_block<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use self::breaker::{Breaker, Settings};
use self::deny_cache::{Asked, DenyCache};
use self::gate::{Gate, Nodes};
use super::changes::{Change, ChangeListener};
use super::checks::{check_batch, check_cost, validate_keys};
use super::contract::Store;
use super::hit::Hit;
use super::key::validate_key;
use super::memory::MemoryStore;
use super::reserve::BatchReservation;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

/// The default of [`ResilientStoreBuilder::local_max_bytes`]: 256 MiB.
pub const DEFAULT_LOCAL_MAX_BYTES: usize = 256 << 20;

/// The default of [`ResilientStoreBuilder::deny_cache_max_age`]: 10 s.
pub const DEFAULT_DENY_CACHE_MAX_AGE: Duration = Duration::from_secs(10);

mod breaker;
mod deny_cache;
// Per-node circuits: only the Redis store has nodes.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod gate;

/// What to answer when the backend cannot decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Fail closed: deny.
    Deny,
    /// Fail open: allow.
    Allow,
    /// Decide with an in-process store holding the same rules (limits then
    /// hold per instance, not across instances).
    #[default]
    Local,
}

impl FromStr for FailurePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<FailurePolicy> {
        match s {
            "deny" => Ok(FailurePolicy::Deny),
            "allow" => Ok(FailurePolicy::Allow),
            "local" => Ok(FailurePolicy::Local),
            other => Err(Error::Config(format!(
                "unknown failure policy {other:?} (expected deny, allow or local)"
            ))),
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Deny => "deny",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Local => "local",
        })
    }
}

/// See the [module documentation](self). Cheap to clone.
pub struct ResilientStore<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for ResilientStore<S> {
    fn clone(&self) -> Self {
        ResilientStore {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for ResilientStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResilientStore")
            .field("policy", &self.shared.policy)
            .field("timeout", &self.shared.timeout)
            .field("circuit_open", &self.shared.breaker.is_open())
            .field("open_nodes", &self.shared.nodes.open())
            .finish_non_exhaustive()
    }
}

struct Shared<S> {
    store: S,
    policy: FailurePolicy,
    timeout: Duration,
    policy_retry_after: Duration,
    /// The breaker of the store as a whole: every store but a cluster.
    breaker: Arc<Breaker>,
    /// One breaker per node, for a store that names its nodes (see `gate`).
    nodes: Arc<Nodes>,
    in_flight: Semaphore,
    local: MemoryStore<String, Arc<dyn Clock>>,
    /// Shared with the backend's change feed, which holds it weakly.
    deny_cache: Option<Arc<DenyCache>>,
    clock: Arc<dyn Clock>,
}

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

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.shared.store
    }

    /// True while the circuit of the whole store, or of any of its nodes,
    /// is open: some decisions are made by the policy.
    pub fn is_degraded(&self) -> bool {
        self.shared.breaker.is_open() || !self.shared.nodes.open().is_empty()
    }

    /// The nodes (Redis Cluster masters, as `host:port`) whose circuit is
    /// open: keys they serve are decided by the policy, all others by the
    /// store. Empty for a store that is not a cluster (see
    /// [`is_degraded`](Self::is_degraded)).
    pub fn open_circuits(&self) -> Vec<String> {
        self.shared.nodes.open()
    }

    /// The failure policy.
    pub fn policy(&self) -> FailurePolicy {
        self.shared.policy
    }

    /// Denials held in the local deny cache.
    pub fn deny_cache_len(&self) -> usize {
        self.shared.deny_cache.as_deref().map_or(0, DenyCache::len)
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

/// How one backend call went.
enum Call<T> {
    Answered(T),
    Failed,
}

impl<S: Store> Shared<S> {
    /// Runs `call` under the breakers, the in-flight bound and the deadline.
    ///
    /// Every permit taken here or by the store (per node, see `gate`) is a
    /// guard: if this future is dropped, the permits settle themselves by
    /// the deadline (see `breaker`), so no probe is ever left pending.
    async fn call<T, F>(&self, call: F) -> Result<Call<T>>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.timeout;
        let Some(permit) = self.breaker.permit(deadline) else {
            return Ok(Call::Failed);
        };
        let deadline_tokio = tokio::time::Instant::from_std(deadline);
        // A burst beyond the bound waits its turn rather than being decided
        // by the policy while the backend is healthy; the wait counts
        // against the same deadline.
        let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline_tokio, self.in_flight.acquire()).await
        else {
            // Not the backend's fault: leave the breaker as it is, but let
            // a waiting probe go again.
            permit.release();
            return Ok(Call::Failed);
        };
        let gate = Gate::new(Arc::clone(&self.nodes), deadline);
        let result = tokio::time::timeout_at(deadline_tokio, gate.scope(call)).await;
        let failed = match &result {
            Ok(Ok(_)) => false,
            Ok(Err(error)) => error.is_store_failure(),
            Err(_) => true,
        };
        // A store that named its nodes settled their permits itself: as a
        // whole, it answered.
        if failed && !gate.by_node() {
            permit.failure();
        } else {
            permit.success();
        }
        match result {
            Ok(Ok(answer)) => Ok(Call::Answered(answer)),
            Ok(Err(error)) if error.is_store_failure() => {
                tracing::debug!(%error, "store call failed");
                Ok(Call::Failed)
            }
            // The backend answered; the request was bad.
            Ok(Err(error)) => Err(error),
            Err(_) => {
                tracing::debug!(timeout = ?self.timeout, "store call timed out");
                Ok(Call::Failed)
            }
        }
    }

    fn by_policy(&self, limit: u64) -> Decision {
        metrics::counter!("slidegate_policy_decisions_total", "policy" => self.policy.to_string())
            .increment(1);
        Decision::by_policy(
            self.policy == FailurePolicy::Allow,
            limit,
            self.policy_retry_after,
        )
    }

    async fn fallback(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        match self.policy {
            FailurePolicy::Local => {
                metrics::counter!("slidegate_policy_decisions_total", "policy" => "local")
                    .increment(1);
                match self.local.acquire(key, rules, cost) {
                    Ok(decision) => Ok(decision.into_degraded()),
                    Err(Error::StoreFull { .. }) => Ok(Decision::by_policy(
                        false,
                        min_limit(rules),
                        self.policy_retry_after,
                    )),
                    Err(other) => Err(other),
                }
            }
            _ => Ok(self.by_policy(min_limit(rules))),
        }
    }

    async fn fallback_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        match self.policy {
            FailurePolicy::Local => {
                metrics::counter!("slidegate_policy_decisions_total", "policy" => "local")
                    .increment(1);
                match self.local.acquire_batch(hits) {
                    Ok(decisions) => {
                        Ok(decisions.into_iter().map(Decision::into_degraded).collect())
                    }
                    Err(Error::StoreFull { .. }) => Ok(hits
                        .iter()
                        .map(|h| {
                            Decision::by_policy(false, h.rule.limit(), self.policy_retry_after)
                        })
                        .collect()),
                    Err(other) => Err(other),
                }
            }
            _ => Ok(hits
                .iter()
                .map(|h| self.by_policy(h.rule.limit()))
                .collect()),
        }
    }
}

fn min_limit(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::limit).min().unwrap_or(0)
}

/// The answer to a batch whose every hit has a denial in force (by
/// `lookup`): the store would deny each (a hit's counter alone already
/// refuses it), so the batch too. `None` as soon as one hit needs the store, and for a batch that
/// repeats a (key, rule): the store decides such hits on their summed
/// cost, with a `retry_after` a denial of one hit alone does not give.
fn cached_batch(
    hits: &[Hit<'_>],
    lookup: impl Fn(&Hit<'_>) -> Option<Decision>,
) -> Option<Vec<Decision>> {
    if hits
        .iter()
        .enumerate()
        .any(|(i, h)| shares_a_counter(hits, i, h))
    {
        return None;
    }
    hits.iter().map(lookup).collect()
}

/// True when another hit of `hits` than the `i`-th counts on `hit`'s counter.
fn shares_a_counter(hits: &[Hit<'_>], i: usize, hit: &Hit<'_>) -> bool {
    hits.iter()
        .enumerate()
        .any(|(j, other)| j != i && other.key == hit.key && other.rule.same_state(&hit.rule))
}

/// Remembers the denials of a batch's hits whose counter no other hit of
/// the batch touches: each was decided on its counter's state alone, as a
/// call of its own would have been.
fn remember_batch(
    cache: &DenyCache,
    hits: &[Hit<'_>],
    decisions: &[Decision],
    asked: Asked,
    answered: u64,
) {
    for (i, (hit, decision)) in hits.iter().zip(decisions).enumerate() {
        if !shares_a_counter(hits, i, hit) && !decision.allowed() {
            cache.insert(hit.key, &[hit.rule], hit.cost, asked, answered, *decision);
        }
    }
}

impl<S: Store> Store for ResilientStore<S> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        validate_key(key)?;
        check_cost(rules, cost)?;
        let shared = &*self.shared;
        let sent = shared.clock.now_micros();
        let asked = match &shared.deny_cache {
            Some(cache) => {
                if let Some(decision) = cache.lookup(key, rules, cost, sent) {
                    metrics::counter!("slidegate_deny_cache_hits_total").increment(1);
                    return Ok(decision);
                }
                Some(cache.ask(sent))
            }
            None => None,
        };
        match shared.call(shared.store.acquire(key, rules, cost)).await? {
            Call::Answered(decision) => {
                if let (Some(cache), Some(asked)) = (&shared.deny_cache, asked)
                    && !decision.allowed()
                {
                    let answered = shared.clock.now_micros();
                    cache.insert(key, rules, cost, asked, answered, decision);
                }
                Ok(decision)
            }
            Call::Failed => {
                // Nothing changes the store's state through a store that
                // cannot be asked: its last denial beats the policy.
                if let Some(cache) = &shared.deny_cache
                    && let Some(decision) =
                        cache.lookup_held(key, rules, cost, shared.clock.now_micros())
                {
                    metrics::counter!("slidegate_deny_cache_hits_total").increment(1);
                    return Ok(decision);
                }
                shared.fallback(key, rules, cost).await
            }
        }
    }

    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision>> {
        if let Err(error) = validate_key(key).and_then(|()| check_cost(rules, cost)) {
            return Some(Err(error));
        }
        let cache = self.shared.deny_cache.as_ref()?;
        let decision = cache.lookup(key, rules, cost, self.shared.clock.now_micros())?;
        metrics::counter!("slidegate_deny_cache_hits_total").increment(1);
        Some(Ok(decision))
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        validate_keys(hits)?;
        check_batch(hits)?;
        let shared = &*self.shared;
        let sent = shared.clock.now_micros();
        let asked = match &shared.deny_cache {
            Some(cache) => {
                if let Some(decisions) =
                    cached_batch(hits, |h| cache.lookup(h.key, &[h.rule], h.cost, sent))
                {
                    metrics::counter!("slidegate_deny_cache_hits_total").increment(1);
                    return Ok(decisions);
                }
                Some(cache.ask(sent))
            }
            None => None,
        };
        match shared.call(shared.store.acquire_batch(hits)).await? {
            Call::Answered(decisions) => {
                if let (Some(cache), Some(asked)) = (&shared.deny_cache, asked) {
                    let answered = shared.clock.now_micros();
                    remember_batch(cache, hits, &decisions, asked, answered);
                }
                Ok(decisions)
            }
            Call::Failed => {
                if let Some(cache) = &shared.deny_cache {
                    let now = shared.clock.now_micros();
                    if let Some(decisions) =
                        cached_batch(hits, |h| cache.lookup_held(h.key, &[h.rule], h.cost, now))
                    {
                        metrics::counter!("slidegate_deny_cache_hits_total").increment(1);
                        return Ok(decisions);
                    }
                }
                shared.fallback_batch(hits).await
            }
        }
    }

    /// Reserves through the store, never from the deny cache (a cached
    /// denial says nothing of when the request fits); by the failure
    /// policy, at once, when the store cannot answer.
    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: std::time::Duration,
    ) -> Result<BatchReservation> {
        validate_keys(hits)?;
        check_batch(hits)?;
        let shared = &*self.shared;
        match shared
            .call(shared.store.reserve_batch(hits, max_wait))
            .await?
        {
            Call::Answered(reserved) => Ok(reserved),
            Call::Failed => Ok(BatchReservation::new(
                shared.fallback_batch(hits).await?,
                None,
            )),
        }
    }

    async fn reset(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        let shared = &*self.shared;
        let forget = || {
            if let Some(cache) = &shared.deny_cache {
                // Also refuses the denials of calls already out.
                cache.changed(&Change::Key(key.to_owned()));
            }
        };
        forget();
        shared.local.reset(key);
        let result = match tokio::time::timeout(shared.timeout, shared.store.reset(key)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(shared.timeout)),
        };
        // Again once the store has reset the key: a call answered between
        // the first forget and the reset may have been remembered.
        forget();
        result
    }

    async fn ready(&self) -> Result<()> {
        let shared = &*self.shared;
        match tokio::time::timeout(shared.timeout, shared.store.ready()).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(shared.timeout)),
        }
    }

    fn watch_changes(&self, listener: std::sync::Weak<dyn ChangeListener>) -> bool {
        self.shared.store.watch_changes(listener)
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod tests;
