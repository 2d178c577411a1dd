//! Runtime limits shared through Redis, on real `slidegate serve`
//! processes and real redis-server processes (one node, Sentinel,
//! Cluster):
//!
//! - a change made on one server is enforced by every other within
//!   [`BOUND`] of its `PUT` answering, cached denials included;
//! - a server started later decides under them from its first request;
//! - a domain's limit changed on one server: each counter carries what
//!   it used to the new limit once, whichever server checks it first;
//! - Redis down: every server keeps the last set it read and says so
//!   (`/readyz`, a metric, a WARN), never "no limit"; Redis back empty:
//!   it is given the set back.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::redis::{Cluster, Redis, Sentinels};
use http::{Method, StatusCode};
use process::Slidegate;

const TOKEN: &str = "runtime-limits-redis-token";

/// The longest a change made on one server may take to be enforced by
/// every other (docs/RELIABILITY.md).
const BOUND: Duration = Duration::from_secs(1);

fn serve(url: &str) -> Slidegate {
    Slidegate::start(&[
        "--store",
        url,
        "--admin-token",
        TOKEN,
        "--store-timeout-ms",
        "2000",
    ])
}

async fn until_ready(server: &Slidegate) {
    let start = Instant::now();
    while common::get(server.http, "/readyz").await.status != StatusCode::OK {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never ready; logs: {:?}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn put_limit(addr: SocketAddr, key: &str, limit: u64) -> common::Reply {
    let bearer = format!("Bearer {TOKEN}");
    common::request_to(
        addr,
        Method::PUT,
        &format!("/v1/keys/{key}/limit"),
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        format!(r#"{{"rules":[{{"limit":{limit},"window_ms":3600000}}]}}"#).into_bytes(),
    )
    .await
}

async fn get_limit(addr: SocketAddr, key: &str) -> common::Reply {
    let bearer = format!("Bearer {TOKEN}");
    common::request_to(
        addr,
        Method::GET,
        &format!("/v1/keys/{key}/limit"),
        &[("authorization", &bearer)],
        Vec::new(),
    )
    .await
}

async fn acquire(addr: SocketAddr, key: &str) -> common::Reply {
    common::request_to(
        addr,
        Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        format!(r#"{{"key":"{key}"}}"#).into_bytes(),
    )
    .await
}

/// Polls `server` until `done` holds for its answer to `{"key": key}`, and
/// returns how long after `since` that request was sent; fails if one
/// sent later than [`BOUND`] after `since` still does not.
async fn within_bound(
    server: SocketAddr,
    key: &str,
    since: Instant,
    what: &str,
    done: impl Fn(&common::Reply) -> bool,
) -> Duration {
    loop {
        let sent = since.elapsed();
        let reply = acquire(server, key).await;
        if done(&reply) {
            return sent;
        }
        assert!(
            sent < BOUND,
            "{what}: not yet {sent:?} after the change (bound {BOUND:?}): {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(|v| v.trim().parse().expect("a number"))
}

/// A per-key limit set on `servers[0]` is enforced by every other server
/// within the bound; then raised while the others hold a cached denial,
/// they admit within the bound again; a server started later decides
/// under it from its first request.
async fn every_server_enforces_a_change_within_the_bound(url: &str, servers: usize) {
    let running: Vec<Slidegate> = (0..servers).map(|_| serve(url)).collect();
    for server in &running {
        until_ready(server).await;
    }
    let key = "tenant:shared";
    let set = put_limit(running[0].http, key, 1).await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    let answered = Instant::now();
    for (i, server) in running.iter().enumerate().skip(1) {
        let after = within_bound(server.http, key, answered, "a new limit", |r| {
            r.status != StatusCode::BAD_REQUEST
        })
        .await;
        eprintln!("server {i} decided under the new limit {after:?} after the PUT answered");
    }
    // Every server has the key denied now (1 per hour, used); the next
    // denial of each may come from its deny cache.
    for server in &running {
        assert_eq!(
            acquire(server.http, key).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            acquire(server.http, key).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    let raised = put_limit(running[0].http, key, 1 + servers as u64).await;
    assert_eq!(raised.status, StatusCode::OK, "{raised:?}");
    let answered = Instant::now();
    for (i, server) in running.iter().enumerate().skip(1) {
        let after = within_bound(server.http, key, answered, "a raised limit", |r| {
            r.status == StatusCode::OK
        })
        .await;
        eprintln!("server {i} admitted under the raised limit {after:?} after the PUT answered");
    }
    // One used before the raise, one admitted by each other server: the
    // first server has exactly one left, not a fresh quota.
    assert_eq!(acquire(running[0].http, key).await.status, StatusCode::OK);
    assert_eq!(
        acquire(running[0].http, key).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "what was used before the raise still counts"
    );

    let later = serve(url);
    until_ready(&later).await;
    let first = acquire(later.http, key).await;
    assert_eq!(first.status, StatusCode::TOO_MANY_REQUESTS, "{first:?}");
    assert_eq!(get_limit(later.http, key).await.json(), raised.json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_on_one_redis_enforce_a_change_within_the_bound() {
    let redis = Redis::start();
    every_server_enforces_a_change_within_the_bound(&redis.url(), 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_a_sentinel_url_share_the_runtime_limits() {
    let group = tokio::task::spawn_blocking(Sentinels::start).await.unwrap();
    every_server_enforces_a_change_within_the_bound(&group.url(), 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_a_redis_cluster_share_the_runtime_limits() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(3, 0, 5_000))
        .await
        .unwrap();
    every_server_enforces_a_change_within_the_bound(&cluster.url(), 2).await;
}

async fn put_domain(addr: SocketAddr, limit: u64) -> common::Reply {
    let bearer = format!("Bearer {TOKEN}");
    let yaml = format!(
        "domain: tenants\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: hour, requests_per_unit: {limit}}}\n"
    );
    common::request_to(
        addr,
        Method::PUT,
        "/v1/config/domains/tenants",
        &[
            ("authorization", &bearer),
            ("content-type", "application/yaml"),
        ],
        yaml.into_bytes(),
    )
    .await
}

/// Whether a check of `tenant=VALUE` is admitted.
async fn check(addr: SocketAddr, value: &str) -> bool {
    let reply = common::request_to(
        addr,
        Method::POST,
        "/v1/check",
        &[("content-type", "application/json")],
        format!(
            r#"{{"domain":"tenants","descriptors":[{{"entries":[{{"key":"tenant","value":"{value}"}}]}}]}}"#
        )
        .into_bytes(),
    )
    .await;
    match reply.json()["overallCode"].as_str() {
        Some("OK") => true,
        Some("OVER_LIMIT") => false,
        _ => panic!("{reply:?}"),
    }
}

/// Waits until `server` has the domain at `version`.
async fn until_domain_version(server: SocketAddr, version: u64) {
    let bearer = format!("Bearer {TOKEN}");
    let start = Instant::now();
    loop {
        let reply = common::request_to(
            server,
            Method::GET,
            "/v1/config/domains/tenants",
            &[("authorization", &bearer)],
            Vec::new(),
        )
        .await;
        if reply.header("etag") == Some(format!("\"{version}\"").as_str()) {
            return;
        }
        assert!(
            start.elapsed() < BOUND * 5,
            "version {version} never reached {server}: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two servers on one Redis; a domain's 3/h raised to 5/h on one: a
/// tenant that used 3 has 2 left in all, checked in turn on both servers
/// (one carry, not one per server, and not none); a tenant checked
/// first on the other server carries there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_domain_limit_carries_each_counter_once_across_servers() {
    let redis = Redis::start();
    let (a, b) = (serve(&redis.url()), serve(&redis.url()));
    until_ready(&a).await;
    until_ready(&b).await;
    let set = put_domain(a.http, 3).await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    until_domain_version(b.http, set.json()["version"].as_u64().unwrap()).await;
    for tenant in ["x", "y"] {
        for _ in 0..3 {
            assert!(check(a.http, tenant).await);
        }
        assert!(!check(b.http, tenant).await);
    }
    let raised = put_domain(a.http, 5).await;
    assert_eq!(raised.status, StatusCode::OK, "{raised:?}");
    until_domain_version(b.http, raised.json()["version"].as_u64().unwrap()).await;
    let mut admitted = [0, 0];
    for (i, tenant) in ["x", "y"].into_iter().enumerate() {
        // x is first checked on the server that was told, y on the other.
        let servers = if i == 0 {
            [a.http, b.http]
        } else {
            [b.http, a.http]
        };
        for round in 0..6 {
            admitted[i] += usize::from(check(servers[round % 2], tenant).await);
        }
    }
    assert_eq!(admitted, [2, 2], "3 used under 3/h count under 5/h, once");
}

/// Redis down: the server keeps its last set, and says so; a write is a
/// 503. Redis back without them (no persistence): the set is written back
/// and a new server reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_last_set_stays_and_is_given_back() {
    let mut redis = Redis::start();
    let server = serve(&redis.url());
    until_ready(&server).await;
    let set = put_limit(server.http, "tenant:kept", 5).await;
    assert_eq!(set.status, StatusCode::OK);
    let domain = common::request_to(
        server.http,
        Method::PUT,
        "/v1/config/domains/kept",
        &[
            ("authorization", &format!("Bearer {TOKEN}")),
            ("content-type", "application/yaml"),
        ],
        b"domain: kept\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n".to_vec(),
    )
    .await;
    assert_eq!(domain.status, StatusCode::OK, "{domain:?}");

    redis.kill();
    let start = Instant::now();
    let readyz = loop {
        let readyz = common::get(server.http, "/readyz").await;
        if readyz.json()["runtime_limits"]["stale"] == true {
            break readyz;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{readyz:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let detail = &readyz.json()["runtime_limits"];
    assert_eq!(detail["keys"], 1, "{detail}");
    assert_eq!(detail["domains"], 1, "{detail}");
    assert!(detail["error"].is_string(), "{detail}");
    let metrics = common::get(server.http, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert_eq!(
        metric(&text, "slidegate_runtime_limits_stale"),
        Some(1.0),
        "{text}"
    );
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("cannot read the runtime limits")),
        "a WARN says so"
    );
    // Kept: read back, and still the limit of the key.
    let kept = get_limit(server.http, "tenant:kept").await;
    assert_eq!(kept.status, StatusCode::OK);
    assert_eq!(kept.json(), set.json());
    let decided = acquire(server.http, "tenant:kept").await;
    assert_ne!(
        decided.status,
        StatusCode::BAD_REQUEST,
        "never \"no limit\": {decided:?}"
    );
    let config = common::request_to(
        server.http,
        Method::GET,
        "/v1/config",
        &[("authorization", &format!("Bearer {TOKEN}"))],
        Vec::new(),
    )
    .await
    .json();
    assert!(
        config["domains"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["domain"] == "kept"),
        "the runtime domain stays in force: {config}"
    );
    let refused = put_limit(server.http, "tenant:new", 1).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );

    // Back, empty (the fixture runs Redis without persistence).
    redis.restart();
    let start = Instant::now();
    while redis.text(&["EXISTS", "slidegate:v2:shared:{limits}:version"]) != "1" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never written back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fresh = serve(&redis.url());
    until_ready(&fresh).await;
    assert_eq!(
        get_limit(fresh.http, "tenant:kept").await.json(),
        set.json()
    );
    let readyz = common::get(server.http, "/readyz").await.json();
    assert_eq!(readyz["runtime_limits"]["stale"], false, "{readyz}");
}
