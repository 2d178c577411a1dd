//! Reading the API's requests: a JSON body for `POST /v1/acquire`, a query
//! string for `GET /v1/keys/{key}`. Every mistake gets its own code and a
//! message that names the field.
//!
//! Unknown fields are refused (`unknown_field`), not ignored: in a rate
//! limiter a misspelt `"cost"` or `"window_ms"` would otherwise silently
//! change what is enforced.

mod acquire;
mod fast;
mod fields;
mod lease;
mod limit;
mod parsed;
mod peek;

pub use acquire::parse_acquire;
pub use lease::{CommitRequest, parse_commit, parse_release};
pub use limit::parse_limit;
pub use parsed::{AcquireRequest, MAX_RULES_PER_REQUEST, MAX_WAIT_MS, PeekRequest};
pub use peek::parse_peek;

#[cfg(test)]
mod tests;
