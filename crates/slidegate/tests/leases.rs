//! Leases on the memory store: budgets reserved before the work and
//! settled after, and places held while it runs.

mod common;

use slidegate::store::memory::CompactString;
use std::sync::Arc;
use std::time::Duration;

use common::leases as scenario;
use slidegate::clock::ManualClock;
use slidegate::{MemoryStore, Rule};

fn store_at(micros: u64) -> (MemoryStore<CompactString, ManualClock>, ManualClock) {
    store_with(micros, slidegate::store::DEFAULT_MAX_LEASES)
}

fn store_with(
    micros: u64,
    max_leases: usize,
) -> (MemoryStore<CompactString, ManualClock>, ManualClock) {
    let clock = ManualClock::at(micros);
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .max_leases(max_leases)
        .build();
    (store, clock)
}

#[tokio::test]
async fn ten_reservations_of_a_thousand_on_five_thousand_give_five_leases() {
    let (store, _clock) = store_at(1_000_000);
    scenario::ten_reservations_on_five_thousand(Arc::new(store), "team:7").await;
}

#[tokio::test]
async fn a_commit_above_the_reservation_goes_over_the_limit() {
    let (store, _clock) = store_at(1_000_000);
    scenario::a_commit_above_the_reservation_goes_over_the_limit(&store, "k").await;
}

#[tokio::test]
async fn an_expired_lease_is_charged_in_full_and_refused_after() {
    let (store, clock) = store_at(1_000_000);
    scenario::an_expired_lease_is_charged_in_full(&store, &clock, "k").await;
}

#[tokio::test]
async fn unknown_ids_and_ids_of_other_keys_are_not_found_alike() {
    let (store, _clock) = store_at(1_000_000);
    scenario::unknown_ids_and_other_keys_are_not_found(&store, "k", "other").await;
}

#[tokio::test]
async fn open_leases_are_bounded_and_expired_ones_stop_counting() {
    let (store, clock) = store_with(1_000_000, 5);
    scenario::open_leases_are_bounded(&store, &clock, 5, "k").await;
}

#[tokio::test]
async fn places_are_held_until_released_or_their_time_runs_out() {
    let (store, clock) = store_at(1_000_000);
    scenario::places_are_held_released_and_expire(&store, &clock, "exports:7").await;
}

#[tokio::test]
async fn waiters_for_places_are_served_in_arrival_order() {
    let (store, _clock) = store_at(1_000_000);
    scenario::waiters_for_places_are_served_in_order(Arc::new(store), "exports:7").await;
}

#[test]
fn a_give_back_changes_the_admission_in_place() {
    let (store, clock) = store_at(1_000_000);
    let rule = Rule::parse("10/1s").unwrap();
    let lease = store
        .reserve_lease("k", &[rule], 6, Duration::from_millis(500))
        .unwrap();
    clock.advance(Duration::from_millis(100));
    store.acquire("k", &[rule], 2).unwrap();
    clock.advance(Duration::from_millis(100));
    store.commit(lease.id().unwrap(), Some("k"), 1).unwrap();
    assert_eq!(
        store.admissions("k", rule).unwrap(),
        vec![(1_000_000, 1), (1_100_000, 2)],
        "the reservation's time keeps what was committed"
    );
    // The committed unit leaves the window at its own time, not later.
    clock.set(2_000_001);
    assert_eq!(store.peek("k", &[rule]).unwrap().remaining(), 8);
}
