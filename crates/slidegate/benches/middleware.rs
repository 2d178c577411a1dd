//! The cost of the layer: one trivial axum handler called through
//! `tower::ServiceExt::oneshot` (in process, no network) without a layer,
//! with slidegate's layer (memory store) and with tower_governor 0.8, both
//! keyed by the peer address, on 1 and 10,000 keys, the peers drawn in
//! random order (one cheap PRNG, the same sequence for every variant).
//! Limits are high enough that every request passes: this measures the
//! admission path.
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
//! with the spread, and the heap allocations per request, counted by this
//! benchmark's allocator on the benchmark's thread (the handler and axum
//! allocate too: what a layer adds is its count minus `no_layer`'s).
//!
//! `MIDDLEWARE_PROFILE=slidegate/1` (any variant's name) runs that variant
//! alone, `MIDDLEWARE_ITERS` times (200,000 by default): a fixed amount of
//! work to profile, e.g. under `valgrind --tool=callgrind`.
//!
//! What users see is over HTTP: `examples/bench_server.rs` serves the same
//! handler for a load generator (`wrk`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
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

/// The system allocator, counting the allocations made on each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to `System`; the count is a thread-local cell
// that needs no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations (and reallocations) made so far on this thread.
fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The peers of the requests, in random order: xorshift64, the same
/// sequence for every variant.
struct Peers {
    state: u64,
    keys: u64,
}

impl Peers {
    fn new(keys: u32) -> Peers {
        Peers {
            state: 0x9e37_79b9_7f4a_7c15,
            keys: u64::from(keys),
        }
    }

    fn next(&mut self) -> u32 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % self.keys) as u32
    }
}

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

/// A layer with leases: `reserve_and_commit` (the request's cost 1
/// reserved, committed when the response is dropped) or `max_in_flight`
/// (a place held until then).
fn leased_app(reserve: bool) -> Router {
    let builder = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip()).rule("1000000000/1s");
    let builder = if reserve {
        builder.reserve_and_commit(Duration::from_secs(1))
    } else {
        builder.max_in_flight(1_000_000)
    };
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
///
/// Every router is finished with `with_state(())`, as `axum::serve` and
/// `into_make_service` finish it: a router that is not clones its layers
/// and boxes its handler again on every request, which would be counted
/// against the layers.
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
            (format!("slidegate_reserved/{keys}"), leased_app(true), keys),
            (
                format!("slidegate_in_flight/{keys}"),
                leased_app(false),
                keys,
            ),
        ]);
    }
    variants
        .into_iter()
        .map(|(id, app, keys)| (id, app.with_state(()), keys))
        .collect()
}

fn request(peer: u32) -> Request<Body> {
    let addr = SocketAddr::from((Ipv4Addr::from(0x0a00_0000 + peer), 40_000));
    let mut request = Request::get("/").body(Body::empty()).expect("request");
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}

/// Calls `app` `iters` times on one runtime thread, spreading the calls
/// over `keys` peer addresses in random order; returns the wall time and
/// the allocations made.
fn run(
    runtime: &tokio::runtime::Runtime,
    (id, app, keys): (&str, &Router, u32),
    iters: u64,
) -> (Duration, u64) {
    let settles = settles(id);
    runtime.block_on(async {
        let mut peers = Peers::new(keys);
        let allocated = allocations();
        let start = Instant::now();
        for _ in 0..iters {
            let response = app
                .clone()
                .oneshot(request(peers.next()))
                .await
                .expect("response");
            assert!(response.status().is_success());
            black_box(response);
            // A lease is settled by a task of its own once the response is
            // dropped: let it run, as a server's runtime would.
            if settles {
                tokio::task::yield_now().await;
            }
        }
        (start.elapsed(), allocations() - allocated)
    })
}

/// Whether the variant `id` holds a lease per request.
fn settles(id: &str) -> bool {
    id.contains("reserved") || id.contains("in_flight")
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
        group.bench_function(&id, |b| {
            b.iter_custom(|iters| run(&runtime, (&id, &app, keys), iters).0)
        });
    }
    group.finish();
}

/// Every variant in turn, `rounds` times 20,000 requests; the median time
/// per request of each, with the spread, and its allocations per request.
fn interleaved(rounds: usize) {
    const ITERS: u64 = 20_000;
    let runtime = runtime();
    let variants = variants();
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    let mut allocated = vec![0u64; variants.len()];
    for (id, app, keys) in &variants {
        run(&runtime, (id, app, *keys), ITERS);
    }
    for _ in 0..rounds {
        for (((id, app, keys), samples), allocated) in
            variants.iter().zip(&mut samples).zip(&mut allocated)
        {
            let (elapsed, allocations) = run(&runtime, (id, app, *keys), ITERS);
            samples.push(elapsed.as_nanos() as f64 / ITERS as f64);
            *allocated += allocations;
        }
    }
    for samples in &mut samples {
        samples.sort_by(f64::total_cmp);
    }
    let median = |samples: &[f64]| samples[samples.len() / 2];
    let no_layer = median(&samples[0]);
    let requests = (rounds as u64 * ITERS) as f64;
    println!(
        "middleware, {rounds} interleaved rounds of {ITERS} requests: median ns per request (min-max)"
    );
    for (((id, _, _), samples), allocated) in variants.iter().zip(&samples).zip(&allocated) {
        let ns = median(samples);
        let loss = (1.0 - no_layer / ns) * 100.0;
        println!(
            "{:24} {ns:6.0} ns ({:4.0}-{:4.0})  {:5.0} k req/s  loss {loss:5.1}%  {:5.2} allocations/request",
            id,
            samples[0],
            samples[samples.len() - 1],
            1e6 / ns,
            *allocated as f64 / requests
        );
    }
}

/// One variant alone, for a profiler.
fn profile(name: &str, iters: u64) {
    let runtime = runtime();
    let Some((_, app, keys)) = variants().into_iter().find(|(id, _, _)| id == name) else {
        let names: Vec<String> = variants().into_iter().map(|(id, _, _)| id).collect();
        panic!("no variant {name:?}; the variants are {names:?}");
    };
    let (elapsed, allocated) = run(&runtime, (name, &app, keys), iters);
    println!(
        "{name}: {iters} requests, {:.0} ns and {:.2} allocations per request",
        elapsed.as_nanos() as f64 / iters as f64,
        allocated as f64 / iters as f64
    );
}

fn main() {
    if let Ok(name) = std::env::var("MIDDLEWARE_PROFILE") {
        let iters = std::env::var("MIDDLEWARE_ITERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(200_000);
        return profile(&name, iters);
    }
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
