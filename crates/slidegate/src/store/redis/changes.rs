//! The Redis store's change feed: what tells the deny cache of every
//! process that another process changed a key's state (a reset).
//!
//! A change is published on one channel, `PREFIX:v2:changes`, after it is
//! made (a reset publishes once its keys are deleted). Each store watched
//! by a cache ([`Store::watch_changes`](crate::Store::watch_changes))
//! subscribes to that channel on a connection of its own, on the node that
//! serves the channel: the Redis of the URL, the master the sentinels
//! name, or the master of the channel's slot in a cluster, where the
//! changes are published too (a node tells its own subscribers of a
//! message before it answers `PUBLISH`).
//!
//! Redis sends a subscriber the messages and the answers to its commands
//! in the order it ran them, so once a `PING` sent at `t` is answered,
//! every change published before `t` has been told. The subscriber pings
//! every [`PING_EVERY`]; each answer lets the caches trust what they hold
//! for [`CHANGE_FEED_TRUST`] from the ping's sending. A cache never
//! answers from a denial older than that trust: a change published on
//! one process reaches every other's cache (or stops it from answering)
//! within [`CHANGE_FEED_TRUST`], whether the subscription is live,
//! silently dead, or being opened again. A subscription that fails, ends,
//! is killed (`CLIENT KILL TYPE pubsub`), leaves no answer to a ping in
//! time, or sits on a node that no longer serves the channel is dropped
//! with everything the caches hold, and opened again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_core::Stream;
use parking_lot::Mutex;
use redis::aio::{PubSubSink, PubSubStream};

use super::errors::describe;
use super::keys::{FORMAT, slot_of};
use super::sentinel::Sentinel;
use super::topology::Topology;
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rate, Rule};
use crate::store::changes::{Change, ChangeListener};
use crate::store::key::MAX_KEY_LEN;

/// How long a cache trusts what it holds after the feed last proved it
/// missed no change: the longest a reset made by one process can take to
/// reach the deny cache of another.
pub const CHANGE_FEED_TRUST: Duration = Duration::from_secs(1);

/// How often the subscriber proves it missed nothing. A ping left
/// unanswered for the rest of the trust drops the subscription.
const PING_EVERY: Duration = Duration::from_millis(250);

/// The pause before the subscription is opened again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The longest message read: a key's change, with room to spare. A longer
/// one is read as [`Change::All`].
const MAX_MESSAGE: usize = MAX_KEY_LEN + 64;

/// Where the channel is served.
pub(crate) enum Source {
    /// One Redis: its URL.
    Node(String),
    /// The master the sentinels name.
    Sentinel(Arc<Sentinel>),
    /// The master of the channel's slot.
    Cluster(Arc<Topology>),
}

/// The listeners of one store (every clone of it) and its subscriber.
pub(crate) struct Feed {
    channel: String,
    source: Source,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// `state.task` is [`Task::Wanted`]: read by every call without the lock.
    wanted: AtomicBool,
}

#[derive(Default)]
struct State {
    listeners: Vec<Weak<dyn ChangeListener>>,
    /// The subscriber runs, or is to be started by the next call made in a
    /// runtime.
    task: Task,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Task {
    #[default]
    Idle,
    Wanted,
    Running,
}

/// The channel of the stores whose keys start with `prefix`.
pub(crate) fn channel(prefix: &str) -> String {
    format!("{prefix}:{FORMAT}:changes")
}

impl Feed {
    pub(crate) fn new(prefix: &str, source: Source, connect_timeout: Duration) -> Arc<Feed> {
        Arc::new(Feed {
            channel: channel(prefix),
            source,
            connect_timeout,
            state: Mutex::new(State::default()),
            wanted: AtomicBool::new(false),
        })
    }

    /// The channel changes are published on.
    pub(crate) fn channel_name(&self) -> &str {
        &self.channel
    }

    /// Adds `listener`, and starts the subscriber if it does not run.
    pub(crate) fn listen(self: &Arc<Self>, listener: Weak<dyn ChangeListener>) {
        {
            let mut state = self.state.lock();
            state.listeners.push(listener);
            if state.task == Task::Idle {
                self.set(&mut state, Task::Wanted);
            }
        }
        self.start_if_wanted();
    }

