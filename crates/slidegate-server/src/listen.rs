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
//! | busy | its last request in flight is answered | none (requests have their own timeout) |
//! | idle | the first byte of the next request (HTTP/1) | `idle_timeout` after the last answer; none for gRPC |
//!
//! hyper has one timer for an HTTP/1 head and the idle wait before it
//! (`header_read_timeout` starts when the server starts waiting for the
//! next head), so one value would bound both; the phases here keep a short
//! bound on heads and a longer one on keep-alive connections, as Go's
//! `ReadHeaderTimeout` and `IdleTimeout` do.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Default of `--max-connections`: open connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Default of `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default of `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default of `--grpc-max-message-bytes`: Envoy's rate limit requests
/// are a few hundred bytes.
pub const DEFAULT_GRPC_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Default of `--grpc-max-concurrent-streams`, per connection.
pub const DEFAULT_GRPC_MAX_CONCURRENT_STREAMS: u32 = 100;

/// Default of `--grpc-request-timeout`: as long as the HTTP API's.
pub const DEFAULT_GRPC_REQUEST_TIMEOUT: Duration = crate::http::REQUEST_TIMEOUT;

/// Default of `--grpc-max-connection-age`.
pub const DEFAULT_GRPC_MAX_CONNECTION_AGE: Duration = Duration::from_secs(30 * 60);

/// How often the gRPC server pings a connection, to find dead peers.
pub const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long the gRPC server waits for the answer to a ping before it
/// closes the connection.
pub const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest header list a gRPC request may carry.
pub const GRPC_MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// How long accepting pauses after an error that is not the peer's
/// (out of file descriptors, say), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Least time between two warnings that a listener is at its cap, so a
/// flood of connections does not become a flood of log lines.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(10);

/// The bounds on one listener's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once; beyond it the listener stops
    /// accepting until one closes.
    pub max_connections: usize,
    /// How long a request head may take (from the connection's accept, or
    /// from the first byte of a later HTTP/1 request) until it is
    /// dispatched; on a gRPC connection, how long its first call may take
    /// to arrive.
    pub header_timeout: Duration,
    /// How long a connection with nothing in flight stays open; `None`
    /// keeps it (gRPC clients hold one long-lived connection).
    pub idle_timeout: Option<Duration>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// The gRPC server's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcLimits {
    /// The listener's connections (`idle_timeout` is not used: gRPC
    /// connections are long-lived and renewed by `max_connection_age`).
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
            connections: ConnectionLimits {
                idle_timeout: None,
                ..ConnectionLimits::default()
            },
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
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// A listener that hands out [`Conn`]s within its [`ConnectionLimits`].
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    limits: ConnectionLimits,
    protocol: Protocol,
    last_full_warning: Mutex<Option<Instant>>,
}

impl Acceptor {
    /// Accepts on `listener` within `limits`.
    pub fn new(listener: TcpListener, limits: ConnectionLimits, protocol: Protocol) -> Acceptor {
        Acceptor {
            listener,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limits,
            protocol,
            last_full_warning: Mutex::new(None),
        }
    }

    /// The next connection, once one of the listener's permits is free.
    /// Errors of one connection (reset before accept, say) are skipped;
    /// others (out of file descriptors) are logged and retried after a pause.
    pub async fn accept(&self) -> Conn {
        loop {
            let permit = self.permit().await;
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    // Small answers go out at once rather than after the
                    // peer's delayed ACK.
                    let _ = stream.set_nodelay(true);
                    return Conn::new(stream, peer, permit, self.limits, self.protocol);
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
        let now = Instant::now();
        let mut last = self
            .last_full_warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| now < at + FULL_WARNING_EVERY) {
            return;
        }
        *last = Some(now);
        tracing::warn!(
            listener = self.protocol.name(),
            max_connections = self.limits.max_connections,
            "connection limit reached: new connections wait until one closes"
        );
    }
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

/// Where a connection stands, for its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head (or a gRPC connection's first call).
    Head { until: Instant },
    /// Requests in flight.
    Busy { requests: usize },
    /// Answered everything; waiting for the next request.
    Idle { until: Option<Instant> },
}

impl Phase {
    fn deadline(self) -> Option<Instant> {
        match self {
            Phase::Head { until } => Some(until),
            Phase::Busy { .. } => None,
            Phase::Idle { until } => until,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::Head { .. } => "header",
            Phase::Busy { .. } => "busy",
            Phase::Idle { .. } => "idle",
        }
    }
}

/// A connection's phase, shared by its socket and the requests it carries.
#[derive(Debug)]
pub struct Clock {
    phase: Mutex<Phase>,
    limits: ConnectionLimits,
    protocol: Protocol,
}

impl Clock {
    fn new(limits: ConnectionLimits, protocol: Protocol) -> Clock {
        Clock {
            phase: Mutex::new(Phase::Head {
                until: Instant::now() + limits.header_timeout,
            }),
            limits,
            protocol,
        }
    }

