//! The built `slidegate serve` as a child process: started on free ports,
//! its JSON log collected, signalled, its memory read from `/proc`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");

/// The binary to run: `SLIDEGATE_BINARY` when set (a release build, for
/// the figures of the docs), otherwise the one cargo built for the tests.
fn binary() -> String {
    std::env::var("SLIDEGATE_BINARY").unwrap_or_else(|_| BINARY.to_owned())
}

/// How long the process may take to start or to stop.
pub const PROCESS_DEADLINE: Duration = Duration::from_secs(20);

/// A running `slidegate serve`, killed on drop if still alive.
pub struct Slidegate {
    child: Child,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    /// The Redis protocol port, when started with `--resp-addr`.
    pub resp: Option<SocketAddr>,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Slidegate {
    /// `slidegate serve ARGS` on free loopback ports, with JSON logs;
    /// returns once it logs that it serves.
    pub fn start(args: &[&str]) -> Slidegate {
        Slidegate::start_with_env(args, &[])
    }

    /// [`start`](Slidegate::start) with these environment variables set.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Slidegate {
        let mut child = Command::new(binary())
            .arg("serve")
            .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
            .args(args)
            .env("SLIDEGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the slidegate binary starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (addrs, serving) = std::sync::mpsc::channel();
        let sink = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) {
                    let fields = &json["fields"];
                    if let (Some(http), Some(grpc)) =
                        (fields["http_addr"].as_str(), fields["grpc_addr"].as_str())
                    {
                        let resp = fields["resp_addr"].as_str().map(str::to_owned);
                        let _ = addrs.send((http.to_owned(), grpc.to_owned(), resp));
                    }
                }
                sink.lock().expect("the log lock").push(line);
            }
        });
        let Ok((http, grpc, resp)) = serving.recv_timeout(PROCESS_DEADLINE) else {
            let _ = child.kill();
            panic!(
                "slidegate serve {args:?} never said it serves; logs: {:?}",
                logs.lock().expect("the log lock")
            );
        };
        Slidegate {
            child,
            http: http.parse().expect("an HTTP address"),
            grpc: grpc.parse().expect("a gRPC address"),
            resp: resp.map(|addr| addr.parse().expect("a RESP address")),
            logs,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`TERM`, `INT`, …) with `kill(1)`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -{name} failed");
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the process to exit, at most [`PROCESS_DEADLINE`].
    pub fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < PROCESS_DEADLINE,
                "still running; logs: {:?}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("the log lock").clone()
    }

    /// Log lines that show a panic (the panic hook writes them as text).
    pub fn panics(&self) -> Vec<String> {
        self.logs()
            .into_iter()
            .filter(|l| l.contains("panicked"))
            .collect()
    }

    /// Resident memory, in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }
}

impl Drop for Slidegate {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Resident memory of a process, in KiB, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("/proc/PID/status is readable (Linux)");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}
