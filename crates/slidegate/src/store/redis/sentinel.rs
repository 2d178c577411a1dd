//! Redis Sentinel: which node is the master now, and its lane, swapped
//! when the sentinels promote another.
//!
//! A `redis+sentinel://` URL names sentinels and a master name. The
//! sentinels are all asked `SENTINEL get-master-addr-by-name` at once, and
//! a node is followed only when a majority of the URL's sentinels name it
//! (see `quorum.rs`) and it says `master` to `ROLE`: a write never goes to
//! a replica that stale sentinels still name, and a sentinel that names
//! another node than the others (stale, misconfigured or hostile) moves
//! nothing and is never sent the master's password, since no connection
//! is opened to a node only a minority names. The master in use is kept
//! until a majority names another, or until it says it is no master any
//! more (then no call goes to it until the majority names one that is).
//! The sentinels are asked on first use, then at most once a second while
//! calls are made (a promotion is seen without a single failed call), and
//! soon after a call fails (a dead master, or `READONLY` from an old
//! master that came back as a replica). When another master is followed,
//! new calls go to its lane (a connection of its own, and a circuit
//! breaker of its own, named after its address); calls already out on the
//! old one finish or fail there, and the failure policy answers for those,
//! as for any failed call.
//!
//! When no sentinel answers, the master known stays in use (the sentinels
//! being down says nothing about the master). Until a master is known,
//! calls wait for the first lookup within their deadline, then fail.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use tokio::sync::watch;

use super::coalesce::Lane;
use super::errors::describe;
use super::quorum::{Said, Votes, node_of};
use super::topology::Connect;
use super::url::{NodeUrl, SentinelUrl};
use crate::decision::micros;
use crate::error::{Error, Result};

/// How old the master's address may get while calls are made.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How soon after the last lookup a failed call may look again.
const REFRESH_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// How long one sentinel is given to name the master, and the master to
/// answer `ROLE`.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);
/// The master in use: its address (`host:port`, the name of its circuit
/// breaker) and its lane.
pub(crate) struct Master {
    pub(crate) addr: Arc<str>,
    pub(crate) lane: Arc<Lane>,
}

/// What every call reads: the master, and how many lookups have ended.
#[derive(Clone, Default)]
struct State {
    master: Option<Arc<Master>>,
    lookups: u64,
}

/// The sentinels, the master they name, and its lane, shared by every
/// clone of one store.
pub(crate) struct Sentinel {
    name: String,
    /// Each sentinel's address and connection (opened on first use,
    /// reconnecting by itself).
    sentinels: Vec<(Arc<str>, ConnectionManager)>,
    master_url: NodeUrl,
    connect: Box<Connect>,
    state: watch::Sender<State>,
    /// Why the last lookup found no master, for the error of a call.
    why: Mutex<String>,
    /// The node each sentinel that disagrees with the others was last
    /// logged naming (by the sentinel's index): a disagreement is logged
    /// when it starts or changes, not at every lookup.
    dissent: Mutex<HashMap<usize, String>>,
    origin: Instant,
    /// When the last lookup ended (µs since `origin`, 0: never).
    looked_us: AtomicU64,
    /// A lookup is under way (cleared by a guard, whatever becomes of it).
    looking: AtomicBool,
}

