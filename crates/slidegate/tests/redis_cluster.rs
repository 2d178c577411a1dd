//! The Redis store on a local 3-master Redis Cluster: keys spread over
//! many slots, multi-rule and multi-key decisions on one hash tag, a batch
//! across slots decided (all or nothing: see redis_cross_slot.rs), reset
//! routed to the right node, and recovery after every node lost its script
//! cache. One cluster serves every check (it takes a few seconds to form);
//! concurrent coalesced decisions across many slots get a cluster of their
//! own.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::redis_server::{RedisCluster, key_slot};
use slidegate::{Algorithm, Hit, RedisStore, Rule, Store};

#[tokio::test]
async fn redis_store_works_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder(cluster.url())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the Redis store connects to the cluster");
    assert!(store.is_cluster());
    store.ready().await.expect("the cluster answers");

    keys_across_many_slots(&store).await;
    rules_and_keys_sharing_a_hash_tag_decide_atomically(&store).await;
    batches_across_slots_are_decided(&store).await;
    reports_and_lockouts_across_slots(&store).await;
    reset_finds_the_states_on_the_node_that_owns_the_slot(&store).await;
    script_cache_loss_on_every_node_is_invisible(&cluster, &store).await;
}

async fn keys_across_many_slots(store: &RedisStore) {
    let rule = Rule::parse("2/1m").expect("a valid rule");
    for round in [1, 0] {
        for i in 0..300 {
            let d = store
                .acquire(&format!("ip:10.0.{}.{}", i / 256, i % 256), &[rule], 1)
                .await
                .expect("a decision");
            assert!(d.allowed());
            assert_eq!(d.remaining(), round);
        }
    }
}

async fn rules_and_keys_sharing_a_hash_tag_decide_atomically(store: &RedisStore) {
    let rules: Vec<Rule> = Algorithm::ALL
        .iter()
        .map(|a| {
            Rule::parse("3/1m")
                .expect("a valid rule")
                .with_algorithm(*a)
        })
        .collect();
    let d = store
        .acquire("user:{7}:login", &rules, 2)
        .await
        .expect("a decision");
    assert!(d.allowed());
    assert_eq!(d.remaining(), 1);
    let tight = Rule::parse("1/1m").expect("a valid rule");
    store
        .acquire("user:{7}:upload", &[tight], 1)
        .await
        .expect("a decision");
    // One hit cannot pass, so none is recorded.
    let ds = store
        .acquire_batch(&[
            Hit::new("user:{7}:login", rules[0], 1),
            Hit::new("user:{7}:upload", tight, 1),
        ])
        .await
        .expect("decisions");
    assert!(ds[0].allowed() && !ds[1].allowed());
    assert_eq!(ds[0].remaining(), 1, "not charged");
    let peek = store
        .peek("user:{7}:login", &rules)
        .await
        .expect("a decision");
    assert_eq!(peek.remaining(), 1);
}

async fn batches_across_slots_are_decided(store: &RedisStore) {
    let rule = Rule::parse("5/1m").expect("a valid rule");
    let batch = [
        Hit::new("{a}:x", rule, 1),
        Hit::new("{a}:y", rule, 1),
        Hit::new("b", rule, 2),
    ];
    let decisions = store.acquire_batch(&batch).await.expect("decisions");
    let left: Vec<(bool, u64)> = decisions
        .iter()
        .map(|d| (d.allowed(), d.remaining()))
        .collect();
    assert_eq!(left, [(true, 4), (true, 4), (true, 3)]);
    let d = store.peek("b", &[rule]).await.expect("a decision");
    assert_eq!(d.remaining(), 3);
}

/// A batch over two slots that one denies: the report in the other slot
/// is recorded all the same (whether its slot is decided before the
/// denial, and then not undone, or after it), and the denying rule's
/// lockout starts. Both orders of the two slots.
async fn reports_and_lockouts_across_slots(store: &RedisStore) {
    let tokens = Rule::parse("5/1m").expect("a valid rule");
    let login = Rule::parse("1/1m")
        .and_then(|r| r.block_for(Duration::from_secs(3600)))
        .expect("a valid rule");
    for (report_tag, lock_tag) in [("s1", "s2"), ("s2", "s1")] {
        let (report_key, lock_key) = (
            format!("{{{report_tag}}}:tokens:{lock_tag}"),
            format!("{{{lock_tag}}}:login:{report_tag}"),
        );
        assert!(
            store
                .acquire(&lock_key, &[login], 1)
                .await
                .expect("decided")
                .allowed()
        );
        let batch = [
            Hit::new(report_key.as_str(), tokens.reporting(), 3),
            Hit::new(lock_key.as_str(), login, 1),
        ];
        let decisions = store.acquire_batch(&batch).await.expect("decisions");
        assert!(!decisions[1].allowed(), "{decisions:?}");
        assert_eq!(
            decisions[1].retry_after(),
            Duration::from_secs(3600),
            "the denial starts the lockout: {decisions:?}"
        );
        let left = store.peek(&report_key, &[tokens]).await.expect("decided");
        assert_eq!(
            left.remaining(),
            2,
            "the report is recorded though the batch was denied ({report_tag} first or not)"
        );
        let locked = store
            .acquire(&lock_key, &[login], 1)
            .await
            .expect("decided");
        assert!(
            locked.retry_after() > Duration::from_secs(3500),
            "{locked:?}"
        );
    }
}

