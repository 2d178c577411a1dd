//! The flags of `slidegate serve`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use slidegate::Rate;

use super::store::StoreArgs;
use super::values::{ShownDuration, adhoc_window, any_duration, at_least_one, positive_duration};
use super::xds::XdsArgs;
use crate::api::envoy::headers::ResponseHeaders;
use crate::api::forward_auth::TrustedProxies;
use crate::api::forward_auth::trusted::parse_network;
use crate::api::http::waiting::DEFAULT_MAX_WAITING;
use crate::api::resp::{FrameLimits, frame};
use crate::bounds::RequestBounds;
use crate::commands::serve::{self, ServeLimits, ServeOptions};
use crate::net::http1::DEFAULT_SHUTDOWN_GRACE;
use crate::net::limits::{self, ConnectionLimits, GrpcLimits};
use crate::runtime::{
    DEFAULT_MAX_RUNTIME_BODY_BYTES, DEFAULT_MAX_RUNTIME_DOMAINS, DEFAULT_MAX_RUNTIME_KEYS,
    RuntimeBounds,
};

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
        default_value = serve::DEFAULT_HTTP_ADDR
    )]
    pub http_addr: String,

    /// Address (host:port) of Envoy's rate limit gRPC service
    /// (`envoy.service.ratelimit.v3.RateLimitService`) and of the standard
    /// gRPC health service.
    #[arg(
        long,
        value_name = "ADDR",
        env = "SLIDEGATE_GRPC_ADDR",
        default_value = serve::DEFAULT_GRPC_ADDR
    )]
    pub grpc_addr: String,

    /// Address (host:port) of the Redis protocol port (RESP2 and RESP3):
    /// `CL.THROTTLE`, `SG.ACQUIRE`, `SG.PEEK`, `SG.RESET` for any Redis
    /// client, e.g. 127.0.0.1:6380. Off when unset.
    #[arg(long, value_name = "ADDR", env = "SLIDEGATE_RESP_ADDR")]
    pub resp_addr: Option<String>,

    /// Largest RESP command, in bytes; a client that sends a larger one
    /// (announced or sent) is answered `-ERR Protocol error` and closed.
    #[arg(
        long,
        value_name = "BYTES",
        env = "SLIDEGATE_RESP_MAX_COMMAND_BYTES",
        default_value_t = frame::DEFAULT_MAX_COMMAND_BYTES as u32,
        value_parser = clap::value_parser!(u32).range(64..)
    )]
    pub resp_max_command_bytes: u32,

    /// Most arguments of one RESP command (its name included); more are
    /// answered `-ERR Protocol error` and the connection closed.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_RESP_MAX_ARGS",
        default_value_t = frame::DEFAULT_MAX_ARGS as u32,
        value_parser = clap::value_parser!(u32).range(8..)
    )]
    pub resp_max_args: u32,

    /// How long a RESP connection with no command in flight stays open
    /// (Redis clients keep pooled connections between commands). A
    /// command begun must arrive whole within --header-timeout.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_RESP_IDLE_TIMEOUT",
        default_value_t = ShownDuration(serve::DEFAULT_RESP_IDLE_TIMEOUT),
        value_parser = positive_duration
    )]
    pub resp_idle_timeout: ShownDuration,

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

    /// Enables `DELETE /v1/keys/{key}` and the writes of the runtime
    /// limits API for requests carrying `Authorization: Bearer TOKEN`, and
    /// requires the token for `GET /v1/keys/{key}` and the API's reads too. Without it `DELETE` is refused and `GET`
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
        default_value_t = ResponseHeadersArg::from(ResponseHeaders::default())
    )]
    pub response_headers: ResponseHeadersArg,

    /// The most `POST /v1/acquire` requests waiting for their turn
    /// (`max_wait_ms`) at once; more are answered 503 `too_many_waiting`
    /// at once. Each holds a connection and a sleeping task, no worker.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_MAX_WAITING",
        default_value_t = DEFAULT_MAX_WAITING
    )]
    pub max_waiting: usize,

    /// With the memory store, keeps the limits set at run time (`PUT
    /// /v1/config/domains/{domain}`, `PUT /v1/keys/{key}/limit`) in this
    /// file, written atomically on every change and read at start; without
    /// it they live in memory only. With Redis they live in Redis.
    #[arg(long, value_name = "PATH", env = "SLIDEGATE_RUNTIME_LIMITS_FILE")]
    pub runtime_limits_file: Option<PathBuf>,

    /// The most keys with a limit set at run time; one more is refused
    /// 409 `too_many_runtime_keys`.
    #[arg(long, value_name = "N", env = "SLIDEGATE_MAX_RUNTIME_KEYS", default_value_t = DEFAULT_MAX_RUNTIME_KEYS)]
    pub max_runtime_keys: usize,

    /// The most domains set at run time; one more is refused 409
    /// `too_many_runtime_domains`.
    #[arg(long, value_name = "N", env = "SLIDEGATE_MAX_RUNTIME_DOMAINS", default_value_t = DEFAULT_MAX_RUNTIME_DOMAINS)]
    pub max_runtime_domains: usize,

    /// The largest body of a runtime limit's write, in bytes; a larger
    /// one is refused 413.
    #[arg(long, value_name = "BYTES", env = "SLIDEGATE_MAX_RUNTIME_BODY_BYTES", default_value_t = DEFAULT_MAX_RUNTIME_BODY_BYTES)]
    pub max_runtime_body_bytes: usize,

    /// Rules from a control plane over xDS.
    #[command(flatten)]
    pub xds: XdsArgs,

    /// Proxies whose `X-Forwarded-For`, `X-Real-IP` and `Forwarded`
    /// headers `/v1/forward-auth/{domain}` believes, as addresses or CIDR
    /// networks (`10.0.0.0/8,127.0.0.1`). The client is then the rightmost
    /// `X-Forwarded-For` address not in these networks. Without it no
    /// forwarding header is read: every client is the proxy's address.
    #[arg(
        long,
        value_name = "CIDR,...",
        env = "SLIDEGATE_TRUSTED_PROXIES",
        value_delimiter = ',',
        value_parser = |s: &str| parse_network(s).map_err(|e| e.to_string())
    )]
    pub trusted_proxies: Vec<ipnet::IpNet>,

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

