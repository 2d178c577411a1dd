//! Envoy's rate limit API: its request and response, as protobuf and as
//! proto3 JSON, in the limiter's terms.

pub mod headers;
pub mod json;
pub mod proto;
