//! GCRA, the generic cell rate algorithm: a token bucket written as one
//! number, the theoretical arrival time (TAT).
//!
//! Each unit of cost moves the TAT forward by the emission interval
//! `T = W / L`; a request passes iff, after moving, the TAT is at most
//! `B · T` ahead of now, for a bucket of `B` units (the rule's burst, `L`
//! unless given: then `B · T = W`). So a burst of `B` passes at once, then
//! one unit every `T`.
//! `T` is usually not a whole number of microseconds, so the TAT is kept
//! exactly, scaled by `L` (in units of `1/L` µs): no rounding drift.

use super::meter::{Meter, until};
use crate::decision::Decision;
use crate::rate::Rate;

/// The state of one GCRA meter: the TAT scaled by the limit.
///
/// Kept as two `u64` halves rather than a `u128`, so the state (and every
/// store slot holding one) stays 8-byte aligned: 16-byte alignment would
/// pad every key of the memory store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gcra {
    tat_high: u64,
    tat_low: u64,
}

impl Gcra {
    fn tat_scaled(&self) -> u128 {
        (u128::from(self.tat_high) << 64) | u128::from(self.tat_low)
    }

    fn set_tat_scaled(&mut self, tat: u128) {
        self.tat_high = (tat >> 64) as u64;
        self.tat_low = tat as u64;
    }

    /// The theoretical arrival time in whole microseconds, rounded up.
    pub fn tat_micros(&self, rate: Rate) -> u64 {
        ceil_div(self.tat_scaled(), rate.limit())
    }

    /// Gives back `cost` of `cost + kept` units admitted at `at`, at
    /// `now`: the TAT moves back by what is left of the returned units'
    /// emission intervals once the time since `at`, beyond the intervals
    /// of the `kept` units, has drained them, `min(c, c + k - (now - at))`
    /// intervals' worth (none once that is negative). Never more: had
    /// the lease asked for `kept` units only, the TAT would be no lower
    /// (see the proof in the Redis store's `cross_slot.rs`, of which this
    /// is the case `kept = 0`).
    pub(crate) fn give_back(&mut self, rate: Rate, now: u64, at: u64, cost: u64, kept: u64) {
        let (limit, window) = (rate.limit() as u128, rate.window_micros() as u128);
        let returned = cost as u128 * window;
        let admitted = returned + kept as u128 * window;
        let elapsed = now.saturating_sub(at) as u128 * limit;
        let back = admitted.saturating_sub(elapsed).min(returned);
        let tat = self.tat_scaled();
        self.set_tat_scaled(tat.saturating_sub(back));
    }

    /// Units that would pass in a row at `now` (scaled TAT `base` ≥ now)
    /// from a bucket of `capacity` (scaled).
    fn room(base: u128, now_scaled: u128, capacity: u128, window: u64) -> u64 {
        let used = base - now_scaled;
        (capacity.saturating_sub(used) / window as u128) as u64
    }

    /// [`Meter::check`] for a bucket of `burst` units refilled at `rate`
    /// ([`Rule::with_burst`](crate::Rule::with_burst)): `remaining` runs
    /// from 0 to `burst`, the decision's limit is the rate's.
    pub fn check_burst(&mut self, rate: Rate, burst: u64, now: u64, cost: u64) -> Decision {
        let (limit, window) = (rate.limit(), rate.window_micros());
        let now_scaled = now as u128 * limit as u128;
        let capacity = window as u128 * burst as u128;
        let tat_scaled = self.tat_scaled();
        let base = tat_scaled.max(now_scaled);
        let asked = cost.max(1);
        let after = base + asked as u128 * window as u128;
        let reset_now = if tat_scaled > now_scaled {
            until(self.tat_micros(rate), now)
        } else {
            0
        };
        if after - now_scaled <= capacity {
            return if cost == 0 {
                let room = Self::room(base, now_scaled, capacity, window);
                Decision::from_parts(true, limit, room, 0, reset_now)
            } else {
                let room = Self::room(after, now_scaled, capacity, window);
                Decision::from_parts(true, limit, room, 0, until(ceil_div(after, limit), now))
            };
        }
        // Passes once now has caught up to `after - B·T`.
        let retry_at = ceil_div(after - capacity, limit);
        let room = Self::room(base, now_scaled, capacity, window);
        Decision::from_parts(false, limit, room, until(retry_at, now), reset_now)
    }

