//! What the store answers for a decision its backend could not make.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// What to answer when the backend cannot decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Fail closed: deny.
    Deny,
    /// Fail open: allow.
    Allow,
    /// Decide with an in-process store holding the same rules (limits then
    /// hold per instance, not across instances).
    #[default]
    Local,
}

impl FromStr for FailurePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<FailurePolicy> {
        match s {
            "deny" => Ok(FailurePolicy::Deny),
            "allow" => Ok(FailurePolicy::Allow),
            "local" => Ok(FailurePolicy::Local),
            other => Err(Error::Config(format!(
                "unknown failure policy {other:?} (expected deny, allow or local)"
            ))),
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Deny => "deny",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Local => "local",
        })
    }
}
