//! The listeners and their connections: accepting within caps
//! ([`listen`], [`addresses`]), each connection's deadlines ([`conn`]),
//! the bounds of both ([`limits`]), and serving HTTP/1.1 ([`http1`]) and
//! gRPC ([`grpc`], [`grpc_calls`]). Nothing here knows what is served.

pub mod addresses;
pub mod conn;
pub mod grpc;
pub mod grpc_calls;
pub mod http1;
pub mod limits;
pub mod listen;

pub use limits::{ConnectionLimits, GrpcLimits};
