//! The Redis store on a real redis-server: exactness under concurrency from
//! several stores (the sliding log on Redis' clock; every algorithm and
//! option on a client clock), script cache loss, expiry of idle keys,
//! probes, resets, the storage layout and typed errors.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::contention::{self, Request};
use common::exactness::{self, Seen};
use common::redis_log::{encode_log, getranges_during, read_log, read_log_until};
use common::redis_server::RedisServer;
use redis::AsyncCommands;
use slidegate::clock::{Clock, ManualClock};
use slidegate::{Algorithm, Error, Hit, RedisStore, Rule, Store};

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the Redis store connects")
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stores_and_96_tasks_never_admit_more_than_the_limit_in_any_window() {
    let server = RedisServer::start();
    // A 1 s window, three of them: the reader below may pause 750 ms (with
    // 300 ms windows it could pause 250 ms, which the reader's thread, one
    // of many on a loaded 2-core machine, can exceed).
    let rule = Rule::parse("20/1s").expect("a valid rule");
    let key = "hot";
    let stores = [
        store(&server).await,
        store(&server).await,
        store(&server).await,
    ];
    let redis_key = stores[0].state_key(key, rule);
    let admitted = Arc::new(AtomicU64::new(0));
    let denied = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(3_000);
    // An entry lives a window and the log is read every 20 ms, so every one
    // is seen, with its final cost once Redis' clock has passed it.
    let reader = read_log_until(
        server.url(),
        redis_key,
        deadline + Duration::from_millis(100),
    );
    let mut tasks = Vec::new();
    for store in &stores {
        for _ in 0..32 {
            let (store, admitted, denied) = (store.clone(), admitted.clone(), denied.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let d = store.acquire(key, &[rule], 1).await.expect("a decision");
                    let counter = if d.allowed() { &admitted } else { &denied };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task ran to the end");
    }
    let (seen, longest_gap) = reader.join().expect("the reader ran");
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(admitted >= 40 && denied.load(Ordering::Relaxed) > admitted);
    assert!(
        longest_gap < Duration::from_millis(750),
        "the reader stalled for {longest_gap:?}: the machine is too busy for this test"
    );
    assert_eq!(
        seen.values().sum::<u64>(),
        admitted,
        "every admission was read back"
    );
    let times: Vec<(u64, u64)> = seen.into_iter().collect();
    for (i, &(from, _)) in times.iter().enumerate() {
        let in_window: u64 = times[i..]
            .iter()
            .take_while(|(at, _)| *at <= from + rule.window_micros())
            .map(|(_, c)| c)
            .sum();
        assert!(
            in_window <= 20,
            "{in_window} admissions in [{from}, {from} + W]"
        );
    }
}

/// Every algorithm, plain, with a lockout, reporting usage, and both (one
/// key each), asked by 48 tasks through three independent stores at once,
/// in rounds at one frozen time each (a client clock that all three
/// read): each rule's promise holds at every instant (see
/// `common/exactness.rs`), whatever order Redis decided them in, alone or
/// coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_and_option_keeps_its_promise_from_three_stores_and_48_tasks() {
    const STORES: usize = 3;
    const TASKS_PER_STORE: usize = 16;
    const CLIENTS: usize = STORES * TASKS_PER_STORE;
    const ROUNDS: usize = 240;
    let server = RedisServer::start();
    let cases = Arc::new(contention::cases());
    let times = contention::round_times(ROUNDS);
    let clock = ManualClock::at(times[0]);
    let mut stores = Vec::new();
    for _ in 0..STORES {
        let store = RedisStore::builder(server.url())
            .client_clock(clock.clone())
            .expiry_margin(Duration::from_secs(3600))
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("the Redis store connects");
        stores.push(store);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let store = stores[client % STORES].clone();
            let (cases, barrier, clock) = (Arc::clone(&cases), Arc::clone(&barrier), clock.clone());
            tokio::spawn(async move {
                let mut seen = vec![Vec::new(); cases.len()];
                for round in 0..ROUNDS {
                    barrier.wait().await;
                    let at = clock.now_micros();
                    // Each task starts on another key.
                    for c in (0..cases.len()).map(|k| (k + client) % cases.len()) {
                        if !contention::takes_part(CLIENTS, client, c, round) {
                            continue;
                        }
                        let (key, rule) = (cases[c].key.as_str(), cases[c].rule);
                        let name = &cases[c].name;
                        // A report follows a check that passed.
                        if rule.reports() {
                            let check = store.acquire(key, &[rule], 0).await;
                            let allowed = check.unwrap_or_else(|e| panic!("{name}: {e}")).allowed();
                            seen[c].push(Seen {
                                at,
                                cost: 0,
                                allowed,
                            });
                            if !allowed {
                                continue;
                            }
                        }
                        let request = Request::of(rule, client, round, 0);
                        let allowed = match request {
                            Request::One(cost) => {
                                store.acquire(key, &[rule], cost).await.map(|d| d.allowed())
                            }
                            Request::Twice(cost) => store
                                .acquire_batch(&[Hit::new(key, rule, cost); 2])
                                .await
                                .map(|ds| ds.iter().all(|d| d.allowed())),
                        }
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                        let cost = request.cost();
                        seen[c].push(Seen { at, cost, allowed });
                    }
                    barrier.wait().await;
                }
                seen
            })
        })
        .collect();
    for &at in &times {
        clock.set(at);
        barrier.wait().await;
        barrier.wait().await;
    }
    let mut seen = vec![Vec::new(); cases.len()];
    for task in tasks {
        for (all, mine) in seen.iter_mut().zip(task.await.expect("a task ran")) {
            all.extend(mine);
        }
    }
    exactness::assert_kept(&cases, &seen);
}

