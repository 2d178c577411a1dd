//! What holds a listener's connections: idle gRPC clients are sent away
//! (HTTP/2 GOAWAY) at `--idle-timeout`, a client with a stream open is not,
//! and one address holds at most `--max-connections-per-ip` of them. Each
//! test runs `slidegate serve` as a real process, with real tonic clients
//! and real sockets.

mod common;
#[path = "common/process.rs"]
mod process;

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use process::Slidegate;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint::from_shared(format!("http://{addr}")).expect("a valid URI")
}

/// A tonic channel on a connection of its own, from `local` (an address
/// of the loopback network, `127.0.0.x`).
async fn channel_from(local: &str, addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    let local: SocketAddr = format!("{local}:0").parse().expect("a local address");
    endpoint(addr)
        .connect_with_connector(tower::service_fn(
            move |_: tonic::transport::Uri| async move {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.bind(local)?;
                let stream = socket.connect(addr).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            },
        ))
        .await
}

/// One `ShouldRateLimit` on `channel`, at most `within`.
async fn call(channel: &Channel, within: Duration) -> Result<(), String> {
    let mut client = RateLimitServiceClient::new(channel.clone());
    match tokio::time::timeout(within, client.should_rate_limit(request())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// A new client on a connection of its own, and its first call, at most
/// `within` in all.
async fn new_client_call(addr: SocketAddr, within: Duration) -> Result<Channel, String> {
    let start = Instant::now();
    let channel = tokio::time::timeout(within, endpoint(addr).connect())
        .await
        .map_err(|_| format!("no connection within {within:?}"))?
        .map_err(|e| format!("cannot connect: {e}"))?;
    call(&channel, within.saturating_sub(start.elapsed())).await?;
    Ok(channel)
}

async fn metrics(server: &Slidegate) -> String {
    let reply = common::request_to(server.http, http::Method::GET, "/metrics", &[], vec![]).await;
    String::from_utf8_lossy(&reply.body).into_owned()
}

/// The value of the series of `name` whose labels include every one of
/// `labels`, 0 without one.
fn counter(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `--max-connections 2 --idle-timeout 1s`: two clients make one call each
/// and go idle; a third is served once they have been idle for the idle
/// timeout, not before, and the first two call again on new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_grpc_clients_are_sent_away_at_the_idle_timeout_and_a_third_is_served() {
    const IDLE: Duration = Duration::from_secs(1);
    let server = Slidegate::start(&["--max-connections", "2", "--idle-timeout", "1s"]);
    let first = new_client_call(server.grpc, common::DEADLINE)
        .await
        .expect("the first client is served");
    let second = new_client_call(server.grpc, common::DEADLINE)
        .await
        .expect("the second client is served");
    let idle_since = Instant::now();

    let third = new_client_call(server.grpc, Duration::from_secs(10)).await;
    let waited = idle_since.elapsed();
    eprintln!("the third client was served {waited:?} after the others went idle");
    let third = third.unwrap_or_else(|e| {
        panic!("the third client was not served ({e}): idle clients hold the listener")
    });
    // Its wait: until the idle ones were sent away (their idle time began
    // when their answers ended, just before `idle_since`).
    assert!(
        waited >= IDLE - Duration::from_millis(100),
        "served {waited:?} after the others went idle: they were sent away before the idle timeout"
    );
    assert!(
        waited < IDLE + Duration::from_secs(2),
        "served {waited:?} after the others went idle (--idle-timeout 1s)"
    );
    // Both were sent away (the second a moment after the first: its call
    // ended later).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = metrics(&server).await;
    // (The third one's own idle time ends later, on a slow machine before
    // this line: at least the two.)
    assert!(
        counter(
            &metrics,
            "slidegate_connection_timeouts_total",
            &["listener=\"grpc\"", "phase=\"idle\""]
        ) >= 2.0,
        "{metrics}"
    );
    // Sent away, not broken: both clients call again, on new connections.
    drop(third);
    call(&first, common::DEADLINE)
        .await
        .expect("the first client calls again");
    call(&second, common::DEADLINE)
        .await
        .expect("the second client calls again");
}

/// `--max-connections 1 --idle-timeout 1s --grpc-request-timeout 1s`: a
/// client watching the health service has a stream open for seconds: its
/// connection is busy, never idle, so it is neither sent away nor cut (a
/// connection sent away has the request timeout to close), and it keeps
/// the only place of the listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_with_a_stream_open_is_not_cut() {
    let server = Slidegate::start(&[
        "--max-connections",
        "1",
        "--idle-timeout",
        "1s",
        "--grpc-request-timeout",
        "1s",
    ]);
    let channel = endpoint(server.grpc)
        .connect()
        .await
        .expect("the client connects");
    let mut health = HealthClient::new(channel.clone());
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("the watch starts")
        .into_inner();
    // The health status is sent again each second while the stream is open.
    let start = Instant::now();
    let mut updates = 0;
    while start.elapsed() < Duration::from_millis(3_500) {
        let update = tokio::time::timeout(common::DEADLINE, watch.message()).await;
        match update {
            Ok(Ok(Some(_))) => updates += 1,
            other => panic!(
                "the stream ended {:?} after it opened (--idle-timeout 1s): {other:?}",
                start.elapsed()
            ),
        }
    }
    assert!(updates >= 3, "{updates} updates in 3.5 s");
    // Its connection still holds the only place.
    let refused = new_client_call(server.grpc, Duration::from_millis(1_500)).await;
    assert!(
        refused.is_err(),
        "another client was served while the stream was open: its connection was closed"
    );
    drop(watch);
    drop(health);
    drop(channel);
    new_client_call(server.grpc, Duration::from_secs(5))
        .await
        .expect("served once the stream's client left");
}

/// Reads until the server closes `stream` (EOF or reset), at most `bound`.
fn closed_within(stream: &mut std::net::TcpStream, bound: Duration) -> bool {
    stream
        .set_read_timeout(Some(bound))
        .expect("a read timeout");
    let mut buffer = [0u8; 1024];
    match stream.read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// A plain TCP connection to `addr` from `local` (`127.0.0.x`).
async fn tcp_from(local: &str, addr: SocketAddr) -> std::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(format!("{local}:0").parse().expect("a local address"))
        .expect("bound");
    let stream = socket.connect(addr).await.expect("connected");
    let stream = stream.into_std().expect("a std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream
}

/// `GET /healthz` on `stream`: true when answered 200.
fn healthz(stream: &mut std::net::TcpStream) -> bool {
    let sent = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n");
    stream
        .set_read_timeout(Some(common::DEADLINE))
        .expect("a read timeout");
    let mut buffer = [0u8; 1024];
    sent.is_ok()
        && matches!(stream.read(&mut buffer), Ok(n) if buffer[..n].starts_with(b"HTTP/1.1 200"))
}

/// `--max-connections 4 --max-connections-per-ip 2`: a third connection
/// from one address is closed at once on both listeners, while another
/// address is served; a place freed by the first address is its again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_cap_and_others_are_served() {
    let server = Slidegate::start(&["--max-connections", "4", "--max-connections-per-ip", "2"]);

    // HTTP.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = tcp_from("127.0.0.1", server.http).await;
        assert!(healthz(&mut stream), "one of the first two is not served");
        held.push(stream);
    }
    let mut third = tcp_from("127.0.0.1", server.http).await;
    assert!(
        closed_within(&mut third, Duration::from_secs(2)),
        "a third HTTP connection from the address was not closed"
    );
    let mut other = tcp_from("127.0.0.2", server.http).await;
    assert!(healthz(&mut other), "another address is not served");
    drop(held.pop());
    // The server sees the close a moment later.
    let deadline = Instant::now() + common::DEADLINE;
    loop {
        let mut again = tcp_from("127.0.0.1", server.http).await;
        if healthz(&mut again) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed place was not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // gRPC.
    let mut clients = Vec::new();
    for _ in 0..2 {
        let channel = channel_from("127.0.0.1", server.grpc)
            .await
            .expect("connects");
        call(&channel, common::DEADLINE)
            .await
            .expect("one of the first two is served");
        clients.push(channel);
    }
    let start = Instant::now();
    let refused = match channel_from("127.0.0.1", server.grpc).await {
        Ok(channel) => call(&channel, common::DEADLINE).await,
        Err(error) => Err(error.to_string()),
    };
    assert!(
        refused.is_err(),
        "a third gRPC connection from the address was served"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "refused after {:?}, not at once",
        start.elapsed()
    );
    let other = channel_from("127.0.0.2", server.grpc)
        .await
        .expect("another address connects");
    call(&other, common::DEADLINE)
        .await
        .expect("another address is served");

    let metrics = metrics(&server).await;
    for listener in ["http", "grpc"] {
        assert!(
            counter(
                &metrics,
                "slidegate_connections_refused_total",
                &[&format!("listener=\"{listener}\""), "reason=\"per_ip\""]
            ) >= 1.0,
            "{listener}: {metrics}"
        );
    }
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("--max-connections-per-ip")),
        "the refusal is not logged"
    );
}

