//! What every handler of the HTTP API shares.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use super::waiting::Waiting;
use crate::api::envoy::headers::ResponseHeaders;
use crate::api::forward_auth::TrustedProxies;
use crate::bounds::RequestBounds;
use crate::limiter::Limiter;
use crate::runtime::RuntimeLimits;
use crate::telemetry::Telemetry;

/// The limiter and what the API's answers and pages need besides.
pub struct AppState<S> {
    pub(super) limiter: Limiter<S>,
    pub(super) telemetry: Arc<Telemetry>,
    pub(super) admin_token: Option<Arc<str>>,
    pub(super) metrics: Option<PrometheusHandle>,
    pub(super) bounds: RequestBounds,
    pub(super) response_headers: ResponseHeaders,
    pub(super) waiting: Waiting,
    pub(super) runtime: Option<RuntimeLimits>,
    pub(super) trusted_proxies: Arc<TrustedProxies>,
}

impl<S> AppState<S> {
    /// The API of `limiter`, whose decisions `telemetry` counts (the
    /// status page shows it): no admin token, no metrics, the default
    /// [`RequestBounds`], no header fields on check answers.
    pub fn new(limiter: Limiter<S>, telemetry: Arc<Telemetry>) -> AppState<S> {
        AppState {
            limiter,
            telemetry,
            admin_token: None,
            metrics: None,
            bounds: RequestBounds::default(),
            response_headers: ResponseHeaders::Off,
            waiting: Waiting::default(),
            runtime: None,
            trusted_proxies: Arc::default(),
        }
    }

    /// Serves the runtime limits API (`/v1/config/domains`,
    /// `/v1/keys/{key}/limit`) over `runtime`, which must put its changes
    /// in force in the limiter's config.
    pub fn with_runtime(mut self, runtime: RuntimeLimits) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Forward-auth requests from these proxies are read for the client's
    /// address (`X-Forwarded-For`, `X-Real-IP`, `Forwarded`).
    pub fn with_trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.trusted_proxies = Arc::new(trusted);
        self
    }

    /// Requests that wait for their turn (`max_wait_ms`) count in
    /// `waiting`; beyond its bound they are answered 503
    /// `too_many_waiting`.
    pub fn with_waiting(mut self, waiting: Waiting) -> Self {
        self.waiting = waiting;
        self
    }

    /// `/v1/check` answers carry these rate limit header fields.
    pub fn with_response_headers(mut self, mode: ResponseHeaders) -> Self {
        self.response_headers = mode;
        self
    }

    /// Refuses requests beyond `bounds`.
    pub fn with_bounds(mut self, bounds: RequestBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Enables `DELETE /v1/keys/{key}` for this token, and requires it for
    /// `GET /v1/keys/{key}`, the status page, `/v1/stats` and `/v1/config`.
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token.filter(|t| !t.is_empty()).map(Arc::from);
        self
    }

    /// Serves `GET /metrics` from this recorder.
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }
}

impl<S> Clone for AppState<S> {
    fn clone(&self) -> Self {
        AppState {
            limiter: self.limiter.clone(),
            telemetry: Arc::clone(&self.telemetry),
            admin_token: self.admin_token.clone(),
            metrics: self.metrics.clone(),
            bounds: self.bounds,
            response_headers: self.response_headers,
            waiting: self.waiting.clone(),
            runtime: self.runtime.clone(),
            trusted_proxies: Arc::clone(&self.trusted_proxies),
        }
    }
}
