//! What `slidegate serve` is made of, put together once: the limiter (the
//! store, the rules in force, the telemetry its decisions are reported
//! to) and the options of the fronts. Every front (HTTP, gRPC, RESP) is
//! built from these parts; none reads anything out of another.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::api::envoy::headers::ResponseHeaders;
use crate::api::forward_auth::TrustedProxies;
use crate::api::grpc::RateLimitGrpc;
use crate::api::http::AppState;
use crate::api::http::waiting::Waiting;
use crate::api::resp::{FrameLimits, RespState};
use crate::bounds::RequestBounds;
use crate::limiter::Limiter;
use crate::rules::CurrentConfig;
use crate::runtime::RuntimeLimits;
use crate::telemetry::Telemetry;

/// The parts of one server.
pub struct Parts<S> {
    limiter: Limiter<S>,
    telemetry: Arc<Telemetry>,
    bounds: RequestBounds,
    response_headers: ResponseHeaders,
    admin_token: Option<String>,
    metrics: Option<PrometheusHandle>,
    waiting: Waiting,
    runtime: Option<RuntimeLimits>,
    trusted_proxies: TrustedProxies,
    resp_frame: FrameLimits,
}

impl<S> Parts<S> {
    /// A server deciding with `store`: no rules (every Envoy check is of
    /// an unknown domain), telemetry of its own, no admin token, no
    /// `/metrics`, the default bounds, no header fields on check answers.
    pub fn new(store: S) -> Parts<S> {
        let telemetry = Arc::new(Telemetry::new());
        let sink: Arc<dyn crate::limiter::Sink> = telemetry.clone();
        Parts {
            limiter: Limiter::new(store, CurrentConfig::default(), sink),
            telemetry,
            bounds: RequestBounds::default(),
            response_headers: ResponseHeaders::Off,
            admin_token: None,
            metrics: None,
            waiting: Waiting::default(),
            runtime: None,
            trusted_proxies: TrustedProxies::default(),
            resp_frame: FrameLimits::default(),
        }
    }

    /// Serves the runtime limits API over `runtime` (see
    /// [`AppState::with_runtime`]).
    pub fn with_runtime(mut self, runtime: RuntimeLimits) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Believes the forwarding headers of forward-auth requests from these
    /// proxies.
    pub fn with_trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.trusted_proxies = trusted;
        self
    }

    /// Decides Envoy checks against `config` (swapped in place on reload).
    pub fn with_config(mut self, config: CurrentConfig) -> Self {
        self.limiter = self.limiter.with_config(config);
        self
    }

    /// Enables the admin API for this token (see [`AppState::with_admin_token`]).
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token;
        self
    }

    /// Refuses requests beyond `bounds`, over HTTP and gRPC alike.
    pub fn with_bounds(mut self, bounds: RequestBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Check answers (`/v1/check` and gRPC) carry these header fields.
    pub fn with_response_headers(mut self, mode: ResponseHeaders) -> Self {
        self.response_headers = mode;
        self
    }

    /// At most `max` requests wait for their turn (`max_wait_ms`) at once.
    pub fn with_max_waiting(mut self, max: usize) -> Self {
        self.waiting = Waiting::new(max);
        self
    }

    /// The RESP port closes a connection that sends a command beyond
    /// `frame`.
    pub fn with_resp_frame_limits(mut self, frame: FrameLimits) -> Self {
        self.resp_frame = frame;
        self
    }

    /// Serves `GET /metrics` from this recorder.
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// The requests waiting for their turn.
    pub fn waiting(&self) -> &Waiting {
        &self.waiting
    }

    /// The limiter both fronts decide with.
    pub fn limiter(&self) -> &Limiter<S> {
        &self.limiter
    }

    /// What the decisions are counted in.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// The HTTP API's state.
    pub fn http(&self) -> AppState<S> {
        let state = AppState::new(self.limiter.clone(), Arc::clone(&self.telemetry))
            .with_admin_token(self.admin_token.clone())
            .with_bounds(self.bounds)
            .with_response_headers(self.response_headers)
            .with_waiting(self.waiting.clone())
            .with_trusted_proxies(self.trusted_proxies.clone());
        let state = match &self.runtime {
            Some(runtime) => state.with_runtime(runtime.clone()),
            None => state,
        };
        match &self.metrics {
            Some(handle) => state.with_metrics(handle.clone()),
            None => state,
        }
    }

    /// The RESP port's state.
    pub fn resp(&self) -> RespState<S> {
        RespState::new(self.limiter.clone())
            .with_bounds(self.bounds)
            .with_frame_limits(self.resp_frame)
            .with_admin_token(self.admin_token.clone())
    }

    /// The gRPC rate limit service.
    pub fn grpc(&self) -> RateLimitGrpc<S> {
        RateLimitGrpc::new(self.limiter.clone())
            .with_bounds(self.bounds)
            .with_response_headers(self.response_headers)
    }
}
