//! The Redis protocol port of the built `slidegate serve --resp-addr`,
//! with real clients: `redis-cli` (and `--pipe`), redis-py (PyPI) and
//! ioredis (npm), each taking a limit exactly, on the memory store and on
//! one Redis shared by two servers; and the protocol itself over a raw
//! socket: pipelining, errors that keep or close the connection, the
//! bounds, AUTH, RESP3.
//!
//! `scripts/test.sh` installs redis-py into a virtualenv and ioredis into
//! a directory of its own (`$SLIDEGATE_TEST_CLIENTS`, by default
//! `target/test-clients`); without them a test is skipped and says so,
//! and under `CI=true` it fails.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::redis::Redis;
use process::Slidegate;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "resp-test-token";

/// The servers of a test: one on the memory store, or two sharing a
/// redis-server (kept alive with them).
struct Servers {
    servers: Vec<Slidegate>,
    _redis: Option<Redis>,
}

impl Servers {
    fn memory(extra: &[&str]) -> Servers {
        Servers {
            servers: vec![start(&["--store", "memory"], extra)],
            _redis: None,
        }
    }

    fn shared_redis() -> Servers {
        let redis = Redis::start();
        let url = redis.url();
        Servers {
            // The count is exact only if Redis decides every request: a
            // generous deadline for a loaded machine, and a timeout denied
            // rather than answered by a server's own memory.
            servers: (0..2)
                .map(|_| {
                    start(
                        &["--store", &url],
                        &["--store-timeout-ms", "2000", "--on-store-error", "deny"],
                    )
                })
                .collect(),
            _redis: Some(redis),
        }
    }

    fn ports(&self) -> Vec<u16> {
        self.servers
            .iter()
            .map(|s| s.resp.expect("a RESP port").port())
            .collect()
    }

    fn ports_arg(&self) -> String {
        let ports: Vec<String> = self.ports().iter().map(u16::to_string).collect();
        ports.join(",")
    }

    fn addr(&self) -> SocketAddr {
        self.servers[0].resp.expect("a RESP port")
    }
}

fn start(store: &[&str], extra: &[&str]) -> Slidegate {
    let mut args = vec!["--resp-addr", "127.0.0.1:0", "--admin-token", TOKEN];
    args.extend_from_slice(store);
    args.extend_from_slice(extra);
    Slidegate::start(&args)
}

/// Where scripts/test.sh installs redis-py and ioredis.
fn clients_dir() -> PathBuf {
    std::env::var_os("SLIDEGATE_TEST_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-clients")
        })
}

/// `path` when it exists; otherwise `None` (the test is skipped), or a
/// failure under `CI=true`.
fn tool(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} is missing at {}: scripts/test.sh installs it",
        path.display()
    );
    eprintln!(
        "skipped: {what} is not installed ({}); run scripts/test.sh",
        path.display()
    );
    None
}

/// Checks the replies of `tests/clients/limit.*`: SG.ACQUIRE 3 per 60 s
/// and CL.THROTTLE 2 3 60, four times each.
fn check_limit_replies(out: &serde_json::Value) {
    let sg = out["sg"].as_array().expect("sg replies");
    for (n, reply) in sg.iter().take(3).enumerate() {
        let remaining = 2 - n as i64;
        assert_eq!(reply[0], 1, "#{n}: {out}");
        assert_eq!(
            (reply[1].as_i64(), reply[2].as_i64()),
            (Some(3), Some(remaining)),
            "#{n}: {out}"
        );
        assert_eq!(reply[3], 0, "allowed: retry_after_ms 0: {out}");
    }
    let denied = &sg[3];
    assert_eq!(denied[0], 0, "the 4th is denied: {out}");
    assert_eq!(denied[2], 0, "{out}");
    let retry = denied[3].as_i64().unwrap();
    assert!(
        (50_000..=60_000).contains(&retry),
        "the 4th waits until the 1st leaves the 60 s window: {retry} ms"
    );
    let cl = out["cl"].as_array().expect("cl replies");
    for (n, reply) in cl.iter().take(3).enumerate() {
        let remaining = 2 - n as i64;
        assert_eq!(
            reply
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect::<Vec<_>>(),
            [0, 3, remaining, -1, 20 * (n as i64 + 1)],
            "#{n}: {out}"
        );
    }
    // 3 per 60 s, a burst of 3: the next comes one interval (20 s) after
    // the 3rd, and the bucket is full again 60 s on.
    assert_eq!(
        cl[3]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3, 0, 20, 60],
        "{out}"
    );
    assert!(
        out["unknown"].as_str().unwrap().contains("unknown command"),
        "{out}"
    );
}

