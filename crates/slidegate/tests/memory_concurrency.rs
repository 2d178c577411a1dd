//! Many threads on one key, and batches over shared keys while the sweeper
//! runs: never more than L admitted in any window of the store's own
//! admission times, and no deadlock. Then every algorithm with every
//! option under eight threads, each held to its own promise.

mod common;

use slidegate::store::memory::CompactString;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::contention::{self, Request};
use common::exactness::{self, Seen};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{Hit, MemoryStore, Rule};

/// The largest sum of costs inside any closed interval `[s, s + window]`.
fn max_in_any_window(admissions: &BTreeMap<u64, u64>, window: u64) -> u64 {
    let times: Vec<(u64, u64)> = admissions.iter().map(|(t, c)| (*t, *c)).collect();
    let (mut best, mut sum, mut lo) = (0, 0, 0);
    for hi in 0..times.len() {
        sum += times[hi].1;
        while times[hi].0 - times[lo].0 > window {
            sum -= times[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// Snapshots a key's log often enough that no entry expires unseen, and
/// merges the snapshots (entries are per microsecond; costs only grow).
fn watch(
    store: MemoryStore,
    key: &'static str,
    rule: Rule,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<BTreeMap<u64, u64>> {
    thread::spawn(move || {
        let mut seen = BTreeMap::new();
        loop {
            let done = stop.load(Ordering::SeqCst);
            for (t, c) in store.admissions(key, rule).unwrap_or_default() {
                let entry = seen.entry(t).or_insert(0);
                *entry = (*entry).max(c);
            }
            if done {
                return seen;
            }
            thread::sleep(Duration::from_millis(2));
        }
    })
}

#[test]
fn eight_threads_on_one_key_never_exceed_the_limit_in_any_window() {
    let rule = Rule::parse("200/1s").unwrap();
    let store = MemoryStore::new();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(store.clone(), "hot", rule, Arc::clone(&stop));
    let admitted = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(2500);
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let (store, admitted) = (store.clone(), Arc::clone(&admitted));
            thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let cost = 1 + (n + i) % 3;
                    if store.acquire("hot", &[rule], cost).unwrap().allowed() {
                        admitted.fetch_add(cost, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    let total: u64 = seen.values().sum();
    assert_eq!(
        total,
        admitted.load(Ordering::Relaxed),
        "every admission was observed"
    );
    assert!(
        total > 400,
        "the run spanned several windows ({total} admitted)"
    );
    let worst = max_in_any_window(&seen, rule.window_micros());
    assert!(worst <= rule.limit(), "{worst} admitted in one window");
    assert_eq!(worst, rule.limit(), "the limit was reached");
}

#[test]
fn batches_over_shared_keys_stay_exact_while_sweeping() {
    shared_key_batches_stay_exact(2);
}

/// Batches longer than the store scans (it hashes their keys), each key
/// repeated several times in one batch.
#[test]
fn long_batches_with_repeated_keys_stay_exact_while_sweeping() {
    shared_key_batches_stay_exact(24);
}

/// Eight threads send batches of `len` hits over four shared keys, in
/// different orders, while the sweeper runs every millisecond.
fn shared_key_batches_stay_exact(len: usize) {
    let rule = Rule::parse("50/200ms").unwrap();
    let store: MemoryStore = MemoryStore::builder()
        .sweep_interval(Some(Duration::from_millis(1)))
        .shards(2)
        .build();
    let keys = ["a", "b", "c", "d"];
    let stop = Arc::new(AtomicBool::new(false));
    let watchers: Vec<_> = keys
        .iter()
        .map(|k| (k, watch(store.clone(), k, rule, Arc::clone(&stop))))
        .collect();
    let admitted: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let deadline = Instant::now() + Duration::from_millis(2000);
    let workers: Vec<_> = (0..8usize)
        .map(|i| {
            let (store, admitted) = (store.clone(), Arc::clone(&admitted));
            thread::spawn(move || {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    // Different key orders in different threads.
                    let chosen: Vec<usize> = (0..len)
                        .map(|j| (i * (j + 1) + n + j * j) % keys.len())
                        .collect();
                    let hits: Vec<Hit<'_>> =
                        chosen.iter().map(|&k| Hit::new(keys[k], rule, 1)).collect();
                    let ds = store.acquire_batch(&hits).unwrap();
                    if ds.iter().all(|d| d.allowed()) {
                        for &k in &chosen {
                            admitted[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    n += 1;
                    if n.is_multiple_of(64) {
                        // Let windows expire now and then, so keys go idle and get swept.
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for (i, (key, watcher)) in watchers.into_iter().enumerate() {
        let seen = watcher.join().unwrap();
        let total: u64 = seen.values().sum();
        assert_eq!(
            total,
            admitted[i].load(Ordering::Relaxed),
            "key {key}: every admission observed"
        );
        assert!(total > 0, "key {key}: some batches passed");
        let worst = max_in_any_window(&seen, rule.window_micros());
        assert!(worst <= rule.limit(), "key {key}: {worst} in one window");
    }
}

/// Every algorithm, plain, with a lockout, reporting usage, and both (one
/// key each), asked by eight threads at once, in rounds at one frozen time
/// each, while the sweeper runs: each rule's promise holds at every
/// instant (fixed window: at most L per aligned window; sliding counter:
/// its weighted estimate within L; GCRA: at most L + L·t/W in any
/// interval t; sliding log: at most L in any window), reported usage
/// counted, and nothing passes while a lockout runs.
#[test]
fn every_algorithm_and_option_keeps_its_promise_under_eight_threads() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 300;
    const PER_ROUND: usize = 2;
    let cases = Arc::new(contention::cases());
    let times = contention::round_times(ROUNDS);
    let clock = ManualClock::at(times[0]);
    let store: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(Some(Duration::from_millis(1)))
        .shards(4)
        .build();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|client| {
            let (store, clock) = (store.clone(), clock.clone());
            let (cases, barrier) = (Arc::clone(&cases), Arc::clone(&barrier));
            thread::spawn(move || {
                let mut seen = vec![Vec::new(); cases.len()];
                for round in 0..ROUNDS {
                    barrier.wait();
                    let at = clock.now_micros();
                    for i in 0..PER_ROUND {
                        // Each thread starts on another key.
                        for c in (0..cases.len()).map(|k| (k + client) % cases.len()) {
                            if !contention::takes_part(THREADS, client, c, round) {
                                continue;
                            }
                            let (key, rule) = (cases[c].key.as_str(), cases[c].rule);
                            // A report follows a check that passed.
                            if rule.reports() {
                                let check = store.acquire(key, &[rule], 0);
                                let allowed = check
                                    .unwrap_or_else(|e| panic!("{}: {e}", cases[c].name))
                                    .allowed();
                                seen[c].push(Seen {
                                    at,
                                    cost: 0,
                                    allowed,
                                });
                                if !allowed {
                                    continue;
                                }
                            }
                            let request = Request::of(rule, client, round, i);
                            let allowed = match request {
                                Request::One(cost) => {
                                    store.acquire(key, &[rule], cost).map(|d| d.allowed())
                                }
                                Request::Twice(cost) => store
                                    .acquire_batch(&[Hit::new(key, rule, cost); 2])
                                    .map(|ds| ds.iter().all(|d| d.allowed())),
                            }
                            .unwrap_or_else(|e| panic!("{}: {e}", cases[c].name));
                            let cost = request.cost();
                            seen[c].push(Seen { at, cost, allowed });
                        }
                    }
                    barrier.wait();
                }
                seen
            })
        })
        .collect();
    for &at in &times {
        clock.set(at);
        barrier.wait();
        barrier.wait();
    }
    let mut seen = vec![Vec::new(); cases.len()];
    for worker in workers {
        for (all, mine) in seen.iter_mut().zip(worker.join().expect("a worker ran")) {
            all.extend(mine);
        }
    }
    exactness::assert_kept(&cases, &seen);
}

/// A token bucket of 50 refilled at 10 per second, asked by eight threads
/// at once at each of a few frozen times: exactly 50 pass at once, then
/// exactly the units refilled since (10 per second, 5 per half second),
/// and a bucket left alone for its refill time (5 s) is full again.
#[test]
fn a_burst_of_50_passes_at_once_then_10_per_second_under_eight_threads() {
    const THREADS: usize = 8;
    let rule = Rule::parse("10/1s burst 50").expect("a valid rule");
    let start = contention::START;
    let clock = ManualClock::at(start);
    let store: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .shards(4)
        .build();
    // (time since start in ms, units that must pass then).
    let steps = [(0, 50), (1_000, 10), (1_500, 5), (1_500, 0), (9_000, 50)];
    for (ms, want) in steps {
        clock.set(start + ms * 1_000);
        let passed: u64 = (0..THREADS)
            .map(|_| {
                let store = store.clone();
                thread::spawn(move || {
                    (0..20)
                        .filter(|_| {
                            store
                                .acquire("bucket", &[rule], 1)
                                .expect("a decision")
                                .allowed()
                        })
                        .count() as u64
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("a thread ran"))
            .sum();
        assert_eq!(passed, want, "at +{ms} ms");
    }
    let d = store.acquire("bucket", &[rule], 0).expect("a probe");
    assert_eq!((d.limit(), d.remaining()), (10, 0));
    assert_eq!(d.reset_after(), Duration::from_secs(5));
}
