//! The answer to an Envoy check: per descriptor, the limit that applied,
//! the verdict, and the decision behind it, carried to the wire as is
//! (each front reads what its protocol shows from them).

use std::ops::Deref;
use std::time::Duration;

use slidegate::Decision;

use crate::rules::{Enforcement, Limit};

/// `limitRemaining` of a descriptor under an `unlimited: true` limit, as
/// envoyproxy/ratelimit answers it: the largest `uint32`.
pub const UNLIMITED_REMAINING: u64 = u32::MAX as u64;

/// The verdict on a request or a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or not limited).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// What happened to one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No limit applied.
    Unlimited,
    /// Within the limit.
    Allowed,
    /// Over the limit and enforced.
    Denied,
    /// Over a shadow-mode limit: reported OK.
    ShadowDenied,
    /// Over a quota-mode limit: reported OK, listed in the metadata.
    QuotaExceeded,
}

/// The limit a descriptor was decided under: the config's, borrowed, or
/// a limit override's own, boxed (overrides are the rarer case, and the
/// box keeps every plan and status two words wide, not a whole `Limit`).
#[derive(Clone, Debug, PartialEq)]
pub enum AppliedLimit<'c> {
    /// A configured limit, borrowed from the config decided with.
    Configured(&'c Limit),
    /// A limit override's own.
    Override(Box<Limit>),
}

impl Deref for AppliedLimit<'_> {
    type Target = Limit;

    fn deref(&self) -> &Limit {
        match self {
            AppliedLimit::Configured(limit) => limit,
            AppliedLimit::Override(limit) => limit,
        }
    }
}

/// What one descriptor's decision is counted under in the metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricName {
    /// No limit matched (or one was replaced).
    NoLimit,
    /// A configured limit: named by its configured stats key.
    Configured,
    /// A configured limit with `detailed_metric` or `value_to_metric`:
    /// envoyproxy/ratelimit's stats key with the request's values in it.
    Detailed(String),
    /// A limit override sent with the request.
    Override,
}

/// The answer for one descriptor.
#[derive(Clone, Debug, PartialEq)]
pub struct DescriptorStatus<'c> {
    /// The limit that applied (borrowed from the config decided with; an
    /// override's own); `None` when no limit matched or it was replaced.
    pub limit: Option<AppliedLimit<'c>>,
    /// What happened.
    pub verdict: Verdict,
    /// The decision the answer shows: the store's, or the limiter's own
    /// for a limit over whatever the state (`requests_per_unit: 0`, a cost
    /// above what one decision may ask), which waits the whole window.
    /// `None` without a limit, or under an `unlimited` one.
    pub decision: Option<Decision>,
    /// What it is counted under in the metrics.
    pub metric: MetricName,
}

impl DescriptorStatus<'_> {
    /// OVER_LIMIT when denied; shadow and quota limits always say OK.
    pub fn code(&self) -> Code {
        match self.verdict {
            Verdict::Denied => Code::OverLimit,
            _ => Code::Ok,
        }
    }

    /// The limit reported with the status: none without one, or under an
    /// `unlimited` one.
    pub fn current_limit(&self) -> Option<&Limit> {
        self.limit
            .as_deref()
            .filter(|limit| limit.enforcement != Enforcement::Unlimited)
    }

    /// Units left in the window.
    pub fn limit_remaining(&self) -> u64 {
        if let Some(decision) = self.decision {
            return decision.remaining();
        }
        match &self.limit {
            Some(limit) if limit.enforcement == Enforcement::Unlimited => UNLIMITED_REMAINING,
            _ => 0,
        }
    }

    /// When over the limit: the least wait until the same request passes;
    /// otherwise: until the window is empty again.
    pub fn duration_until_reset(&self) -> Duration {
        match self.decision {
            Some(decision) if decision.allowed() => decision.reset_after(),
            Some(decision) => decision.retry_after(),
            None => Duration::ZERO,
        }
    }
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckResponse<'c> {
    /// OVER_LIMIT if any descriptor is.
    pub overall: Code,
    /// One status per descriptor, in order.
    pub statuses: Vec<DescriptorStatus<'c>>,
    /// The request's domain is configured.
    pub known_domain: bool,
    /// Indices of descriptors over a quota-mode limit.
    pub quota_violations: Vec<usize>,
    /// True when some limit is in quota mode.
    pub quota_mode: bool,
    /// True when a failure policy decided some descriptor, not the store.
    pub degraded: bool,
}
