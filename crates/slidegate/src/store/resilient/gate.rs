//! One circuit breaker per node, for stores made of nodes that fail on
//! their own (the masters of a Redis Cluster).
//!
//! [`ResilientStore`](super::ResilientStore) runs every backend call in the
//! scope of a [`Gate`] (a tokio task-local, so the call reaches the store
//! through any wrapper). A store that knows which node serves a key asks
//! the gate before it calls that node ([`enter`]) and settles the permit
//! with the node's verdict; the resilient store then leaves the verdict to
//! the nodes: one dead master opens its own breaker, and keys on the other
//! masters are still decided by the store. A store that never asks (the
//! memory store, a single Redis) is judged as a whole, as before.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::breaker::{Breaker, Permit, Settings};
use crate::error::Error;

tokio::task_local! {
    static GATE: Arc<Gate>;
}

/// The breakers of every node seen so far, by node name (`host:port`).
#[derive(Debug)]
pub(crate) struct Nodes {
    settings: Settings,
    breakers: Mutex<HashMap<Arc<str>, Arc<Breaker>>>,
}

impl Nodes {
    pub(crate) fn new(settings: Settings) -> Nodes {
        Nodes {
            settings,
            breakers: Mutex::new(HashMap::new()),
        }
    }

    fn breaker(&self, node: &str) -> Arc<Breaker> {
        let mut breakers = self.breakers.lock();
        if let Some(breaker) = breakers.get(node) {
            return Arc::clone(breaker);
        }
        let name: Arc<str> = node.into();
        let breaker = Arc::new(Breaker::new(Arc::clone(&name), self.settings));
        breakers.insert(name, Arc::clone(&breaker));
        breaker
    }

    /// The nodes whose circuit is open, sorted.
    pub(crate) fn open(&self) -> Vec<String> {
        let mut open: Vec<String> = self
            .breakers
            .lock()
            .values()
            .filter(|b| b.is_open())
            .map(|b| b.name().to_owned())
            .collect();
        open.sort_unstable();
        open
    }
}

/// What one backend call carries: the node breakers and the call's deadline.
#[derive(Debug)]
pub(crate) struct Gate {
    nodes: Arc<Nodes>,
    deadline: Instant,
    by_node: AtomicBool,
}

impl Gate {
    pub(crate) fn new(nodes: Arc<Nodes>, deadline: Instant) -> Arc<Gate> {
        Arc::new(Gate {
            nodes,
            deadline,
            by_node: AtomicBool::new(false),
        })
    }

    /// Runs `call` with this gate in scope.
    pub(crate) fn scope<F: Future>(self: &Arc<Self>, call: F) -> impl Future<Output = F::Output> {
        GATE.scope(Arc::clone(self), call)
    }

    /// True when the store asked for a node: its verdicts went to the nodes.
    pub(crate) fn by_node(&self) -> bool {
        self.by_node.load(Ordering::Acquire)
    }
}

/// True inside a resilient store's call: a store that knows its nodes
/// should ask the gate before it calls one.
pub(crate) fn active() -> bool {
    GATE.try_with(|_| ()).is_ok()
}

/// Leave to call `node` now: `Ok(None)` outside a resilient store (no
/// breaker to ask), `Ok(Some(permit))` to be settled with the node's
/// verdict, or a store failure when the node's circuit is open.
pub(crate) fn enter(node: &str) -> Result<Option<Permit>, Error> {
    GATE.try_with(|gate| {
        gate.by_node.store(true, Ordering::Release);
        gate.nodes
            .breaker(node)
            .permit(gate.deadline)
            .map(Some)
            .ok_or_else(|| refusal(node))
    })
    .unwrap_or(Ok(None))
}

/// The error of a call to `node` refused by its open circuit.
pub(crate) fn refusal(node: &str) -> Error {
    Error::CircuitOpen {
        node: node.to_owned(),
    }
}

/// True when a call to `node` would be refused now (asked before a
/// decision that spans nodes records anything). Counts as asking: the
/// verdicts of this call go to the nodes.
pub(crate) fn refuses(node: &str) -> bool {
    GATE.try_with(|gate| {
        gate.by_node.store(true, Ordering::Release);
        gate.nodes.breaker(node).refuses()
    })
    .unwrap_or(false)
}

/// Settles a node permit with a call's result: the node answered (even
/// with an error about the request), or it failed.
pub(crate) fn settle<T>(permit: Option<Permit>, result: &Result<T, Error>) {
    let Some(permit) = permit else { return };
    match result {
        Err(error) if error.is_store_failure() => permit.failure(),
        _ => permit.success(),
    }
}
