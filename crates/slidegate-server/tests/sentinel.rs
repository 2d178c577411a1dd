//! Redis Sentinel (a master, a replica and three sentinels that declare
//! the master down after 1 s without an answer): `--store
//! redis+sentinel://…` decides exactly on the master the sentinels name,
//! follows the replica they promote when the master is SIGKILLed under
//! load (policy-decided answers meanwhile, exact answers after), and a bad
//! URL or sentinels that do not answer are an error or "not ready", never
//! a panic. A third sentinel that names another master is outvoted: the
//! running `slidegate serve` stays on the master the two others name, logs
//! the disagreement once and follows nothing else.

mod common;
#[path = "common/load.rs"]
mod load;
#[path = "common/outage.rs"]
mod outage;
#[path = "common/process.rs"]
mod process;

use std::process::Command;
use std::time::{Duration, Instant};

use common::redis::{MASTER_NAME, Redis, ReservedPort, Sentinels};
use http::StatusCode;
use load::{Answer, Latencies, Load, Sample, StallWatch};
use outage::*;
use process::Slidegate;
use slidegate::store::resilient::FailurePolicy;

/// How soon after a majority of the sentinels name the promoted replica
/// every answer comes from it again: a failed call has the sentinels asked
/// again within 100 ms, and the new master has a circuit breaker of its
/// own.
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
    let (promoted_at, first_named_at, named_at) = off_thread(move || {
        let (mut promoted, mut first_named) = (None, None);
        loop {
            assert!(killed.elapsed() < Duration::from_secs(20), "no failover");
            if promoted.is_none() && watcher.replica_promoted() {
                promoted = Some(Instant::now());
            }
            let naming = watcher.naming_the_replica();
            if first_named.is_none() && naming > 0 {
                first_named = Some(Instant::now());
            }
            if let (Some(promoted), Some(first_named)) = (promoted, first_named)
                && naming > watcher.sentinels.len() / 2
            {
                return (promoted, first_named, Instant::now());
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
        "sentinel failover: replica promoted {:.0} ms, named by a sentinel {:.0} ms and by a \
         majority of them {:.0} ms after the kill; {window}; {}",
        ms(promoted_at),
        ms(first_named_at),
        ms(named_at),
        Latencies::of(&samples)
    );
    // Exact again on the new master: a fresh key counts one by one.
    counts_exactly(&server, "after-failover", LIMIT).await;
    drop(group);
}

/// The JSON log lines of `server` whose message starts with `message`.
fn logged(server: &Slidegate, message: &str) -> Vec<serde_json::Value> {
    server
        .logs()
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|json| {
            json["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_sentinel_naming_another_master_is_outvoted_logged_once_and_never_followed() {
    let _serial = SERIAL.lock().await;
    // M1 with its replica and three real sentinels, two of them in the
    // URL; M2 a real master watched under the same name by a real
    // sentinel of its own, the first of the URL.
    let (group, m2, rogue) = off_thread(|| {
        let group = Sentinels::start();
        let m2 = Redis::start();
        let rogue = Redis::start_sentinel(m2.port());
        m2.text(&["CONFIG", "RESETSTAT"]);
        (group, m2, rogue)
    })
    .await;
    let url = format!(
        "redis+sentinel://{},{},{}/{MASTER_NAME}",
        rogue.addr(),
        group.sentinels[0].addr(),
        group.sentinels[1].addr()
    );
    let mut server = Slidegate::start(&["--store", &url, "--on-store-error", "deny"]);
    // 24 requests over 6 s: the sentinels are asked about 6 times.
    let body = br#"{"key":"split","limit":5,"window_ms":60000}"#;
    let mut admitted = 0;
    for _ in 0..24 {
        let reply = common::request_to(
            server.http,
            http::Method::POST,
            "/v1/acquire",
            &[("content-type", "application/json")],
            body.to_vec(),
        )
        .await;
        let json = reply.json();
        assert!(json.get("degraded").is_none(), "{json}");
        admitted += u32::from(reply.status == StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    server.signal("TERM");
    server.wait();
    assert_eq!(admitted, 5, "admitted beyond the limit: the counters split");

    let followed = logged(&server, "sentinel: following the master");
    assert_eq!(followed.len(), 1, "flip-flop: {followed:#?}");
    let fields = &followed[0]["fields"];
    assert_eq!(fields["master"], group.master.addr(), "{fields}");
    assert_eq!(fields["previous"], "none", "{fields}");
    let disagree = logged(&server, "sentinel: the sentinels disagree");
    assert_eq!(disagree.len(), 1, "logged once: {disagree:#?}");
    let said = disagree[0]["fields"]["sentinels"]
        .as_str()
        .unwrap_or_default();
    for sentinel in [
        format!("{} names {}", rogue.addr(), m2.addr()),
        format!(
            "{} names {}",
            group.sentinels[0].addr(),
            group.master.addr()
        ),
        format!(
            "{} names {}",
            group.sentinels[1].addr(),
            group.master.addr()
        ),
    ] {
        assert!(said.contains(&sentinel), "{sentinel:?} not in {said:?}");
    }
    let m2_stats = m2.text(&["INFO", "commandstats"]);
    for command in ["cmdstat_role:", "cmdstat_evalsha:", "cmdstat_eval:"] {
        assert!(!m2_stats.contains(command), "M2 was used: {m2_stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sentinel_answering_is_not_ready_and_decided_by_the_policy() {
    let closed = [ReservedPort::new(), ReservedPort::new()];
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/{MASTER_NAME}",
        closed[0].port(),
        closed[1].port()
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
