//! What the fault tests share: the deadlines they hold the server to, the
//! rules and the load they run, and the checks they make on the answers.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use http::StatusCode;
use slidegate::store::resilient::FailurePolicy;
use slidegate_server::commands::parts::Parts;
use slidegate_server::rules::{LiveConfig, LoadOptions};
use slidegate_server::store::StoreUrl;

use crate::common::{self, TestServer};
use crate::load::{Answer, Plan, Sample, Stalls};
use crate::process::Slidegate;

/// Latency-measuring tests take turns: on a small machine, two at once
/// would measure each other.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `--store-timeout-ms` of the fault tests.
pub const STORE_TIMEOUT: Duration = Duration::from_millis(100);
/// What an answer may take beyond the store timeout: the HTTP or gRPC
/// round trip of a debug build, on 2 cores shared with the clients, Redis
/// and whatever else runs. Well under what an unbounded call would wait
/// for (the 1 s connect timeout, the client's reconnection pauses).
pub const MARGIN: Duration = Duration::from_millis(400);
/// How soon after Redis is back every answer must come from it again: the
/// circuit breaker probes at least once a second, the Redis client waits at
/// most 250 ms between reconnection attempts.
pub const RECOVERY: Duration = Duration::from_millis(2_000);

/// The rule of every counter, over HTTP and gRPC alike.
pub const LIMIT: u64 = 30;
pub const WINDOW: Duration = Duration::from_secs(4);

pub fn rules_file(dir: &Path) -> String {
    let path = dir.join("rules.yaml");
    std::fs::write(
        &path,
        format!(
            "domain: faults\ndescriptors:\n  - key: k\n    rate_limit: {{requests_per_unit: {LIMIT}, window: {}ms}}\n",
            WINDOW.as_millis()
        ),
    )
    .expect("write the rules");
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// 3 HTTP and 2 gRPC clients, each sending one request per 10 ms (fewer
/// on a busy machine). The 2 HTTP counters run into their limit within the
/// first second, so the deny cache answers many HTTP requests; the 40 gRPC
/// counters (at most 5 requests/s each) stay under it, so gRPC requests
/// always need the store.
pub fn plan(prefix: &str) -> Plan {
    Plan {
        http_workers: 3,
        grpc_workers: 2,
        pace: Duration::from_millis(10),
        http_keys: 2,
        grpc_keys: 40,
        prefix: prefix.to_owned(),
        limit: LIMIT,
        window: WINDOW,
    }
}

/// Waits until `GET /readyz` says 200.
pub async fn until_ready(server: &Slidegate) -> Duration {
    let start = Instant::now();
    loop {
        if common::get(server.http, "/readyz").await.status == StatusCode::OK {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never ready; logs: {:?}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs blocking work (process control, a blocking Redis command) on a
/// thread of its own, so the load and the in-process servers keep going.
pub async fn off_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the blocking task panicked")
}

/// Both protocols in-process on `url`, with the failure policy and the
/// store deadline of `slidegate serve`, and the `faults` rules for gRPC.
pub async fn in_process(url: &str, policy: FailurePolicy, timeout: Duration) -> TestServer {
    in_process_with(url, policy, timeout, false).await
}

/// [`in_process`], serving `GET /metrics` when `metrics` is set (the
/// process' recorder, installed before the store is opened).
pub async fn in_process_with(
    url: &str,
    policy: FailurePolicy,
    timeout: Duration,
    metrics: bool,
) -> TestServer {
    let handle = metrics.then(slidegate_server::telemetry::metrics::install);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rules = rules_file(dir.path());
    let live = LiveConfig::load(vec![rules.into()], LoadOptions::default()).expect("the rules");
    let backend = common::backend(
        StoreUrl::Redis(url.to_owned()),
        policy,
        timeout.as_millis() as u64,
    )
    .await;
    let mut parts = Parts::new(backend).with_config(live.current());
    if let Some(handle) = handle {
        parts = parts.with_metrics(handle);
    }
    TestServer::full(parts).await.keeping(dir)
}

pub fn assert_no_failures(what: &str, samples: &[Sample]) {
    let failed = failures(samples);
    assert!(
        failed.is_empty(),
        "{what}: {} failures, first: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
}

/// The most answers of a run that may need a stall of the machine to pass
/// a check: one in 20. Past that the run says more about the machine
/// than about the server, and fails rather than pass on excuses.
pub const STALLED_SHARE: (usize, usize) = (1, 20);

/// How long after a stall of the machine the circuit may still be open
/// because of it: the calls it held missed their deadline, and the
/// breaker waits a cool-down (up to 1 s) before it probes again.
pub const REOPENED: Duration = Duration::from_millis(1_500);

/// Fails when more than [`STALLED_SHARE`] of `of` answers needed the
/// machine's stalls to pass a check.
pub fn assert_few_needed_stalls(what: &str, needed: usize, of: usize, stalls: &Stalls) {
    let (part, whole) = STALLED_SHARE;
    if needed > 0 {
        eprintln!(
            "{what}: {needed} of {of} answers passed only with the machine's stalls taken \
             into account (longest stall {:?})",
            stalls.longest()
        );
    }
    assert!(
        needed * whole <= of * part,
        "{what}: {needed} of {of} answers needed the machine's stalls to pass, more than \
         {part} in {whole}: too busy a machine to judge the server, or a server that is slow"
    );
}

/// Asserts that every answer came within the store deadline plus
/// [`MARGIN`], once the time the machine stood still under it (see
/// [`StallWatch`](crate::load::StallWatch)) is taken off; and that at most
/// [`STALLED_SHARE`] of the answers needed that.
pub fn assert_within_deadline(what: &str, samples: &[Sample], stalls: &Stalls) {
    let bound = STORE_TIMEOUT + MARGIN;
    let late: Vec<&Sample> = samples.iter().filter(|s| s.latency() > bound).collect();
    let (slow, needed): (Vec<&Sample>, Vec<&Sample>) = late
        .into_iter()
        .partition(|s| s.latency() - stalls.within(s.sent, s.done) > bound);
    assert!(
        slow.is_empty(),
        "{what}: {} answers slower than {bound:?} with the machine's stalls taken off: {:?}",
        slow.len(),
        &slow[..slow.len().min(5)]
    );
    assert_few_needed_stalls(what, needed.len(), samples.len(), stalls);
}

/// Degraded answers sent at or after `since`, but for those sent within
/// [`REOPENED`] of a stall of the machine long enough to make a call miss
/// its deadline (half the deadline or more: the circuit can open again,
/// and stay open for a cool-down). Fails when more than [`STALLED_SHARE`]
/// of the answers needed that.
pub fn degraded_since<'a>(
    samples: &'a [Sample],
    since: Instant,
    stalls: &Stalls,
) -> Vec<&'a Sample> {
    let degraded = samples
        .iter()
        .filter(|s| s.sent >= since && s.answer.degraded());
    let (needed, late): (Vec<&Sample>, Vec<&Sample>) =
        degraded.partition(|s| stalls.overlap(s.sent, s.done, STORE_TIMEOUT / 2, REOPENED));
    assert_few_needed_stalls(
        "degraded after recovery",
        needed.len(),
        samples.len(),
        stalls,
    );
    late
}

pub fn failures(samples: &[Sample]) -> Vec<&Sample> {
    samples
        .iter()
        .filter(|s| matches!(s.answer, Answer::Failed(_)))
        .collect()
}

pub fn counters(samples: &[Sample]) -> Vec<String> {
    let mut counters: Vec<String> = samples.iter().map(|s| s.counter.clone()).collect();
    counters.sort_unstable();
    counters.dedup();
    counters
}
