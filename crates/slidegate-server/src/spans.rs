//! OpenTelemetry tracing over OTLP/gRPC (`--otlp-endpoint URL`), off by
//! default.
//!
//! When on, each decision is a span (`slidegate.decision`, with `domain`,
//! `descriptors`, `outcome` and `degraded`; a decision made by a failure
//! policy has `degraded = true` and `fallback = "policy"`), each store call
//! in it a child span (`slidegate.store`, with `store`, `op`, and for Redis
//! `node` and `script`). The trace continues the caller's: the parent is
//! taken from the W3C `traceparent` (and `tracestate`) of an HTTP request
//! or of the gRPC call's metadata, so a proxy's trace runs through
//! slidegate.
//!
//! When off, no layer is installed, no span is made on the decision path
//! (its spans are at DEBUG level for this crate, which the OpenTelemetry
//! layer alone enables; the log filter does not), and the request path
//! pays one relaxed atomic load to learn that tracing is off.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::limiter::check::{self, CheckError, CheckRequest, CheckResponse, Code};
use crate::rules::RateLimitConfig;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The store's node and script, for the store call spans (set once the
/// store is opened).
static STORE_NODE: OnceLock<String> = OnceLock::new();

/// The Lua script every Redis decision runs.
pub const REDIS_SCRIPT: &str = "slidegate";

/// True when spans are exported.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The least time the spans still buffered get to reach the collector on a
/// stop, when the shutdown grace has run out: a stop ends at most this long
/// after the grace, whatever the collector does.
pub const FLUSH_AT_LEAST: Duration = Duration::from_secs(1);

/// The exporter; [`Otlp::shutdown`] flushes the spans not yet sent.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkTracerProvider,
}

impl Otlp {
    /// Exports every span still buffered, then stops; waits for the
    /// collector until `grace_ends`, or [`FLUSH_AT_LEAST`] if that is
    /// later. A collector that does not answer by then loses those spans:
    /// the stop must fit in the time a supervisor gives it (systemd's
    /// `TimeoutStopSec`), which the SDK's own timeouts (5 s to flush, 5 s
    /// more to stop, its export's 10 s) would not.
    pub fn shutdown(self, grace_ends: Instant) {
        ENABLED.store(false, Ordering::Relaxed);
        let wait = grace_ends
            .saturating_duration_since(Instant::now())
            .max(FLUSH_AT_LEAST);
        // One call: the SDK's shutdown exports what is buffered first.
        if let Err(error) = self.provider.shutdown_with_timeout(wait) {
            eprintln!("warning: cannot flush the spans to the OTLP endpoint: {error}");
        }
    }
}

/// Starts exporting spans to `endpoint` (`http://host:4317`, OTLP/gRPC) and
/// returns the layer to install; must run inside a tokio runtime.
pub fn start<S>(endpoint: &str) -> anyhow::Result<(Otlp, impl Layer<S>)>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| anyhow::anyhow!("cannot export spans to {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("slidegate").build())
        .build();
    let tracer = provider.tracer("slidegate");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("slidegate_server::spans", tracing::Level::DEBUG);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter);
    ENABLED.store(true, Ordering::Relaxed);
    Ok((Otlp { provider }, layer))
}

/// Names the store's node for the store call spans.
pub fn set_store_node(node: String) {
    let _ = STORE_NODE.set(node);
}

/// The caller's trace context from W3C `traceparent`/`tracestate` headers.
fn parent_from(headers: &impl Extractor) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(headers)
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The span of one HTTP request, child of its `traceparent`; `None` when
/// tracing is off.
pub fn http_span(request: &http::Request<axum::body::Body>) -> Option<tracing::Span> {
    if !enabled() {
        return None;
    }
    let span = tracing::debug_span!(
        "slidegate.http",
        otel.kind = "server",
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
    );
    let _ = span.set_parent(parent_from(&HeaderExtractor(request.headers())));
    Some(span)
}