impl std::fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinel")
            .field("name", &self.name)
            .field("master", &self.current().map(|m| Arc::clone(&m.addr)))
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// The sentinels of `url`, each through `sentinel` (a connection that
    /// opens on first use), and the master's lanes through `connect`.
    pub(crate) fn new(
        url: SentinelUrl,
        sentinel: impl Fn(&str) -> Result<ConnectionManager>,
        connect: Box<Connect>,
    ) -> Result<Arc<Sentinel>> {
        let sentinels = url
            .sentinels
            .iter()
            .map(|host| Ok((host.as_str().into(), sentinel(&url.sentinel_url.of(host))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Sentinel {
            name: url.name,
            sentinels,
            master_url: url.master_url,
            connect,
            state: watch::Sender::new(State::default()),
            why: Mutex::new("the sentinels were not asked yet".into()),
            dissent: Mutex::new(HashMap::new()),
            origin: Instant::now(),
            looked_us: AtomicU64::new(0),
            looking: AtomicBool::new(false),
        }))
    }

    /// The URL of the node at `addr` (`host:port`), with the master's
    /// credentials and database.
    pub(crate) fn url_of(&self, addr: &str) -> String {
        self.master_url.of(addr)
    }

    /// The master in use, if one is known.
    pub(crate) fn current(&self) -> Option<Arc<Master>> {
        self.state.borrow().master.clone()
    }

    /// The master to call now: the one in use (looked up again in the
    /// background when due), or the one the lookup under way finds, waited
    /// for up to `wait`.
    pub(crate) async fn master(self: &Arc<Self>, wait: Duration) -> Result<Arc<Master>> {
        if let Some(master) = self.current() {
            self.refresh_if_due(false);
            return Ok(master);
        }
        let mut state = self.state.subscribe();
        let seen = {
            let now = state.borrow_and_update();
            // Found between the two looks.
            if let Some(master) = &now.master {
                return Ok(Arc::clone(master));
            }
            now.lookups
        };
        self.refresh_if_due(true);
        let mut why = None;
        // A lookup that ended since `seen` (between the two looks, however
        // fast) has its outcome read, not the reason of an older one: it
        // updates the state before it clears `looking`.
        if self.looking.load(Ordering::Acquire) || state.borrow().lookups != seen {
            let found = tokio::time::timeout(
                wait,
                state.wait_for(|s| s.master.is_some() || s.lookups != seen),
            )
            .await;
            match found {
                Ok(Ok(state)) => {
                    if let Some(master) = &state.master {
                        return Ok(Arc::clone(master));
                    }
                }
                Ok(Err(_)) => {}
                Err(_) => why = Some(format!("the sentinels did not name one within {wait:?}")),
            }
        }
        let why = why.unwrap_or_else(|| self.why.lock().clone());
        Err(Error::Store(format!(
            "no master for {:?}: {why}",
            self.name
        )))
    }

    /// Looks the master up again in the background when due: never looked
    /// up, looked up over a second ago, or (`soon`: after a failed call)
    /// over 100 ms ago. One lookup at a time.
    pub(crate) fn refresh_if_due(self: &Arc<Self>, soon: bool) {
        let looked = self.looked_us.load(Ordering::Acquire);
        let age = micros(self.origin.elapsed()).saturating_sub(looked);
        let due = if soon {
            REFRESH_AFTER_FAILURE
        } else {
            REFRESH_EVERY
        };
        if looked != 0 && age < micros(due) {
            return;
        }
        if self
            .looking
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let lookup = Lookup {
            sentinel: Arc::clone(self),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(lookup.run());
        }
        // Without a runtime the guard is dropped here: the next call tries.
    }

    /// Asks every sentinel at once which node is the master. A node other
    /// than the master in use is followed only when a majority of the
    /// URL's sentinels name it and it answers `ROLE` as a master: one
    /// sentinel alone moves nothing, and no connection (so no password)
    /// goes to a node it alone names. The master in use is kept until then,
    /// unless it says it is no master any more: then no call goes to it
    /// until the majority names one that is.
    async fn look_up(&self) {
        let current = self.current();
        let in_use = current.as_ref().map(|m| &*m.addr);
        let votes = self.ask_all(in_use).await;
        let elected = votes.elected();
        self.note_dissent(&votes, elected.or(in_use));
        let mut why = Vec::new();
        match elected {
            Some(node) if Some(node) != in_use => match self.role_of_new(node).await {
                Ok((lane, role)) if role == "master" => {
                    self.adopt(current.as_ref(), node, lane, &votes);
                    return;
                }
                Ok((_, role)) => why.push(format!("{node} is a {role}")),
                Err(e) => why.push(format!("{node}: {e}")),
            },
            Some(_) => {}
            None => why.push(format!(
                "no node is named by a majority ({} of {}) of the sentinels",
                votes.majority(),
                self.sentinels.len()
            )),
        }
        // The master in use is asked only briefly: a dead one must not hold
        // up the next lookup, and says nothing either way.
        let mut demoted = false;
        if let Some(master) = &current {
            match role(master.lane.connection(), REFRESH_AFTER_FAILURE).await {
                Ok(role) if role == "master" => {}
                Ok(role) => {
                    demoted = true;
                    why.push(format!("{} (in use) is a {role}", master.addr));
                }
                Err(e) => why.push(format!("{} (in use): {e}", master.addr)),
            }
        }
        let why = format!("{votes}; {}", why.join("; "));
        if demoted {
            tracing::warn!(
                name = %self.name,
                why = %why,
                "sentinel: the master in use is no longer a master; no calls go to it"
            );
        } else if current.is_none() || elected.is_some_and(|node| Some(node) != in_use) {
            tracing::debug!(name = %self.name, why = %why, "sentinel: no new master found");
        }
        *self.why.lock() = why;
        self.state.send_modify(|state| {
            if demoted {
                state.master = None;
            }
            state.lookups += 1;
        });
    }

    /// A lane to `node`, which a majority of the sentinels names, and what
    /// it says it is.
    async fn role_of_new(&self, node: &str) -> std::result::Result<(Arc<Lane>, String), String> {
        let lane = (self.connect)(&self.master_url.of(node)).map_err(|e| e.to_string())?;
        let role = role(lane.connection(), LOOKUP_TIMEOUT).await?;
        Ok((lane, role))
    }

    /// The sentinels' answers, all asked at once. Once a majority names a
    /// node other than the master in use (`in_use`), the others are not
    /// waited for (a failover is followed at once); otherwise every
    /// sentinel is heard, each within [`LOOKUP_TIMEOUT`], so that one that
    /// disagrees is seen.
    async fn ask_all(&self, in_use: Option<&str>) -> Votes {
        let mut asks = tokio::task::JoinSet::new();
        for (i, (_, connection)) in self.sentinels.iter().enumerate() {
            let (connection, name) = (connection.clone(), self.name.clone());
            asks.spawn(async move { (i, ask(connection, &name).await) });
        }
        let mut votes = Votes::new(self.sentinels.len());
        while let Some(answer) = asks.join_next().await {
            let Ok((i, said)) = answer else {
                continue;
            };
            votes.record(i, Arc::clone(&self.sentinels[i].0), said);
            if votes.elected().is_some_and(|node| Some(node) != in_use) {
                break;
            }
        }
        votes
    }

    /// Logs the sentinels that name another node than `agreed` (what the
    /// majority names, or else the master in use) when one starts to, or
    /// names another node than it was last logged naming; and once they
    /// all agree again.
    fn note_dissent(&self, votes: &Votes, agreed: Option<&str>) {
        let mut logged = self.dissent.lock();
        let mut changed = false;
        for (sentinel, node, dissents) in votes.dissent(agreed) {
            let Some(i) = self.sentinels.iter().position(|(s, _)| s == sentinel) else {
                continue;
            };
            if dissents {
                if logged.get(&i).is_none_or(|was| was != node) {
                    logged.insert(i, node.to_owned());
                    changed = true;
                }
            } else if logged.remove(&i).is_some() && logged.is_empty() {
                tracing::info!(
                    name = %self.name,
                    sentinels = %votes,
                    "sentinel: the sentinels agree again"
                );
            }
        }
        if changed {
            tracing::warn!(
                name = %self.name,
                master = agreed.unwrap_or("none"),
                majority = votes.majority(),
                sentinels = %votes,
                "sentinel: the sentinels disagree; only a node a majority of them names is followed"
            );
        }
    }

    /// Makes `node` the master in use.
    fn adopt(&self, current: Option<&Arc<Master>>, node: &str, lane: Arc<Lane>, votes: &Votes) {
        tracing::info!(
            name = %self.name,
            master = %node,
            previous = current.map_or("none", |m| &m.addr),
            named_by = %votes.naming(node),
            sentinels = %votes,
            "sentinel: following the master"
        );
        self.state.send_modify(|state| {
            state.master = Some(Arc::new(Master {
                addr: node.into(),
                lane,
            }));
            state.lookups += 1;
        });
    }
}

