//! The listeners and their connections: accepting within caps
//! ([`listen`], [`addresses`]), each connection's deadlines ([`conn`]),
//! the bounds of both ([`limits`]), and serving HTTP/1.1 ([`http1`]),
//! gRPC ([`grpc`], [`grpc_calls`], [`grpc_direct`]) and plain streams to a handler that
//! knows their protocol ([`streams`]). Nothing here knows what is served.

pub mod addresses;
pub mod conn;
pub mod grpc;
pub mod grpc_calls;
pub mod grpc_direct;
pub mod http1;
pub mod limits;
pub mod listen;
pub mod streams;

pub use limits::{ConnectionLimits, GrpcLimits};
