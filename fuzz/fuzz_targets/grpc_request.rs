//! Any bytes as the body of a gRPC `ShouldRateLimit`: read into a check
//! within the default bounds as the server reads them, which must agree
//! with prost's decoding followed by `from_proto` (the same check, or a
//! refusal of the same kind), and decided against a small config on a
//! memory store. An answer (one status per descriptor) or a typed error,
//! never a panic.
#![no_main]

use std::sync::OnceLock;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use slidegate::MemoryStore;
use slidegate_server::api::envoy::decode::{Refused, decode_check};
use slidegate_server::api::envoy::proto as grpc;
use slidegate_server::bounds::RequestBounds;
use slidegate_server::limiter::check as service;
use slidegate_server::rules::{LoadOptions, RateLimitConfig};

/// Every kind of limit: per value, wildcard, shared, nested, replaced,
/// shadow, quota, detailed, unlimited, blocked.
const RULES: &str = include_str!("grpc_request.yaml");

fn config() -> &'static RateLimitConfig {
    static CONFIG: OnceLock<RateLimitConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let sources = [("fuzz.yaml".to_owned(), RULES.to_owned())];
        RateLimitConfig::from_sources(&sources, LoadOptions::default()).expect("the rules load")
    })
}

fn store() -> &'static MemoryStore {
    static STORE: OnceLock<MemoryStore> = OnceLock::new();
    STORE.get_or_init(|| MemoryStore::builder().max_keys(10_000).build())
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
}

fuzz_target!(|data: &[u8]| {
    let bounds = RequestBounds::default();
    let read = decode_check(data, &bounds);
    let prosts = RateLimitRequest::decode(data).map(|request| grpc::from_proto(request, &bounds));
    match (&read, &prosts) {
        (Ok(check), Ok(Ok(reference))) => assert_eq!(check, reference),
        (Err(Refused::Invalid(invalid)), Ok(Err(reference))) => assert_eq!(invalid, reference),
        (Err(Refused::Malformed(_)), Err(_)) => {}
        _ => panic!("read as {read:?}, by prost as {prosts:?}"),
    }
    let Ok(request) = read else { return };
    let answer = RUNTIME.with(|rt| rt.block_on(service::check(config(), store(), &request)));
    if let Ok(response) = answer {
        assert_eq!(response.statuses.len(), request.descriptors.len());
        let _ = grpc::to_proto(&response);
    }
});
