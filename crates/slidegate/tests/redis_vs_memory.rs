//! The Redis store against the memory store, decision by decision, every
//! field and every error, on random sequences of clock moves (forward,
//! exactly one window ±1 µs, onto a window boundary ±1 µs, and backward), keys, costs, multi-rule calls,
//! batches, probes and resets, with limits and windows large enough that
//! the script's exact slow-path arithmetic is exercised.
//!
//! One redis-server serves every case; each case uses its own key prefix.
//! Both stores read one `ManualClock` (the Redis store in client clock
//! mode), and Redis keeps keys for an hour past idle, as the memory store
//! keeps states when it is not swept.

mod common;

use slidegate::store::memory::CompactString;
use std::time::Duration;

use common::boundary::next_boundary;
use common::burst::{burst, with_burst};
use common::cost::{Cost, cost};
use common::redis_server::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{Algorithm, Hit, MemoryStore, Rate, RedisStore, Rule, Store};

const KEYS: [&str; 4] = ["alice", "bob", "{tag}:carol", "user:{tag}:dave"];

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    /// Exactly one window of a rule, plus -1, 0 or +1 µs: lands on boundaries.
    AdvanceWindow(usize, i8),
    /// To the next boundary of a rule's window (a multiple of it), -1, 0
    /// or +1 µs.
    ToBoundary(usize, i8),
    /// The clock steps back (never below 0).
    Back(u64),
    Acquire {
        key: usize,
        rules: Vec<usize>,
        cost: Cost,
    },
    Batch(Vec<(usize, usize, Cost)>),
    /// Many admissions of one rule, the clock moving `step` µs between them:
    /// long logs, merged entries, searches beyond the first few entries.
    Burst {
        key: usize,
        rule: usize,
        count: usize,
        step: u64,
        cost: Cost,
    },
    /// A burst through the batch path: each admission is a batch of the
    /// hit and either a second hit on the same log (`twice`) or a probe of
    /// another key, so long logs are also decided by the batch code.
    BatchBurst {
        rule: usize,
        count: usize,
        step: u64,
        cost: Cost,
        twice: bool,
    },
    Reset(usize),
    /// A reservation: wait up to `max_wait` µs for a turn.
    Reserve {
        key: usize,
        rules: Vec<usize>,
        cost: Cost,
        max_wait: u64,
    },
    /// A reservation of several hits, possibly on different keys and
    /// rules, all-or-nothing, at one time for all of them.
    ReserveBatch {
        hits: Vec<(usize, usize, Cost)>,
        max_wait: u64,
    },
}

fn rule() -> impl Strategy<Value = Rule> {
    let limit = prop_oneof![
        4 => 1u64..=8,
        1 => Just(100u64),
        1 => Just(1_000_000_000u64),
        1 => Just(Rate::MAX_LIMIT),
        1 => Just(999_999_999_989u64),
    ];
    let max_window = Rate::MAX_WINDOW.as_micros() as u64;
    let window_us = prop_oneof![
        3 => 1_000u64..=5_000,
        3 => 1_000u64..=3_000_000,
        1 => Just(1_000_000u64),
        1 => Just(max_window),
        1 => (max_window / 2)..=max_window,
    ];
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (limit, window_us, algorithm, burst()).prop_map(|(l, w, a, b)| {
        let rule = Rule::new(Rate::new(l, Duration::from_micros(w)).expect("valid rate"))
            .with_algorithm(a);
        with_burst(rule, b)
    })
}

fn op(rules: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![Just(0u64), 0u64..2_000, 0u64..4_000_000].prop_map(Op::Advance),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::AdvanceWindow(r, d)),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::ToBoundary(r, d)),
        1 => prop_oneof![1u64..2_000, 0u64..4_000_000].prop_map(Op::Back),
        6 => (0..KEYS.len(), prop::collection::vec(0..rules, 1..=3), cost())
            .prop_map(|(key, rules, cost)| Op::Acquire { key, rules, cost }),
        2 => prop::collection::vec((0..KEYS.len(), 0..rules, cost()), 1..=4).prop_map(Op::Batch),
        1 => (0..KEYS.len(), 0..rules, 1usize..120, prop_oneof![Just(0u64), 0u64..3, 0u64..50_000], cost())
            .prop_map(|(key, rule, count, step, cost)| Op::Burst { key, rule, count, step, cost }),
        1 => (0..KEYS.len()).prop_map(Op::Reset),
        3 => (0..KEYS.len(), prop::collection::vec(0..rules, 1..=3), cost(), prop_oneof![Just(0u64), 0u64..5_000, 0u64..4_000_000])
            .prop_map(|(key, rules, cost, max_wait)| Op::Reserve { key, rules, cost, max_wait }),
        3 => (prop::collection::vec((0..KEYS.len(), 0..rules, cost()), 1..=4), reserve_batch_wait())
            .prop_map(|(hits, max_wait)| Op::ReserveBatch { hits, max_wait }),
    ]
}

