//! The [`Store`] trait: what every store offers, and the behaviour a store
//! gets without writing it.

use std::future::Future;
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::changes::ChangeListener;
use super::hit::Hit;
use super::lease::{Lease, Settled};
use super::reserve::{BatchReservation, Reservation};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

/// What every store offers. All methods are atomic per call.
///
/// The futures are `Send`, so stores can be shared across tokio tasks
/// (wrap them in an `Arc`, or clone them: the stores of this crate are
/// cheap handles).
pub trait Store: Send + Sync {
    /// Decides one request of `cost` for `key` under every rule in `rules`:
    /// allowed only if every rule allows it; then recorded in all rules,
    /// otherwise in none. `cost` 0 consumes nothing and asks whether one more
    /// would pass, so it is denied on a full window (see [`peek`](Store::peek)).
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

    /// Tells `listener` of every [`Change`](super::changes::Change) made to this store's state
    /// elsewhere (by the other processes that share it), and for how long
    /// what it holds can be trusted (see [`changes`](super::changes)); returns `true`. A
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
    /// now (at most [`MAX_WAIT`](super::reserve::MAX_WAIT)): in one atomic call the admission is
    /// recorded at that time, and the caller proceeds once
    /// [`wait`](Reservation::wait) has passed, without a second call.
    /// Waiters are served in the order they reserved; a later request
    /// never passes ahead of one that waits. Beyond `max_wait` nothing is
    /// recorded and the decision is the denial [`acquire`](Store::acquire)
    /// gives. A granted reservation cannot be taken back: a caller that
    /// gives up waiting has still used its turn.
    ///
    /// By default, through [`reserve_batch`](Store::reserve_batch), one
    /// hit per rule: a store that cannot reserve (the default
    /// `reserve_batch`) decides at once, as `acquire` does.
    fn reserve(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Reservation>> + Send {
        async move {
            let hits: Vec<Hit<'_>> = rules
                .iter()
                .map(|&rule| Hit::new(key, rule, cost))
                .collect();
            Reservation::of_hits(self.reserve_batch(&hits, max_wait).await?)
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
        async move { Ok(BatchReservation::at_once(self.acquire_batch(hits).await?)) }
    }

    /// Like [`acquire`](Store::acquire), but when denied, waits until the
    /// request would pass, as long as the wait stays within `max_wait`.
    /// Returns allowed once its time comes, or the denial at once when
    /// passing would take longer than `max_wait` (without sleeping in
    /// vain). A store that [reserves](Store::reserve) (every store of this
    /// crate) is asked once: one reservation, then a sleep until its time,
    /// and no later caller passes ahead. A store that cannot reserve (the
    /// default `reserve_batch`) is asked again after each `retry_after`,
    /// and other callers may overtake.
    fn acquire_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Decision>> + Send {
        async move {
            let deadline = Instant::now() + max_wait;
            let mut max_wait = max_wait;
            loop {
                let reservation = self.reserve(key, rules, cost, max_wait).await?;
                let decision = reservation.decision();
                let left = deadline.saturating_duration_since(Instant::now());
                if !reservation.decided_at_once()
                    || decision.allowed()
                    || decision.retry_after() > left
                {
                    return Ok(reservation.wait_for_turn().await);
                }
                tokio::time::sleep(decision.retry_after()).await;
                max_wait = deadline.saturating_duration_since(Instant::now());
            }
        }
    }

    /// Reserves `cost` for `key` under every rule in `rules`, all or
    /// nothing, for `time` (see [`lease`](super::lease)): a *budget*
    /// under rules of a rate, an estimate that [`commit`](Store::commit)
    /// settles, or `cost` *places* under
    /// [concurrency](crate::Algorithm::Concurrency) rules, held until
    /// [`release`](Store::release)d. Granted, the lease has an id and its
    /// cost counts at once; denied, nothing is recorded and the decision
    /// says when to try again. Not settled within `time`, the lease
    /// expires: a budget is charged in full, places are freed.
    ///
    /// `time` runs from [`MIN_LEASE`](super::MIN_LEASE) to the shortest
    /// window of the rules; the rules take no options, and concurrency
    /// rules go in leases of their own ([`Error::InvalidLease`]). Beyond
    /// the store's `max_leases` open leases: [`Error::TooManyLeases`].
    /// A store that keeps no leases (the default): [`Error::Unsupported`].
    fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> impl Future<Output = Result<Lease>> + Send {
        let _ = (key, rules, cost, time);
        async { Err(Error::Unsupported("leases")) }
    }

    /// [`reserve_lease`](Store::reserve_lease), waiting up to `max_wait`
    /// (at most [`MAX_WAIT`](super::reserve::MAX_WAIT)) for the lease to
    /// fit: for places, until enough are released or expire, in the order
    /// the waiters came, so a later request never passes ahead of one that
    /// waits, whichever process it asks through. Returns the lease with
    /// [`waited`](Lease::waited), or the denial once passing would take
    /// longer than `max_wait`.
    ///
    /// By default, asks again: for places every few milliseconds (5 ms,
    /// doubling to 50 ms), since a release in any process frees one and no
    /// one is told; for a budget after each `retry_after`, giving up at
    /// once when that is beyond the wait. Other callers may then pass
    /// ahead. The memory store queues waiters for places; so does the
    /// Redis store, in Redis, for every process sharing it (a ticket per
    /// waiter, woken by the change feed on a release), and
    /// [`ResilientStore`](super::resilient::ResilientStore) waits as its
    /// store does.
    fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Lease>> + Send {
        wait_by_asking(self, key, rules, cost, time, max_wait)
    }

    /// Settles the lease `id`: the work cost `cost` (up to
    /// [`Rate::MAX_LIMIT`](crate::Rate::MAX_LIMIT)). What was reserved
    /// beyond it is given back; beyond what was reserved is taken as a
    /// report takes it, usage possibly passing the limit
    /// ([`Settled::over_limit`]). With `key`, the lease must be that key's.
    ///
    /// [`Error::LeaseNotFound`] for an id unknown or of another key (alike),
    /// [`Error::LeaseExpired`] once expired or settled (nothing changes),
    /// [`Error::NotCommittable`] for a lease of places.
    fn commit(
        &self,
        id: &str,
        key: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Settled>> + Send {
        let _ = (id, key, cost);
        async { Err(Error::Unsupported("leases")) }
    }

    /// Gives the whole lease `id` back: its budget, or its places. Errors
    /// as for [`commit`](Store::commit) (a lease of places is released).
    fn release(&self, id: &str, key: Option<&str>) -> impl Future<Output = Result<Settled>> + Send {
        let _ = (id, key);
        async { Err(Error::Unsupported("leases")) }
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

    fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> impl Future<Output = Result<Lease>> + Send {
        (**self).reserve_lease(key, rules, cost, time)
    }

    fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Lease>> + Send {
        (**self).reserve_lease_wait(key, rules, cost, time, max_wait)
    }

    fn commit(
        &self,
        id: &str,
        key: Option<&str>,
        cost: u64,
    ) -> impl Future<Output = Result<Settled>> + Send {
        (**self).commit(id, key, cost)
    }

    fn release(&self, id: &str, key: Option<&str>) -> impl Future<Output = Result<Settled>> + Send {
        (**self).release(id, key)
    }
}

/// [`Store::reserve_lease_wait`] by asking again: for places every few
/// milliseconds (5 ms, doubling to 50 ms), for a budget after each
/// `retry_after`, giving up at once when that is beyond the wait.
pub(crate) async fn wait_by_asking<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[Rule],
    cost: u64,
    time: Duration,
    max_wait: Duration,
) -> Result<Lease> {
    let started = Instant::now();
    let deadline = started + max_wait.min(super::reserve::MAX_WAIT);
    let places = rules
        .iter()
        .any(|r| r.algorithm() == crate::rate::Algorithm::Concurrency);
    let mut pause = Duration::from_millis(5);
    loop {
        let lease = store.reserve_lease(key, rules, cost, time).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let retry = lease.decision().retry_after();
        if lease.granted() || left.is_zero() || (!places && retry > left) {
            return Ok(lease.after_waiting(started.elapsed()));
        }
        let nap = if places { pause.min(retry) } else { retry };
        tokio::time::sleep(nap.clamp(Duration::from_millis(1), left)).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}
