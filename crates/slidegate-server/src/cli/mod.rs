//! The command line: `slidegate serve` and `slidegate check`.
//!
//! Every flag of `serve`, and the flags shared by all commands (`--store`,
//! `--log-format`), can also be set from the environment (`SLIDEGATE_*`);
//! a flag given on the command line wins over the environment.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use slidegate::store::resilient::FailurePolicy;
use slidegate::{Algorithm, Rate};

use crate::api::envoy::headers::ResponseHeaders;
use crate::bounds::RequestBounds;
use crate::commands::bench::BenchArgs;
use crate::commands::serve::ServeLimits;
use crate::net::listen::{self, ConnectionLimits, GrpcLimits};
use crate::store::backend::StoreUrl;
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
    /// connections, answers the requests in flight (for at most
    /// --shutdown-grace), closes what is left, then exits 0.
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
    /// Export spans over OTLP/gRPC to this collector (e.g.
    /// `http://127.0.0.1:4317`): a span per decision and per store call,
    /// continuing the caller's trace (`traceparent`). Off when unset.
    #[arg(long, value_name = "URL", env = "SLIDEGATE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

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
    /// environment. Reloaded when a file's content changes (reads do not
    /// count); a bad file, or a change that would remove a domain in force
    /// (see --allow-empty-config), is refused and the rules in force stay.
    /// Files are regular files of at most 4 MiB.
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

    /// Accept a config with no domain at all (at start or on reload), and
    /// a reload that removes a domain in force. Without it such a config
    /// is refused: a deleted file or an emptied directory must not switch
    /// every limit off.
    #[arg(long, env = "SLIDEGATE_ALLOW_EMPTY_CONFIG")]
    pub allow_empty_config: bool,

    /// Enables `DELETE /v1/keys/{key}` for requests carrying
    /// `Authorization: Bearer TOKEN`, and requires the token for
    /// `GET /v1/keys/{key}` too. Without it `DELETE` is refused and `GET`
    /// is open. A flag is visible to every user of the machine (`ps`):
    /// prefer --admin-token-file.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "SLIDEGATE_ADMIN_TOKEN",
        hide_env_values = true,
        conflicts_with = "admin_token_file"
    )]
    pub admin_token: Option<String>,

    /// Reads the admin token (see --admin-token) from this file; a
    /// trailing newline is ignored.
    #[arg(long, value_name = "PATH", env = "SLIDEGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Rate limit header fields on check answers: `off`, or `draft10` for
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10)
    /// plus `Retry-After` on OVER_LIMIT, sent to Envoy in
    /// `response_headers_to_add` (which Envoy adds to its client's
    /// response) and as headers of `/v1/check` answers. Replaces
    /// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED.
    #[arg(
        long,
        value_name = "FIELDS",
        env = "SLIDEGATE_RESPONSE_HEADERS",
        value_enum,
        default_value_t = ResponseHeaders::Off
    )]
    pub response_headers: ResponseHeaders,

    /// The most `POST /v1/acquire` requests waiting for their turn
    /// (`max_wait_ms`) at once; more are answered 503 `too_many_waiting`
    /// at once. Each holds a connection and a sleeping task, no worker.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_WAITING",
        default_value_t = crate::api::http::waiting::DEFAULT_MAX_WAITING
    )]
    pub max_waiting: usize,

    /// How much one request may ask.
    #[command(flatten)]
    pub bounds: BoundsArgs,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,

    /// Bounds on connections and on a stop (listed last: their help
    /// heading applies to every flag after them).
    #[command(flatten)]
    pub connections: ConnectionArgs,
}

/// Bounds on the listeners' connections, and on a stop.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Connections")]
pub struct ConnectionArgs {
    /// Most connections open at once on each listener (HTTP and gRPC
    /// count apart, so a flood of one cannot lock the other out). At the
    /// cap the listener stops accepting until a connection closes; new
    /// connections wait in the kernel's backlog. Keep the file descriptor
    /// limit (ulimit -n) above twice this.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_CONNECTIONS",
        default_value_t = listen::DEFAULT_MAX_CONNECTIONS as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections: u32,

    /// Most connections one client address may hold open on each
    /// listener (an IPv6 address counts as its /64); one more is closed
    /// as soon as it is accepted. Default: three quarters of
    /// --max-connections, so one address never holds the whole listener,
    /// while an Envoy with many workers, a NAT gateway or a load balancer
    /// still gets most of it. Set it to --max-connections to turn it off.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_CONNECTIONS_PER_IP",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections_per_ip: Option<u32>,

