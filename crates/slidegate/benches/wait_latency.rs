//! How late a waiting request passes: `acquire_wait` on the memory store,
//! many waiters on one key, each timed from its call to its return, less
//! the wait its reservation was given. What is left is the timer's and the
//! scheduler's delay (tokio's timer ticks in milliseconds).
//!
//! ```sh
//! cargo bench -p slidegate --bench wait_latency
//! ```
//! (`flock` only where several people share the machine.) Prints p50, p99
//! and the largest lateness, over `WAITERS` waiters on `RULE`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::{MemoryStore, Rule};

const WAITERS: usize = 2_000;
const RULE: &str = "500/1s";

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let late = runtime.block_on(measure());
    let pick = |q: f64| late[((late.len() - 1) as f64 * q) as usize];
    println!(
        "{WAITERS} waiters on {RULE}: lateness over the reserved time p50 {:?}, p99 {:?}, max {:?}",
        pick(0.5),
        pick(0.99),
        late[late.len() - 1]
    );
}

async fn measure() -> Vec<Duration> {
    let store = Arc::new(MemoryStore::new());
    let rule = Rule::parse(RULE).expect("a rule");
    let max_wait = Duration::from_secs(5);
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let started = Instant::now();
                let reservation = store
                    .reserve("k", &[rule], 1, max_wait)
                    .expect("a reservation");
                assert!(reservation.granted());
                tokio::time::sleep(reservation.wait()).await;
                started.elapsed().saturating_sub(reservation.wait())
            })
        })
        .collect();
    let mut late = Vec::with_capacity(WAITERS);
    for task in tasks {
        late.push(task.await.expect("a waiter"));
    }
    late.sort_unstable();
    late
}
