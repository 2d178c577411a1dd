//! `slidegate`: the rate limit service and its command-line tools.

use std::process::ExitCode;

use clap::Parser;
use slidegate_server::cli::Cli;
use slidegate_server::commands;

/// mimalloc: a request allocates a few dozen short-lived blocks (hyper's,
/// tonic's, prost's, the decision's), which glibc's allocator serves at
/// several times the cost (see docs/BENCHMARKS.md, "The server").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let invocation = Cli::parse().into_invocation();
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
    commands::run(&runtime, invocation)
}
