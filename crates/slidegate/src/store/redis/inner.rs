//! What every clone of a Redis store shares (the connection, the prefix,
//! the deadlines, the slot map, the change feed) and how one call reaches
//! Redis: through the lane of the node that serves it (one Redis, the
//! master of a cluster slot, the master the sentinels name), its circuit
//! breaker and the per-call deadline.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::calls::Calls;
use super::changes::{Feed, encode};
use super::coalesce::{Answer, Lane};
use super::errors::{NOSCRIPT_RETRIES, is_noscript, is_noscript_reply, is_redirect, store_error};
use super::keys::slot_of;
use super::plan::{Plan, Step};
use super::script::{load_command, plain_call};
use super::sentinel::{Master, Sentinel};
use super::topology::Topology;
use crate::error::{Error, Result};
use crate::store::changes::Change;
use crate::store::resilient::gate;

/// What every clone of a [`RedisStore`](super::RedisStore) shares.
pub(super) struct Inner {
    pub(super) connection: Connection,
    pub(super) prefix: String,
    pub(super) timeout: Duration,
    /// How long [`Store::ready`] waits for the sentinels' first answer.
    pub(super) connect_timeout: Duration,
    /// The clock, the expiry margin, the deadline and coalescing: how the
    /// lanes call Redis.
    pub(super) calls: Arc<Calls>,
    /// Which master serves which slot, and each master's lane (a cluster
    /// only).
    pub(super) topology: Option<Arc<Topology>>,
    /// The changes other processes make, for the deny caches that watch
    /// this store.
    pub(super) feed: Arc<Feed>,
    /// The most leases open at once (see `leases.rs`; 0: not bounded).
    pub(super) max_leases: usize,
    /// The waiters for places in this process, woken by the feed.
    pub(super) turns: Arc<super::turns::Turns>,
}

/// How the store reaches Redis.
#[derive(Clone)]
pub(super) enum Connection {
    /// One Redis: a multiplexed connection that reconnects by itself, and
    /// the queue of decisions waiting for it.
    Node(Arc<Lane>),
    /// Redis Cluster: routes by slot and follows MOVED/ASK (each master's
    /// lane is in the topology).
    Cluster(ClusterConnection),
    /// Redis Sentinel: the lane of the master the sentinels name now.
    Sentinel(Arc<Sentinel>),
}

impl Inner {
    /// Every node's lane.
    pub(super) fn lanes(&self) -> Vec<Arc<Lane>> {
        match (&self.connection, &self.topology) {
            (Connection::Node(lane), _) => vec![Arc::clone(lane)],
            (Connection::Sentinel(sentinel), _) => sentinel
                .current()
                .map(|m| Arc::clone(&m.lane))
                .into_iter()
                .collect(),
            (Connection::Cluster(_), Some(topology)) => topology.lanes(),
            (Connection::Cluster(_), None) => Vec::new(),
        }
    }

    fn store_error(&self, e: redis::RedisError) -> Error {
        store_error(&e, self.timeout)
    }

    /// Starts the change feed's subscriber when a cache waits for it and
    /// it could not be started before (the store was watched outside a
    /// runtime).
    pub(super) fn start_feed(&self) {
        if self.feed.is_wanted() {
            self.feed.start_if_wanted();
        }
    }

    /// The master serving the slot of `key`, when this is a cluster, a
    /// resilient store asks (see `resilient/gate.rs`) and the slot map
    /// knows it.
    pub(super) fn node_of(&self, key: &str) -> Option<Arc<str>> {
        let topology = self.topology.as_ref()?;
        if !gate::active() {
            return None;
        }
        topology.refresh_if_due(false);
        topology.node_of(slot_of(key))
    }

