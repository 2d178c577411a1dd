//! GCRA, the generic cell rate algorithm: a token bucket written as one
//! number, the theoretical arrival time (TAT).
//!
//! Each unit of cost moves the TAT forward by the emission interval
//! `T = W / L`; a request passes iff, after moving, the TAT is at most `W`
//! ahead of now. So a burst of `L` passes at once, then one unit every `T`.
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

    /// Units that would pass in a row at `now` (scaled TAT `base` ≥ now).
    fn room(base: u128, now_scaled: u128, limit: u64, window: u64) -> u64 {
        let capacity = window as u128 * limit as u128;
        let used = base - now_scaled;
        (capacity.saturating_sub(used) / window as u128) as u64
    }
}

impl Meter for Gcra {
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        let (limit, window) = (rate.limit(), rate.window_micros());
        let now_scaled = now as u128 * limit as u128;
        let capacity = window as u128 * limit as u128;
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
                let room = Self::room(base, now_scaled, limit, window);
                Decision::from_parts(true, limit, room, 0, reset_now)
            } else {
                let room = Self::room(after, now_scaled, limit, window);
                Decision::from_parts(true, limit, room, 0, until(ceil_div(after, limit), now))
            };
        }
        // Passes once now has caught up to `after - W`.
        let retry_at = ceil_div(after - capacity, limit);
        let room = Self::room(base, now_scaled, limit, window);
        Decision::from_parts(false, limit, room, until(retry_at, now), reset_now)
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
    fn idle_once_the_tat_has_passed() {
        let r = Rate::new(3, Duration::from_secs(1)).unwrap();
        let mut g = Gcra::default();
        g.decide(r, 0, 3);
        assert!(!g.is_idle(r, 999_999));
        assert!(g.is_idle(r, 1_000_000));
    }
}
