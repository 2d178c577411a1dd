//! The leases a layer takes per request, as its builder set them:
//! [`max_in_flight`](super::RateLimitBuilder::max_in_flight) and
//! [`reserve_and_commit`](super::RateLimitBuilder::reserve_and_commit).

use std::time::Duration;

use super::policies::PolicySet;
use crate::rate::Rule;

/// The policy name of an in-flight limit in the `RateLimit` fields.
pub(crate) const IN_FLIGHT_POLICY: &str = "in-flight";

/// The leases a layer takes per request.
#[derive(Debug)]
pub(crate) struct LeaseOptions {
    pub in_flight: Option<InFlightRule>,
    /// The lease time of a reserved budget.
    pub budget: Option<Duration>,
}

/// At most `rule.limit()` requests in flight per key, each place held
/// for at most `lease`.
#[derive(Debug)]
pub(crate) struct InFlightRule {
    pub rule: Rule,
    pub lease: Duration,
    /// Its policy, for the `RateLimit` fields of a refusal.
    pub policies: PolicySet,
}
