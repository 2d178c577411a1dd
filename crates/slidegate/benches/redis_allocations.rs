//! Heap allocations per decision of the Redis store's client path, with
//! coalescing on and off, one caller at a time and 64 at once, on 10k keys
//! in random order (rule 100/1s, Redis' clock). Counts every allocation
//! of the process through a counting global allocator: the store, the
//! Redis client, tokio, and the tasks of the bench themselves (64 spawns
//! per run, counted too). Starts its own redis-server on a free port.
//!
//! `cargo bench -p slidegate --features redis --bench redis_allocations`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[path = "support/redis_server.rs"]
mod redis_server;

use redis_server::RedisServer;
use slidegate::store::redis::Coalesce;
use slidegate::{RedisStore, Rule, Store};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts calls and sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 10_000;
const DECISIONS: usize = 64_000;

/// Runs `DECISIONS` decisions from `tasks` tasks; allocations and bytes
/// per decision.
async fn run(store: &RedisStore, keys: &Arc<Vec<String>>, tasks: usize) -> (f64, f64) {
    let rule = Rule::parse("100/1s").expect("a valid rule");
    let (allocations, bytes) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let (store, keys) = (store.clone(), Arc::clone(keys));
        handles.push(tokio::spawn(async move {
            // A cheap PRNG per task: keys in random order.
            let mut x = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..DECISIONS / tasks {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = &keys[(x % KEYS as u64) as usize];
                store.acquire(key, &[rule], 1).await.expect("a decision");
            }
        }));
    }
    for handle in handles {
        handle.await.expect("a task ran to the end");
    }
    let n = (DECISIONS / tasks * tasks) as f64;
    (
        (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / n,
        (BYTES.load(Ordering::Relaxed) - bytes) as f64 / n,
    )
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("ip:{i}")).collect());
    println!("| coalescing | tasks | allocations per decision | bytes allocated per decision |");
    println!("|---|---|---|---|");
    for (name, coalesce) in [("on", Coalesce::on()), ("off", Coalesce::off())] {
        let store = runtime
            .block_on(
                RedisStore::builder(server.url())
                    .timeout(Duration::from_secs(5))
                    .coalesce(coalesce)
                    .build(),
            )
            .expect("the Redis store connects");
        for tasks in [1, 64] {
            // Warm: the script loaded, the connection's buffers grown.
            runtime.block_on(run(&store, &keys, tasks));
            let (allocations, bytes) = runtime.block_on(run(&store, &keys, tasks));
            println!("| {name} | {tasks} | {allocations:.2} | {bytes:.0} |");
        }
    }
}
