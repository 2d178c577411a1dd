//! Coalescing on a real redis-server: decisions that arrive while a call
//! to the same Redis is out go together in one script call, and each is
//! decided exactly as it would be alone, one after the other; a caller
//! that leaves leaves nothing behind; a call that times out degrades its
//! own decisions and no others.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::burst::{burst, with_burst};
use common::cost::{Cost, cost};
use common::redis_server::RedisServer;
use common::reference::Reference;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::AsyncCommands;
use slidegate::clock::{Clock, ManualClock};
use slidegate::store::redis::Coalesce;
use slidegate::store::resilient::{FailurePolicy, ResilientStore};
use slidegate::{Algorithm, Decision, Error, Hit, Rate, RedisStore, Rule, Store};

const KEYS: [&str; 3] = ["alice", "bob", "{tag}:carol"];

/// EVALSHA calls the server has answered so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection")
}

/// Pauses every client of the server but the caller for `ms`.
async fn pause(server: &RedisServer, ms: u64) {
    let mut conn = raw(server).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .expect("CLIENT PAUSE");
}

/// One request of a burst: a decision on one key under some rules, or a
/// batch of hits decided all-or-nothing.
#[derive(Clone, Debug)]
enum Request {
    Acquire {
        key: usize,
        rules: Vec<usize>,
        cost: Cost,
    },
    Batch(Vec<(usize, usize, Cost)>),
}

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    /// Exactly one window of a rule, plus -1, 0 or +1 µs.
    AdvanceWindow(usize, i8),
    /// Requests made at once, at one time: the first is sent alone, the
    /// others wait for it and go in calls of at most `max_decisions`.
    Burst(Vec<Request>),
}

fn rule() -> impl Strategy<Value = Rule> {
    let limit = prop_oneof![4 => 1u64..=8, 1 => Just(100u64), 1 => Just(1_000_000_000u64)];
    let window_us = prop_oneof![1_000u64..=5_000, 1_000u64..=3_000_000, Just(1_000_000u64)];
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (limit, window_us, algorithm, burst()).prop_map(|(l, w, a, b)| {
        let rule = Rule::new(Rate::new(l, Duration::from_micros(w)).expect("valid rate"))
            .with_algorithm(a);
        with_burst(rule, b)
    })
}

/// Mostly one rule and a cost of 0 or 1, so that keys repeat within a
/// burst and both admissions and denials come up.
fn request(rules: usize) -> impl Strategy<Value = Request> {
    let small = prop_oneof![2 => Just(Cost::Fixed(0)), 6 => Just(Cost::Fixed(1)), 2 => cost()];
    prop_oneof![
        6 => (0..KEYS.len(), prop::collection::vec(0..rules, 1..=1), small.clone())
            .prop_map(|(key, rules, cost)| Request::Acquire { key, rules, cost }),
        2 => (0..KEYS.len(), prop::collection::vec(0..rules, 2..=3), small.clone())
            .prop_map(|(key, rules, cost)| Request::Acquire { key, rules, cost }),
        1 => prop::collection::vec((0..KEYS.len(), 0..rules, small), 1..=4).prop_map(Request::Batch),
    ]
}

fn op(rules: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => prop_oneof![Just(0u64), 0u64..2_000, 0u64..4_000_000].prop_map(Op::Advance),
        1 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::AdvanceWindow(r, d)),
        6 => prop::collection::vec(request(rules), 1..=40).prop_map(Op::Burst),
    ]
}

/// Start time, rules, the most decisions one call takes, and the ops.
type Scenario = (u64, Vec<Rule>, usize, Vec<Op>);

fn scenario() -> impl Strategy<Value = Scenario> {
    let start = prop_oneof![Just(0u64), 0u64..10_000_000, Just(1_763_800_000_000_000u64)];
    (start, prop::collection::vec(rule(), 1..=3), 1usize..=40).prop_flat_map(
        |(start, rules, max)| {
            let n = rules.len();
            (
                Just(start),
                Just(rules),
                Just(max),
                prop::collection::vec(op(n), 1..12),
            )
        },
    )
}