#[tokio::test]
async fn script_flush_in_the_middle_of_a_run_causes_no_errors() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let rules = [Rule::parse("1000/1s").expect("a valid rule")];
    let deadline = Instant::now() + Duration::from_millis(600);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            while Instant::now() < deadline {
                if let Err(e) = store.acquire(&format!("k{t}"), &rules, 1).await {
                    errors.push(e);
                }
            }
            errors
        }));
    }
    let mut conn = raw(&server).await;
    let mut flushes = 0;
    while Instant::now() < deadline {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .expect("SCRIPT FLUSH");
        flushes += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(flushes >= 5);
    for task in tasks {
        assert_eq!(task.await.expect("a task ran"), Vec::<Error>::new());
    }
}

#[tokio::test]
async fn idle_keys_are_gone_soon_after_their_window() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let mut conn = raw(&server).await;
    let rate = Rule::parse("5/100ms").expect("a valid rule");
    let mut keys = Vec::new();
    for algorithm in Algorithm::ALL {
        let rule = rate.with_algorithm(algorithm);
        assert!(
            store
                .acquire("idle", &[rule], 1)
                .await
                .expect("a decision")
                .allowed()
        );
        let key = store.state_key("idle", rule);
        let ttl: i64 = conn.pttl(&key).await.expect("PTTL");
        // Idle after one window (two for the sliding counter), rounded up,
        // plus the 1 ms margin.
        assert!(ttl > 0 && ttl <= 202, "{algorithm}: PTTL {ttl}");
        keys.push(key);
    }
    tokio::time::sleep(Duration::from_millis(260)).await;
    for key in keys {
        let exists: bool = conn.exists(&key).await.expect("EXISTS");
        assert!(!exists, "{key} outlived its window");
    }
}

#[tokio::test]
async fn probes_never_create_keys() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let mut conn = raw(&server).await;
    for algorithm in Algorithm::ALL {
        let rule = Rule::parse("3/1s")
            .expect("a valid rule")
            .with_algorithm(algorithm);
        let probe = store.peek("nobody", &[rule]).await.expect("a decision");
        assert!(probe.allowed());
        assert_eq!(probe.remaining(), 3);
        let batch = [Hit::new("nobody", rule, 0), Hit::new("{x}:other", rule, 0)];
        store.acquire_batch(&batch).await.expect("decisions");
    }
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(&mut conn)
        .await
        .expect("DBSIZE");
    assert_eq!(keys, 0);
}

