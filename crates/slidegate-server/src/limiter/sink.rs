//! What the limiter reports of each decision, to whoever counts them
//! (the service's telemetry): a trait the limiter owns, so that it names
//! no one above it.

use slidegate::Decision;

use crate::limiter::check::{CheckRequest, CheckResponse};
use crate::rules::RateLimitConfig;

/// Hears of every decision the [`Limiter`](super::Limiter) makes. Called
/// on the request path, once per decision: an implementation takes no
/// lock and allocates nothing for an admitted request.
pub trait Sink: Send + Sync + 'static {
    /// An ad-hoc decision for `key` (`POST /v1/acquire`, with or without
    /// a wait).
    fn adhoc_decided(&self, key: &str, decision: &Decision);

    /// An Envoy check decided against `config`.
    fn check_decided(
        &self,
        config: &RateLimitConfig,
        request: &CheckRequest,
        response: &CheckResponse<'_>,
    );
}

/// A sink that hears nothing: for decisions nobody counts (`slidegate
/// check`, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSink;

impl Sink for NoSink {
    fn adhoc_decided(&self, _: &str, _: &Decision) {}

    fn check_decided(&self, _: &RateLimitConfig, _: &CheckRequest, _: &CheckResponse<'_>) {}
}