/// One redis-server, one clock, and the single-threaded runtime every
/// case runs on (its tasks run in the order they were spawned, so the
/// order in which a burst's decisions reach the queue is known).
struct Harness {
    server: RedisServer,
    runtime: tokio::runtime::Runtime,
    clock: ManualClock,
    cases: u32,
    /// Bursts of three or more whose calls were fewer than their decisions.
    coalesced: u32,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            server: RedisServer::start(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime"),
            clock: ManualClock::new(),
            cases: 0,
            coalesced: 0,
        }
    }

    fn store(&self, max_decisions: usize) -> RedisStore {
        self.runtime
            .block_on(
                RedisStore::builder(self.server.url())
                    .prefix(format!("case{}", self.cases))
                    .client_clock(self.clock.clone())
                    .expiry_margin(Duration::from_secs(3600))
                    .timeout(Duration::from_secs(5))
                    .coalesce(Coalesce::on().max_in_flight(1).max_decisions(max_decisions))
                    .build(),
            )
            .expect("the Redis store connects")
    }

    fn run_case(&mut self, (start, rules, max, ops): &Scenario) -> Result<(), TestCaseError> {
        self.cases += 1;
        self.clock.set(*start);
        let store = self.store(*max);
        let mut reference = Reference::default();
        // The script is loaded by the first call: not part of a burst.
        self.runtime
            .block_on(store.acquire("warm", &[rules[0]], 0))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (n_op, op) in ops.iter().enumerate() {
            match op {
                Op::Advance(us) => self.clock.advance(Duration::from_micros(*us)),
                Op::AdvanceWindow(r, delta) => {
                    let us = rules[*r]
                        .window_micros()
                        .saturating_add_signed(i64::from(*delta));
                    self.clock.advance(Duration::from_micros(us));
                }
                Op::Burst(requests) => {
                    let calls = evalsha_calls(&self.server);
                    let got = self.burst(&store, rules, requests);
                    let calls = evalsha_calls(&self.server) - calls;
                    let now = self.clock.now_micros();
                    for (i, (request, got)) in requests.iter().zip(got).enumerate() {
                        let want = decide(&mut reference, now, rules, request);
                        prop_assert_eq!(
                            got,
                            want,
                            "op {}, request {} of {} ({:?}), at {}",
                            n_op,
                            i,
                            requests.len(),
                            request,
                            now
                        );
                    }
                    let sent = requests.len() as u64;
                    prop_assert!(calls <= sent, "{calls} calls for {sent} decisions");
                    if sent >= 3 && calls < sent {
                        self.coalesced += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes every request of `requests` at once, each in a task of its
    /// own spawned in order, and returns their answers in that order.
    fn burst(
        &self,
        store: &RedisStore,
        rules: &[Rule],
        requests: &[Request],
    ) -> Vec<Result<Vec<Decision>, Error>> {
        let tasks: Vec<_> = requests
            .iter()
            .map(|request| {
                let (store, request) = (store.clone(), request.clone());
                let rules = rules.to_vec();
                self.runtime.spawn(async move {
                    match request {
                        Request::Acquire {
                            key,
                            rules: chosen,
                            cost,
                        } => {
                            let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
                            let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                            store
                                .acquire(KEYS[key], &rs, cost.resolve(limit))
                                .await
                                .map(|d| vec![d])
                        }
                        Request::Batch(hits) => {
                            let batch: Vec<Hit<'_>> = hits
                                .iter()
                                .map(|&(k, r, c)| {
                                    Hit::new(KEYS[k], rules[r], c.resolve(rules[r].burst()))
                                })
                                .collect();
                            store.acquire_batch(&batch).await
                        }
                    }
                })
            })
            .collect();
        self.runtime.block_on(async {
            let mut answers = Vec::with_capacity(tasks.len());
            for task in tasks {
                answers.push(task.await.expect("a decision task ran"));
            }
            answers
        })
    }
}

/// What the reference model decides for `request` at `now`.
fn decide(
    reference: &mut Reference,
    now: u64,
    rules: &[Rule],
    request: &Request,
) -> Result<Vec<Decision>, Error> {
    match request {
        Request::Acquire {
            key,
            rules: chosen,
            cost,
        } => {
            let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
            let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
            reference
                .acquire(now, KEYS[*key], &rs, cost.resolve(limit))
                .map(|d| vec![d])
        }
        Request::Batch(hits) => {
            let hits: Vec<(String, Rule, u64)> = hits
                .iter()
                .map(|&(k, r, c)| (KEYS[k].to_owned(), rules[r], c.resolve(rules[r].burst())))
                .collect();
            reference.acquire_batch(now, &hits)
        }
    }
}

/// Bursts of random sizes over three keys (a key repeats within a burst,
/// under the same or other rules, with probes and multi-rule and batch
/// decisions among them), coalesced into calls of random sizes, decide
/// exactly what the reference model decides for the same requests one by
/// one, in the order they were made.
#[test]
fn coalesced_bursts_decide_like_the_reference_model_one_by_one() {
    let mut harness = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 120,
        ..Config::default()
    });
    let cell = std::cell::RefCell::new(&mut harness);
    let result = runner.run(&scenario(), |scenario| {
        cell.borrow_mut().run_case(&scenario)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        harness.coalesced >= 20,
        "only {} bursts were coalesced: the test did not test coalescing",
        harness.coalesced
    );
}

/// 150 tasks from three stores on 20 keys, under a limit that nothing
/// frees during the test: every key admits exactly its limit (coalescing
/// neither loses nor doubles a decision), in far fewer calls than
/// decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_coalesced_decisions_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let rule = Rule::parse("50/1h").expect("a valid rule");
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(
            RedisStore::builder(server.url())
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .expect("the Redis store connects"),
        );
    }
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..20).map(|_| AtomicU64::new(0)).collect());
    let calls = evalsha_calls(&server);
    let mut tasks = Vec::new();
    for t in 0..150u64 {
        let (store, admitted) = (stores[t as usize % 3].clone(), Arc::clone(&admitted));
        tasks.push(tokio::spawn(async move {
            // A cheap PRNG per task: keys in random order.
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = (x % 20) as usize;
                let d = store
                    .acquire(&format!("k{key}"), &[rule], 1)
                    .await
                    .expect("a decision");
                if d.allowed() {
                    admitted[key].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task ran to the end");
    }
    let calls = evalsha_calls(&server) - calls;
    for (key, count) in admitted.iter().enumerate() {
        assert_eq!(count.load(Ordering::Relaxed), 50, "key k{key}");
        let left = stores[0]
            .peek(&format!("k{key}"), &[rule])
            .await
            .expect("a decision");
        assert_eq!(left.remaining(), 0, "key k{key}");
    }
    assert!(calls < 6_000 / 2, "{calls} calls for 6000 decisions");
}

/// Without coalescing, every decision is a call of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coalescing_every_decision_is_its_own_call() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .coalesce(Coalesce::off())
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("1000/1h").expect("a valid rule");
    store.acquire("warm", &[rule], 0).await.expect("a decision");
    let calls = evalsha_calls(&server);
    let mut tasks = Vec::new();
    for t in 0..50 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                store
                    .acquire(&format!("k{}", (t + i) % 7), &[rule], 1)
                    .await
                    .expect("a decision");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task ran to the end");
    }
    assert_eq!(evalsha_calls(&server) - calls, 1000);
}

/// Callers that give up while Redis holds their call (paused) or before
/// their decision was sent: nothing stays queued, no call stays counted
/// in flight, every abandoned decision was decided once or not at all,
/// and the patient callers of the same calls got their answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_leave_leave_no_queue_and_no_decision_half_made() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .coalesce(Coalesce::on().max_in_flight(2).max_decisions(16))
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("1000/1h").expect("a valid rule");
    store.acquire("warm", &[rule], 0).await.expect("a decision");
    pause(&server, 400).await;
    let mut tasks = Vec::new();
    for i in 0..200 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            if i % 4 == 0 {
                store
                    .acquire(&format!("patient{i}"), &[rule], 1)
                    .await
                    .map(Some)
            } else {
                // Gives up long before Redis answers: its future is dropped.
                let left = tokio::time::timeout(
                    Duration::from_millis(30),
                    store.acquire(&format!("impatient{i}"), &[rule], 1),
                )
                .await;
                assert!(left.is_err(), "answered while Redis was paused");
                Ok(None)
            }
        }));
    }
    for task in tasks {
        if let Some(d) = task.await.expect("a task ran").expect("a decision") {
            assert!(d.allowed());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.waiting() + store.calls_in_flight() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} waiting, {} calls in flight",
            store.waiting(),
            store.calls_in_flight()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut decided = 0;
    for i in (0..200).filter(|i| i % 4 != 0) {
        let left = store
            .peek(&format!("impatient{i}"), &[rule])
            .await
            .expect("a decision")
            .remaining();
        assert!(left == 999 || left == 1000, "impatient{i}: {left} left");
        decided += u64::from(left == 999);
    }
    // Those sent before their callers left were decided (at most the calls
    // in flight while Redis was paused: 2 of at most 16); the others were
    // never sent.
    assert!(
        decided <= 32,
        "{decided} of 150 abandoned decisions were made"
    );
}

