//! Logs for machines and people: colour only on a terminal and without
//! `NO_COLOR`, and the fields an operator filters on in every line about
//! a reload or a circuit breaker transition.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::Value;

use crate::common::redis::Redis;
use crate::common::request_to;
use crate::process::{PROCESS_DEADLINE, Slidegate};
use crate::support::{self, binary};

const SERVING: &str = "slidegate is serving";
const ESC: char = '\x1b';

/// `slidegate serve` with text logs on free ports.
fn serve(command: &mut Command) -> &mut Command {
    command
        .args([
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--log-format", "text"])
        .env_remove("NO_COLOR")
        .env_remove("SLIDEGATE_LOG_FORMAT")
        .env("RUST_LOG", "info")
}

#[test]
fn text_logs_written_to_a_file_carry_no_escape_codes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("stderr.log");
    let mut child = serve(&mut Command::new(binary()))
        .stdout(Stdio::null())
        .stderr(File::create(&path).expect("the log file"))
        .spawn()
        .expect("the slidegate binary starts");
    let start = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&path).expect("the log file is readable");
        if text.contains(SERVING) || start.elapsed() > PROCESS_DEADLINE {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(text.contains(SERVING), "never served: {text:?}");
    assert!(!text.contains(ESC), "escape codes in a log file: {text:?}");
    assert!(text.contains("http_addr=127.0.0.1:"), "{text:?}");
}

/// The server's output on a terminal (a pseudo-terminal from `script(1)`)
/// up to the line that says it serves, or `None` (with the reason
/// printed) where `script` is missing outside CI.
fn on_a_terminal(no_color: Option<&str>) -> Option<String> {
    if !support::tool("script", &["--version"], "bsdutils") {
        return None;
    }
    let mut server = Command::new(binary());
    serve(&mut server);
    let line = std::iter::once(server.get_program())
        .chain(server.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = Command::new("script");
    script
        .args(["--quiet", "--flush", "--return", "--command"])
        .arg(format!("exec {line}"))
        .arg("/dev/null")
        .env_remove("NO_COLOR")
        .env_remove("SLIDEGATE_LOG_FORMAT")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(value) = no_color {
        script.env("NO_COLOR", value);
    }
    let mut child = script.spawn().expect("script(1) starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut output = String::new();
    let start = Instant::now();
    while !output.contains(SERVING) && start.elapsed() < PROCESS_DEADLINE {
        if let Ok(line) = received.recv_timeout(Duration::from_millis(100)) {
            output.push_str(&line);
            output.push('\n');
        }
    }
    // The terminal goes with script(1), and the server with its terminal.
    let _ = child.kill();
    let _ = child.wait();
    assert!(output.contains(SERVING), "never served: {output:?}");
    Some(output)
}

#[test]
fn text_logs_on_a_terminal_are_coloured() {
    if let Some(output) = on_a_terminal(None) {
        assert!(output.contains(ESC), "no colour on a terminal: {output:?}");
    }
}

#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    if let Some(output) = on_a_terminal(Some("1")) {
        assert!(!output.contains(ESC), "colour despite NO_COLOR: {output:?}");
    }
}

/// The `fields` of the first JSON log line whose message contains
/// `needle`, waiting up to 10 s for it.
fn log_fields(server: &Slidegate, needle: &str) -> Value {
    let start = Instant::now();
    loop {
        let found = server.logs().into_iter().find_map(|line| {
            let json: Value = serde_json::from_str(&line).ok()?;
            let fields = &json["fields"];
            fields["message"]
                .as_str()?
                .contains(needle)
                .then(|| fields.clone())
        });
        if let Some(fields) = found {
            return fields;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no log line with {needle:?}: {:?}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rules(domain: &str, unit: &str) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n"
    )
}

fn text(fields: &Value, name: &str) -> String {
    fields[name]
        .as_str()
        .unwrap_or_else(|| panic!("no field {name} in {fields}"))
        .to_owned()
}

/// One kind of reload at a time: each waits for its own log line before
/// the next file event.
#[test]
fn reload_log_lines_carry_paths_result_file_and_domains() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (api, web) = (dir.path().join("api.yaml"), dir.path().join("web.yaml"));
    std::fs::write(&api, rules("api", "second")).expect("written");
    std::fs::write(&web, rules("web", "second")).expect("written");
    let path = dir.path().to_str().expect("a UTF-8 path");
    let server = Slidegate::start(&["--config", path]);

    std::fs::write(&api, rules("api", "minute")).expect("written");
    let ok = log_fields(&server, "config reloaded");
    assert_eq!(text(&ok, "result"), "ok");
    assert!(text(&ok, "paths").contains(path), "{ok}");
    assert!(text(&ok, "domains").contains("api") && text(&ok, "domains").contains("web"));

    std::fs::write(&api, rules("api", "fortnight")).expect("written");
    let error = log_fields(&server, "a file is unreadable or bad");
    assert_eq!(text(&error, "result"), "error");
    assert!(text(&error, "paths").contains(path), "{error}");
    assert!(text(&error, "file").ends_with("api.yaml"), "{error}");
    assert!(error["line"].as_u64().is_some(), "no line number: {error}");
    assert!(error["column"].as_u64().is_some(), "no column: {error}");
    assert!(
        text(&error, "domains").contains("api"),
        "the domains in force: {error}"
    );

    std::fs::write(&api, rules("api", "second")).expect("written");
    std::fs::remove_file(&web).expect("removed");
    let refused = log_fields(&server, "it would remove domains in force");
    assert_eq!(text(&refused, "result"), "refused");
    assert!(text(&refused, "paths").contains(path), "{refused}");
    assert!(text(&refused, "removed").contains("web"), "{refused}");
    assert!(
        text(&refused, "domains").contains("web"),
        "still in force: {refused}"
    );
}

async fn acquire(server: &Slidegate) {
    let body = r#"{"key":"breaker","limit":1000000,"window_ms":1000}"#;
    let reply = request_to(
        server.http,
        Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        body.into(),
    )
    .await;
    assert!(reply.status.is_success(), "{reply:?}");
}

/// Asks until the log has a line with `needle` (the breaker needs
/// decisions to change state), then returns its fields.
async fn ask_until_logged(server: &Slidegate, needle: &str) -> Value {
    let start = Instant::now();
    while !server.logs().iter().any(|l| l.contains(needle)) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no log line with {needle:?}: {:?}",
            server.logs()
        );
        acquire(server).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log_fields(server, needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_breaker_transitions_log_node_and_state() {
    let mut redis = Redis::start();
    let url = redis.url();
    let server = Slidegate::start(&[
        "--store",
        &url,
        "--store-timeout-ms",
        "100",
        "--on-store-error",
        "allow",
    ]);
    acquire(&server).await;

    redis.kill();
    let open = ask_until_logged(&server, "circuit open").await;
    assert_eq!(text(&open, "node"), "store", "{open}");
    assert_eq!(text(&open, "state"), "open", "{open}");
    assert!(open["failures"].as_u64().is_some_and(|n| n >= 1), "{open}");

    redis.restart();
    let closed = ask_until_logged(&server, "circuit closed").await;
    assert_eq!(text(&closed, "node"), "store", "{closed}");
    assert_eq!(text(&closed, "state"), "closed", "{closed}");
}