#[tokio::test]
async fn reset_deletes_every_rule_of_the_key_and_nothing_else() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let mut conn = raw(&server).await;
    let rules: Vec<Rule> = Algorithm::ALL
        .iter()
        .map(|a| {
            Rule::parse("5/1m")
                .expect("a valid rule")
                .with_algorithm(*a)
        })
        .collect();
    for key in ["user:{1}:a", "user:{1}:a:5/1s", "user:{1}:ab", "a*b", "axb"] {
        store.acquire(key, &rules, 1).await.expect("a decision");
    }
    store.reset("user:{1}:a").await.expect("reset");
    store.reset("a*b").await.expect("reset");
    let mut left: Vec<String> = conn.keys("*").await.expect("KEYS");
    left.sort();
    let mut want: Vec<String> = ["user:{1}:a:5/1s", "user:{1}:ab", "axb"]
        .iter()
        .flat_map(|k| rules.iter().map(|r| store.state_key(k, *r)))
        .collect();
    want.sort();
    assert_eq!(left, want);
    let fresh = store.peek("user:{1}:a", &rules).await.expect("a decision");
    assert_eq!(fresh.remaining(), 5);
}

#[tokio::test]
async fn a_sliding_log_costs_less_than_half_a_uuid_sorted_set() {
    let server = RedisServer::start();
    let clock = ManualClock::at(1_763_800_000_000_000);
    let store = RedisStore::builder(server.url())
        .client_clock(clock.clone())
        .build()
        .await
        .expect("the Redis store connects");
    let mut conn = raw(&server).await;
    for limit in [10u64, 100, 1000] {
        let rule = Rule::parse(&format!("{limit}/1m")).expect("a valid rule");
        let key = format!("mem{limit}");
        let zset = format!("uuid{limit}");
        for i in 0..limit {
            clock.advance(Duration::from_micros(997));
            assert!(
                store
                    .acquire(&key, &[rule], 1)
                    .await
                    .expect("a decision")
                    .allowed()
            );
            let member = format!("{:08x}-{:04x}-4000-8000-{:012x}", i, i % 65536, i * 7919);
            let score = 1_763_800_000_000 + i;
            let _: () = conn.zadd(&zset, member, score).await.expect("ZADD");
        }
        let ours: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(store.state_key(&key, rule))
            .query_async(&mut conn)
            .await
            .expect("MEMORY USAGE");
        let uuid: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&zset)
            .query_async(&mut conn)
            .await
            .expect("MEMORY USAGE");
        assert!(
            2 * ours <= uuid,
            "limit {limit}: {ours} bytes against {uuid} for a UUID sorted set"
        );
    }
}

#[tokio::test]
async fn server_clock_decides_on_redis_time() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let rule = Rule::parse("3/1s").expect("a valid rule");
    for left in [2, 1, 0] {
        let d = store.acquire("k", &[rule], 1).await.expect("a decision");
        assert!(d.allowed());
        assert_eq!(d.remaining(), left);
    }
    let denied = store.acquire("k", &[rule], 1).await.expect("a decision");
    assert!(!denied.allowed());
    assert!(denied.retry_after() > Duration::from_millis(900));
    assert!(denied.retry_after() <= Duration::from_micros(1_000_001));
    assert_eq!(
        store.acquire("k", &[rule], 4).await,
        Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
    );
}

