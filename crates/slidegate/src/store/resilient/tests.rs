use crate::store::memory::CompactString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::memory::MemoryStore;

const OK: u8 = 0;
const FAIL: u8 = 1;
const STALL: u8 = 2;
const SLOW: u8 = 3;

/// A memory store that can be told to fail or to stall, and counts calls
/// and the most of them in flight at once: stands in for a backend's
/// failures (the Redis fault tests use real ones).
#[derive(Clone)]
struct Switchable {
    inner: MemoryStore<CompactString, ManualClock>,
    mode: Arc<AtomicU8>,
    calls: Arc<AtomicU64>,
    in_flight: Arc<InFlight>,
}

/// Calls inside the backend now, and the most there were at once.
#[derive(Default)]
struct InFlight {
    now: AtomicU64,
    peak: AtomicU64,
}

/// One call inside the backend; leaves when the call ends or is dropped.
struct Inside<'a>(&'a InFlight);

impl<'a> Inside<'a> {
    fn enter(in_flight: &'a InFlight) -> Inside<'a> {
        let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        in_flight.peak.fetch_max(now, Ordering::SeqCst);
        Inside(in_flight)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Switchable {
    fn new(clock: &ManualClock) -> Switchable {
        Switchable {
            inner: MemoryStore::builder()
                .clock(clock.clone())
                .sweep_interval(None)
                .build(),
            mode: Arc::default(),
            calls: Arc::default(),
            in_flight: Arc::default(),
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// The most calls that were inside the backend at once.
    fn peak_in_flight(&self) -> u64 {
        self.in_flight.peak.load(Ordering::SeqCst)
    }

    async fn gate(&self) -> Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let _inside = Inside::enter(&self.in_flight);
        match self.mode.load(Ordering::SeqCst) {
            FAIL => Err(Error::Store("connection refused".into())),
            STALL => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Err(Error::Store("stalled".into()))
            }
            SLOW => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Store for Switchable {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        self.gate().await?;
        self.inner.acquire(key, rules, cost)
    }
    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        self.gate().await?;
        self.inner.acquire_batch(hits)
    }
    async fn reset(&self, key: &str) -> Result<()> {
        self.gate().await?;
        self.inner.reset(key);
        Ok(())
    }
    async fn ready(&self) -> Result<()> {
        self.gate().await
    }
    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> Result<crate::store::lease::Lease> {
        self.gate().await?;
        self.inner.reserve_lease(key, rules, cost, time)
    }
    async fn commit(
        &self,
        id: &str,
        key: Option<&str>,
        cost: u64,
    ) -> Result<crate::store::lease::Settled> {
        self.gate().await?;
        self.inner.commit(id, key, cost)
    }
    async fn release(&self, id: &str, key: Option<&str>) -> Result<crate::store::lease::Settled> {
        self.gate().await?;
        self.inner.release(id, key)
    }
}

fn rule(s: &str) -> Rule {
    Rule::parse(s).unwrap()
}

fn resilient(
    backend: &Switchable,
    clock: &ManualClock,
    policy: FailurePolicy,
) -> ResilientStore<Switchable> {
    ResilientStore::builder(backend.clone())
        .policy(policy)
        .clock(clock.clone())
        .timeout(Duration::from_millis(50))
        .cooldown(Duration::from_millis(100), Duration::from_millis(400))
        .failure_threshold(3)
        .build()
}

#[tokio::test]
async fn the_deny_cache_answers_only_what_the_store_would() {
    let clock = ManualClock::at(1_000_000);
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Deny);
    let rules = [rule("5/100ms")];
    let mut cache_hits = 0;
    // A pseudo-random walk of times and costs over three keys.
    let mut seed = 7u64;
    for _ in 0..5_000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = ["a", "b", "c"][(seed >> 33) as usize % 3];
        let cost = 1 + (seed >> 40) % 3;
        clock.advance(Duration::from_micros((seed >> 20) % 3_000));
        let calls = backend.calls();
        let decision = store.acquire(key, &rules, cost).await.unwrap();
        if backend.calls() == calls {
            cache_hits += 1;
            assert!(!decision.allowed());
            // The store, asked at the same instant, denies it too.
            let truth = backend.inner.dry_run(key, &rules, cost).unwrap();
            assert!(
                !truth.allowed(),
                "cached denial of {key} cost {cost} the store would allow"
            );
            assert!(decision.retry_after() <= truth.retry_after());
        }
    }
    assert!(cache_hits > 1_000, "the cache was used ({cache_hits} hits)");
}

#[tokio::test]
async fn a_batch_denied_by_its_counters_is_answered_from_the_deny_cache() {
    let clock = ManualClock::at(1_000_000);
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Deny);
    let (a, b) = (rule("2/1s"), rule("1/1s"));
    let batch = [Hit::new("k", a, 1), Hit::new("j", b, 1)];
    for _ in 0..2 {
        let d = store.acquire_batch(&batch).await.unwrap();
        assert!(!d[0].degraded() && !d[1].degraded());
    }
    // The second batch was denied on "j" and charged nothing: "k" has one
    // unit left, "j" none. The store denies the batch on "j" again.
    let calls = backend.calls();
    let d = store.acquire_batch(&batch).await.unwrap();
    assert_eq!((d[0].allowed(), d[1].allowed()), (true, false));
    assert_eq!(
        backend.calls(),
        calls + 1,
        "\"k\" is not denied: asked the store"
    );
    // Once "k" is spent too, the batch is denied on both counters...
    store.acquire("k", &[a], 1).await.unwrap();
    store.acquire_batch(&batch).await.unwrap();
    let calls = backend.calls();
    let cached = store.acquire_batch(&batch).await.unwrap();
    assert_eq!(backend.calls(), calls, "answered without a call");
    assert!(cached.iter().all(|d| !d.allowed() && !d.degraded()));
    // ... and a hit alone is answered from what the batch taught.
    assert!(!store.acquire("j", &[b], 1).await.unwrap().allowed());
    assert_eq!(backend.calls(), calls);
    // Until the denials run out (an admission counts for the whole window).
    clock.advance(Duration::from_millis(1_001));
    let d = store.acquire_batch(&batch).await.unwrap();
    assert_eq!(backend.calls(), calls + 1);
    assert!(d.iter().all(Decision::allowed));
}

#[tokio::test]
async fn batch_denials_from_the_cache_are_denials_of_the_store() {
    let clock = ManualClock::at(1_000_000);
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Deny);
    let rules = [rule("4/100ms"), rule("5/250ms")];
    let mut cache_hits = 0;
    let mut seed = 11u64;
    for _ in 0..5_000 {
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        clock.advance(Duration::from_micros(next() % 4_000));
        // One or two hits over two keys and two rules, sometimes on one counter.
        let hits: Vec<Hit<'_>> = (0..1 + next() % 2)
            .map(|_| {
                let key = ["a", "b"][next() as usize % 2];
                Hit::new(key, rules[next() as usize % 2], 1 + next() % 2)
            })
            .collect();
        let calls = backend.calls();
        let decisions = store.acquire_batch(&hits).await.unwrap();
        if backend.calls() == calls {
            cache_hits += 1;
            for (hit, d) in hits.iter().zip(&decisions) {
                assert!(!d.allowed());
                let truth = backend
                    .inner
                    .dry_run(hit.key, &[hit.rule], hit.cost)
                    .unwrap();
                assert!(
                    !truth.allowed(),
                    "cached denial of {hit:?} the store would allow"
                );
                assert!(d.retry_after() <= truth.retry_after());
            }
        }
    }
    assert!(cache_hits > 500, "the cache was used ({cache_hits} hits)");
}

