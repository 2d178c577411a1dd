//! Envoy's rate limit API in the limiter's terms: its request, validated
//! once whichever wire it came by ([`request`]), as protobuf over gRPC
//! ([`proto`]) and as proto3 JSON over HTTP ([`json`]), and the rate limit
//! header fields of its answers ([`headers`]).

pub mod headers;
pub mod json;
pub mod proto;
pub mod request;
pub mod units;
