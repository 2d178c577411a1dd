//! What the status page shows (`GET /ui`, `GET /v1/stats`): decisions per
//! second over the last minutes per domain and rule, the most denied keys
//! right now, the store's health, and the last refused config reload.
//!
//! The decision path pays little for it: a decision adds to relaxed atomic
//! counters (one set per configured limit, [`Counts`]), with no lock and no
//! allocation; a denial also updates a bounded top-K sketch of keys under
//! a short mutex. A sampler task ([`spawn_sampler`]) turns the counters into
//! per-second points once a second, off the decision path.
//!
//! The top-K sketch is space-saving (Metwally et al.) over [`TOP_K`]
//! entries: any key denied more often than 1/[`TOP_K`] of the denials is in
//! it, and each count is over by at most its `error`. Counts are halved every
//! [`DECAY_EVERY`], so the list says who is denied now, not since the start.
//! Keys are client data: they are kept truncated to [`MAX_KEY_CHARS`]
//! characters, and `/v1/stats` is behind the admin token when one is set.
//!
//! The statistics are per process (one server per process): they live in a
//! static ([`global`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::Serialize;
use slidegate::{Decision, Store};

use crate::limiter::check::{CheckRequest, CheckResponse, MetricName, Outcome};
use crate::rules::RateLimitConfig;

/// Entries of the top denied keys sketch.
pub const TOP_K: usize = 64;

/// Longest key shown, in characters; a longer one is cut and ends with `…`.
pub const MAX_KEY_CHARS: usize = 64;

/// How many per-second points each series keeps: 5 minutes.
pub const HISTORY_POINTS: usize = 300;

/// How often the sampler takes a point.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// How often the top-K counts are halved.
pub const DECAY_EVERY: Duration = Duration::from_secs(10);

/// How long the sampler waits for the store's readiness.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// The decisions of one series (a configured limit, ad-hoc acquires, or
/// the rest), counted since it was made.
#[derive(Default)]
pub struct Counts {
    allowed: AtomicU64,
    denied: AtomicU64,
    degraded: AtomicU64,
}

impl Counts {
    fn add(&self, allowed: bool, degraded: bool) {
        if allowed {
            self.allowed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.denied.fetch_add(1, Ordering::Relaxed);
        }
        if degraded {
            self.degraded.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn load(&self) -> [u64; 3] {
        [&self.allowed, &self.denied, &self.degraded].map(|n| n.load(Ordering::Relaxed))
    }
}

impl Clone for Counts {
    /// A copy starts from zero: counts belong to one limit of one config.
    fn clone(&self) -> Self {
        Counts::default()
    }
}

impl PartialEq for Counts {
    /// Counts are not part of what a limit is.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Counts {}

impl std::fmt::Debug for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counts")
    }
}

/// One entry of the top denied keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopKey {
    /// The key, truncated to [`MAX_KEY_CHARS`] characters.
    pub key: String,
    /// Denials counted (decayed), an over-estimate by at most `error`.
    pub count: u64,
    /// How much of `count` may belong to keys this entry replaced.
    pub error: u64,
}

/// A space-saving sketch of the most frequent keys, in at most `capacity`
/// entries.
#[derive(Debug)]
pub struct TopKeys {
    entries: Vec<TopKey>,
    capacity: usize,
}

impl TopKeys {
    /// An empty sketch of `capacity` entries.
    pub const fn new(capacity: usize) -> TopKeys {
        TopKeys {
            entries: Vec::new(),
            capacity,
        }
    }

    /// Counts one occurrence of `key` (already truncated).
    pub fn add(&mut self, key: &str) {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.key == key) {
            entry.count += 1;
            return;
        }
        if self.entries.len() < self.capacity {
            self.entries.push(TopKey {
                key: key.to_owned(),
                count: 1,
                error: 0,
            });
            return;
        }
        // The least counted entry gives its place, and its count as the
        // newcomer's possible error.
        if let Some(least) = self.entries.iter_mut().min_by_key(|e| e.count) {
            least.key.clear();
            least.key.push_str(key);
            least.error = least.count;
            least.count += 1;
        }
    }

    /// Halves every count, dropping the entries that reach zero.
    pub fn decay(&mut self) {
        for entry in &mut self.entries {
            entry.count /= 2;
            entry.error /= 2;
        }
        self.entries.retain(|e| e.count > 0);
    }

    /// The entries, most counted first.
    pub fn top(&self) -> Vec<TopKey> {
        let mut top = self.entries.clone();
        top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        top
    }
}