    /// How long a client may take to send a request head (HTTP), counted
    /// from the connection's accept or from the first byte of a later
    /// request, and how long a new gRPC connection may take to start its
    /// first call. Past it the connection is closed.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_HEADER_TIMEOUT",
        default_value = "10s",
        value_parser = positive_duration
    )]
    pub header_timeout: Duration,

    /// How long a connection with no request in flight stays open: an
    /// HTTP keep-alive connection is then closed, a gRPC connection with
    /// no call in flight is sent GOAWAY (its client reconnects for its next
    /// call).
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_IDLE_TIMEOUT",
        default_value = "60s",
        value_parser = positive_duration
    )]
    pub idle_timeout: Duration,

    /// On SIGTERM or Ctrl-C, how long the requests in flight may take to
    /// finish; then the connections still open are closed and the process
    /// exits 0.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_SHUTDOWN_GRACE",
        default_value = "10s",
        value_parser = duration
    )]
    pub shutdown_grace: Duration,

    /// Largest gRPC request message, in bytes; a larger one is refused
    /// (OUT_OF_RANGE) from its length prefix, before it is read.
    #[arg(
        long,
        value_name = "BYTES",
        env = "SLIDEGATE_GRPC_MAX_MESSAGE_BYTES",
        default_value_t = listen::DEFAULT_GRPC_MAX_MESSAGE_BYTES as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub grpc_max_message_bytes: u32,

    /// Streams (calls) one gRPC connection may have open at once.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_GRPC_MAX_CONCURRENT_STREAMS",
        default_value_t = listen::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub grpc_max_concurrent_streams: u32,

    /// Longest a gRPC call may take; past it the call ends with
    /// CANCELLED. A client's shorter `grpc-timeout` wins.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_GRPC_REQUEST_TIMEOUT",
        default_value = "10s",
        value_parser = positive_duration
    )]
    pub grpc_request_timeout: Duration,

    /// Age at which a gRPC connection is asked to go away (HTTP/2
    /// GOAWAY; clients such as Envoy reconnect at once), so no connection
    /// holds one of the --max-connections forever. Its calls in flight
    /// then get --grpc-request-timeout to finish before it is closed.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_GRPC_MAX_CONNECTION_AGE",
        default_value = "30m",
        value_parser = positive_duration
    )]
    pub grpc_max_connection_age: Duration,
}

impl ConnectionArgs {
    /// The bounds these flags set.
    pub fn limits(&self) -> ServeLimits {
        let max_connections = self.max_connections as usize;
        let connections = ConnectionLimits {
            max_connections,
            max_connections_per_ip: self.max_connections_per_ip.map_or_else(
                || listen::default_max_connections_per_ip(max_connections),
                |max| max as usize,
            ),
            header_timeout: self.header_timeout,
            idle_timeout: Some(self.idle_timeout),
        };
        ServeLimits {
            http: connections,
            grpc: GrpcLimits {
                connections,
                max_message_bytes: self.grpc_max_message_bytes as usize,
                max_concurrent_streams: self.grpc_max_concurrent_streams,
                request_timeout: self.grpc_request_timeout,
                max_connection_age: self.grpc_max_connection_age,
            },
            shutdown_grace: self.shutdown_grace,
        }
    }
}

/// A duration such as `500ms`, `10s` or `1m`.
fn duration(text: &str) -> Result<Duration, String> {
    slidegate::rate::parse_window(text)
        .map_err(|_| format!("'{text}' is not a duration (expected e.g. 500ms, 10s, 1m)"))
}

/// A [`duration`] above zero.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        Duration::ZERO => Err("must be above zero".into()),
        d => Ok(d),
    }
}

impl ServeArgs {
    /// The admin token, from --admin-token or read from --admin-token-file.
    /// The error never shows the token.
    pub fn admin_token(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = &self.admin_token_file else {
            return Ok(self.admin_token.clone());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the admin token file {}", path.display()))?;
        let token = text.trim_end_matches(['\r', '\n']);
        anyhow::ensure!(
            !token.is_empty(),
            "the admin token file {} is empty",
            path.display()
        );
        Ok(Some(token.to_owned()))
    }
}

/// The bounds on what one request may ask (see [`RequestBounds`]).
#[derive(Clone, Debug, Args)]
pub struct BoundsArgs {
    /// Most descriptors in one gRPC `ShouldRateLimit` or `POST /v1/check`;
    /// a request with more is refused (INVALID_ARGUMENT, 400) before any work.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_DESCRIPTORS",
        default_value_t = RequestBounds::MAX_DESCRIPTORS,
        value_parser = at_least_one
    )]
    pub max_descriptors: usize,

    /// Most entries in one descriptor; a request with more is refused.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_DESCRIPTOR_ENTRIES",
        default_value_t = RequestBounds::MAX_DESCRIPTOR_ENTRIES,
        value_parser = at_least_one
    )]
    pub max_descriptor_entries: usize,

    /// Largest limit a client may ask for in `POST /v1/acquire` and
    /// `GET /v1/keys/{key}` (the rules of --config are exempt).
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_ADHOC_LIMIT",
        default_value_t = RequestBounds::MAX_ADHOC_LIMIT,
        value_parser = clap::value_parser!(u64).range(1..=Rate::MAX_LIMIT)
    )]
    pub max_adhoc_limit: u64,

    /// Longest window a client may ask for in `POST /v1/acquire` and
    /// `GET /v1/keys/{key}`, e.g. `1h`, `1d` (the rules of --config are exempt).
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_MAX_ADHOC_WINDOW",
        default_value = "1d",
        value_parser = adhoc_window
    )]
    pub max_adhoc_window: Duration,
}

