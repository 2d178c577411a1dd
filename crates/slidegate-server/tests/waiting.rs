//! `POST /v1/acquire` with `max_wait_ms`: a request over the limit waits
//! for its reserved turn instead of being refused, over real loopback
//! sockets, on the memory store.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{StoreKind, TestServer};
use http::StatusCode;
use serde_json::json;
use slidegate::{MemoryStore, Rule};
use slidegate_server::commands::parts::Parts;
use slidegate_server::keys::adhoc_key;

fn body(key: &str, max_wait_ms: u64) -> String {
    json!({"key": key, "limit": 3, "window_ms": 1000, "max_wait_ms": max_wait_ms}).to_string()
}

/// Nine waiting requests at once, the `i`-th to `addrs[i % addrs.len()]`:
/// each one's `waited_ms` and when its answer came, sorted by `waited_ms`,
/// and when the first was sent.
async fn nine_waiters(addrs: &[SocketAddr], key: &'static str) -> (Vec<(u64, Instant)>, Instant) {
    let first_sent = Instant::now();
    let requests: Vec<_> = (0..9)
        .map(|i| {
            let addr = addrs[i % addrs.len()];
            tokio::spawn(async move {
                let reply = common::request_to(
                    addr,
                    http::Method::POST,
                    "/v1/acquire",
                    &[("content-type", "application/json")],
                    body(key, 3000).into_bytes(),
                )
                .await;
                (reply, Instant::now())
            })
        })
        .collect();
    let mut waited = Vec::new();
    for request in requests {
        let (reply, done) = request.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.json());
        assert_eq!(reply.json().get("degraded"), None, "decided by the store");
        waited.push((reply.json()["waited_ms"].as_u64().unwrap(), done));
    }
    waited.sort_unstable();
    (waited, first_sent)
}

/// Nine waiters on 3/1s pass in three groups: the first three at once,
/// the next three a window after the first admission, the last three two
/// windows after. No admission can come before the first request was sent,
/// so the `k`-th group's answers come at least `k` windows after that,
/// however loaded the machine; and each waiter says it waited no more than
/// its group's windows (and 1 ms of rounding).
fn assert_three_groups(waited: &[(u64, Instant)], first_sent: Instant) {
    let ms: Vec<u64> = waited.iter().map(|&(ms, _)| ms).collect();
    assert_eq!(&ms[..3], &[0, 0, 0], "three pass at once: {ms:?}");
    for (i, &(ms, done)) in waited.iter().enumerate() {
        let group = i as u64 / 3;
        let after = done - first_sent;
        assert!(
            after >= Duration::from_secs(group),
            "waiter {i} (group {group}) admitted {after:?} after the first was sent: {ms:?}"
        );
        assert!(
            ms <= 1001 * group && (group == 0 || ms > 1000 * (group - 1)),
            "waiter {i} (group {group}) says it waited {ms} ms"
        );
    }
}

