//! The deny cache of a `ResilientStore` on a real redis-server: changes
//! made through one process' store reach another's cache within the
//! change feed's trust (`CHANGE_FEED_TRUST`), a subscription that goes
//! silent stops the cache within it, and a denial answered from the cache
//! (also through the middleware) never says to come back too early.

mod common;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use common::redis_server::{MASTER_NAME, RedisCluster, RedisServer, SentinelGroup};
use http::StatusCode;
use slidegate::middleware::{Key, RateLimitLayer};
use slidegate::store::Change;
use slidegate::store::redis::CHANGE_FEED_TRUST;
use slidegate::store::resilient::{FailurePolicy, ResilientStore};
use slidegate::{RedisStore, Rule, Store};

type Cached = ResilientStore<RedisStore>;

/// A process' store: its own Redis connections and change feed, failing
/// closed, with a deadline of `timeout`.
async fn process(server: &RedisServer, timeout: Duration) -> Cached {
    let redis = RedisStore::builder(server.url())
        .timeout(timeout)
        .build()
        .await
        .expect("the Redis store connects");
    ResilientStore::builder(redis)
        .policy(FailurePolicy::Deny)
        .timeout(timeout)
        .build()
}

fn rule(s: &str) -> Rule {
    Rule::parse(s).expect("a valid rule")
}