type H2Client = h2::client::SendRequest<axum::body::Bytes>;
type H2Connection = tokio::task::JoinHandle<Result<(), h2::Error>>;

/// A bare HTTP/2 connection to `addr` that has made one gRPC health check.
async fn h2_after_one_check(addr: SocketAddr) -> (H2Client, H2Connection) {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
    let connection = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let check = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request");
    let (answer, mut body) = client.send_request(check, false).expect("sent");
    // An empty HealthCheckRequest: a message of no bytes.
    body.send_data(axum::body::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .expect("sent");
    let answer = answer.await.expect("an answer");
    assert_eq!(answer.status(), 200);
    let mut answer = answer.into_body();
    while let Some(chunk) = answer.data().await {
        let chunk = chunk.expect("a message");
        let _ = answer.flow_control().release_capacity(chunk.len());
    }
    let trailers = answer
        .trailers()
        .await
        .expect("trailers")
        .expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    (client, connection)
}

/// Waits for `connection` to be closed by the server, at most 10 s;
/// returns how long that took, after checking it was sent GOAWAY without
/// error first (a new request is refused as gone away).
async fn closed_with_goaway(
    addr: SocketAddr,
    mut client: H2Client,
    connection: H2Connection,
) -> Duration {
    let start = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the connection was not closed within 10 s")
        .expect("the connection task");
    let took = start.elapsed();
    assert!(closed.is_ok(), "closed with an error: {closed:?}");
    let check = http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .body(())
        .expect("a request");
    let refused = match client.send_request(check, true) {
        Ok((answer, _)) => answer.await.expect_err("answered after the close"),
        Err(error) => error,
    };
    assert!(
        refused.is_go_away() && refused.reason() == Some(h2::Reason::NO_ERROR),
        "not closed by a GOAWAY without error: {refused:?}"
    );
    took
}

/// What an idle gRPC connection is sent after `--idle-timeout`: HTTP/2
/// GOAWAY with no error, then the close, seen by a bare HTTP/2 client
/// after one health check (tonic's client reconnects without telling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_grpc_connection_is_sent_goaway_then_closed() {
    let server = Slidegate::start(&["--idle-timeout", "1s"]);
    let (client, connection) = h2_after_one_check(server.grpc).await;
    let took = closed_with_goaway(server.grpc, client, connection).await;
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "closed {took:?} after its last answer (--idle-timeout 1s)"
    );
}

