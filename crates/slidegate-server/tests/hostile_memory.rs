//! Clients that try to exhaust the memory store through `POST /v1/acquire`,
//! against the real `slidegate serve --store memory`: a flood of new rules
//! on one key, and a flood of admissions under a huge limit and a long
//! window. The store's memory stays within `--max-memory-bytes`, the
//! process' memory (`VmRSS`) stops growing, and every answer is a 200, a
//! 400 or a 429, never a 5xx. The ad-hoc bounds (`--max-adhoc-limit`,
//! `--max-adhoc-window`) are raised to what the API can take, so these
//! floods reach the store.

#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use process::Slidegate;
use tokio::net::TcpStream;

/// The longest window the API accepts: 10 years, in ms.
const TEN_YEARS_MS: u64 = 10 * 365 * 86_400 * 1000;

/// The largest limit the API accepts.
const HUGE_LIMIT: u64 = 1_000_000_000_000;

/// One keep-alive HTTP/1.1 connection to the server.
struct Client {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

/// A status and the JSON body that came with it.
struct Answer {
    status: StatusCode,
    json: serde_json::Value,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Client {
            sender,
            host: addr.to_string(),
        }
    }

    async fn acquire(&mut self, body: &serde_json::Value) -> Answer {
        let exchange = async {
            self.sender
                .ready()
                .await
                .expect("the connection stays open");
            let request = Request::post("/v1/acquire")
                .header("host", &self.host)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("a request");
            let response = self.sender.send_request(request).await.expect("a response");
            let status = response.status();
            let body = response.into_body().collect().await.expect("a body");
            let json = serde_json::from_slice(&body.to_bytes()).unwrap_or_default();
            Answer { status, json }
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("the server answers in time")
    }
}

/// A request for `key` under 16 sliding-log rules of a 10-year window,
/// limits from `first_limit` up: distinct from those of any other first
/// limit at least 16 apart.
fn sixteen_rules(key: &str, first_limit: u64) -> serde_json::Value {
    let rules: Vec<serde_json::Value> = (0..16)
        .map(|i| serde_json::json!({"limit": first_limit + i, "window_ms": TEN_YEARS_MS}))
        .collect();
    serde_json::json!({"key": key, "rules": rules})
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_rules_on_one_key_is_refused_with_400_and_memory_stops_growing() {
    let server = Slidegate::start(&[
        "--store",
        "memory",
        "--max-adhoc-limit",
        "1000000000000",
        "--max-adhoc-window",
        "3650d",
        "--max-memory-bytes",
        "67108864",
    ]);
    let mut client = Client::connect(server.http).await;
    let first = client.acquire(&sixteen_rules("victim", 1_000)).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.json);
    let warm = 500;
    let mut rss_warm = 0;
    for n in 1..=5_000u64 {
        let answer = client
            .acquire(&sixteen_rules("victim", 1_000 + 16 * n))
            .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.json);
        assert_eq!(answer.json["error"]["code"], "too_many_rules");
        if n == warm {
            rss_warm = server.rss_kib();
        }
    }
    let rss_end = server.rss_kib();
    eprintln!(
        "rules flood: VmRSS {:.1} MiB after {warm} refusals, {:.1} MiB after 5000",
        mib(rss_warm),
        mib(rss_end)
    );
    assert!(
        rss_end <= rss_warm + 2 * 1024,
        "VmRSS grew from {rss_warm} to {rss_end} KiB while every request was refused"
    );
    let message = client.acquire(&sixteen_rules("victim", 999_999)).await.json;
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-rules-per-key")),
        "{message}"
    );
    // The key's own rules are still decided.
    let again = client.acquire(&sixteen_rules("victim", 1_000)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.json);
    assert!(server.panics().is_empty(), "{:?}", server.panics());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_rules_per_key_are_accepted_when_the_flag_allows_them() {
    let server = Slidegate::start(&[
        "--store",
        "memory",
        "--max-adhoc-limit",
        "1000000000000",
        "--max-adhoc-window",
        "3650d",
        "--max-rules-per-key",
        "32",
    ]);
    let mut client = Client::connect(server.http).await;
    for n in 0..2 {
        let answer = client.acquire(&sixteen_rules("k", 1_000 + 16 * n)).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.json);
    }
    let third = client.acquire(&sixteen_rules("k", 2_000)).await;
    assert_eq!(third.json["error"]["code"], "too_many_rules");
}

