//! Leases over HTTP, on real `slidegate serve` processes (the memory store,
//! and three servers sharing one real redis-server): budgets reserved and
//! committed, the 404 and 409 answers, `--max-leases`, and concurrency
//! limits held by many clients at once.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::redis::Redis;
use http::{Method, StatusCode};
use process::Slidegate;
use serde_json::{Value, json};

async fn post(addr: SocketAddr, path: &str, body: Value) -> common::Reply {
    common::request_to(
        addr,
        Method::POST,
        path,
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await
}

async fn delete(addr: SocketAddr, path: &str) -> common::Reply {
    common::request_to(addr, Method::DELETE, path, &[], Vec::new()).await
}

fn budget(key: &str, cost: u64) -> Value {
    json!({"key": key, "limit": 5000, "window_ms": 60_000, "cost": cost, "lease_ms": 60_000})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_reserved_then_committed_over_http() {
    let server = Slidegate::start(&[]);
    let addr = server.http;
    // Ten concurrent reservations of 1,000 on 5,000 per minute: five leases.
    let tasks: Vec<_> = (0..10)
        .map(|_| tokio::spawn(post(addr, "/v1/acquire", budget("team:7", 1000))))
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        let body = reply.json();
        match reply.status {
            StatusCode::OK => {
                assert_eq!(body["lease_ms"], 60_000, "{body}");
                ids.push(body["lease_id"].as_str().unwrap().to_owned());
            }
            StatusCode::TOO_MANY_REQUESTS => assert_eq!(body.get("lease_id"), None),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(ids.len(), 5, "exactly five leases of 1,000 fit 5,000");
    for id in &ids {
        let reply = post(
            addr,
            &format!("/v1/leases/{id}/commit"),
            json!({"cost": 200, "key": "team:7"}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.json());
        assert_eq!(reply.json()["over_limit"], false);
    }
    for _ in 0..4 {
        let reply = post(addr, "/v1/acquire", budget("team:7", 1000)).await;
        assert_eq!(reply.status, StatusCode::OK, "4,000 were given back");
    }
    let fifth = post(addr, "/v1/acquire", budget("team:7", 1000)).await;
    assert_eq!(fifth.status, StatusCode::TOO_MANY_REQUESTS);

    // Over the reservation: taken as a report, and said so.
    let lease = post(addr, "/v1/acquire", budget("llm:1", 4000))
        .await
        .json();
    let id = lease["lease_id"].as_str().unwrap().to_owned();
    let commit = post(
        addr,
        &format!("/v1/leases/{id}/commit"),
        json!({"cost": 6000}),
    )
    .await;
    assert_eq!(commit.status, StatusCode::OK);
    assert_eq!(commit.json()["over_limit"], true, "{:?}", commit.json());
    // The rate limit fields of the state afterwards, as an acquire's.
    assert_eq!(
        commit.header("ratelimit-policy"),
        Some(r#""default";q=5000;w=60"#)
    );
    assert!(
        commit
            .header("ratelimit")
            .is_some_and(|v| v.starts_with(r#""default";r=0;t="#)),
        "{:?}",
        commit.header("ratelimit")
    );
    assert_eq!(commit.header("retry-after"), None);
    let lease = post(addr, "/v1/acquire", budget("llm:3", 1000)).await;
    let id3 = lease.json()["lease_id"].as_str().unwrap().to_owned();
    let released = delete(addr, &format!("/v1/leases/{id3}?key=llm:3")).await;
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(
        released.header("ratelimit-policy"),
        Some(r#""default";q=5000;w=60"#)
    );
    assert!(
        released
            .header("ratelimit")
            .is_some_and(|v| v.starts_with(r#""default";r=5000;"#)),
        "{:?}",
        released.header("ratelimit")
    );

    // Settled once: a second settlement is a 409 and changes nothing.
    let again = delete(addr, &format!("/v1/leases/{id}?key=llm:1")).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(again.error_code(), "lease_expired");

    // Unknown, mangled and another key's: the same 404, the same code.
    let other = post(addr, "/v1/acquire", budget("llm:2", 10)).await.json();
    let other_id = other["lease_id"].as_str().unwrap().to_owned();
    // One hex digit changed: the last one, turned into another digit.
    let (head, last) = other_id.split_at(other_id.len() - 1);
    let unknown = format!("{head}{}", if last == "0" { "1" } else { "0" });
    assert_ne!(unknown, other_id);
    for path in [
        format!("/v1/leases/{unknown}?key=llm:2"),
        format!("/v1/leases/{other_id}?key=llm:1"),
        "/v1/leases/not-an-id".to_owned(),
        format!("/v1/leases/{}", "f".repeat(500)),
    ] {
        let reply = delete(addr, &path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.error_code(), "lease_not_found", "{path}");
    }
    let released = delete(addr, &format!("/v1/leases/{other_id}?key=llm:2")).await;
    assert_eq!(released.status, StatusCode::OK, "the lease was untouched");

    // Bad input: 400 with a code, never a 5xx.
    for body in [
        json!({"key": "k", "limit": 5, "window_ms": 1000, "lease_ms": 2000}),
        json!({"key": "k", "limit": 5, "window_ms": 1000, "lease_ms": 0}),
        json!({"key": "k", "limit": 5, "window_ms": 1000, "lease_ms": "1s"}),
        json!({"key": "k", "limit": 5, "window_ms": 1000, "lease_ms": 500, "report": true}),
    ] {
        let reply = post(addr, "/v1/acquire", body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error_code(), "invalid_lease", "{body}");
    }
    let no_cost = post(addr, &format!("/v1/leases/{other_id}/commit"), json!({})).await;
    assert_eq!(no_cost.status, StatusCode::BAD_REQUEST);
    assert!(server.panics().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_leases_bounds_the_open_leases_and_names_its_flag() {
    let server = Slidegate::start(&["--max-leases", "3"]);
    let addr = server.http;
    // 1 s: the three requests below come within it on a loaded machine
    // too (300 ms could run out before the refusal was checked).
    let short =
        json!({"key": "k", "limit": 100, "window_ms": 60_000, "cost": 1, "lease_ms": 1_000});
    assert_eq!(
        post(addr, "/v1/acquire", short).await.status,
        StatusCode::OK
    );
    let expired = Instant::now() + Duration::from_millis(1_000);
    for _ in 0..2 {
        assert_eq!(
            post(addr, "/v1/acquire", budget("k2", 1)).await.status,
            StatusCode::OK
        );
    }
    let refused = post(addr, "/v1/acquire", budget("k2", 1)).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.error_code(), "too_many_leases");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-leases")
    );
    let peek = common::get(addr, "/v1/keys/k2?limit=5000&window_ms=60000").await;
    assert_eq!(
        peek.json()["remaining"],
        4998,
        "the refused lease recorded nothing"
    );
    // 100 ms over the lease, as before (300 ms lease, 400 ms sleep).
    tokio::time::sleep_until((expired + Duration::from_millis(100)).into()).await;
    assert_eq!(
        post(addr, "/v1/acquire", budget("k2", 1)).await.status,
        StatusCode::OK,
        "an expired lease stops counting"
    );
}

fn places(key: &str, limit: u64, lease_ms: u64) -> Value {
    json!({"key": key, "limit": limit, "algorithm": "concurrency", "lease_ms": lease_ms})
}

async fn held(addr: SocketAddr, key: &str, limit: u64) -> u64 {
    let reply = common::get(
        addr,
        &format!("/v1/keys/{key}?algorithm=concurrency&limit={limit}"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.json());
    reply.json()["held"].as_u64().unwrap()
}

/// 50 clients over three servers on one Redis, each holding a place for a
/// random time: never more than L held, counted by the clients (a place
/// counts from its grant to just before its release, so never more than
/// the store holds) and by the store's own view (`held`, from another
/// server) after every grant; every released place is taken again; a
/// client that dies holding a place gives it back after its lease time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_over_three_servers_never_hold_more_than_the_limit() {
    const L: u64 = 4;
    let redis = Redis::start();
    let url = redis.url();
    let servers: Vec<Slidegate> = (0..3)
        .map(|_| Slidegate::start(&["--store", &url, "--store-timeout-ms", "2000"]))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.http).collect();
    let key = "exports:tenant-1";

    let granted = Arc::new(AtomicU64::new(0));
    let holding = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..50u64)
        .map(|i| {
            let (granted, holding, most, stop) =
                (granted.clone(), holding.clone(), most.clone(), stop.clone());
            let addr = addrs[(i % 3) as usize];
            let view = addrs[((i + 1) % 3) as usize];
            tokio::spawn(async move {
                let mut seed = i * 7919 + 1;
                while !stop.load(Ordering::SeqCst) {
                    let reply = post(addr, "/v1/acquire", places(key, L, 10_000)).await;
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    if reply.status != StatusCode::OK {
                        assert_eq!(
                            reply.status,
                            StatusCode::TOO_MANY_REQUESTS,
                            "{:?}",
                            reply.json()
                        );
                        tokio::time::sleep(Duration::from_millis(5 + (seed >> 60))).await;
                        continue;
                    }
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    granted.fetch_add(1, Ordering::SeqCst);
                    assert!(now <= L, "{now} places held at once, limit {L}");
                    let seen = held(view, key, L).await;
                    assert!((1..=L).contains(&seen), "the store sees {seen} held");
                    tokio::time::sleep(Duration::from_millis(1 + (seed >> 59))).await;
                    let id = reply.json()["lease_id"].as_str().unwrap().to_owned();
                    holding.fetch_sub(1, Ordering::SeqCst);
                    let released = delete(addr, &format!("/v1/leases/{id}?key={key}")).await;
                    assert_eq!(released.status, StatusCode::OK, "{:?}", released.json());
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    let granted = granted.load(Ordering::SeqCst);
    assert!(
        granted > 3 * L,
        "released places are taken again: {granted} grants"
    );
    assert!(most.load(Ordering::SeqCst) >= 2, "the clients did overlap");
    assert_eq!(held(addrs[2], key, L).await, 0, "every place was released");

    // A client that dies holding a place: nobody releases it, and its
    // place comes back once its 1.5 s run out.
    let crashed = post(addrs[0], "/v1/acquire", places(key, L, 1500)).await;
    assert_eq!(crashed.status, StatusCode::OK, "{:?}", crashed.json());
    let crashed_at = Instant::now();
    for addr in &addrs[..L as usize - 2] {
        let reply = post(*addr, "/v1/acquire", places(key, L, 10_000)).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    let last = post(addrs[0], "/v1/acquire", places(key, L, 10_000)).await;
    assert_eq!(last.status, StatusCode::OK);
    let full = post(addrs[1], "/v1/acquire", places(key, L, 10_000)).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS);
    let back = crashed_at + Duration::from_millis(1500);
    tokio::time::sleep_until(back.into()).await;
    let reused = post(addrs[1], "/v1/acquire", places(key, L, 10_000)).await;
    assert_eq!(
        reused.status,
        StatusCode::OK,
        "the crashed client's place came back"
    );
    let over = post(addrs[1], "/v1/acquire", places(key, L, 10_000)).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    // Waiting: a place released on one server serves a waiter on another.
    let waiter = tokio::spawn(post(
        addrs[2],
        "/v1/acquire",
        json!({"key": key, "limit": L, "algorithm": "concurrency", "lease_ms": 10_000, "max_wait_ms": 3000}),
    ));
    // Waiting from when its server counts it (a loaded machine can take
    // more than 50 ms to deliver it: then it waited less than the 150 ms
    // asked below, or not at all if it came after the release).
    let counted = Instant::now();
    loop {
        let metrics = common::get(addrs[2], "/metrics").await;
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        if text.lines().any(|l| l == "slidegate_waiting_requests 1") {
            break;
        }
        assert!(
            counted.elapsed() < Duration::from_secs(10),
            "the waiter never waited: {text}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = last.json()["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(
        delete(addrs[0], &format!("/v1/leases/{id}")).await.status,
        StatusCode::OK
    );
    let waited = waiter.await.unwrap();
    assert_eq!(waited.status, StatusCode::OK, "{:?}", waited.json());
    assert!(waited.json()["waited_ms"].as_u64().unwrap() >= 150);
    assert_eq!(held(addrs[1], key, L).await, L);
    // A commit of places is a 409, and so is a release after the first.
    let again = delete(addrs[1], &format!("/v1/leases/{id}")).await;
    assert_eq!(again.error_code(), "lease_expired");
    let lease = waited.json()["lease_id"].as_str().unwrap().to_owned();
    let commit = post(
        addrs[1],
        &format!("/v1/leases/{lease}/commit"),
        json!({"cost": 1}),
    )
    .await;
    assert_eq!(commit.status, StatusCode::CONFLICT);
    assert_eq!(commit.error_code(), "not_committable");
    for server in &servers {
        assert!(server.panics().is_empty());
    }
}

/// The size of the one waiters' queue in Redis (`...:q`), 0 without one.
fn queued(redis: &Redis) -> u64 {
    let Ok(redis::Value::Array(keys)) = redis.command(&["KEYS", "*:q"]) else {
        panic!("KEYS answered no list");
    };
    match keys.first() {
        Some(queue) => redis
            .text(&["ZCARD", &common::redis::text_of(queue)])
            .parse()
            .unwrap_or(0),
        None => 0,
    }
}

/// Waiters for one place, started one after the other on two servers
/// (each in the queue before the next starts), get it in that order as
/// each gives it back; a request that does not wait is refused while
/// they wait, though it asks when the place is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_two_servers_get_places_in_arrival_order() {
    const WAITERS: usize = 6;
    let redis = Redis::start();
    let url = redis.url();
    let servers: Vec<Slidegate> = (0..2)
        .map(|_| Slidegate::start(&["--store", &url, "--store-timeout-ms", "2000"]))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.http).collect();
    let key = "exports:tenant-2";
    let first = post(addrs[0], "/v1/acquire", places(key, 1, 30_000)).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.json());

    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let (addr, served) = (addrs[i % 2], served.clone());
        waiters.push(tokio::spawn(async move {
            let wait = json!({"key": key, "limit": 1, "algorithm": "concurrency",
                "lease_ms": 30_000, "max_wait_ms": 5000});
            let reply = post(addr, "/v1/acquire", wait).await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "waiter {i}: {:?}",
                reply.json()
            );
            served.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(30)).await;
            let id = reply.json()["lease_id"].as_str().unwrap().to_owned();
            let released = delete(addr, &format!("/v1/leases/{id}?key={key}")).await;
            assert_eq!(released.status, StatusCode::OK);
            // The fields of the state afterwards, on Redis as in memory.
            assert!(
                released
                    .header("ratelimit-policy")
                    .is_some_and(|v| v.starts_with(r#""default";q=1;"#)),
                "{:?}",
                released.header("ratelimit-policy")
            );
        }));
        let deadline = Instant::now() + Duration::from_secs(5);
        while queued(&redis) < i as u64 + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let id = first.json()["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(
        delete(addrs[1], &format!("/v1/leases/{id}?key={key}"))
            .await
            .status,
        StatusCode::OK
    );
    let cutting_in = post(addrs[1], "/v1/acquire", places(key, 1, 30_000)).await;
    assert_eq!(
        cutting_in.status,
        StatusCode::TOO_MANY_REQUESTS,
        "a request that does not wait passes no waiter"
    );
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert_eq!(queued(&redis), 0, "the queue is empty once all are served");
    for server in &servers {
        assert!(server.panics().is_empty());
    }
}
