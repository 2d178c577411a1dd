//! Prometheus metrics: what the server decided, how its store behaved,
//! config reloads, requests in flight. Served as text on `GET /metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `slidegate_decisions_total` | counter | `source` (acquire, check), `domain`, `rule`, `outcome` (allowed, denied, shadow_denied, quota_exceeded, unlimited, degraded) |
//! | `slidegate_store_call_duration_seconds` | histogram | `store`, `op` |
//! | `slidegate_store_errors_total` | counter | `store`, `kind` (timeout, unavailable, full) |
//! | `slidegate_config_reloads_total` | counter | `result` (ok, error, refused) |
//! | `slidegate_connection_timeouts_total` | counter | `listener` (http, grpc), `phase` (header, idle) |
//! | `slidegate_requests_in_flight` | gauge | `protocol` (http, grpc) |

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use slidegate::{Decision, Error, Hit, Rule, Store};

use crate::service::{CheckResponse, Outcome};

/// Store call latency buckets, in seconds: 50 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
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
        .clone()
}

/// Counts the outcome of one `/v1/acquire` (or peek) decision.
pub fn acquire_decision(rules: &[Rule], decision: &Decision) {
    let outcome = if decision.degraded() {
        "degraded"
    } else if decision.allowed() {
        "allowed"
    } else {
        "denied"
    };
    let rule = match rules {
        [one] => one.to_string(),
        many => many
            .iter()
            .map(Rule::to_string)
            .collect::<Vec<_>>()
            .join(" + "),
    };
    metrics::counter!("slidegate_decisions_total", "source" => "acquire", "domain" => "", "rule" => rule, "outcome" => outcome)
        .increment(1);
}

/// Counts the outcome of every descriptor of one Envoy check.
pub fn check_decisions(domain: &str, response: &CheckResponse) {
    for (outcome, rule) in &response.outcomes {
        let outcome = match (response.degraded, outcome) {
            (true, Outcome::Allowed | Outcome::Denied) => "degraded",
            (_, Outcome::Unlimited) => "unlimited",
            (_, Outcome::Allowed) => "allowed",
            (_, Outcome::Denied) => "denied",
            (_, Outcome::ShadowDenied) => "shadow_denied",
            (_, Outcome::QuotaExceeded) => "quota_exceeded",
        };
        metrics::counter!(
            "slidegate_decisions_total",
            "source" => "check",
            "domain" => domain.to_owned(),
            "rule" => rule.clone().unwrap_or_default(),
            "outcome" => outcome
        )
        .increment(1);
    }
}

/// Holds the in-flight gauge of one protocol up while alive.
pub struct InFlight(&'static str);

impl InFlight {
    /// One more request of `protocol` in flight.
    pub fn start(protocol: &'static str) -> InFlight {
        metrics::gauge!("slidegate_requests_in_flight", "protocol" => protocol).increment(1.0);
        InFlight(protocol)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!("slidegate_requests_in_flight", "protocol" => self.0).decrement(1.0);
    }
}

/// A store whose calls are timed and whose failures are counted.
#[derive(Clone, Debug)]
pub struct Instrumented<S> {
    inner: S,
    name: &'static str,
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, labelled `name` (memory, redis, redis_cluster).
    pub fn new(inner: S, name: &'static str) -> Self {
        Instrumented { inner, name }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn observe<T>(&self, op: &'static str, started: Instant, result: &Result<T, Error>) {
        let elapsed: Duration = started.elapsed();
        metrics::histogram!("slidegate_store_call_duration_seconds", "store" => self.name, "op" => op).record(elapsed.as_secs_f64());
        if let Err(error) = result {
            let kind = match error {
                Error::Timeout(_) => "timeout",
                Error::StoreFull { .. } => "full",
                Error::Store(_) => "unavailable",
                _ => return,
            };
            metrics::counter!("slidegate_store_errors_total", "store" => self.name, "kind" => kind)
                .increment(1);
        }
    }
}

impl<S: Store> Store for Instrumented<S> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision, Error> {
        let started = Instant::now();
        let result = self.inner.acquire(key, rules, cost).await;
        self.observe("acquire", started, &result);
        result
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>, Error> {
        let started = Instant::now();
        let result = self.inner.acquire_batch(hits).await;
        self.observe("acquire_batch", started, &result);
        result
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        let started = Instant::now();
        let result = self.inner.reset(key).await;
        self.observe("reset", started, &result);
        result
    }

    async fn ready(&self) -> Result<(), Error> {
        let started = Instant::now();
        let result = self.inner.ready().await;
        self.observe("ready", started, &result);
        result
    }
}
