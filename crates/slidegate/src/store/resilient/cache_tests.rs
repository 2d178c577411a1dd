//! The deny cache in front of a backend that decides some time after a
//! call is sent and answers some time after it decided (a memory store on
//! the test's manual clock, reached through a "network" that moves the
//! clock), and resets racing the calls in flight.

use crate::store::memory::CompactString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::decision::Decision;
use crate::error::Result;
use crate::rate::Rule;
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::memory::MemoryStore;

/// A memory store reached through a network: a call moves the shared
/// clock by `there` before the store decides and by `back` after; a held
/// call waits for the test's leave after deciding.
#[derive(Clone)]
struct Remote {
    inner: MemoryStore<CompactString, ManualClock>,
    clock: ManualClock,
    there: Duration,
    back: Duration,
    calls: Arc<AtomicU64>,
    held: Option<Arc<Semaphore>>,
}

impl Remote {
    fn new(clock: &ManualClock, there: Duration, back: Duration) -> Remote {
        Remote {
            inner: MemoryStore::builder()
                .clock(clock.clone())
                .sweep_interval(None)
                .build(),
            clock: clock.clone(),
            there,
            back,
            calls: Arc::default(),
            held: None,
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    async fn decide<T>(&self, decide: impl FnOnce() -> T) -> T {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.clock.advance(self.there);
        let answer = decide();
        if let Some(held) = &self.held {
            held.acquire().await.expect("open").forget();
        }
        self.clock.advance(self.back);
        answer
    }
}

impl Store for Remote {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision> {
        self.decide(|| self.inner.acquire(key, rules, cost)).await
    }
    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
        self.decide(|| self.inner.acquire_batch(hits)).await
    }
    async fn reset(&self, key: &str) -> Result<()> {
        self.inner.reset(key);
        Ok(())
    }
    async fn ready(&self) -> Result<()> {
        Ok(())
    }
}

fn rule(s: &str) -> Rule {
    Rule::parse(s).expect("a valid rule")
}

fn resilient(remote: &Remote, clock: &ManualClock) -> ResilientStore<Remote> {
    ResilientStore::builder(remote.clone())
        .clock(clock.clone())
        .timeout(Duration::from_secs(3600))
        .build()
}

/// The reported case on the memory store: the store decides 50 ms after
/// the call is sent and answers 30 ms later. The slot of the one admission
/// frees 2 s after the store decided it; a cached denial says so to the
/// microsecond (it said 50 ms less), and holds no longer than that.
#[tokio::test]
async fn a_cached_denial_tells_the_wait_from_the_answer_and_holds_it_from_the_sending() {
    let clock = ManualClock::new();
    let remote = Remote::new(&clock, Duration::from_millis(50), Duration::from_millis(30));
    let store = resilient(&remote, &clock);
    let one = [rule("1/2s")];
    assert!(store.acquire("k", &one, 1).await.unwrap().allowed());
    // The sliding log frees the slot 1 µs after the window has passed.
    let frees_at = 50_000 + 2_000_000 + 1;
    let denied = store.acquire("k", &one, 1).await.unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after_us, frees_at - 130_000, "the store's own");
    assert_eq!(remote.calls(), 2);

    clock.advance(Duration::from_millis(100));
    let now = clock.now_micros();
    for cached in [
        store.acquire("k", &one, 1).await.unwrap(),
        store.acquire_now("k", &one, 1).unwrap().unwrap(),
        store
            .acquire_batch(&[Hit::new("k", one[0], 1)])
            .await
            .unwrap()[0],
    ] {
        assert!(!cached.allowed());
        assert!(
            now + cached.retry_after_us >= frees_at,
            "told to come back {} µs too early",
            frees_at - (now + cached.retry_after_us)
        );
        assert_eq!(
            now + cached.retry_after_us,
            frees_at + 30_000,
            "from the answer"
        );
    }
    assert_eq!(remote.calls(), 2, "answered by the cache");

    // Held until the store may admit (sent + retry_after), not later.
    clock.advance(Duration::from_micros(
        frees_at - 50_000 - 1 - clock.now_micros(),
    ));
    assert!(store.acquire_now("k", &one, 1).is_some());
    clock.advance(Duration::from_micros(1));
    assert!(store.acquire_now("k", &one, 1).is_none());
    let after = store.acquire("k", &one, 1).await.unwrap();
    assert!(
        after.allowed(),
        "the store admits once the slot is free: {after:?}"
    );
}

/// A reset while a denial is on its way back: the denial was right when
/// the store made it, and is answered, but not remembered, or the key
/// would stay denied after its reset.
#[tokio::test]
async fn a_denial_decided_before_a_reset_is_not_remembered_after_it() {
    let clock = ManualClock::new();
    let mut remote = Remote::new(&clock, Duration::ZERO, Duration::ZERO);
    let held = Arc::new(Semaphore::new(0));
    remote.held = Some(Arc::clone(&held));
    let store = resilient(&remote, &clock);
    let one = [rule("1/1h")];
    held.add_permits(1);
    assert!(store.acquire("k", &one, 1).await.unwrap().allowed());

    let in_flight = {
        let store = store.clone();
        tokio::spawn(async move { store.acquire("k", &one, 1).await })
    };
    while remote.calls() < 2 {
        tokio::task::yield_now().await;
    }
    store.reset("k").await.unwrap();
    held.add_permits(1);
    let denied = in_flight.await.unwrap().unwrap();
    assert!(!denied.allowed(), "decided before the reset");
    assert_eq!(store.deny_cache_len(), 0, "not remembered");
    held.add_permits(1);
    assert!(store.acquire("k", &one, 1).await.unwrap().allowed());
}
