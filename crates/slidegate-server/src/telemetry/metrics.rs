//! Prometheus metrics: what the server decided, how its store behaved,
//! config reloads, requests in flight. Served as text on `GET /metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `slidegate_decisions_total` | counter | `source` (acquire, check), `domain`, `rule`, `outcome` (allowed, denied, shadow_denied, quota_exceeded, unlimited, degraded) |
//! | `slidegate_store_call_duration_seconds` | histogram | `store` (redis, redis_cluster: calls of the memory store are not timed), `op` |
//! | `slidegate_store_errors_total` | counter | `store`, `kind` (timeout, unavailable, full) |
//! | `slidegate_policy_decisions_total` | counter | `policy` (deny, allow, local) |
//! | `slidegate_config_reloads_total` | counter | `result` (ok, error, refused) |
//! | `slidegate_connection_timeouts_total` | counter | `listener` (http, grpc), `phase` (header, idle, closing) |
//! | `slidegate_connections_refused_total` | counter | `listener` (http, grpc), `reason` (per_ip) |
//! | `slidegate_requests_in_flight` | gauge | `protocol` (http, grpc) |
//! | `slidegate_store_circuit_open` | gauge | `node` (the Redis node's address: one series per master) |
//!
//! # Cardinality
//!
//! No label takes a value from a request, except under a hard bound:
//!
//! - `domain` is a configured domain, `unknown` for any other, or empty for
//!   `/v1/acquire`.
//! - `rule` is `adhoc` for every `/v1/acquire` decision (the caller's limit
//!   and window are not labels), `override` for a limit sent with an Envoy
//!   request, empty where no limit applied, or a configured limit's stats
//!   key (envoyproxy/ratelimit's `domain.key_value.subkey`).
//! - `detailed_metric` and `value_to_metric` put request values into the
//!   stats key, as envoyproxy/ratelimit does: at most
//!   [`MAX_DETAILED_KEYS`] such keys of at most [`MAX_DETAILED_KEY_LEN`]
//!   bytes each are kept per process; decisions beyond them are counted
//!   under the limit's configured key.
//!
//! So `slidegate_decisions_total` has at most 3 series for `/v1/acquire`,
//! 6 per configured limit, 6 per detailed key (at most 6,000), and 4 per
//! configured domain plus 4 for `unknown` (overrides: allowed, denied,
//! degraded; unmatched descriptors: unlimited), whatever the clients send.
//!
//! Handles whose labels are fixed (acquire, store calls, each configured
//! limit) are registered once, on first use after [`install`],
//! and reused: a `counter!` with labels looks the registry up on every call.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use slidegate::{Decision, Error, Hit, Rule, Store};

use crate::limiter::check::{CheckResponse, MetricName, Outcome};
use crate::rules::Limit;

/// Store call latency buckets, in seconds: 50 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

/// Most distinct stats keys with request values in them (`detailed_metric`,
/// `value_to_metric`) per process.
pub const MAX_DETAILED_KEYS: usize = 1_000;

/// Longest stats key with request values in it, in bytes; a longer one is
/// counted under the limit's configured key.
pub const MAX_DETAILED_KEY_LEN: usize = 256;

/// The `rule` of every `/v1/acquire` decision.
pub const ADHOC_RULE: &str = "adhoc";
/// The `rule` of a limit override.
pub const OVERRIDE_RULE: &str = "override";
/// The `domain` of a domain that is not configured.
pub const UNKNOWN_DOMAIN: &str = "unknown";

const DECISIONS: &str = "slidegate_decisions_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Set once the recorder is installed: handles made before would belong to
/// no recorder, so none is kept until then.
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> PrometheusHandle {
    let handle = HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("slidegate_store_call_duration_seconds".into()),
                    LATENCY_BUCKETS,
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(handle) => handle,
                // Another recorder is installed (an embedding program's):
                // keep a private one so /metrics still answers.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone();
    let _ = INSTALLED.set(());
    handle
}

/// Calls `with` on the handle in `cell`, made by `make` the first time once
/// the recorder is installed; before that, on a fresh one each time. The
/// handle is borrowed, not cloned: a clone would write to its shared count.
fn cached<T>(cell: &OnceLock<T>, make: impl FnOnce() -> T, with: impl FnOnce(&T)) {
    if INSTALLED.get().is_some() {
        with(cell.get_or_init(make));
    } else {
        with(&make());
    }
}

/// The outcomes of `slidegate_decisions_total`, in the order of the
/// handle arrays.
const OUTCOMES: [&str; 6] = [
    "allowed",
    "denied",
    "shadow_denied",
    "quota_exceeded",
    "unlimited",
    "degraded",
];
const ALLOWED: usize = 0;
const DENIED: usize = 1;
const DEGRADED: usize = 5;

/// The decision counters of one configured limit, registered on first use.
#[derive(Default)]
pub struct LimitCounters([OnceLock<Counter>; 6]);

