//! Redis Sentinel (a master, a replica and three sentinels that declare
//! the master down after 1 s without an answer): `--store
//! redis+sentinel://…` decides exactly on the master the sentinels name,
//! follows the replica they promote when the master is SIGKILLed under
//! load (policy-decided answers meanwhile, exact answers after), and a bad
//! URL or sentinels that do not answer are an error or "not ready", never
//! a panic.

mod common;
#[path = "common/load.rs"]
mod load;
#[path = "common/outage.rs"]
mod outage;
#[path = "common/process.rs"]
mod process;

use std::process::Command;
use std::time::{Duration, Instant};

use common::redis::{MASTER_NAME, Sentinels, free_port};
use http::StatusCode;
use load::{Answer, Latencies, Load, Sample, StallWatch};
use outage::*;
use slidegate::store::resilient::FailurePolicy;

/// How soon after a sentinel names the promoted replica every answer comes
/// from it again: a failed call has the sentinels asked again within
/// 100 ms, and the new master has a circuit breaker of its own.
const SETTLED: Duration = Duration::from_millis(1_000);

/// `POST /v1/acquire` of `key` under `limit`/1m, `limit` times and once
/// more: exact remaining counts from the store, then a denial.
async fn counts_exactly(server: &common::TestServer, key: &str, limit: u64) {
    let body = format!(r#"{{"key":"{key}","limit":{limit},"window_ms":60000}}"#);
    for expected in (0..limit).rev() {
        let reply = server.post_json("/v1/acquire", &body).await;
        let json = reply.json();
        assert_eq!(reply.status, StatusCode::OK, "{json}");
        assert_eq!(json["remaining"], expected, "{json}");
        assert!(json.get("degraded").is_none(), "{json}");
    }
    let over = server.post_json("/v1/acquire", &body).await;
    let json = over.json();
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{json}");
    assert!(json.get("degraded").is_none(), "{json}");
}

async fn until_ready(server: &common::TestServer) {
    let start = Instant::now();
    while common::get(server.addr, "/readyz").await.status != StatusCode::OK {
        assert!(start.elapsed() < Duration::from_secs(10), "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_through_the_sentinel_url_are_exact() {
    let _serial = SERIAL.lock().await;
    let group = off_thread(Sentinels::start).await;
    let server = in_process(&group.url(), FailurePolicy::Deny, Duration::from_secs(2)).await;
    counts_exactly(&server, "exact", 5).await;
    let ready = common::get(server.addr, "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.json());
    drop(group);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_fails_over_and_slidegate_follows() {
    let _serial = SERIAL.lock().await;
    let group = off_thread(Sentinels::start).await;
    let server = in_process(&group.url(), FailurePolicy::Deny, STORE_TIMEOUT).await;
    until_ready(&server).await;
    let grpc = server.grpc_addr.expect("a gRPC listener");
    let watch = StallWatch::start();
    let load = Load::start(server.addr, grpc, &plan("sentinel"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let group = std::sync::Arc::new(
        off_thread(move || {
            let mut group = group;
            group.master.kill();
            group
        })
        .await,
    );
    let killed = Instant::now();
    let watcher = std::sync::Arc::clone(&group);
    let (promoted_at, named_at) = off_thread(move || {
        let mut promoted = None;
        loop {
            assert!(killed.elapsed() < Duration::from_secs(20), "no failover");
            if promoted.is_none() && watcher.replica_promoted() {
                promoted = Some(Instant::now());
            }
            if let Some(promoted) = promoted
                && watcher.replica_named()
            {
                return (promoted, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await;
    tokio::time::sleep(SETTLED + Duration::from_secs(1)).await;
    let samples = load.stop().await;
    let stalls = watch.stop();

    assert_no_failures("sentinel failover", &samples);
    assert_within_deadline("sentinel failover", &samples, &stalls);
    for s in samples.iter().filter(|s| s.answer.degraded()) {
        assert_eq!(
            s.answer,
            Answer::Denied { degraded: true },
            "deny policy: {s:?}"
        );
    }
    let late = degraded_since(&samples, named_at + SETTLED, &stalls);
    assert!(
        late.is_empty(),
        "degraded after the failover: {:?}",
        late.first()
    );
    let degraded: Vec<&Sample> = samples.iter().filter(|s| s.answer.degraded()).collect();
    let ms = |at: Instant| at.saturating_duration_since(killed).as_secs_f64() * 1e3;
    let window = match (degraded.first(), degraded.last()) {
        (Some(first), Some(last)) => format!(
            "{} answers degraded, from {:.0} ms to {:.0} ms after the kill",
            degraded.len(),
            ms(first.sent),
            ms(last.done)
        ),
        _ => "never degraded".to_owned(),
    };
    eprintln!(
        "sentinel failover: replica promoted {:.0} ms and named by a sentinel {:.0} ms after \
         the kill; {window}; {}",
        ms(promoted_at),
        ms(named_at),
        Latencies::of(&samples)
    );
    // Exact again on the new master: a fresh key counts one by one.
    counts_exactly(&server, "after-failover", LIMIT).await;
    drop(group);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sentinel_answering_is_not_ready_and_decided_by_the_policy() {
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/{MASTER_NAME}",
        free_port(false),
        free_port(false)
    );
    let server = in_process(&url, FailurePolicy::Deny, STORE_TIMEOUT).await;
    let ready = common::get(server.addr, "/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    let reply = server
        .post_json("/v1/acquire", r#"{"key":"k","limit":5,"window_ms":60000}"#)
        .await;
    let json = reply.json();
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{json}");
    assert_eq!(json["degraded"], true, "{json}");
}

#[test]
fn a_sentinel_url_without_a_master_name_stops_serve_with_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args([
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--store", "redis+sentinel://app:s3cret@127.0.0.1:26379"])
        .env_remove("SLIDEGATE_STORE")
        .output()
        .expect("run slidegate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("MASTER_NAME"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
