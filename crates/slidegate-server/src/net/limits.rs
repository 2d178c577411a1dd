//! The bounds of the listeners and of their connections, and the default
//! of each (shown by `slidegate serve --help`).

use std::time::Duration;

/// Default of `--max-connections`: open connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Default of `--max-connections-per-ip` for a listener of
/// `max_connections`: three quarters of it. One address then never holds
/// the last quarter (room for every other client), while one that
/// legitimately opens many (an Envoy with many workers, a NAT gateway, a
/// load balancer) still gets most of the listener. Below 4 connections
/// the whole listener.
pub fn default_max_connections_per_ip(max_connections: usize) -> usize {
    (max_connections - max_connections / 4).max(1)
}

/// Default of `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default of `--grpc-max-message-bytes`: Envoy's rate limit requests
/// are a few hundred bytes.
pub const DEFAULT_GRPC_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Default of `--grpc-max-concurrent-streams`, per connection.
pub const DEFAULT_GRPC_MAX_CONCURRENT_STREAMS: u32 = 100;

/// Default of `--grpc-request-timeout`: as long as the HTTP API's request
/// timeout (10 s).
pub const DEFAULT_GRPC_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of `--grpc-max-connection-age`.
pub const DEFAULT_GRPC_MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);

/// How long a gRPC connection may go without a packet from its peer
/// before it is probed (TCP keepalive), to find dead peers.
pub const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long a keepalive probe waits for its answer before the connection
/// is closed.
pub const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest header list a gRPC request may carry.
pub const GRPC_MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// The bounds on one listener's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once; beyond it the listener stops
    /// accepting until one closes.
    pub max_connections: usize,
    /// Most connections open at once from one client address (an IPv6
    /// address counts as its /64); one beyond it is closed once accepted.
    pub max_connections_per_ip: usize,
    /// How long a request head may take (from the connection's accept, or
    /// from the first byte of a later HTTP/1 request) until it is
    /// dispatched; on a gRPC connection, how long its first call may take
    /// to arrive.
    pub header_timeout: Duration,
    /// How long a connection with nothing in flight stays open (an HTTP/1
    /// one is closed, a gRPC one sent GOAWAY); `None` keeps it.
    pub idle_timeout: Option<Duration>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: default_max_connections_per_ip(DEFAULT_MAX_CONNECTIONS),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// The gRPC server's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcLimits {
    /// The listener's connections; an idle one is sent GOAWAY at its
    /// `idle_timeout`.
    pub connections: ConnectionLimits,
    /// Largest request message, in bytes; a larger one is refused from
    /// its length prefix, before it is read.
    pub max_message_bytes: usize,
    /// Streams a connection may have open at once (HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`), and calls it may have in flight.
    pub max_concurrent_streams: u32,
    /// Longest a call may take (a client's shorter `grpc-timeout` wins).
    pub request_timeout: Duration,
    /// Age at which a connection is asked to go away (HTTP/2 GOAWAY);
    /// its calls in flight get `request_timeout` to finish.
    pub max_connection_age: Duration,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            connections: ConnectionLimits::default(),
            max_message_bytes: DEFAULT_GRPC_MAX_MESSAGE_BYTES,
            max_concurrent_streams: DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
            request_timeout: DEFAULT_GRPC_REQUEST_TIMEOUT,
            max_connection_age: DEFAULT_GRPC_MAX_CONNECTION_AGE,
        }
    }
}

/// What a listener serves, which decides how its connections' phases move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1: a byte read while idle starts the next request head.
    Http1,
    /// HTTP/2 (gRPC): reads while idle are pings and window updates, not
    /// a request; only the first call of a connection is awaited.
    Grpc,
    /// The Redis protocol: as HTTP/1.1, a byte read while idle starts the
    /// next command, which must arrive whole within the header timeout.
    Resp,
}

impl Protocol {
    /// The listener's name in metrics and logs: `http`, `grpc` or `resp`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http",
            Protocol::Grpc => "grpc",
            Protocol::Resp => "resp",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_never_holds_the_whole_default_listener() {
        assert_eq!(default_max_connections_per_ip(1024), 768);
        assert_eq!(default_max_connections_per_ip(2), 2);
        assert_eq!(default_max_connections_per_ip(1), 1);
    }
}
