//! Bytes per key: slidegate's MemoryStore with one admission per key,
//! with a full sliding log of 100 entries per key, and after the sweep,
//! next to governor's keyed limiter. Counts every heap byte through a
//! counting global allocator, so the map's own table (with its spare room)
//! is included.
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

/// Bytes per key with one admission, with a full window, after the sweep.
struct Footprint {
    one: f64,
    full: f64,
    swept: f64,
}

fn slidegate() -> (Footprint, usize, usize) {
    let before = live();
    let clock = ManualClock::new();
    let store: MemoryStore<u64, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    let rule = Rule::parse("100/1s").expect("valid rule");
    let mut one = 0;
    for round in 0..PER_KEY {
        for key in 0..KEYS {
            let d = store.acquire(&key, &[rule], 1).expect("valid");
            assert!(d.allowed());
        }
        if round == 0 {
            one = live() - before;
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
    let footprint = Footprint {
        one: per_key(one),
        full: per_key(full),
        swept: per_key(swept),
    };
    (footprint, entries, keys_left)
}

fn governor() -> Footprint {
    let before = live();
    let clock = FakeRelativeClock::default();
    let quota = Quota::per_second(NonZeroU32::new(100).expect("non-zero"));
    let limiter = RateLimiter::dashmap_with_clock(quota, clock.clone());
    let mut one = 0;
    for round in 0..PER_KEY {
        for key in 0..KEYS {
            assert!(limiter.check_key(&key).is_ok());
        }
        if round == 0 {
            one = live() - before;
        }
    }
    let full = live() - before;
    clock.advance(Duration::from_secs(2));
    limiter.retain_recent();
    limiter.shrink_to_fit();
    let swept = live() - before;
    drop(limiter);
    Footprint {
        one: per_key(one),
        full: per_key(full),
        swept: per_key(swept),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run
    // the (quick) measurement either way.
    let (s, entries, keys_left) = slidegate();
    let g = governor();
    println!(
        "bytes per key, {KEYS} u64 keys: one admission each, then {PER_KEY} each inside one window, then after the sweep"
    );
    println!("| limiter | one admission | full window | after the sweep |");
    println!("|---|---|---|---|");
    println!(
        "| slidegate MemoryStore, sliding_log 100/1s | {:.0} | {:.0} | {:.1} |",
        s.one, s.full, s.swept
    );
    println!(
        "| governor keyed (dashmap), GCRA 100/s | {:.0} | {:.0} | {:.1} |",
        g.one, g.full, g.swept
    );
    println!("slidegate held {entries} log entries at the peak; {keys_left} keys after the sweep");
}
