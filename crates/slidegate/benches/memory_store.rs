//! slidegate's MemoryStore (sliding log, 100/1s) against governor's keyed
//! limiter (GCRA, 100/s), same key types, same key counts, one group each;
//! and one atomic batch of many hits (`batch/HITS`), each key repeated.
//!
//! `cargo bench -p slidegate --bench memory_store`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use slidegate::{Hit, MemoryStore, Rule};

const KEY_COUNTS: [usize; 3] = [1, 10_000, 1_000_000];

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(100).expect("non-zero"))
}

fn rule() -> Rule {
    Rule::parse("100/1s").expect("valid rule")
}

/// Runs `iters` calls of `f(i)` spread over `threads` threads; wall time.
fn run(threads: usize, iters: u64, f: impl Fn(u64) + Sync) -> Duration {
    let per_thread = iters / threads as u64;
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                // Threads walk the keys from different offsets.
                let offset = t as u64 * 7_919;
                for i in 0..per_thread {
                    f(i + offset);
                }
            });
        }
    });
    start.elapsed()
}

fn bench_u64(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("u64_keys/{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        for keys in KEY_COUNTS {
            let n = keys as u64;
            let store: MemoryStore<u64> = MemoryStore::builder().build();
            let rules = [rule()];
            group.bench_function(BenchmarkId::new("slidegate", keys), |b| {
                b.iter_custom(|iters| {
                    run(threads, iters, |i| {
                        black_box(store.acquire(&(i % n), &rules, 1).map(|d| d.allowed()).ok());
                    })
                })
            });
            let store: MemoryStore<u64> = MemoryStore::builder().sweep_interval(None).build();
            group.bench_function(BenchmarkId::new("slidegate_nosweep", keys), |b| {
                b.iter_custom(|iters| {
                    run(threads, iters, |i| {
                        black_box(store.acquire(&(i % n), &rules, 1).map(|d| d.allowed()).ok());
                    })
                })
            });
            let governor = RateLimiter::keyed(quota());
            group.bench_function(BenchmarkId::new("governor", keys), |b| {
                b.iter_custom(|iters| {
                    run(threads, iters, |i| {
                        black_box(governor.check_key(&(i % n)).is_ok());
                    })
                })
            });
        }
        group.finish();
    }
}

fn bench_string(c: &mut Criterion) {
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("string_keys/{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        for keys in KEY_COUNTS {
            let names: Vec<String> = (0..keys).map(|k| format!("user:{k}")).collect();
            let n = keys as u64;
            let store = MemoryStore::new();
            let rules = [rule()];
            group.bench_function(BenchmarkId::new("slidegate", keys), |b| {
                b.iter_custom(|iters| {
                    run(threads, iters, |i| {
                        let key = names[(i % n) as usize].as_str();
                        black_box(store.acquire(key, &rules, 1).map(|d| d.allowed()).ok());
                    })
                })
            });
            let governor = RateLimiter::keyed(quota());
            group.bench_function(BenchmarkId::new("governor", keys), |b| {
                b.iter_custom(|iters| {
                    run(threads, iters, |i| {
                        black_box(governor.check_key(&names[(i % n) as usize]).is_ok());
                    })
                })
            });
        }
        group.finish();
    }
}

/// One `acquire_batch` of `hits` hits over `hits / 4` keys (each key four
/// times), cost 1 each: what the batch costs per hit.
fn bench_batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch");
    let rule = Rule::parse("1000000000/1s").expect("valid rule");
    for hits in [16usize, 1_024, 16_384] {
        group.throughput(Throughput::Elements(hits as u64));
        let names: Vec<String> = (0..hits / 4).map(|k| format!("user:{k}")).collect();
        let batch: Vec<Hit<'_>> = (0..hits)
            .map(|i| Hit::new(names[i % names.len()].as_str(), rule, 1))
            .collect();
        let store = MemoryStore::new();
        group.bench_function(BenchmarkId::new("slidegate", hits), |b| {
            b.iter(|| black_box(store.acquire_batch(&batch).map(|ds| ds.len()).ok()))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = bench_u64, bench_string, bench_batch
}
criterion_main!(benches);
