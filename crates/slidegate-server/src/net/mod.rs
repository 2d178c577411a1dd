//! The listeners: accepting connections within caps, their deadlines, and
//! serving them (HTTP/1.1, gRPC).

pub mod grpc;
pub mod http1;
pub mod listen;
