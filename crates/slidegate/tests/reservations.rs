//! Reservations on the memory store: a request that would be refused takes
//! the earliest time it fits, recorded in one step, and waits for it.

use slidegate::store::memory::CompactString;
use std::time::Duration;

use slidegate::clock::{Clock, ManualClock};
use slidegate::store::{BatchReservation, MAX_WAIT};
use slidegate::{Algorithm, Decision, Error, Hit, MemoryStore, Rule, Store};

fn store_at(micros: u64) -> (MemoryStore<CompactString, ManualClock>, ManualClock) {
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
    assert_eq!(
        store.admissions("k", rule).unwrap(),
        vec![(0, 3), (1_000_001, 3), (2_000_002, 3)],
        "the nine reservations, nothing more"
    );
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

/// The wait is what a plain check says, and the request fits then and not
/// a microsecond sooner (on a twin store with the same history and no
/// reservation); on the store, the reservation holds that place.
#[test]
fn every_algorithm_waits_what_a_plain_check_says_and_then_fits() {
    for algorithm in Algorithm::ALL {
        let (store, clock) = store_at(10_000_000);
        let (twin, twin_clock) = store_at(10_000_000);
        let rule = Rule::parse("3/1s").unwrap().with_algorithm(algorithm);
        store.acquire("k", &[rule], 3).unwrap();
        twin.acquire("k", &[rule], 3).unwrap();
        let told = store.dry_run("k", &[rule], 2).unwrap().retry_after();
        let r = store
            .reserve("k", &[rule], 2, Duration::from_secs(2))
            .unwrap();
        assert!(r.granted(), "{algorithm}");
        assert_eq!(r.wait(), told, "{algorithm}");
        assert!(r.wait() > Duration::ZERO, "{algorithm}: it had to wait");
        twin_clock.advance(r.wait() - Duration::from_micros(1));
        assert!(
            !twin.dry_run("k", &[rule], 2).unwrap().allowed(),
            "{algorithm}: it does not fit a microsecond sooner"
        );
        twin_clock.advance(Duration::from_micros(1));
        assert!(
            twin.acquire("k", &[rule], 2).unwrap().allowed(),
            "{algorithm}: it fits once the wait is over"
        );
        // Nothing else fits before the reservation's time, nor at it.
        clock.advance(r.wait());
        assert!(
            !store.acquire("k", &[rule], 2).unwrap().allowed(),
            "{algorithm}: the reservation holds its place"
        );
    }
}

/// A reservation recorded in a later window (a sliding log of the same
/// key makes it wait a second) leaves the counter's own window unknown:
/// plain requests are refused until the later window begins, though the
/// counter counted nothing before it, with `retry_after` pointing at its
/// beginning, and pass from then on.
#[test]
fn a_window_counter_refuses_plain_requests_until_a_reserved_window_begins() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingCounter] {
        let (store, clock) = store_at(0);
        let counter = Rule::parse("4/1s").unwrap().with_algorithm(algorithm);
        let gate = Rule::parse("1/1s").unwrap();
        store.acquire("k", &[gate], 1).unwrap();
        let r = store
            .reserve("k", &[counter, gate], 1, Duration::from_secs(3))
            .unwrap();
        assert!(r.granted(), "{algorithm}");
        assert_eq!(r.wait(), Duration::from_micros(1_000_001), "{algorithm}");
        for now in [500_000, 999_999] {
            clock.set(now);
            let plain = store.acquire("k", &[counter], 1).unwrap();
            assert!(!plain.allowed(), "{algorithm} at {now}: {plain:?}");
            assert_eq!(
                plain.retry_after(),
                Duration::from_micros(1_000_000 - now),
                "{algorithm} at {now}: until the reserved window begins"
            );
        }
        clock.set(1_000_000);
        let begun = store.acquire("k", &[counter], 1).unwrap();
        assert!(begun.allowed(), "{algorithm}: {begun:?}");
        assert_eq!(begun.remaining(), 2, "{algorithm}: the reservation counted");
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
    assert_eq!(store.admissions("a", fast).unwrap(), vec![(0, 1)]);
}

