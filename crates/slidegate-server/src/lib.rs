//! The `slidegate` service: the pieces behind the `slidegate` binary.
//!
//! - [`cli`]: the command line (`serve`, `check`); the service's flags are
//!   also read from `SLIDEGATE_*` environment variables.
//! - [`backend`]: the store the service decides with, chosen by `--store`.
//! - [`http`]: the HTTP/JSON API v1 (`POST /v1/acquire`, `GET /v1/keys/{key}`,
//!   `GET /healthz`, `GET /readyz`) as an axum router.
//! - [`serve`]: binding, serving and graceful shutdown.
//! - [`listen`]: accepting connections within a cap, and their deadlines.
//! - [`grpc`]: Envoy's rate limit service; [`grpc_listener`] serves it.
//! - [`check`]: one decision from the command line.
//! - [`decision`]: asking the store, and the JSON form of its answer.
//! - [`keyspace`]: the store keys, one key space per kind of counter.
//! - [`bounds`]: how much one request may ask.
//! - [`response_headers`]: the rate limit header fields of check answers.
//! - [`tracing_otlp`]: OpenTelemetry spans over OTLP (`--otlp-endpoint`).
//! - [`stats`]: what the status page (`GET /ui`, `GET /v1/stats`) shows.
//!
//! The service only translates protocols: every limiter decision is made by
//! the [`slidegate`] library's stores.
#![warn(missing_docs)]

pub mod backend;
pub mod bench;
pub mod bounds;
pub mod check;
pub mod check_json;
pub mod cli;
pub mod config;
pub mod decision;
pub mod grpc;
pub mod grpc_listener;
pub mod http;
pub mod keyspace;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod response_headers;
pub mod serve;
pub mod service;
pub mod stats;
pub mod tracing_otlp;
