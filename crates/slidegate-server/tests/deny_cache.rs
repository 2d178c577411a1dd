//! The local deny cache never denies what Redis would admit, and never
//! tells a client to come back too early: real `slidegate serve` processes
//! on a real redis-server.
//!
//! - A reset on one server reaches the deny cache of every other within
//!   [`BOUND`], for a lockout and for a plain window.
//! - A server whose subscription to the change feed is broken answers no
//!   cached denial: it asks Redis until it hears the feed again.
//! - While Redis is down, a denial it made still holds (no reset can
//!   happen through it); Redis back empty, the denial goes.
//! - A denial answered from the cache while Redis was slow says to wait
//!   until the slot is surely free, not until it may be.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::Redis;
use http::{Method, StatusCode};
use process::Slidegate;

const TOKEN: &str = "deny-cache-test-token";

/// The longest a reset made on one server may take to reach the deny cache
/// of another: the trust window of the change feed (docs/RELIABILITY.md).
const BOUND: Duration = Duration::from_secs(1);

/// A lockout of 10 minutes after the second request (the reported case),
/// and a plain window of 2 per hour.
const BLOCKED: &str = r#"{"key":"user42","limit":2,"window_ms":60000,"block_ms":600000}"#;
const HOURLY: &str = r#"{"key":"user42","limit":2,"window_ms":3600000}"#;

async fn acquire(addr: SocketAddr, body: &str) -> common::Reply {
    common::request_to(
        addr,
        Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        body.as_bytes().to_vec(),
    )
    .await
}

async fn reset(addr: SocketAddr, key: &str) -> common::Reply {
    let bearer = format!("Bearer {TOKEN}");
    common::request_to(
        addr,
        Method::DELETE,
        &format!("/v1/keys/{key}"),
        &[("authorization", &bearer)],
        Vec::new(),
    )
    .await
}