#[tokio::test]
async fn each_policy_answers_degraded_when_the_store_fails() {
    for (policy, allowed) in [(FailurePolicy::Deny, false), (FailurePolicy::Allow, true)] {
        let clock = ManualClock::new();
        let backend = Switchable::new(&clock);
        let store = resilient(&backend, &clock, policy);
        backend.set(FAIL);
        let d = store.acquire("k", &[rule("5/1s")], 1).await.unwrap();
        assert_eq!((d.allowed(), d.degraded()), (allowed, true), "{policy}");
    }
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Local);
    backend.set(FAIL);
    let rules = [rule("2/1s")];
    let outcomes: Vec<(bool, bool)> = futures_lite(&store, &rules, 3).await;
    assert_eq!(
        outcomes,
        [(true, true), (true, true), (false, true)],
        "local: exact per instance"
    );
}

async fn futures_lite(
    store: &ResilientStore<Switchable>,
    rules: &[Rule],
    n: usize,
) -> Vec<(bool, bool)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let d = store.acquire("k", rules, 1).await.unwrap();
        out.push((d.allowed(), d.degraded()));
    }
    out
}

#[tokio::test]
async fn a_stalled_store_costs_at_most_the_timeout() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Allow);
    backend.set(STALL);
    let started = Instant::now();
    let d = store.acquire("k", &[rule("5/1s")], 1).await.unwrap();
    assert!(d.degraded());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_circuit_opens_then_probes_and_closes() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    // A cool-down of 1 s, not 100 ms: the 50 decisions made while it is
    // open must all come within it, on a loaded machine too.
    let store = ResilientStore::builder(backend.clone())
        .policy(FailurePolicy::Deny)
        .clock(clock.clone())
        .timeout(Duration::from_millis(50))
        .cooldown(Duration::from_secs(1), Duration::from_secs(4))
        .failure_threshold(3)
        .build();
    let rules = [rule("100/1s")];
    backend.set(FAIL);
    for _ in 0..3 {
        assert!(store.acquire("k", &rules, 1).await.unwrap().degraded());
    }
    assert!(store.is_degraded());
    let calls = backend.calls();
    for _ in 0..50 {
        assert!(store.acquire("k", &rules, 1).await.unwrap().degraded());
    }
    assert_eq!(backend.calls(), calls, "no call while open");
    backend.set(OK);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let d = store.acquire("k", &rules, 1).await.unwrap();
    assert!(
        !d.degraded() && d.allowed(),
        "the probe succeeds and closes the circuit"
    );
    assert!(!store.is_degraded());
    assert_eq!(backend.calls(), calls + 1);
}