/// `parts` joined, cut to [`MAX_KEY_CHARS`] characters with `…` at the end
/// when longer; never copies more than that from a client's value.
pub fn truncated_key<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut key = String::with_capacity(MAX_KEY_CHARS + 3);
    let mut chars = 0;
    for part in parts {
        for c in part.chars() {
            if chars == MAX_KEY_CHARS {
                key.push('…');
                return key;
            }
            key.push(c);
            chars += 1;
        }
    }
    key
}

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

/// A config reload that was refused, with why.
#[derive(Clone, Debug, Serialize)]
pub struct RefusedReload {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `error` (a bad or unreadable file) or `refused` (domains would go).
    pub result: &'static str,
    /// The error as logged.
    pub error: String,
}

type StoreProbe = Box<dyn Fn() -> StoreInfo + Send + Sync>;

/// Every statistic of the process.
pub struct Stats {
    acquire: Counts,
    other: Counts,
    top: Mutex<TopKeys>,
    history: Mutex<History>,
    health: Mutex<StoreHealth>,
    refused: Mutex<Option<RefusedReload>>,
    probe: OnceLock<StoreProbe>,
    /// The rules of every running sampler.
    configs: Mutex<Vec<Weak<ArcSwap<RateLimitConfig>>>>,
}

static GLOBAL: Stats = Stats::new();

/// The statistics of this process.
pub fn global() -> &'static Stats {
    &GLOBAL
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    /// Empty statistics.
    pub const fn new() -> Stats {
        Stats {
            acquire: Counts {
                allowed: AtomicU64::new(0),
                denied: AtomicU64::new(0),
                degraded: AtomicU64::new(0),
            },
            other: Counts {
                allowed: AtomicU64::new(0),
                denied: AtomicU64::new(0),
                degraded: AtomicU64::new(0),
            },
            top: Mutex::new(TopKeys::new(TOP_K)),
            history: Mutex::new(History {
                series: Vec::new(),
                last: BTreeMap::new(),
                held: Vec::new(),
                ticks: 0,
                last_ms: 0,
            }),
            configs: Mutex::new(Vec::new()),
            health: Mutex::new(StoreHealth {
                ready: false,
                error: None,
                checked_at_ms: 0,
            }),
            refused: Mutex::new(None),
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

    /// Records the decision of every descriptor of one Envoy check.
    pub fn record_check(&self, request: &CheckRequest, response: &CheckResponse) {
        for (i, (outcome, name)) in response.outcomes.iter().enumerate() {
            let counts = match name {
                MetricName::Configured(limit) | MetricName::Detailed(limit, _) => &limit.stats,
                MetricName::Override | MetricName::NoLimit => &self.other,
            };
            let denied = *outcome == Outcome::Denied;
            counts.add(!denied, response.degraded);
            if denied && let Some(descriptor) = request.descriptors.get(i) {
                self.deny(descriptor_key(&request.domain, &descriptor.entries));
            }
        }
    }

    fn deny(&self, key: String) {
        lock(&self.top).add(&key);
    }

    /// Remembers a refused config reload (the last one is shown).
    pub fn reload_refused(&self, result: &'static str, error: String) {
        *lock(&self.refused) = Some(RefusedReload {
            at_ms: millis_since_epoch(SystemTime::now()),
            result,
            error,
        });
    }

    /// Sets how to ask the store about its breakers (once; later calls are
    /// ignored).
    pub fn set_store_probe(&self, probe: impl Fn() -> StoreInfo + Send + Sync + 'static) {
        let _ = self.probe.set(Box::new(probe));
    }

    /// Takes one point of every series of `config`: the decisions since the
    /// last point.
    pub fn sample(&self, config: &RateLimitConfig) {
        self.sample_all(&[config]);
    }

    /// Takes one point of every series of the configs of every running
    /// sampler (one per server; tests run several in one process), unless
    /// one was taken less than a sampling interval ago.
    fn tick(&self) {
        let configs: Vec<Arc<RateLimitConfig>> = {
            let mut registered = lock(&self.configs);
            registered.retain(|c| c.strong_count() > 0);
            registered
                .iter()
                .filter_map(Weak::upgrade)
                .map(|c| c.load_full())
                .collect()
        };
        let now = millis_since_epoch(SystemTime::now());
        let since = now.saturating_sub(lock(&self.history).last_ms);
        if u128::from(since) * 10 < SAMPLE_EVERY.as_millis() * 9 {
            return;
        }
        let configs: Vec<&RateLimitConfig> = configs.iter().map(|c| &**c).collect();
        self.sample_all(&configs);
    }

    fn sample_all(&self, configs: &[&RateLimitConfig]) {
        let mut current = vec![
            Source {
                domain: String::new(),
                rule: crate::telemetry::metrics::ADHOC_RULE.to_owned(),
                id: 0,
                counts: self.acquire.load(),
            },
            Source {
                domain: String::new(),
                rule: "other".to_owned(),
                id: 1,
                counts: self.other.load(),
            },
        ];
        let mut held = Vec::new();
        for config in configs {
            for (domain, limit) in config.limits() {
                current.push(Source {
                    domain: domain.to_owned(),
                    rule: limit.full_key.clone(),
                    id: Arc::as_ptr(limit) as usize,
                    counts: limit.stats.load(),
                });
                held.push(Arc::clone(limit));
            }
        }
        let mut history = lock(&self.history);
        history.push(current, held, millis_since_epoch(SystemTime::now()));
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

    /// Everything `GET /v1/stats` answers.
    pub fn snapshot(&self, config: &RateLimitConfig) -> Snapshot {
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
                last_refused: lock(&self.refused).clone(),
            },
        }
    }
}

