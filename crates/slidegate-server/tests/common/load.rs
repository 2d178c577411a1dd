//! Paced load on a running server, over HTTP (`POST /v1/acquire`, one
//! keep-alive connection per worker) and gRPC (`ShouldRateLimit`, one
//! channel per worker), recording every answer with the client's send and
//! receive times; and what the fault tests compute from the records.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use slidegate_server::api::grpc::DEGRADED_METADATA;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A client gives up on one answer after this long (and records a failure).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The protocol of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    Grpc,
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200 / OK.
    Allowed { degraded: bool },
    /// 429 / OVER_LIMIT.
    Denied { degraded: bool },
    /// Anything else: another status, a transport error, no answer in time.
    Failed(String),
}

impl Answer {
    pub fn degraded(&self) -> bool {
        matches!(
            self,
            Answer::Allowed { degraded: true } | Answer::Denied { degraded: true }
        )
    }

    pub fn allowed(&self) -> bool {
        matches!(self, Answer::Allowed { .. })
    }
}

/// One request and its answer.
#[derive(Clone, Debug)]
pub struct Sample {
    pub proto: Proto,
    /// The counter it was charged to: `http:KEY` or `grpc:KEY`.
    pub counter: String,
    pub sent: Instant,
    pub done: Instant,
    pub answer: Answer,
}

impl Sample {
    pub fn latency(&self) -> Duration {
        self.done - self.sent
    }
}

/// What to send.
#[derive(Clone, Debug)]
pub struct Plan {
    pub http_workers: usize,
    pub grpc_workers: usize,
    /// Each worker sends one request per `pace` (fewer when answers are slower).
    pub pace: Duration,
    /// Keys of the HTTP workers, `{prefix}0` … ; they go round them.
    pub http_keys: usize,
    /// Keys of the gRPC workers, likewise.
    pub grpc_keys: usize,
    pub prefix: String,
    /// The HTTP rule; gRPC uses the config's rule for domain `faults`,
    /// descriptor `k`.
    pub limit: u64,
    pub window: Duration,
}

/// Load running on one server until [`Load::stop`].
pub struct Load {
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// Starts the workers against the server's HTTP and gRPC listeners.
    pub fn start(http: SocketAddr, grpc: SocketAddr, plan: &Plan) -> Load {
        let (stop, stopped) = watch::channel(false);
        let mut workers = Vec::new();
        for w in 0..plan.http_workers {
            workers.push(tokio::spawn(http_worker(
                http,
                plan.clone(),
                w,
                stopped.clone(),
            )));
        }
        for w in 0..plan.grpc_workers {
            workers.push(tokio::spawn(grpc_worker(
                grpc,
                plan.clone(),
                w,
                stopped.clone(),
            )));
        }
        Load { stop, workers }
    }

    /// Stops sending and returns every sample, oldest first.
    pub async fn stop(self) -> Vec<Sample> {
        let _ = self.stop.send(true);
        let mut samples = Vec::new();
        for worker in self.workers {
            samples.extend(worker.await.expect("a load worker panicked"));
        }
        samples.sort_by_key(|s| s.sent);
        samples
    }
}

fn key(plan: &Plan, keys: usize, worker: usize, n: usize) -> String {
    format!("{}{}", plan.prefix, (worker + n) % keys.max(1))
}

/// A ticker at the plan's pace that ends when the load is stopped.
struct Pace {
    tick: tokio::time::Interval,
    stopped: watch::Receiver<bool>,
}

impl Pace {
    fn new(plan: &Plan, stopped: watch::Receiver<bool>) -> Pace {
        let mut tick = tokio::time::interval(plan.pace);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Pace { tick, stopped }
    }

    /// Waits for the next tick; false once the load is stopped.
    async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => {}
            _ = self.stopped.changed() => {}
        }
        !*self.stopped.borrow()
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect_http(addr: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn http_worker(
    addr: SocketAddr,
    plan: Plan,
    worker: usize,
    stopped: watch::Receiver<bool>,
) -> Vec<Sample> {
    let mut pace = Pace::new(&plan, stopped);
    let mut sender: Option<Sender> = None;
    let mut samples = Vec::new();
    let window_ms = plan.window.as_millis();
    for n in 0.. {
        if !pace.next().await {
            break;
        }
        let key = key(&plan, plan.http_keys, worker, n);
        let body = format!(
            r#"{{"key":"{key}","limit":{},"window_ms":{window_ms}}}"#,
            plan.limit
        );
        let sent = Instant::now();
        let answer =
            match tokio::time::timeout(CLIENT_TIMEOUT, acquire(&mut sender, addr, body)).await {
                Ok(answer) => answer,
                Err(_) => {
                    sender = None;
                    Answer::Failed("no answer in time".into())
                }
            };
        samples.push(Sample {
            proto: Proto::Http,
            counter: format!("http:{key}"),
            sent,
            done: Instant::now(),
            answer,
        });
    }
    samples
}

async fn acquire(sender: &mut Option<Sender>, addr: SocketAddr, body: String) -> Answer {
    if sender.as_ref().is_none_or(|s| s.is_closed()) {
        match connect_http(addr).await {
            Ok(s) => *sender = Some(s),
            Err(e) => return Answer::Failed(format!("connect: {e}")),
        }
    }
    let Some(s) = sender.as_mut() else {
        unreachable!("connected above")
    };
    let request = Request::post("/v1/acquire")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid request");
    let response = match s.send_request(request).await {
        Ok(response) => response,
        Err(e) => {
            *sender = None;
            return Answer::Failed(format!("send: {e}"));
        }
    };
    let status = response.status();
    let body = match response.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            *sender = None;
            return Answer::Failed(format!("body: {e}"));
        }
    };
    let json: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(json) => json,
        Err(_) => {
            return Answer::Failed(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
    };
    let degraded = json["degraded"] == true;
    match (status.as_u16(), &json["allowed"]) {
        (200, serde_json::Value::Bool(true)) => Answer::Allowed { degraded },
        (429, serde_json::Value::Bool(false)) => Answer::Denied { degraded },
        _ => Answer::Failed(format!("{status}: {json}")),
    }
}

