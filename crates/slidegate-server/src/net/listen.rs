//! The listeners of both servers: accepting under a cap on open
//! connections, and the deadlines that close connections which send
//! nothing, stall in the middle of a request head, or sit idle.
//!
//! Every accepted socket is a [`Conn`]: it holds one of the listener's
//! permits until it closes, so a listener at its cap stops accepting (new
//! connections wait in the kernel's backlog) until one of its connections
//! closes. A `Conn` also carries its deadline, checked on every read and
//! write: once it passes, the next read or write fails and the server
//! drops the connection. The deadline follows the connection's phase:
//!
//! | phase | until | deadline |
//! |---|---|---|
//! | head | its request is dispatched | `header_timeout` after the connection was accepted, or (HTTP/1) after the first byte of a later request |
//! | busy | its last request in flight is answered (a gRPC call: its last message sent) | none (requests have their own timeout) |
//! | idle | the first byte of the next request (HTTP/1), or the next call (gRPC) | `idle_timeout` after the last answer |
//!
//! An idle gRPC connection is not cut at its deadline: the gRPC server
//! waits for [`ConnectionClock::idle_expired`](super::conn::ConnectionClock::idle_expired) and sends HTTP/2 GOAWAY, which lets a
//! call the client sent meanwhile finish; [`ConnectionClock::going_away`](super::conn::ConnectionClock::going_away) then bounds
//! how long the connection may take to close.
//!
//! Each listener also caps the connections of one client address
//! (`max_connections_per_ip`; an IPv6 address counts as its /64, which one
//! client usually holds whole): one past it is closed as soon as it is
//! accepted, so one address never holds the whole listener.
//!
//! hyper has one timer for an HTTP/1 head and the idle wait before it
//! (`header_read_timeout` starts when the server starts waiting for the
//! next head), so one value would bound both; the phases here keep a short
//! bound on heads and a longer one on keep-alive connections, as Go's
//! `ReadHeaderTimeout` and `IdleTimeout` do.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::addresses::Addresses;
use super::conn::Conn;
use super::limits::{ConnectionLimits, Protocol};

/// How long accepting pauses after an error that is not the peer's
/// (out of file descriptors, say), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Least time between two warnings that a listener is at its cap (or
/// refuses an address past its own), so a flood of connections does not
/// become a flood of log lines.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(10);

/// A listener that hands out [`Conn`]s within its [`ConnectionLimits`].
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    /// The connections open per client address; `None` when the cap per
    /// address is the listener's own.
    addresses: Option<Arc<Addresses>>,
    limits: ConnectionLimits,
    protocol: Protocol,
    last_full_warning: Mutex<Option<Instant>>,
    last_address_warning: Mutex<Option<Instant>>,
}

impl Acceptor {
    /// Accepts on `listener` within `limits`.
    pub fn new(listener: TcpListener, limits: ConnectionLimits, protocol: Protocol) -> Acceptor {
        let max_connections = limits.max_connections.max(1);
        let addresses = (limits.max_connections_per_ip < max_connections).then(|| {
            Arc::new(Addresses {
                max: limits.max_connections_per_ip.max(1),
                open: Mutex::new(HashMap::new()),
            })
        });
        Acceptor {
            listener,
            permits: Arc::new(Semaphore::new(max_connections)),
            addresses,
            limits,
            protocol,
            last_full_warning: Mutex::new(None),
            last_address_warning: Mutex::new(None),
        }
    }

    /// The next connection, once one of the listener's permits is free.
    /// A connection from an address at its cap is closed at once and
    /// skipped, as are errors of one connection (reset before accept,
    /// say); others (out of file descriptors) are logged and retried after
    /// a pause.
    pub async fn accept(&self) -> Conn {
        loop {
            let permit = self.permit().await;
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    let address = match &self.addresses {
                        Some(addresses) => match Addresses::admit(addresses, peer.ip()) {
                            Some(slot) => Some(slot),
                            None => {
                                self.refuse(peer);
                                continue;
                            }
                        },
                        None => None,
                    };
                    // Small answers go out at once rather than after the
                    // peer's delayed ACK.
                    let _ = stream.set_nodelay(true);
                    return Conn::new(stream, peer, permit, address, self.limits, self.protocol);
                }
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    tracing::warn!(listener = self.protocol.name(), %error, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            }
        }
    }

    async fn permit(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            return permit;
        }
        self.warn_full();
        match Arc::clone(&self.permits).acquire_owned().await {
            Ok(permit) => permit,
            // The semaphore is never closed.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Acceptor {
    fn warn_full(&self) {
        if !due(&self.last_full_warning) {
            return;
        }
        tracing::warn!(
            listener = self.protocol.name(),
            max_connections = self.limits.max_connections,
            "connection limit reached: new connections wait until one closes"
        );
    }

    /// Closes a connection from an address at its cap (the stream is
    /// dropped by the caller), counted, and logged at most every 10 s.
    fn refuse(&self, peer: SocketAddr) {
        let listener = self.protocol.name();
        metrics::counter!(
            "slidegate_connections_refused_total",
            "listener" => listener,
            "reason" => "per_ip"
        )
        .increment(1);
        tracing::debug!(listener, %peer, "connection refused: its address is at its cap");
        if due(&self.last_address_warning) {
            tracing::warn!(
                listener,
                peer = %peer.ip(),
                max_connections_per_ip = self.limits.max_connections_per_ip,
                "an address holds as many connections as --max-connections-per-ip allows: closing its new ones"
            );
        }
    }
}

/// True, and the time noted, when no warning of its kind was logged in the
/// last [`FULL_WARNING_EVERY`].
fn due(last: &Mutex<Option<Instant>>) -> bool {
    let now = Instant::now();
    let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
    if last.is_some_and(|at| now < at + FULL_WARNING_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

/// Errors that concern one incoming connection only.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