/// Which rate limit header fields check answers carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ResponseHeadersArg {
    /// None (the default, as in envoyproxy/ratelimit).
    Off,
    /// `RateLimit-Policy`, `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10)
    /// and `Retry-After` on OVER_LIMIT.
    #[value(name = "draft10")]
    Draft10,
}

impl From<ResponseHeaders> for ResponseHeadersArg {
    fn from(mode: ResponseHeaders) -> ResponseHeadersArg {
        match mode {
            ResponseHeaders::Off => ResponseHeadersArg::Off,
            ResponseHeaders::Draft10 => ResponseHeadersArg::Draft10,
        }
    }
}

impl From<ResponseHeadersArg> for ResponseHeaders {
    fn from(mode: ResponseHeadersArg) -> ResponseHeaders {
        match mode {
            ResponseHeadersArg::Off => ResponseHeaders::Off,
            ResponseHeadersArg::Draft10 => ResponseHeaders::Draft10,
        }
    }
}

impl From<ServeArgs> for ServeOptions {
    fn from(args: ServeArgs) -> ServeOptions {
        ServeOptions {
            otlp_endpoint: args.otlp_endpoint,
            http_addr: args.http_addr,
            grpc_addr: args.grpc_addr,
            resp_addr: args.resp_addr,
            resp_frame: FrameLimits {
                max_command_bytes: args.resp_max_command_bytes as usize,
                max_args: args.resp_max_args as usize,
            },
            config: args.config,
            merge_domains: args.merge_domains,
            allow_empty_config: args.allow_empty_config,
            xds: args.xds.options(),
            admin_token: args.admin_token,
            admin_token_file: args.admin_token_file,
            response_headers: args.response_headers.into(),
            max_waiting: args.max_waiting,
            runtime_limits_file: args.runtime_limits_file,
            runtime_bounds: RuntimeBounds {
                max_keys: args.max_runtime_keys,
                max_domains: args.max_runtime_domains,
                max_body_bytes: args.max_runtime_body_bytes,
            },
            trusted_proxies: TrustedProxies::new(args.trusted_proxies),
            bounds: (&args.bounds).into(),
            store: args.store.into(),
            limits: args.connections.limits(args.resp_idle_timeout.0),
        }
    }
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
        default_value_t = limits::DEFAULT_MAX_CONNECTIONS as u32,
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
        default_value_t = ShownDuration(limits::DEFAULT_HEADER_TIMEOUT),
        value_parser = positive_duration
    )]
    pub header_timeout: ShownDuration,

    /// How long a connection with no request in flight stays open: an
    /// HTTP keep-alive connection is then closed, a gRPC connection with
    /// no call in flight is sent GOAWAY (its client reconnects for its next
    /// call).
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_IDLE_TIMEOUT",
        default_value_t = ShownDuration(limits::DEFAULT_IDLE_TIMEOUT),
        value_parser = positive_duration
    )]
    pub idle_timeout: ShownDuration,

    /// On SIGTERM or Ctrl-C, how long the requests in flight may take to
    /// finish; then the connections still open are closed and the process
    /// exits 0.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_SHUTDOWN_GRACE",
        default_value_t = ShownDuration(DEFAULT_SHUTDOWN_GRACE),
        value_parser = any_duration
    )]
    pub shutdown_grace: ShownDuration,

    /// Largest gRPC request message, in bytes; a larger one is refused
    /// (OUT_OF_RANGE) from its length prefix, before it is read.
    #[arg(
        long,
        value_name = "BYTES",
        env = "SLIDEGATE_GRPC_MAX_MESSAGE_BYTES",
        default_value_t = limits::DEFAULT_GRPC_MAX_MESSAGE_BYTES as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub grpc_max_message_bytes: u32,

    /// Streams (calls) one gRPC connection may have open at once.
    #[arg(
        long,
        value_name = "N",
        env = "SLIDEGATE_GRPC_MAX_CONCURRENT_STREAMS",
        default_value_t = limits::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub grpc_max_concurrent_streams: u32,

    /// Longest a gRPC call may take; past it the call ends with
    /// CANCELLED. A client's shorter `grpc-timeout` wins.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_GRPC_REQUEST_TIMEOUT",
        default_value_t = ShownDuration(limits::DEFAULT_GRPC_REQUEST_TIMEOUT),
        value_parser = positive_duration
    )]
    pub grpc_request_timeout: ShownDuration,

    /// Age at which a gRPC connection is asked to go away (HTTP/2
    /// GOAWAY; clients such as Envoy reconnect at once), so no connection
    /// holds one of the --max-connections forever. Its calls in flight
    /// then get --grpc-request-timeout to finish before it is closed.
    #[arg(
        long,
        value_name = "DURATION",
        env = "SLIDEGATE_GRPC_MAX_CONNECTION_AGE",
        default_value_t = ShownDuration(limits::DEFAULT_GRPC_MAX_CONNECTION_AGE),
        value_parser = positive_duration
    )]
    pub grpc_max_connection_age: ShownDuration,
}

