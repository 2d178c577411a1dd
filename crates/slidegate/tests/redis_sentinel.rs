//! The Redis store through Redis Sentinel, on real processes: a master, a
//! replica and three sentinels. Decisions go to the master the sentinels
//! name, follow it when the replica is promoted, and a URL or a deployment
//! that names no master is an error, never a panic. Sentinels that
//! disagree: a node is followed only when a majority of them name it (a
//! real sentinel watching another node, and stand-ins told what to name).

mod common;

use std::time::{Duration, Instant};

use common::redis_server::{MASTER_NAME, RedisServer, SentinelGroup};
use common::standin_sentinel::StandInSentinel;
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
    // second apart while they do), until a second after a majority of the
    // sentinels name the promoted replica.
    while named.is_none_or(|at: Instant| at.elapsed() < Duration::from_millis(1_200)) {
        assert!(started.elapsed() < Duration::from_secs(20), "no failover");
        if named.is_none() && group.naming(group.replica.port()) >= 2 {
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
    // Script calls the old master ran: once it is reconfigured as a
    // replica it holds the new master's keys, but it never runs a call.
    let scripts_on_old = |group: &SentinelGroup| {
        let received = group.master.commands_received();
        ["evalsha", "eval", "script|load"]
            .iter()
            .map(|c| received.get(*c).copied().unwrap_or(0))
            .sum::<u64>()
    };
    let before = scripts_on_old(&group);
    let rule = Rule::parse("5/1m").expect("a valid rule");
    counts_exactly(&store, "after", rule).await;
    let key = store.state_key("after", rule);
    assert_eq!(
        group.replica.command(&["EXISTS", &key]).as_deref(),
        Some("1")
    );
    assert_eq!(
        scripts_on_old(&group),
        before,
        "a decision went to the old master"
    );
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

/// Commands the store sends a node it uses (or checks before using it).
const STORE_COMMANDS: [&str; 4] = ["role", "evalsha", "eval", "script|load"];

/// What `node` received of [`STORE_COMMANDS`] and `AUTH` since its last
/// `CONFIG RESETSTAT`, less the fixture's own `AUTH` before the `INFO`
/// that reads it (when it has a password).
fn received_from_the_store(node: &RedisServer, password: bool) -> Vec<(String, u64)> {
    let mut received = node.commands_received();
    if password {
        let own = received.entry("auth".into()).or_default();
        *own = own.saturating_sub(1);
    }
    received
        .into_iter()
        .filter(|(command, calls)| {
            *calls > 0 && (command == "auth" || STORE_COMMANDS.contains(&command.as_str()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sentinels_naming_m1_outvote_a_third_naming_m2_which_never_sees_the_password() {
    // M1 with its replica and three real sentinels (two of them in the
    // URL); M2 a real master behind the same password, watched under the
    // same name by a real sentinel of its own: the third of the URL.
    let (group, m2, rogue) = off_thread(|| {
        let group = SentinelGroup::start_with_passwords(Some("m4ster"), None);
        let m2 = RedisServer::start_with_args(&["--requirepass", "m4ster"]);
        let rogue = RedisServer::start_sentinel(m2.port(), None, None);
        m2.command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
        (group, m2, rogue)
    })
    .await;
    let sentinel = |s: &RedisServer| format!("127.0.0.1:{}", s.port());
    let url = format!(
        "redis+sentinel://:m4ster@{},{},{}/{MASTER_NAME}",
        sentinel(&rogue),
        sentinel(&group.sentinels[0]),
        sentinel(&group.sentinels[1]),
    );
    let store = store(&url).await;
    let rule = Rule::parse("5/1m").expect("a valid rule");
    // 24 requests over 6 s: the sentinels are asked about 6 times.
    let mut admitted = 0;
    for _ in 0..24 {
        let decision = store
            .acquire("split", &[rule], 1)
            .await
            .expect("a decision from M1");
        admitted += u32::from(decision.allowed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(admitted, 5, "admitted beyond the limit: the counters split");
    let key = store.state_key("split", rule);
    assert_eq!(
        group.master.command(&["EXISTS", &key]).as_deref(),
        Some("1")
    );
    assert_eq!(
        received_from_the_store(&m2, true),
        [],
        "M2, named by one sentinel of three, was sent the password or a call"
    );
    assert_eq!(m2.command(&["EXISTS", &key]).as_deref(), Some("0"));
    drop(rogue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_turned_replica_is_left_for_the_node_the_majority_names_not_one_sentinels() {
    let (m1, m2) = off_thread(|| (RedisServer::start(), RedisServer::start())).await;
    let sentinels: Vec<StandInSentinel> =
        (0..3).map(|_| StandInSentinel::naming(m1.port())).collect();
    let hosts: Vec<String> = sentinels.iter().map(StandInSentinel::addr).collect();
    let store = RedisStore::builder(format!(
        "redis+sentinel://{}/{MASTER_NAME}",
        hosts.join(",")
    ))
    .timeout(Duration::from_millis(500))
    .build()
    .await
    .expect("the store follows M1");
    let rule = Rule::parse("5/1m").expect("a valid rule");
    counts_exactly(&store, "before", rule).await;
    m2.command(&["CONFIG", "RESETSTAT"])
        .expect("CONFIG RESETSTAT");

    // One sentinel names M2, and M1 becomes its replica: M1 is left (no
    // write goes to a replica), and M2 is not followed on one word.
    sentinels[0].name(m2.port());
    let m1 = off_thread(move || {
        m1.command(&["REPLICAOF", "127.0.0.1", &m2.port().to_string()])
            .expect("REPLICAOF");
        while !m1
            .command(&["INFO", "replication"])
            .is_some_and(|info| info.contains("master_link_status:up"))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        (m1, m2)
    })
    .await;
    let (m1, m2) = m1;
    let asked = sentinels[0].asked();
    let probe = Rule::parse("1000000/1m").expect("a rule");
    // Until the lone sentinel has been asked 5 more times: about 5 lookups.
    let mut answered = 0;
    while sentinels[0].asked() < asked + 5 {
        match store.acquire("probe", &[probe], 1).await {
            Ok(_) => answered += 1,
            Err(error) => assert!(error.is_store_failure(), "{error:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first probes may still reach M1 before it turned replica is
    // seen; none may once it has been for a few lookups.
    // Left, not merely refused by it (`READONLY`): no master in use.
    let late = store.acquire("probe", &[probe], 1).await;
    match &late {
        Err(Error::Store(message)) => assert!(
            message.contains("no master") && message.contains("is a slave"),
            "{message} ({answered} answered)"
        ),
        other => panic!(
            "while only one sentinel of three names M2 and M1 is a replica: {other:?} \
             ({answered} answered)"
        ),
    }
    assert_eq!(
        received_from_the_store(&m2, false),
        [],
        "M2 was used on one sentinel's word"
    );

    // A second sentinel names M2: a majority. It is followed at once.
    sentinels[1].name(m2.port());
    let named = Instant::now();
    let followed = loop {
        assert!(
            named.elapsed() < Duration::from_secs(10),
            "never followed M2"
        );
        if store.acquire("probe", &[probe], 1).await.is_ok() {
            break named.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("followed the majority's master {followed:?} after it named it");
    assert!(
        followed < Duration::from_secs(1),
        "followed the majority only after {followed:?}"
    );
    counts_exactly(&store, "after", rule).await;
    let key = store.state_key("after", rule);
    assert_eq!(m2.command(&["EXISTS", &key]).as_deref(), Some("1"));
    drop(m1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_sentinel_down_a_disagreeing_one_leaves_no_master_and_no_password_sent() {
    let (m1, m2) = off_thread(|| {
        let m1 = RedisServer::start_with_args(&["--requirepass", "m4ster"]);
        let m2 = RedisServer::start_with_args(&["--requirepass", "m4ster"]);
        for node in [&m1, &m2] {
            node.command(&["CONFIG", "RESETSTAT"])
                .expect("CONFIG RESETSTAT");
        }
        (m1, m2)
    })
    .await;
    let (honest, rogue) = (
        StandInSentinel::naming(m1.port()),
        StandInSentinel::naming(m2.port()),
    );
    let url = format!(
        "redis+sentinel://:m4ster@{},{},127.0.0.1:{}/{MASTER_NAME}",
        rogue.addr(),
        honest.addr(),
        closed_port()
    );
    match RedisStore::builder(&url).build().await {
        Err(Error::Store(message)) => {
            assert!(message.contains("majority"), "{message}");
            assert!(!message.contains("m4ster"), "{message}");
        }
        other => panic!("a master found with one sentinel for it, one against: {other:?}"),
    }
    assert_eq!(
        received_from_the_store(&m2, true),
        [],
        "M2 was sent the password"
    );
    assert_eq!(
        received_from_the_store(&m1, true),
        [],
        "M1, named by one sentinel of three, was used"
    );
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}