/// `--grpc-max-connection-age 2s`: a connection that is never idle long
/// enough to be sent away is sent GOAWAY at that age, then closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connection_is_sent_goaway_at_its_maximum_age() {
    let server = Slidegate::start(&["--grpc-max-connection-age", "2s", "--idle-timeout", "60s"]);
    let opened = Instant::now();
    let (client, connection) = h2_after_one_check(server.grpc).await;
    closed_with_goaway(server.grpc, client, connection).await;
    let age = opened.elapsed();
    assert!(
        age >= Duration::from_millis(1_900) && age < Duration::from_secs(4),
        "closed at {age:?} (--grpc-max-connection-age 2s)"
    );
}

/// An HTTP/2 frame: its 9-byte header (length, type, flags, stream), then
/// `payload`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len())
        .expect("a short payload")
        .to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The HPACK block of a gRPC health Check's head, from the static table
/// and literals only (no dynamic table, no Huffman code).
fn check_head_block() -> Vec<u8> {
    // :method POST, :scheme http.
    let mut block = vec![0x83, 0x86];
    let mut literal = |name: &[u8], value: &str| {
        block.extend_from_slice(name);
        block.push(u8::try_from(value.len()).expect("a short value"));
        block.extend_from_slice(value.as_bytes());
    };
    // Literals without indexing, their names from the static table:
    // :path (4), :authority (1), content-type (31: 15 + 16).
    literal(&[0x04], "/grpc.health.v1.Health/Check");
    literal(&[0x01], "localhost");
    literal(&[0x0f, 0x10], "application/grpc");
    // te, a new name.
    literal(&[0x00, 0x02, b't', b'e'], "trailers");
    block
}

