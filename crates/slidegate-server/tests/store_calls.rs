//! `--max-store-calls`: the Redis store's calls in flight at once. A
//! decision beyond them waits for a call to end, within its deadline
//! (`--store-timeout-ms`); if none ends in time, the failure policy
//! answers it, marked degraded.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::Redis;
use slidegate::store::resilient::FailurePolicy;
use slidegate::{Rule, Store};
use slidegate_server::backend::{Backend, StoreUrl};
use slidegate_server::cli::{ClockMode, CoalesceMode, StoreArgs};

async fn open(redis: &Redis, max_store_calls: u32, timeout_ms: u64) -> Backend {
    let args = StoreArgs {
        url: StoreUrl::Redis(redis.url()),
        on_error: FailurePolicy::Deny,
        timeout_ms,
        clock: ClockMode::Server,
        coalesce: CoalesceMode::On,
        expiry_margin_ms: None,
        max_keys: 1_000_000,
        max_memory_bytes: slidegate::store::memory::DEFAULT_MAX_BYTES,
        max_rules_per_key: 16,
        deny_cache_entries: 0,
        max_store_calls,
    };
    Backend::connect(&args).await.expect("the store opens")
}

/// While Redis sleeps, one decision holds the only call allowed. With a
/// deadline longer than the sleep, a second decision waits for that call
/// to end and is decided by Redis; with a shorter one, the policy (here:
/// deny) answers it by its deadline, before Redis wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_beyond_the_calls_in_flight_waits_for_one_within_its_deadline() {
    let redis = Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let rule = [Rule::parse("100/1m").expect("a valid rule")];
    for (timeout_ms, sleep, by_redis) in [(5_000, "0.6", true), (400, "1.2", false)] {
        let backend = Arc::new(open(&redis, 1, timeout_ms).await);
        // The connection is up before Redis sleeps.
        assert!(
            backend
                .acquire("warm", &rule, 1)
                .await
                .expect("decided")
                .allowed()
        );
        let sleeper = Arc::clone(&redis);
        let sleep = std::thread::spawn(move || sleeper.text(&["DEBUG", "SLEEP", sleep]));
        while redis_answers_within(&redis, Duration::from_millis(20)) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let slept_from = Instant::now();
        let first = {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.acquire("a", &rule, 1).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = backend.acquire("b", &rule, 1).await.expect("decided");
        let answered_after = slept_from.elapsed();
        let first = first.await.expect("the first call").expect("decided");
        assert_eq!(sleep.join().expect("DEBUG SLEEP"), "OK");
        if by_redis {
            assert!(first.allowed() && !first.degraded(), "{first:?}");
            assert!(
                second.allowed() && !second.degraded(),
                "waited and decided by Redis: {second:?}"
            );
        } else {
            for d in [first, second] {
                assert!(
                    !d.allowed() && d.degraded(),
                    "answered by the policy (deny): {d:?}"
                );
            }
            assert!(
                answered_after < Duration::from_millis(1_000),
                "by its deadline, before Redis woke: {answered_after:?}"
            );
        }
    }
}

/// True when Redis answers a PING within `within`.
fn redis_answers_within(redis: &Redis, within: Duration) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", redis.port())) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(within));
    stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut [0u8; 1]).is_ok()
}
