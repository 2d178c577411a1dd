//! Any of the five algorithms' states, for stores that keep rules of
//! different algorithms side by side.

use super::concurrency::Concurrency;
use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::meter::Meter;
use super::sliding_counter::SlidingCounter;
use super::sliding_log::SlidingLog;
use crate::decision::Decision;
use crate::rate::{Algorithm, Rate, Rule};

/// The state of any of the five algorithms, for stores that keep rules of
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
    /// See [`Concurrency`].
    Concurrency(Concurrency),
}

impl State {
    /// A fresh state for `algorithm`.
    pub fn new(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::SlidingLog => State::SlidingLog(SlidingLog::default()),
            Algorithm::SlidingCounter => State::SlidingCounter(SlidingCounter::default()),
            Algorithm::FixedWindow => State::FixedWindow(FixedWindow::default()),
            Algorithm::Gcra => State::Gcra(Gcra::default()),
            Algorithm::Concurrency => State::Concurrency(Concurrency::default()),
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
            State::Concurrency($m) => $body,
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

    /// What names the admission just recorded at `now`, for a
    /// [give-back](Self::give_back): a sliding log's newest entry time
    /// (where it recorded), a window's start, a GCRA's `now`. A
    /// concurrency lease is named by its expiry instead (0 here).
    pub(crate) fn mark(&self, now: u64) -> u64 {
        match self {
            State::SlidingLog(log) => log.newest_time(),
            State::SlidingCounter(counter) => counter.mark(),
            State::FixedWindow(window) => window.mark(),
            State::Gcra(_) => now,
            State::Concurrency(_) => 0,
        }
    }

    /// Gives back `cost` of an admission of `cost + kept` named by `mark`
    /// (see [`mark`](Self::mark)), at `now`, as far as the algorithm can
    /// (see each); false when nothing of it counts any more.
    pub(crate) fn give_back(
        &mut self,
        rate: Rate,
        now: u64,
        mark: u64,
        cost: u64,
        kept: u64,
    ) -> bool {
        match self {
            State::SlidingLog(log) => super::log_algorithm::LogEntries::give_back(log, mark, cost),
            State::SlidingCounter(counter) => counter.give_back(rate, mark, cost),
            State::FixedWindow(window) => window.give_back(mark, cost),
            State::Gcra(gcra) => {
                gcra.give_back(rate, now, mark, cost, kept);
                true
            }
            State::Concurrency(held) => held.release(mark, cost),
        }
    }

    /// Heap bytes held beyond the enum itself (the sliding log's entries).
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match self {
            State::SlidingLog(log) => log.heap_bytes(),
            State::Concurrency(held) => held.heap_bytes(),
            _ => 0,
        }
    }

    /// The heap bytes [`record`](Self::record) at `now` would allocate
    /// (only a sliding log's full buffer grows).
    #[inline]
    pub(crate) fn record_growth(&self, now: u64) -> usize {
        match self {
            State::SlidingLog(log) => log.record_growth(now),
            State::Concurrency(held) => held.growth(),
            _ => 0,
        }
    }

    /// Allocates what [`record_growth`](Self::record_growth) said.
    pub(crate) fn grow_for_record(&mut self) {
        match self {
            State::SlidingLog(log) => log.grow_for_record(),
            State::Concurrency(held) => held.grow(),
            _ => {}
        }
    }
}
