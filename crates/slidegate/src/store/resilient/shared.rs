//! What every clone of a resilient store shares, and how it calls its
//! backend: under the circuit breakers, the bound on calls in flight and
//! the deadline, with the failure policy's answer when the call fails.

use crate::store::memory::CompactString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::breaker::Breaker;
use super::deny_cache::DenyCache;
use super::gate::{Gate, Nodes};
use super::policy::FailurePolicy;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::memory::MemoryStore;

/// What every clone of a [`ResilientStore`](super::ResilientStore) shares.
pub(super) struct Shared<S> {
    pub(super) store: S,
    pub(super) policy: FailurePolicy,
    pub(super) timeout: Duration,
    pub(super) policy_retry_after: Duration,
    /// The breaker of the store as a whole: every store but a cluster.
    pub(super) breaker: Arc<Breaker>,
    /// One breaker per node, for a store that names its nodes (see `gate`).
    pub(super) nodes: Arc<Nodes>,
    pub(super) in_flight: Semaphore,
    pub(super) local: MemoryStore<CompactString, Arc<dyn Clock>>,
    /// Shared with the backend's change feed, which holds it weakly.
    pub(super) deny_cache: Option<Arc<DenyCache>>,
    pub(super) clock: Arc<dyn Clock>,
}

/// How one backend call went.
pub(super) enum Call<T> {
    Answered(T),
    Failed,
}

impl<S: Store> Shared<S> {
    /// Runs `call` under the breakers, the in-flight bound and the deadline.
    ///
    /// Every permit taken here or by the store (per node, see `gate`) is a
    /// guard: if this future is dropped, the permits settle themselves by
    /// the deadline (see `breaker`), so no probe is ever left pending.
    pub(super) async fn call<T, F>(&self, call: F) -> Result<Call<T>>
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

    /// The failure policy's answer to a decision the backend could not
    /// make.
    pub(super) async fn fallback(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
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

    /// [`fallback`](Self::fallback) for a batch.
    pub(super) async fn fallback_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
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

/// The smallest limit of `rules` (what a policy's answer reports).
fn min_limit(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::limit).min().unwrap_or(0)
}