impl Clone for LimitCounters {
    /// A copy of a limit counts under the same labels: it finds the same
    /// series in the registry when it first counts.
    fn clone(&self) -> Self {
        LimitCounters::default()
    }
}

impl PartialEq for LimitCounters {
    /// Handles are not part of what a limit is.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LimitCounters {}

impl std::fmt::Debug for LimitCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LimitCounters")
    }
}

static ACQUIRE: [OnceLock<Counter>; 6] = [const { OnceLock::new() }; 6];

/// Counts the outcome of one `/v1/acquire` decision.
pub fn acquire_decision(decision: &Decision) {
    let outcome = if decision.degraded() {
        DEGRADED
    } else if decision.allowed() {
        ALLOWED
    } else {
        DENIED
    };
    cached(
        &ACQUIRE[outcome],
        || metrics::counter!(DECISIONS, "source" => "acquire", "domain" => "", "rule" => ADHOC_RULE, "outcome" => OUTCOMES[outcome]),
        |counter| counter.increment(1),
    );
}

/// Counts the outcome of every descriptor of one Envoy check.
pub fn check_decisions(domain: &str, response: &CheckResponse) {
    let domain = if response.known_domain {
        domain
    } else {
        UNKNOWN_DOMAIN
    };
    for (outcome, name) in &response.outcomes {
        let outcome = match (response.degraded, outcome) {
            (true, Outcome::Allowed | Outcome::Denied) => DEGRADED,
            (_, Outcome::Unlimited) => 4,
            (_, Outcome::Allowed) => ALLOWED,
            (_, Outcome::Denied) => DENIED,
            (_, Outcome::ShadowDenied) => 2,
            (_, Outcome::QuotaExceeded) => 3,
        };
        match name {
            MetricName::Configured(limit) => count_limit(domain, limit, outcome),
            MetricName::Detailed(_, key) if detailed_key_allowed(key) => {
                check_counter(domain, key.clone(), outcome).increment(1);
            }
            MetricName::Detailed(limit, _) => count_limit(domain, limit, outcome),
            MetricName::Override => {
                check_counter(domain, OVERRIDE_RULE.to_owned(), outcome).increment(1);
            }
            MetricName::NoLimit => check_counter(domain, String::new(), outcome).increment(1),
        }
    }
}

fn count_limit(domain: &str, limit: &Limit, outcome: usize) {
    cached(
        &limit.counters.0[outcome],
        || check_counter(domain, limit.full_key.clone(), outcome),
        |counter| counter.increment(1),
    );
}

fn check_counter(domain: &str, rule: String, outcome: usize) -> Counter {
    metrics::counter!(
        DECISIONS,
        "source" => "check",
        "domain" => domain.to_owned(),
        "rule" => rule,
        "outcome" => OUTCOMES[outcome]
    )
}

/// True when `key` may be a label: one of the first [`MAX_DETAILED_KEYS`]
/// distinct keys seen, and short enough.
fn detailed_key_allowed(key: &str) -> bool {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    if key.len() > MAX_DETAILED_KEY_LEN {
        return false;
    }
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if seen.contains(key) {
        return true;
    }
    if seen.len() >= MAX_DETAILED_KEYS {
        return false;
    }
    seen.insert(key.to_owned());
    true
}

/// Requests in flight per protocol, counted on the request path with one
/// atomic add each way and copied into the gauges when the metrics are
/// read ([`publish`]): the gauge's value is only ever seen then.
static IN_FLIGHT: [AtomicI64; 2] = [const { AtomicI64::new(0) }; 2];
static IN_FLIGHT_GAUGES: [OnceLock<Gauge>; 2] = [const { OnceLock::new() }; 2];
const PROTOCOLS: [&str; 2] = ["http", "grpc"];

/// The protocol of a request in flight.
#[derive(Clone, Copy, Debug)]
pub enum Protocol {
    /// The HTTP API.
    Http,
    /// gRPC.
    Grpc,
}

/// Holds one request of a protocol in flight while alive.
pub struct InFlight(usize);

