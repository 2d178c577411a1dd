//! The tower layer on real axum servers over loopback.

mod support;

use slidegate::store::memory::CompactString;
use std::net::IpAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{Next, from_fn};
use axum::response::Response;
use axum::routing::get;
use http::{HeaderName, StatusCode};
use slidegate::middleware::{
    Key, KeyExtractor, MissingKey, OnStoreError, RateLimitLayer, Rejection, TrustedProxies,
};
use slidegate::{Decision, Error, Hit, MemoryStore, Rule, Store};
use support::{Recording, empty, get as get_req, manual_store, send, send_from};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an address")
}

async fn ok() -> &'static str {
    "ok"
}

/// The authenticated user, as an auth middleware would insert it.
#[derive(Clone, Debug)]
struct UserId(String);

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A stand-in for authentication: trusts `x-user`.
async fn authenticate(mut request: Request, next: Next) -> Response {
    if let Some(user) = request
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
    {
        let user = UserId(user.to_owned());
        request.extensions_mut().insert(user);
    }
    next.run(request).await
}

fn as_user(path: &str, user: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    empty(get_req(path).header("x-user", user))
}

#[tokio::test]
async fn each_user_on_each_route_has_its_own_bucket() {
    let store = Recording::default();
    let layer = RateLimitLayer::builder(
        store.clone(),
        Key::extension::<UserId>("user").and(Key::route()),
    )
    .rule("2/m")
    .build()
    .expect("layer");
    let app = Router::new()
        .route("/a", get(ok))
        .route("/b/{id}", get(ok))
        .layer(layer)
        .layer(from_fn(authenticate));
    let addr = support::serve(app).await;

    for _ in 0..2 {
        assert_eq!(
            send(addr, as_user("/a", "alice")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        send(addr, as_user("/a", "alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(addr, as_user("/a", "bob")).await.status,
        StatusCode::OK
    );
    // Other paths of one route share its bucket.
    assert_eq!(
        send(addr, as_user("/b/1", "alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(addr, as_user("/b/2", "alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(addr, as_user("/b/3", "alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let keys = store.keys();
    assert_eq!(keys[0], "user=alice|route=GET /a");
    assert!(keys.contains(&"user=bob|route=GET /a".to_owned()));
    assert!(keys.contains(&"user=alice|route=GET /b/%7Bid%7D".to_owned()));
}

#[tokio::test]
async fn stacked_layers_each_count_their_own_key() {
    let (outer, inner) = (Recording::default(), Recording::default());
    let app = Router::new()
        .route("/a/{id}", get(ok))
        .route_layer(
            RateLimitLayer::builder(inner.clone(), Key::route())
                .prefix("inner")
                .rule("10/m")
                .build()
                .expect("layer"),
        )
        .route_layer(
            RateLimitLayer::builder(outer.clone(), Key::peer_ip())
                .prefix("outer")
                .rule("10/m")
                .build()
                .expect("layer"),
        );
    let addr = support::serve(app).await;
    for id in ["1", "2"] {
        let path = format!("/a/{id}");
        assert_eq!(
            send(addr, empty(get_req(&path))).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(outer.keys(), ["outer|ip=127.0.0.1", "outer|ip=127.0.0.1"]);
    assert_eq!(
        inner.keys(),
        ["inner|route=GET /a/%7Bid%7D", "inner|route=GET /a/%7Bid%7D"]
    );
}

#[tokio::test]
async fn route_layer_limits_only_its_route() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::route())
        .rule("1/m")
        .build()
        .expect("layer");
    let app = Router::new()
        .route("/limited", get(ok))
        .route_layer(layer)
        .route("/free", get(ok));
    let addr = support::serve(app).await;
    assert_eq!(
        send(addr, empty(get_req("/limited"))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(addr, empty(get_req("/limited"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        assert_eq!(
            send(addr, empty(get_req("/free"))).await.status,
            StatusCode::OK
        );
    }
}

async fn proxied_app(store: &Recording) -> std::net::SocketAddr {
    let trusted = TrustedProxies::new(["127.0.0.2/32"]).expect("ranges");
    let layer = RateLimitLayer::builder(store.clone(), Key::client_ip(trusted))
        .rule("100/m")
        .build()
        .expect("layer");
    support::serve(Router::new().route("/", get(ok)).layer(layer)).await
}

fn forwarded_for(value: &str) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    empty(get_req("/").header("x-forwarded-for", value))
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let store = Recording::default();
    let addr = proxied_app(&store).await;
    send_from(ip("127.0.0.3"), addr, forwarded_for("1.1.1.1")).await;
    send_from(ip("127.0.0.3"), addr, forwarded_for("2.2.2.2, 127.0.0.2")).await;
    assert_eq!(store.keys(), ["ip=127.0.0.3", "ip=127.0.0.3"]);
}

#[tokio::test]
async fn forwarded_for_from_a_trusted_proxy_is_honoured() {
    let store = Recording::default();
    let addr = proxied_app(&store).await;
    let proxy = ip("127.0.0.2");
    send_from(proxy, addr, forwarded_for("5.5.5.5")).await;
    send_from(proxy, addr, forwarded_for("2001:db8::7")).await;
    // No header: the proxy itself is the client.
    send_from(proxy, addr, empty(get_req("/"))).await;
    // IPv6 clients are counted per /64.
    assert_eq!(
        store.keys(),
        ["ip=5.5.5.5", "ip=2001:db8::", "ip=127.0.0.2"]
    );
}

#[tokio::test]
async fn the_chain_is_walked_right_to_left_skipping_trusted_hops() {
    let store = Recording::default();
    let addr = proxied_app(&store).await;
    let proxy = ip("127.0.0.2");
    // The client put 8.8.8.8 in front; the proxies appended 9.9.9.9 and
    // (a second trusted hop) 127.0.0.2.
    send_from(proxy, addr, forwarded_for("8.8.8.8, 9.9.9.9, 127.0.0.2")).await;
    // Several header lines form one list.
    let request = empty(
        get_req("/")
            .header("x-forwarded-for", "7.7.7.7")
            .header("x-forwarded-for", "6.6.6.6"),
    );
    send_from(proxy, addr, request).await;
    // Garbage stops the walk at the last address vouched for.
    send_from(proxy, addr, forwarded_for("1.2.3.4, not-an-ip")).await;
    assert_eq!(store.keys(), ["ip=9.9.9.9", "ip=6.6.6.6", "ip=127.0.0.2"]);
}

#[tokio::test]
async fn forwarded_ipv6_clients_of_one_64_share_a_limit_by_default() {
    let trusted = TrustedProxies::new(["127.0.0.2/32"]).expect("ranges");
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::client_ip(trusted))
        .rule("1/m")
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let from = |client: &str| send_from(ip("127.0.0.2"), addr, forwarded_for(client));
    assert_eq!(from("2001:db8:1:2::a").await.status, StatusCode::OK);
    assert_eq!(
        from("2001:db8:1:2:ffff:1:2:3").await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "same /64"
    );
    assert_eq!(from("2001:db8:1:3::a").await.status, StatusCode::OK);
}

/// Calls `app` with a request from `peer`, put in `ConnectInfo` by hand:
/// loopback offers one IPv6 address (`::1`), not two networks.
async fn status_from(app: &Router, peer: &str) -> StatusCode {
    use tower::ServiceExt;
    let mut request = empty(get_req("/"));
    let peer = std::net::SocketAddr::new(ip(peer), 40000);
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    let response = app.clone().oneshot(request).await.expect("infallible");
    response.status()
}

#[tokio::test]
async fn ipv6_peers_are_counted_per_64_by_default() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("1/m")
        .build()
        .expect("layer");
    let app = Router::new().route("/", get(ok)).layer(layer);
    assert_eq!(status_from(&app, "2001:db8:5:6::1").await, StatusCode::OK);
    assert_eq!(
        status_from(&app, "2001:db8:5:6:a:b:c:d").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status_from(&app, "2001:db8:5:7::1").await, StatusCode::OK);
    // Per address when asked.
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip().ipv6_prefix(128))
        .rule("1/m")
        .build()
        .expect("layer");
    let app = Router::new().route("/", get(ok)).layer(layer);
    assert_eq!(status_from(&app, "2001:db8:5:6::1").await, StatusCode::OK);
    assert_eq!(status_from(&app, "2001:db8:5:6::2").await, StatusCode::OK);
}

/// A layer over a memory store that holds one key, on 127.0.0.2 as a
/// trusted proxy; the failure policy explicitly fails open.
async fn one_key_app() -> std::net::SocketAddr {
    let store: MemoryStore = MemoryStore::builder().max_keys(1).build();
    let trusted = TrustedProxies::new(["127.0.0.2/32"]).expect("ranges");
    let layer = RateLimitLayer::builder(store, Key::client_ip(trusted))
        .rule("100/m")
        .on_store_error(OnStoreError::Allow)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    // 127.0.0.1 takes the one key.
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    addr
}

fn assert_full_denial(reply: &support::Reply) {
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.body
    );
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(reply.header("slidegate-degraded"), Some("true"));
    assert_eq!(reply.json()["status"], 429);
}

#[tokio::test]
async fn a_full_store_denies_new_ipv4_clients_with_429() {
    let addr = one_key_app().await;
    let reply = send_from(ip("127.0.0.3"), addr, empty(get_req("/"))).await;
    assert_full_denial(&reply);
    // The client held is served as before.
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_full_store_denies_new_ipv6_clients_with_429() {
    let addr = one_key_app().await;
    let reply = send_from(ip("127.0.0.2"), addr, forwarded_for("2001:db8::1")).await;
    assert_full_denial(&reply);
}

#[tokio::test]
async fn a_key_holding_as_many_rules_as_the_store_allows_denies_a_new_one() {
    // Two layers on one store and one key space, with different rules.
    let store: MemoryStore = MemoryStore::builder().max_rules_per_key(1).build();
    let per_minute = RateLimitLayer::builder(store.clone(), Key::global())
        .rule("100/m")
        .build()
        .expect("layer");
    let per_hour = RateLimitLayer::builder(store, Key::global())
        .rule("1000/h")
        .build()
        .expect("layer");
    let app = Router::new()
        .route("/", get(ok))
        .layer(per_hour)
        .layer(per_minute);
    let addr = support::serve(app).await;
    // The outer layer's rule takes the key's one place; the inner one's
    // cannot have another.
    assert_full_denial(&send(addr, empty(get_req("/"))).await);
}

/// A store that refuses every key, as a store refuses a layer configured
/// with a prefix that is no valid key.
struct RefusesKeys;

impl Store for RefusesKeys {
    async fn acquire(&self, _: &str, _: &[Rule], _: u64) -> slidegate::Result<Decision> {
        Err(Error::InvalidKey("refused".into()))
    }

    async fn acquire_batch(&self, _: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Err(Error::InvalidKey("refused".into()))
    }

    async fn reset(&self, _: &str) -> slidegate::Result<()> {
        Ok(())
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_store_refusing_the_layers_requests_is_answered_503_even_when_failing_open() {
    let layer = RateLimitLayer::builder(RefusesKeys, Key::peer_ip())
        .rule("1/m")
        .on_store_error(OnStoreError::Allow)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("slidegate-degraded"), Some("true"));
}

#[tokio::test]
async fn a_request_without_a_key_is_rejected_with_400_by_default() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::extension::<UserId>("user"))
        .rule("1/m")
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        reply.json(),
        serde_json::json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "no rate-limit key: the request lacks the key extension",
        })
    );
}

#[tokio::test]
async fn a_request_without_a_key_gets_the_chosen_4xx() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::extension::<UserId>("user"))
        .rule("1/m")
        .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.json()["status"], 401);

    // A 5xx is never sent for a missing key: it becomes 400.
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::extension::<UserId>("user"))
        .rule("1/m")
        .missing_key(MissingKey::Reject(StatusCode::INTERNAL_SERVER_ERROR))
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    assert_eq!(
        send(addr, empty(get_req("/"))).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_request_without_a_key_can_pass_unlimited() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::extension::<UserId>("user"))
        .rule("1/m")
        .missing_key(MissingKey::Allow)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    for _ in 0..3 {
        let reply = send(addr, empty(get_req("/"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit"), None);
    }
}

#[tokio::test]
async fn requests_without_a_key_can_share_one_bucket() {
    let store = Recording::default();
    let layer = RateLimitLayer::builder(store.clone(), Key::extension::<UserId>("user"))
        .rule("2/m")
        .missing_key(MissingKey::Shared)
        .prefix("api")
        .build()
        .expect("layer");
    let app = Router::new()
        .route("/", get(ok))
        .layer(layer)
        .layer(from_fn(authenticate));
    let addr = support::serve(app).await;
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    assert_eq!(
        send(addr, empty(get_req("/"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Identified users keep their own buckets.
    assert_eq!(
        send(addr, as_user("/", "carol")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        store.keys(),
        ["api|nokey", "api|nokey", "api|nokey", "api|user=carol"]
    );
}

#[tokio::test]
async fn ratelimit_headers_on_200_and_429_have_exact_values() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .rule("2/1500ms")
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;

    let first = send(addr, empty(get_req("/"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.list("ratelimit-policy"), r#""default";q=2;w=2"#);
    // The log empties 1.5 s (+1 µs) after the admission: t rounds up to 2.
    assert_eq!(first.list("ratelimit"), r#""default";r=1;t=2"#);
    assert_eq!(first.header("retry-after"), None);

    clock.advance(Duration::from_millis(400));
    let second = send(addr, empty(get_req("/"))).await;
    assert_eq!(second.list("ratelimit"), r#""default";r=0;t=2"#);

    clock.advance(Duration::from_millis(200));
    // 0.9 s until the first admission leaves the window.
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.list("ratelimit-policy"), r#""default";q=2;w=2"#);
    assert_eq!(denied.list("ratelimit"), r#""default";r=0;t=1"#);
    assert_eq!(denied.header("retry-after"), Some("1"));
}

#[tokio::test]
async fn no_ratelimit_headers_on_success_unless_asked() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("5/m")
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), None);
    assert_eq!(reply.header("ratelimit-policy"), None);
    assert_eq!(reply.body, "ok");
}

#[tokio::test]
async fn a_denial_is_a_quota_exceeded_problem() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .policy("per-minute", "1/m")
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    send(addr, empty(get_req("/"))).await;
    clock.advance(Duration::from_millis(17_500));
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(reply.header("retry-after"), Some("43"));
    assert_eq!(reply.list("ratelimit"), r#""per-minute";r=0;t=43"#);
    assert_eq!(
        reply.json(),
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": 429,
            "detail": "the quota 1/1m of policy \"per-minute\" is used up; retry in 43 s",
            "violated-policies": ["per-minute"],
        })
    );
}

#[tokio::test]
async fn several_rules_pass_or_fail_together_and_report_each_policy() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .rule("2/s")
        .rule("3/m")
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;

    // Each policy counts down on its own; a log empties W + 1 µs after its
    // newest entry, so t rounds 1 s + 1 µs up to 2 and 60 s + 1 µs to 61.
    let first = send(addr, empty(get_req("/"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.list("ratelimit-policy"),
        r#""p0";q=2;w=1, "p1";q=3;w=60"#
    );
    assert_eq!(first.list("ratelimit"), r#""p0";r=1;t=2, "p1";r=2;t=61"#);
    let second = send(addr, empty(get_req("/"))).await;
    assert_eq!(second.list("ratelimit"), r#""p0";r=0;t=2, "p1";r=1;t=61"#);

    // p0 denies; p1 would have admitted, and shows its state unchanged.
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.list("ratelimit"), r#""p0";r=0;t=2, "p1";r=1;t=61"#);
    assert_eq!(denied.header("retry-after"), Some("2"));
    assert_eq!(
        denied.json()["violated-policies"],
        serde_json::json!(["p0"])
    );
    assert_eq!(
        denied.list("ratelimit-policy"),
        r#""p0";q=2;w=1, "p1";q=3;w=60"#
    );

    // Denied by p0, the third request was not counted by p1 either: one
    // more passes once p0 has room again.
    clock.advance(Duration::from_millis(1_100));
    let third = send(addr, empty(get_req("/"))).await;
    assert_eq!(third.status, StatusCode::OK);
    assert_eq!(third.list("ratelimit"), r#""p0";r=1;t=2, "p1";r=0;t=61"#);

    // Now only p1 denies: 57.8 s until its oldest entry leaves the window.
    clock.advance(Duration::from_millis(1_100));
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.list("ratelimit"), r#""p0";r=2;t=0, "p1";r=0;t=58"#);
    assert_eq!(denied.header("retry-after"), Some("58"));
    assert_eq!(
        denied.json()["violated-policies"],
        serde_json::json!(["p1"])
    );
    assert_eq!(
        denied.json()["detail"],
        r#"the quota 3/1m of policy "p1" is used up; retry in 58 s"#
    );
}

fn same_limit_layer(
    store: slidegate::MemoryStore<CompactString, slidegate::clock::ManualClock>,
) -> RateLimitLayer<
    slidegate::MemoryStore<CompactString, slidegate::clock::ManualClock>,
    slidegate::middleware::PeerIp,
> {
    RateLimitLayer::builder(store, Key::peer_ip())
        .policy("second", "2/s")
        .policy("minute", "2/m")
        .build()
        .expect("layer")
}

#[tokio::test]
async fn rules_with_the_same_limit_are_told_apart() {
    let (store, clock) = manual_store();
    let addr = support::serve(
        Router::new()
            .route("/", get(ok))
            .layer(same_limit_layer(store)),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    }

    // Both deny: both are violated, and the client waits for the longer.
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.list("ratelimit"),
        r#""second";r=0;t=2, "minute";r=0;t=61"#
    );
    assert_eq!(denied.header("retry-after"), Some("61"));
    assert_eq!(
        denied.json()["violated-policies"],
        serde_json::json!(["second", "minute"])
    );
    assert_eq!(
        denied.json()["detail"],
        r#"the quotas 2/1s of policy "second" and 2/1m of policy "minute" are used up; retry in 61 s"#
    );

    // 1.5 s later only "minute" denies, with its own wait.
    clock.advance(Duration::from_millis(1_500));
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(
        denied.list("ratelimit"),
        r#""second";r=2;t=0, "minute";r=0;t=59"#
    );
    assert_eq!(denied.header("retry-after"), Some("59"));
    assert_eq!(
        denied.json()["violated-policies"],
        serde_json::json!(["minute"])
    );
}

#[tokio::test]
async fn the_rejection_hook_sees_every_policys_decision() {
    let (store, _clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .policy("second", "1/s")
        .policy("minute", "5/m")
        .on_rejection(|rejection, _request, mut response| {
            if let Rejection::RateLimited {
                policy, policies, ..
            } = rejection
            {
                let states: Vec<String> = policies
                    .iter()
                    .map(|p| {
                        let verdict = if p.decision.allowed() { "ok" } else { "over" };
                        format!(
                            "{} {} {verdict} r={}",
                            p.name,
                            p.rule,
                            p.decision.remaining()
                        )
                    })
                    .collect();
                *response.body_mut() = format!("{policy}: {}", states.join(", ")).into();
            }
            response
        })
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    send(addr, empty(get_req("/"))).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        reply.body,
        "second: second 1/1s over r=0, minute 5/1m ok r=4"
    );
}

#[tokio::test]
async fn the_cost_function_weighs_requests() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("10/m")
        .cost(|request| {
            request
                .headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let costing = |cost: &str| empty(get_req("/").header("x-cost", cost));

    assert_eq!(send(addr, costing("6")).await.status, StatusCode::OK);
    let denied = send(addr, costing("5")).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.list("ratelimit"), r#""default";r=4;t=60"#);
    assert_eq!(send(addr, costing("4")).await.status, StatusCode::OK);

    let too_big = send(addr, costing("11")).await;
    assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_big.header("retry-after"), None);
    assert_eq!(
        too_big.json()["detail"],
        "the request costs 11 units, more than the limit of 10: it can never pass"
    );
}

/// A store that always fails the way a remote store times out.
struct Unreachable;

impl Store for Unreachable {
    async fn acquire(&self, _: &str, _: &[Rule], _: u64) -> slidegate::Result<Decision> {
        Err(Error::Timeout(Duration::from_millis(50)))
    }

    async fn acquire_batch(&self, _: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        Err(Error::Timeout(Duration::from_millis(50)))
    }

    async fn reset(&self, _: &str) -> slidegate::Result<()> {
        Err(Error::Timeout(Duration::from_millis(50)))
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Err(Error::Timeout(Duration::from_millis(50)))
    }
}

#[tokio::test]
async fn a_failing_store_lets_requests_through_marked_degraded_by_default() {
    let layer = RateLimitLayer::builder(Unreachable, Key::peer_ip())
        .rule("1/m")
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    for _ in 0..2 {
        let reply = send(addr, empty(get_req("/"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("slidegate-degraded"), Some("true"));
        // Nothing is known about the quota: no RateLimit field.
        assert_eq!(reply.header("ratelimit"), None);
    }
}

#[tokio::test]
async fn a_failing_store_can_deny_with_503() {
    let layer = RateLimitLayer::builder(Unreachable, Key::peer_ip())
        .rule("1/m")
        .on_store_error(OnStoreError::Deny {
            retry_after: Duration::from_millis(1_500),
        })
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let reply = send(addr, empty(get_req("/"))).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("slidegate-degraded"), Some("true"));
    assert_eq!(reply.header("retry-after"), Some("2"));
    assert_eq!(
        reply.json()["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
}

#[tokio::test]
async fn the_rejection_hook_rewrites_responses() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("1/m")
        .on_rejection(|rejection, request, mut response| {
            if let Rejection::RateLimited { policy, .. } = rejection {
                *response.body_mut() =
                    format!("{} {}: {policy}", request.method, request.uri).into();
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain"),
                );
            }
            response
        })
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/x", get(ok)).layer(layer)).await;
    send(addr, empty(get_req("/x"))).await;
    let reply = send(addr, empty(get_req("/x"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("content-type"), Some("text/plain"));
    assert_eq!(reply.header("retry-after"), Some("60"));
    assert_eq!(reply.body, "GET /x: default");
}

#[tokio::test]
async fn a_header_key_counts_per_value() {
    let store = Recording::default();
    let layer = RateLimitLayer::builder(
        store.clone(),
        Key::header(HeaderName::from_static("x-api-key")),
    )
    .rule("1/m")
    .build()
    .expect("layer");
    let addr = support::serve(
        Router::new()
            .route("/", axum::routing::post(ok))
            .layer(layer),
    )
    .await;
    let with_key = |key: &str| empty(support::post("/").header("x-api-key", key));
    assert_eq!(send(addr, with_key("k1")).await.status, StatusCode::OK);
    assert_eq!(send(addr, with_key("k2")).await.status, StatusCode::OK);
    assert_eq!(
        send(addr, with_key("k1")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        store.keys(),
        ["x-api-key=k1", "x-api-key=k2", "x-api-key=k1"]
    );
}

#[tokio::test]
async fn a_denied_request_releases_the_inner_services_readiness() {
    use tower::{Service, ServiceExt};
    // The inner service admits one call at a time: a denial that kept the
    // service readied by poll_ready would block every later call.
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::global())
        .rule("1/m")
        .build()
        .expect("layer");
    let inner = tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
    });
    let mut service = tower::ServiceBuilder::new()
        .layer(layer)
        .concurrency_limit(1)
        .service(inner);
    let run = async {
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let ready = service.ready().await.expect("ready");
            let response = ready
                .call(http::Request::new(String::new()))
                .await
                .expect("response");
            statuses.push(response.status().as_u16());
        }
        statuses
    };
    let statuses = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("no call hangs");
    assert_eq!(statuses, [200, 429, 429, 429]);
}

/// A store that answers only on its second poll, as a network store does.
#[derive(Clone, Default)]
struct Slow(MemoryStore);

impl Store for Slow {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        tokio::task::yield_now().await;
        Store::acquire(&self.0, key, rules, cost).await
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        tokio::task::yield_now().await;
        Store::acquire_batch(&self.0, hits).await
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        Store::reset(&self.0, key).await
    }

    async fn ready(&self) -> slidegate::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_store_that_waits_decides_the_same() {
    let layer = RateLimitLayer::builder(Slow::default(), Key::peer_ip())
        .rule("2/m")
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let first = send(addr, empty(get_req("/"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "ok");
    // The entry counts until it is more than 60 s old: t rounds 60 s + 1 µs up.
    assert_eq!(first.list("ratelimit"), r#""default";r=1;t=61"#);
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("60"));
}

#[tokio::test]
async fn a_store_that_waits_decides_several_rules_the_same() {
    let layer = RateLimitLayer::builder(Slow::default(), Key::peer_ip())
        .rule("2/m")
        .rule("5/h")
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let first = send(addr, empty(get_req("/"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.list("ratelimit"), r#""p0";r=1;t=61, "p1";r=4;t=3601"#);
    assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.list("ratelimit").split(", ").count(), 2);
    assert_eq!(
        denied.json()["violated-policies"],
        serde_json::json!(["p0"])
    );
}

#[tokio::test]
async fn a_waiting_store_keeps_poll_ready_and_call_paired() {
    use tower::{Service, ServiceExt};
    let layer = RateLimitLayer::builder(Slow::default(), Key::global())
        .rule("2/m")
        .build()
        .expect("layer");
    let inner = tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
    });
    let mut service = tower::ServiceBuilder::new()
        .layer(layer)
        .concurrency_limit(1)
        .service(inner);
    let run = async {
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let ready = service.ready().await.expect("ready");
            let response = ready
                .call(http::Request::new(String::new()))
                .await
                .expect("response");
            statuses.push(response.status().as_u16());
        }
        statuses
    };
    let statuses = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("no call hangs");
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[test]
fn a_layer_needs_valid_rules_and_policy_names() {
    use slidegate::middleware::BuildError;
    type Builder =
        slidegate::middleware::RateLimitBuilder<MemoryStore, slidegate::middleware::Global>;
    let build = |f: fn(Builder) -> Builder| {
        f(RateLimitLayer::builder(MemoryStore::new(), Key::global())).build()
    };
    assert_eq!(build(|b| b).err(), Some(BuildError::NoRules));
    assert!(matches!(
        build(|b| b.rule("10/x")).err(),
        Some(BuildError::Rule { index: 0, .. })
    ));
    assert!(matches!(
        build(|b| b.policy("é", "1/s")).err(),
        Some(BuildError::PolicyName(_))
    ));
    assert_eq!(
        build(|b| b.policy("a", "1/s").policy("a", "2/s")).err(),
        Some(BuildError::DuplicatePolicy("a".into()))
    );
    let layer = build(|b| b.rule("1/s").policy("hourly", "100/h")).expect("valid");
    assert_eq!(layer.policy_names().collect::<Vec<_>>(), ["p0", "hourly"]);
}

#[test]
fn extractors_compose() {
    fn is_extractor(_: impl KeyExtractor) {}
    is_extractor(Key::peer_ip().and(Key::route()).and(Key::global()));
    is_extractor(Key::from_fn("tenant", |r| {
        r.headers.get("x-tenant").map(|_| 1)
    }));
}

#[tokio::test]
async fn block_for_locks_a_client_out_of_its_rule_after_a_refusal() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .policy("login", "5/15m")
        .block_for(Duration::from_secs(3600))
        .policy("burst", "100/s")
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/login", get(ok)).layer(layer)).await;
    for _ in 0..5 {
        assert_eq!(
            send(addr, empty(get_req("/login"))).await.status,
            StatusCode::OK
        );
    }
    let sixth = send(addr, empty(get_req("/login"))).await;
    assert_eq!(sixth.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sixth.headers["retry-after"], "3600");
    clock.advance(Duration::from_secs(16 * 60));
    let later = send(addr, empty(get_req("/login"))).await;
    assert_eq!(
        later.status,
        StatusCode::TOO_MANY_REQUESTS,
        "still locked out"
    );
    assert_eq!(later.headers["retry-after"], (3600 - 16 * 60).to_string());
    clock.advance(Duration::from_secs(3600 - 16 * 60));
    assert_eq!(
        send(addr, empty(get_req("/login"))).await.status,
        StatusCode::OK
    );
}

#[test]
fn block_for_needs_a_rule_before_it() {
    let built = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .block_for(Duration::from_secs(60))
        .rule("5/m")
        .build();
    assert!(matches!(
        built,
        Err(slidegate::middleware::BuildError::BlockForWithoutRule)
    ));
}

#[tokio::test]
async fn a_burst_lets_a_gcra_policy_pass_that_many_at_once_then_its_rate() {
    let (store, clock) = manual_store();
    let layer = RateLimitLayer::builder(store, Key::peer_ip())
        .policy("api", "10/s gcra")
        .burst(50)
        .headers_on_success(true)
        .build()
        .expect("layer");
    let addr = support::serve(Router::new().route("/", get(ok)).layer(layer)).await;
    let first = send(addr, empty(get_req("/"))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.headers["ratelimit"], "\"api\";r=49;t=1");
    for _ in 1..50 {
        assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    }
    let denied = send(addr, empty(get_req("/"))).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(1_000));
    for _ in 0..10 {
        assert_eq!(send(addr, empty(get_req("/"))).await.status, StatusCode::OK);
    }
    assert_eq!(
        send(addr, empty(get_req("/"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[test]
fn a_burst_needs_a_gcra_rule_before_it() {
    use slidegate::middleware::BuildError;
    let before = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .burst(5)
        .rule("5/m gcra")
        .build();
    assert!(matches!(before, Err(BuildError::BurstWithoutRule)));
    let sliding = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("5/m")
        .burst(50)
        .build();
    assert!(matches!(
        sliding,
        Err(BuildError::Rule {
            index: 0,
            source: slidegate::Error::InvalidBurst { got: 50, .. }
        })
    ));
}
