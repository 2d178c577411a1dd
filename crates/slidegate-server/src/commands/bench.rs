//! `slidegate bench`: a load generator, against a store in-process or a
//! running server over HTTP or gRPC. It reports decisions per second, how
//! many were allowed and denied, and HDR latency percentiles.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as ProtoCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use slidegate::{Algorithm, Rate, Rule, Store};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::store::StoreOptions;

/// `--keys`' default.
pub const DEFAULT_KEYS: u64 = 1_000;
/// `--concurrency`'s default.
pub const DEFAULT_CONCURRENCY: usize = 64;
/// `--duration`'s default.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// The domain of the Envoy checks `bench` sends (descriptor `key=<key>`).
pub const BENCH_DOMAIN: &str = "bench";

/// `--rate`'s default: 100 per second.
pub fn default_rate() -> Rate {
    Rate::new(100, Duration::from_secs(1)).expect("100 per second is a valid rate")
}

/// What to measure (see `slidegate bench --help`).
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The store to drive in-process (ignored with a target).
    pub store: StoreOptions,
    /// A running server to drive instead: `http://host:port` or `grpc://host:port`.
    pub target: Option<String>,
    /// What to call on the target.
    pub op: Option<String>,
    /// Distinct keys, spread evenly over the requests.
    pub keys: u64,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// The rule of every decision.
    pub rate: Rate,
    /// The algorithm enforcing the rate.
    pub algorithm: Algorithm,
    /// A lockout of this long for the rule.
    pub block_for: Option<Duration>,
    /// The rule reports usage.
    pub report: bool,
    /// Print the result as one JSON object.
    pub json: bool,
}

/// The outcome of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Allowed (or, for health checks, served).
    Allowed,
    /// Allowed because no limit applied: the server's rules have none for
    /// the request (an Envoy check of a domain or descriptor not configured).
    Unlimited,
    /// Denied.
    Denied,
    /// Failed: error, timeout, unexpected status.
    Error,
}

/// The figures of one run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What was driven.
    pub subject: String,
    /// The operation.
    pub op: String,
    /// Distinct keys.
    pub keys: u64,
    /// Requests in flight.
    pub concurrency: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// Calls completed.
    pub requests: u64,
    /// Calls per second.
    pub per_second: f64,
    /// Allowed answers (those with no limit included).
    pub allowed: u64,
    /// Allowed answers to which no limit applied (Envoy checks only).
    pub unlimited: u64,
    /// Denied answers.
    pub denied: u64,
    /// Failed calls.
    pub errors: u64,
    /// Latency percentiles, microseconds.
    pub latency_us: Percentiles,
    /// What makes the figures mean less than they seem (no limit applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

