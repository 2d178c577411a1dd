//! Envoy's check as the limiter takes it: a domain and its descriptors,
//! already read from the wire and within the request bounds.

use slidegate::Rate;

use crate::rules::Unit;

/// One request: a domain and its descriptors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckRequest {
    /// The config domain.
    pub domain: String,
    /// The descriptors, each decided against its own limit.
    pub descriptors: Vec<DescriptorRequest>,
    /// Units per descriptor; 0 means 1, as in Envoy.
    pub hits_addend: u64,
}

/// One descriptor of a request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DescriptorRequest {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// Overrides the request's `hits_addend`; 0 consumes nothing and asks
    /// whether one more would pass (the request's own 0 means 1).
    pub hits_addend: Option<u64>,
    /// A limit sent by Envoy in place of the config's.
    pub limit_override: Option<(u64, Unit)>,
}

/// Bad requests, answered with a client error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// No descriptor.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor without entries.
    #[error("descriptor {0} has no entries")]
    EmptyDescriptor(usize),
    /// An override whose rate is out of range.
    #[error(
        "descriptor {0}: the limit override's requests_per_unit must be at most {max}",
        max = Rate::MAX_LIMIT
    )]
    BadOverride(usize),
    /// The store refused the decision (bad input) or failed.
    #[error(transparent)]
    Store(#[from] slidegate::Error),
}
