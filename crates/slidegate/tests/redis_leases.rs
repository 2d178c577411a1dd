//! Leases on Redis (one node and a cluster): the scenarios the memory
//! store passes (`tests/leases.rs`), on real redis-server processes, with
//! the caller's clock so that the tests move time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::leases as scenario;
use common::redis_server::{RedisCluster, RedisServer};
use slidegate::clock::ManualClock;
use slidegate::{Error, RedisStore, Rule, Store};

async fn store_on(url: String, clock: &ManualClock, max_leases: usize) -> RedisStore {
    RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .client_clock(clock.clone())
        .max_leases(max_leases)
        .build()
        .await
        .expect("the Redis store connects")
}

async fn node(server: &RedisServer) -> (RedisStore, ManualClock) {
    let clock = ManualClock::at(1_000_000);
    let store = store_on(server.url(), &clock, slidegate::store::DEFAULT_MAX_LEASES).await;
    (store, clock)
}

async fn cluster(cluster: &RedisCluster) -> (RedisStore, ManualClock) {
    let clock = ManualClock::at(1_000_000);
    let store = store_on(cluster.url(), &clock, slidegate::store::DEFAULT_MAX_LEASES).await;
    (store, clock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_reservations_of_a_thousand_on_five_thousand_give_five_leases() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    scenario::ten_reservations_on_five_thousand(Arc::new(store), "team:7").await;
}

#[tokio::test]
async fn a_commit_above_the_reservation_goes_over_the_limit() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    scenario::a_commit_above_the_reservation_goes_over_the_limit(&store, "k").await;
}

#[tokio::test]
async fn an_expired_lease_is_charged_in_full_and_refused_after() {
    let server = RedisServer::start();
    let (store, clock) = node(&server).await;
    scenario::an_expired_lease_is_charged_in_full(&store, &clock, "k").await;
}

#[tokio::test]
async fn unknown_ids_and_ids_of_other_keys_are_not_found_alike() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    scenario::unknown_ids_and_other_keys_are_not_found(&store, "k", "other").await;
}

#[tokio::test]
async fn open_leases_are_bounded_and_expired_ones_stop_counting() {
    let server = RedisServer::start();
    let clock = ManualClock::at(1_000_000);
    let store = store_on(server.url(), &clock, 5).await;
    scenario::open_leases_are_bounded(&store, &clock, 5, "k").await;
}

#[tokio::test]
async fn places_are_held_until_released_or_their_time_runs_out() {
    let server = RedisServer::start();
    let (store, clock) = node(&server).await;
    scenario::places_are_held_released_and_expire(&store, &clock, "exports:7").await;
}

#[tokio::test]
async fn a_lease_of_places_takes_one_place() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    let places = Rule::concurrency(3).unwrap();
    let asked = store
        .reserve_lease("k", &[places], 2, Duration::from_secs(1))
        .await;
    assert!(matches!(asked, Err(Error::InvalidLease(_))), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_leases_settle_in_the_slot_of_their_key() {
    let nodes = RedisCluster::start();
    let (store, clock) = cluster(&nodes).await;
    assert!(store.is_cluster());
    // Keys of different slots, each with its record in its own slot.
    for key in ["team:7", "team:8", "{user}:9"] {
        scenario::ten_reservations_on_five_thousand(Arc::new(store.clone()), key).await;
    }
    scenario::an_expired_lease_is_charged_in_full(&store, &clock, "a").await;
    scenario::unknown_ids_and_other_keys_are_not_found(&store, "b", "c").await;
    scenario::places_are_held_released_and_expire(&store, &clock, "exports:7").await;
}

#[tokio::test]
async fn a_lease_on_a_gcra_rule_with_a_burst_is_refused_not_misjudged() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    let rule = Rule::parse("10/1s burst 50").expect("a rule");
    let refused = store
        .reserve_lease("k", &[rule], 5, Duration::from_millis(500))
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidLease(_))),
        "{refused:?}"
    );
    // The same rule without its burst is leased as usual.
    let plain = Rule::parse("10/1s gcra").expect("a rule");
    let lease = store
        .reserve_lease("k", &[plain], 5, Duration::from_millis(500))
        .await
        .expect("a lease");
    assert!(lease.id().is_some());
}

/// A waiter for a place whose future is dropped (its client gone) leaves
/// the queue at once: a request that does not wait is not held back by
/// it once the place is free. Left behind, it would count ahead of
/// everyone until its queue expired with its wait, 8 s: the test allows 3.
#[tokio::test]
async fn a_waiter_dropped_leaves_the_queue() {
    let server = RedisServer::start();
    let (store, _clock) = node(&server).await;
    let places = [Rule::concurrency(1).unwrap()];
    let minute = Duration::from_secs(60);
    let held = store.reserve_lease("k", &places, 1, minute).await.unwrap();
    assert!(held.granted());
    let waiting = store.reserve_lease_wait("k", &places, 1, minute, Duration::from_secs(8));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiting)
            .await
            .is_err(),
        "no place frees: it waits"
    );
    store.release(held.id().unwrap(), Some("k")).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let lease = store.reserve_lease("k", &places, 1, minute).await.unwrap();
        if lease.granted() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped waiter still holds the queue"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `max_leases` on a cluster: the scenario of one Redis, and leases of
/// keys in different slots counted together.
#[tokio::test]
async fn on_a_cluster_open_leases_are_bounded_across_slots() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::at(1_000_000);
    let store = store_on(cluster.url(), &clock, 5).await;
    scenario::open_leases_are_bounded(&store, &clock, 5, "k").await;

    let clock = ManualClock::at(1_000_000);
    let store = RedisStore::builder(cluster.url())
        .timeout(Duration::from_secs(2))
        .client_clock(clock.clone())
        .max_leases(3)
        .prefix("apart")
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("1000/1m").unwrap();
    let minute = Duration::from_secs(60);
    let keys = ["a", "b", "c", "d"];
    let slots: std::collections::BTreeSet<u16> = keys
        .iter()
        .map(|k| common::redis_server::key_slot(k))
        .collect();
    assert!(slots.len() >= 3, "the keys are in different slots");
    let mut ids = Vec::new();
    for key in &keys[..3] {
        let lease = store.reserve_lease(key, &[rule], 1, minute).await.unwrap();
        ids.push((key, lease.into_id().unwrap()));
    }
    assert_eq!(
        store.reserve_lease("d", &[rule], 1, minute).await.err(),
        Some(Error::TooManyLeases { max: 3 })
    );
    let used = 1000 - store.peek("d", &[rule]).await.unwrap().remaining();
    assert_eq!(used, 0, "the refused lease recorded nothing");
    let (key, id) = &ids[0];
    store.commit(id, Some(key), 1).await.unwrap();
    assert!(
        store
            .reserve_lease("d", &[rule], 1, minute)
            .await
            .unwrap()
            .granted()
    );
    assert!(store.reserve_lease("e", &[rule], 1, minute).await.is_err());
}
