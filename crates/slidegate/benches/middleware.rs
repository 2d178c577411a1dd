//! The cost of the layer: one trivial axum handler called through
//! `tower::ServiceExt::oneshot` (in process, no network) without a layer,
//! with slidegate's layer (memory store) and with tower_governor 0.8, both
//! keyed by the peer address, on 1 and 10,000 keys. Limits are high enough
//! that every request passes: this measures the admission path.
//!
//! Reference points: `noop_layer`, a layer that does nothing (what any
//! layer costs in axum); `slidegate_gcra`, the same layer with the GCRA
//! algorithm instead of the exact sliding log (what keeping every
//! admission of the window costs); `slidegate_2_rules`, two rules decided
//! together (one batch, a decision per rule).
//!
//! `cargo bench -p slidegate --bench middleware --features tower`
//!
//! On a machine shared with other work, where consecutive benchmarks see
//! different loads, `MIDDLEWARE_ROUNDS=15` instead runs every variant in
//! turn, round after round, and prints each one's median time per request
//! (the variants then share whatever load there is).
//!
//! What users see is over HTTP: `examples/bench_server.rs` serves the same
//! handler for a load generator (`wrk`).

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{Criterion, Throughput};
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

fn slidegate_app(algorithm: Algorithm, rules: &[&str]) -> Router {
    let mut builder = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip());
    for rule in rules {
        let rule = Rule::parse(rule).expect("valid rule");
        builder = builder.rule(rule.with_algorithm(algorithm));
    }
    app().layer(builder.build().expect("valid layer"))
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

/// Every variant: its name (as criterion shows it), the app, the number of
/// peer addresses the requests come from.
fn variants() -> Vec<(String, Router, u32)> {
    const RULE: &str = "1000000000/1s";
    let mut variants = vec![
        ("no_layer".into(), app(), 1),
        ("noop_layer".into(), noop_app(), 1),
    ];
    for keys in KEY_COUNTS {
        variants.extend([
            (
                format!("slidegate/{keys}"),
                slidegate_app(Algorithm::SlidingLog, &[RULE]),
                keys,
            ),
            (
                format!("slidegate_gcra/{keys}"),
                slidegate_app(Algorithm::Gcra, &[RULE]),
                keys,
            ),
            (
                format!("slidegate_2_rules/{keys}"),
                slidegate_app(Algorithm::SlidingLog, &[RULE, "1000000000/2s"]),
                keys,
            ),
            (format!("tower_governor/{keys}"), governor_app(), keys),
        ]);
    }
    variants
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn criterion_group(c: &mut Criterion) {
    let runtime = runtime();
    let mut group = c.benchmark_group("middleware");
    group.throughput(Throughput::Elements(1));
    for (id, app, keys) in variants() {
        group.bench_function(id, |b| {
            b.iter_custom(|iters| run(&runtime, &app, keys, iters))
        });
    }
    group.finish();
}

/// Every variant in turn, `rounds` times 20,000 requests; the median time
/// per request of each.
fn interleaved(rounds: usize) {
    const ITERS: u64 = 20_000;
    let runtime = runtime();
    let variants = variants();
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    for (_, app, keys) in &variants {
        run(&runtime, app, *keys, ITERS);
    }
    for _ in 0..rounds {
        for ((_, app, keys), samples) in variants.iter().zip(&mut samples) {
            let elapsed = run(&runtime, app, *keys, ITERS);
            samples.push(elapsed.as_nanos() as f64 / ITERS as f64);
        }
    }
    let median = |samples: &mut Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let no_layer = median(&mut samples[0]);
    println!("middleware, {rounds} interleaved rounds of {ITERS} requests: median ns per request");
    for ((id, _, _), samples) in variants.iter().zip(&mut samples) {
        let ns = median(samples);
        let loss = (1.0 - no_layer / ns) * 100.0;
        println!(
            "{:32} {ns:7.0} ns  {:6.0} k req/s  throughput loss {loss:5.1}%",
            id,
            1e6 / ns
        );
    }
}

fn main() {
    match std::env::var("MIDDLEWARE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        Some(rounds) => interleaved(rounds),
        None => {
            let mut criterion = Criterion::default().configure_from_args();
            criterion_group(&mut criterion);
            criterion.final_summary();
        }
    }
}
