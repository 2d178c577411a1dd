//! Rules with options — usage reporting and lockouts — on the Redis store
//! against the memory store (itself checked against the reference model in
//! `options_vs_reference.rs`), decision by decision, every field: random
//! requests of rules asked with and without their options, batches,
//! reservations, over-limit reports on long logs (the script's trimming of
//! records it has to read), resets, clock moves; and requests on distinct
//! keys sent at once, so that the coalesced call decides them together.
//! Then the lockout's Redis key: shared by every client, expiring with the
//! block, lifted by `reset`.

mod common;

use slidegate::store::memory::CompactString;
use std::time::Duration;

use common::boundary::next_boundary;
use common::burst::{burst, with_burst};
use common::cost::{Cost, cost};
use common::options::{Options, block, options, report_cost, resolve, with_options};
use common::redis_server::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{Algorithm, Error, Hit, MemoryStore, Rate, RedisStore, Rule, Store};

const KEYS: [&str; 3] = ["alice", "{tag}:bob", "user:{tag}:carol"];

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    /// To the next boundary of a rule's window, -1, 0 or +1 µs.
    ToBoundary(usize, i8),
    Back(u64),
    Acquire {
        key: usize,
        rules: Vec<(usize, Options)>,
        cost: Cost,
    },
    Batch(Vec<(usize, usize, Options, Cost)>),
    Reserve {
        key: usize,
        rules: Vec<(usize, Options)>,
        cost: Cost,
        max_wait: u64,
    },
    /// One request per key, all sent at once.
    AtOnce(Vec<((usize, Options), Cost)>),
    /// Many requests of one rule on one key, the clock moving `step` µs
    /// between them, each a report of `cost` with probability 1/`every`.
    Burst {
        rule: usize,
        count: usize,
        step: u64,
        cost: Cost,
        every: usize,
    },
    Reset(usize),
}

fn rule() -> impl Strategy<Value = (Rule, Duration)> {
    let limit = prop_oneof![4 => 1u64..=6, 1 => Just(100u64), 1 => Just(Rate::MAX_LIMIT)];
    let window_us =
        prop_oneof![3 => 1_000u64..=5_000, 3 => 1_000u64..=3_000_000, 1 => Just(3_600_000_000u64)];
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (limit, window_us, algorithm, block(), burst()).prop_map(|(l, w, a, b, size)| {
        let rate = Rate::new(l, Duration::from_micros(w)).expect("valid rate");
        (with_burst(Rule::new(rate).with_algorithm(a), size), b)
    })
}

fn op(rules: usize) -> impl Strategy<Value = Op> {
    let options = options();
    let asked = (0..rules, options.clone());
    prop_oneof![
        3 => prop_oneof![Just(0u64), 0u64..3_000, 0u64..4_000_000].prop_map(Op::Advance),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::ToBoundary(r, d)),
        1 => prop_oneof![1u64..2_000, 0u64..4_000_000].prop_map(Op::Back),
        6 => (0..KEYS.len(), prop::collection::vec(asked.clone(), 1..=3), report_cost())
            .prop_map(|(key, rules, cost)| Op::Acquire { key, rules, cost }),
        2 => prop::collection::vec((0..KEYS.len(), 0..rules, options, report_cost()), 1..=4)
            .prop_map(Op::Batch),
        2 => (0..KEYS.len(), prop::collection::vec(asked.clone(), 1..=2), cost(), prop_oneof![Just(0u64), 0u64..5_000, 0u64..4_000_000])
            .prop_map(|(key, rules, cost, max_wait)| Op::Reserve { key, rules, cost, max_wait }),
        2 => prop::collection::vec((asked, report_cost()), KEYS.len()).prop_map(Op::AtOnce),
        1 => (0..rules, 1usize..150, prop_oneof![Just(0u64), 0u64..3, 0u64..50_000], report_cost(), 1usize..=4)
            .prop_map(|(rule, count, step, cost, every)| Op::Burst { rule, count, step, cost, every }),
        1 => (0..KEYS.len()).prop_map(Op::Reset),
    ]
}

fn scenario() -> impl Strategy<Value = (u64, Vec<(Rule, Duration)>, Vec<Op>)> {
    let start = prop_oneof![Just(0u64), 0u64..10_000_000, Just(1_763_800_000_000_000u64)];
    (start, prop::collection::vec(rule(), 1..=3)).prop_flat_map(|(start, rules)| {
        let n = rules.len();
        (
            Just(start),
            Just(rules),
            prop::collection::vec(op(n), 1..50),
        )
    })
}

