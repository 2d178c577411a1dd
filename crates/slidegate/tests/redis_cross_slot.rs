//! Batches over keys in several slots of a local 3-master Redis Cluster
//! are all or nothing: a denied batch leaves no charge (the slots that
//! recorded are undone), whatever the algorithm and the slot order, when a
//! slot fails half-way, when the caller gives up half-way, when the
//! window a cost was counted in has moved on before its undo, and under
//! concurrent batches on shared keys (random interleavings: no window ever
//! above its limit, and every charge left is an admitted batch's). One
//! cluster serves every check (it takes a few seconds to form).

mod common;

use slidegate::store::memory::CompactString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::redis_log::decode_log;
use common::redis_server::{RedisCluster, key_slot};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use slidegate::{Algorithm, Decision, Error, Hit, RedisStore, Rule, Store};

fn rule(s: &str) -> Rule {
    Rule::parse(s).expect("a valid rule")
}

/// A key named `{prefix}N` whose slot satisfies `fits`.
fn key_where(prefix: &str, fits: impl Fn(u16) -> bool) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| fits(key_slot(k)))
        .expect("a key in a fitting slot")
}

struct Harness {
    cluster: RedisCluster,
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    cases: u32,
}

#[test]
fn batches_across_slots_are_all_or_nothing() {
    let cluster = RedisCluster::start_with(&["--enable-debug-command", "yes"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let store = runtime
        .block_on(
            RedisStore::builder(cluster.url())
                .timeout(Duration::from_secs(2))
                .build(),
        )
        .expect("the Redis store connects to the cluster");
    let mut harness = Harness {
        cluster,
        runtime,
        store,
        cases: 0,
    };
    a_user_over_their_limit_never_charges_the_tenant(&harness);
    a_batch_failing_half_way_is_undone(&harness);
    a_batch_its_caller_gave_up_on_is_undone(&harness);
    a_gcra_undo_gives_back_only_what_has_not_drained(&harness);
    window_counters_undone_after_their_window_moved_on_decide_as_if_never_charged(&harness);
    concurrent_batches_never_overadmit_nor_leave_a_denied_charge(&mut harness);
}

/// `{tenant 5/min, user 1/min}`: after the user's one admission, ten
/// denied requests of that user leave the tenant with exactly 4, for every
/// algorithm of the tenant's limit, the tenant's slot before the user's
/// (recorded, then undone) or after it (never recorded).
fn a_user_over_their_limit_never_charges_the_tenant(h: &Harness) {
    let user_rule = rule("1/1m");
    for algorithm in Algorithm::ALL {
        let tenant_rule = rule("5/1m").with_algorithm(algorithm);
        for tenant_first in [true, false] {
            let user = key_where(&format!("user:{algorithm}:{tenant_first}:"), |s| {
                (1_000..15_000).contains(&s)
            });
            let user_slot = key_slot(&user);
            let tenant = key_where(&format!("tenant:{algorithm}:{tenant_first}:"), |s| {
                if tenant_first {
                    s < user_slot
                } else {
                    s > user_slot
                }
            });
            let what = format!("{algorithm}, tenant slot first: {tenant_first}");
            let batch = [
                Hit::new(tenant.as_str(), tenant_rule, 1),
                Hit::new(user.as_str(), user_rule, 1),
            ];
            let first = h
                .runtime
                .block_on(h.store.acquire_batch(&batch))
                .expect("decisions");
            assert!(first.iter().all(Decision::allowed), "{what}");
            for _ in 0..10 {
                let denied = h
                    .runtime
                    .block_on(h.store.acquire_batch(&batch))
                    .expect("decisions");
                assert!(!denied[1].allowed(), "{what}: the user is over their limit");
                assert!(
                    denied[0].allowed() && denied[0].remaining() == 4,
                    "{what}: the tenant reports its state, uncharged: {:?}",
                    denied[0]
                );
            }
            let tenant_left = h
                .runtime
                .block_on(h.store.peek(&tenant, &[tenant_rule]))
                .expect("a decision");
            assert_eq!(tenant_left.remaining(), 4, "{what}");
        }
    }
}

/// The second slot holds a foreign value: the batch fails with that key's
/// error, and the first slot's admission is undone (in the background).
fn a_batch_failing_half_way_is_undone(h: &Harness) {
    let r = rule("5/1m");
    let second = key_where("broken:", |s| s > 8_000);
    let first = key_where("fine:", |s| s < key_slot(&second));
    let redis_key = h.store.state_key(&second, r);
    let owner = h.cluster.master_of(key_slot(&second)).expect("a master");
    assert_eq!(
        owner.command(&["SET", &redis_key, "not a log"]).as_deref(),
        Some("OK")
    );
    let batch = [
        Hit::new(first.as_str(), r, 2),
        Hit::new(second.as_str(), r, 1),
    ];
    let err = h
        .runtime
        .block_on(h.store.acquire_batch(&batch))
        .expect_err("a foreign value");
    assert!(
        matches!(&err, Error::KeyConflict { key, .. } if *key == second),
        "{err:?}"
    );
    until_remaining(h, &first, r, 5, "the first slot's 2 units were given back");
}

/// The caller drops the batch while the second slot's master sleeps: the
/// first slot recorded, the second records when its master wakes; both
/// are undone, the second right after its record runs.
fn a_batch_its_caller_gave_up_on_is_undone(h: &Harness) {
    let r = rule("3/1m");
    let second = key_where("late:", |s| s > 8_000);
    let second_master = h
        .cluster
        .master_of(key_slot(&second))
        .expect("a master")
        .port();
    let first = key_where("early:", |s| {
        s < key_slot(&second)
            && h.cluster
                .master_of(s)
                .is_some_and(|m| m.port() != second_master)
    });
    let sleeper = {
        let port = second_master;
        std::thread::spawn(move || {
            common::redis_server::command_on(port, &["DEBUG", "SLEEP", "0.6"])
        })
    };
    common::redis_server::wait_until_asleep(second_master);
    let batch = [
        Hit::new(first.as_str(), r, 1),
        Hit::new(second.as_str(), r, 2),
    ];
    let gave_up = h.runtime.block_on(async {
        tokio::time::timeout(Duration::from_millis(150), h.store.acquire_batch(&batch)).await
    });
    assert!(
        gave_up.is_err(),
        "the second master was asleep: {gave_up:?}"
    );
    assert_eq!(sleeper.join().expect("DEBUG SLEEP").as_deref(), Some("OK"));
    until_remaining(h, &first, r, 3, "the first slot was undone");
    until_remaining(
        h,
        &second,
        r,
        3,
        "the second slot was undone after it recorded",
    );
}

/// GCRA, 4 per 4 s (one unit drains per second). A batch records 1 unit
/// on the tenant at t, then waits on the user's sleeping master; meanwhile
/// the meter drains (the clock moves 1.5 s) and another request takes 1
/// unit at t + 1.5 s. The batch is then denied by the user's limit and the
/// tenant undone: the unit it took had drained, so nothing is given back,
/// and the tenant keeps the other request's unit (3 left). Subtracting the
/// unit anyway would leave 4: one more admission than the meter allows.
fn a_gcra_undo_gives_back_only_what_has_not_drained(h: &Harness) {
    let clock = slidegate::clock::ManualClock::at(1_763_800_000_000_000);
    let store = h
        .runtime
        .block_on(
            RedisStore::builder(h.cluster.url())
                .client_clock(clock.clone())
                // Longer than the user's master sleeps.
                .timeout(Duration::from_secs(5))
                .build(),
        )
        .expect("the Redis store connects to the cluster");
    let (tenant_rule, user_rule) = (rule("4/4s").with_algorithm(Algorithm::Gcra), rule("1/1m"));
    let user = key_where("gcra-user:", |s| s > 8_000);
    let user_master = h
        .cluster
        .master_of(key_slot(&user))
        .expect("a master")
        .port();
    let tenant = key_where("gcra-tenant:", |s| {
        s < key_slot(&user)
            && h.cluster
                .master_of(s)
                .is_some_and(|m| m.port() != user_master)
    });
    let filled = h.runtime.block_on(store.acquire(&user, &[user_rule], 1));
    assert!(filled.expect("a decision").allowed());
    // 1.5 s: the batch, the peeks and the other request all come within
    // it, on a loaded machine too (0.5 s, with a 400 ms bound on the first
    // peek, left one stall of a few hundred ms no room).
    let sleeper = std::thread::spawn(move || {
        common::redis_server::command_on(user_master, &["DEBUG", "SLEEP", "1.5"])
    });
    common::redis_server::wait_until_asleep(user_master);
    let batch = {
        let (store, tenant, user) = (store.clone(), tenant.clone(), user.clone());
        h.runtime.spawn(async move {
            let batch = [
                Hit::new(tenant.as_str(), tenant_rule, 1),
                Hit::new(user.as_str(), user_rule, 1),
            ];
            store.acquire_batch(&batch).await
        })
    };
    // The tenant's unit is recorded; the batch waits on the user's master.
    let start = Instant::now();
    while h
        .runtime
        .block_on(store.peek(&tenant, &[tenant_rule]))
        .expect("a decision")
        .remaining()
        != 3
    {
        assert!(
            start.elapsed() < Duration::from_millis(1_200),
            "the tenant was never charged"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    clock.advance(Duration::from_millis(1_500));
    let other = h
        .runtime
        .block_on(store.acquire(&tenant, &[tenant_rule], 1))
        .expect("a decision");
    assert!(other.allowed() && other.remaining() == 3, "{other:?}");
    assert!(
        !batch.is_finished(),
        "the user's master woke before the other request was made: the machine is too busy"
    );
    let denied = h
        .runtime
        .block_on(batch)
        .expect("the batch ran")
        .expect("decisions");
    assert!(!denied[1].allowed(), "the user is over their limit");
    assert_eq!(sleeper.join().expect("DEBUG SLEEP").as_deref(), Some("OK"));
    let left = h
        .runtime
        .block_on(store.peek(&tenant, &[tenant_rule]))
        .expect("a decision");
    assert_eq!(left.remaining(), 3, "only the other request's unit is held");
}

/// When a tenant's state moves on while an undo is on its way: one undo
/// case of a fixed window or sliding counter tenant.
#[derive(Clone, Copy, Debug)]
enum Moved {
    /// Nothing moved it, though the undo runs a window later: the cost
    /// is taken from the count it was added to.
    Never,
    /// Another request moved it `n` windows on (0: it stayed in the
    /// window the cost was counted in): the cost is taken from the current
    /// count (0), from the previous one (1, a sliding counter), or not at
    /// all (a fixed window moved on, or a sliding counter two windows on).
    By(u64),
}

/// One case: the tenants' limit, the costs (prefilled, the batch's, the
/// other requests': they fit the limit together), when the batches record
/// (µs into a day) and how long after it the other requests come and the
/// undos run, and where the search for each tenant's window starts.
#[derive(Clone, Debug)]
struct MovedOn {
    limit: u64,
    prefill: u64,
    cost: u64,
    other: u64,
    recorded_at: u64,
    later: u64,
    search_from: u16,
}

fn moved_on() -> impl Strategy<Value = MovedOn> {
    let times = (0u64..86_400_000_000, 1_500_000u64..=6_000_000, any::<u16>());
    (3u64..=8, times).prop_flat_map(|(limit, (recorded_at, later, search_from))| {
        (1..=limit - 2).prop_flat_map(move |cost| {
            (0..=limit - 1 - cost).prop_flat_map(move |prefill| {
                (1..=limit - cost - prefill).prop_map(move |other| MovedOn {
                    limit,
                    prefill,
                    cost,
                    other,
                    recorded_at,
                    later,
                    search_from,
                })
            })
        })
    })
}

/// A window under which `to` lies `moved` windows after `from` (a tenant
/// with no other request: one window), and, when they differ, early in
/// its window (a tenth at most), where a sliding counter still weighs
/// nearly all of the previous window. Searched from `from_fraction` (of
/// 65536) into a range that holds many.
fn window_between(from: u64, to: u64, moved: Moved, from_fraction: u16) -> u64 {
    let n = match moved {
        Moved::Never => 1,
        Moved::By(n) => n,
    };
    let span = to - from;
    // Windows of span / (n + 1) to span / n hold n boundaries or fewer.
    let (lo, hi) = match n {
        0 => (2 * span, 4 * span),
        n => (span / (n + 1), span / n),
    };
    let first = lo + (hi - lo) * u64::from(from_fraction) / 65_536;
    (first..hi)
        .chain(lo..first)
        .find(|&w| to / w - from / w == n && (n == 0 || to % w <= w / 10))
        .expect("a window that fits")
}

/// Batches of a tenant hit (fixed window or sliding counter) and a user
/// hit that denies, held up on the user's sleeping master after the
/// tenant recorded; meanwhile other requests move some tenants' states on
/// by 0, 1 or 2 windows (each tenant's window is chosen for it, and a
/// request comes in every window it moves through), one tenant's not at
/// all, then the batches are denied and undone. Each
/// tenant then decides exactly as a memory store that never saw the
/// batch, right after and a while later: the undo took the cost from the
/// window it was counted in (the previous count once the window moved on
/// by one), or nothing once that window stopped counting.
fn window_counters_undone_after_their_window_moved_on_decide_as_if_never_charged(h: &Harness) {
    let mut runner = TestRunner::new(Config {
        cases: 3,
        // Each case puts a master to sleep for 1.5 s.
        max_shrink_iters: 4,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0);
    let result = runner.run(&moved_on(), |c| {
        case.set(case.get() + 1);
        undo_after_the_window_moved_on(h, case.get(), &c)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn undo_after_the_window_moved_on(
    h: &Harness,
    case: u32,
    c: &MovedOn,
) -> Result<(), TestCaseError> {
    let recorded_at = 1_763_769_600_000_000 + c.recorded_at;
    let undone_at = recorded_at + c.later;
    let clock = slidegate::clock::ManualClock::at(recorded_at);
    let store = h
        .runtime
        .block_on(
            RedisStore::builder(h.cluster.url())
                .client_clock(clock.clone())
                .expiry_margin(Duration::from_secs(3600))
                .timeout(Duration::from_secs(5))
                .build(),
        )
        .expect("the Redis store connects to the cluster");
    let memory: slidegate::MemoryStore<CompactString, slidegate::clock::ManualClock> =
        slidegate::MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build();
    let user_rule = rule("1/1m");
    let user = key_where(&format!("moved{case}-user:"), |s| s > 8_000);
    let user_master = h
        .cluster
        .master_of(key_slot(&user))
        .expect("a master")
        .port();
    let moves = [Moved::Never, Moved::By(0), Moved::By(1), Moved::By(2)];
    let tenants: Vec<(Rule, Moved, String)> = [Algorithm::FixedWindow, Algorithm::SlidingCounter]
        .into_iter()
        .flat_map(|algorithm| moves.map(|moved| (algorithm, moved)))
        .map(|(algorithm, moved)| {
            let window = window_between(recorded_at, undone_at, moved, c.search_from);
            let rate =
                slidegate::Rate::new(c.limit, Duration::from_micros(window)).expect("a rate");
            let tenant = key_where(&format!("moved{case}-{algorithm}-{moved:?}:"), |s| {
                s < key_slot(&user)
                    && h.cluster
                        .master_of(s)
                        .is_some_and(|m| m.port() != user_master)
            });
            (Rule::new(rate).with_algorithm(algorithm), moved, tenant)
        })
        .collect();
    // A request on both stores, which fits both (on Redis, with the
    // batch's charge, not yet undone, counted).
    let both = |key: &str, r: Rule, cost: u64| -> Result<(), TestCaseError> {
        let want = memory.acquire(key, &[r], cost);
        let got = h.runtime.block_on(store.acquire(key, &[r], cost));
        let fits = |d: &Result<slidegate::Decision, Error>| d.as_ref().is_ok_and(|d| d.allowed());
        prop_assert!(
            fits(&got) && fits(&want),
            "{} at {}: {:?}, {:?}",
            key,
            clock_now(&clock),
            got,
            want
        );
        Ok(())
    };
    for (r, _, tenant) in &tenants {
        if c.prefill > 0 {
            both(tenant, *r, c.prefill)?;
        }
    }
    let filled = h.runtime.block_on(store.acquire(&user, &[user_rule], 1));
    prop_assert!(filled.is_ok_and(|d| d.allowed()));
    // 1.5 s (under the fixture's 2 s read timeout): every tenant charged
    // and every other request made within it, on a loaded machine too
    // (1 s, with a 700 ms bound on the charges, left little room there).
    let sleeper = std::thread::spawn(move || {
        common::redis_server::command_on(user_master, &["DEBUG", "SLEEP", "1.5"])
    });
    common::redis_server::wait_until_asleep(user_master);
    let batches: Vec<_> = tenants
        .iter()
        .map(|(r, _, tenant)| {
            let (store, tenant, user, r, cost) =
                (store.clone(), tenant.clone(), user.clone(), *r, c.cost);
            h.runtime.spawn(async move {
                let batch = [
                    Hit::new(tenant.as_str(), r, cost),
                    Hit::new(user.as_str(), user_rule, 1),
                ];
                store.acquire_batch(&batch).await
            })
        })
        .collect();
    // Every tenant recorded; every batch waits on the user's master.
    let charged = Instant::now();
    for (r, _, tenant) in &tenants {
        let left = c.limit - c.prefill - c.cost;
        while h
            .runtime
            .block_on(store.peek(tenant, &[*r]))
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .remaining()
            != left
        {
            prop_assert!(
                charged.elapsed() < Duration::from_millis(1_200),
                "{} was never charged",
                tenant
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // The other requests, moving each tenant's state by its windows: one
    // at the start of every window it moves through (so that a sliding
    // counter moved by two has a previous count), the last when the undos
    // run.
    // Those on the way cost 1, so the last one fits the previous count.
    let mut others: Vec<(u64, usize, u64)> = Vec::new();
    for (i, (r, moved, _)) in tenants.iter().enumerate() {
        if let Moved::By(n) = moved {
            let w = r.window_micros();
            others.extend((1..*n).map(|j| ((recorded_at / w + j) * w, i, 1)));
            others.push((undone_at, i, c.other));
        }
    }
    others.sort_unstable();
    for (at, i, cost) in others {
        let (r, _, tenant) = &tenants[i];
        clock.set(at);
        both(tenant, *r, cost)?;
    }
    prop_assert!(
        batches.iter().all(|b| !b.is_finished()),
        "the user's master woke before the other requests were made: the machine is too busy"
    );
    let slept = sleeper.join().expect("DEBUG SLEEP");
    prop_assert_eq!(slept.as_deref(), Some("OK"));
    for batch in batches {
        let denied = h
            .runtime
            .block_on(batch)
            .expect("the batch ran")
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!denied[1].allowed(), "the user is over their limit");
    }
    for later in [0, c.later / 2] {
        clock.set(undone_at + later);
        for (r, moved, tenant) in &tenants {
            let want = memory.peek(tenant.as_str(), &[*r]);
            let got = h.runtime.block_on(store.peek(tenant, &[*r]));
            prop_assert_eq!(
                got,
                want,
                "{} {:?} ({} µs windows) at {}",
                r.algorithm(),
                moved,
                r.window_micros(),
                clock_now(&clock)
            );
        }
    }
    Ok(())
}

fn clock_now(clock: &slidegate::clock::ManualClock) -> u64 {
    use slidegate::clock::Clock;
    clock.now_micros()
}

fn until_remaining(h: &Harness, key: &str, r: Rule, want: u64, what: &str) {
    let start = Instant::now();
    loop {
        let d = h
            .runtime
            .block_on(h.store.peek(key, &[r]))
            .expect("a decision");
        if d.remaining() == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{what}: {key} has {} left, not {want}",
            d.remaining()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A request of a random run and what the store answered.
type Answered = (Request, Result<Vec<Decision>, Error>);

/// One request of a random run: a tenant-wide hit and a per-user hit.
#[derive(Clone, Debug)]
struct Request {
    user: usize,
    tenant_cost: u64,
    user_cost: u64,
}

fn requests() -> impl Strategy<Value = (Rule, Vec<Request>)> {
    let request =
        (0usize..4, 1u64..=3, 1u64..=2).prop_map(|(user, tenant_cost, user_cost)| Request {
            user,
            tenant_cost,
            user_cost,
        });
    // A day-long window: a run (well under a second) never spans the
    // boundary of a fixed window or of a sliding counter's window.
    let tenant = (4u64..=12, prop::sample::select(Algorithm::ALL.to_vec()))
        .prop_map(|(limit, algorithm)| rule(&format!("{limit}/1d")).with_algorithm(algorithm));
    (tenant, prop::collection::vec(request, 10..40))
}

/// Random runs of concurrent batches over one tenant and four users (8
/// tasks at once, so the order in which slots record and undo interleaves
/// differently each time). Once every request has returned: each user's
/// log, and the tenant's when it is a sliding log, holds exactly the costs
/// of the batches admitted (a denied batch left nothing), never more than
/// the limit (the run fits in one window); the tenant's other algorithms
/// have exactly the limit less what was admitted left (GCRA: that, or one
/// less, as an undo gives back only what has not drained, and what drained
/// while undos were on their way adds up).
fn concurrent_batches_never_overadmit_nor_leave_a_denied_charge(h: &mut Harness) {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let h = std::cell::RefCell::new(h);
    let result = runner.run(&requests(), |(tenant_rule, requests)| {
        h.borrow_mut().run_case(tenant_rule, &requests)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

impl Harness {
    fn run_case(&mut self, tenant_rule: Rule, requests: &[Request]) -> Result<(), TestCaseError> {
        self.cases += 1;
        let case = self.cases;
        let tenant_limit = tenant_rule.limit();
        let user_rule = rule("3/1d");
        let tenant = format!("case{case}:tenant");
        let users: Vec<String> = (0..4).map(|u| format!("case{case}:user{u}")).collect();
        let queue = Arc::new(Mutex::new(requests.to_vec()));
        let answers: Arc<Mutex<Vec<Answered>>> = Arc::default();
        self.runtime.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let (store, queue, answers) = (self.store.clone(), queue.clone(), answers.clone());
                let (tenant, users) = (tenant.clone(), users.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        let Some(request) = queue.lock().expect("the queue").pop() else {
                            return;
                        };
                        let batch = [
                            Hit::new(tenant.as_str(), tenant_rule, request.tenant_cost),
                            Hit::new(users[request.user].as_str(), user_rule, request.user_cost),
                        ];
                        let answer = store.acquire_batch(&batch).await;
                        answers.lock().expect("the answers").push((request, answer));
                    }
                }));
            }
            for task in tasks {
                task.await.expect("a task ran to the end");
            }
        });
        let answers = answers.lock().expect("the answers").clone();
        let mut admitted_tenant = 0;
        let mut admitted_users = [0u64; 4];
        for (request, answer) in &answers {
            let decisions = answer
                .as_ref()
                .map_err(|e| TestCaseError::fail(format!("{request:?}: {e}")))?;
            if decisions.iter().all(Decision::allowed) {
                admitted_tenant += request.tenant_cost;
                admitted_users[request.user] += request.user_cost;
            }
        }
        let mut conn = self.runtime.block_on(async {
            redis::cluster::ClusterClient::new(self.cluster.node_urls())
                .expect("a cluster client")
                .get_async_connection()
                .await
                .expect("a connection")
        });
        let mut recorded = |key: &str, r: Rule| -> u64 {
            self.runtime.block_on(async {
                let raw: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(self.store.state_key(key, r))
                    .query_async(&mut conn)
                    .await
                    .expect("GET");
                decode_log(&raw.unwrap_or_default())
                    .iter()
                    .map(|(_, c)| c)
                    .sum()
            })
        };
        prop_assert!(admitted_tenant <= tenant_limit);
        if tenant_rule.algorithm() == Algorithm::SlidingLog {
            let tenant_recorded = recorded(&tenant, tenant_rule);
            prop_assert_eq!(tenant_recorded, admitted_tenant, "the tenant's log");
        } else {
            let left = self
                .runtime
                .block_on(self.store.peek(&tenant, &[tenant_rule]))
                .map_err(|e| TestCaseError::fail(e.to_string()))?
                .remaining();
            let exact = tenant_limit - admitted_tenant;
            let ok =
                left == exact || (tenant_rule.algorithm() == Algorithm::Gcra && left + 1 == exact);
            prop_assert!(
                ok,
                "{}: {} left, {} admitted",
                tenant_rule.algorithm(),
                left,
                admitted_tenant
            );
        }
        for (u, user) in users.iter().enumerate() {
            let user_recorded = recorded(user, user_rule);
            prop_assert_eq!(user_recorded, admitted_users[u], "user {}", u);
            prop_assert!(user_recorded <= 3);
        }
        Ok(())
    }
}
