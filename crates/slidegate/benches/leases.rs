//! What a lease costs beside a plain decision, and how many concurrency
//! leases are taken and given back per second.
//!
//! - Memory store, one thread: ns per plain `acquire`, per reservation
//!   and commit (a give-back on the sliding log), and per reservation and
//!   release of a place, on one hot key and on 10k keys.
//! - Redis (its own redis-server on a free port, Redis' clock, one caller
//!   at a time): the same, wall time per operation and Redis' own CPU per
//!   command (`INFO commandstats`, µs per `EVALSHA` and `GET`).
//!
//! `cargo bench -p slidegate --features redis --bench leases`

use std::time::{Duration, Instant};

#[path = "support/redis_server.rs"]
mod redis_server;

use redis_server::RedisServer;
use slidegate::{MemoryStore, RedisStore, Rule, Store};

const KEYS: usize = 10_000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i}")).collect()
}

fn per_op(started: Instant, ops: usize) -> f64 {
    started.elapsed().as_nanos() as f64 / ops as f64
}

fn memory(keys: &[String], ops: usize) {
    let budget = Rule::parse("1000000000/1m").unwrap();
    let places = Rule::concurrency(1_000_000).unwrap();
    let minute = Duration::from_secs(60);
    let store: MemoryStore = MemoryStore::builder()
        .sweep_interval(None)
        .max_leases(10 * ops)
        .build();
    let started = Instant::now();
    for i in 0..ops {
        store
            .acquire(keys[i % keys.len()].as_str(), &[budget], 5)
            .unwrap();
    }
    let plain = per_op(started, ops);
    let started = Instant::now();
    for i in 0..ops {
        let key = keys[i % keys.len()].as_str();
        let lease = store.reserve_lease(key, &[budget], 5, minute).unwrap();
        store.commit(lease.id().unwrap(), Some(key), 3).unwrap();
    }
    let leased = per_op(started, ops);
    let started = Instant::now();
    for i in 0..ops {
        let key = keys[i % keys.len()].as_str();
        let lease = store.reserve_lease(key, &[places], 1, minute).unwrap();
        store.release(lease.id().unwrap(), Some(key)).unwrap();
    }
    let held = per_op(started, ops);
    println!(
        "memory, {} key(s): plain acquire {plain:.0} ns; reserve + commit {leased:.0} ns ({:.1}x); \
         places acquire + release {held:.0} ns = {:.0}/s",
        keys.len(),
        leased / plain,
        1e9 / held
    );
}

fn commandstats(raw: &mut redis::Connection) -> Vec<(String, u64, f64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((name.to_owned(), field("calls")? as u64, field("usec")?))
        })
        .collect()
}

/// Redis CPU (µs) and calls of the scripts and GETs since the last reset.
fn redis_cpu(raw: &mut redis::Connection) -> (f64, u64) {
    let stats = commandstats(raw);
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(raw).unwrap();
    stats
        .iter()
        .filter(|(name, _, _)| name == "evalsha" || name == "get")
        .fold((0.0, 0), |(usec, calls), (_, c, u)| (usec + u, calls + c))
}

async fn redis(url: &str, keys: &[String], ops: usize) {
    let budget = Rule::parse("1000000000/1m").unwrap();
    let places = Rule::concurrency(1_000_000).unwrap();
    let minute = Duration::from_secs(60);
    let store = RedisStore::builder(url)
        .timeout(Duration::from_secs(5))
        .max_leases(10 * ops)
        .build()
        .await
        .unwrap();
    let mut raw = redis::Client::open(url).unwrap().get_connection().unwrap();
    // Warm: the script loaded, the keys there.
    for key in keys.iter().take(ops) {
        store.acquire(key, &[budget], 1).await.unwrap();
    }
    redis_cpu(&mut raw);
    let started = Instant::now();
    for i in 0..ops {
        store
            .acquire(&keys[i % keys.len()], &[budget], 5)
            .await
            .unwrap();
    }
    let plain = per_op(started, ops);
    let (plain_cpu, _) = redis_cpu(&mut raw);
    let started = Instant::now();
    for i in 0..ops {
        let key = keys[i % keys.len()].as_str();
        let lease = store
            .reserve_lease(key, &[budget], 5, minute)
            .await
            .unwrap();
        store
            .commit(lease.id().unwrap(), Some(key), 3)
            .await
            .unwrap();
    }
    let leased = per_op(started, ops);
    let (leased_cpu, leased_calls) = redis_cpu(&mut raw);
    let started = Instant::now();
    for i in 0..ops {
        let key = keys[i % keys.len()].as_str();
        let lease = store
            .reserve_lease(key, &[places], 1, minute)
            .await
            .unwrap();
        store.release(lease.id().unwrap(), Some(key)).await.unwrap();
    }
    let held = per_op(started, ops);
    let (held_cpu, _) = redis_cpu(&mut raw);
    let n = ops as f64;
    println!(
        "redis, {} key(s): plain acquire {:.1} µs wall, {:.2} µs Redis CPU; \
         reserve + commit {:.1} µs wall, {:.2} µs Redis CPU ({} calls, {:.1}x); \
         places acquire + release {:.1} µs wall = {:.0}/s, {:.2} µs Redis CPU",
        keys.len(),
        plain / 1e3,
        plain_cpu / n,
        leased / 1e3,
        leased_cpu / n,
        leased_calls / ops as u64,
        leased_cpu / plain_cpu,
        held / 1e3,
        1e9 / held,
        held_cpu / n
    );
}

fn main() {
    let all = keys(KEYS);
    let hot = keys(1);
    memory(&hot, 200_000);
    memory(&all, 200_000);
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(redis(&server.url(), &hot, 10_000));
    runtime.block_on(redis(&server.url(), &all, 10_000));
}
