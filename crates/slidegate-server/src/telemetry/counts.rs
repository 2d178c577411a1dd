//! Decisions counted with relaxed atomics: what the status page samples.

use std::sync::atomic::{AtomicU64, Ordering};

/// The decisions of one series (a configured limit, ad-hoc acquires, or
/// the rest), counted since it was made.
#[derive(Debug, Default)]
pub struct Counts {
    allowed: AtomicU64,
    denied: AtomicU64,
    degraded: AtomicU64,
}

impl Counts {
    /// No decision yet.
    pub const fn new() -> Counts {
        Counts {
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            degraded: AtomicU64::new(0),
        }
    }

    /// Counts one decision.
    pub fn add(&self, allowed: bool, degraded: bool) {
        if allowed {
            self.allowed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.denied.fetch_add(1, Ordering::Relaxed);
        }
        if degraded {
            self.degraded.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Allowed, denied and degraded, so far.
    pub fn load(&self) -> [u64; 3] {
        [&self.allowed, &self.denied, &self.degraded].map(|n| n.load(Ordering::Relaxed))
    }
}