/// `slidegate_deny_cache_hits_total` of the server at `addr`.
async fn cache_hits(addr: SocketAddr) -> u64 {
    let reply = common::get(addr, "/metrics").await;
    let text = String::from_utf8(reply.body.to_vec()).expect("UTF-8 metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("slidegate_deny_cache_hits_total "))
        .map_or(0, |v| v.trim().parse::<f64>().expect("a number") as u64)
}

/// Waits until `server` answers `GET /readyz` with 200 (Redis answers).
async fn until_ready(server: &Slidegate) {
    let start = Instant::now();
    while common::get(server.http, "/readyz").await.status != StatusCode::OK {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never ready; logs: {:?}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn serve(url: &str) -> Slidegate {
    Slidegate::start(&[
        "--store",
        url,
        "--admin-token",
        TOKEN,
        "--store-timeout-ms",
        "2000",
    ])
}

/// Two requests admitted, then denied by Redis for a long time; the next
/// denial comes from the server's deny cache.
async fn deny_until_cached(server: SocketAddr, body: &str) {
    for expected in [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        let reply = acquire(server, body).await;
        assert_eq!(reply.status, expected, "{reply:?}");
    }
    let hits = cache_hits(server).await;
    let cached = acquire(server, body).await;
    assert_eq!(cached.status, StatusCode::TOO_MANY_REQUESTS, "{cached:?}");
    assert!(
        cached.json()["retry_after_ms"]
            .as_u64()
            .expect("retry_after_ms")
            > 60_000,
        "{cached:?}"
    );
    assert_eq!(
        cache_hits(server).await,
        hits + 1,
        "the second denial is answered by the deny cache"
    );
}

/// Polls `server` with `body` until it admits, and returns how long after
/// `since` the admitted request was sent; fails if a request sent later
/// than [`BOUND`] after `since` is still denied.
async fn admitted_within_bound(server: SocketAddr, body: &str, since: Instant) -> Duration {
    loop {
        let sent = since.elapsed();
        let reply = acquire(server, body).await;
        if reply.status == StatusCode::OK {
            return sent;
        }
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        assert!(
            sent < BOUND,
            "still denied {sent:?} after the reset (bound {BOUND:?}): {}",
            String::from_utf8_lossy(&reply.body)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The reported reproduction: two servers on one Redis; B denies `user42`
/// from its deny cache; A resets the key; B must admit again within the
/// bound (it denied for the rest of the lockout, or of the hour).
async fn a_reset_on_one_server_reaches_the_other(body: &str) {
    let redis = Redis::start();
    let (a, b) = (serve(&redis.url()), serve(&redis.url()));
    until_ready(&a).await;
    until_ready(&b).await;
    deny_until_cached(b.http, body).await;

    let reply = reset(a.http, "user42").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let reset_done = Instant::now();
    let on_a = acquire(a.http, body).await;
    assert_eq!(on_a.status, StatusCode::OK, "A, after its reset: {on_a:?}");
    let after = admitted_within_bound(b.http, body, reset_done).await;
    eprintln!("B admitted a request sent {after:?} after A's reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_every_servers_deny_cache_for_a_lockout() {
    a_reset_on_one_server_reaches_the_other(BLOCKED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_every_servers_deny_cache_for_a_plain_window() {
    a_reset_on_one_server_reaches_the_other(HOURLY).await;
}

/// B's subscription is broken and cannot come back (its Redis user loses
/// the right to subscribe, and its subscription is killed): B stops
/// answering from its cache at once and caches nothing while it cannot
/// hear of resets, so A's reset, which B never hears of, is seen by B's
/// very next request. Once B may subscribe again, its cache answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_subscription_keeps_no_stale_denial() {
    let redis = Redis::start();
    assert_eq!(
        redis.text(&["ACL", "SETUSER", "b", "on", ">b-pass", "~*", "&*", "+@all"]),
        "OK"
    );
    let a = serve(&redis.url());
    let b = serve(&format!("redis://b:b-pass@{}", redis.addr()));
    until_ready(&a).await;
    until_ready(&b).await;
    deny_until_cached(b.http, BLOCKED).await;

    assert_eq!(redis.text(&["ACL", "SETUSER", "b", "resetchannels"]), "OK");
    redis.text(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let killed = Instant::now();
    loop {
        let hits = cache_hits(b.http).await;
        let denied = acquire(b.http, BLOCKED).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{denied:?}");
        if cache_hits(b.http).await == hits {
            break;
        }
        assert!(
            killed.elapsed() < BOUND,
            "B still answers from its cache {:?} after losing its subscription",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Decided by Redis, and not remembered: B cannot hear of a reset.
    let hits = cache_hits(b.http).await;
    for _ in 0..3 {
        let denied = acquire(b.http, BLOCKED).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{denied:?}");
    }
    assert_eq!(
        cache_hits(b.http).await,
        hits,
        "nothing answered from the cache"
    );

    let reply = reset(a.http, "user42").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let on_b = acquire(b.http, BLOCKED).await;
    assert_eq!(
        on_b.status,
        StatusCode::OK,
        "B's first request after the reset: {on_b:?}"
    );

    // Allowed to subscribe again: B's cache answers again.
    assert_eq!(redis.text(&["ACL", "SETUSER", "b", "allchannels"]), "OK");
    let allowed = Instant::now();
    let body = BLOCKED.replace("user42", "user43");
    loop {
        let reply = acquire(b.http, &body).await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            let hits = cache_hits(b.http).await;
            acquire(b.http, &body).await;
            if cache_hits(b.http).await > hits {
                break;
            }
        }
        assert!(
            allowed.elapsed() < Duration::from_secs(5),
            "B's deny cache never answered again after it could subscribe"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// While Redis is down, nothing can reset a key through it: a denial it
/// made is still answered until its wait ends (denied, not degraded),
/// even under `--on-store-error allow`, which admits every other key.
/// Redis comes back empty (no persistence): the server drops its held
/// denials once it hears the feed again, and Redis admits the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_holds_while_redis_is_down_and_goes_when_it_returns_empty() {
    let mut redis = Redis::start();
    let server = Slidegate::start(&[
        "--store",
        &redis.url(),
        "--admin-token",
        TOKEN,
        "--store-timeout-ms",
        "200",
        "--on-store-error",
        "allow",
    ]);
    until_ready(&server).await;
    deny_until_cached(server.http, BLOCKED).await;

    redis.kill();
    for _ in 0..5 {
        let held = acquire(server.http, BLOCKED).await;
        assert_eq!(held.status, StatusCode::TOO_MANY_REQUESTS, "{held:?}");
        assert_ne!(held.json()["degraded"], true, "{held:?}");
        let other = acquire(server.http, &BLOCKED.replace("user42", "other")).await;
        assert_eq!(other.status, StatusCode::OK, "{other:?}");
        assert_eq!(other.json()["degraded"], true, "{other:?}");
    }

    redis.restart();
    let back = Instant::now();
    loop {
        let reply = acquire(server.http, BLOCKED).await;
        if reply.status == StatusCode::OK && reply.json()["degraded"] != true {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "user42 not admitted by Redis {:?} after it returned: {}",
            back.elapsed(),
            String::from_utf8_lossy(&reply.body)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The second reported reproduction, with a longer stall: 1 per 2 s; one
/// admitted; Redis stalls 200 ms; a request sent meanwhile is denied by
/// Redis when it wakes, and the next one by the deny cache. A client that
/// waits the `retry_after_ms` of that cached denial must be admitted: the
/// cache used to count the wait from when the first denied request was
/// sent, 200 ms before Redis decided it, and so said 200 ms too little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_denial_never_says_to_come_back_too_early() {
    let redis = Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let server = serve(&redis.url());
    until_ready(&server).await;
    let body = r#"{"key":"slow","limit":1,"window_ms":2000}"#;
    let admitted = acquire(server.http, body).await;
    assert_eq!(admitted.status, StatusCode::OK, "{admitted:?}");

    let sleeper = Arc::clone(&redis);
    let stall = std::thread::spawn(move || sleeper.text(&["DEBUG", "SLEEP", "0.2"]));
    // Sent while Redis sleeps (the sleep is under way once PING stalls).
    while redis_answers_within(&redis, Duration::from_millis(20)) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let first = acquire(server.http, body).await;
    assert_eq!(stall.join().expect("DEBUG SLEEP"), "OK");
    assert_eq!(first.status, StatusCode::TOO_MANY_REQUESTS, "{first:?}");

    let hits = cache_hits(server.http).await;
    let cached = acquire(server.http, body).await;
    let told = Instant::now();
    assert_eq!(cached.status, StatusCode::TOO_MANY_REQUESTS, "{cached:?}");
    assert_eq!(
        cache_hits(server.http).await,
        hits + 1,
        "answered by the cache"
    );
    let wait = Duration::from_millis(
        cached.json()["retry_after_ms"]
            .as_u64()
            .expect("retry_after_ms"),
    );
    tokio::time::sleep_until((told + wait).into()).await;
    let retry = acquire(server.http, body).await;
    assert_eq!(
        retry.status,
        StatusCode::OK,
        "came back after the {wait:?} the cache said, and was denied again: {retry:?} (first denial: {})",
        String::from_utf8_lossy(&first.body)
    );
}

/// True when Redis answers PING within `limit` on a fresh connection.
fn redis_answers_within(redis: &Redis, limit: Duration) -> bool {
    let Ok(client) = redis::Client::open(redis.url()) else {
        return false;
    };
    let Ok(mut connection) = client.get_connection_with_timeout(limit) else {
        return false;
    };
    if connection.set_read_timeout(Some(limit)).is_err() {
        return false;
    }
    redis::cmd("PING").query::<String>(&mut connection).is_ok()
}
