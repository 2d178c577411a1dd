//! Any bytes as the body of `POST /v1/acquire` and `POST /v1/check`: a
//! request or a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slidegate_server::api::envoy::json::RateLimitRequestJson;
use slidegate_server::api::http::request::parse_acquire;
use slidegate_server::bounds::RequestBounds;

fuzz_target!(|data: &[u8]| {
    let _ = parse_acquire(data, &RequestBounds::default());
    if let Ok(request) = RateLimitRequestJson::from_slice(data) {
        let _ = request.into_request(&RequestBounds::default());
    }
});
