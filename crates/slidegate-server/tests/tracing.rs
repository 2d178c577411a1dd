//! `--otlp-endpoint`: the running binary exports its spans to an OTLP
//! collector (a small tonic one, here in the test): a span per decision
//! with its domain and outcome, a child span per store call, the parent
//! taken from the caller's `traceparent` over HTTP and over gRPC metadata,
//! and a decision made by the failure policy marked. Stopping the server
//! flushes the spans.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::net::TcpListener;

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");

const RULES: &str = "\
domain: traced
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// One exported span, flattened.
#[derive(Clone, Debug)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
}

/// An OTLP/gRPC trace collector keeping every span it receives.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let attributes = span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                                Some(Value::StringValue(s)) => s.clone(),
                                Some(Value::BoolValue(b)) => b.to_string(),
                                Some(Value::IntValue(i)) => i.to_string(),
                                Some(other) => format!("{other:?}"),
                                None => String::new(),
                            };
                            (kv.key.clone(), value)
                        })
                        .collect();
                    spans.push(Span {
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

async fn start_collector() -> (SocketAddr, Collector) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream_of(listener)),
    );
    (addr, collector)
}

fn tokio_stream_of(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

/// `slidegate serve` exporting to `collector`, on the memory store of at
/// most `max_keys` keys (a full store answers by policy: degraded).
struct Server {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
}

impl Server {
    fn start(rules: &std::path::Path, collector: SocketAddr, max_keys: usize) -> Server {
        Server::start_with(rules, collector, &["--max-keys", &max_keys.to_string()])
    }

    /// `slidegate serve ARGS` exporting to `collector`, on the memory store.
    fn start_with(rules: &std::path::Path, collector: SocketAddr, args: &[&str]) -> Server {
        let mut child = Command::new(BINARY)
            .arg("serve")
            .args(["--otlp-endpoint", &format!("http://{collector}")])
            .args(args)
            .env("SLIDEGATE_HTTP_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_GRPC_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_LOG_FORMAT", "json")
            .env("SLIDEGATE_STORE", "memory")
            .env("SLIDEGATE_CONFIG", rules)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                    && let (Some(http), Some(grpc)) = (
                        json["fields"]["http_addr"].as_str(),
                        json["fields"]["grpc_addr"].as_str(),
                    )
                {
                    let _ = tx.send((http.parse().unwrap(), grpc.parse().unwrap()));
                }
            }
        });
        let (http, grpc) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("no 'serving' log line");
        Server { child, http, grpc }
    }

    /// SIGTERM, and waits for the process to end (its spans flushed).
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "slidegate exited with {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const HTTP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HTTP_PARENT: &str = "b7ad6b7169203331";
const GRPC_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const GRPC_PARENT: &str = "00f067aa0ba902b7";

async fn http_check(addr: SocketAddr, user: &str, traceparent: &str) -> http::StatusCode {
    let body = format!(
        r#"{{"domain":"traced","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    http_post(addr, "/v1/check", body, traceparent).await
}

/// `body` posted as JSON to `path` with `traceparent`: the answer's status.
async fn http_post(
    addr: SocketAddr,
    path: &str,
    body: String,
    traceparent: &str,
) -> http::StatusCode {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("traceparent", traceparent)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let _ = response.into_body().collect().await;
    status
}

fn wait_for_spans(collector: &Collector, least: usize) -> Vec<Span> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let spans = collector.0.lock().unwrap().clone();
        if spans.len() >= least || std::time::Instant::now() > deadline {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_store_calls_are_exported_as_spans_of_the_callers_trace() {
    let (collector_addr, collector) = start_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("traced.yaml");
    std::fs::write(&rules, RULES).unwrap();
    // Two keys fit: the third user finds the store full, and the failure
    // policy (local: deny) answers, degraded.
    let server = Server::start(&rules, collector_addr, 2);

    // HTTP: allowed, then denied, both in the caller's trace.
    let traceparent = format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01");
    assert_eq!(
        http_check(server.http, "alice", &traceparent).await,
        http::StatusCode::OK
    );
    assert_eq!(
        http_check(server.http, "alice", &traceparent).await,
        http::StatusCode::TOO_MANY_REQUESTS
    );

    // gRPC, with the trace context in the metadata.
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "traced".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "bob".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{GRPC_TRACE}-{GRPC_PARENT}-01").parse().unwrap(),
    );
    client.should_rate_limit(request).await.unwrap();

    // A third key: the store is full, the policy decides.
    http_check(
        server.http,
        "carol",
        &format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01"),
    )
    .await;

    server.stop();
    let spans = wait_for_spans(&collector, 12);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let decisions: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "slidegate.decision")
        .collect();
    assert_eq!(decisions.len(), 4, "one span per decision: {names:?}");
    for decision in &decisions {
        assert_eq!(decision.attributes["domain"], "traced", "{decision:?}");
        // Its parent is the request's span, whose parent is the caller's.
        let request = by_id[decision.parent_span_id.as_str()];
        let caller = if request.name == "slidegate.grpc" {
            (GRPC_TRACE, GRPC_PARENT)
        } else {
            assert_eq!(request.name, "slidegate.http");
            (HTTP_TRACE, HTTP_PARENT)
        };
        assert_eq!(
            (decision.trace_id.as_str(), request.parent_span_id.as_str()),
            caller,
            "{request:?}"
        );
        // A child span for the store call.
        let store: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name == "slidegate.store" && s.parent_span_id == decision.span_id)
            .collect();
        assert_eq!(store.len(), 1, "{decision:?}: {names:?}");
        assert_eq!(store[0].attributes["store"], "memory");
        // One enforced descriptor is the store's plain decision.
        assert_eq!(store[0].attributes["op"], "acquire");
    }
    let outcomes: Vec<(&str, &str)> = decisions
        .iter()
        .map(|d| {
            (
                d.attributes["outcome"].as_str(),
                d.attributes["degraded"].as_str(),
            )
        })
        .collect();
    assert!(outcomes.contains(&("allowed", "false")), "{outcomes:?}");
    assert!(outcomes.contains(&("denied", "false")), "{outcomes:?}");
    let grpc = decisions
        .iter()
        .find(|d| d.trace_id == GRPC_TRACE)
        .expect("no decision in the gRPC caller's trace");
    assert_eq!(grpc.attributes["outcome"], "allowed");
    let fallback: Vec<&&Span> = decisions
        .iter()
        .filter(|d| d.attributes.get("fallback").map(String::as_str) == Some("policy"))
        .collect();
    assert_eq!(fallback.len(), 1, "{outcomes:?}");
    assert_eq!(fallback[0].attributes["degraded"], "true");
}

