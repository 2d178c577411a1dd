//! The Redis store: the same decisions as the memory store, shared by every
//! process that uses the same Redis or Redis Cluster.
//!
//! - **One atomic script per decision.** A constant Lua script (one file
//!   per algorithm plus a driver, joined at compile time) runs every rule
//!   of every hit of a call in one EVALSHA, all-or-nothing. Redis caches
//!   the script once; after a restart or failover (`NOSCRIPT`) it is loaded
//!   again and the call retried, and only then: never after a timeout, when
//!   the first call may have been applied.
//! - **One clock.** By default the script reads Redis' `TIME`, so app
//!   servers with skewed clocks still share one window. With
//!   [`RedisStoreBuilder::client_clock`] the caller's time is sent instead
//!   (for services that forbid `TIME` in scripts).
//! - **Keys** are `prefix:v2:{key}:rule` (`slidegate:v2:{login:10.0.0.1}:100/1m`,
//!   plus `:gcra` etc. for the other algorithms); a key that carries its own
//!   hash tag is kept as is, after a `t:` (`slidegate:v2:t:user:{42}:login:100/1m`),
//!   so `X` and `{X}` are two keys here as in the memory store. `v2` is the
//!   version of the stored format: old and new formats never meet. All
//!   rules of one key share a cluster slot.
//! - **All or nothing across slots.** On a cluster, a batch over keys in
//!   several slots is decided slot by slot, in slot order, stopping at the
//!   first slot that denies, and the slots that recorded are undone (in a
//!   task of their own, so even when the caller's future is dropped) when
//!   a later one denies or fails: a denied batch leaves no charge, and
//!   concurrent decisions may be denied meanwhile (never admitted) by a
//!   charge about to be undone. `cross_slot.rs` has the details and, per
//!   algorithm, why an undo never lets more through.
//! - **One breaker per master.** Inside a
//!   [`ResilientStore`](crate::store::resilient::ResilientStore), each call
//!   goes through the circuit breaker of the master that serves its slot
//!   (from `CLUSTER SLOTS`, fetched again every second while in use and
//!   after failures): a dead master degrades only its own keys. The store
//!   is ready while some master answers.
//! - **Redis Sentinel.** With a `redis+sentinel://` URL, calls go to the
//!   master a majority of the sentinels name (once it answers `ROLE` as
//!   one), asked again once a second while in use and soon after a failed
//!   call; a promoted replica gets a lane and a breaker of its own (see
//!   `sentinel.rs` and `quorum.rs`).
//! - **Compact state, little Redis CPU.** A sliding log is one binary
//!   STRING: fixed-size records (time and running total, each truncated to
//!   the few bytes the rule's window and limit need: 4 bytes at `100/1s`)
//!   followed by a header, so a decision reads the header and the newest
//!   records with one `GETRANGE`, and an admission writes the new record
//!   and the header with one `SETRANGE`; expired records are dropped in the
//!   header and their bytes reclaimed by an occasional compaction. See
//!   `sliding_log.lua` for the layout and why it decodes exactly. The other
//!   algorithms keep one short STRING. Keys expire when the state becomes
//!   idle (a busy sliding log up to half a window later, so that its expiry
//!   is not moved on every admission); a probe never creates a key.
//! - **A change feed.** A reset publishes the key on a channel of the
//!   prefix (`slidegate:v2:changes`), and every store a deny cache
//!   watches ([`ResilientStore`](crate::store::resilient::ResilientStore))
//!   subscribes to it and pings it: a reset reaches the deny cache of
//!   every process within [`CHANGE_FEED_TRUST`] (1 s), or that cache
//!   answers nothing (see `changes.rs`).
//! - **Errors** are [`Error::Timeout`] (the per-call deadline passed),
//!   [`Error::Store`] (connection or Redis failure), [`Error::Config`]
//!   (bad URL or option) and [`Error::KeyConflict`] (the Redis key of one
//!   decision holds a value slidegate did not write: another type, or a
//!   string without this format's mark; that key is refused, never read
//!   as state or overwritten); callers never see Redis' own error types.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

