//! The load client of `scripts/bench-wait.sh`: how late `slidegate serve`
//! answers a `POST /v1/acquire` that waits for its turn (`max_wait_ms`).
//!
//! `WAITERS` requests on one key, each on a connection of its own (all
//! opened first), are sent at once, or `WAIT_RATE` a second (steadily, as
//! clients arrive: the waits grow while nothing queues in front of the
//! store). Each is timed from its send to the
//! arrival of its 200, less the `waited_ms` the answer reports: the time
//! the reservation said it would pass. `waited_ms` is the wait rounded up
//! to a millisecond, so a figure can be low by up to 1 ms (and below 0).
//!
//! ```sh
//! WAIT_TARGET=http://127.0.0.1:8080 cargo bench -p slidegate-server --bench wait_http
//! ```
//! Environment: `WAIT_TARGET` (the server, required), `WAIT_KEY` (default
//! `wait`: use a new key per run), `WAITERS` (default 2000; the server's
//! `--max-connections` must allow them), `WAIT_LIMIT` and `WAIT_WINDOW_MS`
//! (default 500 per 1000 ms), `WAIT_MAX_MS` (default 5000), `WAIT_RATE`
//! (requests a second, default 0: all at once). Prints one
//! JSON line: lateness p50, p99, min and max in µs over the requests
//! answered 200, and how many were answered 200, 429, degraded, or failed
//! (`failures`: how many for each reason, a status code or what broke).

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request that takes longer than this counts as failed (the longest
/// wait is 5 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What became of one request.
enum Outcome {
    /// Answered 200: its lateness over the reserved time, in µs.
    Passed {
        late_us: i64,
        degraded: bool,
    },
    Refused,
    /// No answer, or not one of the above: why.
    Failed(&'static str),
}

fn main() {
    let Ok(target) = std::env::var("WAIT_TARGET") else {
        eprintln!("wait_http: set WAIT_TARGET to the server (http://127.0.0.1:PORT)");
        std::process::exit(2);
    };
    let addr = target
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let waiters: usize = env_or("WAITERS", 2000);
    let body = serde_json::json!({
        "key": env_or("WAIT_KEY", "wait".to_owned()),
        "limit": env_or::<u64>("WAIT_LIMIT", 500),
        "window_ms": env_or::<u64>("WAIT_WINDOW_MS", 1000),
        "max_wait_ms": env_or::<u64>("WAIT_MAX_MS", 5000),
    })
    .to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let rate: f64 = env_or("WAIT_RATE", 0.0);
    let outcomes = runtime.block_on(run(&addr, waiters, rate, Bytes::from(body)));
    println!("{}", report(&outcomes));
}

async fn run(addr: &str, waiters: usize, rate: f64, body: Bytes) -> Vec<Outcome> {
    let mut senders = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        senders.push(connect(addr).await);
    }
    let start = tokio::time::Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, sender)| {
            let body = body.clone();
            let send_at = if rate > 0.0 {
                start + Duration::from_secs_f64(i as f64 / rate)
            } else {
                start
            };
            tokio::spawn(async move {
                tokio::time::sleep_until(send_at).await;
                let Some(sender) = sender else {
                    return Outcome::Failed("connect");
                };
                tokio::time::timeout(REQUEST_TIMEOUT, acquire(sender, body))
                    .await
                    .unwrap_or(Outcome::Failed("timeout"))
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(waiters);
    for task in tasks {
        outcomes.push(task.await.unwrap_or(Outcome::Failed("task")));
    }
    outcomes
}

async fn connect(addr: &str) -> Option<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, connection) = handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(connection);
    Some(sender)
}

async fn acquire(mut sender: SendRequest<Full<Bytes>>, body: Bytes) -> Outcome {
    if sender.ready().await.is_err() {
        return Outcome::Failed("connection closed");
    }
    let Ok(request) = Request::post("/v1/acquire")
        .header("host", "bench")
        .header("content-type", "application/json")
        .body(Full::new(body))
    else {
        return Outcome::Failed("request");
    };
    let sent = Instant::now();
    let Ok(response) = sender.send_request(request).await else {
        return Outcome::Failed("no response");
    };
    let arrived = sent.elapsed();
    let status = response.status();
    let Ok(body) = response.into_body().collect().await else {
        return Outcome::Failed("body");
    };
    match status.as_u16() {
        200 => {
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body.to_bytes()) else {
                return Outcome::Failed("not JSON");
            };
            let Some(waited_ms) = json["waited_ms"].as_u64() else {
                return Outcome::Failed("no waited_ms");
            };
            let late_us = arrived.as_micros() as i64 - (waited_ms * 1000) as i64;
            Outcome::Passed {
                late_us,
                degraded: json["degraded"].as_bool() == Some(true),
            }
        }
        429 => Outcome::Refused,
        other => Outcome::Failed(status_name(other)),
    }
}

/// A name for a status other than 200 and 429 (a few distinct ones per
/// run: leaking them is fine).
fn status_name(status: u16) -> &'static str {
    Box::leak(status.to_string().into_boxed_str())
}

fn report(outcomes: &[Outcome]) -> String {
    let mut late: Vec<i64> = Vec::new();
    let (mut refused, mut degraded) = (0, 0);
    let mut failed: std::collections::BTreeMap<&str, usize> = Default::default();
    for outcome in outcomes {
        match outcome {
            Outcome::Passed {
                late_us,
                degraded: d,
            } => {
                late.push(*late_us);
                degraded += usize::from(*d);
            }
            Outcome::Refused => refused += 1,
            Outcome::Failed(why) => *failed.entry(why).or_default() += 1,
        }
    }
    late.sort_unstable();
    let pick = |q: f64| {
        late.get(((late.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    format!(
        r#"{{"passed":{},"refused":{refused},"degraded":{degraded},"failed":{},"p50_us":{},"p99_us":{},"min_us":{},"max_us":{},"failures":{}}}"#,
        late.len(),
        failed.values().sum::<usize>(),
        pick(0.5),
        pick(0.99),
        late.first().copied().unwrap_or(0),
        late.last().copied().unwrap_or(0),
        serde_json::json!(failed),
    )
}