#[tokio::test]
async fn failures_are_typed_errors() {
    assert!(matches!(
        RedisStore::builder("http://localhost").build_lazy(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        RedisStore::builder("redis://127.0.0.1:1")
            .prefix("a{b}")
            .build_lazy(),
        Err(Error::Config(_))
    ));
    // Nothing listens on port 1.
    let down = RedisStore::builder("redis://127.0.0.1:1")
        .connect_timeout(Duration::from_millis(200))
        .build_lazy()
        .expect("a lazy store");
    let rule = Rule::parse("3/1s").expect("a valid rule");
    let err = down.acquire("k", &[rule], 1).await.expect_err("no Redis");
    assert!(err.is_store_failure(), "{err:?}");
    assert!(down.ready().await.is_err());
    assert_eq!(
        down.acquire("a}b", &[rule], 1).await,
        Err(Error::InvalidKey(
            "\"a}b\" has braces that do not form a hash tag: use {tag} with a non-empty tag, or no braces".into()
        ))
    );

    // A Redis that answers too late: the call times out, typed.
    let server = RedisServer::start_with_args(&["--enable-debug-command", "yes"]);
    let slow = RedisStore::builder(server.url())
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .expect("the Redis store connects");
    let mut conn = raw(&server).await;
    let sleep = tokio::spawn(async move {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.3")
            .query_async(&mut conn)
            .await
            .expect("DEBUG SLEEP");
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        slow.acquire("k", &[rule], 1).await,
        Err(Error::Timeout(Duration::from_millis(50)))
    );
    sleep.await.expect("DEBUG SLEEP ran");
    // TLS is built in (rustls with ring, no provider to install): a TLS
    // handshake with a plain-text server fails as a typed error, not a panic.
    let tls = RedisStore::builder(format!("rediss://127.0.0.1:{}/#insecure", server.port()))
        .timeout(Duration::from_millis(500))
        .build_lazy()
        .expect("a lazy store");
    let err = tls
        .acquire("k", &[rule], 1)
        .await
        .expect_err("no TLS there");
    assert!(err.is_store_failure(), "{err:?}");
    // And it recovers once Redis answers again (a few tries: on a busy
    // machine one round trip can take longer than the 50 ms deadline).
    let mut answer = Err(Error::NoRules);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer = slow.acquire("k", &[rule], 1).await;
        if answer.is_ok() {
            break;
        }
    }
    assert!(answer.expect("a decision").allowed());
}

/// A Redis key that holds what slidegate did not write (another type, a
/// foreign string of any length) is refused with an error naming the key:
/// never decoded, never overwritten, and not a store failure.
#[tokio::test]
async fn a_foreign_value_is_refused_with_an_error_naming_the_key() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let mut conn = raw(&server).await;
    let foreign: [&[u8]; 4] = [&[b'x'; 200], &[0u8; 80], &[0u8; 16], b"hello"];
    for algorithm in Algorithm::ALL {
        let rule = Rule::parse("5/1s")
            .expect("a valid rule")
            .with_algorithm(algorithm);
        let key = format!("foreign:{algorithm}");
        let redis_key = store.state_key(&key, rule);
        for value in foreign {
            let _: () = conn.set(&redis_key, value).await.expect("SET");
            for cost in [1, 0] {
                let err = store
                    .acquire(&key, &[rule], cost)
                    .await
                    .expect_err("a foreign value");
                let Error::KeyConflict { key: named, detail } = &err else {
                    panic!("{algorithm}: {err:?}");
                };
                assert_eq!(named, &key);
                assert!(detail.contains(&redis_key), "{detail}");
                assert!(!err.is_store_failure());
            }
            let kept: Vec<u8> = conn.get(&redis_key).await.expect("GET");
            assert_eq!(
                kept, value,
                "{algorithm}: the foreign value was overwritten"
            );
        }
        let _: () = conn.del(&redis_key).await.expect("DEL");
        let _: () = conn.lpush(&redis_key, "a list").await.expect("LPUSH");
        let err = store.acquire(&key, &[rule], 1).await.expect_err("a list");
        assert!(
            matches!(&err, Error::KeyConflict { detail, .. } if detail.contains("WRONGTYPE")),
            "{err:?}"
        );
        // The other keys are decided as usual.
        assert!(
            store
                .acquire("neighbour", &[rule], 1)
                .await
                .expect("a decision")
                .allowed()
        );
    }
}

#[tokio::test]
async fn a_batch_names_the_key_that_holds_a_foreign_value() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let mut conn = raw(&server).await;
    let rule = Rule::parse("5/1s").expect("a valid rule");
    let _: () = conn
        .set(store.state_key("{t}:b", rule), "not a log")
        .await
        .expect("SET");
    let err = store
        .acquire_batch(&[Hit::new("{t}:a", rule, 1), Hit::new("{t}:b", rule, 1)])
        .await
        .expect_err("a foreign value");
    assert!(
        matches!(&err, Error::KeyConflict { key, .. } if key == "{t}:b"),
        "{err:?}"
    );
    let untouched = store.peek("{t}:a", &[rule]).await.expect("a decision");
    assert_eq!(untouched.remaining(), 5, "nothing was recorded");
}

