//! Exporting spans over OTLP/gRPC (`--otlp-endpoint URL`): the exporter
//! and the tracing layer that feeds it. What is exported is the spans of
//! [`crate::spans`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::spans;

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
        spans::set_enabled(false);
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
    let exporter = WarnOnce {
        inner: exporter,
        endpoint: endpoint.to_owned(),
        warned: AtomicBool::new(false),
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("slidegate").build())
        .build();
    let tracer = provider.tracer("slidegate");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target(spans::TARGET, tracing::Level::DEBUG);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter);
    spans::set_enabled(true);
    Ok((Otlp { provider }, layer))
}

/// The exporter, with its first failure logged (a WARN, once per process):
/// the SDK drops a batch it cannot send without a word, so a wrong
/// `--otlp-endpoint` (a closed port, a name that does not resolve) would
/// lose every span in silence. Once is enough: the endpoint is fixed at
/// start, and a line per batch would flood the log of a collector outage.
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    endpoint: String,
    warned: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(error) = &result
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                endpoint = %self.endpoint,
                %error,
                "cannot export spans to the OTLP endpoint: they are dropped \
                 (logged once; check --otlp-endpoint and the collector)"
            );
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
