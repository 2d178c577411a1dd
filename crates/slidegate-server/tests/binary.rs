//! The built `slidegate` binary: `serve` starts, answers, and stops
//! gracefully on SIGTERM and Ctrl-C; `check` prints the decision as JSON.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{Reply, parse_response};

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");
const DEADLINE: Duration = Duration::from_secs(15);

/// A running `slidegate serve`, killed on drop if still alive.
struct Server {
    child: Child,
    addr: String,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `slidegate serve` on a free port, configured through the
    /// environment, and waits for its "serving" log line to learn the port.
    fn start() -> Server {
        let mut child = Command::new(BINARY)
            .arg("serve")
            .env("SLIDEGATE_HTTP_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_GRPC_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_LOG_FORMAT", "json")
            .env("SLIDEGATE_STORE", "memory")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&logs);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(addr) = json["fields"]["http_addr"].as_str()
                {
                    let _ = addr_tx.send(addr.to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match addr_rx.recv_timeout(DEADLINE) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("no 'serving' log line; logs: {:?}", logs.lock().unwrap());
            }
        };
        Server { child, addr, logs }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "still running; logs: {:?}",
                self.logs.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream
    }

    fn logged(&self, text: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|l| l.contains(text))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_reply(stream: &mut TcpStream) -> Reply {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(reply) = parse_response(&buffer) {
            return reply;
        }
        let n = stream.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "closed early: {:?}",
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..n]);
    }
}

const BODY: &str = r#"{"key":"login:10.0.0.1","limit":100,"window_ms":60000}"#;

fn acquire_head(length: usize) -> String {
    format!(
        "POST /v1/acquire HTTP/1.1\r\nhost: slidegate\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    )
}

#[test]
fn serve_finishes_the_request_in_flight_on_sigterm_then_exits_0() {
    let mut server = Server::start();
    let mut stream = server.connect();

    // A first request on the connection proves the server serves.
    stream
        .write_all(format!("{}{BODY}", acquire_head(BODY.len())).as_bytes())
        .unwrap();
    let first = read_reply(&mut stream);
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["remaining"], 99);

    // A second request, half sent: it is in flight when SIGTERM arrives.
    let (start, rest) = BODY.split_at(BODY.len() / 2);
    stream
        .write_all(format!("{}{start}", acquire_head(BODY.len())).as_bytes())
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    server.signal("TERM");
    thread::sleep(Duration::from_millis(300));
    assert!(
        server.is_running(),
        "exited with a request in flight; logs: {:?}",
        server.logs.lock().unwrap()
    );

    // New connections are refused or closed while it drains.
    let late = TcpStream::connect(&server.addr).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")?;
        let mut buf = [0u8; 64];
        s.read(&mut buf)
    });
    assert!(
        !matches!(late, Ok(n) if n > 0),
        "a new connection was served during shutdown"
    );

    stream.write_all(rest.as_bytes()).unwrap();
    let second = read_reply(&mut stream);
    assert_eq!(second.status, 200);
    assert_eq!(second.json()["remaining"], 98);

    let status = server.wait();
    assert!(status.success(), "{status:?}");
    assert!(server.logged("SIGTERM"));
    assert!(server.logged("slidegate stopped"));
}

#[test]
fn serve_exits_0_on_ctrl_c() {
    let mut server = Server::start();
    let mut stream = server.connect();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n")
        .unwrap();
    assert_eq!(read_reply(&mut stream).status, 200);
    server.signal("INT");
    let status = server.wait();
    assert!(status.success(), "{status:?}");
    assert!(server.logged("Ctrl-C"));
}

#[test]
fn serve_refuses_an_unknown_store_with_a_clear_message() {
    let output = Command::new(BINARY)
        .args([
            "serve",
            "--store",
            "postgres://db",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown store"), "{stderr}");
}

#[test]
fn check_prints_the_acquire_json_and_exits_0() {
    let output = Command::new(BINARY)
        .args(["check", "--key", "login:10.0.0.1", "--rate", "100/1m"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60001,"retry_after_ms":0})
    );
}

#[test]
fn check_decides_several_rates_and_a_cost_together() {
    let output = Command::new(BINARY)
        .args([
            "check",
            "--key",
            "k",
            "--rate",
            "10/s",
            "--rate",
            "1000/1h",
            "--cost",
            "4",
            "--algorithm",
            "gcra",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["allowed"], true);
    assert_eq!(json["limit"], 10);
    assert_eq!(json["remaining"], 6);
}

#[test]
fn check_exits_non_zero_with_a_message_on_bad_input() {
    let cases: [(&[&str], &str); 4] = [
        (&["--key", "k", "--rate", "0/1s"], "invalid rate"),
        (&["--key", "", "--rate", "10/s"], "invalid key"),
        (
            &["--key", "k", "--rate", "2/s", "--cost", "3"],
            "exceeds the limit",
        ),
        (
            &["--key", "k", "--rate", "2/s", "--algorithm", "leaky"],
            "unknown algorithm",
        ),
    ];
    for (args, message) in cases {
        let output = Command::new(BINARY)
            .arg("check")
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(output.stdout.is_empty(), "{args:?} printed a decision");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
