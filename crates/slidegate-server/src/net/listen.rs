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
//! waits for [`Clock::idle_expired`] and sends HTTP/2 GOAWAY, which lets a
//! call the client sent meanwhile finish; [`Clock::going_away`] then bounds
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
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

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

/// Default of `--grpc-request-timeout`: as long as the HTTP API's.
pub const DEFAULT_GRPC_REQUEST_TIMEOUT: Duration = crate::api::http::REQUEST_TIMEOUT;

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

/// Least time between two warnings that a listener is at its cap (or
/// refuses an address past its own), so a flood of connections does not
/// become a flood of log lines.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(10);

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

/// The connections open per client address, at most `max` each. At most
/// one entry per open connection: an address leaves with its last one.
#[derive(Debug)]
struct Addresses {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Addresses {
    /// A place for one more connection of `ip`, if its address has room.
    fn admit(this: &Arc<Addresses>, ip: IpAddr) -> Option<AddressSlot> {
        let address = client_address(ip);
        let mut open = this.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= this.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            addresses: Arc::clone(this),
            address,
        })
    }
}

/// What counts as one client: an IPv4 address (an IPv4-mapped IPv6 one
/// too), or the /64 of an IPv6 address (a client is given a whole /64, and
/// would otherwise have 2^64 addresses to spread its connections over).
fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// One connection's place in its address's count, given back on drop.
#[derive(Debug)]
struct AddressSlot {
    addresses: Arc<Addresses>,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self
            .addresses
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
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
    fn name(self) -> &'static str {
        match self {
            Phase::Head { .. } => "header",
            Phase::Busy { .. } => "busy",
            Phase::Idle { .. } => "idle",
        }
    }
}

/// A connection's phase, once it was asked to go away the time by which
/// it must have closed, and whether its socket is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    phase: Phase,
    close_by: Option<Instant>,
    closed: bool,
}

/// Why a gRPC connection is asked to go away (HTTP/2 GOAWAY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoAway {
    /// No call for the idle timeout.
    Idle,
    /// The connection reached its maximum age.
    Age,
}

/// A connection's phase, shared by its socket and the requests it carries.
#[derive(Debug)]
pub struct Clock {
    state: Mutex<State>,
    /// Wakes [`Clock::closed`] when the socket goes.
    closing: Notify,
    limits: ConnectionLimits,
    protocol: Protocol,
}

