//! The HTTP API v1 over real loopback sockets: every route, every status,
//! the exact headers and bodies. The decisions are checked on the memory
//! store and on a real Redis (`NAME::memory`, `NAME::redis`).

mod common;

use std::time::Duration;

use common::{StoreKind, TestServer};
use http::{Method, StatusCode};
use serde_json::json;
use slidegate::{Decision, Hit, MemoryStore, Rule, Store};

on_every_store!(
    an_allowed_request_gets_200_the_documented_body_and_draft_10_headers,
    requests_past_the_limit_get_429_with_retry_after,
    waits_and_windows_are_whole_seconds_rounded_up,
    cost_consumes_that_many_units_and_zero_consumes_none,
    each_algorithm_keeps_its_own_state,
    a_burst_passes_at_once_then_the_rate_answering_the_rates_limit,
    several_rules_pass_or_fail_together_and_are_listed_in_the_headers,
    peek_reports_usage_without_consuming,
    peek_of_an_exhausted_key_is_200_with_allowed_false,
    peek_of_an_unknown_key_reports_the_full_quota,
    peek_decodes_percent_encoded_keys,
    healthz_is_200_while_serving,
    readyz_is_200_when_the_store_answers
);

fn acquire_body(key: &str, limit: u64, window_ms: u64) -> String {
    json!({"key": key, "limit": limit, "window_ms": window_ms}).to_string()
}

