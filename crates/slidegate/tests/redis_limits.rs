//! Limits shared through Redis (`RedisStore::write_limit`,
//! `sync_limits`, `seed_limits`) on a real redis-server and a real Redis
//! Cluster: versions, preconditions, bounds, catching up by the log or by a
//! full read, the change feed telling other processes, and a registry
//! whose raised limit keeps what was used.

mod common;

use std::sync::{Arc, Weak};
use std::time::Duration;

use common::redis_server::{RedisCluster, RedisServer};
use parking_lot::Mutex;
use slidegate::limits::LimitRegistry;
use slidegate::store::redis::{LOG_LEN, LimitKind, LimitWrite, SharedLimit, Written};
use slidegate::store::{Change, ChangeListener};
use slidegate::{MemoryStore, RedisStore, Rule, Store};

fn write<'a>(kind: LimitKind, name: &'a str, text: Option<&'a str>) -> LimitWrite<'a> {
    LimitWrite {
        kind,
        name,
        text,
        if_version: None,
        max_entries: 10,
    }
}

async fn store(url: String) -> RedisStore {
    RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the store connects")
}

async fn versions_preconditions_bounds_and_catching_up(store: &RedisStore) {
    let empty = store.sync_limits(0).await.unwrap();
    assert_eq!((empty.version, empty.entries.len()), (0, 0));

    let a = store
        .write_limit(write(LimitKind::Key, "tenant a", Some("{\"rules\":[1]}")))
        .await
        .unwrap();
    assert_eq!(a, Written::Done(1));
    let d = store
        .write_limit(write(LimitKind::Domain, "api", Some("domain: api\n")))
        .await
        .unwrap();
    assert_eq!(d, Written::Done(2));

    // A precondition on the version: the current one passes, another fails.
    let mut stale = write(LimitKind::Key, "tenant a", Some("stale"));
    stale.if_version = Some(7);
    assert_eq!(
        store.write_limit(stale.clone()).await.unwrap(),
        Written::VersionMismatch(1)
    );
    stale.if_version = Some(1);
    assert_eq!(store.write_limit(stale).await.unwrap(), Written::Done(3));
    let mut create_only = write(LimitKind::Key, "tenant a", Some("x"));
    create_only.if_version = Some(0);
    assert_eq!(
        store.write_limit(create_only).await.unwrap(),
        Written::VersionMismatch(3)
    );

    // The bound counts entries of one kind; replacing one is no new entry.
    let mut bounded = write(LimitKind::Key, "tenant b", Some("b"));
    bounded.max_entries = 1;
    assert_eq!(
        store.write_limit(bounded.clone()).await.unwrap(),
        Written::Full
    );
    bounded.name = "tenant a";
    assert_eq!(store.write_limit(bounded).await.unwrap(), Written::Done(4));

    assert_eq!(
        store
            .write_limit(write(LimitKind::Key, "nobody", None))
            .await
            .unwrap(),
        Written::Absent
    );

    // A reader at version 2 gets only the key changed since, as it is now.
    let delta = store.sync_limits(2).await.unwrap();
    assert!(!delta.full);
    assert_eq!(delta.version, 4);
    assert_eq!(
        delta.entries,
        vec![SharedLimit {
            kind: LimitKind::Key,
            name: "tenant a".into(),
            text: "b".into(),
            version: 4
        }]
    );
    assert_eq!(store.sync_limits(4).await.unwrap().entries, vec![]);

    // A removal reads as removed.
    assert_eq!(
        store
            .write_limit(write(LimitKind::Domain, "api", None))
            .await
            .unwrap(),
        Written::Done(5)
    );
    let delta = store.sync_limits(4).await.unwrap();
    assert_eq!(delta.removed, vec![(LimitKind::Domain, "api".to_owned())]);

    // A reader further behind than the log reads everything.
    for i in 0..=LOG_LEN {
        let name = format!("n{}", i % 3);
        let mut many = write(LimitKind::Key, &name, Some("v"));
        many.max_entries = 100;
        store.write_limit(many).await.unwrap();
    }
    let full = store.sync_limits(3).await.unwrap();
    assert!(full.full, "the log no longer reaches version 3");
    assert_eq!(full.entries.len(), 4, "{:?}", full.entries);
}

