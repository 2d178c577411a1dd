//! The rate limit layer's leases on the memory store: `max_in_flight`
//! (a place per request, held until its body ends) and
//! `reserve_and_commit` (an estimate reserved before the handler, what it
//! reports committed after), settled on every path a request can end by:
//! its body's end, its body dropped, an error, a panic, its future
//! dropped. What the store holds is read from the store itself.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use slidegate::middleware::{Key, RateLimitLayer, ReportedCost};
use slidegate::{MemoryStore, Rule, Store};
use tower::{Layer, Service, ServiceExt, service_fn};

const BUDGET: &str = "5000/1m";

fn request(tenant: &str, mode: &str, estimate: u64, actual: u64) -> Request<Body> {
    Request::builder()
        .header("x-tenant", tenant)
        .header("x-mode", mode)
        .header("x-estimate", estimate.to_string())
        .header("x-actual", actual.to_string())
        .body(Body::empty())
        .unwrap()
}

fn header(request: &Request<Body>, name: &str) -> String {
    request.headers()[name].to_str().unwrap().to_owned()
}

/// The handler: reports its cost as asked (in the response's extensions,
/// through the request's handle, chunk by chunk while streaming, or not
/// at all), fails, panics or never ends.
async fn handler(request: Request<Body>) -> Result<Response<Body>, &'static str> {
    let actual: u64 = header(&request, "x-actual").parse().unwrap();
    let handle = request.extensions().get::<ReportedCost>().cloned();
    match header(&request, "x-mode").as_str() {
        "response" => {
            let reported = ReportedCost::new();
            reported.set(actual);
            let mut response = Response::new(Body::from("done"));
            response.extensions_mut().insert(reported);
            Ok(response)
        }
        "request" => {
            handle.expect("the layer's handle").set(actual);
            Ok(Response::new(Body::from("done")))
        }
        // Three chunks, each adding a third of the actual cost as it is
        // produced.
        "stream" => {
            let handle = handle.expect("the layer's handle");
            let chunks = Chunks {
                handle,
                each: actual / 3,
                sent: 0,
            };
            Ok(Response::new(Body::new(chunks)))
        }
        "silent" => Ok(Response::new(Body::from("done"))),
        "fail" => Err("the handler failed"),
        "report-then-fail" => {
            handle.expect("the layer's handle").set(actual);
            Err("the handler failed")
        }
        "panic" => panic!("the handler panicked"),
        "stall" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Response::new(Body::empty()))
        }
        other => panic!("no mode {other}"),
    }
}

/// A body of three chunks, each reporting `each` when produced.
struct Chunks {
    handle: ReportedCost,
    each: u64,
    sent: u8,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.sent == 3 {
            return Poll::Ready(None);
        }
        self.sent += 1;
        self.handle.add(self.each);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk")))))
    }
}

fn budget_layer(
    store: MemoryStore,
) -> RateLimitLayer<MemoryStore, slidegate::middleware::HeaderKey> {
    RateLimitLayer::builder(
        store,
        Key::header(http::HeaderName::from_static("x-tenant")),
    )
    .rule(BUDGET)
    .cost(|head| {
        head.headers["x-estimate"]
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    })
    .reserve_and_commit(Duration::from_secs(60))
    .build()
    .unwrap()
}

/// The budget used by `tenant`, from the store.
async fn used(store: &MemoryStore, tenant: &str) -> u64 {
    let rule = Rule::parse(BUDGET).unwrap();
    let decision = Store::peek(store, &format!("x-tenant={tenant}"), &[rule])
        .await
        .unwrap();
    rule.limit() - decision.remaining()
}