impl From<&BoundsArgs> for RequestBounds {
    fn from(args: &BoundsArgs) -> RequestBounds {
        RequestBounds {
            max_descriptors: args.max_descriptors,
            max_descriptor_entries: args.max_descriptor_entries,
            max_adhoc_limit: args.max_adhoc_limit,
            max_adhoc_window: args.max_adhoc_window,
        }
    }
}

fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number from 1".into()),
    }
}

fn adhoc_window(text: &str) -> Result<Duration, String> {
    let window = slidegate::rate::parse_window(text).map_err(|e| e.to_string())?;
    if window < Rate::MIN_WINDOW || window > Rate::MAX_WINDOW {
        return Err(format!(
            "expected a window from {:?} to {} days",
            Rate::MIN_WINDOW,
            Rate::MAX_WINDOW.as_secs() / 86_400
        ));
    }
    Ok(window)
}

/// Parses `--store` without ever echoing it: clap's own message for a bad
/// value repeats the value, and a store URL may carry a password.
#[derive(Clone, Copy, Debug)]
struct StoreUrlParser;

impl TypedValueParser for StoreUrlParser {
    type Value = StoreUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<StoreUrl, clap::Error> {
        let Some(text) = value.to_str() else {
            return Err(clap::Error::raw(
                ErrorKind::InvalidUtf8,
                "invalid value for '--store <URL>': not UTF-8\n",
            )
            .with_cmd(cmd));
        };
        text.parse()
            .map_err(|e: crate::store::backend::UnknownStore| {
                clap::Error::raw(
                    ErrorKind::ValueValidation,
                    format!("invalid value for '--store <URL>': {e}\n"),
                )
                .with_cmd(cmd)
            })
    }
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

/// Whether the Redis store coalesces concurrent decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CoalesceMode {
    /// Decisions that arrive while calls to the same Redis node are out
    /// wait and go together in one script call, each decided as alone.
    On,
    /// One script call per decision.
    Off,
}

/// The store flags, shared by every command that decides.
#[derive(Clone, Debug, Args)]
pub struct StoreArgs {
    /// Where the limiter keeps its state: `memory` (this process only;
    /// lost on restart), `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` (TLS), `redis+cluster://host1:port1,host2:port2` or
    /// `redis+sentinel://[user:password@]host1:port1,host2:port2/MASTER_NAME[/db]`
    /// (the master Redis Sentinel names, followed across failovers; the
    /// sentinels' own credentials in
    /// `?sentinel_username=…&sentinel_password=…`; `rediss+sentinel://` for
    /// TLS), shared by every instance that points at it. Its passwords are
    /// never shown: not in help, logs, errors or metrics.
    #[arg(
        long = "store",
        value_name = "URL",
        env = "SLIDEGATE_STORE",
        hide_env_values = true,
        default_value = "memory",
        value_parser = StoreUrlParser
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

    /// Redis store: `on` gathers the decisions that arrive while calls to
    /// the same Redis node are out into one script call (each decided
    /// exactly as alone; a lone request is sent at once), `off` sends one
    /// script call per decision.
    #[arg(
        long = "redis-coalesce",
        value_name = "MODE",
        value_enum,
        env = "SLIDEGATE_REDIS_COALESCE",
        default_value_t = CoalesceMode::On
    )]
    pub coalesce: CoalesceMode,

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

    /// Most bytes the memory store (and the local fallback) holds: keys,
    /// their rules' states and sliding-log buffers, counted as they are
    /// allocated. A request that would need more (a new key, a new rule on
    /// a key, a longer log) is decided by --on-store-error; the process'
    /// memory stays within this plus the hash table's spare room.
    #[arg(
        long = "max-memory-bytes",
        value_name = "N",
        env = "SLIDEGATE_MAX_MEMORY_BYTES",
        default_value_t = slidegate::store::memory::DEFAULT_MAX_BYTES
    )]
    pub max_memory_bytes: usize,

    /// Most distinct rules one key holds at once in the memory store, 1 to
    /// 256 (the Redis store's local fallback keeps 16). A new rule on a key
    /// that holds this many, none of them idle, is refused with 400
    /// `too_many_rules`.
    #[arg(
        long = "max-rules-per-key",
        value_name = "N",
        env = "SLIDEGATE_MAX_RULES_PER_KEY",
        default_value_t = 16,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub max_rules_per_key: u16,

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
    /// Calls to a Redis store in flight at once; a decision beyond them is
    /// answered by --on-store-error at once (with `local`, by this
    /// instance's own memory store). Raise it for bursts of more requests
    /// at once (waiting ones: `max_wait_ms`); lower it to bound what a
    /// slow Redis can hold.
    #[arg(
        long = "max-store-calls",
        value_name = "N",
        env = "SLIDEGATE_MAX_STORE_CALLS",
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub max_store_calls: u32,
}

