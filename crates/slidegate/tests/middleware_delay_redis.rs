//! The middleware's `max_delay` on the Redis store, with three instances
//! sharing one Redis: each delayed request reserves its turn in Redis, so
//! the instances together never pass more than the limit in any window,
//! and the waiters are passed on in the order they reserved.

mod common;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use common::redis_log::read_log;
use common::redis_server::RedisServer;
use http::StatusCode;
use slidegate::middleware::{Key, RateLimitLayer};
use slidegate::{RedisStore, Rule};
use support::{empty, get as get_req, send};

const RULE: &str = "3/1s";

async fn ok() -> &'static str {
    "ok"
}

/// One instance: its own Redis store (its own client and connection) on
/// `server`, behind a layer that delays for up to `max_delay`.
async fn instance(server: &RedisServer, max_delay: Duration) -> (SocketAddr, RedisStore) {
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("the Redis store connects");
    let layer = RateLimitLayer::builder(store.clone(), Key::global())
        .rule(Rule::parse(RULE).expect("a valid rule"))
        .max_delay(max_delay)
        .build()
        .expect("a valid layer");
    let app = Router::new().route("/", get(ok)).layer(layer);
    (support::serve(app).await, store)
}

/// The admissions Redis holds for the layer's key, one time (µs, Redis'
/// clock) per unit, oldest first.
async fn admissions(server: &RedisServer, store: &RedisStore) -> Vec<u64> {
    let mut conn = redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let key = store.state_key("global", Rule::parse(RULE).expect("a valid rule"));
    read_log(&mut conn, &key)
        .await
        .into_iter()
        .flat_map(|(at, cost)| std::iter::repeat_n(at, cost as usize))
        .collect()
}

#[tokio::test]
async fn three_instances_on_one_redis_delay_nine_requests_in_three_groups_of_three() {
    let server = RedisServer::start();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(instance(&server, Duration::from_secs(3)).await);
    }
    let started = Instant::now();
    let requests: Vec<_> = (0..9)
        .map(|i| {
            let addr = instances[i % 3].0;
            tokio::spawn(async move { send(addr, empty(get_req("/"))).await.status })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.expect("the request task"), StatusCode::OK);
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the last three waited two windows"
    );
    let times = admissions(&server, &instances[0].1).await;
    assert_eq!(times.len(), 9, "{times:?}");
    // The first three passed at once: within one window of each other (a
    // delayed one would be a window and 1 µs after the first). Half a
    // window failed if a loaded machine sent the third 500 ms late.
    assert!(times[2] - times[0] < 1_000_000, "{times:?}");
    // Each waiter took the time at which the admission three before it is
    // one window and 1 µs old: groups at 0, 1 and 2 s, and never a fourth
    // admission within one window of three others.
    for i in 3..9 {
        assert_eq!(times[i], times[i - 3] + 1_000_001, "{times:?}");
    }
}

#[tokio::test]
async fn a_request_that_would_wait_longer_than_its_delay_is_refused_at_once_while_others_wait() {
    let server = RedisServer::start();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(instance(&server, Duration::from_secs(3)).await);
    }
    // A delay of 1 s, not less: the refusal's round trips must stay under
    // it on a loaded machine (at 500 ms a stall of half a second failed
    // the test), and the wait it is refused for must stay over it.
    let delay = Duration::from_secs(1);
    let impatient = instance(&server, delay).await;
    let waiting: Vec<_> = (0..9)
        .map(|i| {
            let addr = instances[i % 3].0;
            tokio::spawn(async move { send(addr, empty(get_req("/"))).await.status })
        })
        .collect();
    // Once all nine hold their turns, the next free one is 3 s after the
    // first: at least 1.5 s away, more than the impatient one's delay.
    let deadline = Instant::now() + Duration::from_millis(1_500);
    while admissions(&server, &impatient.1).await.len() < 9 {
        assert!(Instant::now() < deadline, "the nine reserved their turns");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent = Instant::now();
    let refused = send(impatient.0, empty(get_req("/"))).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(sent.elapsed() < delay, "refused without sleeping its delay");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(
        admissions(&server, &impatient.1).await.len(),
        9,
        "the refusal recorded nothing"
    );
    for request in waiting {
        assert_eq!(request.await.expect("the request task"), StatusCode::OK);
    }
}
