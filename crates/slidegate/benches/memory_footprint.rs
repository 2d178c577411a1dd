//! Bytes per key: slidegate's MemoryStore with a full sliding log of 100
//! entries per key, and after the sweep, next to governor's keyed limiter.
//! Counts every heap byte through a counting global allocator, so the map's
//! own table is included.
//!
//! `cargo bench -p slidegate --bench memory_footprint`

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use slidegate::clock::ManualClock;
use slidegate::{MemoryStore, Rule};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const KEYS: u64 = 10_000;
const PER_KEY: u64 = 100;

fn per_key(bytes: isize) -> f64 {
    bytes as f64 / KEYS as f64
}

fn slidegate() -> (f64, f64, usize, usize) {
    let before = live();
    let clock = ManualClock::new();
    let store: MemoryStore<u64, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    let rule = Rule::parse("100/1s").expect("valid rule");
    for _ in 0..PER_KEY {
        for key in 0..KEYS {
            let d = store.acquire(&key, &[rule], 1).expect("valid");
            assert!(d.allowed());
        }
        clock.advance(Duration::from_micros(1));
    }
    let full = live() - before;
    let entries = store.stats().log_entries;
    clock.advance(Duration::from_secs(2));
    store.sweep();
    let swept = live() - before;
    let keys_left = store.len();
    drop(store);
    (per_key(full), per_key(swept), entries, keys_left)
}

fn governor() -> (f64, f64) {
    let before = live();
    let clock = FakeRelativeClock::default();
    let quota = Quota::per_second(NonZeroU32::new(100).expect("non-zero"));
    let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
    for _ in 0..PER_KEY {
        for key in 0..KEYS {
            assert!(limiter.check_key(&key).is_ok());
        }
    }
    let full = live() - before;
    clock.advance(Duration::from_secs(2));
    limiter.retain_recent();
    limiter.shrink_to_fit();
    let swept = live() - before;
    drop(limiter);
    (per_key(full), per_key(swept))
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run
    // the (quick) measurement either way.
    let (s_full, s_swept, entries, keys_left) = slidegate();
    let (g_full, g_swept) = governor();
    println!("bytes per key, {KEYS} u64 keys, {PER_KEY} admissions each inside one window");
    println!("| limiter | full window | after the sweep |");
    println!("|---|---|---|");
    println!("| slidegate MemoryStore, sliding_log 100/1s | {s_full:.0} | {s_swept:.1} |");
    println!("| governor keyed (dashmap), GCRA 100/s | {g_full:.0} | {g_swept:.1} |");
    println!("slidegate held {entries} log entries at the peak; {keys_left} keys after the sweep");
}