fn run_json(mut command: Command) -> serde_json::Value {
    let output = command.output().expect("the client runs");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

fn redis_py(servers: &Servers) {
    let Some(python) = tool(clients_dir().join("venv/bin/python"), "redis-py") else {
        return;
    };
    let mut command = Command::new(python);
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/limit.py"
        ))
        .args([&servers.ports_arg(), "py"]);
    let out = run_json(command);
    check_limit_replies(&out);
    assert_eq!(out["after_error"], true, "{out}");
}

fn ioredis(servers: &Servers) {
    let dir = clients_dir();
    let Some(_) = tool(dir.join("node_modules/ioredis"), "ioredis") else {
        return;
    };
    let mut command = Command::new("node");
    command
        .env("NODE_PATH", dir.join("node_modules"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/limit.js"
        ))
        .args([&servers.ports_arg(), "js"]);
    let out = run_json(command);
    check_limit_replies(&out);
    assert_eq!(out["after_error"], "PONG", "{out}");
}

/// redis-cli, one command per run, to the servers in turn.
fn redis_cli(servers: &Servers) {
    let ports = servers.ports();
    let cli = |n: usize, args: &[&str]| -> serde_json::Value {
        let output = Command::new("redis-cli")
            .args(["-p", &ports[n % ports.len()].to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs (Debian: apt-get install redis-tools)");
        assert!(output.status.success(), "{output:?}");
        let numbers: Vec<i64> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.trim().parse().expect("integer replies"))
            .collect();
        serde_json::json!(numbers)
    };
    let sg: Vec<_> = (0..4)
        .map(|n| cli(n, &["SG.ACQUIRE", "cli:sg", "3", "60000"]))
        .collect();
    let cl: Vec<_> = (0..4)
        .map(|n| cli(n, &["CL.THROTTLE", "cli:cl", "2", "3", "60"]))
        .collect();
    let unknown = Command::new("redis-cli")
        .args(["-p", &ports[0].to_string(), "NO.SUCH.COMMAND"])
        .output()
        .unwrap();
    let out = serde_json::json!({
        "sg": sg,
        "cl": cl,
        "unknown": String::from_utf8_lossy(&unknown.stdout),
    });
    check_limit_replies(&out);
}

#[test]
fn redis_cli_takes_a_limit_exactly_on_memory_and_on_a_shared_redis() {
    redis_cli(&Servers::memory(&[]));
    redis_cli(&Servers::shared_redis());
}

#[test]
fn redis_py_takes_a_limit_exactly_on_memory_and_on_a_shared_redis() {
    redis_py(&Servers::memory(&[]));
    redis_py(&Servers::shared_redis());
}

#[test]
fn ioredis_takes_a_limit_exactly_on_memory_and_on_a_shared_redis() {
    ioredis(&Servers::memory(&[]));
    ioredis(&Servers::shared_redis());
}

#[test]
fn redis_cli_pipe_sends_a_whole_pipeline() {
    let servers = Servers::memory(&[]);
    let commands: String = (0..1000)
        .map(|_| "*4\r\n$10\r\nSG.ACQUIRE\r\n$4\r\npipe\r\n$3\r\n600\r\n$5\r\n60000\r\n")
        .collect();
    let mut child = Command::new("redis-cli")
        .args(["-p", &servers.ports()[0].to_string(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli runs");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), commands.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("errors: 0, replies: 1000"), "{text}");
    let peek = Command::new("redis-cli")
        .args([
            "-p",
            &servers.ports()[0].to_string(),
            "SG.PEEK",
            "pipe",
            "600",
            "60000",
        ])
        .output()
        .unwrap();
    let numbers: Vec<&str> = std::str::from_utf8(&peek.stdout).unwrap().lines().collect();
    assert_eq!(
        &numbers[..3],
        ["0", "600", "0"],
        "600 admitted of 1000, none left"
    );
}

/// Writes `bytes` and reads until `expected` bytes came or the server
/// closed; returns what came and whether it closed.
async fn exchange(stream: &mut TcpStream, bytes: &[u8], expected: usize) -> (Vec<u8>, bool) {
    stream.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Err(_) => panic!(
                "no reply in time; so far {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (got, false)
}

/// True once the server closed `stream` (within 10 s).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Reads until what came ends with `suffix` (within 10 s).
async fn read_until(stream: &mut TcpStream, suffix: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    while !got.ends_with(suffix) {
        let (more, closed) = exchange(stream, b"", 1).await;
        got.extend(more);
        assert!(
            !closed,
            "closed before {:?}: {:?}",
            String::from_utf8_lossy(suffix),
            String::from_utf8_lossy(&got)
        );
    }
    got
}

#[tokio::test]
async fn a_pipeline_is_answered_in_order_and_an_unknown_command_keeps_the_connection() {
    let servers = Servers::memory(&[]);
    let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
    let pipeline = b"PING\r\n\
        *4\r\n$10\r\nSG.ACQUIRE\r\n$1\r\nk\r\n$1\r\n1\r\n$5\r\n60000\r\n\
        *4\r\n$10\r\nsg.acquire\r\n$1\r\nk\r\n$1\r\n1\r\n$5\r\n60000\r\n\
        FOO bar\r\n\
        *2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
    stream.write_all(pipeline).await.unwrap();
    let expected_end =
        b"-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n$2\r\nhi\r\n";
    let got = read_until(&mut stream, expected_end).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    let lines: Vec<&str> = text.split("\r\n").collect();
    let number = |i: usize| -> u64 { lines[i].trim_start_matches(':').parse().unwrap() };
    // PING; the first acquire allowed (1 of 1, none left); the second
    // denied with a retry just under the window; the error; ECHO.
    assert_eq!(
        &lines[..6],
        ["+PONG", "*5", ":1", ":1", ":0", ":0"],
        "{text:?}"
    );
    assert!((59_999..=60_001).contains(&number(6)), "{text:?}");
    assert_eq!(&lines[7..11], ["*5", ":0", ":1", ":0"], "{text:?}");
    assert!((59_000..=60_000).contains(&number(11)), "{text:?}");
    assert!((59_000..=60_001).contains(&number(12)), "{text:?}");
    assert_eq!(lines.len(), 17, "{text:?}");
    let (pong, closed) = exchange(&mut stream, b"PING\r\n", 7).await;
    assert_eq!((pong.as_slice(), closed), (&b"+PONG\r\n"[..], false));
}

#[tokio::test]
async fn what_is_not_resp_or_beyond_the_bounds_closes_only_that_connection() {
    let servers = Servers::memory(&["--resp-max-args", "16", "--resp-max-command-bytes", "4096"]);
    let mut bystander = TcpStream::connect(servers.addr()).await.unwrap();
    let too_many_args = b"*17\r\n".to_vec();
    let too_large = b"*2\r\n$4\r\nECHO\r\n$5000\r\n".to_vec();
    let nested = b"*1\r\n*1\r\n*1\r\n".repeat(1000);
    let large_inline = vec![b'a'; 5000];
    for (what, bytes) in [
        ("not a bulk string", b"*1\r\n:1\r\n".to_vec()),
        ("nested arrays", nested),
        ("more arguments than --resp-max-args", too_many_args),
        ("a bulk string past --resp-max-command-bytes", too_large),
        ("an inline line past --resp-max-command-bytes", large_inline),
    ] {
        let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
        let (got, _) = exchange(&mut stream, &bytes, 20).await;
        assert!(
            got.starts_with(b"-ERR Protocol error"),
            "{what}: {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            closed(&mut stream).await,
            "{what}: the connection is closed"
        );
        let (pong, was_closed) = exchange(&mut bystander, b"PING\r\n", 7).await;
        assert_eq!(
            (pong.as_slice(), was_closed),
            (&b"+PONG\r\n"[..], false),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_partial_command_is_closed_at_the_header_timeout_an_idle_one_is_not() {
    let servers = Servers::memory(&["--header-timeout", "1s", "--resp-idle-timeout", "30s"]);
    let mut idle = TcpStream::connect(servers.addr()).await.unwrap();
    let (pong, _) = exchange(&mut idle, b"PING\r\n", 7).await;
    assert_eq!(pong, b"+PONG\r\n");
    let mut partial = TcpStream::connect(servers.addr()).await.unwrap();
    let (pong, _) = exchange(&mut partial, b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nh", 7).await;
    assert_eq!(pong, b"+PONG\r\n");
    let started = Instant::now();
    assert!(
        closed(&mut partial).await,
        "the partial command's connection closes"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // The idle one (nothing begun) outlives the header timeout.
    let (pong, was_closed) = exchange(&mut idle, b"PING\r\n", 7).await;
    assert_eq!((pong.as_slice(), was_closed), (&b"+PONG\r\n"[..], false));
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_the_resp_idle_timeout() {
    let servers = Servers::memory(&["--resp-idle-timeout", "1s", "--idle-timeout", "60s"]);
    let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
    let (pong, _) = exchange(&mut stream, b"PING\r\n", 7).await;
    assert_eq!(pong, b"+PONG\r\n");
    let started = Instant::now();
    assert!(closed(&mut stream).await, "the idle connection closes");
    // Not before the timeout; the upper bound is `closed`'s 10 s, far
    // below the HTTP port's 60 s idle timeout it must not take.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn sg_reset_needs_the_admin_token() {
    let servers = Servers::memory(&[]);
    let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
    let acquire = b"*4\r\n$10\r\nSG.ACQUIRE\r\n$1\r\nr\r\n$1\r\n1\r\n$5\r\n60000\r\n";
    let (got, _) = exchange(&mut stream, acquire, 10).await;
    assert!(got.starts_with(b"*5\r\n:1\r\n"), "{got:?}");
    let reset = b"*2\r\n$8\r\nSG.RESET\r\n$1\r\nr\r\n";
    let noauth = b"-NOAUTH Authentication required.\r\n";
    let (got, _) = exchange(&mut stream, reset, noauth.len()).await;
    assert_eq!(got, noauth);
    let wrong = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let (got, _) = exchange(&mut stream, b"AUTH nope\r\n", wrong.len()).await;
    assert_eq!(got, wrong);
    let (got, _) = exchange(&mut stream, reset, noauth.len()).await;
    assert_eq!(got, noauth, "a wrong token grants nothing");
    let auth = format!("AUTH default {TOKEN}\r\n");
    let (got, _) = exchange(&mut stream, auth.as_bytes(), 5).await;
    assert_eq!(got, b"+OK\r\n");
    let (got, _) = exchange(&mut stream, reset, 5).await;
    assert_eq!(got, b"+OK\r\n");
    let (got, _) = exchange(&mut stream, acquire, 10).await;
    assert!(
        got.starts_with(b"*5\r\n:1\r\n"),
        "the key was forgotten: {got:?}"
    );
}

#[tokio::test]
async fn hello_3_speaks_resp3() {
    let servers = Servers::memory(&[]);
    let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
    let (got, _) = exchange(&mut stream, b"CLIENT GETNAME\r\n", 5).await;
    assert_eq!(got, b"$-1\r\n");
    stream.write_all(b"HELLO 2 SETNAME app\r\n").await.unwrap();
    let hello = read_until(&mut stream, b"$7\r\nmodules\r\n*0\r\n").await;
    assert!(
        hello.starts_with(b"*14\r\n"),
        "RESP2 writes the map flat: {hello:?}"
    );
    let (got, _) = exchange(&mut stream, b"CLIENT GETNAME\r\n", 9).await;
    assert_eq!(got, b"$3\r\napp\r\n");
    let mut stream = TcpStream::connect(servers.addr()).await.unwrap();
    stream.write_all(b"HELLO 3\r\n").await.unwrap();
    let hello = read_until(&mut stream, b"$7\r\nmodules\r\n*0\r\n").await;
    assert!(hello.starts_with(b"%7\r\n"), "{hello:?}");
    let (got, _) = exchange(&mut stream, b"CLIENT GETNAME\r\n", 3).await;
    assert_eq!(got, b"_\r\n");
    let (got, _) = exchange(&mut stream, b"HELLO 4\r\n", 20).await;
    assert!(got.starts_with(b"-NOPROTO"), "{got:?}");
}
