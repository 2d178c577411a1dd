//! The `slidegate` service: the pieces behind the `slidegate` binary. It
//! translates protocols into calls of the [`slidegate`] library's stores
//! and makes no decision of its own.
//!
//! Imports run one way, top to bottom (`docs/ARCHITECTURE.md` has the
//! map, and the path of a request through it):
//!
//! - [`cli`]: clap's definitions; each command's flags become the options
//!   of the module that uses them.
//! - [`commands`]: `serve` (the one place that puts the parts together),
//!   `check`, `bench`, `validate-config`.
//! - [`api`]: the protocol fronts (Envoy's API as protobuf and proto3
//!   JSON, the HTTP API, the gRPC services); they translate and call the
//!   limiter, nothing else.
//! - [`net`]: the listeners, connection caps and deadlines, serving
//!   HTTP/1.1 and gRPC connections.
//! - [`runtime`]: the limits set at run time through the admin API, kept
//!   in Redis or a file, and put in force.
//! - [`store`]: the store the binary decides with (`--store`).
//! - [`telemetry`]: metrics, the status page's statistics, OTLP export,
//!   logs; it implements the limiter's [`Sink`](limiter::Sink).
//! - [`limiter`]: the decisions (Envoy's check against the rules, ad-hoc
//!   decisions), reported to a sink.
//! - [`rules`]: the rules as plain data, loaded, matched and reloaded.
//! - [`keys`], [`bounds`], [`spans`], [`epoch`]: store keys, request
//!   bounds, the spans of a request, times in JSON; they import nothing of
//!   the crate.
#![warn(missing_docs)]

pub mod api;
pub mod bounds;
pub mod cli;
pub mod commands;
pub mod epoch;
pub mod keys;
pub mod limiter;
pub mod net;
pub mod rules;
pub mod runtime;
pub mod spans;
pub mod store;
pub mod telemetry;
