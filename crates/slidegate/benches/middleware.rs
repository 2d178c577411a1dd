//! The cost of the layer: one trivial axum handler called through
//! `tower::ServiceExt::oneshot` (in process, no network) without a layer,
//! with slidegate's layer (memory store) and with tower_governor 0.8, both
//! keyed by the peer address, on 1 and 10,000 keys. Limits are high enough
//! that every request passes: this measures the admission path.
//!
//! Two reference points: `noop_layer`, a layer that does nothing (what any
//! layer costs in axum), and `slidegate_gcra`, the same layer with the
//! GCRA algorithm instead of the exact sliding log (what keeping every
//! admission of the window costs).
//!
//! `cargo bench -p slidegate --bench middleware --features tower`

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use http::Request;
use slidegate::middleware::{Key, RateLimitLayer};
use slidegate::{Algorithm, MemoryStore, Rule};
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

const KEY_COUNTS: [u32; 2] = [1, 10_000];

fn app() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn slidegate_app(algorithm: Algorithm) -> Router {
    let rule = Rule::parse("1000000000/1s").expect("valid rule");
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule(rule.with_algorithm(algorithm))
        .build()
        .expect("valid layer");
    app().layer(layer)
}

fn noop_app() -> Router {
    app().layer(tower::util::MapRequestLayer::new(|r: Request<Body>| r))
}

fn governor_app() -> Router {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .expect("valid config");
    app().layer(GovernorLayer::new(config))
}

fn request(peer: u32) -> Request<Body> {
    let addr = SocketAddr::from((Ipv4Addr::from(0x0a00_0000 + peer), 40_000));
    let mut request = Request::get("/").body(Body::empty()).expect("request");
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}

/// Calls `app` `iters` times on one runtime thread, spreading the calls
/// over `keys` peer addresses; returns the wall time.
fn run(runtime: &tokio::runtime::Runtime, app: &Router, keys: u32, iters: u64) -> Duration {
    runtime.block_on(async {
        let start = Instant::now();
        for i in 0..iters {
            let peer = (i % u64::from(keys)) as u32;
            let response = app.clone().oneshot(request(peer)).await.expect("response");
            assert!(response.status().is_success());
            black_box(response);
        }
        start.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("middleware");
    group.throughput(Throughput::Elements(1));
    let plain = app();
    group.bench_function("no_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &plain, 1, iters))
    });
    let noop = noop_app();
    group.bench_function("noop_layer", |b| {
        b.iter_custom(|iters| run(&runtime, &noop, 1, iters))
    });
    for keys in KEY_COUNTS {
        let slidegate = slidegate_app(Algorithm::SlidingLog);
        group.bench_function(BenchmarkId::new("slidegate", keys), |b| {
            b.iter_custom(|iters| run(&runtime, &slidegate, keys, iters))
        });
        let gcra = slidegate_app(Algorithm::Gcra);
        group.bench_function(BenchmarkId::new("slidegate_gcra", keys), |b| {
            b.iter_custom(|iters| run(&runtime, &gcra, keys, iters))
        });
        let governor = governor_app();
        group.bench_function(BenchmarkId::new("tower_governor", keys), |b| {
            b.iter_custom(|iters| run(&runtime, &governor, keys, iters))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
