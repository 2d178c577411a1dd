//! The examples, run as they are: each file is compiled into this test
//! with `#[path]`, and its `app` or `serve` is served on loopback.

mod support;

#[path = "../examples/axum_login.rs"]
#[allow(dead_code)] // the example's `main`
mod axum_login;

#[path = "../examples/tonic_service.rs"]
#[allow(dead_code)]
mod tonic_service;

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use support::{manual_store, post, send_from};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

fn login(user: &str, password: &str) -> http::Request<Full<Bytes>> {
    let body = serde_json::json!({ "user": user, "password": password }).to_string();
    post("/login")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an address")
}

#[tokio::test]
async fn axum_login_limits_each_account_per_address_and_the_route_overall() {
    let (store, clock) = manual_store();
    let addr = support::serve(axum_login::app(store).expect("app")).await;
    let (here, elsewhere) = (ip("127.0.0.1"), ip("127.0.0.2"));

    for _ in 0..5 {
        let reply = send_from(here, addr, login("alice", "guess")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    // The sixth attempt in the minute is refused, right password or not,
    // and so is the same account written differently.
    let refused = send_from(here, addr, login("alice", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("61"));
    assert_eq!(refused.list("ratelimit"), r#""per-user";r=0;t=61"#);
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["per-user"])
    );
    let refused = send_from(here, addr, login("  ALICE", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);

    // Alice can still log in from elsewhere; both policies are reported.
    let welcome = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(welcome.status, StatusCode::OK);
    assert_eq!(
        welcome.list("ratelimit-policy"),
        r#""route";q=100;w=1, "per-user";q=5;w=60"#
    );
    assert_eq!(
        welcome.list("ratelimit"),
        r#""route";r=94;t=2, "per-user";r=4;t=61"#
    );
    // Other accounts on the first address are not affected.
    let bob = send_from(here, addr, login("bob", "guess")).await;
    assert_eq!(bob.status, StatusCode::UNAUTHORIZED);
    // An attempt that names no account cannot be counted: 400.
    let anonymous = post("/login")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    assert_eq!(
        send_from(here, addr, anonymous).await.status,
        StatusCode::BAD_REQUEST
    );

    // A minute later: 100 attempts a second on the route, whoever makes them.
    clock.advance(Duration::from_secs(61));
    for i in 0..100 {
        let reply = send_from(here, addr, login(&format!("user{i}"), "guess")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let refused = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["route"])
    );
    assert_eq!(refused.header("retry-after"), Some("2"));
    clock.advance(Duration::from_millis(1_001));
    let welcome = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(welcome.status, StatusCode::OK);
}

#[tokio::test]
async fn tonic_service_answers_resource_exhausted_with_the_wait() {
    let (store, clock) = manual_store();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { tonic_service::serve(listener, store).await.expect("serve") });

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = HealthClient::new(channel);
    let check = |key: Option<&str>| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        if let Some(key) = key {
            request
                .metadata_mut()
                .insert("x-api-key", key.parse().expect("metadata"));
        }
        request
    };

    for _ in 0..5 {
        client.check(check(Some("k1"))).await.expect("serving");
    }
    clock.advance(Duration::from_millis(300));
    let status = client
        .check(check(Some("k1")))
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let metadata = status.metadata();
    let text = |name: &str| {
        metadata
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(text("retry-after").as_deref(), Some("1"));
    assert_eq!(
        text("ratelimit-policy").as_deref(),
        Some(r#""per-key";q=5;w=1"#)
    );
    assert_eq!(text("ratelimit").as_deref(), Some(r#""per-key";r=0;t=1"#));
    let retry = status.get_details_retry_info().expect("RetryInfo");
    assert_eq!(retry.retry_delay, Some(Duration::from_micros(700_001)));

    // Other keys, and callers without one (who share a bucket), go on.
    client.check(check(Some("k2"))).await.expect("another key");
    for _ in 0..5 {
        client.check(check(None)).await.expect("anonymous");
    }
    let status = client.check(check(None)).await.expect_err("shared bucket");
    assert_eq!(status.code(), Code::ResourceExhausted);

    clock.advance(Duration::from_millis(701));
    client.check(check(Some("k1"))).await.expect("k1 again");
}