/// `X` and `{X}` are two keys in the memory store; so they are on Redis
/// (they once shared one Redis key, and a batch of both admitted twice
/// the limit while storing it once).
#[tokio::test]
async fn a_key_and_the_same_key_as_a_hash_tag_are_two_keys() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let rule = Rule::parse("2/1s").expect("a valid rule");
    let batch = [Hit::new("abc", rule, 2), Hit::new("{abc}", rule, 2)];
    let first = store.acquire_batch(&batch).await.expect("decisions");
    assert!(first.iter().all(|d| d.allowed() && d.remaining() == 0));
    // Admitted 4 units: Redis holds 4, 2 under each key.
    let mut conn = raw(&server).await;
    for key in ["abc", "{abc}"] {
        let log = read_log(&mut conn, &store.state_key(key, rule)).await;
        assert_eq!(log.iter().map(|(_, c)| c).sum::<u64>(), 2, "{key}");
    }
    let again = store.acquire_batch(&batch).await.expect("decisions");
    assert!(again.iter().all(|d| !d.allowed()), "both are spent");
    for key in ["abc", "{abc}"] {
        let d = store.acquire(key, &[rule], 1).await.expect("a decision");
        assert!(!d.allowed(), "{key} holds its 2 units");
    }
}

/// A log holding 1,000,000 expired records and 10 live ones (a busy key,
/// then a long pause): one decision finds the first live record by search,
/// reading O(log n) records, where a scan read every expired one (900k
/// records kept Redis busy for 143 ms). Counted from Redis' side: the
/// GETRANGE calls the script made, seen through MONITOR. Both script paths:
/// one rule, and two rules (the batch code).
#[test]
fn a_decision_reads_logarithmically_many_of_a_million_expired_records() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let t0 = 1_763_800_000_000_000u64;
    let rule = Rule::parse("2000000/1m").expect("a valid rule");
    let other = Rule::parse("1999999/1m").expect("a valid rule");
    let expired = 1_000_000u64;
    let mut records: Vec<(u64, u64)> = (0..expired).map(|i| (t0 + 50 * i, 1)).collect();
    records.extend((1..=10).map(|j| (t0 + 55_000_000 + j, 1)));
    let log = encode_log(&records, rule.window_micros(), rule.limit());
    let record_bytes = 7;
    assert_eq!(log.len(), records.len() * record_bytes + 72);
    // Every record but the 10 newest is more than a window old.
    let clock = ManualClock::at(t0 + 55_000_000 + rule.window_micros());
    let store = runtime
        .block_on(
            RedisStore::builder(server.url())
                .client_clock(clock.clone())
                .timeout(Duration::from_secs(10))
                .build(),
        )
        .expect("the Redis store connects");
    let mut conn = runtime.block_on(raw(&server));
    server
        .command(&["CONFIG", "SET", "slowlog-log-slower-than", "0"])
        .expect("CONFIG SET");
    for (path, rules) in [("one rule", vec![rule]), ("two rules", vec![rule, other])] {
        let (key, timed) = (
            format!("long:{}", rules.len()),
            format!("timed:{}", rules.len()),
        );
        runtime.block_on(async {
            for r in &rules {
                for k in [&key, &timed] {
                    let _: () = conn
                        .set(store.state_key(k, *r), log.as_slice())
                        .await
                        .expect("SET");
                }
            }
        });
        // Timed on one copy of the log, without MONITOR (it slows Redis
        // down); counted on the other.
        server
            .command(&["SLOWLOG", "RESET"])
            .expect("SLOWLOG RESET");
        let timed_decision = runtime
            .block_on(store.acquire(&timed, &rules, 1))
            .expect("a decision");
        assert!(timed_decision.allowed(), "{path}");
        // The EVALSHA's own time in Redis, from SLOWLOG (everything is logged).
        let script_micros: i64 = runtime.block_on(async {
            let entries: Vec<Vec<redis::Value>> = redis::cmd("SLOWLOG")
                .arg("GET")
                .arg(100)
                .query_async(&mut conn)
                .await
                .expect("SLOWLOG GET");
            entries
                .iter()
                .filter(|e| {
                    matches!(e.get(3), Some(redis::Value::Array(args))
                        if matches!(args.first(), Some(redis::Value::BulkString(c)) if c.eq_ignore_ascii_case(b"evalsha")))
                })
                .filter_map(|e| match e.get(2) {
                    Some(redis::Value::Int(micros)) => Some(*micros),
                    _ => None,
                })
                .max()
                .unwrap_or(-1)
        });
        let (decision, ranges) = getranges_during(server.port(), || {
            runtime.block_on(store.acquire(&key, &rules, 1))
        });
        let decision = decision.expect("a decision");
        let limit = rules.iter().map(|r| r.limit()).min().unwrap_or(0);
        assert!(decision.allowed(), "{path}");
        assert_eq!(decision.remaining(), limit - 11, "{path}");
        eprintln!(
            "{path}: {} GETRANGE calls, {} bytes; the decision took {script_micros} µs in Redis (SLOWLOG)",
            ranges.len(),
            ranges.iter().map(|(a, b)| b - a + 1).sum::<i64>()
        );
        // Records read past the header and its 64 bytes: the searches (a
        // gallop and a bisection, log2(1M) = 20 steps each, per rule) and
        // the compaction that keeps the 11 live records.
        let records_read: i64 = ranges
            .iter()
            .filter(|(from, _)| *from >= 0)
            .map(|(from, to)| (to - from + 1) / record_bytes as i64)
            .sum();
        let bound = rules.len() as i64 * (2 * 20 + 2 + 11);
        assert!(
            records_read <= bound,
            "{path}: {records_read} records read of 1,000,010 (at most {bound})"
        );
        assert!(ranges.len() as i64 <= bound, "{path}: {ranges:?}");
        let next = runtime
            .block_on(store.acquire(&key, &rules, 1))
            .expect("a decision");
        assert_eq!(next.remaining(), limit - 12, "{path}");
    }
}