/// No wait, a few ms, seconds, or longer than a reservation may wait
/// (read as that longest wait).
fn reserve_batch_wait() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        2 => 0u64..5_000,
        2 => 0u64..4_000_000,
        1 => Just(300_000_000u64),
    ]
}

fn scenario() -> impl Strategy<Value = (u64, Vec<Rule>, Vec<Op>)> {
    let start = prop_oneof![Just(0u64), 0u64..10_000_000, Just(1_763_800_000_000_000u64)];
    (start, prop::collection::vec(rule(), 1..=4)).prop_flat_map(|(start, rules)| {
        let n = rules.len();
        (
            Just(start),
            Just(rules),
            prop::collection::vec(op(n), 1..60),
        )
    })
}

/// Long sliding logs on one key, decided by single hits and by batches:
/// deep searches for the deciding entry, trims past the records read with
/// the header, same-µs merges, compactions, stored times and totals that
/// wrap around their byte widths, and totals shifted down (limits of 10^12).
fn long_logs() -> impl Strategy<Value = (u64, Vec<Rule>, Vec<Op>)> {
    let limit = prop_oneof![Just(20u64), Just(100), Just(1_000), Just(Rate::MAX_LIMIT)];
    let window = prop_oneof![Just(1_000_000u64), Just(3_600_000_000), Just(7_200_000_001)];
    let rules = prop::collection::vec(
        (limit, window).prop_map(|(l, w)| {
            Rule::new(Rate::new(l, Duration::from_micros(w)).expect("valid rate"))
        }),
        1..=2,
    );
    let start = prop_oneof![Just(0u64), Just(1_763_800_000_000_000u64)];
    (start, rules).prop_flat_map(|(start, rules)| {
        let n = rules.len();
        let window = rules[0].window_micros();
        let op = prop_oneof![
            3 => (0..n, 1usize..300, prop_oneof![Just(0u64), 0u64..3, 0..window / 200, window / 64..window / 8], cost())
                .prop_map(|(rule, count, step, cost)| Op::Burst { key: 0, rule, count, step, cost }),
            2 => (0..n, 1usize..200, prop_oneof![Just(0u64), 0u64..3, 0..window / 200, window / 64..window / 8], cost(), any::<bool>())
                .prop_map(|(rule, count, step, cost, twice)| Op::BatchBurst { rule, count, step, cost, twice }),
            3 => (0..n, cost()).prop_map(|(r, cost)| Op::Acquire { key: 0, rules: vec![r], cost }),
            1 => cost().prop_map(move |cost| Op::Acquire { key: 0, rules: (0..n).collect(), cost }),
            3 => (0u64..=20, -1i64..=1)
                .prop_map(move |(k, d)| Op::Advance((window * k / 16).saturating_add_signed(d))),
            1 => (0u64..=8).prop_map(move |k| Op::Back(window * k / 64)),
        ];
        (Just(start), Just(rules), prop::collection::vec(op, 1..25))
    })
}

/// Both stores on one clock, and the runtime the Redis store runs on.
struct Harness {
    _server: RedisServer,
    runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    redis: RedisStore,
    cases: u32,
}

impl Harness {
    fn new() -> Harness {
        let server = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let clock = ManualClock::new();
        let redis = common::redis_server::store_on_clock(&runtime, server.url(), &clock);
        Harness {
            _server: server,
            runtime,
            clock,
            redis,
            cases: 0,
        }
    }

