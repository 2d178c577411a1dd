//! What the layer does when it cannot decide a request: no key can be
//! extracted ([`MissingKey`]), or the store is down ([`OnStoreError`]).

use std::time::Duration;

use http::StatusCode;

/// What happens to a request from which no key can be extracted (no peer
/// address, no authenticated user, no API key header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer with this status and a problem+json body saying why (gRPC:
    /// the matching code). Statuses outside 4xx are replaced by 400.
    /// The default, `Reject(400 Bad Request)`, fails closed.
    Reject(StatusCode),
    /// Pass the request on, unlimited.
    Allow,
    /// Count every keyless request in one shared bucket (key `nokey`),
    /// under the same rules.
    Shared,
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What happens when the store is down: it times out, cannot be reached,
/// or fails ([`Error::Timeout`](crate::Error::Timeout), [`Error::Store`](crate::Error::Store)).
///
/// Only for those: a full store is always answered with 429, a cost above
/// a limit with 413, and a store that refuses the layer's configuration
/// with 503 (see the [module docs](super#when-the-store-cannot-decide)).
///
/// The default passes requests while the store is down, so an outage of
/// the limiter does not become an outage of the service; the limit does
/// not hold meanwhile. Choose [`Deny`](OnStoreError::Deny) where it must
/// hold (logins, costly calls), or give the layer a
/// [`ResilientStore`](crate::store::resilient::ResilientStore) with the
/// `Local` policy, which keeps deciding per instance while Redis is away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreError {
    /// Pass the request on (fail open). The default.
    #[default]
    Allow,
    /// Answer `503 Service Unavailable` (gRPC `UNAVAILABLE`) with this
    /// `Retry-After` (fail closed).
    Deny {
        /// The wait suggested to the client.
        retry_after: Duration,
    },
}
