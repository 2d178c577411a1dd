//! The middleware's `max_delay`: a request over the limit is delayed for
//! its reserved turn, then passed on; beyond the delay, refused at once.

mod support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use slidegate::middleware::{Key, RateLimitLayer};
use slidegate::{MemoryStore, Rule};
use support::{empty, get as get_req, send};

async fn ok() -> &'static str {
    "ok"
}

fn app(store: MemoryStore, max_delay: Duration) -> Router {
    let layer = RateLimitLayer::builder(store, Key::global())
        .rule(Rule::parse("3/1s").unwrap())
        .max_delay(max_delay)
        .build()
        .unwrap();
    Router::new().route("/", get(ok)).layer(layer)
}

#[tokio::test]
async fn requests_over_the_limit_are_delayed_in_groups_then_passed_on() {
    let store = MemoryStore::new();
    let addr = support::serve(app(store.clone(), Duration::from_secs(3))).await;
    let started = Instant::now();
    let requests: Vec<_> = (0..9)
        .map(|_| tokio::spawn(async move { send(addr, empty(get_req("/"))).await }))
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap().status, StatusCode::OK);
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the last three waited two windows"
    );
    // In the store's own log: each waiter took the time at which the
    // admission three before it is one window and 1 µs old.
    let log = store
        .admissions("global", Rule::parse("3/1s").unwrap())
        .expect("the layer's key");
    let times: Vec<u64> = log
        .iter()
        .flat_map(|&(at, cost)| std::iter::repeat_n(at, cost as usize))
        .collect();
    assert_eq!(times.len(), 9);
    for i in 3..9 {
        assert_eq!(times[i], times[i - 3] + 1_000_001, "{times:?}");
    }
}

#[tokio::test]
async fn a_request_that_would_wait_longer_than_max_delay_is_refused_at_once() {
    let store = MemoryStore::new();
    let addr = support::serve(app(store, Duration::from_millis(300))).await;
    for _ in 0..3 {
        assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    }
    let refused = send(addr, empty(get_req("/"))).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.header("retry-after").is_some());
}
