//! The resilient store's handle: [`ResilientStore`], what it says of its
//! backend, and the [`Store`] trait: the deny cache first, then the
//! backend through [`Shared::call`], then the failure policy.

use std::fmt;
use std::sync::Arc;

use super::deny_cache::{Asked, DenyCache};
use super::policy::FailurePolicy;
use super::shared::{Call, Shared};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::changes::{Change, ChangeListener};
use crate::store::checks::{check_batch, check_cost, validate_keys};
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::key::validate_key;
use crate::store::lease::{Lease, Settled};
use crate::store::reserve::BatchReservation;

/// The answer of a lease call, or the error for a store that did not
/// answer (leases have no failure policy).
fn answered<T>(call: Call<T>) -> Result<T> {
    match call {
        Call::Answered(answer) => Ok(answer),
        Call::Failed => Err(Error::Store(
            "the store did not answer (failed, timed out or its circuit is open): a lease is never granted or settled without it".into(),
        )),
    }
}

/// See the [module documentation](super). Cheap to clone.
pub struct ResilientStore<S> {
    pub(super) shared: Arc<Shared<S>>,
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

impl<S: Store> ResilientStore<S> {
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

    /// Leases go to the store under its breakers and deadline, never to
    /// the deny cache or the failure policy: a lease granted by the
    /// policy could not be settled, so when the store cannot answer the
    /// reservation is an error ([`Error::Store`]), never a grant.
    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: std::time::Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        let shared = &*self.shared;
        answered(
            shared
                .call(shared.store.reserve_lease(key, rules, cost, time))
                .await?,
        )
    }

    /// Waits in the store's own way (on Redis, places in arrival order),
    /// within the deadline plus the wait. Not one of the bounded calls in
    /// flight, nor under the breakers: a waiter would hold a call for its
    /// whole wait. Each of the store's own calls is bounded by its timeout.
    async fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: std::time::Duration,
        max_wait: std::time::Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        let shared = &*self.shared;
        let waiting = shared
            .store
            .reserve_lease_wait(key, rules, cost, time, max_wait);
        let within = shared.timeout + max_wait.min(crate::store::reserve::MAX_WAIT);
        match tokio::time::timeout(within, waiting).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout(within)),
        }
    }

    /// A settlement through the breakers and the deadline; when the store
    /// cannot answer, an error: the lease stays as it was (open until its
    /// time runs out, then charged in full).
    async fn commit(&self, id: &str, key: Option<&str>, cost: u64) -> Result<Settled> {
        let shared = &*self.shared;
        answered(shared.call(shared.store.commit(id, key, cost)).await?)
    }

    /// See [`commit`](Self::commit).
    async fn release(&self, id: &str, key: Option<&str>) -> Result<Settled> {
        let shared = &*self.shared;
        answered(shared.call(shared.store.release(id, key)).await?)
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
