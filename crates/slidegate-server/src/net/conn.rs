//! An accepted connection ([`Conn`]): its socket, its listener permit and
//! its deadline, which follows the connection's phase
//! ([`ConnectionClock`]; see [`listen`](super::listen) for the phases).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use super::addresses::AddressSlot;
use super::limits::{ConnectionLimits, GRPC_KEEPALIVE_INTERVAL, GRPC_KEEPALIVE_TIMEOUT, Protocol};

/// A time as nanoseconds since the [`ConnectionClock`]'s start: compared
/// and stored without the division an [`Instant`] costs, and turned into
/// one only to set the socket's timer.
type Nanos = u64;

/// Where a connection stands, for its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head (or a gRPC connection's first call).
    Head { until: Nanos },
    /// Requests in flight.
    Busy { requests: u64 },
    /// Answered everything; waiting for the next request.
    Idle { until: Option<Nanos> },
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

/// A [`Phase`] packed in one word, so that the socket reads it on every
/// read and write with a plain load, and a request moves it with one
/// compare-and-swap, where a mutex cost two atomic operations for each:
/// the phase's tag in the top two bits, below it the request count
/// (busy) or the deadline (head, idle; all ones for an idle connection
/// without one).
mod packed {
    use super::{Nanos, Phase};

    const TAG_SHIFT: u32 = 62;
    /// The largest payload, and the latest deadline: 2^62 ns is 146
    /// years, past any timeout a flag accepts.
    pub(super) const PAYLOAD: u64 = (1 << TAG_SHIFT) - 1;
    const HEAD: u64 = 0;
    const BUSY: u64 = 1;
    const IDLE: u64 = 2;
    /// An idle connection without a deadline.
    const NEVER: u64 = PAYLOAD;

    fn deadline(at: Nanos) -> u64 {
        at.min(NEVER - 1)
    }

    /// `phase` packed.
    pub(super) fn pack(phase: Phase) -> u64 {
        match phase {
            Phase::Head { until } => (HEAD << TAG_SHIFT) | deadline(until),
            Phase::Busy { requests } => (BUSY << TAG_SHIFT) | requests.min(PAYLOAD),
            Phase::Idle { until } => (IDLE << TAG_SHIFT) | until.map_or(NEVER, deadline),
        }
    }

    /// The phase `word` holds.
    pub(super) fn unpack(word: u64) -> Phase {
        let payload = word & PAYLOAD;
        match word >> TAG_SHIFT {
            HEAD => Phase::Head { until: payload },
            BUSY => Phase::Busy { requests: payload },
            _ => Phase::Idle {
                until: (payload != NEVER).then_some(payload),
            },
        }
    }
}

/// `close_by` before the connection is asked to go away.
const NOT_CLOSING: Nanos = Nanos::MAX;