/// Flags of `slidegate check`.
///
/// The question flags (`--key`, `--rate`, `--cost`, `--algorithm`) are
/// deliberately not read from the environment: a stray variable must not
/// silently change the question asked.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The key to decide for, e.g. `login:10.0.0.1`: the ad-hoc key of
    /// `POST /v1/acquire` (a long key is counted under its digest; braces
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

    /// Waits up to this long (`5s`, `250ms`; at most 4 minutes) for the
    /// request's turn when it does not fit now: one reservation, then a
    /// sleep until its time, and the decision printed with `waited_ms`.
    /// A longer wait is refused at once. Default: no wait.
    #[arg(long, value_name = "DURATION", value_parser = wait)]
    pub wait: Option<Duration>,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,
}

fn wait(text: &str) -> Result<Duration, String> {
    let wait = duration(text)?;
    if wait > slidegate::store::MAX_WAIT {
        return Err(format!("at most {}s", slidegate::store::MAX_WAIT.as_secs()));
    }
    Ok(wait)
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

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let cli = Cli::try_parse_from(["slidegate", "serve"].iter().chain(args))?;
        match cli.command {
            Command::Serve(args) => Ok(args),
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn bounds_have_flags_and_defaults() {
        let args = serve(&[]).unwrap();
        assert_eq!(RequestBounds::from(&args.bounds), RequestBounds::default());
        let args = serve(&[
            "--max-descriptors",
            "8",
            "--max-descriptor-entries",
            "4",
            "--max-adhoc-limit",
            "100",
            "--max-adhoc-window",
            "1h",
        ])
        .unwrap();
        let bounds = RequestBounds::from(&args.bounds);
        assert_eq!(
            (bounds.max_descriptors, bounds.max_descriptor_entries),
            (8, 4)
        );
        assert_eq!(bounds.max_adhoc_limit, 100);
        assert_eq!(bounds.max_adhoc_window, Duration::from_secs(3600));
        for bad in [
            ["--max-descriptors", "0"],
            ["--max-adhoc-limit", "0"],
            ["--max-adhoc-window", "0ms"],
            ["--max-adhoc-window", "11y"],
        ] {
            assert!(serve(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_store_url_is_refused_without_its_password() {
        let error = serve(&["--store", "redis:/user:hunter2@host"]).unwrap_err();
        let text = error.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("***@host"), "{text}");
    }

    #[test]
    fn the_admin_token_comes_from_a_file_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let args = serve(&["--admin-token-file", path.to_str().unwrap()]).unwrap();
        assert_eq!(args.admin_token().unwrap().as_deref(), Some("s3cret"));
        std::fs::write(&path, "\n").unwrap();
        assert!(args.admin_token().is_err(), "an empty file");
        assert!(
            serve(&[
                "--admin-token",
                "x",
                "--admin-token-file",
                path.to_str().unwrap()
            ])
            .is_err(),
            "both"
        );
    }

    #[test]
    fn memory_bounds_have_defaults_and_refuse_out_of_range_values() {
        let Ok(Cli {
            command: Command::Serve(args),
            ..
        }) = Cli::try_parse_from(["slidegate", "serve"])
        else {
            panic!("serve did not parse");
        };
        assert_eq!(args.store.max_memory_bytes, 1 << 30);
        assert_eq!(args.store.max_rules_per_key, 16);
        for bad in ["0", "257", "x"] {
            let cli = Cli::try_parse_from(["slidegate", "serve", "--max-rules-per-key", bad]);
            assert!(cli.is_err(), "{bad}");
        }
    }

    #[test]
    fn check_refuses_a_bad_rate() {
        let cli = Cli::try_parse_from(["slidegate", "check", "--key", "k", "--rate", "0/s"]);
        assert!(cli.is_err());
    }
}
