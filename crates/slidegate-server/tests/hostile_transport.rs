//! Clients that try to exhaust the built server's connections: a request
//! head sent halfway, an idle keep-alive connection, more connections than
//! the cap, a 4 MB gRPC message, a gRPC call on a stalled store, and
//! SIGTERM with a stalled connection open. Each runs `slidegate serve` as a
//! real process with short bounds set by flag.

mod common;
#[path = "common/process.rs"]
mod process;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::redis::Redis;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use http::StatusCode;
use process::Slidegate;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n";

/// How far past a 1 s bound set by flag the server may act, on a loaded
/// 2-core machine running a debug build: well under the defaults (10 s
/// header timeout, 60 s idle timeout, 10 s request timeout and grace) that
/// an ignored flag would leave in force.
const SLACK: Duration = Duration::from_millis(1_500);

/// The slowest a `/healthz` may answer while an attack runs: it once took
/// 3.4 s behind two large gRPC requests.
const HEALTHZ_BOUND: Duration = Duration::from_millis(500);

/// Asks `GET /healthz` on fresh connections, one after the other, until
/// stopped: what a liveness probe sees while an attack runs.
struct HealthPolls {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(usize, Duration)>,
}

impl HealthPolls {
    /// Starts polling; returns once the first poll was answered.
    fn start(addr: SocketAddr) -> HealthPolls {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (first, answered) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let (mut polls, mut slowest) = (0, Duration::ZERO);
            while !stopped.load(Ordering::Relaxed) {
                let asked = Instant::now();
                healthz_on(&mut connect(addr));
                slowest = slowest.max(asked.elapsed());
                polls += 1;
                let _ = first.send(());
                std::thread::sleep(Duration::from_millis(10));
            }
            (polls, slowest)
        });
        answered
            .recv_timeout(common::DEADLINE)
            .expect("a first /healthz answered");
        HealthPolls { stop, thread }
    }

    /// Stops polling; asserts every answer came within [`HEALTHZ_BOUND`].
    fn stop(self, during: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let (polls, slowest) = self.thread.join().expect("every /healthz answered 200");
        eprintln!("/healthz during {during}: {polls} answers, slowest {slowest:?}");
        assert!(
            slowest <= HEALTHZ_BOUND,
            "/healthz took {slowest:?} during {during}"
        );
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("the listener accepts");
    stream
        .set_read_timeout(Some(common::DEADLINE))
        .expect("a read timeout");
    stream
}

/// Reads until the server closes the connection (EOF or reset), at most
/// `bound`; returns how long that took, or `None` if it stayed open.
fn closed_within(stream: &mut TcpStream, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buffer = [0u8; 4096];
    loop {
        let left = bound.checked_sub(start.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("a read timeout");
        match stream.read(&mut buffer) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(_) => return Some(start.elapsed()),
        }
    }
}

/// One `GET /healthz` on `stream`, answered.
fn healthz_on(stream: &mut TcpStream) {
    stream.write_all(HEALTHZ).expect("the request is sent");
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 1024];
    while common::parse_response(&buffer).is_none() {
        let n = stream.read(&mut chunk).expect("an answer");
        assert!(n > 0, "closed before answering");
        buffer.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(
        common::parse_response(&buffer).map(|r| r.status),
        Some(StatusCode::OK)
    );
}

#[test]
fn a_half_sent_request_head_is_closed_at_the_header_timeout() {
    let server = Slidegate::start(&["--header-timeout", "1s", "--idle-timeout", "60s"]);
    let mut stream = connect(server.http);
    stream
        .write_all(b"POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-")
        .expect("half a head is sent");
    // The server serves others while the head is held.
    let polls = HealthPolls::start(server.http);
    let closed = closed_within(&mut stream, Duration::from_secs(1) + SLACK)
        .expect("a half-sent head outlived --header-timeout 1s");
    polls.stop("a half-sent head");
    assert!(
        closed >= Duration::from_millis(900),
        "closed after {closed:?}, before the header timeout"
    );
    eprintln!("a half-sent head was closed after {closed:?} (--header-timeout 1s)");
}