/// Reads the next frame's type, flags and stream, skipping its payload.
async fn next_frame(tcp: &mut tokio::net::TcpStream) -> (u8, u8, u32, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    tcp.read_exact(&mut head).await.expect("a frame");
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; length];
    tcp.read_exact(&mut payload).await.expect("a payload");
    (head[3], head[4], stream, payload)
}

const RST_STREAM: u8 = 0x3;
const HEADERS: u8 = 0x1;
const GOAWAY: u8 = 0x7;
const REFUSED_STREAM: u32 = 0x7;

/// `--grpc-max-concurrent-streams 2`: a client that opens a third call
/// while two wait for their request messages sees the third refused
/// (`REFUSED_STREAM`) by HTTP/2 itself, the two still open; the first then
/// answered once its message comes. A bare HTTP/2 writer, since a real
/// client holds the third back on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_concurrent_streams_is_refused() {
    use tokio::io::AsyncWriteExt;
    let server = Slidegate::start(&["--grpc-max-concurrent-streams", "2"]);
    let mut tcp = tokio::net::TcpStream::connect(server.grpc)
        .await
        .expect("connects");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    let block = check_head_block();
    for stream in [1, 3, 5] {
        // END_HEADERS, not END_STREAM: each call waits for its message.
        out.extend(h2_frame(HEADERS, 0x4, stream, &block));
    }
    tcp.write_all(&out).await.expect("sent");
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match next_frame(&mut tcp).await {
                (RST_STREAM, _, stream, payload) => {
                    assert_eq!(stream, 5, "a call within the bound was reset");
                    return u32::from_be_bytes(payload[..4].try_into().expect("a code"));
                }
                (GOAWAY, _, _, payload) => panic!("GOAWAY: {payload:02x?}"),
                _ => {}
            }
        }
    })
    .await
    .expect("the third call was not refused within 5 s");
    assert_eq!(refused, REFUSED_STREAM);
    // The first call's message: empty, then END_STREAM.
    tcp.write_all(&h2_frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]))
        .await
        .expect("sent");
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match next_frame(&mut tcp).await {
                (HEADERS, _, 1, _) => return,
                (RST_STREAM, _, stream, _) => panic!("stream {stream} reset"),
                (GOAWAY, _, _, payload) => panic!("GOAWAY: {payload:02x?}"),
                _ => {}
            }
        }
    })
    .await
    .expect("the first call was not answered within 5 s");
}
