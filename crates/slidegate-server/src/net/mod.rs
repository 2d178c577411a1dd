//! The listeners: accepting connections within caps, their deadlines, and
//! serving them.

pub mod grpc;
pub mod listen;
