//! Replays the checked-in fuzz corpus (`fuzz/corpus/`) through the same
//! entry points as the fuzz targets, on the stable toolchain: every input
//! the fuzzers kept gives a value or a typed error, never a panic.
//! `scripts/fuzz.sh` runs the fuzzers themselves (nightly).

use std::path::PathBuf;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use slidegate::{MemoryStore, Rate};
use slidegate_server::api::envoy::answer::encode_answer;
use slidegate_server::api::envoy::decode::{Refused, decode_check};
use slidegate_server::api::envoy::json::RateLimitRequestJson;
use slidegate_server::api::envoy::proto as grpc;
use slidegate_server::api::http::request::parse_acquire;
use slidegate_server::bounds::RequestBounds;
use slidegate_server::limiter::check as service;
use slidegate_server::rules::{LoadOptions, RateLimitConfig};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    assert!(inputs.len() >= 5, "{target}: the corpus is missing");
    inputs
}

#[test]
fn the_resp_frame_corpus_parses_within_its_bounds() {
    use slidegate_server::api::resp::frame::{FrameLimits, parse};
    let limits = FrameLimits {
        max_command_bytes: 256,
        max_args: 8,
    };
    let mut commands = 0;
    for input in corpus("resp_frame") {
        let mut at = 0;
        while let Ok(Some(command)) = parse(&input[at..], limits) {
            assert!(command.len > 0 && at + command.len <= input.len());
            assert!(command.len <= limits.max_command_bytes);
            for arg in &command.args {
                assert!(arg.end <= command.len);
            }
            at += command.len;
            commands += 1;
        }
    }
    assert!(commands > 0, "some inputs are commands");
}

#[test]
fn the_rate_parser_corpus_parses_or_errs_and_round_trips() {
    for input in corpus("rate_parser") {
        let Ok(text) = std::str::from_utf8(&input) else {
            continue;
        };
        if let Ok(rate) = text.parse::<Rate>() {
            assert_eq!(rate.to_string().parse::<Rate>().unwrap(), rate, "{text:?}");
        }
        let _ = slidegate::rate::parse_window(text);
    }
}

#[test]
fn the_config_corpus_loads_or_errs() {
    let mut loaded = 0;
    for input in corpus("config_parser") {
        let Ok(text) = std::str::from_utf8(&input) else {
            continue;
        };
        let sources = [("fuzz.yaml".to_owned(), text.to_owned())];
        if let Ok(config) = RateLimitConfig::from_sources(&sources, LoadOptions::default()) {
            loaded += 1;
            let domains: Vec<String> = config.domains().map(str::to_owned).collect();
            for domain in domains {
                let _ = config.lookup(&domain, &[("key", "value"), ("k2", "v2")]);
            }
        }
    }
    assert!(loaded > 0, "some inputs are valid configs");
}

#[test]
fn the_http_body_corpus_decodes_or_errs() {
    for input in corpus("http_body") {
        let _ = parse_acquire(&input, &RequestBounds::default());
        if let Ok(request) = RateLimitRequestJson::from_slice(&input) {
            let _ = request.into_request(&RequestBounds::default());
        }
    }
}

#[tokio::test]
async fn the_grpc_request_corpus_decides_or_errs() {
    let rules = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets/grpc_request.yaml"),
    )
    .unwrap();
    let sources = [("fuzz.yaml".to_owned(), rules)];
    let config = RateLimitConfig::from_sources(&sources, LoadOptions::default()).unwrap();
    let store = MemoryStore::builder().max_keys(10_000).build();
    let mut decided = 0;
    let bounds = RequestBounds::default();
    for input in corpus("grpc_request") {
        // The server's reading, and prost's with `from_proto` beside it:
        // the same check, or a refusal of the same kind.
        let read = decode_check(&input, &bounds);
        let prosts = RateLimitRequest::decode(input.as_slice())
            .map(|request| grpc::from_proto(request, &bounds));
        match (&read, &prosts) {
            (Ok(check), Ok(Ok(reference))) => assert_eq!(check, reference),
            (Err(Refused::Invalid(invalid)), Ok(Err(reference))) => assert_eq!(invalid, reference),
            (Err(Refused::Malformed(_)), Err(_)) => {}
            _ => panic!("{input:02x?}: read as {read:?}, by prost as {prosts:?}"),
        }
        let Ok(request) = read else {
            continue;
        };
        if let Ok(response) = service::check(&config, &store, &request).await {
            decided += 1;
            assert_eq!(response.statuses.len(), request.descriptors.len());
            let mut bytes = Vec::new();
            encode_answer(&response, &[], &mut bytes);
            let answer = RateLimitResponse::decode(bytes.as_slice()).expect("the answer decodes");
            assert_eq!(answer, grpc::to_proto(&response));
        }
    }
    assert!(decided > 0, "some inputs are requests the service decides");
}