pub use self::builder::RedisStoreBuilder;
pub use self::changes::CHANGE_FEED_TRUST;
use self::changes::Feed;
pub use self::coalesce::Coalesce;
use self::coalesce::{Answer, Calls, Lane};
use self::keys::{is_state_of, scan_pattern};
use self::script::{Plan, Step, load_command, plain_call};
use self::sentinel::{Master, Sentinel};
use self::topology::{Topology, slot_of};
use super::changes::{Change, ChangeListener};
use super::checks::{check_batch, check_cost, check_waits, validate_keys};
use super::contract::Store;
use super::hit::Hit;
use super::key::validate_key;
use super::reserve::{BatchReservation, wait_micros};
use super::resilient::gate;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

mod builder;
mod changes;
mod coalesce;
mod cross_slot;
mod keys;
mod quorum;
mod script;
mod sentinel;
mod topology;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "slidegate";
/// The default deadline of one store call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The default deadline of one connection attempt.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How much longer than needed Redis keeps an idle key by default, on
/// Redis' clock: absorbs the rounding to Redis' millisecond expiry.
pub const DEFAULT_EXPIRY_MARGIN: Duration = Duration::from_millis(1);
/// The default expiry margin with a client clock: covers a skew of up to
/// a second between the clocks of the processes sharing the limits.
pub const DEFAULT_CLIENT_CLOCK_EXPIRY_MARGIN: Duration = Duration::from_secs(1);
/// Requests the multiplexed connection buffers before it applies
/// backpressure (redis-rs' default of 50 throttles concurrent decisions).
const PIPELINE_BUFFER: usize = 1024;
/// Longest pause between two reconnection attempts. redis-rs doubles its
/// pause from 100 ms without a cap, and every call waits for the pending
/// reconnection: after a 5 s outage the store came back 5 s late.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);
/// Further attempts when the script cache is flushed again right after
/// the script was loaded (see `Inner::invoke_cluster`).
const NOSCRIPT_RETRIES: u32 = 3;
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
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    prefix: String,
    timeout: Duration,
    /// How long [`Store::ready`] waits for the sentinels' first answer.
    connect_timeout: Duration,
    /// The clock, the expiry margin, the deadline and coalescing: how the
    /// lanes call Redis.
    calls: Arc<Calls>,
    /// Which master serves which slot, and each master's lane (a cluster
    /// only).
    topology: Option<Arc<Topology>>,
    /// The changes other processes make, for the deny caches that watch
    /// this store.
    feed: Arc<Feed>,
}

#[derive(Clone)]
enum Connection {
    /// One Redis: a multiplexed connection that reconnects by itself, and
    /// the queue of decisions waiting for it.
    Node(Arc<Lane>),
    /// Redis Cluster: routes by slot and follows MOVED/ASK (each master's
    /// lane is in the topology).
    Cluster(ClusterConnection),
    /// Redis Sentinel: the lane of the master the sentinels name now.
    Sentinel(Arc<Sentinel>),
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
    /// A builder for the Redis (or Redis Cluster) at `url`:
    ///
    /// - `redis://[user:password@]host[:port][/db]`
    /// - `rediss://...` for TLS (rustls, the system's root certificates)
    /// - `redis+cluster://[user:password@]host1:port1,host2:port2` (or
    ///   `rediss+cluster://`) for a cluster: any reachable nodes; the rest
    ///   is discovered.
    /// - `redis+sentinel://[user:password@]host1:port1,host2:port2/MASTER_NAME[/db]`
    ///   (or `rediss+sentinel://`, TLS to the sentinels and the master) for
    ///   a master that Redis Sentinel fails over: the sentinels are asked
    ///   which node is the master, and asked again when calls fail and once
    ///   a second, so that the store follows a failover. A node is followed
    ///   only when a majority of the URL's sentinels name it. The user and
    ///   password are the master's; the sentinels' go in the query:
    ///   `?sentinel_username=USER&sentinel_password=PASSWORD`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }

    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.connection, Connection::Cluster(_))
    }

    /// True when the master is found through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.inner.connection, Connection::Sentinel(_))
    }

    /// Decisions waiting for a script call to take them, on every node
    /// (see [`Coalesce`]). Each waits within the store's deadline at most:
    /// 0 soon after the load stops.
    pub fn waiting(&self) -> usize {
        self.inner.lanes().iter().map(|lane| lane.waiting()).sum()
    }

    /// Coalesced script calls being sent or awaiting their answer, on every
    /// node: at most [`Coalesce::max_in_flight`] per node, and 0 soon after
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

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

