//! The command line: `slidegate serve` and `slidegate check`.
//!
//! Every flag of `serve`, and the flags shared by all commands (`--store`,
//! `--log-format`), can also be set from the environment (`SLIDEGATE_*`);
//! a flag given on the command line wins over the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use slidegate::store::resilient::FailurePolicy;
use slidegate::{Algorithm, Rate};

use crate::backend::StoreUrl;
use crate::bench::BenchArgs;
use crate::logging::LogFormat;

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
        slidegate serve --store redis://127.0.0.1:6379 --config rules/\n  \
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
    /// Run the rate limit service (HTTP/JSON API v1 and Envoy's gRPC API).
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
    /// Generate load against a store in-process or a running server, and
    /// report decisions per second and latency percentiles.
    Bench(BenchArgs),
    /// Check rule files (envoyproxy/ratelimit YAML) and exit non-zero with
    /// the first error, as `serve --config` would report it.
    ValidateConfig(ValidateConfigArgs),
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

    /// Address (host:port) of Envoy's rate limit gRPC service
    /// (`envoy.service.ratelimit.v3.RateLimitService`) and of the standard
    /// gRPC health service.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SLIDEGATE_GRPC_ADDR",
        default_value = "127.0.0.1:8081"
    )]
    pub grpc_addr: String,

    /// Rules for `/v1/check` and gRPC, in envoyproxy/ratelimit's YAML format
    /// (plus `window` and `algorithm`): a file or a directory of `.yaml`
    /// files. Repeat the flag, or separate paths with commas in the
    /// environment. Reloaded when the files change; a bad file is refused
    /// and the rules in force stay.
    #[arg(
        long = "config",
        value_name = "PATH",
        env = "SLIDEGATE_CONFIG",
        value_delimiter = ','
    )]
    pub config: Vec<PathBuf>,

    /// Merge a domain split over several files (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG) instead of refusing it.
    #[arg(long, env = "SLIDEGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,

    /// Enables `DELETE /v1/keys/{key}` for requests carrying
    /// `Authorization: Bearer TOKEN`. Without it the route is refused.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "SLIDEGATE_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Whose clock the Redis store uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClockMode {
    /// Redis' own clock (`TIME` in the script): one clock for every instance.
    Server,
    /// This process' clock, for Redis deployments that forbid `TIME` in
    /// scripts; keep the instances' clocks in sync.
    Client,
}

/// The store flags, shared by every command that decides.
#[derive(Clone, Debug, Args)]
pub struct StoreArgs {
    /// Where the limiter keeps its state: `memory` (this process only;
    /// lost on restart), `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` (TLS) or `redis+cluster://host1:port1,host2:port2`
    /// (shared by every instance that points at it).
    #[arg(
        long = "store",
        value_name = "URL",
        env = "SLIDEGATE_STORE",
        default_value = "memory"
    )]
    pub url: StoreUrl,

    /// What to answer when the store fails or is too slow: `deny` (fail
    /// closed), `allow` (fail open) or `local` (an in-process store with the
    /// same rules, per instance). Such answers say `"degraded": true`. With
    /// `--store memory` the only failure is a full store, and `local` denies.
    #[arg(
        long = "on-store-error",
        value_name = "POLICY",
        env = "SLIDEGATE_ON_STORE_ERROR",
        default_value = "local"
    )]
    pub on_error: FailurePolicy,

    /// Deadline of one store call, in milliseconds; past it the policy decides.
    #[arg(
        long = "store-timeout-ms",
        value_name = "N",
        env = "SLIDEGATE_STORE_TIMEOUT_MS",
        default_value_t = 50
    )]
    pub timeout_ms: u64,

    /// Whose clock decides time with the Redis store: `server` (Redis' TIME)
    /// or `client` (this process).
    #[arg(
        long = "clock",
        value_name = "C",
        value_enum,
        env = "SLIDEGATE_CLOCK",
        default_value_t = ClockMode::Server
    )]
    pub clock: ClockMode,

    /// How much longer than its window Redis keeps an idle key, in
    /// milliseconds. With `--clock client` it must cover the largest clock
    /// skew between the instances (a key's expiry is measured on the clock
    /// of the instance that last moved it). Default: 1 with `--clock
    /// server`, 1000 with `--clock client`.
    #[arg(
        long = "expiry-margin-ms",
        value_name = "N",
        env = "SLIDEGATE_EXPIRY_MARGIN_MS"
    )]
    pub expiry_margin_ms: Option<u64>,

    /// Most keys the memory store (and the local fallback) holds; new keys
    /// beyond it are decided by --on-store-error, held keys keep their state.
    #[arg(
        long = "max-keys",
        value_name = "N",
        env = "SLIDEGATE_MAX_KEYS",
        default_value_t = 1_000_000
    )]
    pub max_keys: usize,

    /// Bound of the local deny cache in entries (Redis store): a request
    /// the store denied with `retry_after = d` is denied locally for `d`,
    /// exactly, without a round trip. 0 turns the cache off.
    #[arg(
        long = "deny-cache-entries",
        value_name = "N",
        env = "SLIDEGATE_DENY_CACHE_ENTRIES",
        default_value_t = 100_000
    )]
    pub deny_cache_entries: usize,
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