    /// Runs `cases` random scenarios, each on fresh keys and a fresh memory store.
    fn check(&mut self, cases: u32, scenarios: impl Strategy<Value = (u64, Vec<Rule>, Vec<Op>)>) {
        let mut runner = TestRunner::new(Config {
            cases,
            ..Config::default()
        });
        let this = std::cell::RefCell::new(self);
        let result = runner.run(&scenarios, |(start, rules, ops)| {
            this.borrow_mut().run_case(start, &rules, &ops)
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    fn run_case(&mut self, start: u64, rules: &[Rule], ops: &[Op]) -> Result<(), TestCaseError> {
        self.cases += 1;
        let keys: Vec<String> = KEYS
            .iter()
            .map(|k| format!("case{}-{k}", self.cases))
            .collect();
        self.clock.set(start);
        let memory: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
            .clock(self.clock.clone())
            .sweep_interval(None)
            .build();
        let (clock, redis, runtime) = (&self.clock, &self.redis, &self.runtime);
        let acquire = |key: &str, rs: &[Rule], c: u64, what: &dyn std::fmt::Debug| {
            let want = runtime.block_on(Store::acquire(&memory, key, rs, c));
            let got = runtime.block_on(redis.acquire(key, rs, c));
            prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
            Ok(())
        };
        for (n_op, op) in ops.iter().enumerate() {
            let what = (n_op, op);
            match op {
                Op::Advance(us) => clock.advance(Duration::from_micros(*us)),
                Op::AdvanceWindow(r, delta) => {
                    let us = rules[*r]
                        .window_micros()
                        .saturating_add_signed(*delta as i64);
                    clock.advance(Duration::from_micros(us));
                }
                Op::ToBoundary(r, delta) => {
                    let window = rules[*r].window_micros();
                    clock.set(next_boundary(clock.now_micros(), window, *delta));
                }
                Op::Back(us) => clock.set(clock.now_micros().saturating_sub(*us)),
                Op::Acquire {
                    key,
                    rules: chosen,
                    cost,
                } => {
                    let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    acquire(&keys[*key], &rs, cost.resolve(limit), &what)?;
                }
                Op::Reserve {
                    key,
                    rules: chosen,
                    cost,
                    max_wait,
                } => {
                    let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    let (key, c) = (keys[*key].as_str(), cost.resolve(limit));
                    let max_wait = Duration::from_micros(*max_wait);
                    let want = runtime.block_on(Store::reserve(&memory, key, &rs, c, max_wait));
                    let got = runtime.block_on(redis.reserve(key, &rs, c, max_wait));
                    prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
                }
                Op::ReserveBatch { hits, max_wait } => {
                    let batch: Vec<Hit<'_>> = hits
                        .iter()
                        .map(|&(k, r, c)| {
                            Hit::new(keys[k].as_str(), rules[r], c.resolve(rules[r].burst()))
                        })
                        .collect();
                    let max_wait = Duration::from_micros(*max_wait);
                    let want = runtime.block_on(Store::reserve_batch(&memory, &batch, max_wait));
                    let got = runtime.block_on(redis.reserve_batch(&batch, max_wait));
                    prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
                }
                Op::Batch(hits) => {
                    let batch: Vec<Hit<'_>> = hits
                        .iter()
                        .map(|&(k, r, c)| {
                            Hit::new(keys[k].as_str(), rules[r], c.resolve(rules[r].burst()))
                        })
                        .collect();
                    let want = runtime.block_on(Store::acquire_batch(&memory, &batch));
                    let got = runtime.block_on(redis.acquire_batch(&batch));
                    prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
                }
                Op::Burst {
                    key,
                    rule,
                    count,
                    step,
                    cost,
                } => {
                    let rs = [rules[*rule]];
                    for i in 0..*count {
                        let c = match cost {
                            Cost::Fraction(f) => {
                                Cost::Fraction(f.wrapping_add((i as u8).wrapping_mul(37)))
                            }
                            other => *other,
                        };
                        acquire(&keys[*key], &rs, c.resolve(rs[0].limit()), &(what, i))?;
                        clock.advance(Duration::from_micros(*step));
                    }
                }
                Op::BatchBurst {
                    rule,
                    count,
                    step,
                    cost,
                    twice,
                } => {
                    let r = rules[*rule];
                    for i in 0..*count {
                        let c = match cost {
                            Cost::Fraction(f) => {
                                Cost::Fraction(f.wrapping_add((i as u8).wrapping_mul(37)))
                            }
                            other => *other,
                        }
                        .resolve(r.limit());
                        let second = if *twice {
                            Hit::new(keys[0].as_str(), r, u64::from(c < r.limit()))
                        } else {
                            Hit::new(keys[1].as_str(), r, 0)
                        };
                        let batch = [Hit::new(keys[0].as_str(), r, c), second];
                        let want = runtime.block_on(Store::acquire_batch(&memory, &batch));
                        let got = runtime.block_on(redis.acquire_batch(&batch));
                        prop_assert_eq!(got, want, "{:?} at {}", (what, i), clock.now_micros());
                        clock.advance(Duration::from_micros(*step));
                    }
                }
                Op::Reset(key) => {
                    memory.reset(keys[*key].as_str());
                    runtime
                        .block_on(redis.reset(&keys[*key]))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
        }
        Ok(())
    }
}

#[test]
fn redis_store_decides_like_the_memory_store() {
    Harness::new().check(150, scenario());
}

#[test]
fn long_sliding_logs_decide_like_the_memory_store() {
    Harness::new().check(60, long_logs());
}

#[test]
fn an_entry_exactly_a_window_old_still_counts_after_older_ones_are_trimmed() {
    let rule = Rule::parse("3/1s").expect("a valid rule");
    let one = |cost| Op::Acquire {
        key: 0,
        rules: vec![0],
        cost: Cost::Fixed(cost),
    };
    let ops = [
        one(1),
        Op::Advance(10),
        one(1),
        Op::Advance(10),
        one(1),
        // The first entry is now more than a window old, the second exactly one.
        Op::AdvanceWindow(0, -10),
        one(0),
        one(2),
        one(1),
    ];
    let mut harness = Harness::new();
    for start in [0, 1_763_800_000_000_000] {
        harness
            .run_case(start, &[rule], &ops)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A refused batch records nothing, in either store, and leaves none of
/// the states its consuming hits would have added: once the two stores
/// disagreed on such states, and after a probe rolled a window and the
/// clock stepped back, they judged the key in different windows. Every
/// algorithm, refused as a batch and as a batch reservation.
#[test]
fn a_refused_batch_keeps_the_same_states_in_both_stores() {
    let fresh_and_full = vec![(3, 0, Cost::Fixed(1)), (2, 0, Cost::Fixed(2))];
    let refusals = [
        Op::Batch(fresh_and_full.clone()),
        Op::ReserveBatch {
            hits: fresh_and_full,
            max_wait: 0,
        },
    ];
    let mut harness = Harness::new();
    for (algorithm, refusal) in Algorithm::ALL
        .into_iter()
        .flat_map(|a| refusals.iter().map(move |r| (a, r.clone())))
    {
        let rule = Rule::parse("7/1s")
            .expect("a valid rule")
            .with_algorithm(algorithm);
        let ops = [
            Op::Advance(1),
            Op::Acquire {
                key: 2,
                rules: vec![0],
                cost: Cost::Fixed(6),
            },
            refusal,
            Op::AdvanceWindow(0, 0),
            Op::Batch(vec![(3, 0, Cost::Fixed(0))]),
            Op::Back(2),
            Op::Acquire {
                key: 3,
                rules: vec![0],
                cost: Cost::Fixed(1),
            },
        ];
        harness
            .run_case(0, &[rule], &ops)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Cases the property test found: a batch refused for a probe of a full
/// key, the clock then stepping back across a window's start; and a state
/// added to a key that held another rule's, refused in a batch.
#[test]
fn refused_batches_found_by_the_property_test_decide_alike() {
    let counter = Rule::new(Rate::new(1, Duration::from_micros(29_444)).expect("a valid rate"))
        .with_algorithm(Algorithm::SlidingCounter);
    let probe_of_a_full_key = [
        Op::Advance(3_005_837),
        Op::Burst {
            key: 2,
            rule: 0,
            count: 88,
            step: 1,
            cost: Cost::Limit,
        },
        Op::Batch(vec![(1, 0, Cost::Fixed(1)), (2, 0, Cost::Fixed(0))]),
        Op::Back(2_638),
        Op::Acquire {
            key: 1,
            rules: vec![0],
            cost: Cost::Fixed(1),
        },
    ];
    let mut harness = Harness::new();
    harness
        .run_case(0, &[counter], &probe_of_a_full_key)
        .unwrap_or_else(|e| panic!("{e}"));
    let rules = [
        Rule::new(
            Rate::new(1_000_000_000, Duration::from_micros(1_702_161)).expect("a valid rate"),
        ),
        Rule::new(Rate::new(1_000_000_000, Duration::from_micros(2_992)).expect("a valid rate"))
            .with_algorithm(Algorithm::SlidingCounter),
    ];
    let new_state_of_a_held_key = [
        Op::Reserve {
            key: 3,
            rules: vec![0],
            cost: Cost::Fixed(1),
            max_wait: 0,
        },
        Op::Batch(vec![(3, 0, Cost::Limit), (3, 1, Cost::Fixed(1))]),
        Op::Back(1_626),
        Op::Reset(0),
        Op::Reserve {
            key: 3,
            rules: vec![1],
            cost: Cost::Fixed(1),
            max_wait: 0,
        },
    ];
    harness
        .run_case(1_159_529, &rules, &new_state_of_a_held_key)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A sliding log holding more than its limit (a reservation ahead of a
/// full window) denies a probe with nothing remaining: the single-hit
/// script once answered a remaining of -1 when the window was longer than
/// its compact reply could carry (found by the property test).
#[test]
fn a_probe_of_a_log_over_its_limit_has_nothing_remaining() {
    let rule = Rule::new(Rate::new(999_999_999_989, Rate::MAX_WINDOW).expect("a valid rate"));
    let ops = [
        Op::Burst {
            key: 2,
            rule: 0,
            count: 1,
            step: 0,
            cost: Cost::Limit,
        },
        Op::AdvanceWindow(0, 0),
        Op::ReserveBatch {
            hits: vec![(2, 0, Cost::Fixed(1))],
            max_wait: 1,
        },
        Op::Acquire {
            key: 2,
            rules: vec![0],
            cost: Cost::Fixed(0),
        },
    ];
    Harness::new()
        .run_case(2, &[rule], &ops)
        .unwrap_or_else(|e| panic!("{e}"));
}
