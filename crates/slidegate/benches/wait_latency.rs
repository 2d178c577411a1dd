//! How late a waiting request passes: many waiters on one key each take a
//! reservation and sleep for its wait, timed from the call to the wake-up,
//! less the wait the reservation was given. What is left is the store call
//! and the timer's and the scheduler's delay (tokio's timer ticks in
//! milliseconds); the store call's own time (from the call to the
//! reservation's return) is printed beside it. On the memory store, and with the `redis` feature on the
//! Redis store too (against a redis-server the bench starts on a free port,
//! the server's clock deciding), the two in interleaved rounds.
//!
//! ```sh
//! cargo bench -p slidegate --bench wait_latency
//! cargo bench -p slidegate --features redis --bench wait_latency
//! ```
//! (`flock` only where several people share the machine.) Prints each
//! round's p50, p99 and largest lateness over `WAITERS` waiters on `RULE`,
//! and the p50 and p99 of the store call, with the load average, then the
//! median of each over the rounds with their range. Environment:
//! `WAIT_ROUNDS` (default 5).

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::{MemoryStore, Rule};

const WAITERS: usize = 2_000;
const RULE: &str = "500/1s";
const MAX_WAIT: Duration = Duration::from_secs(5);

fn main() {
    let rounds: usize = std::env::var("WAIT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    #[cfg(feature = "redis")]
    let redis = redis_side::Side::start(&runtime);
    let mut sides: Vec<(&str, Vec<Round>)> = vec![("memory", Vec::new())];
    #[cfg(feature = "redis")]
    sides.push(("redis", Vec::new()));
    for round in 1..=rounds {
        for (name, results) in &mut sides {
            let timings = match *name {
                #[cfg(feature = "redis")]
                "redis" => runtime.block_on(redis.measure(round)),
                _ => runtime.block_on(measure_memory()),
            };
            let this = Round {
                late: Percentiles::of(timings.iter().map(|t| t.0).collect()),
                call: Percentiles::of(timings.iter().map(|t| t.1).collect()),
            };
            println!(
                "{name}, round {round}: {WAITERS} waiters on {RULE}: lateness over the reserved time p50 {:?}, p99 {:?}, max {:?}; store call p50 {:?}, p99 {:?} (load {})",
                this.late.p50,
                this.late.p99,
                this.late.max,
                this.call.p50,
                this.call.p99,
                load_average()
            );
            results.push(this);
        }
    }
    for (name, results) in &sides {
        println!(
            "{name}: median of {rounds} rounds: lateness p50 {}, p99 {}, max {}; store call p50 {}, p99 {}",
            summary(results.iter().map(|r| r.late.p50)),
            summary(results.iter().map(|r| r.late.p99)),
            summary(results.iter().map(|r| r.late.max)),
            summary(results.iter().map(|r| r.call.p50)),
            summary(results.iter().map(|r| r.call.p99)),
        );
    }
}

/// One waiter's lateness over its reserved time, and its store call's time.
type Timing = (Duration, Duration);

/// One round's figures.
struct Round {
    late: Percentiles,
    call: Percentiles,
}

struct Percentiles {
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Percentiles {
    fn of(mut values: Vec<Duration>) -> Percentiles {
        values.sort_unstable();
        let pick = |q: f64| values[((values.len() - 1) as f64 * q) as usize];
        Percentiles {
            p50: pick(0.5),
            p99: pick(0.99),
            max: values[values.len() - 1],
        }
    }
}

/// The median over the rounds, and their range.
fn summary(values: impl Iterator<Item = Duration>) -> String {
    let mut values: Vec<Duration> = values.collect();
    values.sort_unstable();
    format!(
        "{:?} ({:?}–{:?})",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

async fn measure_memory() -> Vec<Timing> {
    let store = Arc::new(MemoryStore::new());
    let rule = Rule::parse(RULE).expect("a rule");
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let started = Instant::now();
                let reservation = store
                    .reserve("k", &[rule], 1, MAX_WAIT)
                    .expect("a reservation");
                let call = started.elapsed();
                assert!(reservation.granted());
                tokio::time::sleep(reservation.wait()).await;
                (started.elapsed().saturating_sub(reservation.wait()), call)
            })
        })
        .collect();
    let mut late = Vec::with_capacity(WAITERS);
    for task in tasks {
        late.push(task.await.expect("a waiter"));
    }
    late
}

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

#[cfg(feature = "redis")]
mod redis_side {
    use std::time::{Duration, Instant};

    use slidegate::{RedisStore, Rule, Store};

    use super::redis_server::RedisServer;
    use super::{MAX_WAIT, RULE, WAITERS};

    /// A redis-server on a free port (stopped on drop) and a store on it.
    pub struct Side {
        // Dropped after the store: the server outlives its clients.
        store: RedisStore,
        _server: RedisServer,
    }

    impl Side {
        pub fn start(runtime: &tokio::runtime::Runtime) -> Side {
            let server = RedisServer::start();
            // A generous call timeout: 2,000 reservations arrive at once.
            let store = runtime
                .block_on(
                    RedisStore::builder(server.url())
                        .timeout(Duration::from_secs(5))
                        .build(),
                )
                .expect("the Redis store connects");
            Side {
                store,
                _server: server,
            }
        }

        /// One round on a key of its own.
        pub async fn measure(&self, round: usize) -> Vec<super::Timing> {
            let rule = Rule::parse(RULE).expect("a rule");
            let key = format!("k{round}");
            let tasks: Vec<_> = (0..WAITERS)
                .map(|_| {
                    let store = self.store.clone();
                    let key = key.clone();
                    tokio::spawn(async move {
                        let started = Instant::now();
                        let reservation = store
                            .reserve(&key, &[rule], 1, MAX_WAIT)
                            .await
                            .expect("a reservation");
                        let call = started.elapsed();
                        assert!(reservation.granted());
                        tokio::time::sleep(reservation.wait()).await;
                        (started.elapsed().saturating_sub(reservation.wait()), call)
                    })
                })
                .collect();
            let mut late = Vec::with_capacity(WAITERS);
            for task in tasks {
                late.push(task.await.expect("a waiter"));
            }
            late
        }
    }
}
