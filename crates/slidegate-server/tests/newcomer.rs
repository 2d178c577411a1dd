//! What a newcomer meets first, with the built binary and real processes:
//! `validate-config` gives `serve`'s verdict, `check` says when its answer
//! is degraded, `bench` says when nothing it sent was limited, a dead
//! store or OTLP collector says why, Envoy hears a rule's unit, and
//! errors are what the README says.

mod common;
#[path = "common/process.rs"]
mod process;

use std::path::Path;
use std::process::{Command, Output};

use common::redis::ReservedPort;
use process::Slidegate;

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");

fn slidegate(args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .output()
        .expect("the slidegate binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A port nothing listens on, held for the test (a port bound once and
/// let go can be taken by the next process that binds one).
fn closed_port() -> ReservedPort {
    ReservedPort::new()
}

fn path(dir: &Path) -> &str {
    dir.to_str().expect("a UTF-8 path")
}

#[test]
fn validate_config_refuses_an_empty_directory_as_serve_does() {
    let empty = tempfile::tempdir().expect("a temporary directory");
    let validate = slidegate(&["validate-config", path(empty.path())]);
    let serve = slidegate(&[
        "serve",
        "--config",
        path(empty.path()),
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
    ]);
    assert!(!serve.status.success(), "serve started: {serve:?}");
    assert!(
        !validate.status.success(),
        "validate-config accepted an empty directory: {}",
        text(&validate.stdout)
    );
    let said = text(&validate.stderr);
    assert!(said.contains("no domain is configured"), "{said}");
    assert!(said.contains("--allow-empty-config"), "{said}");
    assert!(
        text(&serve.stderr).contains("no domain is configured"),
        "{}",
        text(&serve.stderr)
    );

    // With --allow-empty-config both accept it.
    let validate = slidegate(&[
        "validate-config",
        "--allow-empty-config",
        path(empty.path()),
    ]);
    assert!(validate.status.success(), "{validate:?}");
    assert_eq!(text(&validate.stdout).trim(), "ok: 0 domain(s):");
    let dir = path(empty.path()).to_owned();
    let server = Slidegate::start(&["--config", &dir, "--allow-empty-config"]);
    drop(server);
}

#[test]
fn check_against_a_dead_store_warns_and_exits_with_its_own_code() {
    let closed = closed_port();
    let url = format!("redis://127.0.0.1:{}", closed.port());
    let output = slidegate(&[
        "check",
        "--key",
        "k",
        "--rate",
        "10/s",
        "--store",
        &url,
        "--store-timeout-ms",
        "100",
    ]);
    let stdout = text(&output.stdout);
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("the decision");
    assert_eq!(json["degraded"], true, "{stdout}");
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("warning: the store did not decide"),
        "{stderr}"
    );
    // With why: nothing listens on the port (the warning itself, not the
    // library's log lines above it).
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: "))
        .unwrap_or_default()
        .to_lowercase();
    assert!(warning.contains("connection refused"), "{stderr}");

    // A decision of the store itself: exit 0, no warning.
    let output = slidegate(&["check", "--key", "k", "--rate", "10/s"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!text(&output.stderr).contains("warning"), "{output:?}");
}

/// `slidegate bench` for a moment against `target`, as JSON.
fn bench(target: &str, op: &str) -> (serde_json::Value, String) {
    let output = slidegate(&[
        "bench",
        "--target",
        target,
        "--op",
        op,
        "--duration",
        "300ms",
        "--concurrency",
        "2",
        "--json",
    ]);
    assert!(output.status.success(), "{output:?}");
    let report = serde_json::from_slice(&output.stdout).expect("a JSON report");
    (report, text(&output.stderr))
}

#[test]
fn bench_against_a_server_without_its_domain_warns_that_nothing_was_limited() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("other.yaml"),
        "domain: other\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .expect("the rules are written");
    let server = Slidegate::start(&["--config", path(dir.path())]);
    for (target, op) in [
        (format!("grpc://{}", server.grpc), "should-rate-limit"),
        (format!("http://{}", server.http), "check"),
    ] {
        let (report, stderr) = bench(&target, op);
        assert!(report["requests"].as_u64() > Some(0), "{report}");
        assert_eq!(report["unlimited"], report["allowed"], "{report}");
        let warning = report["warning"].as_str().unwrap_or_default();
        assert!(warning.contains("had no limit"), "{op}: {report}");
        assert!(stderr.contains("warning:"), "{op}: {stderr}");
        assert!(stderr.contains("domain `bench`"), "{op}: {stderr}");
    }
    drop(server);

    // With a rule for the domain the answers are limited: no warning.
    std::fs::write(
        dir.path().join("other.yaml"),
        "domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
    )
    .expect("the rules are rewritten");
    let server = Slidegate::start(&["--config", path(dir.path())]);
    for (target, op) in [
        (format!("grpc://{}", server.grpc), "should-rate-limit"),
        (format!("http://{}", server.http), "check"),
    ] {
        let (report, stderr) = bench(&target, op);
        assert!(report["allowed"].as_u64() > Some(0), "{report}");
        assert_eq!(report["unlimited"], 0, "{op}: {report}");
        assert!(report.get("warning").is_none(), "{op}: {report}");
        assert!(!stderr.contains("warning"), "{op}: {stderr}");
    }
}

/// Polls `until` every 50 ms for at most 20 s.
fn eventually(what: &str, until: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !until() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "never: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("a runtime")
}

#[test]
fn a_dead_redis_says_why_in_readyz_and_the_log_once_and_the_start_line_says_where() {
    let closed = closed_port();
    let port = closed.port();
    let url = format!("redis://user:secret@127.0.0.1:{port}");
    let server = Slidegate::start(&["--store", &url]);
    // The line that gave the addresses may be collected just after.
    let start_line = || {
        server
            .logs()
            .into_iter()
            .find(|l| l.contains("slidegate is serving"))
    };
    eventually("the start line", || start_line().is_some());
    let serving = start_line().expect("the start line");
    let line: serde_json::Value = serde_json::from_str(&serving).expect("JSON");
    assert_eq!(line["fields"]["store"], "redis", "{serving}");
    assert_eq!(
        line["fields"]["store_address"],
        format!("redis://user:***@127.0.0.1:{port}"),
        "{serving}"
    );
    assert!(!serving.contains("secret"), "{serving}");

    let rt = runtime();
    for _ in 0..5 {
        let reply = rt.block_on(common::get(server.http, "/readyz"));
        assert_eq!(reply.status, 503);
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains(&format!("127.0.0.1:{port}: cannot connect"))
                && message.to_lowercase().contains("connection refused"),
            "{message}"
        );
    }
    // Five failed probes: one line with the cause, no ERROR line.
    let not_ready: Vec<String> = server
        .logs()
        .into_iter()
        .filter(|l| l.contains("not ready"))
        .collect();
    assert_eq!(not_ready.len(), 1, "{not_ready:#?}");
    assert!(
        not_ready[0].to_lowercase().contains("connection refused"),
        "{not_ready:?}"
    );
    let errors: Vec<String> = server
        .logs()
        .into_iter()
        .filter(|l| l.contains("\"level\":\"ERROR\""))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    // A name that does not resolve says so.
    let server = Slidegate::start(&["--store", "redis://nonexistent.invalid:6379"]);
    let reply = rt.block_on(common::get(server.http, "/readyz"));
    assert_eq!(reply.status, 503);
    let message = reply.json()["error"]["message"].to_string();
    assert!(
        message.contains("nonexistent.invalid:6379: cannot resolve"),
        "{message}"
    );
}

