//! Reservations on the memory store: a request that would be refused takes
//! the earliest time it fits, recorded in one step, and waits for it.

use std::time::{Duration, Instant};

use slidegate::clock::ManualClock;
use slidegate::store::MAX_WAIT;
use slidegate::{Algorithm, Hit, MemoryStore, Rule, Store};

fn store_at(micros: u64) -> (MemoryStore<String, ManualClock>, ManualClock) {
    let clock = ManualClock::at(micros);
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    (store, clock)
}

/// The most admissions any closed interval of `window` µs holds.
fn busiest_window(admissions: &[(u64, u64)], window: u64) -> u64 {
    admissions
        .iter()
        .map(|&(from, _)| {
            admissions
                .iter()
                .filter(|&&(at, _)| from <= at && at <= from + window)
                .map(|&(_, cost)| cost)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn nine_waiters_on_three_per_second_are_served_in_three_groups() {
    let (store, _clock) = store_at(0);
    let rule = Rule::parse("3/1s").unwrap();
    let waits: Vec<Duration> = (0..9)
        .map(|_| {
            let r = store
                .reserve("k", &[rule], 1, Duration::from_secs(3))
                .unwrap();
            assert!(r.granted());
            r.wait()
        })
        .collect();
    let second = Duration::from_micros(1_000_001);
    let third = Duration::from_micros(2_000_002);
    assert_eq!(
        waits,
        [Duration::ZERO; 3]
            .into_iter()
            .chain([second; 3])
            .chain([third; 3])
            .collect::<Vec<_>>()
    );
    let log = store.admissions("k", rule).unwrap();
    assert_eq!(log, vec![(0, 3), (1_000_001, 3), (2_000_002, 3)]);
    assert_eq!(busiest_window(&log, 1_000_000), 3);
}

#[test]
fn a_wait_beyond_max_wait_is_denied_at_once_and_records_nothing() {
    let (store, _clock) = store_at(0);
    let rule = Rule::parse("3/1s").unwrap();
    for _ in 0..9 {
        store
            .reserve("k", &[rule], 1, Duration::from_secs(3))
            .unwrap();
    }
    let tenth = store
        .reserve("k", &[rule], 1, Duration::from_millis(500))
        .unwrap();
    assert!(!tenth.granted());
    assert_eq!(tenth.wait(), Duration::ZERO);
    assert_eq!(
        tenth.decision().retry_after(),
        Duration::from_micros(3_000_003)
    );
    assert_eq!(store.admissions("k", rule).unwrap().len(), 3);
}

#[test]
fn a_plain_request_never_passes_ahead_of_a_waiter() {
    let (store, clock) = store_at(0);
    let rule = Rule::parse("2/1s").unwrap();
    store.acquire("k", &[rule], 2).unwrap();
    clock.set(500_000);
    let waiter = store
        .reserve("k", &[rule], 1, Duration::from_secs(1))
        .unwrap();
    assert_eq!(waiter.wait(), Duration::from_micros(500_001));
    // At 0.6 s the two admissions of 0 s still count: a third in [0, 1 s]
    // would be one too many.
    clock.set(600_000);
    let plain = store.acquire("k", &[rule], 1).unwrap();
    assert!(!plain.allowed());
    assert_eq!(plain.retry_after(), Duration::from_micros(400_001));
    clock.set(1_000_001);
    assert!(store.acquire("k", &[rule], 1).unwrap().allowed());
    assert!(!store.acquire("k", &[rule], 1).unwrap().allowed());
    let log = store.admissions("k", rule).unwrap();
    assert_eq!(busiest_window(&log, 1_000_000), 2);
}

#[test]
fn every_algorithm_waits_what_a_plain_check_says_and_then_fits() {
    for algorithm in Algorithm::ALL {
        let (store, clock) = store_at(10_000_000);
        let rule = Rule::parse("3/1s").unwrap().with_algorithm(algorithm);
        store.acquire("k", &[rule], 3).unwrap();
        let told = store.dry_run("k", &[rule], 2).unwrap().retry_after();
        let r = store
            .reserve("k", &[rule], 2, Duration::from_secs(2))
            .unwrap();
        assert!(r.granted(), "{algorithm}");
        assert_eq!(r.wait(), told, "{algorithm}");
        // Nothing else fits before the reservation's time, nor at it.
        clock.advance(r.wait());
        assert!(
            !store.acquire("k", &[rule], 2).unwrap().allowed(),
            "{algorithm}: the reservation holds its place"
        );
    }
}

#[test]
fn a_window_counter_refuses_plain_requests_until_a_reserved_window_begins() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingCounter] {
        let (store, clock) = store_at(0);
        let rule = Rule::parse("2/1s").unwrap().with_algorithm(algorithm);
        store.acquire("k", &[rule], 2).unwrap();
        let r = store
            .reserve("k", &[rule], 1, Duration::from_secs(3))
            .unwrap();
        assert!(r.granted(), "{algorithm}");
        clock.set(500_000);
        let plain = store.acquire("k", &[rule], 1).unwrap();
        assert!(!plain.allowed(), "{algorithm}");
        assert!(
            plain.retry_after() >= Duration::from_micros(500_000),
            "{algorithm}"
        );
    }
}

#[test]
fn a_batch_is_reserved_at_one_time_for_every_hit() {
    let (store, _clock) = store_at(0);
    let fast = Rule::parse("1/1s").unwrap();
    let slow = Rule::parse("5/1s").unwrap();
    store.acquire("a", &[fast], 1).unwrap();
    let hits = [Hit::new("a", fast, 1), Hit::new("b", slow, 1)];
    let r = store.reserve_batch(&hits, Duration::from_secs(2)).unwrap();
    assert!(r.granted());
    assert_eq!(r.wait(), Duration::from_micros(1_000_001));
    assert_eq!(store.admissions("b", slow).unwrap(), vec![(1_000_001, 1)]);
    assert_eq!(
        store.admissions("a", fast).unwrap(),
        vec![(0, 1), (1_000_001, 1)]
    );
}

#[test]
fn a_denied_batch_reservation_records_nothing_on_any_key() {
    let (store, _clock) = store_at(0);
    let fast = Rule::parse("1/1s").unwrap();
    let slow = Rule::parse("5/1s").unwrap();
    store.acquire("a", &[fast], 1).unwrap();
    let hits = [Hit::new("a", fast, 1), Hit::new("b", slow, 1)];
    let r = store
        .reserve_batch(&hits, Duration::from_millis(10))
        .unwrap();
    assert!(!r.granted());
    assert!(store.admissions("b", slow).is_none_or(|log| log.is_empty()));
}

#[test]
fn max_wait_is_capped() {
    let (store, _clock) = store_at(0);
    let rule = Rule::parse("1/10m").unwrap();
    store.acquire("k", &[rule], 1).unwrap();
    let r = store
        .reserve("k", &[rule], 1, Duration::from_secs(3600))
        .unwrap();
    assert!(!r.granted(), "a 10 minute wait is more than {MAX_WAIT:?}");
}

#[test]
fn a_reservation_far_past_the_window_keeps_its_log_exact() {
    // A short window, whose entries the store keeps in the key's slot at
    // the window's width, and waits many windows long.
    let (store, clock) = store_at(0);
    let rule = Rule::parse("2/10ms").unwrap();
    let mut waits = Vec::new();
    for _ in 0..40 {
        let r = store
            .reserve("k", &[rule], 1, Duration::from_secs(1))
            .unwrap();
        assert!(r.granted());
        waits.push(r.wait());
    }
    assert_eq!(waits[39], Duration::from_micros(19 * 10_001));
    let log = store.admissions("k", rule).unwrap();
    assert_eq!(log.iter().map(|&(_, c)| c).sum::<u64>(), 40);
    assert_eq!(busiest_window(&log, 10_000), 2);
    // And they still count as time passes over them.
    clock.set(95_000);
    assert!(!store.acquire("k", &[rule], 1).unwrap().allowed());
}

#[tokio::test]
async fn acquire_wait_sleeps_until_the_reserved_time_and_passes() {
    let store = MemoryStore::new();
    let rule = Rule::parse("1/200ms").unwrap();
    assert!(
        Store::acquire(&store, "k", &[rule], 1)
            .await
            .unwrap()
            .allowed()
    );
    let started = Instant::now();
    let d = Store::acquire_wait(&store, "k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(d.allowed());
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "it waited its turn"
    );
    let third = Store::acquire_wait(&store, "k", &[rule], 1, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(!third.allowed(), "a wait beyond max_wait is refused");
}
