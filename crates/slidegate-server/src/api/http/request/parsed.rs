//! What the requests of the HTTP API are read into.

use std::time::Duration;

use compact_str::CompactString;
use slidegate::Rule;
use smallvec::SmallVec;

/// The most rules one request may carry.
pub const MAX_RULES_PER_REQUEST: usize = 16;

/// A parsed `POST /v1/acquire`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRequest {
    /// The key to decide for, as the client wrote it: an ad-hoc key (see
    /// [`keyspace::adhoc_key`](crate::keys::adhoc_key)), of any length;
    /// held inline up to 24 bytes, as most keys are.
    pub key: CompactString,
    /// One rule, or several decided all-or-nothing. Empty when the request
    /// names none: the limits set for the key at run time decide it (and
    /// a key without any is refused). One is held inline: most requests
    /// carry one.
    pub rules: SmallVec<[Rule; 1]>,
    /// Units the request consumes; 0 consumes nothing and asks whether one
    /// more would pass (denied on a full window).
    pub cost: u64,
    /// How long the request may wait for its turn when it does not fit
    /// now (`max_wait_ms`, 0 by default: refused at once); at most
    /// [`MAX_WAIT_MS`].
    pub max_wait: Duration,
    /// A lease rather than a decision (`lease_ms`): the cost is reserved
    /// (or, under concurrency rules, places are held) for this long, until
    /// committed or released. `None`: a plain decision.
    pub lease: Option<Duration>,
}

/// The most `max_wait_ms` may ask: 5 s. A waiting request is answered
/// within the API's request timeout (10 s) with room to spare.
pub const MAX_WAIT_MS: u64 = 5_000;

/// A parsed `GET /v1/keys/{key}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekRequest {
    /// The key to look at.
    pub key: String,
    /// The rule to look at it under.
    pub rule: Rule,
}