impl InFlight {
    /// One more request of `protocol` in flight.
    pub fn start(protocol: Protocol) -> InFlight {
        let index = protocol as usize;
        IN_FLIGHT[index].fetch_add(1, Ordering::Relaxed);
        InFlight(index)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT[self.0].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Brings the metrics kept outside the recorder up to date; called before
/// they are rendered.
pub fn publish() {
    for (index, protocol) in PROTOCOLS.into_iter().enumerate() {
        cached(
            &IN_FLIGHT_GAUGES[index],
            || metrics::gauge!("slidegate_requests_in_flight", "protocol" => protocol),
            |gauge| gauge.set(IN_FLIGHT[index].load(Ordering::Relaxed) as f64),
        );
    }
}

/// How often [`upkeep`] drains the histograms' samples into their buckets.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Drains the recorder's histogram samples into their buckets every
/// [`UPKEEP_INTERVAL`], until the task is dropped. The recorder keeps every
/// sample until then: without upkeep, a server that is never scraped would
/// hold every store call's latency it ever measured.
pub async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// A store whose calls are timed and whose failures are counted.
#[derive(Clone, Debug)]
pub struct Instrumented<S> {
    inner: S,
    handles: Arc<StoreHandles>,
}

/// The store operations timed, in the order of [`StoreHandles::latency`].
const OPS: [&str; 4] = ["acquire", "acquire_batch", "reset", "ready"];
/// The store error kinds counted, in the order of [`StoreHandles::errors`].
const ERROR_KINDS: [&str; 3] = ["timeout", "full", "unavailable"];

struct StoreHandles {
    name: &'static str,
    /// Calls are timed (not those of the memory store).
    timed: bool,
    latency: [OnceLock<Histogram>; 4],
    errors: [OnceLock<Counter>; 3],
}

impl std::fmt::Debug for StoreHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandles")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, labelled `name` (redis, redis_cluster): its calls
    /// are timed and its failures counted.
    pub fn new(inner: S, name: &'static str) -> Self {
        Instrumented::with_timing(inner, name, true)
    }

    /// Wraps an in-process store, labelled `name` (memory): its failures
    /// are counted, its calls are not timed. A call takes well under a
    /// microsecond, below the histogram's first bucket (50 µs), so every
    /// sample would land there and tell nothing that
    /// `slidegate_decisions_total` does not, at the price of two clock
    /// reads and a shared write per decision.
    pub fn untimed(inner: S, name: &'static str) -> Self {
        Instrumented::with_timing(inner, name, false)
    }

    fn with_timing(inner: S, name: &'static str, timed: bool) -> Self {
        Instrumented {
            inner,
            handles: Arc::new(StoreHandles {
                name,
                timed,
                latency: Default::default(),
                errors: Default::default(),
            }),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The start of a call, when calls are timed.
    fn start(&self) -> Option<Instant> {
        self.handles.timed.then(Instant::now)
    }

    fn observe<T>(&self, op: usize, started: Option<Instant>, result: &Result<T, Error>) {
        let handles = &*self.handles;
        if let Some(started) = started {
            let elapsed: Duration = started.elapsed();
            cached(
                &handles.latency[op],
                || metrics::histogram!("slidegate_store_call_duration_seconds", "store" => handles.name, "op" => OPS[op]),
                |histogram| histogram.record(elapsed.as_secs_f64()),
            );
        }
        if let Err(error) = result {
            let kind = match error {
                Error::Timeout(_) => 0,
                Error::StoreFull { .. } => 1,
                Error::Store(_) => 2,
                _ => return,
            };
            cached(
                &handles.errors[kind],
                || metrics::counter!("slidegate_store_errors_total", "store" => handles.name, "kind" => ERROR_KINDS[kind]),
                |counter| counter.increment(1),
            );
        }
    }
}

impl<S: Store> Store for Instrumented<S> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision, Error> {
        let started = self.start();
        let result = self.inner.acquire(key, rules, cost).await;
        self.observe(0, started, &result);
        result
    }

    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision, Error>> {
        let started = self.start();
        let result = self.inner.acquire_now(key, rules, cost)?;
        self.observe(0, started, &result);
        Some(result)
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>, Error> {
        let started = self.start();
        let result = self.inner.acquire_batch(hits).await;
        self.observe(1, started, &result);
        result
    }

    /// Timed as a batch: one call deciding several hits.
    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> Result<slidegate::store::BatchReservation, Error> {
        let started = self.start();
        let result = self.inner.reserve_batch(hits, max_wait).await;
        self.observe(1, started, &result);
        result
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        let started = self.start();
        let result = self.inner.reset(key).await;
        self.observe(2, started, &result);
        result
    }

    async fn ready(&self) -> Result<(), Error> {
        let started = self.start();
        let result = self.inner.ready().await;
        self.observe(3, started, &result);
        result
    }

    /// Forwarded: the deny cache around this store hears of the resets
    /// other servers make through the wrapped one.
    fn watch_changes(
        &self,
        listener: std::sync::Weak<dyn slidegate::store::ChangeListener>,
    ) -> bool {
        self.inner.watch_changes(listener)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detailed_keys_are_bounded_in_number_and_length() {
        assert!(!detailed_key_allowed(&"k".repeat(MAX_DETAILED_KEY_LEN + 1)));
        let mut allowed = 0;
        while detailed_key_allowed(&format!("bound-test.{allowed}")) {
            allowed += 1;
            assert!(allowed <= MAX_DETAILED_KEYS, "no bound");
        }
        assert!(allowed > 0);
        assert!(detailed_key_allowed("bound-test.0"), "a kept key stays");
        assert!(!detailed_key_allowed("bound-test.new"));
    }
}
