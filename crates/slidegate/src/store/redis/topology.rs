//! Which Redis Cluster master serves which slot, and one connection per
//! master, so that a dead master costs only its own keys.
//!
//! redis-rs' cluster connection routes every command itself, but when a
//! master dies under load it rebuilds its slot map again and again while
//! holding every request, the live masters' included: in this project's
//! fault test every call to the two live masters of a 3-master cluster
//! timed out for the 3 s one master was down (redis-rs 1.8.1). Decisions
//! therefore go to the master that serves their slot over a connection of
//! that master's own (a [`ConnectionManager`], which reconnects by itself),
//! with one circuit breaker per master (see `resilient/gate.rs`); the
//! cluster connection is kept for what it does well, following `MOVED`
//! and `ASK` while slots move.
//!
//! The map comes from `CLUSTER SLOTS`, asked of any master known or any
//! node of the URL: on first use, then at most once a second while calls
//! are made, and soon after a call fails or is redirected (a failover
//! moves slots to a replica: its keys then go to a new master, with a
//! connection and a breaker of its own).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::aio::ConnectionManager;

use super::coalesce::Lane;
use super::url::NodeUrl;
use crate::decision::micros;
use crate::error::Result;

/// How old the map may get while calls are made.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How soon after the last fetch a failure may fetch again.
const REFRESH_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// How long one node is given to answer `CLUSTER SLOTS`.
const FETCH_TIMEOUT: Duration = Duration::from_millis(500);

/// Slot ranges `(first, last, master)`, sorted by `first`.
type Ranges = Vec<(u16, u16, Arc<str>)>;

/// Opens a connection to a node's URL, with its lane (see `builder.rs`).
pub(crate) type Connect = dyn Fn(&str) -> Result<Arc<Lane>> + Send + Sync;

/// The slot map and the masters' connections, shared by every clone of
/// one store.
pub(crate) struct Topology {
    ranges: RwLock<Arc<Ranges>>,
    /// The nodes of the URL, asked when no master is known.
    seeds: Vec<Arc<str>>,
    url: NodeUrl,
    connect: Box<Connect>,
    /// Each master's connection and queue of decisions.
    lanes: Mutex<HashMap<Arc<str>, Arc<Lane>>>,
    origin: Instant,
    /// When the map was last fetched (µs since `origin`, 0: never).
    fetched_us: AtomicU64,
    /// A fetch is under way (cleared by a guard, whatever becomes of it).
    fetching: AtomicBool,
    /// Where the next fetch starts among the candidates.
    next_candidate: AtomicUsize,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("masters", &self.masters())
            .finish_non_exhaustive()
    }
}

impl Topology {
    pub(crate) fn new(seeds: Vec<Arc<str>>, url: NodeUrl, connect: Box<Connect>) -> Arc<Topology> {
        Arc::new(Topology {
            ranges: RwLock::new(Arc::new(Vec::new())),
            seeds,
            url,
            connect,
            lanes: Mutex::new(HashMap::new()),
            origin: Instant::now(),
            fetched_us: AtomicU64::new(0),
            fetching: AtomicBool::new(false),
            next_candidate: AtomicUsize::new(0),
        })
    }

    /// The URL of `node` (`host:port`), with the cluster URL's
    /// credentials.
    pub(crate) fn url_of(&self, node: &str) -> String {
        self.url.of(node)
    }

    /// The master serving `slot`, when known.
    pub(crate) fn node_of(&self, slot: u16) -> Option<Arc<str>> {
        let ranges = Arc::clone(&self.ranges.read());
        let i = ranges.partition_point(|(_, last, _)| *last < slot);
        ranges
            .get(i)
            .filter(|(first, _, _)| *first <= slot)
            .map(|(_, _, node)| Arc::clone(node))
    }