/// `duration` in [`Nanos`], saturated.
fn nanos(duration: Duration) -> Nanos {
    Nanos::try_from(duration.as_nanos()).unwrap_or(Nanos::MAX)
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
pub struct ConnectionClock {
    /// The time [`Nanos`] count from.
    base: Instant,
    /// The [`Phase`], packed (see [`packed`]).
    phase: AtomicU64,
    /// Once the connection was asked to go away, the time by which it must
    /// have closed; [`NOT_CLOSING`] before.
    close_by: AtomicU64,
    header_timeout: Nanos,
    idle_timeout: Option<Nanos>,
    /// The socket is gone.
    closed: AtomicBool,
    /// Wakes [`ConnectionClock::closed`] when the socket goes.
    closing: Notify,
    protocol: Protocol,
}

impl ConnectionClock {
    fn new(limits: ConnectionLimits, protocol: Protocol) -> ConnectionClock {
        let header_timeout = nanos(limits.header_timeout);
        let head = Phase::Head {
            until: header_timeout,
        };
        ConnectionClock {
            base: Instant::now(),
            phase: AtomicU64::new(packed::pack(head)),
            close_by: AtomicU64::new(NOT_CLOSING),
            header_timeout,
            idle_timeout: limits.idle_timeout.map(nanos),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
            protocol,
        }
    }

    fn phase(&self) -> Phase {
        packed::unpack(self.phase.load(Ordering::Acquire))
    }

    /// Now, in [`Nanos`].
    fn now(&self) -> Nanos {
        nanos(Instant::now().saturating_duration_since(self.base))
    }

    /// `at` as an [`Instant`], for a timer.
    fn instant(&self, at: Nanos) -> Instant {
        self.base + Duration::from_nanos(at.min(packed::PAYLOAD))
    }

    /// Moves the phase by `next` (`None`: it stays), however many requests
    /// of the connection move it at once.
    fn update(&self, next: impl Fn(Phase) -> Option<Phase>) {
        let _ = self
            .phase
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                next(packed::unpack(word)).map(packed::pack)
            });
    }

    /// A request was dispatched; the guard marks its answer.
    pub fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.update(|phase| {
            Some(match phase {
                Phase::Busy { requests } => Phase::Busy {
                    requests: requests + 1,
                },
                Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
            })
        });
        RequestGuard {
            clock: Arc::clone(self),
        }
    }

    fn request_finished(&self) {
        // Read once, before the update: a retried update keeps the same time.
        let idle_until = self.idle_timeout.map(|t| self.now().saturating_add(t));
        self.update(|phase| match phase {
            Phase::Busy { requests } if requests > 1 => Some(Phase::Busy {
                requests: requests - 1,
            }),
            Phase::Busy { .. } => Some(Phase::Idle { until: idle_until }),
            Phase::Head { .. } | Phase::Idle { .. } => None,
        });
    }

    fn bytes_read(&self) {
        if self.protocol == Protocol::Grpc {
            return;
        }
        self.request_begun();
    }

    /// Part of a request is buffered, not yet whole (a RESP command
    /// whose start came with the end of the one before): an idle
    /// connection waits for the rest within the header timeout, from now.
    pub fn request_begun(&self) {
        // Most reads come while a head or a request is under way: one load,
        // and the clock is read only when a new head starts.
        if !matches!(self.phase(), Phase::Idle { .. }) {
            return;
        }
        let head = Phase::Head {
            until: self.now().saturating_add(self.header_timeout),
        };
        self.update(|phase| matches!(phase, Phase::Idle { .. }).then_some(head));
    }

    /// The deadline the socket enforces (its next read or write past it
    /// fails), and the name of the phase it ends: the phase's own, except
    /// for an idle gRPC connection (sent GOAWAY instead, see
    /// [`ConnectionClock::idle_expired`]), or the time to close once asked to go away
    /// if that comes first.
    fn io_deadline(&self) -> Option<(Nanos, &'static str)> {
        let phase = self.phase();
        let own = match phase {
            Phase::Head { until } => Some(until),
            Phase::Busy { .. } => None,
            Phase::Idle { until } if self.protocol != Protocol::Grpc => until,
            Phase::Idle { .. } => None,
        }
        .map(|at| (at, phase.name()));
        let close_by = self.close_by.load(Ordering::Acquire);
        let closing = (close_by != NOT_CLOSING).then_some((close_by, "closing"));
        match (own, closing) {
            (Some(own), Some(closing)) => Some(if closing.0 < own.0 { closing } else { own }),
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
        let Some(idle_timeout) = self.idle_timeout else {
            return std::future::pending().await;
        };
        loop {
            let now = self.now();
            let next_look = match self.phase() {
                Phase::Idle { until: Some(until) } if until <= now => return,
                Phase::Idle { until: Some(until) } => until,
                _ => now.saturating_add(idle_timeout),
            };
            tokio::time::sleep_until(self.instant(next_look)).await;
        }
    }

    /// Completes once the connection's socket is gone (closed by either
    /// side, or failed at a deadline).
    pub async fn closed(&self) {
        loop {
            // Registered before the flag is read: a close in between is not missed.
            let closing = self.closing.notified();
            let mut closing = std::pin::pin!(closing);
            closing.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            closing.await;
        }
    }

    fn socket_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.notify_waiters();
    }

    /// The connection was asked to go away (HTTP/2 GOAWAY) for `why`: it
    /// must close within `grace`, its calls in flight answered, or its
    /// socket fails. Counted and logged.
    pub fn going_away(&self, why: GoAway, grace: Duration) {
        let close_by = self.now().saturating_add(nanos(grace)).min(NOT_CLOSING - 1);
        // Only ever earlier: a second GOAWAY never grants more time.
        self.close_by.fetch_min(close_by, Ordering::AcqRel);
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
    clock: Arc<ConnectionClock>,
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
    clock: Arc<ConnectionClock>,
    timer: Pin<Box<Sleep>>,
    armed: Option<Nanos>,
    /// The waker the timer last registered, since it was set: while the
    /// socket is polled with the same one, the timer needs no poll to
    /// wake it, only a look at whether it fired.
    timer_waker: Option<Waker>,
    _permit: OwnedSemaphorePermit,
    _address: Option<AddressSlot>,
}