/// Two processes on a client clock, one 5 s ahead of the other. The one
/// ahead records at its time and sets the key's expiry on its clock; the
/// one behind then records too, clamped to that newest record: the key
/// must outlive that record on the clock behind (5 s longer), or the
/// record is forgotten while it still counts there.
#[tokio::test]
async fn an_admission_clamped_to_a_newer_record_extends_the_expiry() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let t = 1_763_800_000_000_000u64;
    let (ahead, behind) = (ManualClock::at(t + 5_000_000), ManualClock::at(t));
    let open = |clock: &ManualClock| {
        RedisStore::builder(server.url())
            .client_clock(clock.clone())
            .expiry_margin(Duration::from_millis(1))
            .build()
    };
    let (ahead, behind) = (
        open(&ahead).await.expect("connects"),
        open(&behind).await.expect("connects"),
    );
    let rule = Rule::parse("5/10s").expect("a valid rule");
    assert!(
        ahead
            .acquire("skew", &[rule], 1)
            .await
            .expect("a decision")
            .allowed()
    );
    let key = ahead.state_key("skew", rule);
    let ttl: i64 = conn.pttl(&key).await.expect("PTTL");
    assert!(ttl <= 10_002, "{ttl}");
    assert!(
        behind
            .acquire("skew", &[rule], 1)
            .await
            .expect("a decision")
            .allowed()
    );
    let ttl: i64 = conn.pttl(&key).await.expect("PTTL");
    assert!(
        ttl > 14_900,
        "the key expires in {ttl} ms: before the newest record leaves the window on the clock behind (15 s)"
    );
}