#[test]
fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let server = Slidegate::start(&["--header-timeout", "1s", "--idle-timeout", "60s"]);
    let mut stream = connect(server.http);
    let closed = closed_within(&mut stream, Duration::from_secs(1) + SLACK)
        .expect("a silent connection outlived --header-timeout 1s");
    assert!(
        closed >= Duration::from_millis(900),
        "closed after {closed:?}, before the header timeout"
    );
    eprintln!("a silent HTTP connection was closed after {closed:?} (--header-timeout 1s)");
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_not_before() {
    let server = Slidegate::start(&["--header-timeout", "1s", "--idle-timeout", "3s"]);
    let mut stream = connect(server.http);
    healthz_on(&mut stream);
    let answered = Instant::now();
    // Idle past the header timeout: still open, it is not waiting for a head.
    // A close the test thread sees late (it woke after its read timeout, on
    // a loaded machine) is judged by when it was seen: not before 2.95 s.
    if closed_within(&mut stream, Duration::from_millis(2_800)).is_none() {
        closed_within(
            &mut stream,
            (Duration::from_secs(3) + SLACK).saturating_sub(answered.elapsed()),
        )
        .expect("an idle connection outlived --idle-timeout 3s");
    }
    let closed = answered.elapsed();
    assert!(
        closed >= Duration::from_millis(2_950),
        "an idle connection was closed {closed:?} after its answer, before the idle timeout"
    );
    eprintln!(
        "an idle keep-alive connection was closed {:?} after its answer (--idle-timeout 3s)",
        answered.elapsed()
    );
}

#[test]
fn a_head_begun_on_an_idle_connection_is_closed_at_the_header_timeout_from_its_first_byte() {
    // The idle deadline (60 s) is far later than the head's: the connection's
    // timer must move to the earlier one, not wait for the idle one.
    let server = Slidegate::start(&["--header-timeout", "1s", "--idle-timeout", "60s"]);
    let mut stream = connect(server.http);
    healthz_on(&mut stream);
    // Past the first head's deadline, so that the timer set for it has fired.
    std::thread::sleep(Duration::from_millis(1_500));
    stream
        .write_all(b"POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-")
        .expect("half a head is sent");
    let closed = closed_within(&mut stream, Duration::from_secs(1) + SLACK)
        .expect("a head begun on an idle connection outlived --header-timeout 1s");
    assert!(
        closed >= Duration::from_millis(900),
        "closed after {closed:?}, before the header timeout"
    );
    eprintln!(
        "a head begun on an idle connection was closed after {closed:?} (--header-timeout 1s)"
    );
}

#[test]
fn a_keep_alive_connection_serves_a_request_sent_before_the_idle_timeout() {
    let server = Slidegate::start(&["--header-timeout", "1s", "--idle-timeout", "3s"]);
    let mut stream = connect(server.http);
    healthz_on(&mut stream);
    std::thread::sleep(Duration::from_millis(1_500));
    healthz_on(&mut stream);
}

#[test]
fn connections_beyond_the_cap_wait_until_one_closes() {
    let server = Slidegate::start(&["--max-connections", "2"]);
    let mut first = connect(server.http);
    let mut second = connect(server.http);
    healthz_on(&mut first);
    healthz_on(&mut second);

    let mut third = connect(server.http);
    third.write_all(HEALTHZ).expect("the request is sent");
    third
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("a read timeout");
    let mut buffer = [0u8; 256];
    match third.read(&mut buffer) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a connection beyond the cap was served: {other:?}"),
    }

    drop(first);
    third
        .set_read_timeout(Some(common::DEADLINE))
        .expect("a read timeout");
    let n = third
        .read(&mut buffer)
        .expect("served once a connection closed");
    assert!(
        buffer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buffer[..n])
    );
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("connection limit reached")),
        "the cap is not logged"
    );
}

fn one_descriptor(value: String) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value,
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

