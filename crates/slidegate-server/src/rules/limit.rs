//! One configured limit, as plain data: what it enforces, how it is
//! reported, and its id (what the service's counters of it are keyed by).

use std::time::Duration;

use slidegate::Rule;

/// The time unit of a limit, as envoyproxy/ratelimit names them, or a
/// window of any length (slidegate's `window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days.
    Year,
    /// A `window` that is not one of the units above.
    Window(Duration),
}

impl Unit {
    pub(super) fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// A window expressed as a unit when it is exactly one.
    pub(super) fn of_window(window: Duration) -> Unit {
        [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ]
        .into_iter()
        .find(|u| u.duration() == window)
        .unwrap_or(Unit::Window(window))
    }

    /// The unit's length.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
            Unit::Window(w) => return w,
        })
    }
}

/// What a matched limit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// `unlimited: true`: always OK, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: always over the limit, nothing counted.
    Blocked,
    /// Counted by the store under this rule.
    Rule(Rule),
}

/// A limit's place in its [`RateLimitConfig`](super::RateLimitConfig):
/// `0..` in load order, dense, so that what is kept per limit (its
/// counters) is found by index. Ids are per config: a reloaded config
/// numbers its limits afresh, under a new
/// [`generation`](super::RateLimitConfig::generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LimitId(pub u32);

impl LimitId {
    /// The id of a limit sent by Envoy with a request (an override): it
    /// belongs to no config, and is counted as `override`.
    pub const OVERRIDE: LimitId = LimitId(u32::MAX);

    /// The index of the limit in its config's list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One configured limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Its place in its config ([`LimitId::OVERRIDE`] for an override).
    pub id: LimitId,
    /// What it does.
    pub enforcement: Enforcement,
    /// Requests per unit, as configured.
    pub requests_per_unit: u64,
    /// The unit (or window), as configured.
    pub unit: Unit,
    /// `name`, for `replaces`.
    pub name: Option<String>,
    /// Names of the limits this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// Counted and reported, never enforced.
    pub shadow_mode: bool,
    /// A soft quota: counted, reported in the response's metadata, never enforced.
    pub quota_mode: bool,
    /// Metrics carry the descriptor's value.
    pub detailed_metric: bool,
    /// envoyproxy/ratelimit's stats key: `domain.key_value.subkey`.
    pub full_key: String,
}