    /// Every master known, without repeats.
    pub(crate) fn masters(&self) -> Vec<Arc<str>> {
        let mut masters: Vec<Arc<str>> = self
            .ranges
            .read()
            .iter()
            .map(|(_, _, node)| Arc::clone(node))
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// The lane of `node` (`host:port`): its connection, opened on first
    /// use, and its queue of decisions.
    pub(crate) fn lane(&self, node: &str) -> Result<Arc<Lane>> {
        let mut lanes = self.lanes.lock();
        if let Some(lane) = lanes.get(node) {
            return Ok(Arc::clone(lane));
        }
        let lane = (self.connect)(&self.url.of(node))?;
        lanes.insert(node.into(), Arc::clone(&lane));
        Ok(lane)
    }

    /// Every lane opened.
    pub(crate) fn lanes(&self) -> Vec<Arc<Lane>> {
        self.lanes.lock().values().cloned().collect()
    }

    /// The connection to `node` (`host:port`), opened on first use.
    pub(crate) fn connection(&self, node: &str) -> Result<ConnectionManager> {
        Ok(self.lane(node)?.connection())
    }

    /// Fetches the map again in the background when it is due: never
    /// fetched, older than a second, or (`soon`: after a failure or a
    /// redirection) older than 100 ms. One fetch at a time.
    pub(crate) fn refresh_if_due(self: &Arc<Self>, soon: bool) {
        let fetched = self.fetched_us.load(Ordering::Acquire);
        let age = micros(self.origin.elapsed()).saturating_sub(fetched);
        let due = if soon {
            REFRESH_AFTER_FAILURE
        } else {
            REFRESH_EVERY
        };
        if fetched != 0 && age < micros(due) {
            return;
        }
        if self
            .fetching
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let fetch = Fetch {
            topology: Arc::clone(self),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(fetch.run());
        }
        // Without a runtime the guard is dropped here: the next call tries.
    }

    fn store(&self, ranges: Ranges) {
        let masters: Vec<Arc<str>> = ranges.iter().map(|(_, _, n)| Arc::clone(n)).collect();
        *self.ranges.write() = Arc::new(ranges);
        // Connections to nodes that no longer serve a slot are closed (a
        // call still in flight on one keeps it until it is answered).
        self.lanes
            .lock()
            .retain(|node, _| masters.iter().any(|m| m == node));
        self.fetched_us
            .store(micros(self.origin.elapsed()).max(1), Ordering::Release);
    }

    /// The nodes to ask for the map, starting at a different one each time
    /// (a dead one is not asked first every time).
    fn candidates(&self) -> Vec<Arc<str>> {
        let mut candidates = self.masters();
        for seed in &self.seeds {
            if !candidates.contains(seed) {
                candidates.push(Arc::clone(seed));
            }
        }
        if !candidates.is_empty() {
            let start = self.next_candidate.fetch_add(1, Ordering::Relaxed) % candidates.len();
            candidates.rotate_left(start);
        }
        candidates
    }
}

/// One fetch of the map; clears `fetching` when done or dropped.
struct Fetch {
    topology: Arc<Topology>,
}

impl Fetch {
    async fn run(self) {
        for node in self.topology.candidates() {
            let Ok(mut connection) = self.topology.connection(&node) else {
                continue;
            };
            let reply = tokio::time::timeout(
                FETCH_TIMEOUT,
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<redis::Value>(&mut connection),
            )
            .await;
            if let Ok(Ok(reply)) = reply
                && let Some(ranges) = parse_slots(&reply, &node)
            {
                self.topology.store(ranges);
                return;
            }
        }
        tracing::debug!("CLUSTER SLOTS: no node answered; the slot map stays as it was");
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        self.topology.fetching.store(false, Ordering::Release);
    }
}

/// `CLUSTER SLOTS`: per range, `[first, last, [host, port, id, ...],
/// replicas...]`; an empty host is the node that answered (`asked`).
fn parse_slots(reply: &redis::Value, asked: &str) -> Option<Ranges> {
    let redis::Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            return None;
        };
        let (Some(redis::Value::Int(first)), Some(redis::Value::Int(last)), Some(master)) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let redis::Value::Array(master) = master else {
            return None;
        };
        let host = match master.first()? {
            redis::Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            redis::Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let redis::Value::Int(port) = master.get(1)? else {
            return None;
        };
        let node: Arc<str> = if host.is_empty() || host == "?" {
            let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
            format!("{asked_host}:{port}").into()
        } else {
            format!("{host}:{port}").into()
        };
        ranges.push((
            u16::try_from(*first).ok()?,
            u16::try_from(*last).ok()?,
            node,
        ));
    }
    ranges.sort_unstable_by_key(|(first, _, _)| *first);
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn the_map_names_the_master_of_each_slot() {
        let int = redis::Value::Int;
        let node = |host: &str, port| {
            redis::Value::Array(vec![
                redis::Value::BulkString(host.as_bytes().to_vec()),
                int(port),
                redis::Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = redis::Value::Array(vec![
            redis::Value::Array(vec![int(5461), int(10922), node("10.0.0.2", 7001)]),
            redis::Value::Array(vec![int(0), int(5460), node("", 7000), node("r", 1)]),
        ]);
        let url = NodeUrl {
            scheme: "redis",
            auth: String::new(),
            path: String::new(),
        };
        let topology = Topology::new(
            Vec::new(),
            url,
            Box::new(|_| Err(Error::Config("no connections here".into()))),
        );
        topology.store(parse_slots(&reply, "10.0.0.1:7000").expect("a slot map"));
        assert_eq!(topology.node_of(0).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(topology.node_of(5461).as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(topology.node_of(10_923), None, "no master known");
        assert_eq!(topology.masters().len(), 2);
        assert!(parse_slots(&redis::Value::Int(1), "x:1").is_none());
    }

    #[test]
    fn node_urls_keep_the_cluster_urls_credentials_and_path() {
        let url = NodeUrl {
            scheme: "rediss",
            auth: "u:p@".into(),
            path: "/#insecure".into(),
        };
        assert_eq!(
            url.of("10.0.0.1:7000"),
            "rediss://u:p@10.0.0.1:7000/#insecure"
        );
    }
}