/// A key seen a few times a window, its admissions 6 s apart: each one
/// must move the key's expiry (rule 5/10s), and a small log is then
/// rewritten whole with one `SET ... PX`, so a decision costs two Redis
/// commands per rule (GETRANGE, SET), never three (GETRANGE, SETRANGE,
/// PEXPIRE). For one hit (the script's inline path) and for two rules
/// (its general path, where the 7/20s key moves its expiry less often).
/// The logs and the TTL left behind are checked too: records that left
/// the window are dropped by the rewrite, live ones kept.
#[tokio::test]
async fn a_cold_admission_is_two_redis_commands_per_rule() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let t = 1_763_800_000_000_000u64;
    let clock = ManualClock::at(t);
    let store = RedisStore::builder(server.url())
        .client_clock(clock.clone())
        .expiry_margin(Duration::from_millis(1))
        .build()
        .await
        .expect("connects");
    let ten = Rule::parse("5/10s").expect("a valid rule");
    let twenty = Rule::parse("7/20s").expect("a valid rule");
    for rules in [&[ten][..], &[ten, twenty][..]] {
        let key = format!("cold-{}", rules.len());
        for step in 0..4u64 {
            clock.set(t + step * 6_000_000);
            server
                .command(&["CONFIG", "RESETSTAT"])
                .expect("CONFIG RESETSTAT");
            let decision = store.acquire(&key, rules, 1).await.expect("a decision");
            let commands = server.commands_received();
            // The script's own commands: what the EVALSHA ran (the first
            // one loads the script too).
            let ran: BTreeMap<&str, u64> = commands
                .iter()
                .filter(|(name, _)| {
                    !matches!(
                        name.as_str(),
                        "evalsha" | "script|load" | "auth" | "info" | "config|resetstat"
                    )
                })
                .map(|(name, calls)| (name.as_str(), *calls))
                .collect();
            let total: u64 = ran.values().sum();
            assert!(
                total <= 2 * rules.len() as u64 && !ran.contains_key("pexpire"),
                "{key}, admission {step}: {ran:?}"
            );
            // 5/10s: the admissions of the last 10 s (at most two).
            assert_eq!(decision.remaining(), 5 - (step + 1).min(2), "{key}");
        }
        let log = read_log(&mut conn, &store.state_key(&key, ten)).await;
        assert_eq!(log, vec![(t + 12_000_000, 1), (t + 18_000_000, 1)], "{key}");
        // The expiry, last moved at t + 18 s: half a window past the
        // newest record's window, plus the 1 ms margin.
        let ttl: i64 = conn.pttl(store.state_key(&key, ten)).await.expect("PTTL");
        assert!((14_900..=15_002).contains(&ttl), "{key}: PTTL {ttl}");
        if rules.len() == 2 {
            let log = read_log(&mut conn, &store.state_key(&key, twenty)).await;
            let every: Vec<(u64, u64)> = (0..4).map(|i| (t + i * 6_000_000, 1)).collect();
            assert_eq!(log, every, "{key}");
        }
    }
}

#[tokio::test]
async fn a_client_clock_keeps_keys_a_second_longer_by_default() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let store = RedisStore::builder(server.url())
        .client_clock(ManualClock::at(1_763_800_000_000_000))
        .build()
        .await
        .expect("connects");
    let rule = Rule::parse("5/100ms").expect("a valid rule");
    store.acquire("k", &[rule], 1).await.expect("a decision");
    let ttl: i64 = conn.pttl(store.state_key("k", rule)).await.expect("PTTL");
    assert!(
        (1_050..=1_101).contains(&ttl),
        "PTTL {ttl}: 100 ms + the 1 s margin"
    );
}

/// A token bucket of 50 refilled at 10 per second, asked by 24 tasks
/// through three stores at once at each of a few frozen times (a client
/// clock): exactly 50 pass at once, then exactly the units refilled since,
/// and a bucket left alone for its refill time is full again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_50_passes_at_once_then_10_per_second_from_three_stores() {
    const TASKS: usize = 24;
    let server = RedisServer::start();
    let rule = Rule::parse("10/1s burst 50").expect("a valid rule");
    let start = contention::START;
    let clock = ManualClock::at(start);
    let mut stores = Vec::new();
    for _ in 0..3 {
        let store = RedisStore::builder(server.url())
            .client_clock(clock.clone())
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("the Redis store connects");
        stores.push(store);
    }
    // (time since start in ms, units that must pass then).
    let steps = [(0, 50), (1_000, 10), (1_500, 5), (1_500, 0), (9_000, 50)];
    for (ms, want) in steps {
        clock.set(start + ms * 1_000);
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = stores[t % 3].clone();
                tokio::spawn(async move {
                    let mut passed = 0u64;
                    for _ in 0..6 {
                        let d = store.acquire("bucket", &[rule], 1).await;
                        passed += u64::from(d.expect("a decision").allowed());
                    }
                    passed
                })
            })
            .collect();
        let mut passed = 0;
        for task in tasks {
            passed += task.await.expect("a task ran");
        }
        assert_eq!(passed, want, "at +{ms} ms");
    }
    let d = stores[0]
        .acquire("bucket", &[rule], 0)
        .await
        .expect("a probe");
    assert_eq!((d.limit(), d.remaining()), (10, 0));
    assert_eq!(d.reset_after(), Duration::from_secs(5));
    // The state is the rule's own, burst included.
    let mut conn = raw(&server).await;
    let keys: Vec<String> = conn.keys("*bucket*").await.expect("KEYS");
    assert_eq!(keys, ["slidegate:v2:{bucket}:10/1s:gcra:burst50"]);
}
