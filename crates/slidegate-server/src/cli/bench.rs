//! The flags of `slidegate bench`.

use std::time::Duration;

use clap::Args;
use slidegate::{Algorithm, Rate};

use super::store::StoreArgs;
use super::values::{ShownDuration, any_duration, duration};
use crate::commands::bench::{self, BenchOptions};

/// What to measure.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The store to drive in-process (ignored with --target).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Drive a running server instead: `http://host:port` or `grpc://host:port`.
    #[arg(long)]
    pub target: Option<String>,
    /// What to call on the target. HTTP: `acquire` (POST /v1/acquire, the
    /// default), `acquire-key` (POST /v1/acquire with the key alone, for
    /// keys whose limit is set at run time), `check` (POST /v1/check, domain `bench`, descriptor
    /// `key=<key>`), `healthz` (GET /healthz). gRPC: `should-rate-limit` (the
    /// default, domain `bench`) or `health` (grpc.health.v1 Check).
    #[arg(long)]
    pub op: Option<String>,
    /// Distinct keys, spread evenly over the requests.
    #[arg(long, default_value_t = bench::DEFAULT_KEYS)]
    pub keys: u64,
    /// Requests in flight at once (one connection each against a server).
    #[arg(long, default_value_t = bench::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// How long to run, e.g. `10s`, `500ms`, `1m`.
    #[arg(long, default_value_t = ShownDuration(bench::DEFAULT_DURATION), value_parser = any_duration)]
    pub duration: ShownDuration,
    /// The rule of every decision, e.g. `100/1s`.
    #[arg(long, default_value_t = bench::default_rate())]
    pub rate: Rate,
    /// The algorithm enforcing --rate.
    #[arg(long, default_value_t = Algorithm::default())]
    pub algorithm: Algorithm,
    /// Gives the rule a lockout of this long (`Rule::block_for`), e.g. `1h`.
    #[arg(long, value_parser = duration)]
    pub block_for: Option<Duration>,
    /// Makes the rule report usage (`Rule::reporting`): every hit recorded.
    #[arg(long)]
    pub report: bool,
    /// Print the result as one JSON object (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

impl From<BenchArgs> for BenchOptions {
    fn from(args: BenchArgs) -> BenchOptions {
        BenchOptions {
            store: args.store.into(),
            target: args.target,
            op: args.op,
            keys: args.keys,
            concurrency: args.concurrency,
            duration: args.duration.0,
            rate: args.rate,
            algorithm: args.algorithm,
            block_for: args.block_for,
            report: args.report,
            json: args.json,
        }
    }
}
