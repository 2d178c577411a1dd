//! slidegate's MemoryStore (exact sliding log, 100/1s) against governor's
//! keyed limiter (GCRA, 100/s, `RateLimiter::keyed`): `u64` and `String`
//! keys, 1 and 2 threads, 1, 10,000 and 1,000,000 keys, keys drawn in
//! random order (as client addresses arrive); and one atomic batch of many
//! hits (`batch/HITS`), each key repeated.
//!
//! Every decision draws its key from a cheap PRNG (xorshift64*, then a
//! multiply-shift into `0..keys`); both limiters see the same sequence of
//! keys. Both are filled with every key before anything is timed.
//!
//! `cargo bench -p slidegate --bench memory_store` runs criterion.
//!
//! On a machine shared with other work, where consecutive benchmarks see
//! different loads, `MEMORY_ROUNDS=15` instead runs the two limiters of
//! each cell in turn, round after round, and prints each one's median CPU
//! time per decision (its threads' time on a CPU, from Linux's
//! `/proc/thread-self/schedstat`: a round that another process preempted
//! is not charged for the wait) with the spread (lowest and highest round),
//! and the median of the per-round ratios, of CPU times and of wall times.
//! `MEMORY_CELLS=u64/1/1000000,string/2/1` picks cells (key type / threads
//! / keys; all twelve by default).
//!
//! `MEMORY_SHARDS=N` builds slidegate's stores with `N` shards instead of
//! the builder's default (to compare shard counts in one binary).
//!
//! `MEMORY_SWEEP=8,128` times one sweep of a store holding a million
//! `u64` keys (none idle: every key stays) with each given shard count
//! (powers of two),
//! and what one sweep step (one shard, under its lock) takes on average.
//!
//! `MEMORY_PROFILE=slidegate` (or `governor`) runs one limiter per chosen
//! cell for a profiler: `scripts/profile-memory-store.sh` counts
//! instructions and cache misses per decision with callgrind.

use slidegate::store::memory::CompactString;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::{Quota, RateLimiter};
use slidegate::{Hit, MemoryStore, MemoryStoreBuilder, Rule};

const KEY_COUNTS: [usize; 3] = [1, 10_000, 1_000_000];
const THREADS: [usize; 2] = [1, 2];

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(100).expect("non-zero"))
}

/// 100 a second: the sliding log, or `MEMORY_ALGORITHM` (`gcra`, …), with
/// a burst of `MEMORY_BURST` if given (gcra only).
fn rule() -> Rule {
    let mut rule = Rule::parse("100/1s").expect("valid rule");
    if let Ok(name) = std::env::var("MEMORY_ALGORITHM") {
        rule = rule.with_algorithm(name.parse().expect("MEMORY_ALGORITHM names an algorithm"));
    }
    if let Some(burst) = std::env::var("MEMORY_BURST")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        rule = rule.with_burst(burst).expect("MEMORY_BURST fits the rule");
    }
    rule
}

/// xorshift64*: a few instructions per key, so the benchmark measures the
/// limiters, not the key generator.
#[derive(Clone)]
struct Keys {
    state: u64,
    n: u64,
}

impl Keys {
    fn new(seed: u64, n: usize) -> Keys {
        // Any non-zero state works; spread the seeds apart.
        let state = (seed.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Keys { state, n: n as u64 }
    }

    #[inline]
    fn next(&mut self) -> usize {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((u128::from(r) * u128::from(self.n)) >> 64) as usize
    }
}

/// What a run took: its wall time, and the time its threads ran on a CPU.
struct Took {
    wall: Duration,
    /// `None` where the kernel does not say (not Linux).
    cpu: Option<Duration>,
}

/// `decisions` calls of `f(key index)` spread over `threads` threads, the
/// keys of thread `t` drawn from seed `seed + t`.
fn run(threads: usize, decisions: u64, keys: usize, seed: u64, f: impl Fn(usize) + Sync) -> Took {
    let per_thread = decisions / threads as u64;
    let start = Instant::now();
    let cpu = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    let mut keys = Keys::new(seed + t as u64, keys);
                    let before = thread_cpu();
                    for _ in 0..per_thread {
                        f(keys.next());
                    }
                    Some(thread_cpu()?.saturating_sub(before?))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark thread panicked"))
            .sum::<Option<Duration>>()
    });
    Took {
        wall: start.elapsed(),
        cpu,
    }
}

/// The time this thread has run on a CPU so far, from the kernel's
/// scheduler statistics: on a machine shared with other work, unlike the
/// wall clock, it leaves out the time another process had the core.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// One limiter under test, deciding for the key of a given index.
trait Limiter: Sync {
    fn decide(&self, key: usize) -> bool;
}