/// The most admissions any closed interval of `window` µs holds.
fn busiest_window(admissions: &[(u64, u64)], window: u64) -> u64 {
    admissions
        .iter()
        .map(|&(from, _)| {
            admissions
                .iter()
                .filter(|&&(at, _)| from <= at && at <= from + window)
                .map(|&(_, cost)| cost)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn nine_waiting_requests_on_three_per_second_pass_in_three_groups() {
    let store = MemoryStore::new();
    let server = TestServer::full(Parts::new(store.clone())).await;
    let (waited, first_sent) = nine_waiters(&[server.addr], "k").await;
    assert_three_groups(&waited, first_sent);
    // In the store's own log: each waiter took the time at which the
    // admission three before it is one window and 1 µs old.
    let rule = Rule::parse("3/1s").unwrap();
    let log = store
        .admissions(adhoc_key("k").unwrap().as_str(), rule)
        .unwrap();
    let times: Vec<u64> = log
        .iter()
        .flat_map(|&(at, cost)| std::iter::repeat_n(at, cost as usize))
        .collect();
    assert_eq!(times.len(), 9);
    for i in 3..9 {
        assert_eq!(times[i], times[i - 3] + 1_000_001, "{times:?}");
    }
    assert_eq!(busiest_window(&log, 1_000_000), 3);
}

on_every_store!(waiting_requests_pass_in_groups_of_the_limit);

/// Nine waiting requests on 3/1s through the backend `slidegate serve`
/// builds (the Redis one reserves in one script call).
async fn waiting_requests_pass_in_groups_of_the_limit(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let (waited, first_sent) = nine_waiters(&[server.addr], "k").await;
    assert_three_groups(&waited, first_sent);
    let tenth = server.post_json("/v1/acquire", &body("k", 100)).await;
    assert_eq!(tenth.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_request_that_would_wait_too_long_is_refused_at_once() {
    let store = MemoryStore::new();
    let server = TestServer::full(Parts::new(store.clone())).await;
    for _ in 0..3 {
        let reply = server.post_json("/v1/acquire", &body("k", 0)).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let reply = server.post_json("/v1/acquire", &body("k", 500)).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.json()["retry_after_ms"].as_u64().unwrap() > 500);
    assert_eq!(reply.json().get("waited_ms"), None);
    let rule = Rule::parse("3/1s").unwrap();
    let log = store
        .admissions(adhoc_key("k").unwrap().as_str(), rule)
        .unwrap();
    assert_eq!(
        log.iter().map(|&(_, c)| c).sum::<u64>(),
        3,
        "nothing recorded"
    );
}

#[tokio::test]
async fn requests_beyond_max_waiting_get_503_too_many_waiting() {
    let parts = Parts::new(MemoryStore::new()).with_max_waiting(1);
    let waiting = parts.waiting().clone();
    let server = TestServer::full(parts).await;
    for _ in 0..3 {
        server.post_json("/v1/acquire", &body("k", 0)).await;
    }
    let addr = server.addr;
    let first = tokio::spawn(async move {
        common::request_to(
            addr,
            http::Method::POST,
            "/v1/acquire",
            &[("content-type", "application/json")],
            body("k", 3000).into_bytes(),
        )
        .await
    });
    while waiting.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = server.post_json("/v1/acquire", &body("other", 3000)).await;
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.error_code(), "too_many_waiting");
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
}

#[tokio::test]
async fn a_client_that_leaves_while_waiting_gives_its_place_back() {
    let parts = Parts::new(MemoryStore::new());
    let waiting = parts.waiting().clone();
    let server = TestServer::full(parts).await;
    for _ in 0..3 {
        server.post_json("/v1/acquire", &body("k", 0)).await;
    }
    let addr = server.addr;
    let client = tokio::spawn(async move {
        common::request_to(
            addr,
            http::Method::POST,
            "/v1/acquire",
            &[("content-type", "application/json")],
            body("k", 3000).into_bytes(),
        )
        .await
    });
    while waiting.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.abort();
    let gone = async {
        while waiting.count() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(2), gone)
        .await
        .expect("the waiting count went back to 0 when the client left");
}

/// Three server instances on one Redis: their waiting requests share the
/// one limit and pass in order, three per second, whichever instance
/// each one asked.
#[tokio::test]
async fn waiting_requests_on_three_instances_share_one_limit_on_redis() {
    let redis = common::redis::Redis::start();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let url = slidegate_server::store::StoreUrl::Redis(redis.url());
        let backend =
            common::backend(url, slidegate::store::resilient::FailurePolicy::Deny, 5_000).await;
        servers.push(TestServer::start(backend).await);
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    let (waited, first_sent) = nine_waiters(&addrs, "shared").await;
    assert_three_groups(&waited, first_sent);
    let tenth = servers[1]
        .post_json("/v1/acquire", &body("shared", 100))
        .await;
    assert_eq!(tenth.status, StatusCode::TOO_MANY_REQUESTS);
}
