//! The Redis store's handle: [`RedisStore`], its own API, and the
//! [`Store`] trait on top of what its clones share (`inner.rs`). The
//! `redis` module's documentation says how the store works.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::cross_slot;
use super::errors::describe;
use super::inner::{Connection, Inner};
use super::keys::{self, is_state_of, scan_pattern, slot_of};
use super::leases;
use super::plan::Plan;
use super::topology::Topology;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::changes::{Change, ChangeListener};
use crate::store::checks::{check_batch, check_cost, check_waits, validate_keys};
use crate::store::contract::{Store, wait_by_asking};
use crate::store::hit::Hit;
use crate::store::key::validate_key;
use crate::store::lease::{Lease, Settled, check_lease};
use crate::store::reserve::{BatchReservation, wait_micros};

/// Keys asked for per SCAN round trip in [`RedisStore::reset`].
const SCAN_COUNT: usize = 1000;

/// The Redis store. Cheap to clone: clones share the connection.
///
/// ```no_run
/// # async fn run() -> slidegate::Result<()> {
/// use slidegate::{RedisStore, Rule, Store};
/// let store = RedisStore::builder("redis://127.0.0.1:6379").build().await?;
/// let decision = store.acquire("login:10.0.0.1", &[Rule::parse("100/1m")?], 1).await?;
/// println!("allowed: {}, remaining: {}", decision.allowed(), decision.remaining());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.is_cluster())
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .field(
                "clock",
                &if self.inner.calls.clock.is_some() {
                    "client"
                } else {
                    "server"
                },
            )
            .field("coalesce", &self.inner.calls.coalesce)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.connection, Connection::Cluster(_))
    }

    /// True when the master is found through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.inner.connection, Connection::Sentinel(_))
    }

    /// Decisions waiting for a script call to take them, on every node
    /// (see [`Coalesce`](super::calls::Coalesce)). Each waits within the store's deadline at most:
    /// 0 soon after the load stops.
    pub fn waiting(&self) -> usize {
        self.inner.lanes().iter().map(|lane| lane.waiting()).sum()
    }

    /// Coalesced script calls being sent or awaiting their answer, on every
    /// node: at most [`Coalesce::max_in_flight`](super::calls::Coalesce::max_in_flight) per node, and 0 soon after
    /// the load stops.
    pub fn calls_in_flight(&self) -> usize {
        self.inner.lanes().iter().map(|lane| lane.senders()).sum()
    }

    /// The Redis key that holds `rule`'s state for `key` (for diagnostics
    /// and tests: `slidegate:v2:{login:10.0.0.1}:100/1m`).
    pub fn state_key(&self, key: &str, rule: Rule) -> String {
        keys::state_key(&self.inner.prefix, key, rule)
    }

    /// Tells the deny cache of every process that uses this Redis with
    /// this prefix that `change` happened (after it is made: a cache that
    /// hears of it asks Redis again). [`reset`](Store::reset) publishes its
    /// key itself; code that changes state in other ways (a limit changed
    /// at run time) publishes here. Fails when Redis does not take the
    /// message: the caches may then hold what the change touches for up to
    /// their maximum age.
    pub async fn publish_change(&self, change: &Change) -> Result<()> {
        self.inner.publish(change).await
    }
}

