//! Recording a decision for the status page allocates nothing when the
//! decision admits (the decision path's budget: a few relaxed atomic
//! additions), and a bounded key when it denies; reporting it to the
//! telemetry (its metrics too, once its series are registered) allocates
//! nothing either.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use slidegate::{Decision, MemoryStore};
use slidegate_server::limiter::Sink;
use slidegate_server::limiter::check::{self, CheckRequest, DescriptorRequest};
use slidegate_server::rules::{LoadOptions, RateLimitConfig};
use slidegate_server::telemetry::Telemetry;
use slidegate_server::telemetry::limits::LimitTable;
use slidegate_server::telemetry::stats::{MAX_KEY_CHARS, Stats};

/// Counts the allocations of the current thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| {
            let (count, bytes) = a.get();
            a.set((count + 1, bytes + layout.size() as u64));
        });
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (count, bytes) made on this thread by `f`.
fn allocations(f: impl FnOnce()) -> (u64, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    let after = ALLOCATIONS.with(Cell::get);
    (after.0 - before.0, after.1 - before.1)
}

const RULES: &str = "\
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
";

fn request(ip: &str) -> CheckRequest {
    CheckRequest {
        domain: "api".into(),
        descriptors: vec![DescriptorRequest {
            entries: vec![("remote_address".into(), ip.into())],
            ..DescriptorRequest::default()
        }],
        hits_addend: 1,
    }
}

#[test]
fn recording_an_admitted_acquire_allocates_nothing() {
    let stats = Stats::new();
    let allowed = Decision::from_parts(true, 10, 9, 0, 1_000);
    stats.record_acquire("warm-up", &allowed);
    let (count, _) = allocations(|| {
        for _ in 0..1_000 {
            stats.record_acquire("client-1", &allowed);
        }
    });
    assert_eq!(count, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn recording_an_admitted_check_allocates_nothing() {
    let config = RateLimitConfig::from_sources(
        &[("rules.yaml".into(), RULES.into())],
        LoadOptions::default(),
    )
    .unwrap();
    let store = MemoryStore::new();
    let stats = Stats::new();
    let table = LimitTable::of(&config);
    let request = request("10.0.0.1");
    let response = check::check(&config, &store, &request).await.unwrap();
    assert_eq!(response.overall, check::Code::Ok);
    let (count, _) = allocations(|| {
        for _ in 0..1_000 {
            stats.record_check(&request, &response, Some(&table));
        }
    });
    assert_eq!(count, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn reporting_an_admitted_check_to_the_telemetry_allocates_nothing() {
    slidegate_server::telemetry::metrics::install();
    let config = RateLimitConfig::from_sources(
        &[("rules.yaml".into(), RULES.into())],
        LoadOptions::default(),
    )
    .unwrap();
    let store = MemoryStore::new();
    let telemetry = Telemetry::new();
    let request = request("10.0.0.2");
    let response = check::check(&config, &store, &request).await.unwrap();
    assert_eq!(response.overall, check::Code::Ok);
    // The first report makes the config's counter table and registers its
    // series.
    telemetry.check_decided(&config, &request, &response);
    let (count, _) = allocations(|| {
        for _ in 0..1_000 {
            telemetry.check_decided(&config, &request, &response);
        }
    });
    assert_eq!(count, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn recording_a_denial_allocates_at_most_one_bounded_key() {
    let config = RateLimitConfig::from_sources(
        &[("rules.yaml".into(), RULES.into())],
        LoadOptions::default(),
    )
    .unwrap();
    let store = MemoryStore::new();
    let stats = Stats::new();
    let table = LimitTable::of(&config);
    let ip = "x".repeat(10_000);
    let request = request(&ip);
    check::check(&config, &store, &request).await.unwrap();
    let denied = check::check(&config, &store, &request).await.unwrap();
    assert_eq!(denied.overall, check::Code::OverLimit);
    stats.record_check(&request, &denied, Some(&table));
    let (count, bytes) = allocations(|| stats.record_check(&request, &denied, Some(&table)));
    // The key shown: at most MAX_KEY_CHARS characters of 4 bytes and the
    // ellipsis, in one string (its parts' list is a second allocation).
    assert!(count <= 2, "{count} allocations");
    assert!(
        bytes <= (MAX_KEY_CHARS as u64 + 3) * 4 + 8 * 16,
        "{bytes} bytes for a 10,000-byte value"
    );
}