#[test]
fn a_closed_otlp_endpoint_is_warned_about_once() {
    let closed = closed_port();
    let endpoint = format!("http://127.0.0.1:{}", closed.port());
    // Batches every 100 ms: several exports fail within the test.
    let server = Slidegate::start_with_env(
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let rt = runtime();
    let warnings = || {
        server
            .logs()
            .into_iter()
            .filter(|l| l.contains("cannot export spans"))
            .collect::<Vec<_>>()
    };
    let acquire = |key: &str| {
        let body = format!(r#"{{"key":"{key}","limit":100,"window_ms":60000}}"#);
        rt.block_on(common::request_to(
            server.http,
            http::Method::POST,
            "/v1/acquire",
            &[("content-type", "application/json")],
            body.into_bytes(),
        ));
    };
    acquire("first");
    eventually("a warning about the OTLP endpoint", || {
        !warnings().is_empty()
    });
    // More spans, more failed exports: still one line.
    for i in 0..10 {
        acquire(&format!("more-{i}"));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let said = warnings();
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains(&endpoint), "{said:?}");
    assert!(said[0].to_lowercase().contains("refused"), "{said:?}");
}

#[test]
fn a_window_of_exactly_one_unit_is_reported_to_envoy_as_that_unit() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("units.yaml"),
        "domain: units
descriptors:
  - key: minute
    rate_limit: {requests_per_unit: 5, window: 60s}
  - key: hour
    rate_limit: {requests_per_unit: 5, window: 1h}
  - key: day
    rate_limit: {requests_per_unit: 5, window: 24h}
  - key: quarter
    rate_limit: {requests_per_unit: 5, window: 15m}
",
    )
    .expect("the rules are written");
    let server = Slidegate::start(&["--config", path(dir.path())]);
    let rt = runtime();
    for (key, unit) in [
        ("minute", "MINUTE"),
        ("hour", "HOUR"),
        ("day", "DAY"),
        ("quarter", "UNKNOWN"),
    ] {
        let body = format!(
            r#"{{"domain":"units","descriptors":[{{"entries":[{{"key":"{key}","value":"v"}}]}}]}}"#
        );
        let reply = rt.block_on(common::request_to(
            server.http,
            http::Method::POST,
            "/json",
            &[("content-type", "application/json")],
            body.into_bytes(),
        ));
        assert_eq!(reply.status, 200);
        let json = reply.json();
        assert_eq!(
            json["statuses"][0]["currentLimit"]["unit"], unit,
            "{key}: {json}"
        );
    }
}

#[test]
fn a_body_without_content_type_gets_the_415_the_readme_names_and_404_lists_json() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("the README");
    let api = readme
        .split("HTTP API v1 (")
        .nth(1)
        .and_then(|rest| rest.split("):").next())
        .expect("the README's HTTP API paragraph");
    assert!(
        api.contains("415 `unsupported_media_type`"),
        "the README does not say what a body without Content-Type gets: {api}"
    );
    let server = Slidegate::start(&[]);
    let rt = runtime();
    let reply = rt.block_on(common::request_to(
        server.http,
        http::Method::POST,
        "/v1/acquire",
        &[],
        br#"{"key":"k","limit":1,"window_ms":1000}"#.to_vec(),
    ));
    assert_eq!(reply.status, 415);
    assert_eq!(reply.error_code(), "unsupported_media_type");
    let reply = rt.block_on(common::get(server.http, "/nowhere"));
    assert_eq!(reply.status, 404);
    let message = reply.json()["error"]["message"].to_string();
    for route in [
        "POST /v1/acquire",
        "POST /v1/check",
        "POST /json",
        "GET /readyz",
    ] {
        assert!(message.contains(route), "{route} missing: {message}");
    }
}