async fn a_lost_set_is_seeded_back_once(store: &RedisStore, redis_flush: impl Fn()) {
    let entries = store.sync_limits(0).await.unwrap();
    redis_flush();
    assert_eq!(store.sync_limits(0).await.unwrap().version, 0);
    assert!(
        store
            .seed_limits(entries.version, &entries.entries)
            .await
            .unwrap()
    );
    assert!(
        !store.seed_limits(1, &[]).await.unwrap(),
        "only into an empty layout"
    );
    let back = store.sync_limits(0).await.unwrap();
    assert_eq!(back.version, entries.version);
    let mut before = entries.entries.clone();
    let mut after = back.entries.clone();
    before.sort_by(|a, b| a.name.cmp(&b.name));
    after.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(before, after);
}

#[tokio::test]
async fn shared_limits_on_one_redis() {
    let redis = RedisServer::start();
    let store = store(redis.url()).await;
    versions_preconditions_bounds_and_catching_up(&store).await;
    a_lost_set_is_seeded_back_once(&store, || {
        redis.command(&["FLUSHALL"]);
    })
    .await;
}

#[tokio::test]
async fn shared_limits_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let store = store(cluster.url()).await;
    assert!(store.is_cluster());
    versions_preconditions_bounds_and_catching_up(&store).await;
}

#[derive(Default)]
struct Heard(Mutex<Vec<Change>>);

impl ChangeListener for Heard {
    fn changed(&self, change: &Change) {
        self.0.lock().push(change.clone());
    }
    fn heard(&self, _trust_for: Duration) {}
    fn lost(&self) {}
}

#[tokio::test]
async fn a_write_is_told_on_the_change_feed() {
    let redis = RedisServer::start();
    let writer = store(redis.url()).await;
    let reader = store(redis.url()).await;
    let heard = Arc::new(Heard::default());
    let weak: Weak<dyn ChangeListener> =
        Arc::downgrade(&(Arc::clone(&heard) as Arc<dyn ChangeListener>));
    assert!(reader.watch_changes(weak));
    // The subscription is up once a reset published now is heard.
    let start = std::time::Instant::now();
    loop {
        writer.reset("probe").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !heard.0.lock().is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never subscribed"
        );
    }
    writer
        .write_limit(write(LimitKind::Key, "k", Some("v")))
        .await
        .unwrap();
    // Told, not told fast: 5 s for a message the subscriber gets within
    // milliseconds, which a loaded machine can delay past 1 s.
    let start = std::time::Instant::now();
    while !heard.0.lock().contains(&Change::Limits) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not heard within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A tenant that used its 5 of 5 and has its limit raised to 8 has 3
/// left, not 8, on the memory store and on Redis.
async fn a_raised_limit_keeps_what_was_used<S: Store>(store: S) {
    let registry = LimitRegistry::new(store);
    let key = "tenant:acme";
    registry
        .set(key, vec![Rule::parse("5/1h").unwrap()])
        .await
        .unwrap();
    for _ in 0..5 {
        assert!(registry.acquire(key, 1).await.unwrap().allowed());
    }
    assert!(!registry.acquire(key, 1).await.unwrap().allowed());
    registry
        .set(key, vec![Rule::parse("8/1h").unwrap()])
        .await
        .unwrap();
    let mut admitted = 0;
    for _ in 0..8 {
        if registry.acquire(key, 1).await.unwrap().allowed() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "5 used under 5/1h count under 8/1h");
    assert!(registry.acquire("tenant:none", 1).await.is_err());
}

/// A `gcra` rule's use is its burst less what remains: a key that took
/// its burst of 50 at once, its rate raised from 10/s to 20/s, has none
/// left, not the 40 a count against the rate's limit would leave.
#[tokio::test]
async fn a_changed_burst_rule_carries_the_burst_it_used() {
    let registry = LimitRegistry::new(MemoryStore::new());
    let key = "tenant:bursty";
    let rule = |text| vec![Rule::parse(text).unwrap()];
    registry
        .set(key, rule("10/1h gcra burst 50"))
        .await
        .unwrap();
    assert!(registry.acquire(key, 50).await.unwrap().allowed());
    registry
        .set(key, rule("20/1h gcra burst 50"))
        .await
        .unwrap();
    let decision = registry.acquire(key, 1).await.unwrap();
    assert!(!decision.allowed(), "{decision:?}");
}

#[tokio::test]
async fn a_raised_limit_keeps_what_was_used_in_memory() {
    a_raised_limit_keeps_what_was_used(MemoryStore::new()).await;
}

#[tokio::test]
async fn a_raised_limit_keeps_what_was_used_in_redis() {
    let redis = RedisServer::start();
    a_raised_limit_keeps_what_was_used(store(redis.url()).await).await;
}