struct Harness {
    server: RedisServer,
    runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    redis: RedisStore,
    cases: u32,
}

impl Harness {
    fn new() -> Harness {
        let server = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let clock = ManualClock::new();
        let redis = common::redis_server::store_on_clock(&runtime, server.url(), &clock);
        Harness {
            server,
            runtime,
            clock,
            redis,
            cases: 0,
        }
    }

    fn check(&mut self, cases: u32) {
        let mut runner = TestRunner::new(Config {
            cases,
            ..Config::default()
        });
        let this = std::cell::RefCell::new(self);
        let result = runner.run(&scenario(), |(start, rules, ops)| {
            this.borrow_mut().run_case(start, &rules, &ops)
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    fn run_case(
        &mut self,
        start: u64,
        base: &[(Rule, Duration)],
        ops: &[Op],
    ) -> Result<(), TestCaseError> {
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
        let asked = |chosen: &[(usize, Options)]| -> Vec<Rule> {
            chosen
                .iter()
                .map(|&(i, o)| with_options(base[i], o))
                .collect()
        };
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
                Op::ToBoundary(r, delta) => {
                    let window = base[*r].0.window_micros();
                    clock.set(next_boundary(clock.now_micros(), window, *delta));
                }
                Op::Back(us) => clock.set(clock.now_micros().saturating_sub(*us).max(start)),
                Op::Acquire {
                    key,
                    rules: chosen,
                    cost,
                } => {
                    let rs = asked(chosen);
                    let smallest = rs
                        .iter()
                        .copied()
                        .min_by_key(|r| r.limit())
                        .expect("a rule");
                    acquire(&keys[*key], &rs, resolve(*cost, smallest), &what)?;
                }
                Op::Batch(hits) => {
                    let batch: Vec<Hit<'_>> = hits
                        .iter()
                        .map(|&(k, r, o, c)| {
                            let rule = with_options(base[r], o);
                            Hit::new(keys[k].as_str(), rule, resolve(c, rule))
                        })
                        .collect();
                    let want = runtime.block_on(Store::acquire_batch(&memory, &batch));
                    let got = runtime.block_on(redis.acquire_batch(&batch));
                    prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
                }
                Op::Reserve {
                    key,
                    rules: chosen,
                    cost,
                    max_wait,
                } => {
                    let rs = asked(chosen);
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    let (key, c) = (keys[*key].as_str(), cost.resolve(limit));
                    let max_wait = Duration::from_micros(*max_wait);
                    let want = runtime.block_on(Store::reserve(&memory, key, &rs, c, max_wait));
                    let got = runtime.block_on(redis.reserve(key, &rs, c, max_wait));
                    prop_assert_eq!(got, want, "{:?} at {}", what, clock.now_micros());
                }
                Op::AtOnce(requests) => {
                    let requests: Vec<(String, Rule, u64)> = requests
                        .iter()
                        .zip(&keys)
                        .map(|(&((r, o), c), key)| {
                            let rule = with_options(base[r], o);
                            (key.clone(), rule, resolve(c, rule))
                        })
                        .collect();
                    let got = runtime.block_on(all_at_once(redis, &requests));
                    for ((key, rule, c), got) in requests.iter().zip(got) {
                        let want = runtime.block_on(Store::acquire(&memory, key, &[*rule], *c));
                        prop_assert_eq!(got, want, "{:?} {} at {}", what, key, clock.now_micros());
                    }
                }
                Op::Burst {
                    rule,
                    count,
                    step,
                    cost,
                    every,
                } => {
                    for i in 0..*count {
                        let options = if i % every == 0 { 1 } else { 0 };
                        let rule = with_options(base[*rule], options);
                        acquire(&keys[0], &[rule], resolve(*cost, rule), &(what, i))?;
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

/// One request per key, all in flight at once on the same store (so that
/// the coalescing sends them in one call).
async fn all_at_once(
    redis: &RedisStore,
    requests: &[(String, Rule, u64)],
) -> Vec<Result<slidegate::Decision, Error>> {
    let handles: Vec<_> = requests
        .iter()
        .map(|(key, rule, cost)| {
            let (redis, key, rule, cost) = (redis.clone(), key.clone(), *rule, *cost);
            tokio::spawn(async move { redis.acquire(&key, &[rule], cost).await })
        })
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(
            handle
                .await
                .unwrap_or_else(|e| Err(Error::Store(e.to_string()))),
        );
    }
    out
}

#[test]
fn reports_and_lockouts_on_redis_decide_like_the_memory_store() {
    Harness::new().check(120);
}

#[test]
fn a_lockout_is_shared_by_every_client_expires_with_its_block_and_is_lifted_by_reset() {
    let harness = Harness::new();
    let runtime = &harness.runtime;
    let second = runtime
        .block_on(RedisStore::builder(harness.server.url()).build())
        .expect("a second client");
    let first = runtime
        .block_on(RedisStore::builder(harness.server.url()).build())
        .expect("a first client");
    let login = Rule::parse("2/1h")
        .and_then(|r| r.block_for(Duration::from_millis(300)))
        .expect("a valid rule");
    let attempt = |store: &RedisStore| runtime.block_on(store.acquire("login:ip", &[login], 1));
    assert!(attempt(&first).expect("decided").allowed());
    assert!(attempt(&second).expect("decided").allowed());
    let third = attempt(&first).expect("decided");
    assert!(!third.allowed());
    assert!(
        third.retry_after() >= Duration::from_secs(3000),
        "the window decides beyond the block: {third:?}"
    );
    // The other client sees the block with its own rule's lockout only.
    let blocked = attempt(&second).expect("decided");
    assert!(!blocked.allowed());
    assert_eq!(blocked.remaining(), 0);
    let mut redis = redis::Client::open(harness.server.url())
        .and_then(|c| c.get_connection())
        .expect("a plain connection");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*:block")
        .query(&mut redis)
        .expect("KEYS");
    assert_eq!(keys.len(), 1, "one lockout key: {keys:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query(&mut redis)
        .expect("PTTL");
    assert!(
        ttl > 0 && ttl <= 300 + 2,
        "the block key expires with the block (and the expiry margin): {ttl} ms"
    );
    runtime.block_on(first.reset("login:ip")).expect("reset");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*login:ip*")
        .query(&mut redis)
        .expect("KEYS");
    assert!(keys.is_empty(), "reset lifts the lockout too: {keys:?}");
    assert!(attempt(&second).expect("decided").allowed());
}

/// The memory store's scenarios (`options.rs`) on Redis, on the client's clock.
fn client_clock_store() -> (
    RedisServer,
    tokio::runtime::Runtime,
    RedisStore,
    ManualClock,
) {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let clock = ManualClock::at(1_763_800_000_000_000);
    let store = common::redis_server::store_on_clock(&runtime, server.url(), &clock);
    (server, runtime, store, clock)
}

#[test]
fn a_login_is_locked_out_for_an_hour_after_five_attempts_in_15_minutes_on_redis() {
    let (_server, runtime, store, clock) = client_clock_store();
    runtime.block_on(common::scenarios::login_lockout(&store, &clock));
}

#[test]
fn reported_usage_over_the_limit_is_denied_until_it_leaves_the_window_on_redis() {
    let (_server, runtime, store, clock) = client_clock_store();
    runtime.block_on(common::scenarios::reported_usage(&store, &clock));
}

/// Many lockout requests on one key at once: the coalesced call decides
/// them one after the other, and the first denial starts the block that
/// every later one answers. Sent from one thread, all 40 are queued before
/// any answer comes back: the first 4 go out alone (up to 4 calls go out
/// while none is back, see coalesce.rs), the 36 that waited go in one
/// call, which decides the first denial (the limit is 10).
#[test]
fn lockout_requests_sent_at_once_are_decided_in_one_call_each_with_the_block() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = runtime
        .block_on(RedisStore::builder(server.url()).build())
        .expect("the Redis store connects");
    let rule = Rule::parse("10/1s")
        .and_then(|r| r.block_for(Duration::from_secs(3600)))
        .expect("a valid rule");
    let requests: Vec<(String, Rule, u64)> =
        (0..40).map(|_| ("login:x".to_owned(), rule, 1)).collect();
    let calls_before = evalsha_calls(&server);
    let decisions = runtime.block_on(all_at_once(&store, &requests));
    let calls = evalsha_calls(&server) - calls_before;
    let decisions: Vec<slidegate::Decision> =
        decisions.into_iter().map(|d| d.expect("decided")).collect();
    assert_eq!(decisions.iter().filter(|d| d.allowed()).count(), 10);
    for denied in decisions.iter().filter(|d| !d.allowed()) {
        assert!(
            denied.retry_after() > Duration::from_secs(3500),
            "every denial answers the block: {denied:?}"
        );
    }
    assert_eq!(
        calls,
        4 + 1,
        "4 calls alone, then the 36 that waited in one"
    );
}

/// EVALSHA calls the server has run so far: those it answered, less
/// those refused with `NOSCRIPT` (the store then loads the script and
/// sends the call again).
fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    let Some(line) = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
    else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    field("calls") - field("failed_calls")
}
