//! Rules looked up per key in a [`LimitTable`] (the builder's
//! [`rules_from`](super::RateLimitBuilder::rules_from)): a key with limits
//! set at run time is decided under them, each set's policies prepared
//! once per version.

use std::sync::Arc;

use dashmap::DashMap;

use super::policies::PolicySet;
use crate::headers;
use crate::limits::LimitTable;

/// Prepared policy sets kept at most: beyond, the cache starts afresh
/// (each set is made again on its next use).
const MAX_CACHED: usize = 4096;

/// The table, and the policies of its sets.
pub(crate) struct RuntimeRules {
    table: LimitTable,
    /// By the version of the change that set them: a version names one
    /// set of rules for good.
    cache: DashMap<u64, Arc<PolicySet>>,
}

impl RuntimeRules {
    pub(crate) fn new(table: LimitTable) -> RuntimeRules {
        RuntimeRules {
            table,
            cache: DashMap::new(),
        }
    }

    /// The policies of `key`'s limits, if it has any.
    pub(crate) fn policies_for(&self, key: &str) -> Option<Arc<PolicySet>> {
        if self.table.version() == 0 {
            return None;
        }
        let limits = self.table.get(key)?;
        if let Some(set) = self.cache.get(&limits.version()) {
            return Some(Arc::clone(set.value()));
        }
        let rules = limits.rules();
        let names = headers::default_policy_names(rules.len());
        let set =
            Arc::new(PolicySet::new(names.into_iter().zip(rules.iter().copied()).collect()).ok()?);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert(limits.version(), Arc::clone(&set));
        Some(set)
    }
}

impl std::fmt::Debug for RuntimeRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeRules")
            .field("keys", &self.table.len())
            .finish_non_exhaustive()
    }
}
