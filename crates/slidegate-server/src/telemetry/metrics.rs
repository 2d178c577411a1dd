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
//! | `slidegate_waiting_requests` | gauge | none |
//! | `slidegate_deny_cache_hits_total` | counter | none (denials answered by the library's deny cache) |
//!
//! Each has a `# HELP` line ([`super::families`]).
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
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge};
use metrics_exporter_prometheus::PrometheusHandle;
use slidegate::Decision;

use super::limits::LimitTable;
use super::registry::cached;
pub use super::registry::install;
use crate::limiter::ADHOC_RULE;
use crate::limiter::check::{CheckResponse, MetricName, Verdict};
use crate::rules::Limit;

/// Most distinct stats keys with request values in them (`detailed_metric`,
/// `value_to_metric`) per process.
pub const MAX_DETAILED_KEYS: usize = 1_000;

/// Longest stats key with request values in it, in bytes; a longer one is
/// counted under the limit's configured key.
pub const MAX_DETAILED_KEY_LEN: usize = 256;

/// The `rule` of a limit override.
pub const OVERRIDE_RULE: &str = "override";
/// The `domain` of a domain that is not configured.
pub const UNKNOWN_DOMAIN: &str = "unknown";

const DECISIONS: &str = "slidegate_decisions_total";

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

/// Counts the outcome of every descriptor of one Envoy check; `table`
/// holds the counters of the limits of the config it was decided with
/// (`None` when that config was replaced meanwhile: each is then found in
/// the registry by its labels).
pub fn check_decisions(domain: &str, response: &CheckResponse<'_>, table: Option<&LimitTable>) {
    let domain = if response.known_domain {
        domain
    } else {
        UNKNOWN_DOMAIN
    };
    for status in &response.statuses {
        let outcome = match (response.degraded, status.verdict) {
            (true, Verdict::Allowed | Verdict::Denied) => DEGRADED,
            (_, Verdict::Unlimited) => 4,
            (_, Verdict::Allowed) => ALLOWED,
            (_, Verdict::Denied) => DENIED,
            (_, Verdict::ShadowDenied) => 2,
            (_, Verdict::QuotaExceeded) => 3,
        };
        match (&status.metric, status.limit.as_deref()) {
            (MetricName::Configured, Some(limit)) => count_limit(domain, limit, outcome, table),
            (MetricName::Detailed(key), _) if detailed_key_allowed(key) => {
                check_counter(domain, key.clone(), outcome).increment(1);
            }
            (MetricName::Detailed(_), Some(limit)) => count_limit(domain, limit, outcome, table),
            (MetricName::Override, _) => {
                check_counter(domain, OVERRIDE_RULE.to_owned(), outcome).increment(1);
            }
            (MetricName::NoLimit | MetricName::Configured | MetricName::Detailed(_), _) => {
                check_counter(domain, String::new(), outcome).increment(1);
            }
        }
    }
}

fn count_limit(domain: &str, limit: &Limit, outcome: usize, table: Option<&LimitTable>) {
    match table.and_then(|table| table.entry(limit.id)) {
        Some(entry) => cached(
            &entry.handles[outcome],
            || check_counter(domain, limit.full_key.clone(), outcome),
            |counter| counter.increment(1),
        ),
        None => check_counter(domain, limit.full_key.clone(), outcome).increment(1),
    }
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
