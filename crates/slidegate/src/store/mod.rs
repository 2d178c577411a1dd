//! Stores keep the state of every (key, rule) and apply the algorithms to it.
//!
//! [`MemoryStore`](memory::MemoryStore) keeps it in this process; the Redis
//! store (feature `redis`) keeps it in Redis, shared by every process that
//! uses the same Redis. Both obey the same contract, decision by decision.

use std::future::Future;
use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

pub use changes::{Change, ChangeListener};
pub use key::{MAX_KEY_LEN, fit_key, hash_tag, key_digest, slot_key, validate_key};
pub use reserve::{BatchReservation, MAX_WAIT, Reservation};

pub mod changes;
pub mod key;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
pub mod reserve;
pub mod resilient;

/// One part of an atomic batch: `cost` units of `rule` for `key`.
///
/// A batch passes only if every hit passes; then all are recorded,
/// otherwise none. A cost of 0 checks without consuming.
#[derive(Debug, PartialEq, Eq)]
pub struct Hit<'a, Q: ?Sized = str> {
    /// The key the rule applies to (`"login:10.0.0.1"`).
    pub key: &'a Q,
    /// The rule.
    pub rule: Rule,
    /// The cost: 1 for one request, 0 to check without consuming.
    pub cost: u64,
}

// By hand: derived impls would ask `Q: Copy`, which `str` is not.
impl<Q: ?Sized> Clone for Hit<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q: ?Sized> Copy for Hit<'_, Q> {}

impl<'a, Q: ?Sized> Hit<'a, Q> {
    /// A hit of `cost` units of `rule` for `key`.
    pub fn new(key: &'a Q, rule: Rule, cost: u64) -> Self {
        Hit { key, rule, cost }
    }
}

