//! What the status page shows (`GET /ui`, `GET /v1/stats`): decisions per
//! second over the last minutes per domain and rule, the most denied keys
//! right now, the store's health, and the last refused config reload.
//!
//! The decision path pays little for it: a decision adds to relaxed atomic
//! counters (one set per configured limit, kept in the
//! [`LimitTable`]), with no lock and no allocation; a denial also updates
//! a bounded top-K sketch of keys under a short mutex. A sampler task
//! ([`Telemetry::spawn_sampler`](super::Telemetry::spawn_sampler)) turns
//! the counters into per-second points once a second, off the decision
//! path.
//!
//! The top-K sketch is space-saving (Metwally et al.) over [`TOP_K`]
//! entries: any key denied more often than 1/[`TOP_K`] of the denials is in
//! it, and each count is over by at most its `error`. Counts are halved every
//! [`DECAY_EVERY`], so the list says who is denied now, not since the start.
//! Keys are client data: they are kept truncated to [`MAX_KEY_CHARS`]
//! characters, and `/v1/stats` is behind the admin token when one is set.
//!
//! The statistics belong to one server: each [`Stats`] is made by the
//! server that shows it, and passed to what records into it.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use slidegate::Decision;

mod history;
mod snapshot;
mod top_keys;

pub use history::HISTORY_POINTS;
use history::{History, Source};
pub use snapshot::{
    BreakerState, ConfigView, SeriesView, Snapshot, StoreHealth, StoreInfo, Totals,
};
pub use top_keys::{MAX_KEY_CHARS, TopKey, TopKeys, truncated_key};

use super::counts::Counts;
use super::limits::LimitTable;
use crate::epoch::millis_since_epoch;
use crate::limiter::ADHOC_RULE;
use crate::limiter::check::{CheckRequest, CheckResponse, MetricName, Verdict};
use crate::rules::{RateLimitConfig, RefusedReload};
use top_keys::descriptor_key;

/// Entries of the top denied keys sketch.
pub const TOP_K: usize = 64;

/// How often the sampler takes a point.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// How often the top-K counts are halved.
pub const DECAY_EVERY: Duration = Duration::from_secs(10);

/// The series ids of the ad-hoc and other decisions; a configured limit's
/// is its table's generation and its id (generations start at 1).
const ADHOC_SOURCE: u64 = u64::MAX;
const OTHER_SOURCE: u64 = u64::MAX - 1;

type StoreProbe = Box<dyn Fn() -> StoreInfo + Send + Sync>;

/// Every statistic of one server.
pub struct Stats {
    acquire: Counts,
    other: Counts,
    top: Mutex<TopKeys>,
    history: Mutex<History>,
    health: Mutex<StoreHealth>,
    probe: OnceLock<StoreProbe>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    /// Empty statistics.
    pub fn new() -> Stats {
        Stats {
            acquire: Counts::new(),
            other: Counts::new(),
            top: Mutex::new(TopKeys::new(TOP_K)),
            history: Mutex::default(),
            health: Mutex::default(),
            probe: OnceLock::new(),
        }
    }

    /// Records one `/v1/acquire` decision for the ad-hoc `key`.
    pub fn record_acquire(&self, key: &str, decision: &Decision) {
        self.acquire.add(decision.allowed(), decision.degraded());
        if !decision.allowed() {
            self.deny(truncated_key([key]));
        }
    }

    /// Records the decision of every descriptor of one Envoy check, each
    /// configured limit's in its counters of `table` (the table of the
    /// config it was decided with; `None` when that config was replaced
    /// meanwhile: the decision then goes uncounted here).
    pub fn record_check(
        &self,
        request: &CheckRequest,
        response: &CheckResponse<'_>,
        table: Option<&LimitTable>,
    ) {
        for (i, status) in response.statuses.iter().enumerate() {
            let counts = match (&status.metric, status.limit.as_deref()) {
                (MetricName::Configured | MetricName::Detailed(_), Some(limit)) => {
                    table.and_then(|t| t.entry(limit.id)).map(|e| &e.counts)
                }
                _ => Some(&self.other),
            };
            let denied = status.verdict == Verdict::Denied;
            if let Some(counts) = counts {
                counts.add(!denied, response.degraded);
            }
            if denied && let Some(descriptor) = request.descriptors.get(i) {
                self.deny(descriptor_key(&request.domain, &descriptor.entries));
            }
        }
    }

    fn deny(&self, key: String) {
        lock(&self.top).add(&key);
    }

