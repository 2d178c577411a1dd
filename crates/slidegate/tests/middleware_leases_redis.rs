//! The rate limit layer's leases on a real redis-server, behind a real
//! axum server: a reserved estimate settled with what the handler
//! reports when the body ends, and a place in flight given back when its
//! body is dropped.

mod common;
mod support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use bytes::Bytes;
use common::redis_server::RedisServer;
use http::{HeaderName, Request, StatusCode};
use http_body_util::Full;
use slidegate::middleware::{Key, RateLimitLayer, ReportedCost};
use slidegate::{RedisStore, Rule, Store};

const BUDGET: &str = "5000/1m";

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the Redis store connects")
}

/// What the store says `key` used of `rule`, once it says `want`.
async fn settles_at(store: &RedisStore, key: &str, rule: Rule, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = rule.limit() - store.peek(key, &[rule]).await.unwrap().remaining();
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{key} used {now}, never {want}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn tokens(tenant: &str, estimate: u64, actual: u64) -> Request<Full<Bytes>> {
    Request::get(format!("/complete?actual={actual}"))
        .header("x-tenant", tenant)
        .header("x-estimate", estimate.to_string())
        .body(Full::default())
        .unwrap()
}

/// An LLM call: reports the tokens it used through the layer's handle.
async fn complete(
    Extension(cost): Extension<ReportedCost>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> &'static str {
    let actual = query
        .as_deref()
        .and_then(|q| q.strip_prefix("actual="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    cost.set(actual);
    "done"
}

#[tokio::test]
async fn an_estimate_reserved_in_redis_is_settled_with_the_report() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let layer = RateLimitLayer::builder(
        store.clone(),
        Key::header(HeaderName::from_static("x-tenant")),
    )
    .rule(BUDGET)
    .cost(|head| {
        head.headers["x-estimate"]
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    })
    .reserve_and_commit(Duration::from_secs(60))
    .build()
    .unwrap();
    let app = Router::new().route("/complete", get(complete)).layer(layer);
    let addr = support::serve(app).await;
    let rule = Rule::parse(BUDGET).unwrap();

    // Read whole by the client: the body ended, the report is committed.
    for _ in 0..3 {
        let reply = support::send(addr, tokens("a", 1500, 200)).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    settles_at(&store, "x-tenant=a", rule, 600).await;
    // 4,400 left: two of 2,000 pass, a third does not.
    for _ in 0..2 {
        assert_eq!(
            support::send(addr, tokens("b", 2000, 2000)).await.status,
            StatusCode::OK
        );
    }
    settles_at(&store, "x-tenant=b", rule, 4000).await;
    let over = support::send(addr, tokens("b", 2000, 2000)).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    settles_at(&store, "x-tenant=b", rule, 4000).await;
}

#[tokio::test]
async fn a_place_in_redis_comes_back_when_its_body_is_dropped() {
    use http_body_util::BodyExt;
    use tower::{Layer, Service, ServiceExt, service_fn};

    let server = RedisServer::start();
    let store = store(&server).await;
    let layer = RateLimitLayer::builder(
        store.clone(),
        Key::header(HeaderName::from_static("x-tenant")),
    )
    .rule("100/1m")
    .max_in_flight(1)
    .build()
    .unwrap();
    let mut service = layer.layer(service_fn(|_: Request<axum::body::Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(axum::body::Body::from("done")))
    }));
    let ask = || {
        Request::get("/")
            .header("x-tenant", "a")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let place = Rule::concurrency(1).unwrap();
    let held = service.ready().await.unwrap().call(ask()).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    settles_at(&store, "x-tenant=a", place, 1).await;
    let refused = service.ready().await.unwrap().call(ask()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(held);
    settles_at(&store, "x-tenant=a", place, 0).await;
    let next = service.ready().await.unwrap().call(ask()).await.unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    let mut body = next.into_body();
    while body.frame().await.is_some() {}
    settles_at(&store, "x-tenant=a", place, 0).await;
    drop(body);
}