fn is_redirect(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask)
    )
}

/// A Redis error as text, without script hashes (an implementation detail
/// callers never need).
fn describe(e: &redis::RedisError) -> String {
    e.to_string()
        .split(' ')
        .filter(|word| {
            let w = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            !(w.len() == 40 && w.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Inner {
    /// Every node's lane.
    fn lanes(&self) -> Vec<Arc<Lane>> {
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
        if e.is_timeout() {
            Error::Timeout(self.timeout)
        } else {
            Error::Store(describe(&e))
        }
    }

    /// Starts the change feed's subscriber when a cache waits for it and
    /// it could not be started before (the store was watched outside a
    /// runtime).
    fn start_feed(&self) {
        if self.feed.is_wanted() {
            self.feed.start_if_wanted();
        }
    }

    /// Runs `call` within the per-call deadline.
    async fn within<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.store_error(e)),
            Err(_) => Err(Error::Timeout(self.timeout)),
        }
    }

    /// The master serving the slot of `key`, when this is a cluster, a
    /// resilient store asks (see `resilient/gate.rs`) and the slot map
    /// knows it.
    fn node_of(&self, key: &str) -> Option<Arc<str>> {
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
    async fn run<T>(
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
    async fn run_unguarded<T>(
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
                    Ok(value) => coalesce::is_noscript(value),
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

    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        route_key: &str,
    ) -> Result<T> {
        self.start_feed();
        match &self.connection {
            Connection::Node(lane) => self.within(cmd.query_async(&mut lane.connection())).await,
            Connection::Sentinel(sentinel) => {
                let master = sentinel.master(self.timeout).await?;
                let result = self
                    .within(cmd.query_async(&mut master.lane.connection()))
                    .await;
                if result.as_ref().is_err_and(Error::is_store_failure) {
                    sentinel.refresh_if_due(true);
                }
                result
            }
            Connection::Cluster(c) => {
                if let Some(mut master) = self.master_connection(route_key) {
                    return match tokio::time::timeout(self.timeout, cmd.query_async(&mut master))
                        .await
                    {
                        Ok(Err(e)) if is_redirect(&e) => {
                            self.slots_moved();
                            Err(self.store_error(e))
                        }
                        Ok(other) => other.map_err(|e| self.store_error(e)),
                        Err(_) => Err(Error::Timeout(self.timeout)),
                    };
                }
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(route_key, SlotAddr::Master),
                ));
                let value = self
                    .within(c.clone().route_command(cmd.clone(), routing))
                    .await?;
                redis::from_redis_value(value).map_err(|e| Error::Store(e.to_string()))
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_never_carries_a_script_hash() {
        let e = redis::RedisError::from((
            redis::ErrorKind::Client,
            "script failed",
            "ERR user_script:1: boom script: e0e1f9fabfc9d4800c877a703b823ac0578ff8db, on @user_script:1.".to_owned(),
        ));
        let text = describe(&e);
        assert!(text.contains("boom"), "{text}");
        assert!(
            !text.contains("e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
            "{text}"
        );
    }
}
