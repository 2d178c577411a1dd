//! The gRPC `ShouldRateLimit` call's own cost on its admitted path: the
//! decoded request in, the answer out, through the service as the server
//! runs it (memory store, the telemetry as its sink, a warmed key). What
//! tonic and prost allocate to decode and frame the message is theirs and
//! not counted here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use slidegate::MemoryStore;
use slidegate_server::api::grpc::RateLimitGrpc;
use slidegate_server::api::grpc::server::ShouldRateLimit;
use slidegate_server::limiter::Limiter;
use slidegate_server::rules::{CurrentConfig, LoadOptions, RateLimitConfig};
use slidegate_server::telemetry::Telemetry;
use tonic::server::UnaryService;

/// Counts the allocations of the current thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const RULES: &str = "\
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";

fn request() -> tonic::Request<RateLimitRequest> {
    tonic::Request::new(RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: "10.0.0.1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    })
}

/// The allocations of an admitted call today: the call's future (boxed
/// once, as tonic's unary calls take it), the descriptor list read from
/// the message, the check's plans, the counter key, the check's statuses
/// and the answer's bytes. Each one cut lowers this number; a new one
/// fails the test.
const ALLOCATIONS_PER_CALL: u64 = 6;

/// The answer's message, decoded outside the counted calls.
fn decoded(
    answer: &tonic::Response<slidegate_server::api::grpc::EncodedAnswer>,
) -> RateLimitResponse {
    RateLimitResponse::decode(answer.get_ref().as_bytes()).expect("the answer decodes")
}

#[tokio::test(flavor = "current_thread")]
async fn an_admitted_should_rate_limit_allocates_at_most_its_budget() {
    slidegate_server::telemetry::metrics::install();
    let config = RateLimitConfig::from_sources(
        &[("rules.yaml".into(), RULES.into())],
        LoadOptions::default(),
    )
    .unwrap();
    let limiter = Limiter::new(
        MemoryStore::new(),
        CurrentConfig::new(config),
        Arc::new(Telemetry::new()),
    );
    let mut method = ShouldRateLimit(Arc::new(RateLimitGrpc::new(limiter)));
    // The first call makes the key's counter and the telemetry's series.
    let first = method.call(request()).await.unwrap();
    assert_eq!(decoded(&first).overall_code, Code::Ok as i32);

    const CALLS: u64 = 1_000;
    let requests: Vec<_> = (0..CALLS).map(|_| request()).collect();
    let mut answers = Vec::with_capacity(CALLS as usize);
    // How many calls made each number of allocations.
    let mut calls_by_count = BTreeMap::new();
    for request in requests {
        let before = ALLOCATIONS.with(Cell::get);
        answers.push(method.call(request).await);
        let count = ALLOCATIONS.with(Cell::get) - before;
        *calls_by_count.entry(count).or_insert(0_u64) += 1;
    }
    for answer in &answers {
        let answer = decoded(answer.as_ref().expect("an answer"));
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert_eq!(answer.statuses.len(), 1);
    }
    // The key's log of admissions grows by doubling, so a few calls (about
    // log2 of the calls) make one allocation more; every other call makes
    // exactly the path's own.
    let usual = calls_by_count
        .iter()
        .max_by_key(|&(_, calls)| *calls)
        .map(|(&count, _)| count);
    assert_eq!(
        usual,
        Some(ALLOCATIONS_PER_CALL),
        "calls by allocations: {calls_by_count:?}"
    );
    assert!(
        calls_by_count
            .iter()
            .all(|(&count, &calls)| count == ALLOCATIONS_PER_CALL
                || (count == ALLOCATIONS_PER_CALL + 1 && calls <= 16)),
        "calls by allocations: {calls_by_count:?}"
    );
}
