mod bench;
mod check_json;
mod config;
mod grpc;
mod metrics;
mod service;

fn main() {}
