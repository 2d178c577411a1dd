//! `/v1/forward-auth/{domain}` on a real server (in-process, real
//! sockets): the forwarded request's descriptors, whose forwarding headers
//! count, the answer's status and fields, and bad forwarded requests.
//! The recipes with the real proxies are in `tests/proxies.rs`.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::{Reply, TestServer, request_from};
use http::{Method, StatusCode};
use slidegate::MemoryStore;
use slidegate_server::api::forward_auth::TrustedProxies;
use slidegate_server::commands::parts::Parts;
use slidegate_server::rules::{CurrentConfig, LoadOptions, RateLimitConfig};

const RULES: &str = r#"
domain: edge
forward_auth:
  headers:
    api_key: X-Api-Key
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

/// A server deciding `edge` with `RULES`, trusting 127.0.0.1 as a proxy.
async fn server() -> TestServer {
    let config = RateLimitConfig::from_sources(
        &[("edge.yaml".into(), RULES.into())],
        LoadOptions::default(),
    )
    .expect("the rules load");
    let parts = Parts::new(MemoryStore::new())
        .with_config(CurrentConfig::new(config))
        .with_trusted_proxies("127.0.0.1".parse::<TrustedProxies>().unwrap());
    TestServer::full(parts).await
}

fn ip(text: &str) -> Option<IpAddr> {
    Some(text.parse().unwrap())
}

async fn ask(server: &TestServer, from: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    ask_to(server.addr, from, path, headers).await
}

async fn ask_to(addr: SocketAddr, from: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    request_from(ip(from), addr, Method::GET, path, headers, Vec::new()).await
}

#[tokio::test]
async fn the_limit_of_each_forwarded_client_passes_then_429_with_retry_after() {
    let server = server().await;
    for client in ["192.0.2.1", "192.0.2.2"] {
        let headers = [("x-forwarded-for", client), ("x-forwarded-uri", "/a?x=1")];
        for n in 0..3 {
            let reply = ask(&server, "127.0.0.1", "/v1/forward-auth/edge", &headers).await;
            assert_eq!(reply.status, StatusCode::OK, "{client} #{n}: {reply:?}");
            assert_eq!(reply.json()["client"], client);
            assert!(reply.header("ratelimit").is_some(), "{reply:?}");
        }
        let denied = ask(&server, "127.0.0.1", "/v1/forward-auth/edge", &headers).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{denied:?}");
        let retry: u64 = denied.header("retry-after").unwrap().parse().unwrap();
        assert!((59..=60).contains(&retry), "{retry}");
        assert_eq!(
            denied.header("ratelimit-policy"),
            Some(r#""edge.remote_address";q=3;w=60"#)
        );
        let body = denied.json();
        assert_eq!(body["allowed"], false);
        assert!(body["retry_after_ms"].as_u64().unwrap() > 58_000, "{body}");
    }
}

#[tokio::test]
async fn an_untrusted_peer_is_keyed_by_its_own_address_whatever_it_forwards() {
    let server = server().await;
    for n in 0..4 {
        // A new address in the header every time: none of them counts.
        let spoofed = format!("198.51.100.{n}");
        let headers = [
            ("x-forwarded-for", spoofed.as_str()),
            ("x-real-ip", spoofed.as_str()),
            ("forwarded", "for=203.0.113.9"),
            ("x-forwarded-uri", "/"),
        ];
        let reply = ask(&server, "127.0.0.2", "/v1/forward-auth/edge", &headers).await;
        let expected = if n < 3 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(reply.status, expected, "#{n}: {reply:?}");
        assert_eq!(reply.json()["client"], "127.0.0.2");
    }
}

#[tokio::test]
async fn deny_status_403_carries_the_same_fields() {
    let server = server().await;
    let headers = [("x-real-ip", "192.0.2.9"), ("x-original-uri", "/b")];
    for _ in 0..3 {
        let ok = ask(
            &server,
            "127.0.0.1",
            "/v1/forward-auth/edge?deny_status=403",
            &headers,
        )
        .await;
        assert_eq!(ok.status, StatusCode::OK);
    }
    let denied = ask(
        &server,
        "127.0.0.1",
        "/v1/forward-auth/edge?deny_status=403",
        &headers,
    )
    .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "{denied:?}");
    assert!(denied.header("retry-after").is_some(), "{denied:?}");
    assert!(denied.header("ratelimit").is_some(), "{denied:?}");
}