impl Store for RedisStore {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        validate_key(key)?;
        check_cost(rules, cost)?;
        let plan = Plan::new(&self.inner.prefix, rules.iter().map(|&r| (key, r, cost)))?;
        let decisions = self
            .inner
            .run(&plan, None, |plan, reply| plan.decisions(reply))
            .await?;
        Decision::combine(&decisions).ok_or(Error::NoRules)
    }

    /// Decides `hits` all-or-nothing. On a cluster, hits whose keys live in
    /// several slots are decided slot by slot, and undone where recorded
    /// when another slot denies or fails (see the module documentation).
    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        validate_keys(hits)?;
        check_batch(hits)?;
        let plan = Plan::new(
            &self.inner.prefix,
            hits.iter().map(|h| (h.key, h.rule, h.cost)),
        )?;
        if self.is_cluster() {
            let first = slot_of(hits[0].key);
            if hits.iter().any(|h| slot_of(h.key) != first) {
                return cross_slot::decide(&self.inner, hits).await;
            }
        }
        Ok(self
            .inner
            .run(&plan, None, |plan, reply| plan.decisions(reply))
            .await?
            .into_vec())
    }

    /// Reserves `hits` in one script call (see [`Store::reserve_batch`]).
    /// On a cluster, hits whose keys live in several slots cannot be
    /// reserved in one call: they are decided at once, as
    /// [`acquire_batch`](Store::acquire_batch) decides them.
    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> Result<BatchReservation> {
        validate_keys(hits)?;
        check_batch(hits)?;
        check_waits(hits.iter().map(|hit| hit.rule))?;
        if self.is_cluster() {
            let first = slot_of(hits[0].key);
            if hits.iter().any(|h| slot_of(h.key) != first) {
                let decisions = cross_slot::decide(&self.inner, hits).await?;
                return Ok(BatchReservation::new(decisions, None));
            }
        }
        let plan = Plan::new(
            &self.inner.prefix,
            hits.iter().map(|h| (h.key, h.rule, h.cost)),
        )?
        .reserving(wait_micros(max_wait));
        let (decisions, wait) = self
            .inner
            .run(&plan, None, |plan, reply| plan.reservation(reply))
            .await?;
        Ok(BatchReservation::new(decisions.into_vec(), wait))
    }

    /// Reserves a lease in one script call (see `leases.rs`).
    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        leases::reserve(&self.inner, key, rules, cost, time).await
    }

    /// Places in arrival order across every process sharing the Redis
    /// (a queue per key in Redis, woken by the change feed: see
    /// `turns.rs`); a budget by asking again.
    async fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> Result<Lease> {
        validate_key(key)?;
        let places = rules
            .first()
            .is_some_and(|rule| rule.algorithm() == crate::rate::Algorithm::Concurrency);
        if !places || cost != 1 || max_wait.is_zero() {
            return wait_by_asking(self, key, rules, cost, time, max_wait).await;
        }
        check_lease(rules, cost, time)?;
        leases::reserve_in_turn(&self.inner, key, rules, time, max_wait).await
    }

    async fn commit(&self, id: &str, key: Option<&str>, cost: u64) -> Result<Settled> {
        leases::settle(&self.inner, id, key, Some(cost)).await
    }

    async fn release(&self, id: &str, key: Option<&str>) -> Result<Settled> {
        leases::settle(&self.inner, id, key, None).await
    }

    /// Deletes every rule's state of `key`, then tells the deny cache of
    /// every process (see [`publish_change`](Self::publish_change)); an
    /// error when either fails (a reset can be repeated). The Redis user
    /// needs `PUBLISH` on the channel (`&PREFIX:v2:changes` in an ACL).
    ///
    /// Cost: the states of a key are found with `SCAN MATCH` on the node
    /// that owns the key's slot, which walks every key of that node (in
    /// round trips of 1000, each within the call timeout). An admin
    /// operation, not one for the request path.
    async fn reset(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        let inner = &*self.inner;
        let pattern = scan_pattern(&inner.prefix, key);
        let route_key = keys::key_stem(&inner.prefix, key);
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, found): (u64, Vec<Vec<u8>>) = inner.query(&scan, &route_key).await?;
            let own: Vec<&Vec<u8>> = found
                .iter()
                .filter(|k| is_state_of(&inner.prefix, key, k))
                .collect();
            if !own.is_empty() {
                let mut del = redis::cmd("DEL");
                del.arg(own);
                let _: i64 = inner.query(&del, &route_key).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // Published once the keys are gone: a process that hears of it
        // and asks Redis again finds them reset.
        inner
            .publish(&Change::Key(key.to_owned()))
            .await
            .map_err(|error| {
                Error::Store(format!(
                    "the key is reset, but other processes' deny caches were not told \
                     (they may deny it for up to their maximum age; repeat the reset): {error}"
                ))
            })
    }

    /// A single Redis: it answers `PING`. Sentinel: the master the
    /// sentinels name (and which says it is one) answers `PING`. A
    /// cluster: some master does (every master known, asked at once; the
    /// one that serves the slot
    /// of the key `ready` until the slot map is known). A cluster with a
    /// master down still decides the other masters' keys, and every
    /// instance of a service sees the same cluster: reporting them all
    /// unready would take them all out of a load balancer for the keys of
    /// one master.
    async fn ready(&self) -> Result<()> {
        let inner = &*self.inner;
        if let Connection::Sentinel(sentinel) = &inner.connection {
            // The first lookup may take longer than a call's deadline.
            sentinel.master(inner.connect_timeout).await?;
        }
        if let Some(topology) = &inner.topology {
            topology.refresh_if_due(false);
            let masters = topology.masters();
            if !masters.is_empty() {
                return any_master_answers(topology, masters, inner.timeout).await;
            }
        }
        let pong: String = inner.query(&redis::cmd("PING"), "ready").await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(Error::Store(format!("PING answered {pong:?}")))
        }
    }

    /// Subscribes to the change feed (see the module documentation): once
    /// for every clone of this store, however many caches watch it.
    fn watch_changes(&self, listener: Weak<dyn ChangeListener>) -> bool {
        self.inner.feed.listen(listener);
        true
    }
}

/// `Ok` as soon as one of `masters` answers `PING` within `timeout`.
async fn any_master_answers(
    topology: &Topology,
    masters: Vec<Arc<str>>,
    timeout: Duration,
) -> Result<()> {
    let mut pings = tokio::task::JoinSet::new();
    let mut failures = Vec::new();
    for master in masters {
        let mut connection = match topology.connection(&master) {
            Ok(connection) => connection,
            Err(e) => {
                failures.push(format!("{master}: {e}"));
                continue;
            }
        };
        pings.spawn(async move {
            let pong = tokio::time::timeout(
                timeout,
                redis::cmd("PING").query_async::<String>(&mut connection),
            )
            .await;
            match pong {
                Ok(Ok(pong)) if pong == "PONG" => Ok(()),
                Ok(Ok(other)) => Err(format!("{master}: PING answered {other:?}")),
                Ok(Err(e)) => Err(format!("{master}: {}", describe(&e))),
                Err(_) => Err(format!("{master}: no answer within {timeout:?}")),
            }
        });
    }
    while let Some(answer) = pings.join_next().await {
        match answer {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(failure)) => failures.push(failure),
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(Error::Store(format!(
        "no cluster master answers: {}",
        failures.join("; ")
    )))
}
