//! What a newcomer meets first, with the built binary and real processes:
//! `validate-config` gives `serve`'s verdict, `check` says when its answer
//! is degraded, `bench` says when nothing it sent was limited.

mod common;
#[path = "common/process.rs"]
mod process;

use std::path::Path;
use std::process::{Command, Output};

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

/// A port nothing listens on: bound once, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
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
    let url = format!("redis://127.0.0.1:{}", closed_port());
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
