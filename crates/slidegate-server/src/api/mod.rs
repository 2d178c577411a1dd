//! The protocol fronts: each translates its wire into the limiter's terms,
//! calls the [`Limiter`](crate::limiter::Limiter), and translates back.

pub mod envoy;
pub mod forward_auth;
pub mod grpc;
pub mod http;
pub mod resp;
