//! The requests of this process waiting for places under a concurrency
//! rule, by key, and what wakes them: the change feed, on which a release
//! of places in any process publishes its key while someone waits for
//! them (see `lease.lua`). Waiters also ask again on their own, so a feed
//! that is down delays them, never strands them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::store::changes::{Change, ChangeListener};

/// Waiters' wake-ups by key.
#[derive(Default)]
pub(crate) struct Wakers {
    by_key: Mutex<HashMap<String, Weak<Notify>>>,
    /// Listening to the change feed (from the first waiter on).
    listening: AtomicBool,
}

impl Wakers {
    /// What wakes the waiters of `key` (the same for every waiter of it
    /// while one holds it).
    pub(crate) fn waker(&self, key: &str) -> Arc<Notify> {
        let mut by_key = self.by_key.lock();
        if let Some(notify) = by_key.get(key).and_then(Weak::upgrade) {
            return notify;
        }
        if by_key.len() >= 64 {
            by_key.retain(|_, notify| notify.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        by_key.insert(key.to_owned(), Arc::downgrade(&notify));
        notify
    }

    /// True the first time only: whoever gets it starts listening.
    pub(crate) fn start_listening(&self) -> bool {
        !self.listening.swap(true, Ordering::AcqRel)
    }

    fn wake(&self, key: &str) {
        let notify = self.by_key.lock().get(key).and_then(Weak::upgrade);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .by_key
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for notify in all {
            notify.notify_waiters();
        }
    }
}

impl ChangeListener for Wakers {
    fn changed(&self, change: &Change) {
        match change {
            Change::Key(key) => self.wake(key),
            _ => self.wake_all(),
        }
    }

    fn heard(&self, _trust_for: Duration) {}

    /// Changes may have been missed: every waiter asks again.
    fn lost(&self) {
        self.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_of_a_key_wakes_its_waiters_only() {
        let wakers = Wakers::default();
        let (a, b) = (wakers.waker("a"), wakers.waker("b"));
        assert!(Arc::ptr_eq(&a, &wakers.waker("a")));
        let (woken_a, woken_b) = (a.notified(), b.notified());
        tokio::pin!(woken_a, woken_b);
        woken_a.as_mut().enable();
        woken_b.as_mut().enable();
        wakers.changed(&Change::Key("a".into()));
        assert!(futures_poll(woken_a.as_mut()));
        assert!(!futures_poll(woken_b.as_mut()));
        wakers.lost();
        assert!(futures_poll(woken_b.as_mut()));
    }

    fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.poll(&mut cx).is_ready()
    }
}