struct SlidegateU64(MemoryStore<u64>, [Rule; 1]);
struct GovernorU64(governor::DefaultKeyedRateLimiter<u64>);
struct SlidegateString(MemoryStore, [Rule; 1], Vec<String>);
struct GovernorString(governor::DefaultKeyedRateLimiter<String>, Vec<String>);

impl Limiter for SlidegateU64 {
    #[inline]
    fn decide(&self, key: usize) -> bool {
        let d = self.0.acquire(&(key as u64), &self.1, 1);
        d.map(|d| d.allowed()).unwrap_or(false)
    }
}

impl Limiter for GovernorU64 {
    #[inline]
    fn decide(&self, key: usize) -> bool {
        self.0.check_key(&(key as u64)).is_ok()
    }
}

impl Limiter for SlidegateString {
    #[inline]
    fn decide(&self, key: usize) -> bool {
        let d = self.0.acquire(self.2[key].as_str(), &self.1, 1);
        d.map(|d| d.allowed()).unwrap_or(false)
    }
}

impl Limiter for GovernorString {
    #[inline]
    fn decide(&self, key: usize) -> bool {
        self.0.check_key(&self.1[key]).is_ok()
    }
}

/// Fills a limiter with every key, before anything is timed.
fn filled<L: Limiter>(limiter: L, keys: usize) -> L {
    for key in 0..keys {
        limiter.decide(key);
    }
    limiter
}

/// The store's builder: its defaults, or `MEMORY_SHARDS` shards.
fn builder() -> MemoryStoreBuilder {
    let builder = MemoryStore::builder();
    match std::env::var("MEMORY_SHARDS") {
        Ok(shards) => builder.shards(shards.parse().expect("MEMORY_SHARDS is a number")),
        Err(_) => builder,
    }
}

fn slidegate_u64(keys: usize) -> SlidegateU64 {
    filled(SlidegateU64(builder().build(), [rule()]), keys)
}

fn governor_u64(keys: usize) -> GovernorU64 {
    filled(GovernorU64(RateLimiter::keyed(quota())), keys)
}

fn names(keys: usize) -> Vec<String> {
    (0..keys).map(|k| format!("user:{k}")).collect()
}

fn slidegate_string(keys: usize) -> SlidegateString {
    filled(
        SlidegateString(builder().build(), [rule()], names(keys)),
        keys,
    )
}

fn governor_string(keys: usize) -> GovernorString {
    filled(
        GovernorString(RateLimiter::keyed(quota()), names(keys)),
        keys,
    )
}

fn type_name(string: bool) -> &'static str {
    if string { "string" } else { "u64" }
}

