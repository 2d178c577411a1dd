//! `slidegate`: the rate limit service and its command-line tools.

use std::process::ExitCode;

use clap::Parser;
use slidegate_server::backend::Backend;
use slidegate_server::cli::{Cli, Command};
use slidegate_server::config::{LoadOptions, RateLimitConfig};
use slidegate_server::{bench, check, logging, serve};

/// mimalloc: a request allocates a few dozen short-lived blocks (hyper's,
/// tonic's, prost's, the decision's), which glibc's allocator serves at
/// several times the cost (see docs/BENCHMARKS.md, "The server").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = logging::init(cli.log_format) {
        eprintln!("error: {error:#}");
        return ExitCode::FAILURE;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Check(args) => check::run(args).await,
            Command::Bench(args) => {
                let store = match args.target {
                    Some(_) => None,
                    None => Some(Backend::connect(&args.store).await?),
                };
                bench::run(args, store).await.map(drop)
            }
            Command::ValidateConfig(args) => {
                let options = LoadOptions {
                    merge_domains: args.merge_domains,
                };
                let config = RateLimitConfig::load(&args.paths, options)?;
                let mut domains: Vec<&str> = config.domains().collect();
                domains.sort_unstable();
                println!("ok: {} domain(s): {}", domains.len(), domains.join(", "));
                Ok(())
            }
        }
    })
}
