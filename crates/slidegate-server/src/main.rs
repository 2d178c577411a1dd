mod config;
mod service;

fn main() {}
