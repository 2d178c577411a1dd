//! Envoy's rate limit API in the limiter's terms: its request, validated
//! once whichever wire it came by ([`request`]), as protobuf over gRPC
//! (read from its bytes by [`decode`], against prost's reading in
//! [`proto`]; the answer's bytes written by [`answer`]) and as proto3
//! JSON over HTTP ([`json`]), and the rate limit header fields of its
//! answers ([`headers`]); checks read from protobuf handed back for the
//! next to reuse ([`reuse`]).

pub mod answer;
pub mod decode;
pub mod headers;
pub mod json;
pub mod proto;
pub mod request;
pub mod reuse;
pub mod units;
