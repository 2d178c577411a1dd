//! The `slidegate` service: the pieces behind the `slidegate` binary.
//!
//! The service only translates protocols: every limiter decision is made by
//! the [`slidegate`] library's stores.
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
pub mod spans;
pub mod store;
pub mod telemetry;
