//! Reservations: wait for a turn instead of being refused.
//!
//! A reservation finds, in one atomic store call, the earliest time at
//! which a request fits every rule, and records it at that time. The
//! caller sleeps until then and proceeds without asking the store again,
//! so waiters are served in the order they reserved and never admitted
//! beyond the limit. See `Store::reserve`.

use std::time::Duration;

use crate::decision::{Decision, micros};
use crate::error::{Error, Result};

/// The longest wait a reservation takes: 4 minutes. A longer `max_wait`
/// is read as this one. A waiting request holds its caller (a connection,
/// a task) for the whole wait: minutes are already a long time for that,
/// and the bound keeps every store's state within its compact form.
pub const MAX_WAIT: Duration = Duration::from_secs(240);

/// `max_wait` in µs, at most [`MAX_WAIT`].
pub(crate) fn wait_micros(max_wait: Duration) -> u64 {
    micros(max_wait.min(MAX_WAIT))
}

/// What a reservation got: an admission at a time to wait for, or the
/// denial a plain decision gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    decision: Decision,
    wait: Duration,
    /// Decided at once by a store that cannot reserve: a denial says when
    /// to ask again, not that no turn came within the wait.
    at_once: bool,
}

impl Reservation {
    /// A reservation of `decision`, granted after `wait_us` µs when
    /// `wait_us` is `Some` (stores build it).
    pub fn new(decision: Decision, wait_us: Option<u64>) -> Reservation {
        Reservation {
            decision,
            wait: Duration::from_micros(wait_us.unwrap_or(0)),
            at_once: false,
        }
    }

    /// The reservation of one key's hits, one per rule, reserved as a
    /// batch: their decisions combined, the batch's wait when granted.
    pub(crate) fn of_hits(batch: BatchReservation) -> Result<Reservation> {
        let wait = batch.granted().then(|| micros(batch.wait));
        let decision = Decision::combine(&batch.decisions).ok_or(Error::NoRules)?;
        Ok(Reservation {
            at_once: batch.at_once,
            ..Reservation::new(decision, wait)
        })
    }

    /// True when a store that cannot reserve decided at once (see
    /// [`BatchReservation::at_once`]): a denial then says when to ask
    /// again.
    pub(crate) fn decided_at_once(&self) -> bool {
        self.at_once
    }

    /// The decision: allowed when the reservation was granted (its
    /// `remaining` and `reset_after` count it, as of now), otherwise the
    /// denial, with the usual `retry_after`.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// How long to wait before proceeding: zero when admitted at once or
    /// denied.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// True when the reservation was granted.
    pub fn granted(&self) -> bool {
        self.decision.allowed()
    }

    /// Sleeps until the reserved time, then the decision: what a caller
    /// that waits for its turn proceeds with.
    pub(crate) async fn wait_for_turn(self) -> Decision {
        if !self.wait.is_zero() {
            tokio::time::sleep(self.wait).await;
        }
        self.decision
    }
}

/// What a reservation of several hits got: one decision per hit, and one
/// wait for all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchReservation {
    decisions: Vec<Decision>,
    wait: Duration,
    /// See [`Reservation`]'s.
    at_once: bool,
}

impl BatchReservation {
    /// A reservation of `decisions`, granted after `wait_us` µs when
    /// `wait_us` is `Some` (stores build it).
    pub fn new(decisions: Vec<Decision>, wait_us: Option<u64>) -> BatchReservation {
        BatchReservation {
            decisions,
            wait: Duration::from_micros(wait_us.unwrap_or(0)),
            at_once: false,
        }
    }

    /// The answer of a store that cannot reserve: `decisions` made at
    /// once, nothing reserved (what [`Store::reserve_batch`]'s default
    /// answers).
    ///
    /// [`Store::reserve_batch`]: crate::store::Store::reserve_batch
    pub(crate) fn at_once(decisions: Vec<Decision>) -> BatchReservation {
        BatchReservation {
            at_once: true,
            ..BatchReservation::new(decisions, None)
        }
    }

    /// One decision per hit, in order: all allowed when granted.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The decisions, taken.
    pub fn into_decisions(self) -> Vec<Decision> {
        self.decisions
    }

    /// How long to wait before proceeding: zero when admitted at once or
    /// denied.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// True when the reservation was granted (every hit allowed).
    pub fn granted(&self) -> bool {
        self.decisions.iter().all(Decision::allowed)
    }
}
