//! Redis Cluster with replicas (3 masters, 3 replicas, node timeout 1 s):
//! a master SIGKILLed under load fails over to its replica, and the server
//! follows (slot map refresh, MOVED) with policy-decided answers meanwhile
//! and exact answers after.

mod common;
#[path = "common/load.rs"]
mod load;
#[path = "common/outage.rs"]
mod outage;
#[path = "common/process.rs"]
mod process;

use std::time::{Duration, Instant};

use common::redis::{Cluster, key_slot};
use http::StatusCode;
use load::{Answer, Latencies, Load, Sample, StallWatch};
use outage::*;
use slidegate::store::resilient::FailurePolicy;

/// How soon after the replica's promotion answers come from the cluster
/// again: the other masters learn of the promotion by gossip, and the
/// client refreshes its slot map on the next `MOVED` or failed call
/// (measured 0.2 to 1.9 s here).
const SETTLED: Duration = Duration::from_millis(3_500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_fails_over_and_slidegate_follows() {
    let _serial = SERIAL.lock().await;
    let cluster = off_thread(|| Cluster::start(3, 1, 1_000)).await;
    let server = in_process(&cluster.url(), FailurePolicy::Deny, STORE_TIMEOUT).await;
    let grpc = server.grpc_addr.expect("a gRPC listener");
    let watch = StallWatch::start();
    let load = Load::start(server.addr, grpc, &plan("failover"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The master of the first HTTP key (its Redis keys are `{failover0}`).
    let slot = key_slot("{failover0}");
    let victim = cluster.master_of(slot).expect("a master for the slot");
    let cluster = std::sync::Arc::new(
        off_thread(move || {
            let mut cluster = cluster;
            cluster.nodes[victim].kill();
            cluster
        })
        .await,
    );
    let killed = Instant::now();
    let watcher = std::sync::Arc::clone(&cluster);
    let promoted_at = off_thread(move || {
        while watcher.master_of(slot).is_none() {
            assert!(killed.elapsed() < Duration::from_secs(20), "no failover");
            std::thread::sleep(Duration::from_millis(20));
        }
        Instant::now()
    })
    .await;
    tokio::time::sleep(SETTLED + Duration::from_secs(1)).await;
    let samples = load.stop().await;
    let stalls = watch.stop();

    assert_no_failures("failover", &samples);
    assert_within_deadline("failover", &samples, &stalls);
    for s in samples.iter().filter(|s| s.answer.degraded()) {
        assert_eq!(
            s.answer,
            Answer::Denied { degraded: true },
            "deny policy: {s:?}"
        );
    }
    let late = degraded_since(&samples, promoted_at + SETTLED, &stalls);
    assert!(
        late.is_empty(),
        "degraded after the failover: {:?}",
        late.first()
    );
    let degraded: Vec<&Sample> = samples.iter().filter(|s| s.answer.degraded()).collect();
    let window = match (degraded.first(), degraded.last()) {
        (Some(first), Some(last)) => format!(
            "degraded from {:.0} ms to {:.0} ms after the kill",
            first.sent.saturating_duration_since(killed).as_secs_f64() * 1e3,
            last.done.saturating_duration_since(killed).as_secs_f64() * 1e3
        ),
        _ => "never degraded".to_owned(),
    };
    eprintln!(
        "cluster failover: replica promoted {:.0} ms after the kill; {window}; {}",
        (promoted_at - killed).as_secs_f64() * 1e3,
        Latencies::of(&samples)
    );
    // Exact again: a fresh key in the failed-over slot counts one by one.
    for expected in (0..LIMIT).rev() {
        let reply = server
            .post_json(
                "/v1/acquire",
                &format!(r#"{{"key":"after:{{failover0}}","limit":{LIMIT},"window_ms":60000}}"#),
            )
            .await;
        let json = reply.json();
        assert_eq!(reply.status, StatusCode::OK, "{json}");
        assert_eq!(json["remaining"], expected, "{json}");
        assert!(json.get("degraded").is_none(), "{json}");
    }
    drop(cluster);
}

/// 3 masters without replicas, and a cluster that keeps serving the slots
/// it still covers (`cluster-require-full-coverage no`): one master
/// SIGKILLed under load. Every key is asked in turn over HTTP. With one
/// circuit breaker per master, the keys of the dead master are decided by
/// the policy (degraded), and the keys of the two live masters by the
/// cluster, without a single degraded answer; `/readyz` stays ready (some
/// master answers) and the metrics name the node whose circuit is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_degrades_only_its_own_keys() {
    let _serial = SERIAL.lock().await;
    let cluster =
        off_thread(|| Cluster::start_with(3, 0, 1_000, &["--cluster-require-full-coverage", "no"]))
            .await;
    let server = in_process_with(&cluster.url(), FailurePolicy::Deny, STORE_TIMEOUT, true).await;
    let keys: Vec<(String, usize)> = (0..60)
        .map(|i| {
            let key = format!("node-key:{i}");
            // The server keeps ad-hoc keys in a key space of their own: the
            // slot is that of the stored key.
            let stored = slidegate_server::keys::adhoc_key(&key).expect("a valid key");
            let master = cluster.master_of(key_slot(&stored)).expect("a master");
            (key, master)
        })
        .collect();
    // Warm: every key decided by the cluster (and the slot map known).
    for (key, _) in &keys {
        let mut tries = 0;
        while ask(server.addr, key.clone()).await {
            tries += 1;
            assert!(tries < 100, "{key} never decided by the cluster");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let victim = keys[0].1;
    let victim_addr = cluster.nodes[victim].addr();
    let watch = StallWatch::start();
    let mut cluster = cluster;
    cluster = off_thread(move || {
        cluster.nodes[victim].kill();
        cluster
    })
    .await;
    let killed = Instant::now();
    // Rounds of every key at once, as concurrent clients would send them.
    let (mut on_victim, mut elsewhere) = ((0, 0), (0, 0));
    let mut degraded_elsewhere = Vec::new();
    while killed.elapsed() < Duration::from_secs(3) {
        let mut round = tokio::task::JoinSet::new();
        for (i, (key, _)) in keys.iter().enumerate() {
            let (addr, key) = (server.addr, key.clone());
            round.spawn(async move {
                let sent = Instant::now();
                let degraded = ask(addr, key).await;
                (i, degraded, sent, Instant::now())
            });
        }
        while let Some(answer) = round.join_next().await {
            let (i, degraded, sent, done) = answer.expect("a request task");
            let (key, master) = &keys[i];
            let tally = if *master == victim {
                &mut on_victim
            } else {
                &mut elsewhere
            };
            tally.0 += 1;
            if degraded {
                tally.1 += 1;
                if *master != victim {
                    degraded_elsewhere.push((key.clone(), sent, done));
                }
            }
        }
    }
    let stalls = watch.stop();
    // A stall of the machine can make a live master's call miss its
    // deadline, and its circuit then stays open for up to a second: such
    // answers are the policy's, not the dead master's doing.
    let excused = |(_, sent, done): &&(String, Instant, Instant)| {
        stalls.overlap(*sent, *done, STORE_TIMEOUT / 2, REOPENED)
    };
    let (after_stalls, degraded_elsewhere): (Vec<_>, Vec<_>) =
        degraded_elsewhere.iter().partition(excused);
    assert_few_needed_stalls(
        "the live masters' keys",
        after_stalls.len(),
        elsewhere.0,
        &stalls,
    );
    let since_kill = |(key, sent, _): &&(String, Instant, Instant)| {
        (key.clone(), sent.saturating_duration_since(killed))
    };
    let degraded_elsewhere: Vec<_> = degraded_elsewhere.iter().map(since_kill).collect();
    let ready = common::get(server.addr, "/readyz").await;
    let metrics = common::get(server.addr, "/metrics").await;
    let open_line = format!("slidegate_store_circuit_open{{node=\"{victim_addr}\"}} 1");
    eprintln!(
        "one master of 3 down for 3 s: its keys {}/{} degraded, the other keys {}/{} degraded \
         ({} of them after a stall of the machine; longest stall {:?})",
        on_victim.1,
        on_victim.0,
        elsewhere.1,
        elsewhere.0,
        after_stalls.len(),
        stalls.longest()
    );
    assert!(
        degraded_elsewhere.is_empty(),
        "keys of live masters were degraded: {:?}",
        &degraded_elsewhere[..degraded_elsewhere.len().min(5)]
    );
    assert!(elsewhere.0 > 100 && on_victim.0 > 20);
    assert!(
        on_victim.1 == on_victim.0,
        "the dead master's keys: {}/{} degraded",
        on_victim.1,
        on_victim.0
    );
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.json());
    assert!(
        String::from_utf8_lossy(&metrics.body).contains(&open_line),
        "{open_line} not in the metrics"
    );
    drop(cluster);
}

/// `POST /v1/acquire` for `key` (a limit it never reaches): true when the
/// answer was degraded (decided by the deny policy).
async fn ask(addr: std::net::SocketAddr, key: String) -> bool {
    let body = format!(r#"{{"key":"{key}","limit":1000000,"window_ms":60000}}"#);
    let reply = common::request_to(
        addr,
        http::Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        body.into_bytes(),
    )
    .await;
    let degraded = reply.json().get("degraded").is_some();
    let expected = if degraded {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    assert_eq!(reply.status, expected, "{}", reply.json());
    degraded
}