async fn reset_finds_the_states_on_the_node_that_owns_the_slot(store: &RedisStore) {
    let rules = [
        Rule::parse("1/1m").expect("a valid rule"),
        Rule::parse("1/1h")
            .expect("a valid rule")
            .with_algorithm(Algorithm::Gcra),
    ];
    for i in 0..20 {
        let key = format!("session:{i}");
        assert!(
            store
                .acquire(&key, &rules, 1)
                .await
                .expect("a decision")
                .allowed()
        );
        assert!(
            !store
                .acquire(&key, &rules, 1)
                .await
                .expect("a decision")
                .allowed()
        );
        store.reset(&key).await.expect("reset");
        assert!(
            store
                .acquire(&key, &rules, 1)
                .await
                .expect("a decision")
                .allowed()
        );
    }
}

async fn script_cache_loss_on_every_node_is_invisible(cluster: &RedisCluster, store: &RedisStore) {
    let rule = Rule::parse("1000/1m").expect("a valid rule");
    for node in &cluster.nodes {
        assert_eq!(node.command(&["SCRIPT", "FLUSH"]).as_deref(), Some("OK"));
    }
    for i in 0..100 {
        let d = store.acquire(&format!("after-flush:{i}"), &[rule], 1).await;
        assert!(d.expect("a decision after SCRIPT FLUSH").allowed());
    }
}

/// EVALSHA calls every node of the cluster has run so far: those answered,
/// less those refused with `NOSCRIPT` (sent again once the script is
/// loaded).
fn evalsha_calls(cluster: &RedisCluster) -> u64 {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let stats = node
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
        })
        .sum()
}

/// 120 tasks deciding on 90 keys in random order (60 keys on slots of
/// their own, 30 on three hash tags, so that some calls gather several
/// decisions of one slot and a node's turn pipelines calls of several
/// slots): every key admits exactly min(attempts, limit). Then the same
/// keys asked all at once take exactly the calls coalescing promises (see
/// `a_burst_takes_one_call_per_slot_after_the_first_four`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_decisions_across_many_slots_stay_exact() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder(cluster.url())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("the Redis store connects to the cluster");
    let rule = Rule::parse("40/1h").expect("a valid rule");
    let keys: Arc<Vec<String>> = Arc::new(
        (0..90)
            .map(|i| match i {
                0..60 => format!("ip:10.1.0.{i}"),
                _ => format!("{{tag{}}}:user{i}", i % 3),
            })
            .collect(),
    );
    for key in keys.iter() {
        store.acquire(key, &[rule], 0).await.expect("a decision");
    }
    let attempts: Arc<Vec<AtomicU64>> = Arc::new((0..90).map(|_| AtomicU64::new(0)).collect());
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..90).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for t in 0..120u64 {
        let (store, keys) = (store.clone(), Arc::clone(&keys));
        let (attempts, admitted) = (Arc::clone(&attempts), Arc::clone(&admitted));
        tasks.push(tokio::spawn(async move {
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for _ in 0..50 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % 90) as usize;
                attempts[k].fetch_add(1, Ordering::Relaxed);
                let d = store
                    .acquire(&keys[k], &[rule], 1)
                    .await
                    .expect("a decision");
                if d.allowed() {
                    admitted[k].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task ran to the end");
    }
    for (k, key) in keys.iter().enumerate() {
        let tried = attempts[k].load(Ordering::Relaxed);
        let passed = admitted[k].load(Ordering::Relaxed);
        assert_eq!(passed, tried.min(40), "{key}: {tried} attempts");
        let left = store.peek(key, &[rule]).await.expect("a decision");
        assert_eq!(left.remaining(), 40 - passed, "{key}");
    }
    assert_eq!(store.waiting() + store.calls_in_flight(), 0);
    let cluster = tokio::task::spawn_blocking(move || {
        a_burst_takes_one_call_per_slot_after_the_first_four(&cluster, &keys, rule);
        cluster
    })
    .await
    .expect("the burst ran");
    drop(cluster);
}

/// Every key asked twice, all at once from one thread (a current-thread
/// runtime), so that each decision is queued for its master before any
/// answer comes back: each master runs its first 4 decisions in calls of
/// their own (up to 4 go out while none is back), then all that waited in
/// one turn of one script call per slot. 180 decisions; the calls are
/// counted on the nodes.
fn a_burst_takes_one_call_per_slot_after_the_first_four(
    cluster: &RedisCluster,
    keys: &[String],
    rule: Rule,
) {
    let burst: Vec<String> = keys.iter().chain(keys).cloned().collect();
    let mut slots_by_master: std::collections::BTreeMap<u16, Vec<u16>> = Default::default();
    for key in &burst {
        let slot = key_slot(key);
        let master = cluster.master_of(slot).expect("a master").port();
        slots_by_master.entry(master).or_default().push(slot);
    }
    let promised: usize = slots_by_master
        .values()
        .map(|slots| {
            let (alone, waited) = slots.split_at(slots.len().min(4));
            assert!(waited.len() <= 128, "one call takes them all");
            let distinct: std::collections::BTreeSet<u16> = waited.iter().copied().collect();
            alone.len() + distinct.len()
        })
        .sum();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let calls = runtime.block_on(async {
        let store = RedisStore::builder(cluster.url())
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("the Redis store connects to the cluster");
        let before = evalsha_calls(cluster);
        let tasks: Vec<_> = burst
            .iter()
            .map(|key| {
                let (store, key) = (store.clone(), key.clone());
                tokio::spawn(async move { store.acquire(&key, &[rule], 1).await })
            })
            .collect();
        for task in tasks {
            task.await.expect("a task ran").expect("a decision");
        }
        evalsha_calls(cluster) - before
    });
    assert_eq!(
        calls,
        promised as u64,
        "{} decisions on {} masters",
        burst.len(),
        slots_by_master.len()
    );
}