/// The per-second points of every series.
struct History {
    series: Vec<Series>,
    /// The counts of each source at the last point, by its id.
    last: BTreeMap<usize, [u64; 3]>,
    /// The limits counted at the last point, kept alive so that no new
    /// limit takes the address (the id) of one gone.
    held: Vec<Arc<crate::rules::Limit>>,
    ticks: u64,
    last_ms: u64,
}

/// One set of counters at a point: a configured limit's, or the ad-hoc or
/// other decisions'.
struct Source {
    domain: String,
    rule: String,
    /// The counters' address: a reloaded limit has new counters, from zero.
    id: usize,
    counts: [u64; 3],
}

struct Series {
    domain: String,
    rule: String,
    since_start: [u64; 3],
    points: VecDeque<[u64; 3]>,
}

impl History {
    /// Adds a point to every series: what its sources counted since the
    /// last point. Sources with the same domain and rule (several servers
    /// in one process) add up; series with no source left are dropped.
    fn push(&mut self, current: Vec<Source>, held: Vec<Arc<crate::rules::Limit>>, now_ms: u64) {
        let mut old: HashMap<(String, String), Series> = self
            .series
            .drain(..)
            .map(|s| ((s.domain.clone(), s.rule.clone()), s))
            .collect();
        let mut last = BTreeMap::new();
        let mut index: HashMap<(String, String), usize> = HashMap::new();
        for source in current {
            let before = self.last.get(&source.id).copied().unwrap_or([0; 3]);
            let delta: [u64; 3] =
                std::array::from_fn(|i| source.counts[i].saturating_sub(before[i]));
            last.insert(source.id, source.counts);
            let key = (source.domain, source.rule);
            let at = match index.get(&key) {
                Some(&at) => at,
                None => {
                    let mut series = old.remove(&key).unwrap_or_else(|| Series {
                        domain: key.0.clone(),
                        rule: key.1.clone(),
                        since_start: [0; 3],
                        points: VecDeque::with_capacity(HISTORY_POINTS),
                    });
                    if series.points.len() == HISTORY_POINTS {
                        series.points.pop_front();
                    }
                    series.points.push_back([0; 3]);
                    self.series.push(series);
                    index.insert(key, self.series.len() - 1);
                    self.series.len() - 1
                }
            };
            let series = &mut self.series[at];
            if let Some(point) = series.points.back_mut() {
                for i in 0..3 {
                    point[i] += delta[i];
                    series.since_start[i] += delta[i];
                }
            }
        }
        self.last = last;
        self.held = held;
        self.ticks += 1;
        self.last_ms = now_ms;
    }
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
    fn of([allowed, denied, degraded]: [u64; 3]) -> Totals {
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

/// A descriptor's key as shown: `domain: key=value, key=value`, truncated.
fn descriptor_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut parts: Vec<&str> = Vec::with_capacity(2 + entries.len() * 4);
    parts.push(domain);
    parts.push(": ");
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            parts.push(", ");
        }
        parts.push(k);
        parts.push("=");
        parts.push(v);
    }
    truncated_key(parts)
}