/// Waits until the store says `tenant` used `want` (a settlement runs on
/// a task of its own), and fails naming what it says instead.
async fn settles_at(store: &MemoryStore, tenant: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = used(store, tenant).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{tenant} used {now}, never {want}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn call<S>(service: &mut S, request: Request<Body>) -> Result<Response<Body>, &'static str>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = &'static str>,
{
    service.ready().await.unwrap().call(request).await
}

#[tokio::test]
async fn ten_estimates_on_a_budget_of_five_pass_five_and_commits_give_back() {
    let store = MemoryStore::new();
    let service = budget_layer(store.clone()).layer(service_fn(handler));
    let calls = (0..10).map(|_| {
        let mut service = service.clone();
        tokio::spawn(async move { call(&mut service, request("a", "response", 1000, 200)).await })
    });
    let mut passed = Vec::new();
    let mut refused = 0;
    for call in calls.collect::<Vec<_>>() {
        let response = call.await.unwrap().unwrap();
        match response.status() {
            StatusCode::OK => passed.push(response),
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("answered {other}"),
        }
    }
    assert_eq!((passed.len(), refused), (5, 5));
    assert_eq!(used(&store, "a").await, 5000, "five estimates reserved");
    // Each body read to its end commits its 200: 4,000 given back.
    let mut bodies = Vec::new();
    for response in passed {
        let mut body = response.into_body();
        while body.frame().await.is_some() {}
        bodies.push(body);
    }
    settles_at(&store, "a", 1000).await;
    let mut service = service;
    for _ in 0..4 {
        let response = call(&mut service, request("a", "silent", 1000, 0))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = call(&mut service, request("a", "silent", 1000, 0))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn the_body_end_commits_what_was_reported() {
    let store = MemoryStore::new();
    let mut service = budget_layer(store.clone()).layer(service_fn(handler));
    // Reported in the response's extensions, through the request's
    // handle, and chunk by chunk while streaming; each body kept after its
    // end, so that only the end can have settled it.
    let mut kept = Vec::new();
    for (tenant, mode, actual) in [
        ("a", "response", 300),
        ("b", "request", 400),
        ("c", "stream", 600),
    ] {
        let response = call(&mut service, request(tenant, mode, 1000, actual))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(used(&store, tenant).await, 1000, "the estimate is held");
        let mut body = response.into_body();
        while body.frame().await.is_some() {}
        settles_at(&store, tenant, actual).await;
        kept.push(body);
    }
    // More than the estimate is taken whole.
    let response = call(&mut service, request("d", "request", 1000, 2500))
        .await
        .unwrap();
    let mut body = response.into_body();
    while body.frame().await.is_some() {}
    settles_at(&store, "d", 2500).await;
    kept.push(body);
}

#[tokio::test]
async fn a_body_dropped_commits_the_report_so_far_or_the_estimate() {
    let store = MemoryStore::new();
    let mut service = budget_layer(store.clone()).layer(service_fn(handler));
    // Nothing reported: the estimate.
    let response = call(&mut service, request("a", "silent", 700, 0))
        .await
        .unwrap();
    drop(response);
    // A client gone after one chunk of three: what that chunk reported.
    let response = call(&mut service, request("b", "stream", 1000, 900))
        .await
        .unwrap();
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    assert_eq!(used(&store, "b").await, 1000, "open until the body goes");
    drop(body);
    settles_at(&store, "b", 300).await;
    settles_at(&store, "a", 700).await;
}

#[tokio::test]
async fn an_error_gives_the_reservation_back_unless_a_cost_was_reported() {
    let store = MemoryStore::new();
    let mut service = budget_layer(store.clone()).layer(service_fn(handler));
    assert!(
        call(&mut service, request("a", "fail", 1000, 0))
            .await
            .is_err()
    );
    settles_at(&store, "a", 0).await;
    assert!(
        call(&mut service, request("b", "report-then-fail", 1000, 250))
            .await
            .is_err()
    );
    settles_at(&store, "b", 250).await;
}

#[tokio::test]
async fn a_panic_or_a_dropped_future_commits_the_estimate() {
    let store = MemoryStore::new();
    let mut service = budget_layer(store.clone()).layer(service_fn(handler));
    let panicking = service
        .ready()
        .await
        .unwrap()
        .call(request("a", "panic", 800, 0));
    assert!(
        tokio::spawn(panicking).await.is_err(),
        "the panic reached the caller"
    );
    settles_at(&store, "a", 800).await;

    let stalled = service
        .ready()
        .await
        .unwrap()
        .call(request("b", "stall", 900, 0));
    assert!(
        tokio::time::timeout(Duration::from_millis(50), stalled)
            .await
            .is_err()
    );
    settles_at(&store, "b", 900).await;
}

// --- max_in_flight -------------------------------------------------------

const IN_FLIGHT: u64 = 2;

fn in_flight_layer(
    store: MemoryStore,
) -> RateLimitLayer<MemoryStore, slidegate::middleware::HeaderKey> {
    RateLimitLayer::builder(
        store,
        Key::header(http::HeaderName::from_static("x-tenant")),
    )
    .rule("100/1m")
    .max_in_flight(IN_FLIGHT)
    .build()
    .unwrap()
}

/// The places `tenant` holds, from the store.
async fn held(store: &MemoryStore, tenant: &str) -> u64 {
    let rule = Rule::concurrency(IN_FLIGHT).unwrap();
    let decision = Store::acquire(store, &format!("x-tenant={tenant}"), &[rule], 0)
        .await
        .unwrap();
    IN_FLIGHT - decision.remaining()
}

async fn holds(store: &MemoryStore, tenant: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = held(store, tenant).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{tenant} held {now}, never {want}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The budget of `100/1m` `tenant` used.
async fn requests_counted(store: &MemoryStore, tenant: &str) -> u64 {
    let rule = Rule::parse("100/1m").unwrap();
    let decision = Store::peek(store, &format!("x-tenant={tenant}"), &[rule])
        .await
        .unwrap();
    100 - decision.remaining()
}

#[tokio::test]
async fn a_place_is_held_until_the_body_ends_and_a_refusal_uses_no_quota() {
    let store = MemoryStore::new();
    let mut service = in_flight_layer(store.clone()).layer(service_fn(handler));
    let first = call(&mut service, request("a", "silent", 1, 0))
        .await
        .unwrap();
    let second = call(&mut service, request("a", "silent", 1, 0))
        .await
        .unwrap();
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(held(&store, "a").await, 2);
    let third = call(&mut service, request("a", "silent", 1, 0))
        .await
        .unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let policy = third.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.starts_with("\"in-flight\";q=2"), "{policy}");
    assert_eq!(
        requests_counted(&store, "a").await,
        2,
        "the refusal used no quota"
    );
    // Another key is not held back.
    let other = call(&mut service, request("b", "silent", 1, 0))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    // The body read to its end (and kept) gives its place back.
    let mut body = first.into_body();
    while body.frame().await.is_some() {}
    holds(&store, "a", 1).await;
    // The body dropped unread (the client left).
    drop(second);
    holds(&store, "a", 0).await;
    drop(body);
}

#[tokio::test]
async fn a_place_comes_back_on_an_error_a_panic_and_a_dropped_future() {
    let store = MemoryStore::new();
    let mut service = in_flight_layer(store.clone()).layer(service_fn(handler));
    assert!(
        call(&mut service, request("a", "fail", 1, 0))
            .await
            .is_err()
    );
    holds(&store, "a", 0).await;

    let panicking = service
        .ready()
        .await
        .unwrap()
        .call(request("b", "panic", 1, 0));
    assert!(tokio::spawn(panicking).await.is_err());
    holds(&store, "b", 0).await;

    let stalled = service
        .ready()
        .await
        .unwrap()
        .call(request("c", "stall", 1, 0));
    let mut stalled = Box::pin(stalled);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut stalled)
            .await
            .is_err()
    );
    assert_eq!(held(&store, "c").await, 1, "held while it runs");
    drop(stalled);
    holds(&store, "c", 0).await;
}

#[test]
fn leases_the_store_cannot_grant_fail_at_build() {
    let key = || Key::header(http::HeaderName::from_static("x-tenant"));
    let lockout = RateLimitLayer::builder(MemoryStore::new(), key())
        .rule("10/1m")
        .block_for(Duration::from_secs(60))
        .reserve_and_commit(Duration::from_secs(10))
        .build();
    assert!(lockout.is_err(), "a reserved rule takes no lockout");
    let too_long = RateLimitLayer::builder(MemoryStore::new(), key())
        .rule("10/1s")
        .reserve_and_commit(Duration::from_secs(10))
        .build();
    assert!(too_long.is_err(), "a lease longer than the window");
    let waits = RateLimitLayer::builder(MemoryStore::new(), key())
        .rule("10/1m")
        .reserve_and_commit(Duration::from_secs(10))
        .max_delay(Duration::from_secs(1))
        .build();
    assert!(waits.is_err(), "a reservation cannot wait");
    let none = RateLimitLayer::builder(MemoryStore::new(), key())
        .rule("10/1m")
        .max_in_flight(0)
        .build();
    assert!(none.is_err(), "no place at all");
}
