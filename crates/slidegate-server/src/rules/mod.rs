//! Rate limit rules in envoyproxy/ratelimit's YAML format, so existing
//! configs load unchanged, with two slidegate extensions inside
//! `rate_limit`: `window` (any duration, in place of `unit`) and
//! `algorithm` (`sliding_log` by default).
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: path
//!     value: /login
//!     rate_limit: {requests_per_unit: 5, window: 250ms, algorithm: sliding_log}
//! ```
//!
//! A domain may also say which request headers feed which descriptor
//! keys for proxies' forward-auth requests ([`forward_auth`]).

pub mod carry;
mod current;
mod error;
mod files;
pub mod forward_auth;
mod limit;
mod matcher;
mod reload;
mod runtime;
mod runtime_domain;
mod set;
pub mod xds;
mod yaml;
mod yaml_tree;

pub use carry::Carry;
pub use current::{CurrentConfig, RefusedReload};
pub use error::ConfigError;
pub use files::{MAX_FILE_BYTES, read_sources};
pub use limit::{Enforcement, Limit, LimitId, Unit};
pub use matcher::Matched;
pub use reload::{ConfigWatcher, LiveConfig, ReloadCounts, ReloadOutcome};
pub use runtime::{BODY_NAME, DomainRefused, check_domain};
pub use runtime_domain::RuntimeDomain;
pub use set::{LoadOptions, RateLimitConfig};

#[cfg(test)]
mod tests;