fn criterion_benches(c: &mut Criterion) {
    for threads in THREADS {
        let mut group = c.benchmark_group(format!("u64_keys/{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        for keys in KEY_COUNTS {
            bench_one(&mut group, "slidegate", threads, keys, &slidegate_u64(keys));
            bench_one(&mut group, "governor", threads, keys, &governor_u64(keys));
        }
        group.finish();
        let mut group = c.benchmark_group(format!("string_keys/{threads}_threads"));
        group.throughput(Throughput::Elements(1));
        for keys in KEY_COUNTS {
            bench_one(
                &mut group,
                "slidegate",
                threads,
                keys,
                &slidegate_string(keys),
            );
            bench_one(
                &mut group,
                "governor",
                threads,
                keys,
                &governor_string(keys),
            );
        }
        group.finish();
    }
    bench_batch(c);
}

fn bench_one<L: Limiter>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    threads: usize,
    keys: usize,
    limiter: &L,
) {
    let mut seed = 0;
    group.bench_function(BenchmarkId::new(name, keys), |b| {
        b.iter_custom(|iters| {
            seed += 2;
            run(threads, iters, keys, seed, |k| {
                black_box(limiter.decide(k));
            })
            .wall
        })
    });
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

/// One cell of the table: key type, threads, keys.
#[derive(Clone, Copy)]
struct Cell {
    string: bool,
    threads: usize,
    keys: usize,
}

fn cells() -> Vec<Cell> {
    let all = [false, true].into_iter().flat_map(|string| {
        THREADS.into_iter().flat_map(move |threads| {
            KEY_COUNTS.map(|keys| Cell {
                string,
                threads,
                keys,
            })
        })
    });
    let Ok(chosen) = std::env::var("MEMORY_CELLS") else {
        return all.collect();
    };
    let chosen: Vec<&str> = chosen.split(',').map(str::trim).collect();
    all.filter(|cell| {
        let name = format!("{}/{}/{}", type_name(cell.string), cell.threads, cell.keys);
        chosen.contains(&name.as_str())
    })
    .collect()
}

/// Median, lowest and highest.
fn summary(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

/// The two limiters of every cell in turn, `rounds` times; the first of
/// the two alternates from round to round.
fn interleaved(rounds: usize) {
    println!("memory_store, {rounds} interleaved rounds per cell, keys in random order:");
    println!("median CPU ns per decision (the benchmark threads' time on a CPU over the");
    println!("decisions; lowest-highest round); ratio = governor / slidegate, median of the");
    println!("rounds' ratios (lowest-highest); >= 1.00 means slidegate is as fast or faster;");
    println!("wall = the same ratio of wall-clock times");
    println!();
    println!(
        "| keys | key type | threads | slidegate CPU ns | governor CPU ns | ratio | wall ratio |"
    );
    println!("|---|---|---|---|---|---|---|");
    for cell in cells() {
        let row = match cell.string {
            false => rounds_of(
                cell,
                rounds,
                slidegate_u64(cell.keys),
                governor_u64(cell.keys),
            ),
            true => rounds_of(
                cell,
                rounds,
                slidegate_string(cell.keys),
                governor_string(cell.keys),
            ),
        };
        println!("{row}");
    }
}

/// One table row: `rounds` rounds of both limiters of `cell`.
fn rounds_of<S: Limiter, G: Limiter>(
    cell: Cell,
    rounds: usize,
    slidegate: S,
    governor: G,
) -> String {
    // About 0.2-0.6 s per limiter and round at a million keys, less below.
    let decisions: u64 = if cell.keys >= 1_000_000 {
        2_000_000
    } else {
        4_000_000
    };
    let (mut s, mut g, mut ratio, mut wall) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let seed = 1_000 + 16 * round as u64;
        let (a, b) = if round % 2 == 0 {
            let a = time_it(&cell, decisions, seed, &slidegate);
            (a, time_it(&cell, decisions, seed, &governor))
        } else {
            let b = time_it(&cell, decisions, seed, &governor);
            (time_it(&cell, decisions, seed, &slidegate), b)
        };
        s.push(a.cpu);
        g.push(b.cpu);
        ratio.push(b.cpu / a.cpu);
        wall.push(b.wall / a.wall);
    }
    let (s, s_lo, s_hi) = summary(&mut s);
    let (g, g_lo, g_hi) = summary(&mut g);
    let (r, r_lo, r_hi) = summary(&mut ratio);
    let (w, w_lo, w_hi) = summary(&mut wall);
    format!(
        "| {} | {} | {} | {s:.1} ({s_lo:.1}-{s_hi:.1}) | {g:.1} ({g_lo:.1}-{g_hi:.1}) | {r:.2} ({r_lo:.2}-{r_hi:.2}) | {w:.2} ({w_lo:.2}-{w_hi:.2}) |",
        cell.keys,
        if cell.string { "String" } else { "u64" },
        cell.threads,
    )
}

/// One round's ns per decision.
struct PerDecision {
    /// CPU time (the wall time where the kernel does not tell).
    cpu: f64,
    wall: f64,
}

/// One round of `limiter`.
fn time_it<L: Limiter>(cell: &Cell, decisions: u64, seed: u64, limiter: &L) -> PerDecision {
    let took = run(cell.threads, decisions, cell.keys, seed, |k| {
        black_box(limiter.decide(k));
    });
    let per_decision = |d: Duration| d.as_nanos() as f64 / decisions as f64;
    PerDecision {
        cpu: per_decision(took.cpu.unwrap_or(took.wall)),
        wall: per_decision(took.wall),
    }
}

/// For a profiler: one limiter of each chosen cell, on manual clocks that
/// move a fixed time per decision (a profiler slows the program down many
/// times over, which would otherwise change what the limiters see: at
/// 10,000 keys, admissions instead of mostly denials). The time per
/// decision is about what one takes on this machine: `MEMORY_PROFILE_NS`,
/// by default 40 ns up to 10,000 keys and 300 ns at a million.
///
/// Fills the limiter, runs it for a window and a half (the steady state:
/// every key's window full of what it admitted), then prints
/// `MEMORY_PROFILE ready` on stderr and waits `MEMORY_PROFILE_PAUSE_MS`
/// (so that a profiler started with its instrumentation off can turn it
/// on: `callgrind_control -i on PID`), runs a million decisions to warm
/// the profiler's caches, and a million more inside [`profiled`], the
/// function to count (`--toggle-collect='*profiled*'`).
fn profile(which: &str) {
    let start = 1 << 40;
    for cell in cells() {
        let ns: u64 = std::env::var("MEMORY_PROFILE_NS")
            .ok()
            .and_then(|ns| ns.parse().ok())
            .unwrap_or(if cell.keys >= 1_000_000 { 300 } else { 40 });
        let rules = [rule()];
        let names = names(if cell.string { cell.keys } else { 0 });
        match which {
            "slidegate" => {
                let clock = slidegate::clock::ManualClock::at(start);
                let set_time = |ns: u64| clock.set(start + ns / 1_000);
                if cell.string {
                    let s: MemoryStore<CompactString, _> = builder().clock(clock.clone()).build();
                    let decide = |k: usize| {
                        s.acquire(names[k].as_str(), &rules, 1)
                            .is_ok_and(|d| d.allowed())
                    };
                    profile_one(&cell, ns, decide, set_time);
                } else {
                    let s: MemoryStore<u64, _> = builder().clock(clock.clone()).build();
                    let decide =
                        |k: usize| s.acquire(&(k as u64), &rules, 1).is_ok_and(|d| d.allowed());
                    profile_one(&cell, ns, decide, set_time);
                }
            }
            "governor" => {
                let clock = governor::clock::FakeRelativeClock::default();
                let last = std::cell::Cell::new(0);
                let set_time = |ns: u64| clock.advance(Duration::from_nanos(ns - last.replace(ns)));
                if cell.string {
                    let g = RateLimiter::dashmap_with_clock(quota(), clock.clone());
                    profile_one(&cell, ns, |k| g.check_key(&names[k]).is_ok(), set_time);
                } else {
                    let g = RateLimiter::dashmap_with_clock(quota(), clock.clone());
                    profile_one(&cell, ns, |k| g.check_key(&(k as u64)).is_ok(), set_time);
                }
            }
            _ => panic!("MEMORY_PROFILE is slidegate or governor"),
        }
    }
}

const PROFILE_DECISIONS: u64 = 1_000_000;

/// Fills, runs to the steady state, warms up, then profiles `decide`,
/// moving time by `ns` per decision with `set_time(nanoseconds since the
/// start)`.
fn profile_one(cell: &Cell, ns: u64, decide: impl Fn(usize) -> bool, set_time: impl Fn(u64)) {
    let mut t = 0;
    for key in 0..cell.keys {
        t += ns;
        set_time(t);
        decide(key);
    }
    let mut keys = Keys::new(5, cell.keys);
    // A window and a half of 1 s.
    for _ in 0..1_500_000_000 / ns {
        t += ns;
        set_time(t);
        black_box(decide(keys.next()));
    }
    eprintln!("MEMORY_PROFILE ready");
    let pause = std::env::var("MEMORY_PROFILE_PAUSE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    std::thread::sleep(Duration::from_millis(pause));
    let mut keys = Keys::new(7, cell.keys);
    for _ in 0..PROFILE_DECISIONS {
        t += ns;
        set_time(t);
        black_box(decide(keys.next()));
    }
    let allowed = profiled(cell, ns, t, &decide, &set_time);
    println!("{allowed} of {PROFILE_DECISIONS} allowed");
}

#[inline(never)]
fn profiled(
    cell: &Cell,
    ns: u64,
    mut t: u64,
    decide: &impl Fn(usize) -> bool,
    set_time: &impl Fn(u64),
) -> u64 {
    let mut keys = Keys::new(9, cell.keys);
    let mut allowed = 0;
    for _ in 0..PROFILE_DECISIONS {
        t += ns;
        set_time(t);
        allowed += u64::from(decide(keys.next()));
    }
    allowed
}

/// One sweep of a million live keys for each shard count in `counts`
/// (best of five): the whole sweep's time, and a step's (one shard under
/// its lock; the keys' hashes spread them evenly, within a few hundred
/// keys of the mean at these sizes).
fn sweep_steps(counts: &str) {
    const KEYS: u64 = 1_000_000;
    println!("| shards | keys a shard | sweep ms | ms a step |");
    println!("|---|---|---|---|");
    for shards in counts.split(',') {
        let shards: usize = shards.trim().parse().expect("MEMORY_SWEEP lists numbers");
        let clock = slidegate::clock::ManualClock::new();
        let store: MemoryStore<u64, _> = MemoryStore::builder()
            .clock(clock)
            .sweep_interval(None)
            .shards(shards)
            .build();
        let rules = [rule()];
        for key in 0..KEYS {
            black_box(store.acquire(&key, &rules, 1).is_ok());
        }
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            assert_eq!(store.sweep(), 0, "no key is idle");
            best = best.min(start.elapsed().as_secs_f64() * 1e3);
        }
        let step = best / shards as f64;
        println!(
            "| {shards} | {} | {best:.1} | {step:.2} |",
            KEYS / shards as u64
        );
    }
}

fn main() {
    if let Ok(which) = std::env::var("MEMORY_PROFILE") {
        return profile(&which);
    }
    if let Ok(counts) = std::env::var("MEMORY_SWEEP") {
        return sweep_steps(&counts);
    }
    match std::env::var("MEMORY_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        Some(rounds) => interleaved(rounds),
        None => {
            let mut criterion = Criterion::default()
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3))
                .sample_size(20)
                .configure_from_args();
            criterion_benches(&mut criterion);
            criterion.final_summary();
        }
    }
}
