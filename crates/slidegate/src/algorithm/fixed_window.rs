//! The fixed window: one counter per window aligned to multiples of `W`.
//!
//! Cheapest of all and what envoyproxy/ratelimit does, but up to `2L`
//! requests can pass around a window boundary.

use super::meter::{Meter, until};
use crate::decision::Decision;
use crate::rate::Rate;

/// The state of one fixed window counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedWindow {
    start: u64,
    count: u64,
}

impl FixedWindow {
    /// What names the admission just recorded, for a give-back: the
    /// start of the window it was counted in.
    pub(crate) fn mark(&self) -> u64 {
        self.start
    }

    /// Takes `cost` back from the window starting at `start`, if it is
    /// still the one kept (counts add up, so this is exact); otherwise
    /// the window has passed and nothing of it counts any more.
    pub(crate) fn give_back(&mut self, start: u64, cost: u64) -> bool {
        if self.start != start {
            return false;
        }
        self.count = self.count.saturating_sub(cost);
        true
    }

    fn roll(&mut self, window: u64, now: u64) {
        let t = now.max(self.start);
        let start = t - t % window;
        if start != self.start {
            self.start = start;
            self.count = 0;
        }
    }
}

impl Meter for FixedWindow {
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        let (limit, window) = (rate.limit(), rate.window_micros());
        self.roll(window, now);
        let end = until(self.start + window, now);
        let reset_now = if self.count > 0 { end } else { 0 };
        let asked = cost.max(1);
        if self.count + asked <= limit {
            if now < self.start && self.count > 0 {
                return ahead_of_now(limit, limit - self.count, self.start, now, reset_now);
            }
            return if cost == 0 {
                Decision::from_parts(true, limit, limit - self.count, 0, reset_now)
            } else {
                Decision::from_parts(true, limit, limit - self.count - cost, 0, end)
            };
        }
        Decision::from_parts(
            false,
            limit,
            limit.saturating_sub(self.count),
            end,
            reset_now,
        )
    }

    fn record(&mut self, rate: Rate, now: u64, cost: u64) {
        self.roll(rate.window_micros(), now);
        self.count += cost;
    }

    fn is_idle(&self, rate: Rate, now: u64) -> bool {
        self.count == 0 || now >= self.start + rate.window_micros()
    }

    /// The count stops at the limit: nothing passes in this window either
    /// way, and the next window starts from zero.
    fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        self.roll(rate.window_micros(), now);
        self.count = self.count.saturating_add(cost).min(rate.limit());
    }
}

/// The answer to a request that would fit a window that has not begun and
/// already counts admissions: the state moved to a later window (a
/// reservation was recorded there, or the clock stepped back), and what
/// passed in the current window is no longer counted, so nothing more
/// passes before the later one begins. (A later window that counts
/// nothing was only rolled to by a check: a request is judged there.)
pub(super) fn ahead_of_now(
    limit: u64,
    remaining: u64,
    start: u64,
    now: u64,
    reset_now: u64,
) -> Decision {
    Decision::from_parts(false, limit, remaining, until(start, now), reset_now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn resets_at_the_aligned_boundary() {
        let r = Rate::new(2, Duration::from_secs(1)).unwrap();
        let mut w = FixedWindow::default();
        assert!(w.decide(r, 999_000, 2).allowed());
        let d = w.decide(r, 999_500, 1);
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Duration::from_micros(500));
        assert!(w.decide(r, 1_000_000, 2).allowed());
        assert!(w.is_idle(r, 2_000_000));
    }

    #[test]
    fn nothing_passes_before_a_later_window_that_holds_a_reservation() {
        let r = Rate::new(2, Duration::from_secs(1)).unwrap();
        let mut w = FixedWindow::default();
        assert!(w.decide(r, 100_000, 2).allowed());
        // A reservation at the next window's start.
        w.record(r, 1_000_000, 1);
        let d = w.check(r, 600_000, 1);
        assert!(!d.allowed(), "the current window's count is gone");
        assert_eq!(d.retry_after(), Duration::from_micros(400_000));
        assert!(w.decide(r, 1_000_000, 1).allowed());
        assert!(!w.decide(r, 1_000_000, 1).allowed());
    }
}
