//! The examples, run as they are: each file is compiled into this test
//! with `#[path]`, and its `app` or `serve` is served on loopback. The
//! Redis example runs against a real `redis-server` (started here; the
//! tests fail, saying how to install it, when there is none).

mod common;
mod support;

#[path = "../examples/tonic_service.rs"]
#[allow(dead_code)]
mod tonic_service;

#[path = "../examples/axum_redis.rs"]
#[allow(dead_code)]
mod axum_redis;

#[path = "../examples/tenant_quotas.rs"]
#[allow(dead_code)]
mod tenant_quotas;

#[path = "../examples/llm_budget.rs"]
#[allow(dead_code)]
mod llm_budget;

// The Redis example includes the login example: one copy of it.
use axum_redis::axum_login;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::redis_log::read_log_until;
use common::redis_server::RedisServer;
use http::StatusCode;
use http_body_util::Full;
use slidegate::{RedisStore, Rule};
use support::{Connection, Reply, manual_store, post, send, send_from};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

fn login(user: &str, password: &str) -> http::Request<Full<Bytes>> {
    let body = serde_json::json!({ "user": user, "password": password }).to_string();
    post("/login")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an address")
}

#[tokio::test]
async fn axum_login_limits_each_account_per_address_and_the_route_overall() {
    let (store, clock) = manual_store();
    let addr = support::serve(axum_login::app(store).expect("app")).await;
    let (here, elsewhere) = (ip("127.0.0.1"), ip("127.0.0.2"));

    for _ in 0..5 {
        let reply = send_from(here, addr, login("alice", "guess")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    // The sixth attempt in the minute is refused, right password or not,
    // and so is the same account written differently.
    let refused = send_from(here, addr, login("alice", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("61"));
    assert_eq!(refused.list("ratelimit"), r#""per-user";r=0;t=61"#);
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["per-user"])
    );
    let refused = send_from(here, addr, login("  ALICE", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);

    // Alice can still log in from elsewhere; both policies are reported.
    let welcome = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(welcome.status, StatusCode::OK);
    assert_eq!(
        welcome.list("ratelimit-policy"),
        r#""route";q=100;w=1, "per-user";q=5;w=60"#
    );
    assert_eq!(
        welcome.list("ratelimit"),
        r#""route";r=94;t=2, "per-user";r=4;t=61"#
    );
    // Other accounts on the first address are not affected.
    let bob = send_from(here, addr, login("bob", "guess")).await;
    assert_eq!(bob.status, StatusCode::UNAUTHORIZED);
    // An attempt that names no account cannot be counted: 400.
    let anonymous = post("/login")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    assert_eq!(
        send_from(here, addr, anonymous).await.status,
        StatusCode::BAD_REQUEST
    );

    // A minute later: 100 attempts a second on the route, whoever makes them.
    clock.advance(Duration::from_secs(61));
    for i in 0..100 {
        let reply = send_from(here, addr, login(&format!("user{i}"), "guess")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "attempt {i}");
    }
    let refused = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["route"])
    );
    assert_eq!(refused.header("retry-after"), Some("2"));
    clock.advance(Duration::from_millis(1_001));
    let welcome = send_from(elsewhere, addr, login("alice", "wonderland")).await;
    assert_eq!(welcome.status, StatusCode::OK);
}

#[tokio::test]
async fn tonic_service_answers_resource_exhausted_with_the_wait() {
    let (store, clock) = manual_store();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { tonic_service::serve(listener, store).await.expect("serve") });

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = HealthClient::new(channel);
    let check = |key: Option<&str>| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        if let Some(key) = key {
            request
                .metadata_mut()
                .insert("x-api-key", key.parse().expect("metadata"));
        }
        request
    };

    for _ in 0..5 {
        client.check(check(Some("k1"))).await.expect("serving");
    }
    clock.advance(Duration::from_millis(300));
    let status = client
        .check(check(Some("k1")))
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted);
    let metadata = status.metadata();
    let text = |name: &str| {
        metadata
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(text("retry-after").as_deref(), Some("1"));
    assert_eq!(
        text("ratelimit-policy").as_deref(),
        Some(r#""per-key";q=5;w=1"#)
    );
    assert_eq!(text("ratelimit").as_deref(), Some(r#""per-key";r=0;t=1"#));
    let retry = status.get_details_retry_info().expect("RetryInfo");
    assert_eq!(retry.retry_delay, Some(Duration::from_micros(700_001)));

    // Other keys, and callers without one (who share a bucket), go on.
    client.check(check(Some("k2"))).await.expect("another key");
    for _ in 0..5 {
        client.check(check(None)).await.expect("anonymous");
    }
    let status = client.check(check(None)).await.expect_err("shared bucket");
    assert_eq!(status.code(), Code::ResourceExhausted);

    clock.advance(Duration::from_millis(701));
    client.check(check(Some("k1"))).await.expect("k1 again");
}

/// Serves one instance of the Redis example on loopback.
async fn redis_instance(server: &RedisServer) -> SocketAddr {
    let app = axum_redis::instance(&server.url())
        .await
        .expect("the instance connects to Redis");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(axum_redis::serve(listener, app));
    addr
}

/// Admitted (the handler answered) or refused by a limit; anything else,
/// or a decision the store could not make, fails the test.
fn admitted(reply: &Reply) -> bool {
    assert_eq!(
        reply.header("slidegate-degraded"),
        None,
        "a decision was not made by Redis (timed out?): the count would not be exact"
    );
    match reply.status {
        StatusCode::UNAUTHORIZED => true,
        StatusCode::TOO_MANY_REQUESTS => false,
        other => panic!("unexpected {other}: {}", reply.body),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_redis_instances_share_each_accounts_five_attempts() {
    let server = RedisServer::start();
    let instances = [redis_instance(&server).await, redis_instance(&server).await];
    let attempts: Vec<_> = (0..40)
        .map(|i| {
            let addr = instances[i % 2];
            tokio::spawn(async move { (i % 2, send(addr, login("alice", "guess")).await) })
        })
        .collect();
    let mut admitted_by = [0; 2];
    let mut refused_by = [0; 2];
    for attempt in attempts {
        let (instance, reply) = attempt.await.expect("an attempt ran");
        if admitted(&reply) {
            admitted_by[instance] += 1;
        } else {
            assert_eq!(
                reply.json()["violated-policies"],
                serde_json::json!(["per-user"])
            );
            refused_by[instance] += 1;
        }
    }
    // 40 concurrent attempts, 20 on each instance: exactly 5 pass in all.
    assert_eq!(
        admitted_by[0] + admitted_by[1],
        5,
        "admitted per instance: {admitted_by:?}"
    );
    assert!(refused_by.iter().all(|&refused| refused >= 15));
    // The account is blocked on both; another one is not.
    for addr in instances {
        let reply = send(addr, login("alice", "wonderland")).await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            send(addr, login("bob", "guess")).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_redis_instances_never_admit_more_than_100_a_second_on_the_route() {
    let server = RedisServer::start();
    let instances = [redis_instance(&server).await, redis_instance(&server).await];
    let rule = Rule::parse("100/s").expect("the route's rule");
    let probe = RedisStore::builder(server.url())
        .build()
        .await
        .expect("connect");
    let log_key = probe.state_key("login|route=POST /login", rule);
    let deadline = Instant::now() + Duration::from_millis(2_500);
    let reader = read_log_until(server.url(), log_key, deadline + Duration::from_millis(100));

    // 16 clients, 8 on each instance, each attempt for a new account so
    // only the route's limit applies.
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let instance = client % 2;
            let addr = instances[instance];
            tokio::spawn(async move {
                let mut connection = Connection::open(addr).await;
                let (mut admitted_here, mut refused_here) = (0u64, 0u64);
                for attempt in 0.. {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let user = format!("user-{client}-{attempt}");
                    let reply = connection.send(login(&user, "guess")).await;
                    if admitted(&reply) {
                        admitted_here += 1;
                    } else {
                        refused_here += 1;
                    }
                }
                (instance, admitted_here, refused_here)
            })
        })
        .collect();
    let mut admitted_by = [0u64; 2];
    let mut refused = 0;
    for client in clients {
        let (instance, admitted_here, refused_here) = client.await.expect("a client ran");
        admitted_by[instance] += admitted_here;
        refused += refused_here;
    }
    let (seen, longest_gap) = reader.join().expect("the reader ran");

    let admitted = admitted_by[0] + admitted_by[1];
    // A record stays in the log until a decision a window (1 s) after it:
    // reads less than 750 ms apart see every one. (250 ms, the bound of a
    // 300 ms window elsewhere, failed a loaded machine's run needlessly.)
    assert!(
        longest_gap < Duration::from_millis(750),
        "the reader stalled for {longest_gap:?}: the machine is too busy for this test"
    );
    assert!(
        admitted_by.iter().all(|&n| n > 0) && refused > admitted,
        "admitted per instance {admitted_by:?}, refused {refused}: the load did not reach the limit"
    );
    assert_eq!(
        seen.values().sum::<u64>(),
        admitted,
        "every admission is in Redis' log, and nothing else"
    );
    let times: Vec<(u64, u64)> = seen.into_iter().collect();
    let fullest = (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|(at, _)| *at <= times[i].0 + rule.window_micros())
                .map(|(_, cost)| cost)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    assert_eq!(
        fullest, 100,
        "the fullest window [t, t + 1 s] holds the limit, never more"
    );
}

fn as_tenant(tenant: &str) -> http::Request<Full<Bytes>> {
    http::Request::get("/")
        .header("x-tenant", tenant)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

/// How many of `n` requests of `tenant` pass.
async fn passed(addr: SocketAddr, tenant: &str, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        let reply = send(addr, as_tenant(tenant)).await;
        match reply.status {
            StatusCode::OK => passed += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}: {reply:?}"),
        }
    }
    passed
}

#[tokio::test]
async fn tenant_quotas_apply_per_tenant_and_change_at_run_time() {
    let registry = slidegate::limits::LimitRegistry::new(slidegate::MemoryStore::new());
    registry
        .set("x-tenant=acme", vec![Rule::parse("5/1m").expect("rule")])
        .await
        .expect("set");
    let addr = support::serve(tenant_quotas::app(&registry).expect("app")).await;
    assert_eq!(passed(addr, "acme", 8).await, 5, "acme's own quota");
    assert_eq!(
        passed(addr, "other", 4).await,
        2,
        "the default for the rest"
    );
    let reply = send(addr, as_tenant("acme")).await;
    assert_eq!(reply.list("ratelimit-policy"), r#""default";q=5;w=60"#);
    // Raised while serving: the next request sees it, and what was used
    // still counts (5 of 7).
    registry
        .set("x-tenant=acme", vec![Rule::parse("7/1m").expect("rule")])
        .await
        .expect("raise");
    assert_eq!(passed(addr, "acme", 4).await, 2);
    // Removed: acme is back to the default, which it has not used.
    registry.remove("x-tenant=acme");
    assert_eq!(passed(addr, "acme", 4).await, 2);
}

fn completion(key: &str, max_tokens: u64, prompt: &'static str) -> http::Request<Full<Bytes>> {
    post("/v1/completions")
        .header("x-api-key", key)
        .header("x-max-tokens", max_tokens.to_string())
        .body(Full::new(Bytes::from_static(prompt.as_bytes())))
        .expect("request")
}

/// The tokens `key` used of the example's budget, once the store says
/// `want` (a commit runs on a task of its own after the body ends).
async fn tokens_settle_at(store: &slidegate::MemoryStore, key: &str, want: u64) {
    use slidegate::Store;
    let rule = Rule::parse(llm_budget::BUDGET).expect("rule");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let decision = Store::peek(store, &format!("x-api-key={key}"), &[rule])
            .await
            .expect("peek");
        let used = rule.limit() - decision.remaining();
        if used == want {
            return;
        }
        assert!(Instant::now() < deadline, "{key} used {used}, never {want}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn llm_budget_reserves_the_most_a_call_may_cost_and_commits_what_it_used() {
    let store = slidegate::MemoryStore::new();
    let addr = support::serve(llm_budget::app(store.clone()).expect("app")).await;
    // Reserved 4,000, streamed 4 tokens, committed 4: three of them.
    for _ in 0..3 {
        let reply = send(addr, completion("k1", 4000, "one two three four")).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "one two three four ");
        // The field shows the reservation: 4,000 taken while it ran.
        assert!(reply.list("ratelimit").starts_with(r#""tokens";r="#));
    }
    tokens_settle_at(&store, "k1", 12).await;
    // What is left is exactly the budget less what was used.
    let over = send(addr, completion("k1", 10_000 - 12 + 1, "x")).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    let fits = send(addr, completion("k1", 10_000 - 12, "x")).await;
    assert_eq!(fits.status, StatusCode::OK);
    tokens_settle_at(&store, "k1", 13).await;
}