/// 2 MiB: a few seconds of admissions fill it.
const SMALL_BUDGET: u64 = 2 << 20;

/// Sends `answers` requests for each of `keys` keys, one connection per
/// key, each request 16 admissions under huge 10-year rules; returns the
/// counts of (200, 429) answers.
async fn admission_flood(addr: SocketAddr, keys: u64, answers: u64) -> (u64, u64) {
    let tasks: Vec<_> = (0..keys)
        .map(|k| {
            tokio::spawn(async move {
                let mut client = Client::connect(addr).await;
                let body = sixteen_rules(&format!("greedy-{k}"), HUGE_LIMIT - 16);
                let (mut allowed, mut denied) = (0, 0);
                for _ in 0..answers {
                    let answer = client.acquire(&body).await;
                    match answer.status {
                        StatusCode::OK => allowed += 1,
                        StatusCode::TOO_MANY_REQUESTS => {
                            assert_eq!(answer.json["degraded"], true, "{}", answer.json);
                            denied += 1;
                        }
                        other => panic!("{other}: {}", answer.json),
                    }
                }
                (allowed, denied)
            })
        })
        .collect();
    let mut total = (0, 0);
    for task in tasks {
        let (allowed, denied) = task.await.expect("a flood task");
        total = (total.0 + allowed, total.1 + denied);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_flood_under_a_huge_limit_and_a_long_window_stays_within_max_memory_bytes() {
    let budget = SMALL_BUDGET.to_string();
    let server = Slidegate::start(&[
        "--store",
        "memory",
        "--max-adhoc-limit",
        "1000000000000",
        "--max-adhoc-window",
        "3650d",
        "--max-memory-bytes",
        &budget,
    ]);
    let rss_start = server.rss_kib();
    // 4 keys x 16 logs: 64 logs of 16-byte entries, each request a new
    // entry in each. 2 MiB hold 131,072 entries, 2,048 per log: 3,000
    // requests per key need more.
    let (allowed, denied) = admission_flood(server.http, 4, 3_000).await;
    let rss_full = server.rss_kib();
    eprintln!(
        "admission flood: {allowed} admitted, {denied} denied; VmRSS {:.1} MiB at start, {:.1} MiB once full",
        mib(rss_start),
        mib(rss_full)
    );
    assert!(denied > 0, "the store never filled ({allowed} admitted)");
    assert!(
        allowed * 16 <= SMALL_BUDGET / 16,
        "{allowed} requests of 16 admissions fit 2 MiB of 16-byte entries"
    );
    // Full: it stops growing.
    let (more, _) = admission_flood(server.http, 4, 1_000).await;
    let rss_end = server.rss_kib();
    eprintln!(
        "admission flood: {more} more admitted; VmRSS {:.1} MiB",
        mib(rss_end)
    );
    assert!(
        rss_end <= rss_full + 2 * 1024,
        "VmRSS grew from {rss_full} to {rss_end} KiB on a full store"
    );
    // Generous: the bound is the store's, not the process' (tokio, the
    // HTTP stack and the allocator keep their own).
    assert!(
        rss_end <= rss_start + SMALL_BUDGET / 1024 + 16 * 1024,
        "VmRSS {rss_end} KiB, from {rss_start} KiB, with a 2 MiB bound"
    );
    assert!(server.panics().is_empty(), "{:?}", server.panics());
}
