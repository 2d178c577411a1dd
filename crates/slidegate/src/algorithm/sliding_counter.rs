//! The sliding window counter: O(1) memory, approximate.
//!
//! Time is cut into fixed windows aligned to multiples of `W`. At elapsed
//! time `e` into the current window, usage is
//! `current + ceil(previous * (W - e) / W)`: the previous window's count is
//! assumed spread evenly over it and the part still inside the sliding
//! window is counted, rounded up so the estimate never under-counts a whole
//! request. A request of cost `c` passes iff `usage + c <= L`.

use super::meter::{Meter, until};
use crate::decision::Decision;
use crate::rate::Rate;

/// The state of one sliding window counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlidingCounter {
    /// Start of the current window.
    start: u64,
    current: u64,
    previous: u64,
}

impl SlidingCounter {
    /// What names the admission just recorded, for a give-back: the
    /// start of the window it was counted in.
    pub(crate) fn mark(&self) -> u64 {
        self.start
    }

    /// Takes `cost` back from the window starting at `start`: from the
    /// current count, or from the previous one once the windows moved on
    /// by one (counts add up, so this is exact); older, it no longer
    /// counts.
    pub(crate) fn give_back(&mut self, rate: Rate, start: u64, cost: u64) -> bool {
        if self.start == start {
            self.current = self.current.saturating_sub(cost);
        } else if self.start == start + rate.window_micros() {
            self.previous = self.previous.saturating_sub(cost);
        } else {
            return false;
        }
        true
    }

    /// Moves the windows forward to the one holding `t` (never backwards).
    fn roll(&mut self, window: u64, now: u64) -> u64 {
        let t = now.max(self.start);
        let start = t - t % window;
        if start != self.start {
            self.previous = if start == self.start + window {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.start = start;
        }
        t
    }

    fn weighted_previous(&self, window: u64, elapsed: u64) -> u64 {
        mul_div_ceil(self.previous, window - elapsed, window)
    }

    fn reset_deadline(&self, window: u64) -> Option<u64> {
        if self.current > 0 {
            Some(self.start + 2 * window)
        } else if self.previous > 0 {
            Some(self.start + window)
        } else {
            None
        }
    }

    /// The least elapsed time `e` into a window (start of the window = 0)
    /// at which `ceil(previous * (W - e) / W) <= room`.
    fn least_elapsed(previous: u64, room: u64, window: u64) -> u64 {
        if previous == 0 {
            return 0;
        }
        window - mul_div_floor(room, window, previous).min(window)
    }
}

impl Meter for SlidingCounter {
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        let (limit, window) = (rate.limit(), rate.window_micros());
        let t = self.roll(window, now);
        let elapsed = t - self.start;
        let usage = self.current + self.weighted_previous(window, elapsed);
        let asked = cost.max(1);
        let reset_now = self.reset_deadline(window).map_or(0, |d| until(d, now));
        if usage + asked <= limit {
            if now < self.start && self.current > 0 {
                let remaining = limit - usage;
                return super::fixed_window::ahead_of_now(
                    limit, remaining, self.start, now, reset_now,
                );
            }
            return if cost == 0 {
                Decision::from_parts(true, limit, limit - usage, 0, reset_now)
            } else {
                let reset = until(self.start + 2 * window, now);
                Decision::from_parts(true, limit, limit - usage - cost, 0, reset)
            };
        }
        let retry_at = if self.current + asked <= limit {
            // Still in this window, once enough of the previous one slid out.
            let room = limit - asked - self.current;
            self.start + Self::least_elapsed(self.previous, room, window)
        } else {
            // In the next window, once enough of this one slid out.
            let room = limit - asked;
            self.start + window + Self::least_elapsed(self.current, room, window)
        };
        Decision::from_parts(
            false,
            limit,
            limit.saturating_sub(usage),
            until(retry_at, now),
            reset_now,
        )
    }

    fn record(&mut self, rate: Rate, now: u64, cost: u64) {
        self.roll(rate.window_micros(), now);
        self.current += cost;
    }

    /// The count stops at [`Rate::MAX_LIMIT`]: unlike a log's, a
    /// counter's usage over the limit still matters in the next window,
    /// where it is weighted.
    fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        self.roll(rate.window_micros(), now);
        self.current = self.current.saturating_add(cost).min(Rate::MAX_LIMIT);
    }

    fn is_idle(&self, rate: Rate, now: u64) -> bool {
        let window = rate.window_micros();
        match self.reset_deadline(window) {
            None => true,
            Some(deadline) => now >= deadline,
        }
    }
}

/// `ceil(a * b / d)` without overflow.
fn mul_div_ceil(a: u64, b: u64, d: u64) -> u64 {
    let p = a as u128 * b as u128;
    p.div_ceil(d as u128) as u64
}

/// `floor(a * b / d)` without overflow (saturating at `u64::MAX`).
fn mul_div_floor(a: u64, b: u64, d: u64) -> u64 {
    u64::try_from(a as u128 * b as u128 / d as u128).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rate(limit: u64, window_ms: u64) -> Rate {
        Rate::new(limit, Duration::from_millis(window_ms)).unwrap()
    }

    #[test]
    fn weights_the_previous_window() {
        let r = rate(10, 1000);
        let mut c = SlidingCounter::default();
        for _ in 0..10 {
            assert!(c.decide(r, 900_000, 1).allowed());
        }
        assert!(!c.decide(r, 999_999, 1).allowed());
        // 25% into the next window: ceil(10 * 0.75) = 8 still count.
        let d = c.decide(r, 1_250_000, 1);
        assert!(d.allowed());
        assert_eq!(d.remaining(), 1);
        assert!(c.decide(r, 1_250_000, 1).allowed());
        let denied = c.decide(r, 1_250_000, 1);
        assert!(!denied.allowed());
        // Needs ceil(10 * (W - e) / W) + 2 + 1 <= 10, i.e. e >= 300ms.
        assert_eq!(denied.retry_after(), Duration::from_millis(50));
        assert!(c.decide(r, 1_300_000, 1).allowed());
    }

    #[test]
    fn retry_waits_for_the_next_window_when_this_one_is_full() {
        let r = rate(4, 1000);
        let mut c = SlidingCounter::default();
        c.decide(r, 100_000, 4);
        let d = c.check(r, 200_000, 3);
        assert!(!d.allowed());
        // Next window: ceil(4 * (W - e) / W) <= 1 needs e >= 750ms.
        assert_eq!(d.retry_after(), Duration::from_micros(1_750_000 - 200_000));
        assert_eq!(d.reset_after(), Duration::from_micros(2_000_000 - 200_000));
    }

    #[test]
    fn idle_after_two_windows() {
        let r = rate(4, 1000);
        let mut c = SlidingCounter::default();
        c.decide(r, 100_000, 1);
        assert!(!c.is_idle(r, 1_999_999));
        assert!(c.is_idle(r, 2_000_000));
    }
}
