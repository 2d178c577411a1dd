//! The four algorithms, each a pure state machine: state + rate + now + cost
//! in, [`Decision`] out. No I/O, no clock, no locks: stores own those.
//!
//! Every algorithm follows the same protocol, which lets a store decide
//! several rules all-or-nothing:
//!
//! 1. [`Meter::check`] for every rule: what would happen, recording nothing
//!    (it may drop entries that have expired, which changes no answer);
//! 2. if every rule allowed, [`Meter::record`] for every rule.
//!
//! A cost of 0 is a *probe*: would a request of cost 1 pass now? Its
//! decision reports the state without consuming anything.
//!
//! Times are whole microseconds; durations in decisions are measured from
//! the `now` passed in.

use std::fmt;
use std::str::FromStr;

use crate::decision::Decision;
use crate::error::Error;
use crate::rate::Rate;

pub mod fixed_window;
pub mod gcra;
pub mod sliding_counter;
pub mod sliding_log;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use sliding_counter::SlidingCounter;
pub use sliding_log::SlidingLog;

/// One algorithm's state for one (key, rule), and its step function.
pub trait Meter: Default {
    /// What a request of `cost` at `now` would get, without recording it.
    /// `cost` 0 probes with cost 1 and reports the state as it is.
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision;

    /// Records a request that [`check`](Meter::check) allowed with the same
    /// `rate`, `now` and `cost`.
    fn record(&mut self, rate: Rate, now: u64, cost: u64);

    /// True when the state is equivalent to a fresh one at `now` and at any
    /// later time: a store may then drop it without changing any answer.
    fn is_idle(&self, rate: Rate, now: u64) -> bool;

    /// Records `cost` at `now` whatever the usage (a rule that
    /// [reports](crate::Rule::reporting)): usage may go over the limit,
    /// and nothing passes until it is back under. What is kept of usage
    /// over the limit is bounded (see each algorithm) so that a reporting
    /// client cannot grow a state without end.
    fn report(&mut self, rate: Rate, now: u64, cost: u64);

    /// Check, then record if allowed: one rule's whole decision.
    fn decide(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        let decision = self.check(rate, now, cost);
        if decision.allowed && cost > 0 {
            self.record(rate, now, cost);
        }
        decision
    }
}

/// Which algorithm enforces a rule.
///
/// | algorithm | exact | memory per key |
/// |---|---|---|
/// | `sliding_log` (default) | yes: no interval of length W ever holds more than L | one entry per admission inside the window |
/// | `sliding_counter` | approximate: weights the previous fixed window | O(1) |
/// | `fixed_window` | per clock-aligned window only (up to 2L across a boundary) | O(1) |
/// | `gcra` | a meter: bursts of L, then one per W/L | O(1) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Algorithm {
    /// Exact sliding log (the default).
    #[default]
    SlidingLog,
    /// Sliding window counter: two fixed windows, the previous one weighted.
    SlidingCounter,
    /// Fixed window aligned to multiples of the window length.
    FixedWindow,
    /// Generic cell rate algorithm (token/leaky bucket as a meter).
    Gcra,
}

impl Algorithm {
    /// All four, in a fixed order.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::Gcra,
    ];

    /// The name used in configs and APIs: `sliding_log`, `sliding_counter`,
    /// `fixed_window`, `gcra`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingCounter => "sliding_counter",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::Gcra => "gcra",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Algorithm, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| Error::UnknownAlgorithm(s.to_owned()))
    }
}

/// The state of any of the four algorithms, for stores that keep rules of
/// different algorithms side by side.
#[derive(Clone, Debug)]
pub enum State {
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// See [`SlidingCounter`].
    SlidingCounter(SlidingCounter),
    /// See [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// See [`Gcra`].
    Gcra(Gcra),
}

impl State {
    /// A fresh state for `algorithm`.
    pub fn new(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::SlidingLog => State::SlidingLog(SlidingLog::default()),
            Algorithm::SlidingCounter => State::SlidingCounter(SlidingCounter::default()),
            Algorithm::FixedWindow => State::FixedWindow(FixedWindow::default()),
            Algorithm::Gcra => State::Gcra(Gcra::default()),
        }
    }
}

macro_rules! dispatch {
    ($self:expr, $m:ident => $body:expr) => {
        match $self {
            State::SlidingLog($m) => $body,
            State::SlidingCounter($m) => $body,
            State::FixedWindow($m) => $body,
            State::Gcra($m) => $body,
        }
    };
}

impl State {
    /// [`Meter::check`] of the algorithm inside.
    #[inline]
    pub fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        dispatch!(self, m => m.check(rate, now, cost))
    }

    /// [`Meter::record`] of the algorithm inside.
    #[inline]
    pub fn record(&mut self, rate: Rate, now: u64, cost: u64) {
        dispatch!(self, m => m.record(rate, now, cost))
    }

    /// [`Meter::is_idle`] of the algorithm inside.
    pub fn is_idle(&self, rate: Rate, now: u64) -> bool {
        dispatch!(self, m => m.is_idle(rate, now))
    }

    /// [`Meter::report`] of the algorithm inside.
    #[inline]
    pub fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        dispatch!(self, m => m.report(rate, now, cost))
    }

    /// [`Meter::decide`] of the algorithm inside.
    #[inline]
    pub fn decide(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        dispatch!(self, m => m.decide(rate, now, cost))
    }

    /// Heap bytes held beyond the enum itself (the sliding log's entries).
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match self {
            State::SlidingLog(log) => log.heap_bytes(),
            _ => 0,
        }
    }

    /// The heap bytes [`record`](Self::record) at `now` would allocate
    /// (only a sliding log's full buffer grows).
    #[inline]
    pub(crate) fn record_growth(&self, now: u64) -> usize {
        match self {
            State::SlidingLog(log) => log.record_growth(now),
            _ => 0,
        }
    }

    /// Allocates what [`record_growth`](Self::record_growth) said.
    pub(crate) fn grow_for_record(&mut self) {
        if let State::SlidingLog(log) = self {
            log.grow_for_record();
        }
    }
}

/// The answer to a hit whose key is locked out under its rule until
/// `blocked_until` ([`Rule::block_for`](crate::Rule::block_for)), given
/// what the algorithm answers: denied until the later of the block's end
/// and the time the algorithm says, nothing remaining. Unchanged when the
/// block has ended (or there is none: 0).
pub(crate) fn blocked(decision: Decision, blocked_until: u64, now: u64) -> Decision {
    if blocked_until <= now {
        return decision;
    }
    let rest = blocked_until - now;
    let retry = if decision.allowed {
        rest
    } else {
        decision.retry_after_us.max(rest)
    };
    Decision::from_parts(
        false,
        decision.limit,
        0,
        retry,
        decision.reset_after_us.max(rest),
    )
}

/// The answer to a reporting hit that was denied, once its cost is
/// recorded: `probe` is a check of cost 0 after recording. Still denied,
/// with the state as the report left it: when the next request may pass.
pub(crate) fn reported(probe: Decision) -> Decision {
    let retry = if probe.allowed {
        0
    } else {
        probe.retry_after_us
    };
    Decision::from_parts(
        false,
        probe.limit,
        probe.remaining,
        retry,
        probe.reset_after_us,
    )
}

/// `deadline - now`, or 0 when the deadline has passed.
#[inline]
pub(crate) fn until(deadline: u64, now: u64) -> u64 {
    deadline.saturating_sub(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert!(matches!(
            "leaky".parse::<Algorithm>(),
            Err(Error::UnknownAlgorithm(_))
        ));
    }
}
