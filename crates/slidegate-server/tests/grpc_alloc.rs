//! The gRPC `ShouldRateLimit` call's own cost on its admitted path: the
//! request's protobuf bytes read into a check, the answer out, through the
//! service as the server runs it (memory store, the telemetry as its sink,
//! a warmed key). What tonic allocates to frame the message is its own and
//! not counted here. And what a flood of empty descriptors costs to read.

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
use slidegate_server::api::envoy::decode::decode_check;
use slidegate_server::api::grpc::codec::status_of_refusal;
use slidegate_server::api::grpc::server::should_rate_limit;
use slidegate_server::api::grpc::{EncodedAnswer, RateLimitGrpc};
use slidegate_server::bounds::RequestBounds;
use slidegate_server::limiter::Limiter;
use slidegate_server::limiter::check::CheckRequest;
use slidegate_server::rules::{CurrentConfig, LoadOptions, RateLimitConfig};
use slidegate_server::telemetry::Telemetry;
use tonic::server::UnaryService;

/// Counts the allocations of the current thread, and their bytes.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static ALLOCATED_BYTES: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        let _ = ALLOCATED_BYTES.try_with(|a| a.set(a.get() + layout.size() as u64));
        unsafe { System.alloc(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        let _ = ALLOCATED_BYTES.try_with(|a| a.set(a.get() + new_size as u64));
        unsafe { System.realloc(ptr, layout, new_size) }
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

/// The request's protobuf bytes, as a call's frame carries them.
fn request() -> Vec<u8> {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: "10.0.0.1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
    .encode_to_vec()
}

/// What the server's codec makes of the bytes, then the call.
async fn call(
    method: &mut impl UnaryService<CheckRequest, Response = EncodedAnswer>,
    bytes: &[u8],
) -> Result<tonic::Response<EncodedAnswer>, tonic::Status> {
    let check = decode_check(bytes, &RequestBounds::default()).map_err(status_of_refusal)?;
    method.call(tonic::Request::new(check)).await
}

/// The allocations of an admitted call today: the counter key (a
/// `String` the rules' lookup writes), the check's statuses and the
/// answer's bytes. The last two were tried without an allocation, and
/// both were slower than mimalloc's small allocation and free: the
/// statuses held inline make the check's answer larger through the five
/// layers it is returned through; the answer's bytes
/// held inline make the item tonic moves into its stream larger, and a
/// buffer handed back by the encoder costs more in thread-local
/// bookkeeping (docs/BENCHMARKS.md has the figures).
///
/// None for the rest: the call's future is held in tonic's (in the box
/// the server makes per call, which is not counted here), not boxed
/// apart; the check's plan of its one descriptor is held inline; the
/// check read from the message (its domain, its descriptor list, the
/// descriptor's entry list, the entry's key and value) is written into
/// the buffers of the check answered before, handed back by the call.
/// Each one cut lowers this number; a new one fails the test.
const ALLOCATIONS_PER_CALL: u64 = 3;

/// The answer's message, decoded outside the counted calls.
fn decoded(answer: &tonic::Response<EncodedAnswer>) -> RateLimitResponse {
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
    let mut method = should_rate_limit(Arc::new(RateLimitGrpc::new(limiter)));
    // The first call makes the key's counter and the telemetry's series.
    let first = call(&mut method, &request()).await.unwrap();
    assert_eq!(decoded(&first).overall_code, Code::Ok as i32);

    const CALLS: u64 = 1_000;
    let requests: Vec<_> = (0..CALLS).map(|_| request()).collect();
    let mut answers = Vec::with_capacity(CALLS as usize);
    // How many calls made each number of allocations.
    let mut calls_by_count = BTreeMap::new();
    for request in requests {
        let before = ALLOCATIONS.with(Cell::get);
        answers.push(call(&mut method, &request).await);
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

/// A message of the largest size the server takes by default (4 MiB), all
/// empty descriptors (two bytes each, two million of them): read through
/// and refused for their number, keeping no more descriptors than the
/// bound allows. Prost's tree of them would take about 2M x 80 bytes.
#[test]
fn a_flood_of_empty_descriptors_allocates_for_the_bound_only() {
    let bounds = RequestBounds::default();
    let flood = [0x12, 0x00].repeat(2 << 20);
    let before = ALLOCATED_BYTES.with(Cell::get);
    let refused = decode_check(&flood, &bounds);
    let allocated = ALLOCATED_BYTES.with(Cell::get) - before;
    let refused = refused.expect_err("too many descriptors");
    assert!(
        refused.to_string().contains("2097152 descriptors"),
        "{refused}"
    );
    // The descriptors kept up to the bound (a list growing by doubling to
    // 64 of them, about 8 KB in all) and the refusal's message.
    assert!(
        allocated <= 12 << 10,
        "{allocated} bytes allocated to read {} bytes",
        flood.len()
    );
}

/// The same with one descriptor of two million empty entries: counted,
/// refused for their number, no more kept than the bound allows.
#[test]
fn a_flood_of_empty_entries_allocates_for_the_bound_only() {
    let bounds = RequestBounds::default();
    let entries = [0x0a, 0x00].repeat((2 << 20) - 4);
    let mut flood = vec![0x12];
    prost::encoding::encode_varint(entries.len() as u64, &mut flood);
    flood.extend(entries);
    let before = ALLOCATED_BYTES.with(Cell::get);
    let refused = decode_check(&flood, &bounds);
    let allocated = ALLOCATED_BYTES.with(Cell::get) - before;
    let refused = refused.expect_err("too many entries");
    assert!(
        refused
            .to_string()
            .contains("descriptor 0 has more than 16 entries"),
        "{refused}"
    );
    // The entries kept up to the bound (a list growing by doubling to 16
    // empty pairs, about 1.3 KB in all) and the refusal's message.
    assert!(
        allocated <= 4 << 10,
        "{allocated} bytes allocated to read {} bytes",
        flood.len()
    );
}
