//! The process' Prometheus recorder, and the handles kept for labels
//! that never change.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Store call latency buckets, in seconds: 50 µs to 1 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Set once the recorder is installed: handles made before would belong to
/// no recorder, so none is kept until then.
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs the Prometheus recorder once per process and returns its handle.
pub fn install() -> PrometheusHandle {
    let handle = HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("slidegate_store_call_duration_seconds".into()),
                    LATENCY_BUCKETS,
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            match builder.install_recorder() {
                Ok(handle) => {
                    super::families::describe();
                    handle
                }
                // Another recorder is installed (an embedding program's):
                // keep a private one so /metrics still answers.
                Err(_) => PrometheusBuilder::new().build_recorder().handle(),
            }
        })
        .clone();
    let _ = INSTALLED.set(());
    handle
}

/// Calls `with` on the handle in `cell`, made by `make` the first time once
/// the recorder is installed; before that, on a fresh one each time. The
/// handle is borrowed, not cloned: a clone would write to its shared count.
pub(super) fn cached<T>(cell: &OnceLock<T>, make: impl FnOnce() -> T, with: impl FnOnce(&T)) {
    if INSTALLED.get().is_some() {
        with(cell.get_or_init(make));
    } else {
        with(&make());
    }
}