/// Axum middleware: runs the request in its [`http_span`] when tracing is on.
pub async fn trace_context(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match http_span(&request) {
        Some(span) => next.run(request).instrument(span).await,
        None => next.run(request).await,
    }
}

/// The span of one gRPC call, child of the trace context in its metadata;
/// `None` when tracing is off.
pub fn grpc_span(metadata: &tonic::metadata::MetadataMap) -> Option<tracing::Span> {
    if !enabled() {
        return None;
    }
    let span = tracing::debug_span!(
        "slidegate.grpc",
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.method = "ShouldRateLimit",
    );
    // The trace context headers, as HTTP/2 carries them in metadata.
    let mut headers = http::HeaderMap::new();
    for name in ["traceparent", "tracestate"] {
        if let Some(value) = metadata.get(name)
            && let Ok(value) = value.to_str()
            && let Ok(value) = http::HeaderValue::from_str(value)
        {
            headers.insert(name, value);
        }
    }
    let _ = span.set_parent(parent_from(&HeaderExtractor(&headers)));
    Some(span)
}

/// `service::check`, in a decision span when tracing is on.
pub async fn check<S: slidegate::Store>(
    config: &RateLimitConfig,
    store: &S,
    request: &CheckRequest,
) -> Result<CheckResponse, CheckError> {
    if !enabled() {
        return check::check(config, store, request).await;
    }
    let span = tracing::debug_span!(
        "slidegate.decision",
        domain = %request.domain,
        descriptors = request.descriptors.len(),
        outcome = tracing::field::Empty,
        degraded = tracing::field::Empty,
        fallback = tracing::field::Empty,
        error = tracing::field::Empty,
    );
    let result = check::check(config, store, request)
        .instrument(span.clone())
        .await;
    match &result {
        Ok(response) => {
            span.record(
                "outcome",
                match response.overall {
                    Code::Ok => "allowed",
                    Code::OverLimit => "denied",
                },
            );
            mark_degraded(&span, response.degraded);
        }
        Err(error) => {
            span.record("outcome", "error");
            span.record("error", tracing::field::display(error));
        }
    }
    result
}

/// An ad-hoc decision (`/v1/acquire`), in a decision span when tracing is on.
pub async fn acquire<S: slidegate::Store>(
    store: &S,
    key: &str,
    rules: &[slidegate::Rule],
    cost: u64,
) -> slidegate::Result<crate::limiter::adhoc::Outcome> {
    if !enabled() {
        return crate::limiter::adhoc::acquire(store, key, rules, cost).await;
    }
    let span = tracing::debug_span!(
        "slidegate.decision",
        domain = "",
        rule = crate::telemetry::metrics::ADHOC_RULE,
        outcome = tracing::field::Empty,
        degraded = tracing::field::Empty,
        fallback = tracing::field::Empty,
    );
    let result = crate::limiter::adhoc::acquire(store, key, rules, cost)
        .instrument(span.clone())
        .await;
    match &result {
        Ok(outcome) => {
            let allowed = outcome.decision.allowed();
            span.record("outcome", if allowed { "allowed" } else { "denied" });
            mark_degraded(&span, outcome.decision.degraded());
        }
        Err(_) => {
            span.record("outcome", "error");
        }
    }
    result
}

fn mark_degraded(span: &tracing::Span, degraded: bool) {
    span.record("degraded", degraded);
    if degraded {
        span.record("fallback", "policy");
    }
}

/// A store call (`op`) of the `store` kind, in a child span when tracing is
/// on.
pub async fn store_call<T>(
    store: &'static str,
    op: &'static str,
    call: impl Future<Output = T>,
) -> T {
    if !enabled() {
        return call.await;
    }
    let redis = store.starts_with("redis");
    let span = tracing::debug_span!(
        "slidegate.store",
        otel.kind = "client",
        store,
        op,
        db.system = if redis { "redis" } else { "memory" },
        node = STORE_NODE.get().map(String::as_str).unwrap_or(""),
        script = if redis { REDIS_SCRIPT } else { "" },
    );
    call.instrument(span).await
}