/// Runs a bench as the arguments say and prints the report. `store` is
/// the store opened from `--store`, used when there is no `--target`.
pub async fn run<S>(args: BenchOptions, store: Option<S>) -> anyhow::Result<Report>
where
    S: Store + Clone + 'static,
{
    let rule = Rule::new(args.rate).with_algorithm(args.algorithm);
    let rule = if args.report { rule.reporting() } else { rule };
    let rule = match args.block_for {
        Some(block) => rule.block_for(block)?,
        None => rule,
    };
    let report = match args.target.as_deref() {
        None => {
            let Some(store) = store else {
                bail!("no store to drive: give --store or --target");
            };
            let op = args.op.clone().unwrap_or_else(|| "acquire".into());
            if op != "acquire" {
                bail!("against a store, --op can only be `acquire`");
            }
            let subject = format!("store {}", args.store.url);
            drive(&args, &subject, &op, move |key| {
                let store = store.clone();
                async move {
                    match store.acquire(&key, &[rule], 1).await {
                        Ok(d) if d.allowed() => Answer::Allowed,
                        Ok(_) => Answer::Denied,
                        Err(_) => Answer::Error,
                    }
                }
            })
            .await
        }
        Some(target) if target.starts_with("http://") => http(&args, target, rule).await?,
        Some(target) if target.starts_with("grpc://") => grpc(&args, target).await?,
        Some(other) => bail!("--target must start with http:// or grpc://, got {other:?}"),
    };
    if let Some(warning) = &report.warning {
        eprintln!("warning: {warning}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(report)
}

async fn http(args: &BenchOptions, target: &str, rule: Rule) -> anyhow::Result<Report> {
    let base = target.trim_end_matches('/').to_owned();
    let op = args.op.clone().unwrap_or_else(|| "acquire".into());
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.concurrency)
        .build(connector);
    let (method, path) = match op.as_str() {
        "acquire" | "acquire-key" => (http::Method::POST, "/v1/acquire"),
        "check" => (http::Method::POST, "/v1/check"),
        "healthz" => (http::Method::GET, "/healthz"),
        other => bail!("unknown HTTP --op {other:?} (acquire, acquire-key, check, healthz)"),
    };
    let uri = format!("{base}{path}");
    let window_ms = rule.window_micros().div_ceil(1_000);
    let limit = rule.limit();
    let algorithm = rule.algorithm().name();
    let mut options = String::new();
    if rule.reports() {
        options.push_str(r#","report":true"#);
    }
    if let Some(block) = rule.block() {
        options.push_str(&format!(r#","block_ms":{}"#, block.as_millis()));
    }
    let op_name = op.clone();
    Ok(drive(args, target, &op, move |key| {
        let client = client.clone();
        let body = match op_name.as_str() {
            "acquire" => format!(r#"{{"key":"{key}","limit":{limit},"window_ms":{window_ms},"algorithm":"{algorithm}"{options}}}"#),
            // The key alone: decided under the limit set for it at run time.
            "acquire-key" => format!(r#"{{"key":"{key}"}}"#),
            "check" => format!(r#"{{"domain":"{BENCH_DOMAIN}","descriptors":[{{"entries":[{{"key":"key","value":"{key}"}}]}}]}}"#),
            _ => String::new(),
        };
        let checking = op_name == "check";
        let request = http::Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)));
        async move {
            let Ok(request) = request else { return Answer::Error };
            match client.request(request).await {
                Ok(response) => {
                    let status = response.status();
                    let Ok(body) = response.into_body().collect().await else {
                        return Answer::Error;
                    };
                    match status.as_u16() {
                        // A check answer names its limit only where one applied.
                        200 if checking && !contains(&body.to_bytes(), b"\"currentLimit\"") => {
                            Answer::Unlimited
                        }
                        200 => Answer::Allowed,
                        429 => Answer::Denied,
                        _ => Answer::Error,
                    }
                }
                Err(_) => Answer::Error,
            }
        }
    })
    .await)
}

async fn grpc(args: &BenchOptions, target: &str) -> anyhow::Result<Report> {
    let endpoint = format!("http://{}", target.trim_start_matches("grpc://"));
    let op = args
        .op
        .clone()
        .unwrap_or_else(|| "should-rate-limit".into());
    if op != "should-rate-limit" && op != "health" {
        bail!("unknown gRPC --op {op:?} (should-rate-limit, health)");
    }
    // One connection per request in flight, as for HTTP.
    let mut channels = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let channel = Channel::from_shared(endpoint.clone())
            .context("bad --target")?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("cannot connect to {endpoint}"))?;
        channels.push(channel);
    }
    let next = Arc::new(AtomicU64::new(0));
    let op_name = op.clone();
    Ok(drive(args, target, &op, move |key| {
        let i = next.fetch_add(1, Ordering::Relaxed) as usize % channels.len();
        let channel = channels[i].clone();
        let health = op_name == "health";
        async move {
            if health {
                let mut client = HealthClient::new(channel);
                return match client
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                {
                    Ok(_) => Answer::Allowed,
                    Err(_) => Answer::Error,
                };
            }
            let mut client = RateLimitServiceClient::new(channel);
            let request = RateLimitRequest {
                domain: BENCH_DOMAIN.into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "key".into(),
                        value: key,
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 1,
            };
            match client.should_rate_limit(request).await {
                Ok(response) if response.get_ref().overall_code == ProtoCode::OverLimit as i32 => {
                    Answer::Denied
                }
                Ok(response)
                    if response
                        .get_ref()
                        .statuses
                        .iter()
                        .all(|s| s.current_limit.is_none()) =>
                {
                    Answer::Unlimited
                }
                Ok(_) => Answer::Allowed,
                Err(_) => Answer::Error,
            }
        }
    })
    .await)
}

/// Runs `call` from `concurrency` tasks for the duration.
async fn drive<C, Fut>(args: &BenchOptions, subject: &str, op: &str, call: C) -> Report
where
    C: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send,
{
    let call = Arc::new(call);
    let counts = Arc::new([const { AtomicU64::new(0) }; 4]);
    let started = Instant::now();
    let deadline = started + args.duration;
    let progress = progress_bar(args);
    let ticker = {
        let (progress, counts) = (progress.clone(), Arc::clone(&counts));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let done: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
                let elapsed = started.elapsed().as_secs_f64().max(1e-9);
                progress.set_position(started.elapsed().as_millis() as u64);
                progress.set_message(format!("{:.0} req/s", done as f64 / elapsed));
            }
        })
    };
    let keys = args.keys.max(1);
    let tasks: Vec<_> = (0..args.concurrency.max(1) as u64)
        .map(|task| {
            let (call, counts) = (Arc::clone(&call), Arc::clone(&counts));
            tokio::spawn(async move {
                let mut histogram = new_histogram();
                let mut i = task;
                while Instant::now() < deadline {
                    let key = format!("bench:{}", i % keys);
                    let begun = Instant::now();
                    let answer = call(key).await;
                    let micros = begun.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
                    let _ = histogram.record(micros.max(1));
                    let slot = match answer {
                        Answer::Allowed => 0,
                        Answer::Denied => 1,
                        Answer::Error => 2,
                        Answer::Unlimited => 3,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                    i += 7_919;
                    // Answers from a local cache complete at once: without
                    // this, tasks would loop without ever yielding and
                    // starve the I/O the other calls wait for.
                    tokio::task::coop::consume_budget().await;
                }
                histogram
            })
        })
        .collect();
    let mut histogram = new_histogram();
    for task in tasks {
        if let Ok(h) = task.await {
            let _ = histogram.add(&h);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    ticker.abort();
    progress.finish_and_clear();
    let [limited, denied, errors, unlimited] =
        [0, 1, 2, 3].map(|i| counts[i].load(Ordering::Relaxed));
    let allowed = limited + unlimited;
    let requests = allowed + denied + errors;
    Report {
        subject: subject.to_owned(),
        op: op.to_owned(),
        keys,
        concurrency: args.concurrency,
        seconds,
        requests,
        per_second: requests as f64 / seconds.max(1e-9),
        allowed,
        unlimited,
        denied,
        errors,
        warning: unlimited_warning(unlimited, requests),
        latency_us: Percentiles {
            p50: histogram.value_at_quantile(0.5),
            p90: histogram.value_at_quantile(0.9),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            mean: histogram.mean(),
        },
    }
}

/// The warning of a run in which some answers had no limit: the server
/// allowed them because its rules do not cover the request, so they
/// measure a lookup, not a limit.
fn unlimited_warning(unlimited: u64, requests: u64) -> Option<String> {
    (unlimited > 0).then(|| {
        format!(
            "{unlimited} of {requests} answers had no limit: the server's rules do not cover \
             domain `{BENCH_DOMAIN}`, descriptor `key=<key>` (add a rule for it to --config), \
             so nothing was limited"
        )
    })
}

/// True when `needle` is somewhere in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn new_histogram() -> Histogram<u64> {
    // 1 µs to 60 s, 2 significant figures (1%): one histogram per task,
    // small enough that hundreds of them stay in cache while they record.
    Histogram::new_with_bounds(1, 60_000_000, 2).expect("constant bounds are valid")
}

fn progress_bar(args: &BenchOptions) -> ProgressBar {
    if args.json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(args.duration.as_millis() as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn print_report(r: &Report) {
    println!(
        "{} {} — {} keys, {} in flight, {:.1} s",
        r.subject, r.op, r.keys, r.concurrency, r.seconds
    );
    println!(
        "  {} requests, {:.0}/s: {} allowed, {} denied, {} errors",
        r.requests, r.per_second, r.allowed, r.denied, r.errors
    );
    if let Some(warning) = &r.warning {
        println!("  warning: {warning}");
    }
    let l = &r.latency_us;
    println!(
        "  latency µs: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {:.1}",
        l.p50, l.p90, l.p99, l.p999, l.max, l.mean
    );
}
