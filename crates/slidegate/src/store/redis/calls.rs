//! How a store's calls to Redis are made: on which clock, with what
//! expiry margin and deadline, and whether decisions are coalesced
//! ([`Coalesce`], see `coalesce.rs` for how).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;

/// How a `RedisStore` sends decisions to Redis: one
/// script call per decision, or coalesced (the default), and the bounds
/// of a coalesced call.
///
/// ```
/// use slidegate::store::redis::Coalesce;
/// let coalesce = Coalesce::on().max_in_flight(2).max_decisions(64);
/// assert!(coalesce.is_on());
/// assert!(!Coalesce::off().is_on());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce {
    pub(super) on: bool,
    pub(super) max_in_flight: usize,
    pub(super) max_decisions: usize,
    pub(super) max_bytes: usize,
}

impl Coalesce {
    /// Coalescing, with the default bounds: 4 calls in flight per node,
    /// 128 decisions and 64 KiB of parameters per call.
    pub const fn on() -> Coalesce {
        Coalesce {
            on: true,
            max_in_flight: 4,
            max_decisions: 128,
            max_bytes: 64 << 10,
        }
    }

    /// One script call per decision, sent by its caller (what every
    /// decision cost before coalescing).
    pub const fn off() -> Coalesce {
        Coalesce {
            on: false,
            ..Coalesce::on()
        }
    }

    /// True when decisions are coalesced.
    pub const fn is_on(&self) -> bool {
        self.on
    }

    /// Calls one node may have in flight at once (at least 1): while they
    /// are out, decisions wait and go together in the next.
    pub const fn max_in_flight(mut self, calls: usize) -> Coalesce {
        self.max_in_flight = if calls == 0 { 1 } else { calls };
        self
    }

    /// The most decisions one call decides (at least 1). A longer call
    /// holds Redis longer (Redis runs one script at a time).
    pub const fn max_decisions(mut self, decisions: usize) -> Coalesce {
        self.max_decisions = if decisions == 0 { 1 } else { decisions };
        self
    }

    /// The most bytes of keys and parameters one call carries (a call
    /// always takes at least one decision).
    pub const fn max_bytes(mut self, bytes: usize) -> Coalesce {
        self.max_bytes = bytes;
        self
    }
}

impl Default for Coalesce {
    fn default() -> Coalesce {
        Coalesce::on()
    }
}

/// What every lane of one store shares: how calls are made.
pub(crate) struct Calls {
    /// The caller's clock, or `None` for Redis' `TIME`.
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) margin_ms: u64,
    /// The deadline of one call, and of one decision's wait.
    pub(crate) timeout: Duration,
    pub(crate) coalesce: Coalesce,
}
