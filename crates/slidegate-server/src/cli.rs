//! The command line: `slidegate serve` and `slidegate check`.
//!
//! Every flag of `serve`, and the flags shared by all commands (`--store`,
//! `--log-format`), can also be set from the environment (`SLIDEGATE_*`);
//! a flag given on the command line wins over the environment.

use clap::{Args, Parser, Subcommand};
use slidegate::{Algorithm, Rate};

use crate::backend::StoreUrl;
use crate::logging::LogFormat;

/// The `slidegate` command line.
#[derive(Debug, Parser)]
#[command(
    name = "slidegate",
    version,
    about = "Exact sliding-window rate limiting as a service",
    long_about = "Exact sliding-window rate limiting as a service.\n\n\
        `slidegate serve` answers \"may this request pass?\" over HTTP/JSON for any \
        service in any language; `slidegate check` asks the same question once from \
        the command line.\n\n\
        Logs go to stderr; set their level with RUST_LOG (e.g. RUST_LOG=debug).",
    after_help = "Examples:\n  \
        slidegate serve --http-addr 0.0.0.0:8080\n  \
        curl -s localhost:8080/v1/acquire -H 'content-type: application/json' \\\n    \
        -d '{\"key\":\"login:10.0.0.1\",\"limit\":100,\"window_ms\":60000}'\n  \
        slidegate check --key login:10.0.0.1 --rate 100/1m"
)]
pub struct Cli {
    /// Log format: `text` for people, `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "SLIDEGATE_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the rate limit service (HTTP/JSON API v1).
    ///
    /// Stops gracefully on SIGTERM or Ctrl-C: it stops accepting
    /// connections, answers the requests in flight, then exits 0.
    Serve(ServeArgs),
    /// Take one decision and print it as JSON (the body of `POST /v1/acquire`).
    ///
    /// Exits 0 whether the request is allowed or denied (read `allowed`),
    /// non-zero with a message on bad input. The memory store starts empty
    /// on every run, so with `--store memory` this checks a rule and a key
    /// rather than a shared history.
    Check(CheckArgs),
}

/// Flags of `slidegate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address (host:port) the HTTP API listens on. Use 0.0.0.0:8080 to
    /// accept connections from other machines; port 0 picks a free port.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SLIDEGATE_HTTP_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub http_addr: String,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The store flags, shared by every command that decides.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Where the limiter keeps its state: `memory` (this process only;
    /// lost on restart). The Redis store (`redis://`, `rediss://`,
    /// `redis+cluster://` URLs) is not available in this version yet.
    #[arg(
        long = "store",
        value_name = "URL",
        env = "SLIDEGATE_STORE",
        default_value = "memory"
    )]
    pub url: StoreUrl,
}

/// Flags of `slidegate check`.
///
/// The question flags (`--key`, `--rate`, `--cost`, `--algorithm`) are
/// deliberately not read from the environment: a stray variable must not
/// silently change the question asked.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The key to decide for, e.g. `login:10.0.0.1` (1 to 1024 bytes; braces
    /// only as a `{hash tag}`).
    #[arg(long, value_name = "KEY")]
    pub key: String,

    /// A rate such as `100/1m`, `10/s`, `3/250ms` or `5000/1h`. Repeat the
    /// flag for several rules decided all-or-nothing (`--rate 10/s --rate 1000/1h`).
    #[arg(long = "rate", value_name = "LIMIT/WINDOW", required = true)]
    pub rates: Vec<Rate>,

    /// Units the request consumes; 0 checks without consuming.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub cost: u64,

    /// The algorithm: `sliding_log` (exact), `sliding_counter`,
    /// `fixed_window` or `gcra`.
    #[arg(long, value_name = "NAME", default_value_t = Algorithm::SlidingLog)]
    pub algorithm: Algorithm,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn check_takes_several_rates() {
        let cli = Cli::try_parse_from([
            "slidegate",
            "check",
            "--key",
            "k",
            "--rate",
            "10/s",
            "--rate",
            "1000/1h",
        ]);
        let Ok(Cli {
            command: Command::Check(args),
            ..
        }) = cli
        else {
            panic!("check did not parse: {cli:?}");
        };
        assert_eq!(args.rates.len(), 2);
        assert_eq!(args.cost, 1);
        assert_eq!(args.algorithm, Algorithm::SlidingLog);
    }

    #[test]
    fn check_refuses_a_bad_rate() {
        let cli = Cli::try_parse_from(["slidegate", "check", "--key", "k", "--rate", "0/s"]);
        assert!(cli.is_err());
    }
}
