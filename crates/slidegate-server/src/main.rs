mod check_json;
mod config;
mod grpc;
mod service;

fn main() {}
