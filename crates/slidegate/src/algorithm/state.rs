//! Any of the four algorithms' states, for stores that keep rules of
//! different algorithms side by side.

use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::meter::Meter;
use super::sliding_counter::SlidingCounter;
use super::sliding_log::SlidingLog;
use crate::decision::Decision;
use crate::rate::{Algorithm, Rate, Rule};

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

    /// [`Meter::check`] of the algorithm inside under `rule`: with its
    /// [burst](Rule::with_burst) for a `gcra` rule.
    #[inline]
    pub fn check_rule(&mut self, rule: Rule, now: u64, cost: u64) -> Decision {
        match self {
            State::Gcra(m) => m.check_burst(rule.rate(), rule.burst(), now, cost),
            other => other.check(rule.rate(), now, cost),
        }
    }

    /// [`Meter::decide`] of the algorithm inside under `rule`: with its
    /// [burst](Rule::with_burst) for a `gcra` rule.
    #[inline]
    pub fn decide_rule(&mut self, rule: Rule, now: u64, cost: u64) -> Decision {
        match self {
            State::Gcra(m) => m.decide_burst(rule.rate(), rule.burst(), now, cost),
            other => other.decide(rule.rate(), now, cost),
        }
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