async fn an_allowed_request_gets_200_the_documented_body_and_draft_10_headers(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let reply = server
        .post_json("/v1/acquire", &acquire_body("login:10.0.0.1", 100, 60_000))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    // An admission stops counting once it is *more* than the window old:
    // the key is empty again after 60 s + 1 µs, which rounds up to
    // 60 001 ms and to 61 s.
    assert_eq!(
        reply.json(),
        json!({"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60001,"retry_after_ms":0})
    );
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(r#""default";q=100;w=60"#)
    );
    assert_eq!(reply.header("ratelimit"), Some(r#""default";r=99;t=61"#));
    assert_eq!(reply.header("retry-after"), None);
}

async fn requests_past_the_limit_get_429_with_retry_after(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let body = acquire_body("k", 3, 60_000);
    for remaining in [2, 1, 0] {
        let reply = server.post_json("/v1/acquire", &body).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.json()["remaining"], remaining);
    }
    let denied = server.post_json("/v1/acquire", &body).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    let json = denied.json();
    assert_eq!(json["allowed"], false);
    assert_eq!(json["limit"], 3);
    assert_eq!(json["remaining"], 0);
    assert!(json.get("degraded").is_none(), "{json}");
    let retry_ms = json["retry_after_ms"].as_u64().unwrap();
    assert!((1..=60_001).contains(&retry_ms), "{json}");
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some(r#""default";q=3;w=60"#)
    );
    let retry_after: u64 = denied.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry_after, retry_ms.div_ceil(1000));
    assert_eq!(
        denied.header("ratelimit"),
        Some(format!(r#""default";r=0;t={retry_after}"#).as_str())
    );
}

async fn waits_and_windows_are_whole_seconds_rounded_up(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let body = acquire_body("round", 1, 1_900);
    assert_eq!(
        server.post_json("/v1/acquire", &body).await.status,
        StatusCode::OK
    );
    let denied = server.post_json("/v1/acquire", &body).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    // 1.9 s is announced as 2 s; the wait (a little under 1.9 s) too.
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some(r#""default";q=1;w=2"#)
    );
    assert_eq!(denied.header("ratelimit"), Some(r#""default";r=0;t=2"#));
    assert_eq!(denied.header("retry-after"), Some("2"));
    let retry_ms = denied.json()["retry_after_ms"].as_u64().unwrap();
    assert!((1_000..=1_900).contains(&retry_ms), "{retry_ms}");

    let short = server
        .post_json("/v1/acquire", &acquire_body("short", 5, 250))
        .await;
    assert_eq!(
        short.header("ratelimit-policy"),
        Some(r#""default";q=5;w=1"#)
    );
    assert_eq!(short.header("ratelimit"), Some(r#""default";r=4;t=1"#));
}

async fn cost_consumes_that_many_units_and_zero_consumes_none(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let with_cost = |cost: u64| {
        json!({"key": "bulk", "limit": 10, "window_ms": 60_000, "cost": cost}).to_string()
    };
    let reply = server.post_json("/v1/acquire", &with_cost(4)).await;
    assert_eq!(reply.json()["remaining"], 6);
    let probe = server.post_json("/v1/acquire", &with_cost(0)).await;
    assert_eq!(probe.status, StatusCode::OK);
    assert_eq!(probe.json()["remaining"], 6);
    let reply = server.post_json("/v1/acquire", &with_cost(6)).await;
    assert_eq!(reply.json()["remaining"], 0);
    let denied = server.post_json("/v1/acquire", &with_cost(1)).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
}

async fn each_algorithm_keeps_its_own_state(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    // A day, not a minute: fixed windows are aligned to the epoch,
    // and a boundary passed between the two requests (one run in about
    // 60,000 / the milliseconds between them) admitted the second one.
    let body = |algorithm: &str| {
        json!({"key": "algo", "limit": 1, "window_ms": 86_400_000, "algorithm": algorithm})
            .to_string()
    };
    for algorithm in ["sliding_log", "sliding_counter", "fixed_window", "gcra"] {
        let first = server.post_json("/v1/acquire", &body(algorithm)).await;
        assert_eq!(first.status, StatusCode::OK, "{algorithm}");
        let second = server.post_json("/v1/acquire", &body(algorithm)).await;
        assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS, "{algorithm}");
    }
}

async fn a_burst_passes_at_once_then_the_rate_answering_the_rates_limit(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    // 10 a minute (one per 6 s), up to 50 at once; a burst alone is gcra.
    let body = json!({"key": "bucket", "limit": 10, "window_ms": 60_000, "burst": 50}).to_string();
    let started = std::time::Instant::now();
    let first = server.post_json("/v1/acquire", &body).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json()["limit"], 10);
    assert_eq!(first.json()["remaining"], 49);
    assert_eq!(first.json()["reset_after_ms"], 6_000);
    for remaining in (0..49).rev() {
        let reply = server.post_json("/v1/acquire", &body).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.json()["remaining"], remaining);
    }
    let denied = server.post_json("/v1/acquire", &body).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    // One emission interval (6 s) and the whole burst (300 s) from the
    // first request, less the time the 51 requests took (on a loaded
    // machine, it can pass a second; 1 ms for rounding).
    let took = u64::try_from(started.elapsed().as_millis()).unwrap() + 1;
    let retry_ms = denied.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        (6_000_u64.saturating_sub(took)..=6_000).contains(&retry_ms),
        "{retry_ms} after {took} ms"
    );
    let reset_ms = denied.json()["reset_after_ms"].as_u64().unwrap();
    assert!(
        (300_000_u64.saturating_sub(took)..=300_000).contains(&reset_ms),
        "{reset_ms} after {took} ms"
    );
    // The same state seen through a peek that names the burst.
    let peek = server
        .get("/v1/keys/bucket?limit=10&window_ms=60000&algorithm=gcra&burst=50")
        .await;
    assert_eq!(peek.json()["remaining"], 0);
    let other = server
        .get("/v1/keys/bucket?limit=10&window_ms=60000&algorithm=gcra")
        .await;
    assert_eq!(
        other.json()["remaining"],
        10,
        "another burst is another state"
    );
    // Per rule, beside a rule without one: both must pass.
    let rules = json!({"key": "pair", "rules": [
        {"limit": 10, "window_ms": 60_000, "algorithm": "gcra", "burst": 3},
        {"limit": 100, "window_ms": 60_000}
    ]})
    .to_string();
    for _ in 0..3 {
        let reply = server.post_json("/v1/acquire", &rules).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let denied = server.post_json("/v1/acquire", &rules).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    for bad in [
        json!({"key": "k", "limit": 10, "window_ms": 1000, "algorithm": "sliding_log", "burst": 5}),
        json!({"key": "k", "limit": 10, "window_ms": 1000, "burst": 0}),
        json!({"key": "k", "limit": 10, "window_ms": 1000, "burst": "5"}),
        json!({"key": "k", "limit": 10, "window_ms": 1000, "burst": 1_000_001}),
        json!({"key": "k", "algorithm": "fixed_window", "rules": [
            {"limit": 10, "window_ms": 1000, "burst": 5}]}),
    ] {
        let reply = server.post_json("/v1/acquire", &bad.to_string()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(reply.json()["error"]["code"], "invalid_burst", "{bad}");
    }
}

async fn several_rules_pass_or_fail_together_and_are_listed_in_the_headers(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let body = json!({
        "key": "user:42",
        "rules": [
            {"limit": 2, "window_ms": 60_000},
            {"limit": 5, "window_ms": 3_600_000},
        ]
    })
    .to_string();
    for remaining in [1, 0] {
        let reply = server.post_json("/v1/acquire", &body).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.json()["remaining"], remaining);
        assert_eq!(reply.json()["limit"], 2);
    }
    let denied = server.post_json("/v1/acquire", &body).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["limit"], 2);
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some(r#""p0";q=2;w=60, "p1";q=5;w=3600"#)
    );
    let retry_after = denied.header("retry-after").unwrap().to_owned();
    let state = denied.header("ratelimit").unwrap();
    let (p0, p1) = state.split_once(", ").unwrap();
    assert_eq!(p0, format!(r#""p0";r=0;t={retry_after}"#));
    // The hour rule allowed: its `t` is the time until its window is empty,
    // 3600 s after the first admission (+1 µs), rounded up.
    let t1: u64 = p1.strip_prefix(r#""p1";r=3;t="#).unwrap().parse().unwrap();
    assert!((3599..=3601).contains(&t1), "{state}");
    // The denied request was recorded in neither rule: the hour rule still
    // has 3 units.
    let hour = server
        .get("/v1/keys/user:42?limit=5&window_ms=3600000")
        .await;
    assert_eq!(hour.json()["remaining"], 3);
}

async fn peek_reports_usage_without_consuming(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let body = acquire_body("peeked", 3, 60_000);
    server.post_json("/v1/acquire", &body).await;
    server.post_json("/v1/acquire", &body).await;
    for _ in 0..3 {
        let peek = server.get("/v1/keys/peeked?limit=3&window_ms=60000").await;
        assert_eq!(peek.status, StatusCode::OK);
        let json = peek.json();
        assert_eq!(json["allowed"], true);
        assert_eq!(json["remaining"], 1);
        assert_eq!(json["retry_after_ms"], 0);
        assert_eq!(
            peek.header("ratelimit-policy"),
            Some(r#""default";q=3;w=60"#)
        );
        assert!(
            peek.header("ratelimit")
                .unwrap()
                .starts_with(r#""default";r=1;t="#)
        );
    }
    let last = server.post_json("/v1/acquire", &body).await;
    assert_eq!(last.status, StatusCode::OK);
    assert_eq!(last.json()["remaining"], 0);
}

async fn peek_of_an_exhausted_key_is_200_with_allowed_false(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    server
        .post_json("/v1/acquire", &acquire_body("spent", 1, 60_000))
        .await;
    let peek = server.get("/v1/keys/spent?limit=1&window_ms=60000").await;
    assert_eq!(peek.status, StatusCode::OK);
    let json = peek.json();
    assert_eq!(json["allowed"], false);
    assert_eq!(json["remaining"], 0);
    let retry_ms = json["retry_after_ms"].as_u64().unwrap();
    assert!(retry_ms > 0);
    let t = retry_ms.div_ceil(1000);
    assert_eq!(
        peek.header("ratelimit"),
        Some(format!(r#""default";r=0;t={t}"#).as_str())
    );
    assert_eq!(peek.header("retry-after"), None);
}

async fn peek_of_an_unknown_key_reports_the_full_quota(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let peek = server
        .get("/v1/keys/never-seen?limit=7&window_ms=1000&algorithm=gcra")
        .await;
    assert_eq!(peek.status, StatusCode::OK);
    assert_eq!(peek.json()["allowed"], true);
    assert_eq!(peek.json()["remaining"], 7);
}

async fn peek_decodes_percent_encoded_keys(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    server
        .post_json("/v1/acquire", &acquire_body("a/b c:{tag}", 2, 60_000))
        .await;
    let peek = server
        .get("/v1/keys/a%2Fb%20c:%7Btag%7D?limit=2&window_ms=60000")
        .await;
    assert_eq!(peek.status, StatusCode::OK);
    assert_eq!(peek.json()["remaining"], 1);
}

async fn healthz_is_200_while_serving(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let reply = server.get("/healthz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json(), json!({"status": "ok"}));
}

async fn readyz_is_200_when_the_store_answers(kind: StoreKind) {
    let server = TestServer::on(kind).await;
    let reply = server.get("/readyz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), json!({"status": "ready"}));
}

/// A memory store that reports itself unreachable, as a Redis store does
/// while Redis is down.
struct UnreachableStore(MemoryStore);

impl Store for UnreachableStore {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        Store::acquire(&self.0, key, rules, cost).await
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Store::acquire_batch(&self.0, hits).await
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        Store::reset(&self.0, key).await
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Err(slidegate::Error::Store("connection refused".into()))
    }
}

/// A store with a bug: it panics on every decision.
struct PanickingStore;

impl Store for PanickingStore {
    async fn acquire(&self, _: &str, _: &[Rule], _: u64) -> slidegate::Result<Decision> {
        panic!("a bug in the store")
    }

    async fn acquire_batch(&self, _: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        panic!("a bug in the store")
    }

    async fn reset(&self, _: &str) -> slidegate::Result<()> {
        Ok(())
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panic_while_deciding_is_a_json_500_and_the_server_keeps_serving() {
    let server = TestServer::start(PanickingStore).await;
    for _ in 0..2 {
        let reply = server
            .post_json("/v1/acquire", &acquire_body("k", 1, 1000))
            .await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reply.error_code(), "internal_error");
    }
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn readyz_is_503_with_a_json_body_when_the_store_is_unreachable() {
    let server = TestServer::start(UnreachableStore(MemoryStore::new())).await;
    let reply = server.get("/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let json = reply.json();
    assert_eq!(json["status"], "unavailable");
    assert_eq!(json["error"]["code"], "store_unavailable");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection refused")
    );
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_store_failure_is_a_json_503_not_a_decision() {
    let full = MemoryStore::builder()
        .max_keys(1)
        .sweep_interval(None)
        .build();
    let server = TestServer::start(full).await;
    let first = server
        .post_json("/v1/acquire", &acquire_body("first", 10, 60_000))
        .await;
    assert_eq!(first.status, StatusCode::OK);
    let second = server
        .post_json("/v1/acquire", &acquire_body("second", 10, 60_000))
        .await;
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.error_code(), "store_unavailable");
    assert_eq!(second.header("ratelimit"), None);
}

#[tokio::test]
async fn unknown_paths_get_a_json_404() {
    let server = TestServer::memory().await;
    for path in [
        "/v1/acquirex",
        "/v1/keys",
        "/v1/keys/a/b",
        "/v2/acquire",
        "/",
    ] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.error_code(), "not_found", "{path}");
    }
}

#[tokio::test]
async fn wrong_methods_get_a_json_405_with_allow() {
    let server = TestServer::memory().await;
    let cases = [
        (Method::GET, "/v1/acquire", "POST"),
        (Method::PUT, "/v1/acquire", "POST"),
        (Method::PUT, "/v1/keys/k", "GET,HEAD,DELETE"),
        (Method::POST, "/v1/keys/k", "GET,HEAD,DELETE"),
        (Method::GET, "/v1/check", "POST"),
        (Method::POST, "/healthz", "GET,HEAD"),
    ];
    for (method, path, allow) in cases {
        let reply = server.request(method.clone(), path, &[], Vec::new()).await;
        assert_eq!(
            reply.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(reply.error_code(), "method_not_allowed", "{method} {path}");
        assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
    }
}

#[tokio::test]
async fn every_answer_tells_browsers_not_to_sniff_its_type() {
    let server = TestServer::full(slidegate_server::commands::parts::Parts::new(
        MemoryStore::new(),
    ))
    .await;
    let json = [("content-type", "application/json")];
    let check = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    /// A request: method, path, header fields, body.
    type Case<'a> = (Method, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 17] = [
        (
            Method::POST,
            "/v1/acquire",
            &json,
            r#"{"key":"k","limit":1,"window_ms":1000}"#,
        ),
        (
            Method::POST,
            "/v1/acquire",
            &json,
            r#"{"key":"k","limit":1,"window_ms":1000}"#,
        ),
        (Method::POST, "/v1/acquire", &json, r#"{"key":"k"}"#),
        (Method::POST, "/v1/check", &json, check),
        (Method::POST, "/json", &json, check),
        (Method::GET, "/v1/keys/k?limit=1&window_ms=1000", &[], ""),
        (Method::DELETE, "/v1/keys/k", &[], ""),
        (Method::GET, "/healthz", &[], ""),
        (Method::GET, "/readyz", &[], ""),
        (Method::GET, "/metrics", &[], ""),
        (Method::GET, "/ui", &[], ""),
        (Method::GET, "/ui/app.js", &[], ""),
        (Method::GET, "/v1/stats", &[], ""),
        (Method::GET, "/v1/config", &[], ""),
        (Method::GET, "/nope", &[], ""),
        (Method::GET, "/v1/acquire", &[], ""),
        (
            Method::POST,
            "/v1/acquire",
            &[("content-type", "text/html")],
            "<p>",
        ),
    ];
    let mut statuses = Vec::new();
    for (method, path, headers, body) in cases {
        let reply = server
            .request(method.clone(), path, headers, body.as_bytes().to_vec())
            .await;
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{method} {path}: {}",
            reply.status
        );
        statuses.push(reply.status.as_u16());
    }
    // Answers of every kind: allowed, denied, bad input, refused, missing.
    for status in [200, 429, 400, 403, 404, 405, 415] {
        assert!(statuses.contains(&status), "no {status} in {statuses:?}");
    }
}

#[tokio::test]
async fn a_body_without_json_content_type_gets_a_json_415() {
    let server = TestServer::memory().await;
    let body = acquire_body("k", 1, 1000).into_bytes();
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("application/jsonx"),
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|c| vec![("content-type", c)])
            .unwrap_or_default();
        let reply = server
            .request(Method::POST, "/v1/acquire", &headers, body.clone())
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert_eq!(reply.error_code(), "unsupported_media_type");
    }
    let with_charset = server
        .request(
            Method::POST,
            "/v1/acquire",
            &[("content-type", "Application/JSON; charset=utf-8")],
            body,
        )
        .await;
    assert_eq!(with_charset.status, StatusCode::OK);
}

/// A valid acquire body padded with spaces to exactly `size` bytes.
fn padded_body(size: usize) -> String {
    let body = acquire_body("big", 10, 60_000);
    format!("{body}{}", " ".repeat(size - body.len()))
}

#[tokio::test]
async fn a_body_of_exactly_64_kib_is_accepted() {
    let server = TestServer::memory().await;
    let reply = server
        .post_json("/v1/acquire", &padded_body(64 * 1024))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn a_body_over_64_kib_gets_a_json_413() {
    let server = TestServer::memory().await;
    let reply = server
        .post_json("/v1/acquire", &padded_body(64 * 1024 + 1))
        .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.error_code(), "payload_too_large");
}

#[tokio::test]
async fn a_chunked_body_over_64_kib_gets_a_json_413() {
    let server = TestServer::memory().await;
    let chunk = padded_body(70_000);
    let request = format!(
        "POST /v1/acquire HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let reply = server.raw(request.as_bytes()).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.error_code(), "payload_too_large");
}

#[tokio::test]
async fn a_huge_content_length_gets_413_at_once_without_sending_the_body() {
    let server = TestServer::memory().await;
    let request = b"POST /v1/acquire HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                    content-length: 1000000000000\r\n\r\n";
    // No body byte is ever sent and the connection stays open: only an
    // answer from the headers alone can arrive in time.
    let reply = tokio::time::timeout(Duration::from_secs(3), server.raw(request))
        .await
        .expect("413 did not come at once");
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.error_code(), "payload_too_large");
}

#[tokio::test]
async fn the_server_keeps_serving_after_a_malformed_http_request() {
    let server = TestServer::memory().await;
    let reply = server.raw(b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(reply.status.is_client_error(), "{:?}", reply.status);
    let reply = server
        .raw(b"POST /v1/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n")
        .await;
    assert!(reply.status.is_client_error(), "{:?}", reply.status);
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
}