/// What every store offers. All methods are atomic per call.
///
/// The futures are `Send`, so stores can be shared across tokio tasks
/// (wrap them in an `Arc`, or clone them: the stores of this crate are
/// cheap handles).
pub trait Store: Send + Sync {
    /// Decides one request of `cost` for `key` under every rule in `rules`:
    /// allowed only if every rule allows it; then recorded in all rules,
    /// otherwise in none. `cost` 0 checks without consuming (see [`peek`](Store::peek)).
    fn acquire(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> impl Future<Output = Result<Decision>> + Send;

    /// Decides several hits, possibly on different keys, all-or-nothing.
    /// Returns one decision per hit, in order.
    fn acquire_batch(&self, hits: &[Hit<'_>])
    -> impl Future<Output = Result<Vec<Decision>>> + Send;

    /// Forgets every rule's state for `key`.
    fn reset(&self, key: &str) -> impl Future<Output = Result<()>> + Send;

    /// Answers whether the store can take decisions now.
    fn ready(&self) -> impl Future<Output = Result<()>> + Send;

    /// Tells `listener` of every [`Change`] made to this store's state
    /// elsewhere (by the other processes that share it), and for how long
    /// what it holds can be trusted (see [`changes`]); returns `true`. A
    /// store whose state changes only through this handle has nothing to
    /// tell: `false`, the default.
    ///
    /// A store that wraps another must forward this call: otherwise the
    /// caches of its decisions never hear of other processes' changes.
    fn watch_changes(&self, listener: Weak<dyn ChangeListener>) -> bool {
        let _ = listener;
        false
    }

    /// Decides at once, without waiting, when the store can (an in-process
    /// store, or a cached denial): `None` when the decision needs I/O, and
    /// [`acquire`](Store::acquire) must be awaited. Lets a caller such as a
    /// tower service skip creating a future on the fast path. Same contract
    /// as `acquire` when `Some`.
    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision>> {
        let _ = (key, rules, cost);
        None
    }

    /// The state of `key` under `rules` without consuming: would a request
    /// of cost 1 pass, and what remains.
    fn peek(&self, key: &str, rules: &[Rule]) -> impl Future<Output = Result<Decision>> + Send {
        self.acquire(key, rules, 0)
    }

    /// Reserves the earliest time at which a request of `cost` for `key`
    /// passes every rule in `rules`, if that is at most `max_wait` from
    /// now (at most [`MAX_WAIT`]): in one atomic call the admission is
    /// recorded at that time, and the caller proceeds once
    /// [`wait`](Reservation::wait) has passed, without a second call.
    /// Waiters are served in the order they reserved; a later request
    /// never passes ahead of one that waits. Beyond `max_wait` nothing is
    /// recorded and the decision is the denial [`acquire`](Store::acquire)
    /// gives. A granted reservation cannot be taken back: a caller that
    /// gives up waiting has still used its turn.
    ///
    /// A store that cannot reserve (the default) decides at once, as
    /// `acquire` does.
    fn reserve(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Reservation>> + Send {
        let _ = max_wait;
        async move {
            Ok(Reservation::new(
                self.acquire(key, rules, cost).await?,
                None,
            ))
        }
    }

    /// [`reserve`](Store::reserve) for several hits, possibly on different
    /// keys, all-or-nothing, at one time for all of them. A store that
    /// cannot reserve (the default) decides at once, as
    /// [`acquire_batch`](Store::acquire_batch) does.
    fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> impl Future<Output = Result<BatchReservation>> + Send {
        let _ = max_wait;
        async move { Ok(BatchReservation::new(self.acquire_batch(hits).await?, None)) }
    }

    /// Like [`acquire`](Store::acquire), but when denied, waits until the
    /// request would pass, as long as the wait stays within `max_wait`.
    /// Returns allowed once its time comes, or the denial at once when
    /// passing would take longer than `max_wait` (without sleeping in
    /// vain). Stores that [reserve](Store::reserve) (the memory store) take
    /// one reservation and sleep; the default asks again after each
    /// `retry_after`, which other callers may overtake.
    fn acquire_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Decision>> + Send {
        async move {
            let deadline = Instant::now() + max_wait;
            loop {
                let decision = self.acquire(key, rules, cost).await?;
                let left = deadline.saturating_duration_since(Instant::now());
                if decision.allowed() || decision.retry_after() > left {
                    return Ok(decision);
                }
                tokio::time::sleep(decision.retry_after()).await;
            }
        }
    }
}

impl<S: Store> Store for std::sync::Arc<S> {
    fn acquire(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> impl Future<Output = Result<Decision>> + Send {
        (**self).acquire(key, rules, cost)
    }

    fn acquire_batch(
        &self,
        hits: &[Hit<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>>> + Send {
        (**self).acquire_batch(hits)
    }

    fn reset(&self, key: &str) -> impl Future<Output = Result<()>> + Send {
        (**self).reset(key)
    }

    fn ready(&self) -> impl Future<Output = Result<()>> + Send {
        (**self).ready()
    }

    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision>> {
        (**self).acquire_now(key, rules, cost)
    }

    fn watch_changes(&self, listener: Weak<dyn ChangeListener>) -> bool {
        (**self).watch_changes(listener)
    }

    fn reserve(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Reservation>> + Send {
        (**self).reserve(key, rules, cost, max_wait)
    }

    fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> impl Future<Output = Result<BatchReservation>> + Send {
        (**self).reserve_batch(hits, max_wait)
    }

    fn acquire_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Decision>> + Send {
        (**self).acquire_wait(key, rules, cost, max_wait)
    }
}

/// Checks that `cost` can ever pass every rule, and that there is a rule.
/// A rule that [reports](Rule::reporting) takes any cost up to
/// [`Rate::MAX_LIMIT`](crate::Rate::MAX_LIMIT): reported usage may exceed
/// the limit.
pub(crate) fn check_cost(rules: &[Rule], cost: u64) -> Result<()> {
    if rules.is_empty() {
        return Err(Error::NoRules);
    }
    for rule in rules {
        if cost > rule.max_cost() {
            return Err(Error::CostExceedsLimit {
                cost,
                limit: rule.max_cost(),
            });
        }
    }
    Ok(())
}

/// Refuses a reservation of a rule that reports usage.
pub(crate) fn check_waits(rules: impl IntoIterator<Item = Rule>) -> Result<()> {
    if rules.into_iter().any(|rule| rule.reports()) {
        return Err(Error::ReportCannotWait);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_above_the_smallest_limit_is_an_error() {
        let rules = [Rule::parse("10/s").unwrap(), Rule::parse("3/s").unwrap()];
        assert!(check_cost(&rules, 3).is_ok());
        assert_eq!(
            check_cost(&rules, 4),
            Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
        );
        assert_eq!(check_cost(&[], 1), Err(Error::NoRules));
        let reporting = [Rule::parse("100/1m").unwrap().reporting()];
        assert!(
            check_cost(&reporting, 150).is_ok(),
            "usage may exceed the limit"
        );
        assert!(matches!(
            check_cost(&reporting, crate::Rate::MAX_LIMIT + 1),
            Err(Error::CostExceedsLimit { .. })
        ));
    }
}
