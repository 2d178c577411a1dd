//! The requests of `POST /v1/acquire` that wait for their turn
//! (`max_wait_ms`): counted, and bounded by `--max-waiting`.
//!
//! A waiting request holds a reservation, a sleeping task and its
//! connection, nothing else: no store call and no worker. Each takes a
//! place before it asks the store and gives it back when its guard drops
//! (answered, or its client gone), so a client that disconnects while it
//! waits leaves no count behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The default of `--max-waiting`.
pub const DEFAULT_MAX_WAITING: usize = 10_000;

/// The count of waiting requests and its bound. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Waiting {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    count: AtomicUsize,
    max: usize,
}

impl Waiting {
    /// Room for `max` waiting requests.
    pub fn new(max: usize) -> Waiting {
        Waiting {
            inner: Arc::new(Inner {
                count: AtomicUsize::new(0),
                max,
            }),
        }
    }

    /// A place for one more waiting request, or `None` when `max` are
    /// already waiting.
    pub fn enter(&self) -> Option<WaitGuard> {
        let inner = &self.inner;
        inner
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < inner.max).then_some(n + 1)
            })
            .ok()?;
        metrics::gauge!("slidegate_waiting_requests").increment(1.0);
        Some(WaitGuard {
            inner: Arc::clone(inner),
        })
    }

    /// Requests waiting now.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::Acquire)
    }
}

impl Default for Waiting {
    fn default() -> Self {
        Waiting::new(DEFAULT_MAX_WAITING)
    }
}

/// One waiting request's place, given back on drop.
#[derive(Debug)]
pub struct WaitGuard {
    inner: Arc<Inner>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.inner.count.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!("slidegate_waiting_requests").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_given_back_on_drop() {
        let waiting = Waiting::new(2);
        let a = waiting.enter().unwrap();
        let b = waiting.enter().unwrap();
        assert!(waiting.enter().is_none());
        drop(a);
        assert_eq!(waiting.count(), 1);
        let _c = waiting.enter().unwrap();
        drop(b);
        assert_eq!(waiting.count(), 1);
    }
}
