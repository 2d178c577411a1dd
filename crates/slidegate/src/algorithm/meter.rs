//! The protocol every algorithm follows (see the [module
//! documentation](super)), and what the four share.

use crate::decision::Decision;
use crate::rate::Rate;

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

/// `deadline - now`, or 0 when the deadline has passed.
#[inline]
pub(crate) fn until(deadline: u64, now: u64) -> u64 {
    deadline.saturating_sub(now)
}
