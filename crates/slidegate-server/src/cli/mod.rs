//! The command line, and nothing else: clap's definition of every
//! command and flag, each turned into the options of the module that uses
//! it ([`Cli::into_invocation`]). Defaults are the owning modules'
//! constants, shown by clap through them; durations are read by one
//! parser (`values.rs`).
//!
//! Every flag of `serve`, and the flags shared by all commands (`--store`,
//! `--log-format`), can also be set from the environment (`SLIDEGATE_*`);
//! a flag given on the command line wins over the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod bench;
mod check;
mod serve;
mod store;
mod values;
mod xds;

pub use bench::BenchArgs;
pub use check::CheckArgs;
pub use serve::{BoundsArgs, ConnectionArgs, ServeArgs};
pub use store::StoreArgs;
pub use xds::XdsArgs;

use crate::commands::validate_config::ValidateOptions;
use crate::commands::{Command as Run, Invocation};
use crate::telemetry::logging::LogFormat;

/// The `slidegate` command line.
#[derive(Debug, Parser)]
#[command(
    name = "slidegate",
    version,
    about = "Exact sliding-window rate limiting as a service",
    long_about = "Exact sliding-window rate limiting as a service.\n\n\
        `slidegate serve` answers \"may this request pass?\" over HTTP/JSON for any \
        service in any language, and over Envoy's rate limit gRPC API for Envoy, Istio \
        and other proxies; `slidegate check` asks the same question once from the \
        command line; `slidegate bench` measures; `slidegate validate-config` checks \
        rule files.\n\n\
        Logs go to stderr; set their level with RUST_LOG (e.g. RUST_LOG=debug).",
    after_help = "Examples:\n  \
        slidegate serve --http-addr 0.0.0.0:8080\n  \
        slidegate serve --store redis://127.0.0.1:6379 --config examples/rules/\n  \
        curl -s localhost:8080/v1/acquire -H 'content-type: application/json' \\\n    \
        -d '{\"key\":\"login:10.0.0.1\",\"limit\":100,\"window_ms\":60000}'\n  \
        slidegate check --key login:10.0.0.1 --rate 100/1m\n  \
        slidegate bench --store memory --keys 10000 --duration 10s"
)]
pub struct Cli {
    /// Log format: `text` for people, `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "SLIDEGATE_LOG_FORMAT",
        default_value_t = LogFormatArg::from(LogFormat::default())
    )]
    pub log_format: LogFormatArg,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once at startup and moved out at once (boxed in `Run`): its
// size costs nothing, and boxing `ServeArgs` here would leak into clap's
// derive and every match on it.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the rate limit service (HTTP/JSON API v1 and Envoy's gRPC API).
    ///
    /// Stops gracefully on SIGTERM or Ctrl-C: it stops accepting
    /// connections, answers the requests in flight (for at most
    /// --shutdown-grace), closes what is left, then exits 0.
    Serve(Box<ServeArgs>),
    /// Take one decision and print it as JSON (the body of `POST /v1/acquire`).
    ///
    /// Exits 0 whether the request is allowed or denied (read `allowed`);
    /// 3, with a warning on stderr, when the answer is degraded (the store
    /// failed and --on-store-error answered; the decision is printed all
    /// the same); 1 or 2 with a message on bad input. The memory store starts empty
    /// on every run, so with `--store memory` this checks a rule and a key
    /// rather than a shared history.
    Check(CheckArgs),
    /// Generate load against a store in-process or a running server, and
    /// report decisions per second and latency percentiles.
    Bench(BenchArgs),
    /// Check rule files (envoyproxy/ratelimit YAML) and exit non-zero with
    /// the first error, as `serve --config` would report it.
    ValidateConfig(ValidateConfigArgs),
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl From<LogFormat> for LogFormatArg {
    fn from(format: LogFormat) -> LogFormatArg {
        match format {
            LogFormat::Text => LogFormatArg::Text,
            LogFormat::Json => LogFormatArg::Json,
        }
    }
}

impl From<LogFormatArg> for LogFormat {
    fn from(format: LogFormatArg) -> LogFormat {
        match format {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

/// Flags of `slidegate validate-config`.
#[derive(Debug, Args)]
pub struct ValidateConfigArgs {
    /// Rule files or directories.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,

    /// Merge a domain split over several files instead of refusing it.
    #[arg(long)]
    pub merge_domains: bool,

    /// Accept a config with no domain at all, as `serve
    /// --allow-empty-config` does; without it such a config is refused,
    /// as `serve` refuses to start with it.
    #[arg(long)]
    pub allow_empty_config: bool,
}

impl Cli {
    /// What to run, as the commands take it.
    pub fn into_invocation(self) -> Invocation {
        Invocation {
            log_format: self.log_format.into(),
            command: match self.command {
                Command::Serve(args) => Run::Serve(Box::new((*args).into())),
                Command::Check(args) => Run::Check(args.into()),
                Command::Bench(args) => Run::Bench(args.into()),
                Command::ValidateConfig(args) => Run::ValidateConfig(ValidateOptions {
                    paths: args.paths,
                    merge_domains: args.merge_domains,
                    allow_empty: args.allow_empty_config,
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests;
