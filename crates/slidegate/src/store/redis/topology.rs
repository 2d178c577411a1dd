//! Which Redis Cluster master serves which slot, so that the failures of
//! one master are charged to that master alone (one circuit breaker per
//! node, see `resilient/gate.rs`), and readiness can ask every master.
//!
//! redis-rs routes every command itself and follows `MOVED`; this map only
//! names the node a decision goes to. It is fetched with `CLUSTER SLOTS`
//! from any node: on first use, then at most once a second while calls are
//! made, and soon after a call fails (a failover moves slots to a replica:
//! its keys then go to a new node, with a breaker of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::store::slot_key;

/// Slots in a Redis Cluster.
const SLOTS: u16 = 16_384;
/// How old the map may get while calls are made.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How soon after the last fetch a failure may fetch again.
const REFRESH_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// Nodes asked in one fetch before giving up until the next.
const FETCH_TRIES: usize = 3;

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, or of
/// the whole key, modulo 16384. A Redis key named by `keys.rs` has the
/// slot of the caller's key.
pub(crate) fn slot_of(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(slot_key(key).as_bytes()) % SLOTS
}

/// Slot ranges `(first, last, master)`, sorted by `first`.
type Ranges = Vec<(u16, u16, Arc<str>)>;

/// The slot map, shared by every clone of one store.
#[derive(Debug)]
pub(crate) struct Topology {
    ranges: RwLock<Arc<Ranges>>,
    origin: Instant,
    /// When the map was last fetched (µs since `origin`, 0: never).
    fetched_us: AtomicU64,
    /// A fetch is under way (cleared by a guard, whatever becomes of it).
    fetching: AtomicBool,
}

impl Topology {
    pub(crate) fn new() -> Arc<Topology> {
        Arc::new(Topology {
            ranges: RwLock::new(Arc::new(Vec::new())),
            origin: Instant::now(),
            fetched_us: AtomicU64::new(0),
            fetching: AtomicBool::new(false),
        })
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

    /// Fetches the map again in the background when it is due: never
    /// fetched, older than a second, or (`after_failure`) older than
    /// 100 ms. One fetch at a time.
    pub(crate) fn refresh_if_due(
        self: &Arc<Self>,
        connection: &ClusterConnection,
        after_failure: bool,
    ) {
        let fetched = self.fetched_us.load(Ordering::Acquire);
        let age = micros(self.origin.elapsed()).saturating_sub(fetched);
        let due = if after_failure {
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
        let connection = connection.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(fetch.run(connection));
        }
        // Without a runtime the guard is dropped here: the next call tries.
    }

    fn store(&self, ranges: Ranges) {
        *self.ranges.write() = Arc::new(ranges);
        self.fetched_us
            .store(micros(self.origin.elapsed()).max(1), Ordering::Release);
    }
}

/// One fetch of the map; clears `fetching` when done or dropped.
struct Fetch {
    topology: Arc<Topology>,
}

impl Fetch {
    async fn run(self, mut connection: ClusterConnection) {
        for _ in 0..FETCH_TRIES {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            let reply = tokio::time::timeout(
                Duration::from_secs(1),
                connection.route_command(redis::cmd("CLUSTER").arg("SLOTS").clone(), routing),
            )
            .await;
            if let Ok(Ok(reply)) = reply
                && let Some(ranges) = parse_slots(&reply)
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

/// `CLUSTER SLOTS`: per range, `[first, last, [host, port, id, ...], replicas...]`.
fn parse_slots(reply: &redis::Value) -> Option<Ranges> {
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
        let node: Arc<str> = format!("{host}:{port}").into();
        ranges.push((
            u16::try_from(*first).ok()?,
            u16::try_from(*last).ok()?,
            node,
        ));
    }
    ranges.sort_unstable_by_key(|(first, _, _)| *first);
    Some(ranges)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_of_redis_cluster() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 12_739);
        assert_eq!(slot_of("user:{42}:login"), slot_of("42"));
        assert_eq!(slot_of("foo"), 12_182);
    }

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
            redis::Value::Array(vec![
                int(0),
                int(5460),
                node("10.0.0.1", 7000),
                node("r", 1),
            ]),
        ]);
        let topology = Topology::new();
        topology.store(parse_slots(&reply).expect("a slot map"));
        assert_eq!(topology.node_of(0).as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(topology.node_of(5461).as_deref(), Some("10.0.0.2:7001"));
        assert_eq!(topology.node_of(10_923), None, "no master known");
        assert_eq!(topology.masters().len(), 2);
        assert!(parse_slots(&redis::Value::Int(1)).is_none());
    }
}