    /// Starts the subscriber when a listener waits for it and a runtime
    /// is at hand (a store may be built outside one: its first call
    /// starts it then).
    pub(crate) fn start_if_wanted(self: &Arc<Self>) {
        let mut state = self.state.lock();
        if state.task != Task::Wanted {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.set(&mut state, Task::Running);
        let subscriber = Subscriber {
            feed: Arc::clone(self),
        };
        runtime.spawn(subscriber.run());
    }

    /// True when the subscriber is wanted but not started yet: cheap
    /// enough for every call to ask.
    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    fn set(&self, state: &mut State, task: Task) {
        state.task = task;
        self.wanted.store(task == Task::Wanted, Ordering::Relaxed);
    }

    /// The live listeners; the dead ones are forgotten. `None` when none
    /// is left: the subscriber then stops (under the same lock, so that a
    /// listener added meanwhile starts another).
    fn listeners(&self, stopping: bool) -> Option<Vec<Arc<dyn ChangeListener>>> {
        let mut state = self.state.lock();
        let live: Vec<Arc<dyn ChangeListener>> =
            state.listeners.iter().filter_map(Weak::upgrade).collect();
        state.listeners.retain(|l| l.strong_count() > 0);
        if live.is_empty() && stopping {
            self.set(&mut state, Task::Idle);
            return None;
        }
        Some(live)
    }

    fn tell(&self, what: impl Fn(&dyn ChangeListener)) {
        for listener in self.listeners(false).unwrap_or_default() {
            what(&*listener);
        }
    }

    /// The node serving the channel now, and its URL.
    async fn node(&self) -> Result<(Option<Arc<str>>, String)> {
        match &self.source {
            Source::Node(url) => Ok((None, url.clone())),
            Source::Sentinel(sentinel) => {
                let master = sentinel.master(self.connect_timeout).await?;
                let url = sentinel.url_of(&master.addr);
                Ok((Some(Arc::clone(&master.addr)), url))
            }
            Source::Cluster(topology) => {
                topology.refresh_if_due(false);
                let node = topology.node_of(slot_of(&self.channel)).ok_or_else(|| {
                    Error::Store("the cluster's slot map is not known yet".into())
                })?;
                let url = topology.url_of(&node);
                Ok((Some(node), url))
            }
        }
    }

    /// False once `node` no longer serves the channel (a failover, slots
    /// that moved): the subscription must move with it. Asks the sentinels
    /// (or the cluster) again when due, at most once a second: a process
    /// whose cache answers every request makes no call that would.
    fn still_served_by(&self, node: Option<&Arc<str>>) -> bool {
        match (&self.source, node) {
            (Source::Sentinel(sentinel), Some(node)) => {
                sentinel.refresh_if_due(false);
                sentinel.current().is_none_or(|master| master.addr == *node)
            }
            (Source::Cluster(topology), Some(node)) => {
                topology.refresh_if_due(false);
                topology
                    .node_of(slot_of(&self.channel))
                    .is_none_or(|serving| serving == *node)
            }
            _ => true,
        }
    }

    /// Opens a subscription to the channel on the node serving it.
    async fn subscribe(&self) -> Result<Subscription> {
        let (node, url) = self.node().await?;
        let client = redis::Client::open(url).map_err(|e| Error::Config(describe(&e)))?;
        let within = |what: &str| {
            Error::Store(format!(
                "{what}: no answer within {:?}",
                self.connect_timeout
            ))
        };
        let mut pubsub = tokio::time::timeout(self.connect_timeout, client.get_async_pubsub())
            .await
            .map_err(|_| within("connect"))?
            .map_err(|e| Error::Store(describe(&e)))?;
        tokio::time::timeout(self.connect_timeout, pubsub.subscribe(&self.channel))
            .await
            .map_err(|_| within("SUBSCRIBE"))?
            .map_err(|e| Error::Store(describe(&e)))?;
        let (sink, stream) = pubsub.split();
        Ok(Subscription { node, sink, stream })
    }

    fn deliver(&self, message: &redis::Msg) {
        if message.get_channel_name() != self.channel {
            return;
        }
        let change = decode(message.get_payload_bytes());
        self.tell(|listener| listener.changed(&change));
    }
}

struct Subscription {
    node: Option<Arc<str>>,
    sink: PubSubSink,
    stream: PubSubStream,
}

/// The subscriber task. Dropped (its runtime shut down), it leaves the
/// feed to be started again, and the listeners without trust.
struct Subscriber {
    feed: Arc<Feed>,
}

impl Subscriber {
    async fn run(self) {
        // Said once until a subscription works again: a Redis user without
        // the right to subscribe would otherwise log ten lines a second.
        let mut said = false;
        while self.feed.listeners(true).is_some() {
            match self.feed.subscribe().await {
                Ok(subscription) => {
                    said = false;
                    // None: no listener is left, and the feed is idle.
                    let Some(why) = self.listen(subscription).await else {
                        return;
                    };
                    tracing::debug!(channel = %self.feed.channel, why, "change feed lost; subscribing again");
                }
                Err(error) if !said => {
                    said = true;
                    tracing::warn!(
                        channel = %self.feed.channel,
                        %error,
                        "cannot subscribe to the change feed: the deny cache answers nothing until it can"
                    );
                }
                Err(error) => {
                    tracing::debug!(channel = %self.feed.channel, %error, "cannot subscribe to the change feed");
                }
            }
            self.feed.tell(|listener| listener.lost());
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Delivers the changes heard, and proves every [`PING_EVERY`] that
    /// none was missed, until the subscription fails (returns why) or no
    /// listener is left (`None`).
    async fn listen(&self, mut subscription: Subscription) -> Option<&'static str> {
        let feed = &*self.feed;
        loop {
            feed.listeners(true)?;
            if !feed.still_served_by(subscription.node.as_ref()) {
                return Some("another node serves the channel");
            }
            let pinged = Instant::now();
            let ping = subscription.sink.ping::<redis::Value>();
            let answer = tokio::time::timeout(
                CHANGE_FEED_TRUST,
                delivering(feed, &mut subscription.stream, ping),
            )
            .await;
            match answer {
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_))) => return Some("PING failed"),
                Ok(None) => return Some("the connection ended"),
                Err(_) => return Some("PING unanswered"),
            }
            let trust_for = CHANGE_FEED_TRUST.saturating_sub(pinged.elapsed());
            if trust_for.is_zero() {
                return Some("PING answered too late");
            }
            feed.tell(|listener| listener.heard(trust_for));
            let next = tokio::time::sleep_until((pinged + PING_EVERY).into());
            if delivering(feed, &mut subscription.stream, next)
                .await
                .is_none()
            {
                return Some("the connection ended");
            }
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let mut state = self.feed.state.lock();
        let listeners: Vec<_> = state.listeners.iter().filter_map(Weak::upgrade).collect();
        if state.task == Task::Running {
            let next = if listeners.is_empty() {
                Task::Idle
            } else {
                Task::Wanted
            };
            self.feed.set(&mut state, next);
        }
        drop(state);
        for listener in listeners {
            listener.lost();
        }
    }
}

/// Awaits `until`, delivering every message that arrives meanwhile; `None`
/// when the connection ends first. Messages that arrived before `until`'s
/// answer are delivered before it is seen: both come from one connection,
/// in Redis' order, and each poll drains the messages first.
async fn delivering<F: Future>(
    feed: &Feed,
    stream: &mut PubSubStream,
    until: F,
) -> Option<F::Output> {
    let mut until = std::pin::pin!(until);
    std::future::poll_fn(|cx| {
        loop {
            match Pin::new(&mut *stream).poll_next(cx) {
                Poll::Ready(Some(message)) => feed.deliver(&message),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        until.as_mut().poll(cx).map(Some)
    })
    .await
}

/// A change as published: `key KEY`, `rule RATE ALGORITHM`, `limits`, or
/// `all`.
pub(crate) fn encode(change: &Change) -> Vec<u8> {
    match change {
        Change::Key(key) => [b"key ".as_slice(), key.as_bytes()].concat(),
        Change::Rule(rule) => format!("rule {} {}", rule.rate(), rule.algorithm()).into_bytes(),
        Change::Limits => b"limits".to_vec(),
        _ => b"all".to_vec(),
    }
}

/// A change as heard. Whatever cannot be read (too long, not UTF-8, of an
/// unknown kind, written by a newer release) is [`Change::All`]: dropping
/// everything is always safe.
pub(crate) fn decode(payload: &[u8]) -> Change {
    if payload.len() > MAX_MESSAGE {
        return Change::All;
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return Change::All;
    };
    if let Some(key) = text.strip_prefix("key ") {
        return Change::Key(key.to_owned());
    }
    if text == "limits" {
        return Change::Limits;
    }
    if let Some(rule) = text.strip_prefix("rule ")
        && let Some((rate, algorithm)) = rule.split_once(' ')
        && let (Ok(rate), Ok(algorithm)) = (rate.parse::<Rate>(), algorithm.parse::<Algorithm>())
    {
        return Change::Rule(Rule::new(rate).with_algorithm(algorithm));
    }
    Change::All
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_back_as_written_and_anything_else_as_all() {
        let rule = Rule::parse("100/1m")
            .unwrap()
            .with_algorithm(Algorithm::Gcra);
        for change in [
            Change::Key("user:42 with spaces".into()),
            Change::Key(String::new()),
            Change::Rule(rule),
            Change::Limits,
            Change::All,
        ] {
            assert_eq!(decode(&encode(&change)), change);
        }
        for unreadable in [
            b"".as_slice(),
            b"key",
            b"rule 100/1m",
            b"rule 0/1m gcra",
            b"rule 100/1m bucket",
            b"\xff\xfe",
            b"reset user42",
            b"limits 7",
        ] {
            assert_eq!(decode(unreadable), Change::All, "{unreadable:?}");
        }
        let long = [b"key ".as_slice(), &[b'k'; MAX_MESSAGE]].concat();
        assert_eq!(decode(&long), Change::All);
    }

    #[test]
    fn the_channel_is_no_key_of_the_store() {
        assert_eq!(channel("slidegate"), "slidegate:v2:changes");
    }
}