    fn with_phase<T>(&self, f: impl FnOnce(&mut Phase) -> T) -> T {
        // The phase is a plain value: a panic elsewhere cannot leave it half-written.
        f(&mut self.phase.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A request was dispatched; the guard marks its answer.
    pub fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.with_phase(|phase| {
            *phase = match *phase {
                Phase::Busy { requests } => Phase::Busy {
                    requests: requests + 1,
                },
                Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
            };
        });
        RequestGuard {
            clock: Arc::clone(self),
        }
    }

    fn request_finished(&self) {
        let idle_timeout = self.limits.idle_timeout;
        self.with_phase(|phase| {
            if let Phase::Busy { requests } = *phase {
                *phase = if requests > 1 {
                    Phase::Busy {
                        requests: requests - 1,
                    }
                } else {
                    Phase::Idle {
                        until: idle_timeout.map(|t| Instant::now() + t),
                    }
                };
            }
        });
    }

    fn bytes_read(&self) {
        if self.protocol != Protocol::Http1 {
            return;
        }
        let header_timeout = self.limits.header_timeout;
        self.with_phase(|phase| {
            if let Phase::Idle { .. } = *phase {
                *phase = Phase::Head {
                    until: Instant::now() + header_timeout,
                };
            }
        });
    }

    fn phase(&self) -> Phase {
        self.with_phase(|phase| *phase)
    }
}

/// Marks a request answered when dropped (answered, failed or cancelled).
#[derive(Debug)]
pub struct RequestGuard {
    clock: Arc<Clock>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.clock.request_finished();
    }
}

/// An accepted connection: the socket, its listener permit and its deadline.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    clock: Arc<Clock>,
    timer: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    fn new(
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        limits: ConnectionLimits,
        protocol: Protocol,
    ) -> Conn {
        let clock = Arc::new(Clock::new(limits, protocol));
        let armed = clock.phase().deadline();
        let timer = Box::pin(tokio::time::sleep_until(armed.unwrap_or_else(Instant::now)));
        Conn {
            stream,
            peer,
            clock,
            timer,
            armed,
            _permit: permit,
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The connection's phase, for the requests it carries.
    pub fn clock(&self) -> Arc<Clock> {
        Arc::clone(&self.clock)
    }

    /// Fails once the current phase's deadline has passed. Phases move in
    /// other places (a request dispatched or answered), so the timer is
    /// set again here, on the connection's next read or write: every
    /// change of phase is followed by one.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let phase = self.clock.phase();
        let deadline = phase.deadline();
        if deadline != self.armed {
            if let Some(at) = deadline {
                self.timer.as_mut().reset(at);
            }
            self.armed = deadline;
        }
        if self.armed.is_some() && self.timer.as_mut().poll(cx).is_ready() {
            let listener = self.clock.protocol.name();
            metrics::counter!(
                "slidegate_connection_timeouts_total",
                "listener" => listener,
                "phase" => phase.name()
            )
            .increment(1);
            tracing::debug!(listener, peer = %self.peer, phase = phase.name(), "connection timed out");
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the connection's {} timeout passed", phase.name()),
            ));
        }
        Ok(())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check_deadline(cx)?;
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.stream).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.clock.bytes_read();
            // A new head may have started: arm its deadline now.
            self.check_deadline(cx)?;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_deadline(cx)?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check_deadline(cx)?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// What tonic attaches to each gRPC request of a [`Conn`]: the usual
/// [`TcpConnectInfo`] and the connection's [`Clock`].
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The addresses, as tonic reports them for a plain TCP stream.
    pub tcp: TcpConnectInfo,
    /// The connection's phase.
    pub clock: Arc<Clock>,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            tcp: self.stream.connect_info(),
            clock: self.clock(),
        }
    }
}

/// A tower layer that marks each request dispatched and answered on its
/// connection's [`Clock`] (found in the request's [`ConnInfo`]), and
/// exposes the [`TcpConnectInfo`] for `tonic::Request::remote_addr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrackRequests;

impl<S> tower::Layer<S> for TrackRequests {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked { inner }
    }
}

/// The service of [`TrackRequests`].
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for Tracked<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let info = request.extensions().get::<ConnInfo>().cloned();
        let guard = info.map(|info| {
            request.extensions_mut().insert(info.tcp);
            info.clock.request_started()
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(guard);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 1,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(60)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_http_connection_moves_from_head_to_busy_to_idle_and_back() {
        let start = Instant::now();
        let clock = Arc::new(Clock::new(limits(), Protocol::Http1));
        assert_eq!(
            clock.phase().deadline(),
            Some(start + Duration::from_secs(10))
        );
        let guard = clock.request_started();
        assert_eq!(clock.phase().deadline(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(guard);
        assert_eq!(
            clock.phase().deadline(),
            Some(start + Duration::from_secs(61))
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        clock.bytes_read();
        assert_eq!(
            clock.phase().deadline(),
            Some(start + Duration::from_secs(41))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reads_while_busy_leave_the_request_alone() {
        let clock = Arc::new(Clock::new(limits(), Protocol::Http1));
        let first = clock.request_started();
        let second = clock.request_started();
        clock.bytes_read();
        drop(first);
        assert_eq!(clock.phase(), Phase::Busy { requests: 1 });
        drop(second);
        assert!(matches!(clock.phase(), Phase::Idle { until: Some(_) }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_grpc_connection_is_bounded_only_until_its_first_call() {
        let clock = Arc::new(Clock::new(
            ConnectionLimits {
                idle_timeout: None,
                ..limits()
            },
            Protocol::Grpc,
        ));
        assert!(clock.phase().deadline().is_some());
        drop(clock.request_started());
        clock.bytes_read();
        assert_eq!(clock.phase(), Phase::Idle { until: None });
    }
}
