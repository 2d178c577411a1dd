//! Reservations on the Redis store: one script call finds the earliest
//! time a request fits and records it there, as the memory store does.

mod common;

use slidegate::store::memory::CompactString;
use std::time::Duration;

use common::redis_log::read_log;
use common::redis_server::RedisServer;
use slidegate::clock::ManualClock;
use slidegate::{Hit, MemoryStore, RedisStore, Rule, Store};

async fn store(server: &RedisServer, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(server.url())
        .client_clock(clock.clone())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("the Redis store connects")
}

#[tokio::test]
async fn nine_waiters_on_three_per_second_are_served_in_three_groups() {
    let server = RedisServer::start();
    let clock = ManualClock::at(1_000_000);
    let store = store(&server, &clock).await;
    let rule = Rule::parse("3/1s").unwrap();
    let mut waits = Vec::new();
    for _ in 0..9 {
        let r = store
            .reserve("k", &[rule], 1, Duration::from_secs(3))
            .await
            .unwrap();
        assert!(r.granted());
        waits.push(r.wait().as_micros() as u64);
    }
    assert_eq!(
        waits,
        [
            0, 0, 0, 1_000_001, 1_000_001, 1_000_001, 2_000_002, 2_000_002, 2_000_002
        ]
    );
    let tenth = store
        .reserve("k", &[rule], 1, Duration::from_millis(500))
        .await
        .unwrap();
    assert!(!tenth.granted());
    assert_eq!(
        tenth.decision().retry_after(),
        Duration::from_micros(3_000_003)
    );
    // A plain request never passes ahead of the waiters.
    clock.advance(Duration::from_millis(1_500));
    assert!(!store.acquire("k", &[rule], 1).await.unwrap().allowed());
}

#[tokio::test]
async fn a_batch_is_reserved_at_one_time_for_every_hit() {
    let server = RedisServer::start();
    let clock = ManualClock::at(1_000_000);
    let store = store(&server, &clock).await;
    let fast = Rule::parse("1/1s").unwrap();
    let slow = Rule::parse("5/1s").unwrap();
    store.acquire("{u}a", &[fast], 1).await.unwrap();
    let hits = [Hit::new("{u}a", fast, 1), Hit::new("{u}b", slow, 1)];
    let r = store
        .reserve_batch(&hits, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(r.granted());
    assert_eq!(r.wait(), Duration::from_micros(1_000_001));
    // Both hits count from now: "b" has 4 left, "a" none until its turn.
    assert_eq!(r.decisions()[1].remaining(), 4);
    clock.advance(Duration::from_micros(1_000_001));
    assert!(!store.acquire("{u}a", &[fast], 1).await.unwrap().allowed());
}

#[tokio::test]
async fn acquire_wait_takes_one_reservation_and_sleeps() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("1/200ms").unwrap();
    assert!(store.acquire("k", &[rule], 1).await.unwrap().allowed());
    let started = std::time::Instant::now();
    let d = store
        .acquire_wait("k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(d.allowed());
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "it waited its turn"
    );
}

/// Reservations keep more than the limit in a log (the window behind now
/// and the waiters ahead of it): requests arriving at twice the rate of
/// 250/1s hold up to 750 units at once. The running totals are stored
/// modulo their width, which once only covered the limit: totals decoded
/// wrong, a waiter was given a turn inside a full window, and the log was
/// soon refused as inconsistent. Each reservation must answer as the
/// memory store's, and the log Redis holds must be the memory store's.
#[tokio::test]
async fn a_log_holding_more_than_the_limit_in_reservations_decides_as_the_memory_store() {
    let server = RedisServer::start();
    let clock = ManualClock::at(1_000_000);
    let redis = store(&server, &clock).await;
    let memory: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    let rule = Rule::parse("250/1s").unwrap();
    let max_wait = Duration::from_secs(5);
    for i in 0..1_500 {
        let want = Store::reserve(&memory, "k", &[rule], 1, max_wait).await;
        let got = redis.reserve("k", &[rule], 1, max_wait).await;
        assert_eq!(got, want, "request {i}");
        clock.advance(Duration::from_millis(2));
    }
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let held = read_log(&mut conn, &redis.state_key("k", rule)).await;
    assert_eq!(Some(held), memory.admissions("k", rule));
}
