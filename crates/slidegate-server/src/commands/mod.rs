//! The commands of the `slidegate` binary, each with the options it runs
//! with, and [`run`], which runs one.

use std::process::ExitCode;
use std::time::Instant;

pub mod bench;
pub mod check;
pub mod parts;
pub mod serve;
pub mod validate_config;

use crate::store::Backend;
use crate::telemetry::logging::{self, LogFormat};

/// A command with its options.
#[derive(Clone, Debug)]
pub enum Command {
    /// `slidegate serve` (boxed: its options are many times the others').
    Serve(Box<serve::ServeOptions>),
    /// `slidegate check`.
    Check(check::CheckOptions),
    /// `slidegate bench`.
    Bench(bench::BenchOptions),
    /// `slidegate validate-config`.
    ValidateConfig(validate_config::ValidateOptions),
}

/// What the binary was asked to do.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// How log lines are written.
    pub log_format: LogFormat,
    /// The command.
    pub command: Command,
}

/// Runs `invocation` on `runtime`, logs (and spans, with `serve
/// --otlp-endpoint`) going where it says; an error is printed on stderr
/// and fails the process.
pub fn run(runtime: &tokio::runtime::Runtime, invocation: Invocation) -> ExitCode {
    let otlp_endpoint = match &invocation.command {
        Command::Serve(options) => options.otlp_endpoint.clone(),
        _ => None,
    };
    // The OTLP exporter is made inside the runtime its gRPC client uses.
    let otlp = {
        let _runtime = runtime.enter();
        match logging::init_with(invocation.log_format, otlp_endpoint.as_deref()) {
            Ok(otlp) => otlp,
            Err(error) => {
                eprintln!("error: {error:#}");
                return ExitCode::FAILURE;
            }
        }
    };
    let result = runtime.block_on(run_command(invocation.command));
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
        Err(error) if error.downcast_ref::<check::Degraded>().is_some() => {
            eprintln!("warning: {error}");
            ExitCode::from(check::DEGRADED_EXIT_CODE)
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; for `serve`, returns when its shutdown grace ends.
async fn run_command(command: Command) -> anyhow::Result<Option<Instant>> {
    match command {
        Command::Serve(options) => serve::run(*options).await.map(Some),
        Command::Check(options) => check::run(options).await.map(|()| None),
        Command::Bench(options) => {
            let store = match options.target {
                Some(_) => None,
                None => Some(Backend::connect(&options.store).await?),
            };
            bench::run(options, store).await.map(|_| None)
        }
        Command::ValidateConfig(options) => validate_config::run(options).map(|()| None),
    }
}