/// After a long outage the cool-down has doubled to its longest: that, not
/// the outage, bounds how long the policy keeps deciding once the backend
/// is back.
#[tokio::test]
async fn after_a_long_outage_the_store_is_used_again_within_a_second() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = ResilientStore::builder(backend.clone())
        .policy(FailurePolicy::Deny)
        .clock(clock.clone())
        .build();
    let rules = [rule("100/1s")];
    backend.set(FAIL);
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_millis(3_100) {
        assert!(store.acquire("k", &rules, 1).await.unwrap().degraded());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    backend.set(OK);
    let back = Instant::now();
    while store.acquire("k", &rules, 1).await.unwrap().degraded() {
        assert!(
            back.elapsed() < Duration::from_millis(1_200),
            "still deciding by policy {:?} after the store came back",
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A decision beyond the calls in flight waits for one to end, but never
/// past its own deadline: behind a stalled call it is answered by the
/// policy when its deadline comes, without reaching the backend.
#[tokio::test]
async fn calls_in_flight_are_bounded() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = ResilientStore::builder(backend.clone())
        .policy(FailurePolicy::Deny)
        .timeout(Duration::from_millis(300))
        .max_in_flight(1)
        .build();
    backend.set(STALL);
    let slow = {
        let store = store.clone();
        tokio::spawn(async move { store.acquire("a", &[rule("5/1s")], 1).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    let d = store.acquire("b", &[rule("5/1s")], 1).await.unwrap();
    assert!(d.degraded(), "{d:?}");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "answered by its deadline: {:?}",
        started.elapsed()
    );
    assert!(slow.await.unwrap().unwrap().degraded());
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the waiting decision reached the backend beside the stalled call"
    );
}

/// A burst beyond the bound on a healthy backend is decided by the
/// backend, in turns, and not handed to the policy: the backend sees as
/// many calls at once as the bound allows, and never more.
#[tokio::test]
async fn a_burst_beyond_the_calls_in_flight_waits_for_its_turn() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = ResilientStore::builder(backend.clone())
        .policy(FailurePolicy::Allow)
        .timeout(Duration::from_secs(2))
        .max_in_flight(2)
        .deny_cache(None)
        .build();
    backend.set(SLOW);
    let burst: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.acquire("k", &[rule("4/1m")], 1).await })
        })
        .collect();
    let mut allowed = 0;
    for call in burst {
        let d = call.await.unwrap().unwrap();
        assert!(!d.degraded(), "decided by the backend: {d:?}");
        allowed += u32::from(d.allowed());
    }
    assert_eq!(allowed, 4, "the backend's limit holds for the whole burst");
    assert_eq!(backend.calls(), 6);
    assert_eq!(
        backend.peak_in_flight(),
        2,
        "calls inside the backend at once, with max_in_flight(2)"
    );
}

