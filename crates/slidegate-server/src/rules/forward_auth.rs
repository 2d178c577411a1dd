//! The forward-auth mapping of a domain: which request headers feed which
//! descriptor keys when a proxy asks `/v1/forward-auth/{domain}`.
//!
//! ```yaml
//! domain: api
//! forward_auth:
//!   headers:
//!     api_key: X-Api-Key   # the descriptor [api_key=<the header's value>]
//!     tenant: X-Tenant
//! descriptors:
//!   - key: api_key
//!     rate_limit: {unit: minute, requests_per_unit: 600}
//! ```
//!
//! Each named header adds one descriptor of one entry to the three every
//! forwarded request carries (`remote_address`, `method`, `path`), when the
//! request has the header.

/// Descriptor keys every forwarded request already has: a mapping cannot
/// take them, so a header can never stand in for the client's address.
pub const BUILT_IN_KEYS: [&str; 3] = ["remote_address", "method", "path"];

/// Most headers one domain may map: each is a descriptor of every
/// forwarded request.
pub const MAX_HEADER_FEEDS: usize = 16;

/// One request header feeding one descriptor key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderFeed {
    /// The descriptor key.
    pub key: String,
    /// The header's name, in lowercase.
    pub header: String,
}

/// True for a header name as HTTP writes it (RFC 9110's token).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
