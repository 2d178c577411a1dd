//! What `GET /v1/stats` answers, and the store's part of it.

use serde::Serialize;

use super::top_keys::TopKey;
use crate::rules::RefusedReload;

/// The store's health as the sampler last saw it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreHealth {
    /// The store answered its readiness check.
    pub ready: bool,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was checked, in milliseconds since the Unix epoch.
    pub checked_at_ms: u64,
}

/// What the binary's store can say about itself: its kind, its breakers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreInfo {
    /// `memory`, `redis` or `redis_cluster`.
    pub kind: String,
    /// The failure policy, for stores that have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// One entry per breaker: the whole store, or each open node's.
    pub breakers: Vec<BreakerState>,
    /// Denials held in the local deny cache.
    pub deny_cache_entries: usize,
}

/// The state of one circuit breaker.
#[derive(Clone, Debug, Serialize)]
pub struct BreakerState {
    /// `store`, or a Redis node's `host:port`.
    pub node: String,
    /// Open: the failure policy decides instead of the store.
    pub open: bool,
}

/// `GET /v1/stats`.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// Now, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// When the newest point was taken.
    pub last_sample_ms: u64,
    /// The time between two points.
    pub interval_ms: u64,
    /// Decisions counted since the series began, over every series.
    pub totals: Totals,
    /// One series per configured limit, plus `adhoc` and `other`; points
    /// oldest first, the newest taken at `last_sample_ms`.
    pub series: Vec<SeriesView>,
    /// The most denied keys right now, most first.
    pub top_denied: Vec<TopKey>,
    /// The store and its breakers.
    pub store: StoreInfo,
    /// The store's last readiness check.
    pub health: StoreHealth,
    /// The rules in force.
    pub config: ConfigView,
}

/// Decision totals.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Totals {
    /// Allowed.
    pub allowed: u64,
    /// Denied.
    pub denied: u64,
    /// Decided by a failure policy (also counted as allowed or denied).
    pub degraded: u64,
}

impl Totals {
    pub(super) fn of([allowed, denied, degraded]: [u64; 3]) -> Totals {
        Totals {
            allowed,
            denied,
            degraded,
        }
    }
}

/// One series of `/v1/stats`.
#[derive(Debug, Serialize)]
pub struct SeriesView {
    /// The configured domain; empty for `adhoc` and `other`.
    pub domain: String,
    /// The limit's stats key, `adhoc` (`/v1/acquire`) or `other` (overrides,
    /// unknown domains, descriptors without a limit).
    pub rule: String,
    /// Allowed per second.
    pub allowed: Vec<u64>,
    /// Denied per second.
    pub denied: Vec<u64>,
    /// Decided by a failure policy per second.
    pub degraded: Vec<u64>,
    /// Since the series began.
    pub total: Totals,
}

/// The rules in force, in short.
#[derive(Debug, Serialize)]
pub struct ConfigView {
    /// When they were loaded.
    pub loaded_at_ms: Option<u64>,
    /// The files they come from, in load order.
    pub files: Vec<String>,
    /// Their domains.
    pub domains: Vec<String>,
    /// The last refused reload, if any.
    pub last_refused: Option<RefusedReload>,
}
