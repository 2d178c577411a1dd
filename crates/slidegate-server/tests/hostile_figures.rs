//! The figures of docs/RELIABILITY.md "Hostile clients", measured on a
//! `slidegate serve` with its default bounds. Ignored by `cargo test`
//! (they take minutes); `scripts/hostile-clients.sh` runs them on the
//! release binary (`SLIDEGATE_BINARY`) and prints one line per figure.
//! Each also asserts the bound it measures (a figure is printed before
//! its check), so a run whose figure breaks the bound fails.

mod common;
#[path = "common/process.rs"]
mod process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use process::Slidegate;

/// How far past a default bound of 10 s the server may act, on a loaded
/// machine: far under what no bound at all would take.
const SLACK: Duration = Duration::from_millis(1_500);
/// The default `--header-timeout`, `--request-timeout` and
/// `--shutdown-grace`.
const TEN_SECONDS: Duration = Duration::from_secs(10);

/// How long a half-sent head is held, at most this long.
fn hold_time(addr: SocketAddr, bound: Duration) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).expect("the listener accepts");
    stream
        .write_all(b"POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-")
        .expect("half a head is sent");
    stream
        .set_read_timeout(Some(bound))
        .expect("a read timeout");
    let start = Instant::now();
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return Some(start.elapsed()),
        }
    }
}

#[test]
#[ignore = "a figure for the docs: scripts/hostile-clients.sh"]
fn figure_half_sent_head() {
    let server = Slidegate::start(&[]);
    let held = hold_time(server.http, Duration::from_secs(120));
    println!("FIGURE half-sent head held: {held:?} (default --header-timeout 10s)");
    let held = held.expect("a half-sent head was held for 2 minutes");
    assert!(
        held >= TEN_SECONDS - Duration::from_millis(100) && held <= TEN_SECONDS + SLACK,
        "held {held:?}, not the 10 s header timeout"
    );
}

#[test]
#[ignore = "a figure for the docs: scripts/hostile-clients.sh"]
fn figure_sigterm_with_a_stalled_connection() {
    let mut server = Slidegate::start(&[]);
    let mut stalled = TcpStream::connect(server.http).expect("the listener accepts");
    stalled
        .write_all(
            b"POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"key\":",
        )
        .expect("a head and part of a body are sent");
    let _silent_grpc = TcpStream::connect(server.grpc).expect("the gRPC listener accepts");
    std::thread::sleep(Duration::from_millis(500));
    let term = Instant::now();
    server.signal("TERM");
    let status = server.wait();
    let took = term.elapsed();
    println!(
        "FIGURE SIGTERM with a stalled request and a silent gRPC connection: {status} after {took:?} (default --shutdown-grace 10s)"
    );
    assert!(status.success(), "{status}");
    assert!(took <= TEN_SECONDS + SLACK, "exited {took:?} after SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure for the docs: scripts/hostile-clients.sh"]
async fn figure_rss_with_50_grpc_streams_of_4_mib() {
    let server = Slidegate::start(&[]);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .expect("a valid URI")
        .connect()
        .await
        .expect("the gRPC listener accepts");
    let before = server.rss_kib();
    let request = RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "x".repeat(4 << 20),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    };
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let request = request.clone();
            tokio::spawn(async move { client.should_rate_limit(request).await })
        })
        .collect();
    let mut peak = before;
    let start = Instant::now();
    while calls.iter().any(|c| !c.is_finished()) && start.elapsed() < Duration::from_secs(60) {
        peak = peak.max(server.rss_kib());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut codes = std::collections::BTreeMap::new();
    for call in calls {
        let code = match call.await.expect("the call task") {
            Ok(_) => "OK".to_owned(),
            Err(status) => format!("{:?}", status.code()),
        };
        *codes.entry(code).or_insert(0) += 1;
    }
    peak = peak.max(server.rss_kib());
    println!(
        "FIGURE 50 gRPC streams of 4 MiB: {codes:?} in {:?}; RSS {} MiB before, peak {} MiB",
        start.elapsed(),
        before / 1024,
        peak / 1024
    );
    assert_eq!(
        codes,
        std::collections::BTreeMap::from([("OutOfRange".to_owned(), 50)]),
        "every 4 MiB message refused from its length"
    );
    // A connection buffers at most --grpc-max-concurrent-streams (100)
    // messages of --grpc-max-message-bytes (64 KiB); 8 MiB more for the
    // runtime. 50 messages read whole would be 200 MiB.
    let budget_kib = 100 * 64 + 8 * 1024;
    assert!(
        peak - before <= budget_kib,
        "RSS grew {} KiB, over the budget of {budget_kib} KiB",
        peak - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a figure for the docs: scripts/hostile-clients.sh"]
async fn figure_reloads_with_a_reader_every_100_ms_for_2_minutes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("rules.yaml");
    std::fs::write(
        &file,
        "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    )
    .expect("the rules are written");
    let server = Slidegate::start(&["--config", dir.path().to_str().expect("a UTF-8 path")]);
    let start = Instant::now();
    let mut reads = 0;
    while start.elapsed() < Duration::from_secs(120) {
        // What `cat rules.yaml` does.
        std::fs::read_to_string(&file).expect("the file is read");
        reads += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = common::get(server.http, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let reloads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slidegate_config_reloads_total"))
        .collect();
    let logged = server
        .logs()
        .iter()
        .filter(|l| l.contains("config reload"))
        .count();
    println!(
        "FIGURE {reads} reads in 2 minutes: reload counters {reloads:?}, {logged} reload log lines"
    );
    // Reading changes nothing: no reload counted (every series at 0, or
    // none yet) and none logged.
    let counted: Vec<&&str> = reloads
        .iter()
        .filter(|l| l.rsplit(' ').next() != Some("0"))
        .collect();
    assert!(counted.is_empty(), "reloads counted: {counted:?}");
    assert_eq!(logged, 0, "reloads logged");
    assert!(reads > 1_000, "only {reads} reads in 2 minutes");
}
