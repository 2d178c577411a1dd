//! redis-cell's `CL.THROTTLE key max_burst count_per_period period
//! [quantity]` as a rule of the library's GCRA, and its reply.
//!
//! redis-cell's GCRA lets `max_burst + 1` requests through at once, then
//! one every `period / count_per_period` seconds (the emission interval).
//! The library's GCRA with a limit of `max_burst + 1` over a window of
//! `max_burst + 1` emission intervals is the same bucket: it admits,
//! refuses, and reports what remains and when to come back exactly as
//! redis-cell does (the window is kept to the microsecond, rounded up).
//! The reply is redis-cell's five integers:
//!
//! | | |
//! |---|---|
//! | limited | 0 or 1 |
//! | limit | `max_burst + 1` |
//! | remaining | what the bucket still admits |
//! | retry_after | seconds until the request would pass; -1 when allowed (or when `quantity` is larger than the limit, which never passes) |
//! | reset_after | seconds until the bucket is full again |
//!
//! Both times are rounded up to whole seconds, so a client that waits
//! what it is told is never early (redis-cell drops fractions below a
//! millisecond first; this never does).

use std::time::Duration;

use slidegate::{Algorithm, Decision, Rate, Rule};

use crate::bounds::RequestBounds;

/// A `CL.THROTTLE` rule and its quantity, read from the arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// The GCRA rule: `max_burst + 1` per `max_burst + 1` intervals.
    pub rule: Rule,
    /// The units asked; 0 looks without consuming.
    pub quantity: u64,
}

impl Throttle {
    /// Reads `max_burst`, `count_per_period`, `period` (seconds) and the
    /// quantity, within `bounds` (the limit within `--max-adhoc-limit`,
    /// the window within `--max-adhoc-window`).
    pub fn new(
        max_burst: i64,
        count: i64,
        period: i64,
        quantity: i64,
        bounds: &RequestBounds,
    ) -> Result<Throttle, String> {
        let max_burst = u64::try_from(max_burst).map_err(|_| "max_burst must be 0 or more")?;
        let count = u64::try_from(count)
            .ok()
            .filter(|c| *c > 0)
            .ok_or("count per period must be 1 or more (zero rates are not supported)")?;
        let period = u64::try_from(period)
            .ok()
            .filter(|p| *p > 0)
            .ok_or("period must be 1 second or more (zero rates are not supported)")?;
        let quantity = u64::try_from(quantity).map_err(|_| "quantity must be 0 or more")?;
        let limit = max_burst
            .checked_add(1)
            .filter(|l| *l <= bounds.max_adhoc_limit.min(Rate::MAX_LIMIT))
            .ok_or_else(|| {
                format!(
                    "max_burst + 1 must be at most {} (--max-adhoc-limit)",
                    bounds.max_adhoc_limit
                )
            })?;
        // The window: `limit` emission intervals of `period / count` s.
        let window_micros =
            (u128::from(period) * 1_000_000 * u128::from(limit)).div_ceil(u128::from(count));
        let max_window = bounds.max_adhoc_window.min(Rate::MAX_WINDOW);
        let window = u64::try_from(window_micros)
            .ok()
            .map(Duration::from_micros)
            .filter(|w| *w <= max_window)
            .ok_or_else(|| {
                format!(
                    "(max_burst + 1) * period / count must be at most {} s (--max-adhoc-window)",
                    max_window.as_secs()
                )
            })?;
        let rate = Rate::new(limit, window).map_err(|_| {
            "the emission interval times (max_burst + 1) must be 1 ms or more".to_owned()
        })?;
        Ok(Throttle {
            rule: Rule::new(rate).with_algorithm(Algorithm::Gcra),
            quantity,
        })
    }

    /// True when the quantity can never pass (more than the limit): the
    /// state is looked at, not changed, and the reply is limited with no
    /// time to retry.
    pub fn never_passes(&self) -> bool {
        self.quantity > self.rule.limit()
    }

    /// redis-cell's reply for `decision`.
    pub fn reply(&self, decision: &Decision) -> [i64; 5] {
        let limited = self.never_passes() || !decision.allowed();
        let retry_after = if limited && !self.never_passes() {
            seconds_up(decision.retry_after())
        } else {
            -1
        };
        [
            i64::from(limited),
            to_i64(self.rule.limit()),
            to_i64(decision.remaining()),
            retry_after,
            seconds_up(decision.reset_after()),
        ]
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Whole seconds, rounded up.
fn seconds_up(d: Duration) -> i64 {
    to_i64(
        d.as_micros()
            .div_ceil(1_000_000)
            .try_into()
            .unwrap_or(u64::MAX),
    )
}

#[cfg(test)]
mod tests {
    use slidegate::algorithm::Gcra;
    use slidegate::algorithm::Meter;

    use super::*;

    /// redis-cell's own table (`it_rate_limits`): a limit of 5, one per
    /// second; each case is (ms since start, quantity, limited, remaining,
    /// retry_after, reset_after), its times already rounded up as the reply
    /// rounds them.
    #[test]
    fn redis_cells_own_cases_give_its_replies() {
        let bounds = RequestBounds::default();
        let cases: [(u64, i64, i64, i64, i64, i64); 15] = [
            (0, 6, 1, 5, -1, 0),
            (0, 1, 0, 4, -1, 1),
            (0, 1, 0, 3, -1, 2),
            (0, 1, 0, 2, -1, 3),
            (0, 1, 0, 1, -1, 4),
            (0, 1, 0, 0, -1, 5),
            (0, 1, 1, 0, 1, 5),
            (3000, 1, 0, 2, -1, 3),
            (3100, 1, 0, 1, -1, 4),
            (4000, 1, 0, 1, -1, 4),
            (8000, 1, 0, 4, -1, 1),
            (9500, 1, 0, 4, -1, 1),
            (9500, 0, 0, 4, -1, 1),
            (9500, 2, 0, 2, -1, 3),
            (9500, 5, 1, 2, 3, 3),
        ];
        let mut state = Gcra::default();
        for (i, (ms, quantity, limited, remaining, retry, reset)) in cases.into_iter().enumerate() {
            let throttle = Throttle::new(4, 1, 1, quantity, &bounds).unwrap();
            let rate = throttle.rule.rate();
            let now = ms * 1000;
            let decision = if throttle.never_passes() {
                let mut look = state;
                look.decide(rate, now, 0)
            } else {
                state.decide(rate, now, throttle.quantity)
            };
            assert_eq!(
                throttle.reply(&decision),
                [limited, 5, remaining, retry, reset],
                "case {i}"
            );
        }
    }

    #[test]
    fn arguments_out_of_range_are_refused() {
        let bounds = RequestBounds::default();
        assert!(Throttle::new(-1, 1, 1, 1, &bounds).is_err());
        assert!(Throttle::new(1, 0, 1, 1, &bounds).is_err());
        assert!(Throttle::new(1, 1, 0, 1, &bounds).is_err());
        assert!(Throttle::new(1, 1, 1, -1, &bounds).is_err());
        let too_long = Throttle::new(1, 1, 86_400, 1, &bounds).unwrap_err();
        assert!(too_long.contains("--max-adhoc-window"), "{too_long}");
        let too_many = Throttle::new(1_000_000, 1_000_000, 1, 1, &bounds).unwrap_err();
        assert!(too_many.contains("--max-adhoc-limit"), "{too_many}");
        let t = Throttle::new(15, 30, 60, 1, &bounds).unwrap();
        assert_eq!(t.rule.limit(), 16);
        assert_eq!(t.rule.window_micros(), 32_000_000);
    }
}