#[tokio::test]
async fn a_mapped_header_feeds_its_own_descriptor() {
    let server = server().await;
    // Two clients, one API key: the key's limit (2) binds before theirs (3).
    let replies = [
        ("192.0.2.20", StatusCode::OK),
        ("192.0.2.21", StatusCode::OK),
        ("192.0.2.22", StatusCode::TOO_MANY_REQUESTS),
    ];
    for (client, status) in replies {
        let headers = [
            ("x-forwarded-for", client),
            ("x-forwarded-uri", "/"),
            ("x-api-key", "key-1"),
        ];
        let reply = ask(&server, "127.0.0.1", "/v1/forward-auth/edge", &headers).await;
        assert_eq!(reply.status, status, "{client}: {reply:?}");
    }
    let denied = ask(
        &server,
        "127.0.0.1",
        "/v1/forward-auth/edge",
        &[
            ("x-forwarded-for", "192.0.2.23"),
            ("x-forwarded-uri", "/"),
            ("x-api-key", "key-1"),
        ],
    )
    .await;
    assert_eq!(
        denied.header("ratelimit-policy"),
        Some(r#""edge.remote_address";q=3;w=60, "edge.api_key";q=2;w=60"#),
        "{denied:?}"
    );
}

#[tokio::test]
async fn every_method_is_accepted() {
    let server = server().await;
    for method in [Method::POST, Method::DELETE, Method::PUT, Method::HEAD] {
        let reply = request_from(
            ip("127.0.0.1"),
            server.addr,
            method.clone(),
            "/v1/forward-auth/edge",
            &[("x-forwarded-uri", "/m"), ("x-real-ip", "192.0.2.40")],
            Vec::new(),
        )
        .await;
        assert!(
            reply.status.is_success() || reply.status == StatusCode::TOO_MANY_REQUESTS,
            "{method}: {reply:?}"
        );
    }
}

#[tokio::test]
async fn bad_forwarded_requests_are_400_with_a_json_error_never_5xx() {
    let server = server().await;
    let long = "1".repeat(20_000);
    let many: Vec<String> = (0..90).map(|i| format!("10.{i}.0.1")).collect();
    let many = many.join(",");
    // (path, headers, the error code expected)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "/v1/forward-auth/edge",
            vec![("x-real-ip", "192.0.2.1")],
            "missing_field",
        ),
        (
            "/v1/forward-auth/edge",
            vec![("x-forwarded-for", "not-an-ip"), ("x-forwarded-uri", "/")],
            "invalid_request",
        ),
        (
            "/v1/forward-auth/edge",
            vec![("x-forwarded-for", long.as_str()), ("x-forwarded-uri", "/")],
            "invalid_request",
        ),
        (
            "/v1/forward-auth/edge?deny_status=500",
            vec![("x-forwarded-uri", "/")],
            "invalid_request",
        ),
        (
            "/v1/forward-auth/nowhere",
            vec![("x-forwarded-uri", "/")],
            "not_found",
        ),
    ];
    for (path, headers, code) in cases {
        let reply = ask(&server, "127.0.0.1", path, &headers).await;
        assert!(
            reply.status.is_client_error(),
            "{path} {headers:?}: {reply:?}"
        );
        assert_eq!(reply.error_code(), code, "{path}");
    }
    // The client's own query, passed along by the proxy, is ignored.
    let reply = ask(
        &server,
        "127.0.0.1",
        "/v1/forward-auth/edge?x=1&deny=2",
        &[("x-real-ip", "192.0.2.50"), ("x-forwarded-uri", "/")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // A long chain of hops: the rightmost untrusted one is the client.
    let reply = ask(
        &server,
        "127.0.0.1",
        "/v1/forward-auth/edge",
        &[("x-forwarded-for", many.as_str()), ("x-forwarded-uri", "/")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json()["client"], "10.89.0.1");
}