impl Clock {
    fn new(limits: ConnectionLimits, protocol: Protocol) -> Clock {
        Clock {
            state: Mutex::new(State {
                phase: Phase::Head {
                    until: Instant::now() + limits.header_timeout,
                },
                close_by: None,
                closed: false,
            }),
            closing: Notify::new(),
            limits,
            protocol,
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // The state is a plain value: a panic elsewhere cannot leave it half-written.
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A request was dispatched; the guard marks its answer.
    pub fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.with_state(|state| {
            state.phase = match state.phase {
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
        self.with_state(|state| {
            if let Phase::Busy { requests } = state.phase {
                state.phase = if requests > 1 {
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
        self.with_state(|state| {
            if let Phase::Idle { .. } = state.phase {
                state.phase = Phase::Head {
                    until: Instant::now() + header_timeout,
                };
            }
        });
    }

    fn state(&self) -> State {
        self.with_state(|state| *state)
    }

    /// The deadline the socket enforces (its next read or write past it
    /// fails), and the name of the phase it ends: the phase's own, except
    /// for an idle gRPC connection (sent GOAWAY instead, see
    /// [`Clock::idle_expired`]), or the time to close once asked to go away
    /// if that comes first.
    fn io_deadline(&self) -> Option<(Instant, &'static str)> {
        let state = self.state();
        let phase = match state.phase {
            Phase::Head { until } => Some(until),
            Phase::Busy { .. } => None,
            Phase::Idle { until } if self.protocol == Protocol::Http1 => until,
            Phase::Idle { .. } => None,
        }
        .map(|at| (at, state.phase.name()));
        let closing = state.close_by.map(|at| (at, "closing"));
        match (phase, closing) {
            (Some(phase), Some(closing)) => Some(if closing.0 < phase.0 { closing } else { phase }),
            (one, other) => one.or(other),
        }
    }

    /// Completes once the connection has been idle (no call in flight) for
    /// the idle timeout; never without one. For a gRPC connection, whose
    /// server then sends GOAWAY.
    ///
    /// It looks at the phase at most once per idle timeout while calls are
    /// in flight, and is not woken by them: a call costs it nothing. A
    /// connection that goes idle at `t` was last seen busy at or before
    /// `t`, so the look after that one, at most an idle timeout later, finds
    /// it idle until `t` plus the idle timeout, and waits for exactly that.
    pub async fn idle_expired(&self) {
        let Some(idle_timeout) = self.limits.idle_timeout else {
            return std::future::pending().await;
        };
        loop {
            let next_look = match self.state().phase {
                Phase::Idle { until: Some(until) } if until <= Instant::now() => return,
                Phase::Idle { until: Some(until) } => until,
                _ => Instant::now() + idle_timeout,
            };
            tokio::time::sleep_until(next_look).await;
        }
    }

    /// Completes once the connection's socket is gone (closed by either
    /// side, or failed at a deadline).
    pub async fn closed(&self) {
        loop {
            // Registered before the state is read: a close in between is not missed.
            let closing = self.closing.notified();
            let mut closing = std::pin::pin!(closing);
            closing.as_mut().enable();
            if self.state().closed {
                return;
            }
            closing.await;
        }
    }

    fn socket_closed(&self) {
        self.with_state(|state| state.closed = true);
        self.closing.notify_waiters();
    }

    /// The connection was asked to go away (HTTP/2 GOAWAY) for `why`: it
    /// must close within `grace`, its calls in flight answered, or its
    /// socket fails. Counted and logged.
    pub fn going_away(&self, why: GoAway, grace: Duration) {
        let close_by = Instant::now() + grace;
        self.with_state(|state| {
            state.close_by = Some(state.close_by.map_or(close_by, |at| at.min(close_by)));
        });
        let listener = self.protocol.name();
        let why = match why {
            GoAway::Idle => {
                metrics::counter!(
                    "slidegate_connection_timeouts_total",
                    "listener" => listener,
                    "phase" => "idle"
                )
                .increment(1);
                "idle"
            }
            GoAway::Age => "age",
        };
        tracing::debug!(listener, why, "asking the connection to go away");
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
    _address: Option<AddressSlot>,
}

impl Conn {
    fn new(
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        address: Option<AddressSlot>,
        limits: ConnectionLimits,
        protocol: Protocol,
    ) -> Conn {
        let clock = Arc::new(Clock::new(limits, protocol));
        let armed = clock.io_deadline().map(|(at, _)| at);
        let timer = Box::pin(tokio::time::sleep_until(armed.unwrap_or_else(Instant::now)));
        Conn {
            stream,
            peer,
            clock,
            timer,
            armed,
            _permit: permit,
            _address: address,
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
        let deadline = self.clock.io_deadline();
        let at = deadline.map(|(at, _)| at);
        if at != self.armed {
            if let Some(at) = at {
                self.timer.as_mut().reset(at);
            }
            self.armed = at;
        }
        if let Some((_, phase)) = deadline
            && self.timer.as_mut().poll(cx).is_ready()
        {
            let listener = self.clock.protocol.name();
            metrics::counter!(
                "slidegate_connection_timeouts_total",
                "listener" => listener,
                "phase" => phase
            )
            .increment(1);
            tracing::debug!(listener, peer = %self.peer, phase, "connection timed out");
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the connection's {phase} timeout passed"),
            ));
        }
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.clock.socket_closed();
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
/// exposes the [`TcpConnectInfo`] for `tonic::Request::remote_addr`. A
/// request is answered once its response body has ended (or was dropped):
/// a streaming call (the health service's `Watch`) keeps its connection
/// busy, never idle, while its stream is open.
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

impl<S, B, ResBody> tower::Service<http::Request<B>> for Tracked<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Tracking<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

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
            let answer = answer.await?;
            Ok(answer.map(|body| Tracking { body, guard }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its request in flight until it ends.
    pub struct Tracking<B> {
        #[pin]
        body: B,
        guard: Option<RequestGuard>,
    }
}

impl<B: hyper::body::Body> hyper::body::Body for Tracking<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        if frame.as_ref().is_none_or(Result::is_err) {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 1,
            max_connections_per_ip: 1,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(60)),
        }
    }

    fn deadline(clock: &Clock) -> Option<Instant> {
        clock.io_deadline().map(|(at, _)| at)
    }

    fn phase(clock: &Clock) -> Phase {
        clock.state().phase
    }

    #[tokio::test(start_paused = true)]
    async fn an_http_connection_moves_from_head_to_busy_to_idle_and_back() {
        let start = Instant::now();
        let clock = Arc::new(Clock::new(limits(), Protocol::Http1));
        assert_eq!(deadline(&clock), Some(start + Duration::from_secs(10)));
        let guard = clock.request_started();
        assert_eq!(deadline(&clock), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(guard);
        assert_eq!(deadline(&clock), Some(start + Duration::from_secs(61)));
        tokio::time::advance(Duration::from_secs(30)).await;
        clock.bytes_read();
        assert_eq!(deadline(&clock), Some(start + Duration::from_secs(41)));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_while_busy_leave_the_request_alone() {
        let clock = Arc::new(Clock::new(limits(), Protocol::Http1));
        let first = clock.request_started();
        let second = clock.request_started();
        clock.bytes_read();
        drop(first);
        assert_eq!(phase(&clock), Phase::Busy { requests: 1 });
        drop(second);
        assert!(matches!(phase(&clock), Phase::Idle { until: Some(_) }));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_grpc_connection_is_sent_away_not_cut() {
        let start = Instant::now();
        let clock = Arc::new(Clock::new(limits(), Protocol::Grpc));
        assert_eq!(deadline(&clock), Some(start + Duration::from_secs(10)));
        drop(clock.request_started());
        // Reads while idle (pings) start no head; the socket has no
        // deadline: the server sends GOAWAY when `idle_expired` completes.
        clock.bytes_read();
        assert_eq!(deadline(&clock), None);
        let expired = tokio::spawn({
            let clock = Arc::clone(&clock);
            async move { clock.idle_expired().await }
        });
        tokio::time::advance(Duration::from_secs(59)).await;
        // A call at 59 s starts the idle time again once it ends.
        let call = clock.request_started();
        tokio::time::advance(Duration::from_secs(30)).await;
        drop(call);
        tokio::time::advance(Duration::from_secs(59)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished(), "idle 59 s after its last call");
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::time::timeout(Duration::from_millis(1), expired)
            .await
            .expect("idle 60 s after its last call")
            .unwrap();
        clock.going_away(GoAway::Idle, Duration::from_secs(10));
        assert_eq!(
            clock.io_deadline(),
            Some((Instant::now() + Duration::from_secs(10), "closing"))
        );
    }

    #[test]
    fn an_ipv6_client_counts_as_its_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            client_address(ip("2001:db8:1:2:aaaa::1")),
            client_address(ip("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(
            client_address(ip("2001:db8:1:2::1")),
            client_address(ip("2001:db8:1:3::1"))
        );
        assert_eq!(client_address(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_ne!(
            client_address(ip("10.0.0.1")),
            client_address(ip("10.0.0.2"))
        );
    }

    #[test]
    fn an_address_holds_at_most_its_cap_and_gives_places_back() {
        let addresses = Arc::new(Addresses {
            max: 2,
            open: Mutex::new(HashMap::new()),
        });
        let ip = "10.0.0.1".parse().unwrap();
        let first = Addresses::admit(&addresses, ip).unwrap();
        let _second = Addresses::admit(&addresses, ip).unwrap();
        assert!(Addresses::admit(&addresses, ip).is_none());
        assert!(Addresses::admit(&addresses, "10.0.0.2".parse().unwrap()).is_some());
        drop(first);
        assert!(Addresses::admit(&addresses, ip).is_some());
        drop(_second);
        assert!(
            addresses.open.lock().unwrap().is_empty(),
            "an address leaves with its last connection"
        );
    }

    #[test]
    fn one_address_never_holds_the_whole_default_listener() {
        assert_eq!(default_max_connections_per_ip(1024), 768);
        assert_eq!(default_max_connections_per_ip(2), 2);
        assert_eq!(default_max_connections_per_ip(1), 1);
    }
}