async fn grpc_worker(
    addr: SocketAddr,
    plan: Plan,
    worker: usize,
    stopped: watch::Receiver<bool>,
) -> Vec<Sample> {
    let mut pace = Pace::new(&plan, stopped);
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .tcp_nodelay(true)
        .connect_lazy();
    let mut client = RateLimitServiceClient::new(channel);
    let mut samples = Vec::new();
    for n in 0.. {
        if !pace.next().await {
            break;
        }
        let key = key(&plan, plan.grpc_keys, worker, n);
        let request = RateLimitRequest {
            domain: "faults".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: key.clone(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 1,
        };
        let sent = Instant::now();
        let answer =
            match tokio::time::timeout(CLIENT_TIMEOUT, client.should_rate_limit(request)).await {
                Err(_) => Answer::Failed("no answer in time".into()),
                Ok(Err(status)) => Answer::Failed(format!("gRPC {status:?}")),
                Ok(Ok(response)) => {
                    let degraded = response
                        .metadata()
                        .get(DEGRADED_METADATA)
                        .is_some_and(|v| v == "true");
                    match response.into_inner().overall_code {
                        1 => Answer::Allowed { degraded },
                        2 => Answer::Denied { degraded },
                        other => Answer::Failed(format!("overall code {other}")),
                    }
                }
            };
        samples.push(Sample {
            proto: Proto::Grpc,
            counter: format!("grpc:{key}"),
            sent,
            done: Instant::now(),
            answer,
        });
    }
    samples
}

/// p50, p99 and the largest of some latencies.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latencies {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Latencies {
    pub fn of<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Latencies {
        let mut all: Vec<Duration> = samples.into_iter().map(Sample::latency).collect();
        all.sort_unstable();
        let at = |q: f64| {
            all.get(((all.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        Latencies {
            count: all.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: all.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} answers, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.count,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3
        )
    }
}

/// The most admissions among `samples` that provably fell into one window
/// of length `window`: sent no earlier than some admission was sent, and
/// answered no later than `window` after it. (The store's admission time
/// lies between a request's send and its answer, so these all count
/// together in some window; a count above the limit proves over-admission.)
pub fn most_in_one_window<'a>(
    samples: impl IntoIterator<Item = &'a Sample>,
    window: Duration,
) -> usize {
    let admitted: Vec<&Sample> = samples.into_iter().filter(|s| s.answer.allowed()).collect();
    admitted
        .iter()
        .map(|first| {
            admitted
                .iter()
                .filter(|s| s.sent >= first.sent && s.done <= first.sent + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Notices when this machine stops running the tests' threads: a thread
/// that asks to wake every 5 ms and records each wake-up that came late.
/// The time an answer spent in such a stall says nothing about the server
/// (on a busy 2-core machine, every process stalls together): the fault
/// checks take it off the answer's time (see `outage`).
pub struct StallWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Stall>>>,
    thread: std::thread::JoinHandle<()>,
}

/// The machine ran nothing of ours between `from` and `to`.
#[derive(Clone, Copy, Debug)]
pub struct Stall {
    pub from: Instant,
    pub to: Instant,
}

impl Stall {
    pub fn length(&self) -> Duration {
        self.to - self.from
    }
}

/// Wake-ups later than this count as a stall.
const STALL: Duration = Duration::from_millis(30);
/// How long the watch sleeps between two wake-ups.
const WATCH_SLEEP: Duration = Duration::from_millis(5);

impl StallWatch {
    pub fn start() -> StallWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stopped, sink) = (Arc::clone(&stop), Arc::clone(&seen));
        let thread = std::thread::spawn(move || {
            let mut last = Instant::now();
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(WATCH_SLEEP);
                let now = Instant::now();
                if now - last > STALL {
                    sink.lock().expect("the stall list").push(Stall {
                        from: last,
                        to: now,
                    });
                }
                last = now;
            }
        });
        StallWatch { stop, seen, thread }
    }

    /// The stalls seen so far.
    pub fn so_far(&self) -> Stalls {
        Stalls(self.seen.lock().expect("the stall list").clone())
    }

    pub fn stop(self) -> Stalls {
        self.stop.store(true, Ordering::Relaxed);
        let StallWatch { seen, thread, .. } = self;
        thread.join().expect("the stall watch");
        Stalls(seen.lock().expect("the stall list").clone())
    }
}

/// The stalls seen during a test.
#[derive(Clone, Debug, Default)]
pub struct Stalls(pub Vec<Stall>);

impl Stalls {
    /// True when a stall of at least `least` overlaps `from..to`, or
    /// ended no more than `after` before `from`.
    pub fn overlap(&self, from: Instant, to: Instant, least: Duration, after: Duration) -> bool {
        self.0
            .iter()
            .any(|s| s.length() >= least && s.from < to && s.to + after > from)
    }

    pub fn longest(&self) -> Duration {
        self.0.iter().map(Stall::length).max().unwrap_or_default()
    }

    /// How long the machine stood still between `from` and `to`: the
    /// stalls' overlap with that span, less the watch's own 5 ms sleep
    /// each.
    pub fn within(&self, from: Instant, to: Instant) -> Duration {
        self.0
            .iter()
            .map(|s| {
                let (start, end) = ((s.from + WATCH_SLEEP).max(from), s.to.min(to));
                end.saturating_duration_since(start)
            })
            .sum()
    }
}
