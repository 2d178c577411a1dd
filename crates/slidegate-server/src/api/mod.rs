//! The protocol fronts: they translate requests and call the limiter.

pub mod envoy;
pub mod http;
