//! Waiters for places on Redis, served in arrival order on every server.
//!
//! A waiter takes a ticket and joins its key's queue in Redis (a sorted
//! set beside each concurrency state, scored by arrival: see
//! `concurrency.lua`), in the same script call that finds no place for
//! it. Every later call of that key, waiting or not, counts the places of
//! the waiters ahead of it, so no one passes a waiter. A release
//! publishes the key on the change feed; the waiters of that key in this
//! process are woken ([`Turns`]) and ask again, each as its ticket, and
//! the head of the queue gets the place. A waiter that gives up, fails or
//! is dropped leaves the queue at once (`leases.rs`); one whose process
//! dies is dropped once its deadline passes. The feed may miss a message
//! (a subscription being opened): a waiter also asks again when the
//! earliest place expires and at least every [`ASK_AGAIN`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::changes::Feed;
use crate::store::changes::{Change, ChangeListener};

/// The longest a waiter sleeps without asking again, should the feed
/// miss a release.
pub(super) const ASK_AGAIN: Duration = Duration::from_millis(250);

/// The bells of the keys waited on in this process.
#[derive(Default)]
pub(super) struct Turns {
    bells: Mutex<HashMap<String, Weak<Notify>>>,
    listening: AtomicBool,
}

impl Turns {
    /// The bell of `key`, rung when a place of it may have been freed;
    /// the first one starts listening to `feed`.
    pub(super) fn bell(self: &Arc<Self>, feed: &Arc<Feed>, key: &str) -> Arc<Notify> {
        if !self.listening.swap(true, Ordering::AcqRel) {
            let weak: Weak<Turns> = Arc::downgrade(self);
            feed.listen(weak);
        }
        let mut bells = self.bells.lock();
        if let Some(bell) = bells.get(key).and_then(Weak::upgrade) {
            return bell;
        }
        // Keys no one waits on any more go as new ones come: the map
        // holds at most the keys waited on since the last new one.
        bells.retain(|_, bell| bell.strong_count() > 0);
        let bell = Arc::new(Notify::new());
        bells.insert(key.to_owned(), Arc::downgrade(&bell));
        bell
    }

    fn ring_all(&self) {
        let bells: Vec<Arc<Notify>> = self
            .bells
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for bell in bells {
            bell.notify_waiters();
        }
    }
}

impl ChangeListener for Turns {
    fn changed(&self, change: &Change) {
        match change {
            Change::Key(key) => {
                let bell = self.bells.lock().get(key).and_then(Weak::upgrade);
                if let Some(bell) = bell {
                    bell.notify_waiters();
                }
            }
            _ => self.ring_all(),
        }
    }

    fn heard(&self, _: Duration) {}

    fn lost(&self) {
        self.ring_all();
    }
}
