//! The process' life around its store, with the built binary: started
//! while Redis is down (it serves, says it is not ready, and becomes ready
//! once Redis answers, without a restart), and stopped with SIGTERM under
//! load (requests in flight answered, listeners closed, exit 0).

mod common;
#[path = "common/load.rs"]
mod load;
#[path = "common/outage.rs"]
mod outage;
#[path = "common/process.rs"]
mod process;

use std::time::{Duration, Instant};

use common::redis::{Redis, ReservedPort};
use http::StatusCode;
use load::{Answer, Load, Plan, Sample};
use outage::*;
use process::Slidegate;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

async fn grpc_health(addr: std::net::SocketAddr) -> i32 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("the gRPC listener accepts");
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("a health answer")
        .into_inner()
        .status
}

async fn acquire_once(server: &Slidegate) -> serde_json::Value {
    let reply = common::request_to(
        server.http,
        http::Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        br#"{"key":"boot","limit":100,"window_ms":60000}"#.to_vec(),
    )
    .await;
    assert!(
        reply.status == StatusCode::OK || reply.status == StatusCode::TOO_MANY_REQUESTS,
        "{reply:?}"
    );
    reply.json()
}

/// Polls `check` every 20 ms until it holds; returns how long that took.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    bound: Duration,
    mut check: impl FnMut() -> F,
) -> Duration {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < bound, "not {what} after {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_starts_while_redis_is_down_and_becomes_ready_when_it_answers() {
    let _serial = SERIAL.lock().await;
    // Held until Redis starts on it: a port let go in between can be
    // taken by the server's own listeners or by anything else.
    let reserved = ReservedPort::new();
    let url = format!("redis://127.0.0.1:{}", reserved.port());
    let mut server = Slidegate::start(&[
        "--store",
        &url,
        "--on-store-error",
        "deny",
        "--store-timeout-ms",
        "100",
    ]);
    assert_eq!(
        common::get(server.http, "/healthz").await.status,
        StatusCode::OK
    );
    let not_ready = common::get(server.http, "/readyz").await;
    assert_eq!(not_ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(not_ready.json()["error"]["code"], "store_unavailable");
    let by_policy = acquire_once(&server).await;
    assert_eq!(
        (&by_policy["allowed"], &by_policy["degraded"]),
        (&false.into(), &true.into())
    );
    until("NOT_SERVING over gRPC", Duration::from_secs(5), || async {
        grpc_health(server.grpc).await == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        server.is_running(),
        "exited while Redis was down: {:?}",
        server.logs()
    );

    let port = reserved.release();
    let _redis = off_thread(move || Redis::start_on(port, &[])).await;
    let ready = until("ready", Duration::from_secs(10), || async {
        common::get(server.http, "/readyz").await.status == StatusCode::OK
    })
    .await;
    let decided = until("deciding with Redis", Duration::from_secs(10), || async {
        acquire_once(&server).await.get("degraded").is_none()
    })
    .await;
    let serving = until("SERVING over gRPC", Duration::from_secs(10), || async {
        grpc_health(server.grpc).await == 1
    })
    .await;
    eprintln!(
        "started without Redis: /readyz 200 {:.0} ms after Redis answered, Redis-backed decisions after {:.0} ms, gRPC SERVING after {:.0} ms",
        ready.as_secs_f64() * 1e3,
        (ready + decided).as_secs_f64() * 1e3,
        (ready + decided + serving).as_secs_f64() * 1e3
    );
    assert!(server.is_running());
    assert!(server.panics().is_empty(), "{:?}", server.panics());
    let serving_lines = server
        .logs()
        .iter()
        .filter(|l| l.contains("slidegate is serving"))
        .count();
    assert_eq!(serving_lines, 1, "started more than once");
    server.signal("TERM");
    assert!(off_thread(move || server.wait()).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_what_is_in_flight_closes_the_listeners_and_exits_0() {
    let _serial = SERIAL.lock().await;
    let redis = std::sync::Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rules = rules_file(dir.path());
    let timeout_ms = STORE_TIMEOUT.as_millis().to_string();
    let server = Slidegate::start(&[
        "--store",
        &redis.url(),
        "--on-store-error",
        "allow",
        "--store-timeout-ms",
        &timeout_ms,
        "--config",
        &rules,
    ]);
    until_ready(&server).await;
    let (http, grpc) = (server.http, server.grpc);
    let busy = Plan {
        http_workers: 6,
        grpc_workers: 3,
        pace: Duration::from_millis(5),
        ..plan("term")
    };
    let load = Load::start(http, grpc, &busy);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Redis stops answering, so every request waits for the store's
    // deadline: the signal finds requests in flight.
    let sleeper = std::sync::Arc::clone(&redis);
    let stall = tokio::task::spawn_blocking(move || sleeper.text(&["DEBUG", "SLEEP", "0.3"]));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let term = Instant::now();
    server.signal("TERM");
    let (server, status) = off_thread(move || {
        let mut server = server;
        let status = server.wait();
        (server, status)
    })
    .await;
    let exited = Instant::now();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let samples = load.stop().await;
    assert_eq!(stall.await.expect("DEBUG SLEEP"), "OK");

    assert!(status.success(), "{status:?}; logs: {:?}", server.logs());
    assert!(server.logs().iter().any(|l| l.contains("SIGTERM")));
    assert!(server.panics().is_empty(), "{:?}", server.panics());
    // Everything sent before the signal was answered, in flight or not.
    let before: Vec<Sample> = samples
        .iter()
        .filter(|s| s.sent + Duration::from_millis(20) < term)
        .cloned()
        .collect();
    assert_no_failures("sent before SIGTERM", &before);
    let in_flight = before.iter().filter(|s| s.done > term).count();
    assert!(in_flight > 0, "no request was in flight at the signal");
    // Once it has exited, nothing listens.
    for addr in [http, grpc] {
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "{addr} still accepts"
        );
    }
    assert!(
        samples
            .iter()
            .filter(|s| s.sent > exited)
            .all(|s| !matches!(s.answer, Answer::Allowed { .. } | Answer::Denied { .. })),
        "answered after the process exited"
    );
    eprintln!(
        "SIGTERM under load: {in_flight} requests in flight answered, exit 0 after {:.0} ms",
        (exited - term).as_secs_f64() * 1e3
    );
}