/// Milliseconds since the Unix epoch.
pub fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes a point of every series each [`SAMPLE_EVERY`] and checks the
/// store's readiness, until the returned handle is dropped.
pub fn spawn_sampler<S: Store + 'static>(
    stats: &'static Stats,
    config: Arc<ArcSwap<RateLimitConfig>>,
    store: S,
) -> Sampler {
    lock(&stats.configs).push(Arc::downgrade(&config));
    let task = tokio::spawn(async move {
        let _config = config;
        let mut ticks = tokio::time::interval(SAMPLE_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            stats.tick();
            let ready = match tokio::time::timeout(READY_TIMEOUT, store.ready()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {READY_TIMEOUT:?}")),
            };
            stats.set_health(ready);
        }
    });
    Sampler(task)
}

/// The running sampler; dropping it stops it.
#[derive(Debug)]
pub struct Sampler(tokio::task::JoinHandle<()>);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_frequent_keys_stay_in_a_full_sketch() {
        // 250 occurrences in 8 entries: any key seen more than 250/8 times
        // is kept.
        let mut top = TopKeys::new(8);
        for round in 0..100 {
            top.add("hot");
            if round % 2 == 0 {
                top.add("warm");
            }
            top.add(&format!("cold-{round}"));
        }
        let keys: Vec<String> = top.top().into_iter().map(|e| e.key).collect();
        assert_eq!(keys[0], "hot");
        assert!(keys.contains(&"warm".to_owned()), "{keys:?}");
        assert_eq!(keys.len(), 8);
    }

    #[test]
    fn counts_over_estimate_by_at_most_their_error() {
        let mut top = TopKeys::new(2);
        for _ in 0..5 {
            top.add("a");
        }
        top.add("b");
        top.add("c");
        let c = top.top().into_iter().find(|e| e.key == "c").unwrap();
        assert!(c.count - c.error <= 1, "{c:?}");
    }

    #[test]
    fn decay_halves_and_forgets() {
        let mut top = TopKeys::new(4);
        for _ in 0..4 {
            top.add("a");
        }
        top.add("b");
        top.decay();
        assert_eq!(
            top.top(),
            vec![TopKey {
                key: "a".into(),
                count: 2,
                error: 0
            }]
        );
    }

    #[test]
    fn long_keys_are_cut_with_an_ellipsis() {
        let long = "x".repeat(1000);
        let key = truncated_key([long.as_str()]);
        assert_eq!(key.chars().count(), MAX_KEY_CHARS + 1);
        assert!(key.ends_with('…'));
        assert_eq!(truncated_key(["short"]), "short");
        // Multi-byte characters are counted as characters, never split.
        let key = truncated_key(["é".repeat(100).as_str()]);
        assert_eq!(key.chars().count(), MAX_KEY_CHARS + 1);
    }

    #[test]
    fn a_descriptor_key_names_its_domain_and_entries() {
        let entries = vec![
            ("remote_address".to_owned(), "10.0.0.1".to_owned()),
            ("path".to_owned(), "/login".to_owned()),
        ];
        assert_eq!(
            descriptor_key("api", &entries),
            "api: remote_address=10.0.0.1, path=/login"
        );
    }

    #[test]
    fn points_are_the_decisions_since_the_last_point() {
        let stats = Stats::new();
        let config = RateLimitConfig::default();
        let allowed = Decision::from_parts(true, 10, 9, 0, 1_000);
        let denied = Decision::from_parts(false, 10, 0, 500, 1_000);
        stats.sample(&config);
        stats.record_acquire("k", &allowed);
        stats.record_acquire("k", &allowed);
        stats.record_acquire("bad", &denied);
        stats.sample(&config);
        stats.record_acquire("k", &allowed);
        stats.sample(&config);
        let snapshot = stats.snapshot(&config);
        let adhoc = snapshot
            .series
            .iter()
            .find(|s| s.rule == crate::telemetry::metrics::ADHOC_RULE)
            .unwrap();
        assert_eq!(adhoc.allowed, vec![0, 2, 1]);
        assert_eq!(adhoc.denied, vec![0, 1, 0]);
        assert_eq!(snapshot.top_denied[0].key, "bad");
    }
}