/// A call that outlives the deadline (Redis paused for longer) degrades
/// each of its decisions by the policy, within the deadline, and the
/// decisions made once Redis answers again are Redis' own: the lane was
/// left in order and no permit of the resilient store was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_degrades_exactly_its_decisions() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(100);
    let redis = RedisStore::builder(server.url())
        .timeout(timeout)
        .build()
        .await
        .expect("the Redis store connects");
    let store = ResilientStore::builder(redis.clone())
        .policy(FailurePolicy::Deny)
        .timeout(timeout)
        .failure_threshold(1_000_000)
        .max_in_flight(64)
        .deny_cache(None)
        .build();
    let rule = Rule::parse("1000/1h").expect("a valid rule");
    store.acquire("warm", &[rule], 0).await.expect("a decision");
    pause(&server, 1_000).await;
    let started = Instant::now();
    let mut stalled = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        stalled.push(tokio::spawn(async move {
            let d = store
                .acquire(&format!("s{i}"), &[rule], 1)
                .await
                .expect("a decision");
            (d, started.elapsed())
        }));
    }
    for task in stalled {
        let (d, after) = task.await.expect("a task ran");
        assert!(d.degraded() && !d.allowed(), "{d:?}");
        assert!(
            after < Duration::from_millis(800),
            "answered after {after:?}"
        );
    }
    // Once Redis answers again, 64 decisions at once (every in-flight
    // permit) are Redis' own.
    tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(started.elapsed())).await;
    let mut fresh = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        fresh.push(tokio::spawn(async move {
            let mut d = store.acquire(&format!("f{i}"), &[rule], 1).await;
            // On a busy machine one round trip can miss the deadline.
            for _ in 0..20 {
                match &d {
                    Ok(decision) if decision.degraded() => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        d = store.acquire(&format!("f{i}"), &[rule], 1).await;
                    }
                    _ => break,
                }
            }
            d
        }));
    }
    for task in fresh {
        let d = task.await.expect("a task ran").expect("a decision");
        assert!(d.allowed() && !d.degraded(), "{d:?}");
    }
    assert_eq!(redis.waiting(), 0);
}