/// The master's `host:port` by one sentinel.
async fn ask(mut connection: ConnectionManager, name: &str) -> Said {
    let mut lookup = redis::cmd("SENTINEL");
    lookup.arg("get-master-addr-by-name").arg(name);
    match tokio::time::timeout(
        LOOKUP_TIMEOUT,
        lookup.query_async::<Option<(String, u16)>>(&mut connection),
    )
    .await
    {
        Ok(Ok(Some((host, port)))) => match node_of(&host, port) {
            Ok(node) => Said::Names(node),
            Err(why) => Said::Failed(why),
        },
        Ok(Ok(None)) => Said::KnowsNone,
        Ok(Err(e)) => Said::Failed(describe(&e)),
        Err(_) => Said::Failed(format!("no answer within {LOOKUP_TIMEOUT:?}")),
    }
}

/// What a node says it is (`master`, `slave`, `sentinel`).
async fn role(
    mut connection: ConnectionManager,
    patience: Duration,
) -> std::result::Result<String, String> {
    let reply = tokio::time::timeout(
        patience,
        redis::cmd("ROLE").query_async::<redis::Value>(&mut connection),
    )
    .await;
    match reply {
        Ok(Ok(redis::Value::Array(fields))) => match fields.first() {
            Some(redis::Value::BulkString(role)) => Ok(String::from_utf8_lossy(role).into()),
            Some(redis::Value::SimpleString(role)) => Ok(role.clone()),
            other => Err(format!("ROLE answered {other:?}")),
        },
        Ok(Ok(other)) => Err(format!("ROLE answered {other:?}")),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!("no answer to ROLE within {patience:?}")),
    }
}

/// One lookup; clears `looking` when done or dropped.
struct Lookup {
    sentinel: Arc<Sentinel>,
}

impl Lookup {
    async fn run(self) {
        self.sentinel.look_up().await;
    }
}

impl Drop for Lookup {
    fn drop(&mut self) {
        let sentinel = &self.sentinel;
        sentinel
            .looked_us
            .store(micros(sentinel.origin.elapsed()).max(1), Ordering::Release);
        sentinel.looking.store(false, Ordering::Release);
    }
}
