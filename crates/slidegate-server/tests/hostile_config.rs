//! Rule reloads under hostile file-system events, with the built server:
//! reads of the files start no reload, a reload that would switch limits
//! off is refused (unless `--allow-empty-config`), and a config name that
//! points at a secret or at a device is refused without echoing or
//! reading it.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use process::Slidegate;

/// How long a test waits for the watcher to act (it debounces 200 ms).
const SETTLE: Duration = Duration::from_secs(10);

/// A secret that a non-config file behind a `.yaml` name holds.
const SECRET: &str = "hunter2-Zx9QvL3mK8pW2rT5yB7nC4";

fn rules(domain: &str) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
    )
}

fn serve_dir(dir: &Path, extra: &[&str]) -> Slidegate {
    let mut args = vec!["--config", dir.to_str().expect("a UTF-8 path")];
    args.extend_from_slice(extra);
    Slidegate::start(&args)
}

/// The value of `slidegate_config_reloads_total{result}` (0 when absent).
async fn reloads(addr: SocketAddr, result: &str) -> f64 {
    let metrics = common::get(addr, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let needle = format!("result=\"{result}\"");
    text.lines()
        .filter(|l| l.starts_with("slidegate_config_reloads_total") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn until_reloads(addr: SocketAddr, result: &str, at_least: f64) {
    let start = Instant::now();
    while reloads(addr, result).await < at_least {
        assert!(
            start.elapsed() < SETTLE,
            "no reload counted as {result} after {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `domain`'s rule (1 per minute on `k`) is in force: two checks
/// of one fresh value, the second over the limit.
async fn limited(addr: SocketAddr, domain: &str, value: &str) -> bool {
    let body = format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"k","value":"{value}"}}]}}]}}"#
    );
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let reply = common::request_to(
            addr,
            Method::POST,
            "/v1/check",
            &[("content-type", "application/json")],
            body.clone().into_bytes(),
        )
        .await;
        statuses.push(reply.status);
    }
    statuses == [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_config_files_starts_no_reload() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, rules("api")).expect("the rules are written");
    let server = serve_dir(dir.path(), &[]);
    // What `cat` and another program's watcher do, every 100 ms for 1.5 s.
    for _ in 0..15 {
        std::fs::read_to_string(&file).expect("the file is read");
        std::fs::read_dir(dir.path())
            .expect("the directory is listed")
            .for_each(drop);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for result in ["ok", "refused", "error"] {
        assert_eq!(reloads(server.http, result).await, 0.0, "result={result}");
    }
    assert!(
        !server.logs().iter().any(|l| l.contains("config reload")),
        "{:?}",
        server.logs()
    );
    // The watch works: a change is picked up.
    std::fs::write(&file, rules("api2")).expect("the rules are written");
    until_reloads(server.http, "refused", 1.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_config_directory_keeps_the_old_rules_and_counts_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("rules.yaml"), rules("api")).expect("written");
    let server = serve_dir(dir.path(), &[]);
    std::fs::remove_file(dir.path().join("rules.yaml")).expect("removed");
    until_reloads(server.http, "refused", 1.0).await;
    assert!(limited(server.http, "api", "after-empty").await);
    let warning = server
        .logs()
        .into_iter()
        .find(|l| l.contains("config reload refused"))
        .expect("the refusal is logged");
    let json: serde_json::Value = serde_json::from_str(&warning).expect("a JSON log line");
    assert_eq!(json["level"], "WARN", "{json}");
    assert_eq!(json["fields"]["result"], "refused", "{json}");
    assert!(
        json["fields"]["removed"]
            .as_str()
            .is_some_and(|d| d.contains("api")),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_file_keeps_its_domain_and_counts_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("api.yaml"), rules("api")).expect("written");
    std::fs::write(dir.path().join("web.yaml"), rules("web")).expect("written");
    let server = serve_dir(dir.path(), &[]);
    std::fs::remove_file(dir.path().join("web.yaml")).expect("removed");
    until_reloads(server.http, "refused", 1.0).await;
    assert!(limited(server.http, "web", "after-delete").await);
    assert!(limited(server.http, "api", "after-delete").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_empty_config_lets_a_reload_remove_the_rules() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("rules.yaml"), rules("api")).expect("written");
    let server = serve_dir(dir.path(), &["--allow-empty-config"]);
    std::fs::remove_file(dir.path().join("rules.yaml")).expect("removed");
    until_reloads(server.http, "ok", 1.0).await;
    assert!(!limited(server.http, "api", "after-empty").await);
    assert_eq!(reloads(server.http, "refused").await, 0.0);
}

#[test]
fn serve_refuses_to_start_on_an_empty_config_directory() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args([
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--config", dir.path().to_str().expect("a UTF-8 path")])
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no domain"), "{stderr}");
    assert!(stderr.contains("--allow-empty-config"), "{stderr}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_link_to_a_secret_file_is_refused_without_echoing_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rules_dir = dir.path().join("rules");
    std::fs::create_dir(&rules_dir).expect("created");
    std::fs::write(rules_dir.join("api.yaml"), rules("api")).expect("written");
    let secret = dir.path().join("credentials");
    std::fs::write(
        &secret,
        format!("password={SECRET}\napi_key: {SECRET}\n-----BEGIN KEY-----\n{SECRET}\n"),
    )
    .expect("written");
    let server = serve_dir(&rules_dir, &[]);
    std::os::unix::fs::symlink(&secret, rules_dir.join("zz.yaml")).expect("linked");
    until_reloads(server.http, "error", 1.0).await;
    assert!(limited(server.http, "api", "after-link").await);
    let logs = server.logs();
    assert!(
        logs.iter().any(|l| l.contains("zz.yaml")),
        "the refusal names the file: {logs:?}"
    );
    assert!(
        !logs.iter().any(|l| l.contains(&SECRET[..10])),
        "the secret was echoed: {logs:?}"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_link_to_dev_zero_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("api.yaml"), rules("api")).expect("written");
    let server = serve_dir(dir.path(), &[]);
    let before = server.rss_kib();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).expect("linked");
    until_reloads(server.http, "error", 1.0).await;
    assert!(limited(server.http, "api", "after-zero").await);
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("not a regular file")),
        "{:?}",
        server.logs()
    );
    let after = server.rss_kib();
    assert!(
        after < before + 16 * 1024,
        "memory grew from {before} KiB to {after} KiB"
    );
}
