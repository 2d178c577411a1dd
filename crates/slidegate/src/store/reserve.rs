//! Reservations: wait for a turn instead of being refused.
//!
//! A reservation finds, in one atomic store call, the earliest time at
//! which a request fits every rule, and records it at that time. The
//! caller sleeps until then and proceeds without asking the store again,
//! so waiters are served in the order they reserved and never admitted
//! beyond the limit. See [`Store::reserve`](super::Store::reserve).

use std::time::Duration;

use crate::decision::{Decision, micros};

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
}

impl Reservation {
    /// A reservation of `decision`, granted after `wait_us` µs when
    /// `wait_us` is `Some` (stores build it).
    pub fn new(decision: Decision, wait_us: Option<u64>) -> Reservation {
        Reservation {
            decision,
            wait: Duration::from_micros(wait_us.unwrap_or(0)),
        }
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
}

/// What a reservation of several hits got: one decision per hit, and one
/// wait for all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchReservation {
    decisions: Vec<Decision>,
    wait: Duration,
}

impl BatchReservation {
    /// A reservation of `decisions`, granted after `wait_us` µs when
    /// `wait_us` is `Some` (stores build it).
    pub fn new(decisions: Vec<Decision>, wait_us: Option<u64>) -> BatchReservation {
        BatchReservation {
            decisions,
            wait: Duration::from_micros(wait_us.unwrap_or(0)),
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

/// [`Store::reserve`](super::Store::reserve) of one key under `rules`,
/// through the store's own `reserve_batch`.
pub(crate) async fn reserve_by_batch<S: super::Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[crate::rate::Rule],
    cost: u64,
    max_wait: Duration,
) -> crate::error::Result<Reservation> {
    super::check_cost(rules, cost)?;
    let hits: Vec<super::Hit<'_>> = rules
        .iter()
        .map(|&rule| super::Hit::new(key, rule, cost))
        .collect();
    let reserved = store.reserve_batch(&hits, max_wait).await?;
    let wait = reserved.granted().then(|| micros(reserved.wait()));
    let decision = Decision::combine(reserved.decisions()).ok_or(crate::error::Error::NoRules)?;
    Ok(Reservation::new(decision, wait))
}

/// [`Store::acquire_wait`](super::Store::acquire_wait) of a store that
/// reserves: one reservation, then a sleep until its time.
pub(crate) async fn wait_for_turn<S: super::Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[crate::rate::Rule],
    cost: u64,
    max_wait: Duration,
) -> crate::error::Result<Decision> {
    let reservation = store.reserve(key, rules, cost, max_wait).await?;
    if !reservation.wait().is_zero() {
        tokio::time::sleep(reservation.wait()).await;
    }
    Ok(reservation.decision())
}
