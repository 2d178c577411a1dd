//! `--max-store-calls`: the Redis store's calls in flight at once. Beyond
//! them a decision is answered by the failure policy at once, marked
//! degraded; within them it waits for Redis.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::Redis;
use slidegate::store::resilient::FailurePolicy;
use slidegate::{Rule, Store};
use slidegate_server::backend::{Backend, StoreUrl};
use slidegate_server::cli::{ClockMode, CoalesceMode, StoreArgs};

async fn open(redis: &Redis, max_store_calls: u32) -> Backend {
    let args = StoreArgs {
        url: StoreUrl::Redis(redis.url()),
        on_error: FailurePolicy::Deny,
        timeout_ms: 5_000,
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

/// While Redis sleeps, one decision holds the only call allowed; a second
/// is answered at once by the policy (here: denied, degraded). With room
/// for both, the second waits for Redis and is decided by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_beyond_the_calls_in_flight_is_answered_by_the_policy_at_once() {
    let redis = Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let rule = [Rule::parse("100/1m").expect("a valid rule")];
    for (max_store_calls, second_waits) in [(1, false), (2, true)] {
        let backend = Arc::new(open(&redis, max_store_calls).await);
        // The connection is up before Redis sleeps.
        assert!(
            backend
                .acquire("warm", &rule, 1)
                .await
                .expect("decided")
                .allowed()
        );
        let sleeper = Arc::clone(&redis);
        let sleep = std::thread::spawn(move || sleeper.text(&["DEBUG", "SLEEP", "0.6"]));
        while redis_answers_within(&redis, Duration::from_millis(20)) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let first = {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.acquire("a", &rule, 1).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = Instant::now();
        let second = backend.acquire("b", &rule, 1).await.expect("decided");
        let took = asked.elapsed();
        let first = first.await.expect("the first call").expect("decided");
        assert_eq!(sleep.join().expect("DEBUG SLEEP"), "OK");
        assert!(
            first.allowed() && !first.degraded(),
            "Redis decided: {first:?}"
        );
        if second_waits {
            assert!(second.allowed() && !second.degraded(), "{second:?}");
        } else {
            assert!(
                !second.allowed() && second.degraded(),
                "answered by the policy (deny): {second:?}"
            );
            assert!(took < Duration::from_millis(300), "at once: {took:?}");
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