/// Acquires `key` until Redis denies it and the denial is held in the
/// cache (the feed may take a moment to be first heard).
async fn deny_until_cached(store: &Cached, key: &str, rules: &[Rule]) {
    let started = Instant::now();
    while store.acquire_now(key, rules, 1).is_none() {
        store.acquire(key, rules, 1).await.expect("a decision");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: never answered by the deny cache"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `key` is no longer answered by the cache; fails after
/// [`CHANGE_FEED_TRUST`] from `since`.
async fn forgotten_within_bound(store: &Cached, key: &str, rules: &[Rule], since: Instant) {
    while store.acquire_now(key, rules, 1).is_some() {
        assert!(
            since.elapsed() < CHANGE_FEED_TRUST,
            "{key}: still answered by the cache {:?} after the change",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_through_one_process_reach_the_cache_of_another() {
    let server = RedisServer::start();
    let a = process(&server, Duration::from_secs(2)).await;
    let b = process(&server, Duration::from_secs(2)).await;
    let (hourly, other) = ([rule("1/1h")], [rule("2/1h")]);

    deny_until_cached(&b, "user42", &hourly).await;
    a.reset("user42").await.expect("reset");
    forgotten_within_bound(&b, "user42", &hourly, Instant::now()).await;
    assert!(b.acquire("user42", &hourly, 1).await.unwrap().allowed());

    // A change of a rule's state, as code that changes limits at run time
    // would publish it: every key's denials on that rule go, others stay.
    for key in ["k1", "k2"] {
        deny_until_cached(&b, key, &hourly).await;
    }
    deny_until_cached(&b, "k1", &other).await;
    a.inner()
        .publish_change(&Change::Rule(rule("1/1h")))
        .await
        .expect("published");
    let published = Instant::now();
    for key in ["k1", "k2"] {
        forgotten_within_bound(&b, key, &hourly, published).await;
    }
    assert!(
        b.acquire_now("k1", &other, 1).is_some(),
        "another rule's state"
    );

    a.inner()
        .publish_change(&Change::All)
        .await
        .expect("published");
    forgotten_within_bound(&b, "k1", &other, Instant::now()).await;
}

/// Redis pauses every client (`CLIENT PAUSE ALL`): the subscription is
/// still open but answers no ping, so a change could go unheard. The cache
/// stops answering within the trust the last answered ping gave, and
/// answers again once Redis does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_subscription_stops_the_cache_within_the_trust() {
    let server = RedisServer::start();
    let store = process(&server, Duration::from_millis(100)).await;
    let hourly = [rule("1/1h")];
    deny_until_cached(&store, "k", &hourly).await;

    let pause = Duration::from_millis(2_500);
    assert_eq!(
        server
            .command(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"])
            .as_deref(),
        Some("OK")
    );
    let paused = Instant::now();
    let mut stopped = None;
    while paused.elapsed() < pause - Duration::from_millis(300) {
        let asked = paused.elapsed();
        match store.acquire_now("k", &hourly, 1) {
            Some(cached) => {
                assert!(!cached.unwrap().allowed());
                assert!(
                    asked < CHANGE_FEED_TRUST,
                    "answered by the cache {asked:?} into the pause"
                );
            }
            None => {
                stopped.get_or_insert(asked);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopped = stopped.expect("the cache never stopped answering");
    eprintln!("the cache stopped answering {stopped:?} into the pause");

    tokio::time::sleep_until((paused + pause).into()).await;
    deny_until_cached(&store, "k", &hourly).await;
}

/// Redis sleeps 200 ms while a request waits for it: the store decides
/// late, and the cache, which used to count the wait from the sending,
/// said 200 ms too little. Waiting what it says is now always enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_denial_never_says_to_come_back_too_early() {
    let server = Arc::new(RedisServer::start_with_args(&[
        "--enable-debug-command",
        "local",
    ]));
    let store = process(&server, Duration::from_secs(2)).await;
    let slow = [rule("1/2s")];
    deny_until_cached(&store, "warm", &slow).await;
    assert!(store.acquire("k", &slow, 1).await.unwrap().allowed());

    let stall = sleep_redis(&server, "0.2").await;
    let first = store.acquire("k", &slow, 1).await.unwrap();
    stall.join().expect("DEBUG SLEEP");
    assert!(!first.allowed());
    let cached = store
        .acquire_now("k", &slow, 1)
        .expect("answered by the cache")
        .unwrap();
    let told = Instant::now();
    tokio::time::sleep_until((told + cached.retry_after()).into()).await;
    let retry = store.acquire("k", &slow, 1).await.unwrap();
    assert!(
        retry.allowed(),
        "came back after the {:?} the cache said, and was denied again: {retry:?}",
        cached.retry_after()
    );
}

/// The same through the middleware, whose `Retry-After` is in whole
/// seconds: 1 per 2 s, Redis sleeps 500 ms while the second request waits
/// for it, and the third, 750 ms after the first, is answered from the
/// cache. It used to say 1 s (the wait counted from the second's sending:
/// 0.77 s) and a client back after 1 s was denied again; it says 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middleware_never_says_to_come_back_too_early_from_the_cache() {
    let server = Arc::new(RedisServer::start_with_args(&[
        "--enable-debug-command",
        "local",
    ]));
    let store = process(&server, Duration::from_secs(2)).await;
    let slow = rule("1/2s");
    deny_until_cached(&store, "warm", &[slow]).await;
    let layer = RateLimitLayer::builder(store.clone(), Key::global())
        .rule(slow)
        .build()
        .expect("a valid layer");
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let addr = support::serve(app).await;
    let request = || support::send(addr, support::empty(support::get("/")));

    assert_eq!(request().await.status, StatusCode::OK);
    let admitted = Instant::now();
    let stall = sleep_redis(&server, "0.5").await;
    assert_eq!(request().await.status, StatusCode::TOO_MANY_REQUESTS);
    stall.join().expect("DEBUG SLEEP");
    assert!(
        store.acquire_now("global", &[slow], 1).is_some(),
        "the denial is cached"
    );
    tokio::time::sleep_until((admitted + Duration::from_millis(750)).into()).await;
    let cached = request().await;
    let told = Instant::now();
    assert_eq!(cached.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = cached
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    tokio::time::sleep_until((told + Duration::from_secs(wait)).into()).await;
    let retry = request().await;
    assert_eq!(
        retry.status,
        StatusCode::OK,
        "came back after the {wait} s the cache said, and was denied again"
    );
}

/// Starts `DEBUG SLEEP seconds` on a thread and returns once Redis sleeps
/// (it no longer answers a PING within 20 ms).
async fn sleep_redis(
    server: &Arc<RedisServer>,
    seconds: &'static str,
) -> std::thread::JoinHandle<()> {
    let sleeper = Arc::clone(server);
    let stall = std::thread::spawn(move || {
        assert_eq!(
            sleeper.command(&["DEBUG", "SLEEP", seconds]).as_deref(),
            Some("OK")
        );
    });
    let url = server.url();
    tokio::task::spawn_blocking(move || {
        while answers_within(&url, Duration::from_millis(20)) {
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .await
    .expect("the probe");
    stall
}

fn answers_within(url: &str, limit: Duration) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut connection) = client.get_connection_with_timeout(limit) else {
        return false;
    };
    if connection.set_read_timeout(Some(limit)).is_err() {
        return false;
    }
    redis::cmd("PING").query::<String>(&mut connection).is_ok()
}

/// On a cluster, changes go through the master of the channel's slot,
/// whichever master serves the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_another_process_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("the cluster starts");
    let open = || async {
        let redis = RedisStore::builder(cluster.url())
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("the cluster store connects");
        ResilientStore::builder(redis)
            .policy(FailurePolicy::Deny)
            .timeout(Duration::from_secs(2))
            .build()
    };
    let (a, b) = (open().await, open().await);
    let hourly = [rule("1/1h")];
    for key in ["user42", "user43", "user44"] {
        deny_until_cached(&b, key, &hourly).await;
        a.reset(key).await.expect("reset");
        forgotten_within_bound(&b, key, &hourly, Instant::now()).await;
    }
}

/// Through Sentinel, across a failover: the process whose cache answers
/// every request still follows the promoted replica (its subscriber asks
/// the sentinels), so a reset made on the new master reaches it once it
/// follows: within a second of lookups plus the trust.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_another_process_across_a_sentinel_failover() {
    let group = tokio::task::spawn_blocking(SentinelGroup::start)
        .await
        .expect("the sentinels start");
    let open = || async {
        let redis = RedisStore::builder(group.url())
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("the sentinel store connects");
        ResilientStore::builder(redis)
            .policy(FailurePolicy::Deny)
            .timeout(Duration::from_secs(2))
            .build()
    };
    let (a, b) = (open().await, open().await);
    let hourly = [rule("1/1h")];
    deny_until_cached(&b, "user42", &hourly).await;
    let replicated = |group: &SentinelGroup| {
        group
            .replica
            .command(&["EXISTS", &a.inner().state_key("user42", hourly[0])])
            .as_deref()
            == Some("1")
    };
    let started = Instant::now();
    while !replicated(&group) {
        assert!(started.elapsed() < Duration::from_secs(5), "not replicated");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        group.sentinels[0]
            .command(&["SENTINEL", "FAILOVER", MASTER_NAME])
            .as_deref(),
        Some("OK")
    );
    // A follows the failover (its calls ask the sentinels again): a key it
    // writes is on the promoted replica, and not on the old master, which
    // is still a master of its own (the sentinels reconfigure it later).
    let probe = rule("1000000/1m");
    let mut attempt = 0;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "A never followed"
        );
        attempt += 1;
        let key = format!("probe{attempt}");
        let _ = a.acquire(&key, &[probe], 1).await;
        let state = a.inner().state_key(&key, probe);
        let exists = |node: &RedisServer| node.command(&["EXISTS", &state]).as_deref() == Some("1");
        if exists(&group.replica) && !exists(&group.master) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.reset("user42").await.expect("reset on the new master");
    let reset = Instant::now();
    let bound = CHANGE_FEED_TRUST + Duration::from_secs(1);
    while b.acquire_now("user42", &hourly, 1).is_some() {
        assert!(
            reset.elapsed() < bound,
            "B still answers the reset key from its cache {:?} later",
            reset.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("B forgot the key {:?} after the reset", reset.elapsed());
    assert!(b.acquire("user42", &hourly, 1).await.unwrap().allowed());
}

/// A Redis user without the right to the channel (Redis 7 gives a new ACL
/// user none): the cache answers nothing, since it cannot hear of resets,
/// and a reset deletes the key but says that the other processes were not
/// told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_channel_the_cache_answers_nothing_and_a_reset_says_so() {
    let server = RedisServer::start();
    assert_eq!(
        server
            .command(&[
                "ACL",
                "SETUSER",
                "app",
                "on",
                ">app-pass",
                "~*",
                "+@all",
                "resetchannels"
            ])
            .as_deref(),
        Some("OK")
    );
    let url = server.url().replace("redis://", "redis://app:app-pass@");
    let redis = RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the Redis store connects");
    let store = ResilientStore::builder(redis)
        .policy(FailurePolicy::Deny)
        .timeout(Duration::from_secs(2))
        .build();
    let hourly = [rule("1/1h")];
    assert!(store.acquire("k", &hourly, 1).await.unwrap().allowed());
    for _ in 0..20 {
        assert!(!store.acquire("k", &hourly, 1).await.unwrap().allowed());
        assert!(
            store.acquire_now("k", &hourly, 1).is_none(),
            "answered by the cache"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let error = store.reset("k").await.expect_err("not published");
    assert!(error.is_store_failure(), "{error:?}");
    assert!(error.to_string().contains("the key is reset"), "{error}");
    assert!(store.acquire("k", &hourly, 1).await.unwrap().allowed());
}
