//! The Redis store through Redis Sentinel, on real processes: a master, a
//! replica and three sentinels. Decisions go to the master the sentinels
//! name, follow it when the replica is promoted, and a URL or a deployment
//! that names no master is an error, never a panic.

mod common;

use std::time::{Duration, Instant};

use common::redis_server::{MASTER_NAME, SentinelGroup};
use slidegate::{Error, RedisStore, Rule, Store};

async fn store(url: &str) -> RedisStore {
    RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the store finds the master through the sentinels")
}

async fn off_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking task")
}

/// Asks `rule` for `key` `limit` times and once more: the remaining count
/// goes down one by one, and the request over the limit is denied.
async fn counts_exactly(store: &RedisStore, key: &str, rule: Rule) {
    for expected in (0..rule.limit()).rev() {
        let decision = store.acquire(key, &[rule], 1).await.expect("a decision");
        assert!(decision.allowed(), "{key}: {decision:?}");
        assert_eq!(decision.remaining(), expected, "{key}");
    }
    let over = store.acquire(key, &[rule], 1).await.expect("a decision");
    assert!(!over.allowed(), "{key}: {over:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_through_the_sentinels_are_exact_and_stored_on_the_master() {
    let group = off_thread(SentinelGroup::start).await;
    let store = store(&group.url()).await;
    assert!(store.is_sentinel() && !store.is_cluster());
    let rule = Rule::parse("5/1m").expect("a valid rule");
    counts_exactly(&store, "login:10.0.0.1", rule).await;
    let key = store.state_key("login:10.0.0.1", rule);
    assert_eq!(
        group.master.command(&["EXISTS", &key]).as_deref(),
        Some("1")
    );
    store.ready().await.expect("ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_the_replica_the_sentinels_promote() {
    let mut group = off_thread(SentinelGroup::start).await;
    let store = store(&group.url()).await;
    let rule = Rule::parse("5/1m").expect("a valid rule");
    counts_exactly(&store, "before", rule).await;
    let replica = group.replica.port();
    group = off_thread(move || {
        group.master.kill();
        group
    })
    .await;
    let killed = Instant::now();
    // Calls fail (an error, for the caller's failure policy to answer)
    // until the replica is promoted and the store has found it.
    let first_answer = loop {
        let since = killed.elapsed();
        assert!(
            since < Duration::from_secs(20),
            "never followed the failover"
        );
        match store
            .acquire("probe", &[Rule::parse("1000000/1m").expect("a rule")], 1)
            .await
        {
            Ok(_) => break since,
            Err(error) => assert!(error.is_store_failure(), "{error:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        group.master_port(),
        Some(replica),
        "the replica was promoted"
    );
    eprintln!("sentinel failover: decided again {first_answer:?} after the kill");
    counts_exactly(&store, "after", rule).await;
    let key = store.state_key("after", rule);
    assert_eq!(
        group.replica.command(&["EXISTS", &key]).as_deref(),
        Some("1")
    );
    store.ready().await.expect("ready on the new master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_forced_failover_writes_go_where_the_sentinels_say_not_to_the_old_master() {
    let group = off_thread(SentinelGroup::start).await;
    let store = store(&group.url()).await;
    let probe = Rule::parse("1000000/1m").expect("a valid rule");
    store
        .acquire("warm", &[probe], 1)
        .await
        .expect("a decision");
    // The old master stays up and, for a while (about 10 s here, until the
    // sentinels reconfigure it), still says it is a master and takes
    // writes: only the sentinels know it is not the master any more.
    assert_eq!(
        group.sentinels[0]
            .command(&["SENTINEL", "FAILOVER", MASTER_NAME])
            .as_deref(),
        Some("OK")
    );
    let started = Instant::now();
    let mut named = None;
    // Decisions keep coming (the sentinels are asked again at most a
    // second apart while they do), until a second after a sentinel names
    // the promoted replica.
    while named.is_none_or(|at: Instant| at.elapsed() < Duration::from_millis(1_200)) {
        assert!(started.elapsed() < Duration::from_secs(20), "no failover");
        if named.is_none() && group.master_port() == Some(group.replica.port()) {
            named = Some(Instant::now());
        }
        if let Err(error) = store.acquire("during", &[probe], 1).await {
            assert!(error.is_store_failure(), "{error:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old_still_master = |group: &SentinelGroup| {
        group
            .master
            .command(&["INFO", "replication"])
            .is_some_and(|info| info.contains("role:master"))
    };
    assert!(
        old_still_master(&group),
        "the old master was reconfigured early"
    );
    let rule = Rule::parse("5/1m").expect("a valid rule");
    counts_exactly(&store, "after", rule).await;
    let key = store.state_key("after", rule);
    assert_eq!(
        group.replica.command(&["EXISTS", &key]).as_deref(),
        Some("1")
    );
    if old_still_master(&group) {
        assert_eq!(
            group.master.command(&["EXISTS", &key]).as_deref(),
            Some("0")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_urls_password_is_the_masters_and_the_querys_the_sentinels() {
    let group =
        off_thread(|| SentinelGroup::start_with_passwords(Some("m4ster"), Some("s3ntinel"))).await;
    let hosts = group.hosts();
    let url = |master: &str, sentinel: &str| {
        format!("redis+sentinel://:{master}@{hosts}/{MASTER_NAME}?sentinel_password={sentinel}")
    };
    let store = store(&url("m4ster", "s3ntinel")).await;
    counts_exactly(
        &store,
        "with-passwords",
        Rule::parse("3/1m").expect("a rule"),
    )
    .await;
    for (master, sentinel) in [("m4ster", "wr0ng"), ("wr0ng", "s3ntinel")] {
        match RedisStore::builder(url(master, sentinel)).build().await {
            Err(Error::Store(message)) => assert!(!message.contains("wr0ng"), "{message}"),
            other => panic!("{master}/{sentinel}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn no_sentinel_answering_at_start_is_a_store_error_not_a_panic() {
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/{MASTER_NAME}",
        closed_port(),
        closed_port()
    );
    let built = RedisStore::builder(&url).build().await;
    match built {
        Err(Error::Store(message)) => assert!(message.contains("sentinel"), "{message}"),
        other => panic!("{other:?}"),
    }
    let lazy = RedisStore::builder(&url)
        .timeout(Duration::from_millis(200))
        .build_lazy()
        .expect("a valid URL");
    let rule = Rule::parse("5/1m").expect("a valid rule");
    let decision = lazy.acquire("k", &[rule], 1).await;
    assert!(
        decision.as_ref().is_err_and(Error::is_store_failure),
        "{decision:?}"
    );
    assert!(lazy.ready().await.is_err());
}

#[test]
fn a_sentinel_url_without_master_name_is_a_config_error_without_its_password() {
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://app:s3cret@127.0.0.1:26379/",
        "rediss+sentinel://app:s3cret@/mymaster",
        "redis+sentinel://127.0.0.1:26379/mymaster?sentinel_pass=s3cret",
    ] {
        match RedisStore::builder(url).build_lazy() {
            Err(Error::Config(message)) => {
                assert!(message.contains("MASTER_NAME"), "{url}: {message}");
                assert!(!message.contains("s3cret"), "{url}: {message}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}