    /// [`Meter::decide`] for a bucket of `burst` units: see
    /// [`check_burst`](Gcra::check_burst).
    pub fn decide_burst(&mut self, rate: Rate, burst: u64, now: u64, cost: u64) -> Decision {
        let decision = self.check_burst(rate, burst, now, cost);
        if decision.allowed && cost > 0 {
            self.record(rate, now, cost);
        }
        decision
    }
}

impl Meter for Gcra {
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        self.check_burst(rate, rate.limit(), now, cost)
    }

    fn record(&mut self, rate: Rate, now: u64, cost: u64) {
        let now_scaled = now as u128 * rate.limit() as u128;
        let tat = self.tat_scaled().max(now_scaled) + cost as u128 * rate.window_micros() as u128;
        self.set_tat_scaled(tat);
    }

    fn is_idle(&self, rate: Rate, now: u64) -> bool {
        self.tat_scaled() <= now as u128 * rate.limit() as u128
    }

    /// The TAT moves as for an admission, but stops at
    /// [`Rate::MAX_WINDOW`] past the window: a report never holds a key
    /// for more than ten years.
    fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        let limit = rate.limit() as u128;
        let now_scaled = now as u128 * limit;
        let tat = self.tat_scaled().max(now_scaled) + cost as u128 * rate.window_micros() as u128;
        let horizon = (now as u128 + rate.window_micros() as u128 + REPORT_HORIZON as u128) * limit;
        self.set_tat_scaled(tat.min(horizon));
    }
}

/// How far past the window a report may move the TAT (µs): [`Rate::MAX_WINDOW`].
pub(crate) const REPORT_HORIZON: u64 = 10 * 365 * 86_400 * 1_000_000;

fn ceil_div(scaled: u128, limit: u64) -> u64 {
    u64::try_from(scaled.div_ceil(limit as u128)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_of_l_then_one_per_interval() {
        let r = Rate::new(3, Duration::from_secs(1)).unwrap();
        let mut g = Gcra::default();
        for left in [2, 1, 0] {
            let d = g.decide(r, 0, 1);
            assert!(d.allowed());
            assert_eq!(d.remaining(), left);
        }
        let d = g.decide(r, 0, 1);
        assert!(!d.allowed());
        // T = 333_333.33 µs: the next unit passes at ceil(T).
        assert_eq!(d.retry_after(), Duration::from_micros(333_334));
        assert!(!g.decide(r, 333_333, 1).allowed());
        assert!(g.decide(r, 333_334, 1).allowed());
        assert_eq!(g.tat_micros(r), 1_333_334);
    }

    #[test]
    fn a_burst_of_b_then_one_per_interval() {
        let r = Rate::new(10, Duration::from_secs(1)).unwrap();
        let mut g = Gcra::default();
        assert_eq!(g.check_burst(r, 50, 0, 0).remaining(), 50);
        for left in (0..50).rev() {
            let d = g.decide_burst(r, 50, 0, 1);
            assert!(d.allowed());
            assert_eq!((d.limit(), d.remaining()), (10, left));
        }
        let d = g.decide_burst(r, 50, 0, 1);
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Duration::from_millis(100));
        // Full again once the TAT has passed: 50 units of 100 ms.
        assert_eq!(d.reset_after(), Duration::from_secs(5));
        assert!(g.decide_burst(r, 50, 100_000, 1).allowed());
        assert!(!g.decide_burst(r, 50, 100_000, 1).allowed());
        // A burst below the limit: 3 at once, then one per 100 ms.
        let mut g = Gcra::default();
        assert!(g.decide_burst(r, 3, 0, 3).allowed());
        assert!(!g.decide_burst(r, 3, 0, 1).allowed());
        assert!(g.decide_burst(r, 3, 100_000, 1).allowed());
    }

    #[test]
    fn idle_once_the_tat_has_passed() {
        let r = Rate::new(3, Duration::from_secs(1)).unwrap();
        let mut g = Gcra::default();
        g.decide(r, 0, 3);
        assert!(!g.is_idle(r, 999_999));
        assert!(g.is_idle(r, 1_000_000));
    }
}