    /// Runs one call of `plan` (all its keys in one slot), through the
    /// circuit breaker of the node that serves it when there is one; the
    /// reply is read by `parse` (`Plan::decisions`, `Plan::reservation`).
    pub(super) async fn run<T>(
        &self,
        plan: &Plan<'_>,
        step: Option<(Step, &str)>,
        parse: impl Fn(&Plan<'_>, &redis::Value) -> Result<T>,
    ) -> Result<T> {
        self.start_feed();
        if let Connection::Sentinel(sentinel) = &self.connection {
            return self.run_on_master(sentinel, plan, step, parse).await;
        }
        let node = self.node_of(plan.route());
        let permit = match &node {
            Some(node) => gate::enter(node)?,
            None => None,
        };
        let result = self.run_unguarded(plan, step, parse).await;
        gate::settle(permit, &result);
        if let (Err(error), Some(topology)) = (&result, &self.topology)
            && error.is_store_failure()
        {
            topology.refresh_if_due(true);
        }
        result
    }

    /// Decides `plan`, on no breaker's account: through the lane of the
    /// node that serves it (alone or coalesced, see `coalesce.rs`).
    ///
    /// On a cluster the lane is that of the master that serves the slot
    /// (see `topology.rs`); when the slot moved (`MOVED`, `ASK`), or the
    /// map is not known yet, the call goes alone through the cluster
    /// connection, which follows it. The reply is read by `parse`.
    pub(super) async fn run_unguarded<T>(
        &self,
        plan: &Plan<'_>,
        step: Option<(Step, &str)>,
        parse: impl Fn(&Plan<'_>, &redis::Value) -> Result<T>,
    ) -> Result<T> {
        let part = plan.part(step);
        // The cluster connection's future is large and rarely needed:
        // boxed, so that it does not weigh on every decision's future.
        let answer = match &self.connection {
            Connection::Node(lane) => lane.decide(part).await,
            Connection::Sentinel(sentinel) => match sentinel.master(self.timeout).await {
                Ok(master) => master.lane.decide(part).await,
                Err(error) => Answer::Failed(error),
            },
            Connection::Cluster(cluster) => match self.lane_of(plan.route()) {
                Some(lane) => match lane.decide(part).await {
                    Answer::Moved => {
                        self.slots_moved();
                        Box::pin(self.invoke_cluster(cluster, plan, step)).await
                    }
                    other => other,
                },
                None => Box::pin(self.invoke_cluster(cluster, plan, step)).await,
            },
        };
        self.answer(plan, answer, parse)
    }

    /// Decides `plan` on the master the sentinels name, through that
    /// master's circuit breaker; a failed call has the sentinels asked
    /// again soon (the master may have died, or come back as a replica:
    /// `READONLY`).
    async fn run_on_master<T>(
        &self,
        sentinel: &Arc<Sentinel>,
        plan: &Plan<'_>,
        step: Option<(Step, &str)>,
        parse: impl Fn(&Plan<'_>, &redis::Value) -> Result<T>,
    ) -> Result<T> {
        let permit = |master: &Master| {
            if gate::active() {
                gate::enter(&master.addr)
            } else {
                Ok(None)
            }
        };
        // A refusal by the master's open circuit is a failure too: the
        // sentinels may name another master by now.
        let result = match sentinel.master(self.timeout).await {
            Ok(master) => match permit(&master) {
                Ok(permit) => {
                    let answer = master.lane.decide(plan.part(step)).await;
                    let result = self.answer(plan, answer, parse);
                    gate::settle(permit, &result);
                    result
                }
                Err(refused) => Err(refused),
            },
            Err(error) => Err(error),
        };
        if let Err(error) = &result
            && error.is_store_failure()
        {
            sentinel.refresh_if_due(true);
        }
        result
    }

    /// `answer` to `plan`, read by `parse`, or the error it carries.
    fn answer<T>(
        &self,
        plan: &Plan<'_>,
        answer: Answer,
        parse: impl Fn(&Plan<'_>, &redis::Value) -> Result<T>,
    ) -> Result<T> {
        match answer {
            Answer::Reply(value) => parse(plan, &value),
            Answer::Refused(e, base) => Err(plan
                .conflict(&e, base)
                .unwrap_or_else(|| self.store_error(e))),
            Answer::Moved => Err(Error::Store(
                "the slot moved while its call was redirected".into(),
            )),
            Answer::Failed(error) => Err(error),
        }
    }

    /// One call of `plan` alone through the cluster connection (which
    /// follows MOVED and ASK), within the deadline. The script is loaded
    /// on the node that answers `NOSCRIPT` and the call sent again, a few
    /// times at most (it did not run, so nothing is applied twice); any
    /// other error, and a timeout, is never retried.
    async fn invoke_cluster(
        &self,
        cluster: &ClusterConnection,
        plan: &Plan<'_>,
        step: Option<(Step, &str)>,
    ) -> Answer {
        let call = async {
            let mut cluster = cluster.clone();
            let part = plan.part(step);
            let command = plain_call(
                &part,
                self.calls.clock.as_ref().map(|c| c.now_micros()),
                self.calls.margin_ms,
            );
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                Route::with_key(plan.route(), SlotAddr::Master),
            ));
            let mut retries = 0;
            loop {
                let reply = cluster
                    .route_command(command.clone(), routing.clone())
                    .await;
                // The cluster connection answers a server error either
                // way: as an error, or as the reply's value.
                let lost = match &reply {
                    Err(e) => is_noscript(e),
                    Ok(value) => is_noscript_reply(value),
                };
                if !lost || retries >= NOSCRIPT_RETRIES {
                    return reply;
                }
                retries += 1;
                cluster
                    .route_command(load_command(), routing.clone())
                    .await?;
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(reply)) => Answer::Reply(reply),
            Ok(Err(e)) => Answer::Refused(e, 0),
            Err(_) => Answer::Failed(Error::Timeout(self.timeout)),
        }
    }

    /// The lane of the master serving `key`'s slot, when the slot map
    /// knows it.
    fn lane_of(&self, key: &str) -> Option<Arc<Lane>> {
        let topology = self.topology.as_ref()?;
        topology.refresh_if_due(false);
        let node = topology.node_of(slot_of(key))?;
        topology.lane(&node).ok()
    }

    /// The connection to the master serving `key`'s slot, when the slot
    /// map knows it.
    fn master_connection(&self, key: &str) -> Option<ConnectionManager> {
        Some(self.lane_of(key)?.connection())
    }

    /// A slot answered from another node than the map said: fetch it again.
    fn slots_moved(&self) {
        if let Some(topology) = &self.topology {
            topology.refresh_if_due(true);
        }
    }

    /// Runs a command other than a decision (`SCAN`, `DEL`, `PING`,
    /// `PUBLISH`) on the node that serves `route_key`, within the deadline.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        route_key: &str,
    ) -> Result<T> {
        let value = self
            .query_value(cmd, route_key)
            .await?
            .map_err(|e| self.store_error(e))?;
        redis::from_redis_value(value).map_err(|e| Error::Store(e.to_string()))
    }

    /// Runs a call of the script that is not a decision (a lease's, see
    /// `leases.rs`) on the node that serves `route_key`, within the
    /// deadline, loading the script where Redis lost it (`NOSCRIPT`: the
    /// call did not run). An error Redis answers is typed by `typed`, or
    /// is a store error.
    pub(super) async fn eval(
        &self,
        cmd: &redis::Cmd,
        route_key: &str,
        typed: impl Fn(&redis::RedisError) -> Option<Error>,
    ) -> Result<redis::Value> {
        let mut loads = 0;
        loop {
            match self.query_value(cmd, route_key).await? {
                Err(e) if is_noscript(&e) && loads < NOSCRIPT_RETRIES => {
                    loads += 1;
                    let _: String = self.query(&load_command(), route_key).await?;
                }
                Err(e) => return Err(typed(&e).unwrap_or_else(|| self.store_error(e))),
                Ok(value) => return Ok(value),
            }
        }
    }

    /// [`query`](Self::query)'s reply, or the error Redis answered: a
    /// failure to reach Redis in time is the outer error.
    async fn query_value(
        &self,
        cmd: &redis::Cmd,
        route_key: &str,
    ) -> Result<redis::RedisResult<redis::Value>> {
        self.start_feed();
        let answered = |reply: redis::RedisResult<redis::Value>| match reply {
            Ok(redis::Value::ServerError(e)) => Ok(Err(e.into())),
            Err(e) if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {
                Err(self.store_error(e))
            }
            other => Ok(other),
        };
        match &self.connection {
            Connection::Node(lane) => {
                let reply = self
                    .bounded(cmd.query_async(&mut lane.connection()))
                    .await?;
                answered(reply)
            }
            Connection::Sentinel(sentinel) => {
                let master = sentinel.master(self.timeout).await?;
                let reply = self
                    .bounded(cmd.query_async(&mut master.lane.connection()))
                    .await
                    .and_then(answered);
                // Any error (a master demoted answers READONLY): the
                // sentinels may name another master by now.
                if !matches!(reply, Ok(Ok(_))) {
                    sentinel.refresh_if_due(true);
                }
                reply
            }
            Connection::Cluster(c) => {
                if let Some(mut master) = self.master_connection(route_key) {
                    let reply = self.bounded(cmd.query_async(&mut master)).await?;
                    if reply.as_ref().is_err_and(is_redirect) {
                        self.slots_moved();
                    }
                    return answered(reply);
                }
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(route_key, SlotAddr::Master),
                ));
                let reply = self
                    .bounded(c.clone().route_command(cmd.clone(), routing))
                    .await?;
                answered(reply)
            }
        }
    }

    /// `call`'s reply within the per-call deadline, or [`Error::Timeout`].
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<redis::RedisResult<T>> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| Error::Timeout(self.timeout))
    }

    /// Tells every process watching this store's changes of `change`.
    pub(super) async fn publish(&self, change: &Change) -> Result<()> {
        let channel = self.feed.channel_name();
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel).arg(encode(change));
        let _receivers: i64 = self.query(&publish, channel).await?;
        Ok(())
    }
}