impl Conn {
    pub(super) fn new(
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        address: Option<AddressSlot>,
        limits: ConnectionLimits,
        protocol: Protocol,
    ) -> Conn {
        if protocol == Protocol::Grpc {
            keep_alive(&stream);
        }
        let clock = Arc::new(ConnectionClock::new(limits, protocol));
        let armed = clock.io_deadline().map(|(at, _)| at);
        let timer = Box::pin(tokio::time::sleep_until(
            armed.map_or_else(Instant::now, |at| clock.instant(at)),
        ));
        Conn {
            stream,
            peer,
            clock,
            timer,
            armed,
            timer_waker: None,
            _permit: permit,
            _address: address,
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The connection's phase, for the requests it carries.
    pub fn clock(&self) -> Arc<ConnectionClock> {
        Arc::clone(&self.clock)
    }

    /// Fails once the current phase's deadline has passed. Phases move in
    /// other places (a request dispatched or answered), so the deadline is
    /// looked at here, on the connection's next read or write: every
    /// change of phase is followed by one.
    ///
    /// The timer only ever moves to an earlier time. A keep-alive
    /// connection's deadline moves later with every request (idle until
    /// then, a new head from its first byte); setting the timer for each
    /// would cost every request two trips to the runtime's timer wheel.
    /// Instead a timer that fires before the deadline now in force is set
    /// again to it then, about once per timeout, and the connection still
    /// fails at its deadline to the tick.
    ///
    /// The timer is polled only when it was set, or when the socket is
    /// polled by another task than the one it would wake; else a look at
    /// whether it fired is enough. A poll costs two atomic operations and
    /// the task's budget, and a request reads and writes three times.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some((at, phase)) = self.clock.io_deadline() else {
            return Ok(());
        };
        loop {
            if self.armed.is_none_or(|armed| armed > at) {
                let instant = self.clock.instant(at);
                self.timer.as_mut().reset(instant);
                self.armed = Some(at);
                self.timer_waker = None;
            }
            if !self.timer_fired(cx) {
                return Ok(());
            }
            if self.armed == Some(at) {
                break;
            }
            // Fired at an earlier deadline, since moved on: set it again.
            self.armed = None;
        }
        let listener = self.clock.protocol.name();
        metrics::counter!(
            "slidegate_connection_timeouts_total",
            "listener" => listener,
            "phase" => phase
        )
        .increment(1);
        tracing::debug!(listener, peer = %self.peer, phase, "connection timed out");
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the connection's {phase} timeout passed"),
        ))
    }

    /// Whether the timer fired; if not, it wakes the task of `cx` when it does.
    fn timer_fired(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(waker) = &self.timer_waker
            && waker.will_wake(cx.waker())
        {
            return self.timer.is_elapsed();
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            return true;
        }
        self.timer_waker = Some(cx.waker().clone());
        false
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

/// What tonic attaches to each gRPC request of a [`Conn`]: the
/// connection's [`ConnectionClock`]. Nothing else: the peer's address is
/// not read per call (tonic's `Request::remote_addr` is `None`).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The connection's phase.
    pub clock: Arc<ConnectionClock>,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            clock: self.clock(),
        }
    }
}

/// Sets TCP keepalive on a gRPC connection's socket, to find dead peers:
/// once nothing has come from the peer for [`GRPC_KEEPALIVE_INTERVAL`],
/// the kernel probes it, and fails the socket when the probe is not
/// answered within [`GRPC_KEEPALIVE_TIMEOUT`]. The kernel keeps it, where
/// HTTP/2 PINGs (hyper's keepalive) cost every call a mutex and a clock
/// read per frame. A socket that refuses it is served without it: its
/// idle timeout and GOAWAY still close it.
fn keep_alive(stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(GRPC_KEEPALIVE_INTERVAL)
        .with_interval(GRPC_KEEPALIVE_TIMEOUT)
        .with_retries(1);
    if let Err(error) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        tracing::warn!(%error, "cannot set TCP keepalive on a gRPC connection");
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

    fn deadline(clock: &ConnectionClock) -> Option<Instant> {
        clock.io_deadline().map(|(at, _)| clock.instant(at))
    }

    fn phase(clock: &ConnectionClock) -> Phase {
        clock.phase()
    }

    /// A gRPC socket is probed once its peer has been silent for the
    /// keepalive interval, and fails when the probe goes unanswered for
    /// the keepalive timeout: one probe, no retry.
    #[tokio::test]
    async fn a_grpc_socket_has_tcp_keepalive() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .acquire_owned()
            .await
            .unwrap();
        let conn = Conn::new(stream, peer, permit, None, limits(), Protocol::Grpc);
        let socket = socket2::SockRef::from(&conn.stream);
        assert!(socket.keepalive().unwrap());
        assert_eq!(
            socket.tcp_keepalive_time().unwrap(),
            GRPC_KEEPALIVE_INTERVAL
        );
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            GRPC_KEEPALIVE_TIMEOUT
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), 1);
    }

    #[test]
    fn every_phase_reads_back_as_it_was_packed() {
        let phases = [
            Phase::Head {
                until: 10_000_000_000,
            },
            Phase::Busy { requests: 1 },
            Phase::Busy { requests: 3 },
            Phase::Idle {
                until: Some(60_000_000_001),
            },
            Phase::Idle { until: None },
        ];
        for phase in phases {
            assert_eq!(packed::unpack(packed::pack(phase)), phase);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_http_connection_moves_from_head_to_busy_to_idle_and_back() {
        let start = Instant::now();
        let clock = Arc::new(ConnectionClock::new(limits(), Protocol::Http1));
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
        let clock = Arc::new(ConnectionClock::new(limits(), Protocol::Http1));
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
        let clock = Arc::new(ConnectionClock::new(limits(), Protocol::Grpc));
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
        let (at, phase) = clock.io_deadline().expect("a deadline to close");
        assert_eq!(
            (clock.instant(at), phase),
            (Instant::now() + Duration::from_secs(10), "closing")
        );
    }
}
