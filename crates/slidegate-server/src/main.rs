//! `slidegate`: the rate limit service and its command-line tools.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use slidegate_server::cli::{Cli, Command};
use slidegate_server::commands::{bench, check, serve};
use slidegate_server::rules::{LoadOptions, RateLimitConfig};
use slidegate_server::store::backend::Backend;
use slidegate_server::telemetry::logging;

/// mimalloc: a request allocates a few dozen short-lived blocks (hyper's,
/// tonic's, prost's, the decision's), which glibc's allocator serves at
/// several times the cost (see docs/BENCHMARKS.md, "The server").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let otlp_endpoint = match &cli.command {
        Command::Serve(args) => args.otlp_endpoint.clone(),
        _ => None,
    };
    // The OTLP exporter is made inside the runtime its gRPC client uses.
    let otlp = {
        let _runtime = runtime.enter();
        match logging::init_with(cli.log_format, otlp_endpoint.as_deref()) {
            Ok(otlp) => otlp,
            Err(error) => {
                eprintln!("error: {error:#}");
                return ExitCode::FAILURE;
            }
        }
    };
    let result = run(&runtime, cli);
    // Sends the spans still buffered while the runtime still runs, within
    // what is left of the shutdown grace (see `Otlp::shutdown`).
    if let Some(otlp) = otlp {
        let grace_ends = match &result {
            Ok(Some(grace_ends)) => *grace_ends,
            Ok(None) | Err(_) => Instant::now(),
        };
        otlp.shutdown(grace_ends);
    }
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; for `serve`, returns when its shutdown grace ends.
fn run(runtime: &tokio::runtime::Runtime, cli: Cli) -> anyhow::Result<Option<Instant>> {
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await.map(Some),
            Command::Check(args) => check::run(args).await.map(|()| None),
            Command::Bench(args) => {
                let store = match args.target {
                    Some(_) => None,
                    None => Some(Backend::connect(&args.store).await?),
                };
                bench::run(args, store).await.map(|_| None)
            }
            Command::ValidateConfig(args) => {
                let options = LoadOptions {
                    merge_domains: args.merge_domains,
                };
                let config = RateLimitConfig::load(&args.paths, options)?;
                let mut domains: Vec<&str> = config.domains().collect();
                domains.sort_unstable();
                println!("ok: {} domain(s): {}", domains.len(), domains.join(", "));
                Ok(None)
            }
        }
    })
}
