//! The answer to "may this request pass?".

use std::time::Duration;

/// The outcome of one rate-limit decision.
///
/// Durations are kept in whole microseconds; the `_ms` and `_secs`
/// accessors round *up*, so a client that waits what it is told never
/// comes back too early.
///
/// ```
/// use slidegate::{MemoryStore, Rule};
/// let store = MemoryStore::new();
/// let rule = Rule::parse("2/1s")?;
/// assert!(store.acquire("k", &[rule], 1)?.allowed());
/// let second = store.acquire("k", &[rule], 1)?;
/// assert_eq!(second.remaining(), 0);
/// let third = store.acquire("k", &[rule], 1)?;
/// assert!(!third.allowed());
/// assert!(third.retry_after() > std::time::Duration::ZERO);
/// # Ok::<(), slidegate::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) degraded: bool,
}

impl Decision {
    /// Builds a decision from its parts (durations in microseconds).
    /// Stores and tests use it; `retry_after` is forced to 0 when allowed.
    pub fn from_parts(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_us: u64,
        reset_after_us: u64,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after_us: if allowed { 0 } else { retry_after_us },
            reset_after_us,
            degraded: false,
        }
    }

    /// A decision made without the store, by a failure policy: allowed
    /// (fail open) or denied (fail closed, retry after `retry_after`).
    pub fn by_policy(allowed: bool, limit: u64, retry_after: Duration) -> Decision {
        let retry_after_us = if allowed { 0 } else { micros(retry_after) };
        Decision {
            allowed,
            limit,
            remaining: if allowed { limit.saturating_sub(1) } else { 0 },
            retry_after_us,
            reset_after_us: retry_after_us,
            degraded: true,
        }
    }

    /// True when the request may pass (and, unless it was a probe, was recorded).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The limit of the rule this decision reports on (the tightest one
    /// when several rules were checked).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Units still available in the window after this decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The least wait after which the same request would pass, if nothing
    /// else is admitted meanwhile. Zero when allowed.
    pub fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_us)
    }

    /// The time until the state is empty again (full quota available).
    pub fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after_us)
    }

    /// [`retry_after`](Self::retry_after) in whole milliseconds, rounded up.
    pub fn retry_after_ms(&self) -> u64 {
        self.retry_after_us.div_ceil(1_000)
    }

    /// [`reset_after`](Self::reset_after) in whole milliseconds, rounded up.
    pub fn reset_after_ms(&self) -> u64 {
        self.reset_after_us.div_ceil(1_000)
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up
    /// (the `Retry-After` header's unit).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after_us.div_ceil(1_000_000)
    }

    /// [`reset_after`](Self::reset_after) in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after_us.div_ceil(1_000_000)
    }

    /// True when the store could not be asked and a failure policy decided.
    pub fn degraded(&self) -> bool {
        self.degraded
    }

    /// The same decision marked as made by a failure policy.
    pub fn into_degraded(self) -> Decision {
        Decision {
            degraded: true,
            ..self
        }
    }

    /// Folds the per-rule decisions of one request into the one the caller
    /// sees: allowed only if every rule allowed; when denied, the rule that
    /// makes the caller wait longest; when allowed, the rule with the fewest
    /// units left. `reset_after` is the longest of all.
    pub fn combine(decisions: &[Decision]) -> Option<Decision> {
        let reset_after_us = decisions.iter().map(|d| d.reset_after_us).max()?;
        let degraded = decisions.iter().any(|d| d.degraded);
        let deciding = if decisions.iter().all(|d| d.allowed) {
            decisions.iter().min_by_key(|d| d.remaining)?
        } else {
            decisions
                .iter()
                .filter(|d| !d.allowed)
                .max_by_key(|d| d.retry_after_us)?
        };
        Some(Decision {
            reset_after_us,
            degraded,
            ..*deciding
        })
    }
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_ms_and_seconds() {
        let d = Decision::from_parts(false, 10, 0, 1_001, 1_000_001);
        assert_eq!(d.retry_after_ms(), 2);
        assert_eq!(d.retry_after_secs(), 1);
        assert_eq!(d.reset_after_ms(), 1_001);
        assert_eq!(d.reset_after_secs(), 2);
        let exact = Decision::from_parts(false, 10, 0, 2_000, 3_000_000);
        assert_eq!(exact.retry_after_ms(), 2);
        assert_eq!(exact.reset_after_secs(), 3);
    }

    #[test]
    fn allowed_decisions_never_ask_to_wait() {
        let d = Decision::from_parts(true, 10, 9, 5_000, 7_000);
        assert_eq!(d.retry_after(), Duration::ZERO);
    }

    #[test]
    fn combine_reports_the_longest_wait_when_denied() {
        let a = Decision::from_parts(true, 10, 3, 0, 10);
        let b = Decision::from_parts(false, 5, 0, 700, 900);
        let c = Decision::from_parts(false, 7, 1, 800, 20);
        let all = Decision::combine(&[a, b, c]).unwrap();
        assert!(!all.allowed());
        assert_eq!(all.limit(), 7);
        assert_eq!(all.retry_after(), Duration::from_micros(800));
        assert_eq!(all.reset_after(), Duration::from_micros(900));
    }

    #[test]
    fn combine_reports_the_fewest_remaining_when_allowed() {
        let a = Decision::from_parts(true, 10, 3, 0, 10);
        let b = Decision::from_parts(true, 100, 2, 0, 50);
        let all = Decision::combine(&[a, b]).unwrap();
        assert!(all.allowed());
        assert_eq!((all.limit(), all.remaining()), (100, 2));
        assert_eq!(all.reset_after(), Duration::from_micros(50));
        assert!(Decision::combine(&[]).is_none());
    }
}