/// A `max_wait` of an hour waits `MAX_WAIT` at most: a wait of exactly
/// that is granted, one microsecond more is refused.
#[test]
fn max_wait_is_capped() {
    let (store, clock) = store_at(0);
    let rule = Rule::parse("1/10m").unwrap();
    store.acquire("k", &[rule], 1).unwrap();
    let r = store
        .reserve("k", &[rule], 1, Duration::from_secs(3600))
        .unwrap();
    assert!(!r.granted(), "a 10 minute wait is more than {MAX_WAIT:?}");
    let four_minutes = Rule::parse("1/4m").unwrap();
    assert_eq!(four_minutes.window_micros(), MAX_WAIT.as_micros() as u64);
    store.acquire("j", &[four_minutes], 1).unwrap();
    let over = store
        .reserve("j", &[four_minutes], 1, Duration::from_secs(3600))
        .unwrap();
    assert!(!over.granted(), "{MAX_WAIT:?} and 1 µs is too long");
    assert_eq!(
        over.decision().retry_after(),
        MAX_WAIT + Duration::from_micros(1)
    );
    clock.set(1);
    let at_most = store
        .reserve("j", &[four_minutes], 1, Duration::from_secs(3600))
        .unwrap();
    assert!(at_most.granted());
    assert_eq!(at_most.wait(), MAX_WAIT);
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

/// Tokio's clock, which stands still while the runtime is paused and jumps
/// to the next timer when every task waits: the store and the sleep read
/// the same time.
#[derive(Clone)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now_micros(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}

/// It returns at the reserved time (within the timer's millisecond), not
/// before, admitted, recorded at its turn: a window and 1 µs after the
/// first admission.
#[tokio::test(start_paused = true)]
async fn acquire_wait_sleeps_until_the_reserved_time_and_passes() {
    let clock = TokioClock(tokio::time::Instant::now());
    let store: MemoryStore<CompactString, TokioClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    let rule = Rule::parse("1/200ms").unwrap();
    tokio::time::advance(Duration::from_micros(1_234)).await;
    assert!(
        Store::acquire(&store, "k", &[rule], 1)
            .await
            .unwrap()
            .allowed()
    );
    tokio::time::advance(Duration::from_millis(50)).await;
    let d = Store::acquire_wait(&store, "k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(d.allowed());
    let log = store.admissions("k", rule).unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
    let turn = log[0].0 + rule.window_micros() + 1;
    assert_eq!(log[1].0, turn, "recorded at its turn");
    let woke = clock.now_micros();
    assert!(
        (turn..turn + 1_000).contains(&woke),
        "it returned at {woke} µs for its turn at {turn}"
    );
    let third = Store::acquire_wait(&store, "k", &[rule], 1, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(!third.allowed(), "a wait beyond max_wait is refused");
}

#[test]
fn a_denied_batch_keeps_no_key_it_added() {
    let (store, _clock) = store_at(0);
    let fast = Rule::parse("1/1s").unwrap();
    let slow = Rule::parse("5/1s").unwrap();
    store.acquire("a", &[fast], 1).unwrap();
    let hits = [Hit::new("a", fast, 1), Hit::new("b", slow, 1)];
    let reserved = store
        .reserve_batch(&hits, Duration::from_millis(10))
        .unwrap();
    assert!(!reserved.granted());
    assert_eq!(store.len(), 1, "only \"a\" is held");
    let decided = store.acquire_batch(&hits).unwrap();
    assert!(!decided[0].allowed());
    assert_eq!(store.len(), 1, "only \"a\" is held");
}

/// A store of another crate that implements only the required methods and
/// `reserve_batch` (as a wrapper that times or counts calls does).
struct BatchesOnly(MemoryStore<CompactString, TokioClock>);

impl Store for BatchesOnly {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        Store::acquire(&self.0, key, rules, cost).await
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Store::acquire_batch(&self.0, hits).await
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        Store::reset(&self.0, key).await
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }

    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> slidegate::Result<BatchReservation> {
        Store::reserve_batch(&self.0, hits, max_wait).await
    }
}

/// `reserve` and `acquire_wait` are the trait's: one reservation through
/// `reserve_batch`, then a sleep until its turn.
#[tokio::test(start_paused = true)]
async fn reserve_and_acquire_wait_come_from_reserve_batch() {
    let clock = TokioClock(tokio::time::Instant::now());
    let store = BatchesOnly(
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    );
    let rule = Rule::parse("1/200ms").unwrap();
    assert!(store.acquire("k", &[rule], 1).await.unwrap().allowed());
    let reserved = store
        .reserve("k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(reserved.granted(), "{reserved:?}");
    assert_eq!(reserved.wait(), Duration::from_micros(200_001));
    assert_eq!(reserved.decision().remaining(), 0);

    let asked = clock.now_micros();
    let d = store
        .acquire_wait("k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(d.allowed());
    let log = store.0.admissions("k", rule).unwrap();
    let turn = log[1].0 + rule.window_micros() + 1;
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[2].0, turn, "recorded at its turn");
    let woke = clock.now_micros();
    assert!(
        woke >= turn && woke < turn + 1_000,
        "asked at {asked} µs, returned at {woke} µs for its turn at {turn}"
    );
    assert_eq!(
        store.reserve("k", &[], 1, Duration::ZERO).await,
        Err(Error::NoRules)
    );
}

/// A store of another crate that cannot reserve: only the required
/// methods.
struct DecidesOnly(MemoryStore<CompactString, TokioClock>);

impl Store for DecidesOnly {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        Store::acquire(&self.0, key, rules, cost).await
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Store::acquire_batch(&self.0, hits).await
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        Store::reset(&self.0, key).await
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }
}

/// Without reservations, `reserve` decides at once and `acquire_wait`
/// asks again after each `retry_after`, within `max_wait`.
#[tokio::test(start_paused = true)]
async fn a_store_that_cannot_reserve_is_asked_again_after_retry_after() {
    let clock = TokioClock(tokio::time::Instant::now());
    let store = DecidesOnly(
        MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    );
    let rule = Rule::parse("1/200ms").unwrap();
    assert!(store.acquire("k", &[rule], 1).await.unwrap().allowed());
    let at_once = store
        .reserve("k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(!at_once.granted(), "nothing reserved: {at_once:?}");
    assert_eq!(at_once.wait(), Duration::ZERO);

    let short = store
        .acquire_wait("k", &[rule], 1, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(!short.allowed(), "beyond max_wait: refused at once");
    assert_eq!(clock.now_micros(), 0, "without sleeping");

    let d = store
        .acquire_wait("k", &[rule], 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(d.allowed());
    // The first admission (at 0) has left the window: the log holds the
    // second, admitted once it could pass (within the timer's ms).
    let passes = rule.window_micros() + 1;
    let log = store.0.admissions("k", rule).unwrap();
    assert!(
        matches!(log[..], [(at, 1)] if (passes..passes + 1_000).contains(&at)),
        "asked again once it could pass ({passes} µs): {log:?}"
    );
}
