//! The spans of a request, for OpenTelemetry tracing over OTLP/gRPC
//! (`--otlp-endpoint URL`, exported by [`telemetry::otlp`](crate::telemetry::otlp)),
//! off by default. Everything that makes one calls down here: the fronts
//! (the request's span), the limiter (the decision's, made with
//! [`TARGET`]) and the store (each call's).
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

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span of a request: the only one the exporter's
/// layer listens to (at DEBUG, which the log filter leaves off).
pub const TARGET: &str = "slidegate_server::spans";

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

/// Turns the spans of the request path on (the exporter is running) or
/// off (it has stopped).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
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
        target: TARGET,
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
        target: TARGET,
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
        target: TARGET,
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
