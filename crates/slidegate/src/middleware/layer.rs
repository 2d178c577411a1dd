//! [`RateLimitLayer`]: the tower layer, a checked configuration shared by
//! every service it wraps.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::decide::Config;
use super::service::RateLimit;
use crate::rate::Rule;

/// A tower [`Layer`] that rate limits requests: see the [module
/// docs](super).
///
/// Cheap to clone: clones share the configuration and the store.
pub struct RateLimitLayer<St, K> {
    config: Arc<Config<St, K>>,
}

impl<St, K> RateLimitLayer<St, K> {
    /// The layer of a configuration the builder checked.
    pub(super) fn from_config(config: Config<St, K>) -> Self {
        RateLimitLayer {
            config: Arc::new(config),
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        self.config.policies.rules()
    }

    /// The policy names, in the order of the rules.
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.config.policies.names().iter().map(|name| &**name)
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.config.store
    }
}

impl<St, K> Clone for RateLimitLayer<St, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimitLayer<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St, K> Layer<S> for RateLimitLayer<St, K> {
    type Service = RateLimit<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.config))
    }
}