/// A key that holds a foreign value refuses the decisions on it, each
/// with its own typed error, while the decisions coalesced with them in
/// the same calls are decided as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_conflict_in_a_coalesced_call_is_its_decisions_alone() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(5))
        .coalesce(Coalesce::on().max_in_flight(1))
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("1000/1h").expect("a valid rule");
    let mut conn = raw(&server).await;
    let _: () = conn
        .lpush(store.state_key("list", rule), "a list")
        .await
        .expect("LPUSH");
    let _: () = conn
        .set(store.state_key("text", rule), "not a log")
        .await
        .expect("SET");
    store.acquire("warm", &[rule], 0).await.expect("a decision");
    let calls = evalsha_calls(&server);
    let mut tasks = Vec::new();
    for i in 0..60 {
        let store = store.clone();
        let key = match i % 3 {
            0 => "list".to_owned(),
            1 => "text".to_owned(),
            _ => format!("plain{i}"),
        };
        tasks.push(tokio::spawn(async move {
            (key.clone(), store.acquire(&key, &[rule], 1).await)
        }));
    }
    for task in tasks {
        match task.await.expect("a task ran") {
            (key, Ok(d)) => assert!(key.starts_with("plain") && d.allowed(), "{key}: {d:?}"),
            (key, Err(Error::KeyConflict { key: named, .. })) => {
                assert!(key == "list" || key == "text");
                assert_eq!(named, key);
            }
            (key, Err(other)) => panic!("{key}: {other:?}"),
        }
    }
    assert!(evalsha_calls(&server) - calls < 60);
}