/// `POST /v1/acquire` is traced as a decision of its own: the ad-hoc
/// rule, in the caller's trace, with its store call as a child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_is_a_decision_span_with_its_store_call_as_a_child() {
    let (collector_addr, collector) = start_collector().await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("traced.yaml");
    std::fs::write(&rules, RULES).unwrap();
    let server = Server::start(&rules, collector_addr, 10);
    let body = r#"{"key":"k","limit":5,"window_ms":60000}"#.to_owned();
    let traceparent = format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01");
    assert_eq!(
        http_post(server.http, "/v1/acquire", body, &traceparent).await,
        http::StatusCode::OK
    );
    server.stop();
    let spans = wait_for_spans(&collector, 3);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let decision = spans
        .iter()
        .find(|s| s.name == "slidegate.decision")
        .unwrap_or_else(|| panic!("no decision span: {names:?}"));
    assert_eq!(decision.trace_id, HTTP_TRACE, "{decision:?}");
    assert_eq!(decision.attributes["rule"], "adhoc", "{decision:?}");
    assert_eq!(decision.attributes["outcome"], "allowed", "{decision:?}");
    let store: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "slidegate.store" && s.parent_span_id == decision.span_id)
        .collect();
    assert_eq!(store.len(), 1, "{decision:?}: {names:?}");
    assert_eq!(store[0].attributes["op"], "acquire");
}

/// A collector that accepts connections and never answers: it holds each
/// one open, reading nothing, for as long as the test runs.
fn black_hole() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            held.push(stream);
        }
    });
    addr
}

/// With `--shutdown-grace 2s` and a collector that never answers, a
/// SIGTERM ends the process within the grace plus the one second the spans
/// still buffered may take past it (`tracing_otlp::FLUSH_AT_LEAST`),
/// even when a stalled request keeps the stop waiting the whole grace
/// first (before: exit 10 s after the servers stopped, a 5 s flush timeout
/// twice).
#[test]
fn sigterm_exits_within_the_grace_and_a_second_when_the_collector_never_answers() {
    const GRACE: Duration = Duration::from_secs(2);
    const FLUSH_AT_LEAST: Duration = Duration::from_secs(1);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("traced.yaml");
    std::fs::write(&rules, RULES).unwrap();
    let collector = black_hole();
    let mut server = Server::start_with(&rules, collector, &["--shutdown-grace", "2s"]);
    // Spans to flush: one decision; then a request whose body never comes,
    // which holds the stop for the whole grace.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(http_check(
        server.http,
        "alice",
        &format!("00-{HTTP_TRACE}-{HTTP_PARENT}-01"),
    ));
    let mut stalled = std::net::TcpStream::connect(server.http).unwrap();
    std::io::Write::write_all(
        &mut stalled,
        b"POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let signalled = std::time::Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(30),
            "still running 30 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = signalled.elapsed();
    eprintln!("exit {status} {took:?} after SIGTERM (grace {GRACE:?})");
    assert!(status.success(), "{status}");
    // The stalled request holds the stop for the grace: not earlier.
    assert!(took >= GRACE, "{took:?}");
    // Process exit and a loaded machine: a second of slack, far below the
    // 10 s the flush took before.
    let bound = GRACE + FLUSH_AT_LEAST + Duration::from_secs(1);
    assert!(
        took < bound,
        "exited {took:?} after SIGTERM, past the grace and the flush ({bound:?})"
    );
    drop(stalled);
}
