//! The memory store's leases (see `store::lease`): taken under the key's
//! shard lock like any decision, filed in the store's [`LeaseBook`],
//! settled under the key's shard lock again.
//!
//! [`LeaseBook`]: super::leases::LeaseBook

use std::hash::Hash;
use std::time::{Duration, Instant};

use super::batch::{Locked, LockedHit};
use super::bounds::Bounds;
use super::inner::BatchKeys;
use super::lease_steps::{Part, Queue, Taken, leave_queue, settle, take_budget, take_places};
use super::leases::{LeaseId, Record};
use super::store::MemoryStore;
use super::stored_key::StoredKey;
use crate::clock::Clock;
use crate::decision::{Decision, micros};
use crate::error::{Error, Result};
use crate::rate::{Rate, Rule};
use crate::store::hit::Hit;
use crate::store::lease::{
    Lease, LeaseKind, Settled, check_lease, hex, parse_hex, random_id, retention,
};
use crate::store::reserve::MAX_WAIT;

impl<K, C> MemoryStore<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Reserves a lease of `cost` for `key` under `rules` for `time`: see
    /// [`Store::reserve_lease`](crate::Store::reserve_lease).
    ///
    /// ```
    /// use slidegate::{MemoryStore, Rule};
    /// use std::time::Duration;
    /// let store = MemoryStore::new();
    /// let tokens = Rule::parse("5000/1m")?;
    /// let lease = store.reserve_lease("team:7", &[tokens], 1_000, Duration::from_secs(30))?;
    /// assert_eq!(lease.decision().remaining(), 4_000);
    /// // The call cost 200 tokens: 800 come back.
    /// let settled = store.commit(lease.id().unwrap(), Some("team:7"), 200)?;
    /// assert_eq!(settled.decision().remaining(), 4_800);
    /// # Ok::<(), slidegate::Error>(())
    /// ```
    pub fn reserve_lease<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> Result<Lease>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let kind = check_lease(rules, cost, time)?;
        self.lease_attempt(key, rules, cost, time, kind, None)
    }

    /// [`reserve_lease`](Self::reserve_lease), waiting up to `max_wait`
    /// for the lease to fit: see
    /// [`Store::reserve_lease_wait`](crate::Store::reserve_lease_wait).
    /// Waiters for places are served in the order they came; one that
    /// gives up (or whose future is dropped) leaves the queue at once.
    pub async fn reserve_lease_wait<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> Result<Lease>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + Sync + ?Sized,
    {
        let kind = check_lease(rules, cost, time)?;
        let started = Instant::now();
        let max_wait = max_wait.min(MAX_WAIT);
        let inner = &*self.inner;
        let ticket = match kind {
            LeaseKind::Places => Some(u64::from_le_bytes(
                random_id()?[..8].try_into().unwrap_or_default(),
            )),
            LeaseKind::Budget => None,
        };
        let deadline = inner.clock.now_micros() + micros(max_wait);
        let mut queued = ticket.map(|ticket| Waiting {
            store: self.clone(),
            key: K::from_lookup(key),
            rules: rules.to_vec(),
            ticket,
            armed: false,
        });
        loop {
            let freed = inner.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            let queue = ticket.map(|ticket| Queue { ticket, deadline });
            let lease = self.lease_attempt(key, rules, cost, time, kind, queue)?;
            // Waits in real time; the queue's deadline is on the store's clock.
            let left = max_wait.saturating_sub(started.elapsed());
            if let Some(waiting) = &mut queued {
                // Granted, it left the queue; denied, it is in it.
                waiting.armed = !lease.granted();
            }
            let retry = lease.decision().retry_after();
            // A budget passes no sooner than its retry_after says; places
            // may be released any time, which wakes the waiters.
            if lease.granted() || left.is_zero() || (ticket.is_none() && retry > left) {
                return Ok(lease.after_waiting(started.elapsed()));
            }
            let nap = retry.clamp(Duration::from_millis(1), left);
            if ticket.is_some() {
                let _ = tokio::time::timeout(nap, freed).await;
            } else {
                tokio::time::sleep(nap).await;
            }
        }
    }

    /// Settles the lease `id` with the cost its work took: see
    /// [`Store::commit`](crate::Store::commit).
    pub fn commit<Q>(&self, id: &str, key: Option<&Q>, cost: u64) -> Result<Settled>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if cost > Rate::MAX_LIMIT {
            return Err(Error::CostExceedsLimit {
                cost,
                limit: Rate::MAX_LIMIT,
            });
        }
        self.settle_lease(id, key, Some(cost))
    }

    /// Gives the whole lease `id` back: see
    /// [`Store::release`](crate::Store::release).
    pub fn release<Q>(&self, id: &str, key: Option<&Q>) -> Result<Settled>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.settle_lease(id, key, None)
    }

    /// Leases open now, as counted against `max_leases` (leases whose time
    /// ran out count until their shard of the book is next purged).
    pub fn open_leases(&self) -> usize {
        self.inner.leases.open_count()
    }

    /// One try at a lease: counted against `max_leases` and its record's
    /// bytes charged first, given back unless granted.
    fn lease_attempt<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        kind: LeaseKind,
        queue: Option<Queue>,
    ) -> Result<Lease>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let inner = &*self.inner;
        let id: LeaseId = random_id()?;
        inner
            .leases
            .open_one(inner.clock.now_micros(), &inner.bounds)?;
        let bytes = Record::<K>::bytes_for(K::held_bytes(key), rules.len());
        if let Err(full) = inner.bounds.try_charge(bytes) {
            inner.leases.unopen_one();
            return Err(full);
        }
        let given_back = || {
            inner.leases.unopen_one();
            inner.bounds.credit(bytes);
        };
        let (taken, now) = match self.take(key, rules, cost, time, kind, queue) {
            Ok(taken) => taken,
            Err(error) => {
                given_back();
                return Err(error);
            }
        };
        let decision = Decision::combine(&taken.decisions).ok_or(Error::NoRules)?;
        let Some(marks) = taken.marks else {
            given_back();
            return Ok(Lease::new(None, decision, time));
        };
        let expires = now + micros(time);
        let record = Record::new(
            K::from_lookup(key),
            K::held_bytes(key),
            kind,
            cost,
            rules.iter().copied().zip(marks).collect(),
            expires,
            expires.saturating_add(retention(rules, time)),
        );
        inner.leases.insert(id, record, now, &inner.bounds);
        Ok(Lease::new(Some(hex(&id)), decision, time))
    }

    /// Takes the lease's budget or places under the locks of its key's
    /// shard: what each hit got, and the time it was decided at.
    fn take<Q>(
        &self,
        key: &Q,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        kind: LeaseKind,
        queue: Option<Queue>,
    ) -> Result<(Taken, u64)>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hits: Vec<Hit<'_, Q>> = rules.iter().map(|&rule| Hit { key, rule, cost }).collect();
        let index = BatchKeys::new(&hits);
        let time = micros(time);
        let step = |keys: &mut Locked<'_, '_>, locked: &[LockedHit], now, bounds: &Bounds| {
            let taken = match kind {
                LeaseKind::Budget => take_budget(keys, locked, now, bounds)?,
                LeaseKind::Places => take_places(keys, locked, now, now + time, queue, bounds)?,
            };
            Ok((taken, now))
        };
        let inner = &*self.inner;
        match inner.acquire_batch(&hits, &index, step) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire_batch(&hits, &index, step))
            }
            answer => answer,
        }
    }

    /// Commits (`used` the cost) or releases (`None`) the lease `id`.
    fn settle_lease<Q>(&self, id: &str, key: Option<&Q>, used: Option<u64>) -> Result<Settled>
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(id) = parse_hex::<16>(id) else {
            return Err(Error::LeaseNotFound);
        };
        let inner = &*self.inner;
        let now = inner.clock.now_micros();
        let commits = used.is_some();
        let record = inner.leases.close(&id, key, now, &inner.bounds, |record| {
            (commits && record.kind == LeaseKind::Places).then_some(Error::NotCommittable)
        })?;
        let used = used.unwrap_or(0);
        let extra = used.saturating_sub(record.cost);
        // The stored key stands for the caller's: it hashes alike.
        let lease_key: &K = &record.key;
        let hits: Vec<Hit<'_, K>> = record
            .parts
            .iter()
            .map(|&(rule, _)| Hit {
                key: lease_key,
                rule,
                cost: extra,
            })
            .collect();
        let parts: Vec<Part> = record
            .parts
            .iter()
            .map(|&(rule, mark)| Part { rule, mark })
            .collect();
        let index = BatchKeys::new(&hits);
        let step = |keys: &mut Locked<'_, '_>, _: &[LockedHit], now, bounds: &Bounds| {
            settle(keys, &parts, now, record.cost, used, bounds)
        };
        let (over_limit, state) = match inner.acquire_batch::<K, _>(&hits, &index, step) {
            Err(full @ Error::StoreFull { .. }) => {
                inner.after_sweep(full, || inner.acquire_batch::<K, _>(&hits, &index, step))
            }
            answer => answer,
        }?;
        if record.kind == LeaseKind::Places {
            inner.freed.notify_waiters();
        }
        let decision = Decision::combine(&state).ok_or(Error::NoRules)?;
        let rules = record
            .parts
            .iter()
            .map(|&(rule, _)| rule)
            .zip(state)
            .collect();
        Ok(Settled::new(over_limit, decision).with_rules(rules))
    }

    /// Takes `ticket` out of the queues of `key`'s concurrency `rules`.
    fn leave_queue<Q>(&self, key: &Q, rules: &[Rule], ticket: u64)
    where
        K: StoredKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hits: Vec<Hit<'_, Q>> = rules
            .iter()
            .map(|&rule| Hit { key, rule, cost: 0 })
            .collect();
        let index = BatchKeys::new(&hits);
        let step = |keys: &mut Locked<'_, '_>, locked: &[LockedHit], _, _: &Bounds| {
            leave_queue(keys, locked, ticket);
            Ok(())
        };
        let _ = self.inner.acquire_batch(&hits, &index, step);
        // Those behind it may pass now.
        self.inner.freed.notify_waiters();
    }
}

/// A waiter's place in the queues of its key: left when dropped armed
/// (the waiter gave up, or its future was dropped).
struct Waiting<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> {
    store: MemoryStore<K, C>,
    key: K,
    rules: Vec<Rule>,
    ticket: u64,
    armed: bool,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> Drop for Waiting<K, C> {
    fn drop(&mut self) {
        if self.armed {
            self.store
                .leave_queue::<K>(&self.key, &self.rules, self.ticket);
        }
    }
}
