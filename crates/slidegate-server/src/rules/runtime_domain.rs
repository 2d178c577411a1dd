//! A domain set at run time, as data: what the config in force is made
//! of beside the files ([`RateLimitConfig::with_runtime`](super::RateLimitConfig::with_runtime)).

/// A domain set at run time: its rules as sent, and the version of the
/// change that set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeDomain {
    /// The domain.
    pub domain: String,
    /// Its rules in envoyproxy/ratelimit's form, YAML or JSON, as sent.
    pub text: String,
    /// `yaml` or `json`: how it was sent, and is answered.
    pub format: String,
    /// The version of the change that set it.
    pub version: u64,
}

impl RuntimeDomain {
    /// How the config names the source of this domain.
    pub fn source_name(&self) -> String {
        format!("runtime:{}@{}", self.domain, self.version)
    }
}
