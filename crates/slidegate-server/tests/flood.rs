//! A flood of 1,000,000 unique keys at the stores the server decides with
//! (the memory store, and the Redis store's local fallback while Redis is
//! down), then unique denials at the local deny cache: what each holds
//! stays within its documented bound, and so does the memory of this
//! process (`VmRSS`). One test, alone in its binary, so no other test moves
//! the memory it measures.

mod common;
#[path = "common/process.rs"]
mod process;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::redis::ReservedPort;
use slidegate::store::resilient::{FailurePolicy, ResilientStore};
use slidegate::{MemoryStore, Rule, Store};
use slidegate_server::store::{Backend, StoreUrl};
use slidegate_server::store::{ClockMode, CoalesceMode, StoreOptions};

const KEYS: u64 = 1_000_000;
/// `--max-keys` of the flood.
const MAX_KEYS: usize = 100_000;
/// What one key may cost at most, all included (the map, the key, a
/// one-entry sliding log): `docs/RELIABILITY.md` documents the bound as
/// `--max-keys` times this.
const BYTES_PER_KEY: u64 = 512;
/// The local deny cache's bound, in denials.
const DENY_CACHE: usize = 100_000;
/// Asserts that exactly `--max-keys` keys were let in: the store takes
/// the count in the same step as the place, so no racing insert passes it
/// (docs/RELIABILITY.md: the bound is never passed).
fn assert_held(what: &str, held: u64) {
    assert_eq!(
        held, MAX_KEYS as u64,
        "{what}: keys held with --max-keys {MAX_KEYS}"
    );
}

async fn open(url: StoreUrl, policy: FailurePolicy) -> Backend {
    let args = StoreOptions {
        url,
        on_error: policy,
        timeout_ms: 50,
        clock: ClockMode::Server,
        coalesce: CoalesceMode::On,
        expiry_margin_ms: None,
        max_keys: MAX_KEYS,
        max_memory_bytes: slidegate::store::memory::DEFAULT_MAX_BYTES,
        max_rules_per_key: 16,
        deny_cache_entries: 100_000,
        max_store_calls: 1024,
        max_leases: slidegate::store::DEFAULT_MAX_LEASES,
    };
    Backend::connect(&args).await.expect("the store opens")
}

fn rss_kib() -> u64 {
    process::rss_kib(std::process::id())
}

/// What a flood got back.
#[derive(Debug, Default)]
struct Counts {
    allowed: u64,
    degraded: u64,
}

/// `KEYS` unique keys, each asked `times` times, from 64 tasks.
async fn flood(backend: &Backend, prefix: &str, keys: u64, times: u64) -> Counts {
    let rule = [Rule::parse("1/1m").expect("a rule")];
    let (allowed, degraded) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..64u64)
        .map(|task| {
            let (backend, prefix) = (backend.clone(), prefix.to_owned());
            let (allowed, degraded) = (Arc::clone(&allowed), Arc::clone(&degraded));
            tokio::spawn(async move {
                for i in (task..keys).step_by(64) {
                    let key = format!("{prefix}:{i}");
                    for _ in 0..times {
                        let d = backend.acquire(&key, &rule, 1).await.expect("a decision");
                        allowed.fetch_add(u64::from(d.allowed()), Ordering::Relaxed);
                        degraded.fetch_add(u64::from(d.degraded()), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a flood task");
    }
    Counts {
        allowed: allowed.load(Ordering::Relaxed),
        degraded: degraded.load(Ordering::Relaxed),
    }
}

/// Floods `backend` and checks the memory it took against the bound.
async fn flood_within_bound(what: &str, backend: &Backend) -> Counts {
    let before = rss_kib();
    let started = Instant::now();
    let counts = flood(backend, what, KEYS, 1).await;
    let grown = rss_kib().saturating_sub(before);
    eprintln!(
        "{what}: {KEYS} unique keys in {:.1} s, {counts:?}; RSS +{} MiB ({} bytes per held key)",
        started.elapsed().as_secs_f64(),
        grown / 1024,
        grown * 1024 / MAX_KEYS as u64
    );
    let bound_kib = MAX_KEYS as u64 * BYTES_PER_KEY / 1024;
    assert!(
        grown <= bound_kib,
        "{what}: RSS grew {grown} KiB, over the bound of {bound_kib} KiB"
    );
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_unique_keys_stay_within_max_keys_and_the_deny_cache_bound() {
    // The memory store holds MAX_KEYS keys; past that, new keys are decided
    // by the policy (here: denied), held keys keep their exact state.
    let memory = open(StoreUrl::Memory, FailurePolicy::Deny).await;
    let counts = flood_within_bound("memory", &memory).await;
    assert_held("memory", counts.allowed);
    assert_eq!(counts.degraded, KEYS - counts.allowed);
    drop(memory);

    // Redis is down: the local fallback decides, and holds MAX_KEYS keys too.
    let closed = ReservedPort::new();
    let dead = format!("redis://127.0.0.1:{}", closed.port());
    let fallback = open(StoreUrl::Redis(dead), FailurePolicy::Local).await;
    let counts = flood_within_bound("local fallback", &fallback).await;
    assert_held("local fallback", counts.allowed);
    assert_eq!(counts.degraded, KEYS);
    drop(fallback);

    // Unique keys each denied once: the deny cache keeps at most its bound
    // of denials. The cache sits in the ResilientStore the Redis backend
    // is built on; a memory store stands in for Redis here (the cache does
    // not care who denied, and a million Redis calls would not fit the
    // test's time), with the server's defaults otherwise.
    let stand_in = ResilientStore::builder(MemoryStore::new()).build();
    let rule = [Rule::parse("1/1m").expect("a rule")];
    let denied_keys = DENY_CACHE as u64 * 2;
    let before = rss_kib();
    for i in 0..denied_keys {
        let key = format!("denied:{i}");
        assert!(
            stand_in
                .acquire(&key, &rule, 1)
                .await
                .expect("a decision")
                .allowed()
        );
        assert!(
            !stand_in
                .acquire(&key, &rule, 1)
                .await
                .expect("a decision")
                .allowed()
        );
    }
    let grown = rss_kib().saturating_sub(before);
    eprintln!(
        "deny cache: {denied_keys} keys denied once each; {} denials held; RSS +{} MiB (with the stand-in's keys)",
        stand_in.deny_cache_len(),
        grown / 1024
    );
    assert_eq!(stand_in.deny_cache_len(), DENY_CACHE);
    let bound_kib = (denied_keys + DENY_CACHE as u64) * BYTES_PER_KEY / 1024;
    assert!(
        grown <= bound_kib,
        "RSS grew {grown} KiB, over {bound_kib} KiB"
    );
}
