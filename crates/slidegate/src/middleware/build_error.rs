//! Why a layer could not be built.

use crate::error::Error;
use crate::headers::InvalidPolicyName;

/// Why a [`RateLimitBuilder`](super::RateLimitBuilder) could not build its
/// layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A rule that does not parse or is out of range.
    #[error("rule {index}: {source}")]
    Rule {
        /// The position of the rule, from 0.
        index: usize,
        /// What is wrong with it.
        source: Error,
    },
    /// A layer without rules.
    #[error("a rate limit layer needs at least one rule")]
    NoRules,
    /// [`block_for`](super::RateLimitBuilder::block_for) before any rule: it
    /// applies to the rule added last.
    #[error("block_for applies to the rule added before it, and there is none")]
    BlockForWithoutRule,
    /// [`burst`](super::RateLimitBuilder::burst) before any rule: it
    /// applies to the rule added before it.
    #[error("burst applies to the rule added before it, and there is none")]
    BurstWithoutRule,
    /// A policy name that is not a valid sf-string.
    #[error(transparent)]
    PolicyName(#[from] InvalidPolicyName),
    /// An in-flight limit or a reservation that cannot be taken as asked
    /// ([`max_in_flight`](super::RateLimitBuilder::max_in_flight),
    /// [`reserve_and_commit`](super::RateLimitBuilder::reserve_and_commit)).
    #[error("leases: {0}")]
    Lease(Error),
    /// Two policies with the same name.
    #[error("two policies are named {0:?}")]
    DuplicatePolicy(String),
}