impl ConnectionArgs {
    /// The bounds these flags set; a RESP connection stays idle for
    /// `resp_idle_timeout`.
    pub fn limits(&self, resp_idle_timeout: std::time::Duration) -> ServeLimits {
        let max_connections = self.max_connections as usize;
        let connections = ConnectionLimits {
            max_connections,
            max_connections_per_ip: self.max_connections_per_ip.map_or_else(
                || limits::default_max_connections_per_ip(max_connections),
                |max| max as usize,
            ),
            header_timeout: self.header_timeout.0,
            idle_timeout: Some(self.idle_timeout.0),
        };
        ServeLimits {
            http: connections,
            resp: ConnectionLimits {
                idle_timeout: Some(resp_idle_timeout),
                ..connections
            },
            grpc: GrpcLimits {
                connections,
                max_message_bytes: self.grpc_max_message_bytes as usize,
                max_concurrent_streams: self.grpc_max_concurrent_streams,
                request_timeout: self.grpc_request_timeout.0,
                max_connection_age: self.grpc_max_connection_age.0,
            },
            shutdown_grace: self.shutdown_grace.0,
        }
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
        default_value_t = ShownDuration(RequestBounds::MAX_ADHOC_WINDOW),
        value_parser = adhoc_window
    )]
    pub max_adhoc_window: ShownDuration,
}

impl From<&BoundsArgs> for RequestBounds {
    fn from(args: &BoundsArgs) -> RequestBounds {
        RequestBounds {
            max_descriptors: args.max_descriptors,
            max_descriptor_entries: args.max_descriptor_entries,
            max_adhoc_limit: args.max_adhoc_limit,
            max_adhoc_window: args.max_adhoc_window.0,
        }
    }
}