async fn grpc_client(addr: SocketAddr) -> RateLimitServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("the gRPC listener accepts");
    RateLimitServiceClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_mb_grpc_message_is_refused_from_its_length_while_healthz_answers() {
    let server = Slidegate::start(&[]);
    let mut client = grpc_client(server.grpc).await;
    let http = server.http;
    let polls = tokio::task::spawn_blocking(move || HealthPolls::start(http))
        .await
        .expect("polling starts");
    // 4 MB messages, 8 at a time on one connection, for half a second:
    // `/healthz` is asked throughout.
    let attack = Instant::now();
    let (mut refusals, mut slowest) = (0, Duration::ZERO);
    while attack.elapsed() < Duration::from_millis(500) {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let mut client = client.clone();
                tokio::spawn(async move {
                    let start = Instant::now();
                    let answer = client
                        .should_rate_limit(one_descriptor("x".repeat(4 << 20)))
                        .await;
                    (answer, start.elapsed())
                })
            })
            .collect();
        for call in calls {
            let (answer, took) = call.await.expect("a call task");
            let refused = answer.expect_err("a 4 MB message was accepted");
            assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
            slowest = slowest.max(took);
            refusals += 1;
        }
    }
    tokio::task::spawn_blocking(move || polls.stop("4 MB gRPC messages"))
        .await
        .expect("/healthz answered throughout");
    assert!(
        slowest < Duration::from_secs(5),
        "refused only after {slowest:?}: the message was read"
    );
    // A message within the bound is still decided, on the same channel.
    client
        .should_rate_limit(one_descriptor("x".into()))
        .await
        .expect("a small message is decided");
    eprintln!(
        "{refusals} gRPC messages of 4 MB refused (OUT_OF_RANGE), the slowest after {slowest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_on_a_stalled_store_ends_at_the_request_timeout() {
    let redis = std::sync::Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    )
    .expect("the rules are written");
    let server = Slidegate::start(&[
        "--store",
        &redis.url(),
        "--store-timeout-ms",
        "20000",
        "--grpc-request-timeout",
        "1s",
        "--config",
        rules.to_str().expect("a UTF-8 path"),
    ]);
    let mut client = grpc_client(server.grpc).await;
    client
        .should_rate_limit(one_descriptor("warm".into()))
        .await
        .expect("decided while Redis answers");

    let sleeper = std::sync::Arc::clone(&redis);
    let stall = tokio::task::spawn_blocking(move || sleeper.text(&["DEBUG", "SLEEP", "4"]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let ended = client
        .should_rate_limit(one_descriptor("stalled".into()))
        .await
        .expect_err("answered while the store stalls");
    let took = start.elapsed();
    assert_eq!(ended.code(), tonic::Code::Cancelled, "{ended:?}");
    assert!(
        took >= Duration::from_millis(900) && took <= Duration::from_secs(1) + SLACK,
        "ended after {took:?}, not at --grpc-request-timeout 1s (Redis slept 4 s)"
    );
    assert_eq!(stall.await.expect("DEBUG SLEEP"), "OK");
    eprintln!(
        "a gRPC call on a stalled store ended ({:?}) after {took:?} (--grpc-request-timeout 1s)",
        ended.code()
    );
}

#[test]
fn sigterm_with_stalled_connections_exits_0_within_the_grace() {
    let mut server = Slidegate::start(&["--header-timeout", "60s", "--shutdown-grace", "1s"]);
    // An HTTP request in flight that never completes its body.
    let mut http = connect(server.http);
    http.write_all(
        b"POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"key\":",
    )
    .expect("a head and part of a body are sent");
    // A gRPC connection that never starts HTTP/2.
    let _grpc = connect(server.grpc);
    std::thread::sleep(Duration::from_millis(300));

    let term = Instant::now();
    server.signal("TERM");
    let status = server.wait();
    let took = term.elapsed();
    assert!(status.success(), "{status:?}; logs: {:?}", server.logs());
    assert!(
        took >= Duration::from_millis(900) && took <= Duration::from_secs(1) + SLACK,
        "exited {took:?} after SIGTERM, not at --shutdown-grace 1s"
    );
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("after the shutdown grace")),
        "the forced close is not logged: {:?}",
        server.logs()
    );
    eprintln!("SIGTERM with stalled connections open: exit 0 after {took:?} (--shutdown-grace 1s)");
}