    /// Sets how to ask the store about its breakers (once; later calls are
    /// ignored).
    pub fn set_store_probe(&self, probe: impl Fn() -> StoreInfo + Send + Sync + 'static) {
        let _ = self.probe.set(Box::new(probe));
    }

    /// Takes one point of every series: the ad-hoc and other decisions,
    /// and each limit of `table`, since the last point.
    pub fn sample(&self, table: &LimitTable) {
        let mut current = Vec::with_capacity(2 + table.entries().len());
        current.push(Source {
            domain: String::new(),
            rule: ADHOC_RULE.to_owned(),
            id: ADHOC_SOURCE,
            counts: self.acquire.load(),
        });
        current.push(Source {
            domain: String::new(),
            rule: "other".to_owned(),
            id: OTHER_SOURCE,
            counts: self.other.load(),
        });
        for (index, entry) in table.entries().iter().enumerate() {
            current.push(Source {
                domain: entry.domain.clone(),
                rule: entry.full_key.clone(),
                id: (table.generation() << 32) | index as u64,
                counts: entry.counts.load(),
            });
        }
        let mut history = lock(&self.history);
        history.push(current, millis_since_epoch(SystemTime::now()));
        let decay = (DECAY_EVERY.as_secs() / SAMPLE_EVERY.as_secs().max(1)).max(1);
        if history.ticks.is_multiple_of(decay) {
            drop(history);
            lock(&self.top).decay();
        }
    }

    /// Records the result of a readiness check of the store.
    pub fn set_health(&self, result: Result<(), String>) {
        *lock(&self.health) = StoreHealth {
            ready: result.is_ok(),
            error: result.err(),
            checked_at_ms: millis_since_epoch(SystemTime::now()),
        };
    }

    /// Everything `GET /v1/stats` answers, with `config` the rules in
    /// force and `last_refused` the last reload refused.
    pub fn snapshot(
        &self,
        config: &RateLimitConfig,
        last_refused: Option<RefusedReload>,
    ) -> Snapshot {
        let history = lock(&self.history);
        let series = history
            .series
            .iter()
            .map(|s| SeriesView {
                domain: s.domain.clone(),
                rule: s.rule.clone(),
                allowed: s.points.iter().map(|p| p[0]).collect(),
                denied: s.points.iter().map(|p| p[1]).collect(),
                degraded: s.points.iter().map(|p| p[2]).collect(),
                total: Totals::of(s.since_start),
            })
            .collect::<Vec<_>>();
        let last_ms = history.last_ms;
        drop(history);
        let mut totals = [0u64; 3];
        for s in &series {
            totals[0] += s.total.allowed;
            totals[1] += s.total.denied;
            totals[2] += s.total.degraded;
        }
        Snapshot {
            now_ms: millis_since_epoch(SystemTime::now()),
            last_sample_ms: last_ms,
            interval_ms: SAMPLE_EVERY.as_millis() as u64,
            totals: Totals::of(totals),
            series,
            top_denied: lock(&self.top).top(),
            store: self.probe.get().map(|probe| probe()).unwrap_or_default(),
            health: lock(&self.health).clone(),
            config: ConfigView {
                loaded_at_ms: config.loaded_at().map(millis_since_epoch),
                files: config.files(),
                domains: {
                    let mut domains: Vec<String> = config.domains().map(str::to_owned).collect();
                    domains.sort_unstable();
                    domains
                },
                last_refused,
            },
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_the_decisions_since_the_last_point() {
        let stats = Stats::new();
        let table = LimitTable::of(&RateLimitConfig::default());
        let allowed = Decision::from_parts(true, 10, 9, 0, 1_000);
        let denied = Decision::from_parts(false, 10, 0, 500, 1_000);
        stats.sample(&table);
        stats.record_acquire("k", &allowed);
        stats.record_acquire("k", &allowed);
        stats.record_acquire("bad", &denied);
        stats.sample(&table);
        stats.record_acquire("k", &allowed);
        stats.sample(&table);
        let snapshot = stats.snapshot(&RateLimitConfig::default(), None);
        let adhoc = snapshot
            .series
            .iter()
            .find(|s| s.rule == ADHOC_RULE)
            .unwrap();
        assert_eq!(adhoc.allowed, vec![0, 2, 1]);
        assert_eq!(adhoc.denied, vec![0, 1, 0]);
        assert_eq!(snapshot.top_denied[0].key, "bad");
    }
}