#[tokio::test]
async fn bad_input_is_an_error_not_a_policy_decision() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Allow);
    backend.set(FAIL);
    assert!(matches!(
        store.acquire("", &[rule("5/1s")], 1).await,
        Err(Error::InvalidKey(_))
    ));
    assert!(matches!(
        store.acquire("k", &[rule("5/1s")], 6).await,
        Err(Error::CostExceedsLimit { .. })
    ));
    assert_eq!(backend.calls(), 0);
}

/// A caller that gives up before the store deadline (Envoy's rate limit
/// filter waits 20 ms by default, the store 50 ms) drops the probe of an
/// open circuit: the next probe still goes, and once the store is back,
/// decisions come from it again.
#[tokio::test]
async fn a_probe_dropped_by_its_caller_does_not_keep_the_circuit_open() {
    let clock = ManualClock::new();
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Allow);
    let rules = [rule("100/1s")];
    backend.set(FAIL);
    for _ in 0..3 {
        assert!(store.acquire("k", &rules, 1).await.unwrap().degraded());
    }
    assert!(store.is_degraded());
    backend.set(STALL);
    let calls = backend.calls();
    let stalled = Instant::now();
    while stalled.elapsed() < Duration::from_millis(600) {
        let impatient =
            tokio::time::timeout(Duration::from_millis(10), store.acquire("k", &rules, 1));
        if let Ok(answer) = impatient.await {
            assert!(answer.unwrap().degraded());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        backend.calls() >= calls + 2,
        "probes went to the stalled store and were dropped ({} calls)",
        backend.calls() - calls
    );
    backend.set(OK);
    let back = Instant::now();
    while store.acquire("k", &rules, 1).await.unwrap().degraded() {
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "still deciding by policy {:?} after the store came back",
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!store.is_degraded());
}

/// A batch that hits one counter twice is decided by the store on the
/// summed cost: a cached denial of one hit alone would answer it with a
/// `retry_after` shorter than the store's.
#[tokio::test]
async fn a_batch_repeating_a_counter_is_never_answered_from_the_deny_cache() {
    let clock = ManualClock::at(1_000_000);
    let backend = Switchable::new(&clock);
    let store = resilient(&backend, &clock, FailurePolicy::Deny);
    let r = rule("2/1s");
    store.acquire("k", &[r], 1).await.unwrap();
    clock.advance(Duration::from_millis(500));
    store.acquire("k", &[r], 1).await.unwrap();
    clock.advance(Duration::from_millis(100));
    let alone = store.acquire("k", &[r], 1).await.unwrap();
    assert!(!alone.allowed());
    assert_eq!(alone.retry_after(), Duration::from_micros(400_001));
    let calls = backend.calls();
    let twice = store
        .acquire_batch(&[Hit::new("k", r, 1), Hit::new("k", r, 1)])
        .await
        .unwrap();
    assert_eq!(backend.calls(), calls + 1, "asked the store");
    assert!(twice.iter().all(|d| !d.allowed()));
    // The second hit asks for 2 units: both admissions must expire, 900 ms,
    // not the 400 ms of one hit alone.
    assert_eq!(twice[1].retry_after(), Duration::from_micros(900_001));
}

#[tokio::test]
async fn leases_pass_through_and_a_failed_store_never_grants_one() {
    for policy in [
        FailurePolicy::Allow,
        FailurePolicy::Deny,
        FailurePolicy::Local,
    ] {
        let clock = ManualClock::new();
        let backend = Switchable::new(&clock);
        let store = resilient(&backend, &clock, policy);
        let rules = [rule("10/1s")];
        let lease = store
            .reserve_lease("k", &rules, 6, Duration::from_millis(500))
            .await
            .unwrap();
        let id = lease.id().unwrap().to_owned();
        assert_eq!(lease.decision().remaining(), 4);
        backend.set(FAIL);
        let refused = store
            .reserve_lease("k", &rules, 1, Duration::from_millis(500))
            .await;
        assert!(
            matches!(refused, Err(Error::Store(_))),
            "{policy}: {refused:?}"
        );
        assert!(matches!(
            store.commit(&id, None, 1).await,
            Err(Error::Store(_))
        ));
        backend.set(OK);
        clock.advance(Duration::from_millis(300));
        let settled = store.commit(&id, Some("k"), 1).await.unwrap();
        assert_eq!(settled.decision().remaining(), 9, "{policy}: given back");
        assert_eq!(
            store.release(&id, None).await.err(),
            Some(Error::LeaseExpired),
            "the store's own errors pass through"
        );
    }
}
