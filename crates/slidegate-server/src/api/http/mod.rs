//! The HTTP/JSON API v1.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/acquire` | 200 allowed, 429 denied; decision as JSON, `RateLimit-Policy`, `RateLimit`, and `Retry-After` on 429 |
//! | `GET /v1/keys/{key}?limit=..&window_ms=..[&algorithm=..]` | 200; the key's state under that rule, consuming nothing; with `--admin-token`, only for a request carrying it |
//! | `POST /v1/check` (alias `POST /json`) | Envoy's `RateLimitRequest` in proto3 JSON, decided against the `--config` rules; 200 OK, 429 OVER_LIMIT, body `RateLimitResponse` |
//! | `DELETE /v1/keys/{key}` | forgets the key under every rule; only with `--admin-token`, sent as `Authorization: Bearer` (401 without, 403 when wrong or disabled) |
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 when the store can decide, 503 otherwise |
//! | `GET /metrics` | Prometheus text |
//! | `GET /ui` | the status page (HTML; with `--admin-token`, only for a request carrying it, as Bearer or Basic password) |
//! | `GET /v1/stats` | what the status page shows, as JSON ([`Snapshot`](crate::telemetry::stats::Snapshot)); admin token as for `/ui` |
//! | `GET /v1/config` | the rules in force as JSON: domains, their files, descriptors and limits, when loaded; admin token as for `/ui` |
//!
//! The admin token is checked by one function (`http/auth.rs`) on every route that needs it
//! (Bearer or Basic, the scheme's name in any case). Every answer carries
//! `X-Content-Type-Options: nosniff`.
//!
//! Every error is `{"error":{"code":"...","message":"..."}}` with a stable
//! code ([`ErrorCode`]): 400 for bad input, 404, 405, 408, 413, 415, and
//! 503 when the store fails. Bad input is never a 5xx.
//!
//! `/v1/acquire` and `/v1/keys/{key}` address ad-hoc keys only
//! ([`keyspace`](crate::keys)): no key they take reaches a counter of
//! the configured rules.
//!
//! The router is generic over the [`Store`]: the binary uses
//! [`Backend`](crate::store::backend::Backend), tests may use any store.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use metrics_exporter_prometheus::PrometheusHandle;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::StatusCode;
use serde_json::json;
use slidegate::Store;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::api::envoy::headers::{self as envoy_headers, ResponseHeaders};
use crate::api::envoy::json::{RateLimitRequestJson, RateLimitResponseJson};
use crate::bounds::Bounds;
use crate::limiter::adhoc::{self, DecisionBody, Outcome};
use crate::limiter::check::{CheckError, Code};
use crate::rules::RateLimitConfig;
use waiting::Waiting;

mod admin;
mod auth;
mod body;
mod error;
pub mod headers;
mod json;
mod layer;
pub mod request;
mod status;
pub mod waiting;

pub use body::JsonBody;
pub use error::{ApiError, ErrorCode};
pub use layer::{Api, ApiFuture, ApiLayer};

/// The largest request body accepted: 64 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How long one request may take, body included, before a 408. It also
/// bounds how long a graceful shutdown waits for a slow client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `/readyz` waits for the store before answering 503.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// What every handler shares.
pub struct AppState<S> {
    store: Arc<S>,
    config: Arc<ArcSwap<RateLimitConfig>>,
    admin_token: Option<Arc<str>>,
    metrics: Option<PrometheusHandle>,
    bounds: Bounds,
    response_headers: ResponseHeaders,
    waiting: Waiting,
}

impl<S> AppState<S> {
    /// State deciding with `store`, with no rules for `/v1/check`, no admin
    /// token, no metrics and the default [`Bounds`].
    pub fn new(store: S) -> AppState<S> {
        AppState {
            store: Arc::new(store),
            config: Arc::new(ArcSwap::from_pointee(RateLimitConfig::default())),
            admin_token: None,
            metrics: None,
            bounds: Bounds::default(),
            response_headers: ResponseHeaders::Off,
            waiting: Waiting::default(),
        }
    }

    /// At most `max` requests wait for their turn at once
    /// (`max_wait_ms`); more are answered 503 `too_many_waiting`.
    pub fn with_max_waiting(mut self, max: usize) -> Self {
        self.waiting = Waiting::new(max);
        self
    }

    /// The requests waiting for their turn.
    pub fn waiting(&self) -> &Waiting {
        &self.waiting
    }

    /// `/v1/check` answers (and gRPC's, when served by
    /// [`serve`](crate::commands::serve::serve)) carry these rate limit header fields.
    pub fn with_response_headers(mut self, mode: ResponseHeaders) -> Self {
        self.response_headers = mode;
        self
    }

    /// The rate limit header fields check answers carry.
    pub fn response_headers(&self) -> ResponseHeaders {
        self.response_headers
    }

    /// Refuses requests beyond `bounds` (HTTP and gRPC alike).
    pub fn with_bounds(mut self, bounds: Bounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// The bounds on requests.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The rules of `/v1/check` (swapped in place on reload).
    pub fn with_config(mut self, config: Arc<ArcSwap<RateLimitConfig>>) -> Self {
        self.config = config;
        self
    }

    /// Enables `DELETE /v1/keys/{key}` for this bearer token, and requires
    /// it for `GET /v1/keys/{key}` too.
    pub fn with_admin_token(mut self, token: Option<String>) -> Self {
        self.admin_token = token.filter(|t| !t.is_empty()).map(Arc::from);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The rules of `/v1/check` and gRPC.
    pub fn config(&self) -> &Arc<ArcSwap<RateLimitConfig>> {
        &self.config
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
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
            admin_token: self.admin_token.clone(),
            metrics: self.metrics.clone(),
            bounds: self.bounds,
            response_headers: self.response_headers,
            waiting: self.waiting.clone(),
        }
    }
}

/// The whole API, ready for [`axum::serve()`].
pub fn router<S: Store + 'static>(state: AppState<S>) -> Router {
    let router = Router::new()
        .route("/v1/acquire", post(acquire::<S>))
        .route("/v1/check", post(check::<S>))
        .route("/json", post(check::<S>))
        .route("/v1/keys/{key}", get(peek::<S>).delete(admin::reset::<S>))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .route("/ui", get(status::page::<S>))
        .route("/ui/{asset}", get(status::asset))
        .route("/v1/stats", get(status::stats::<S>))
        .route("/v1/config", get(status::config::<S>))
        .fallback(not_found)
        .with_state(state)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(ApiLayer);
    // Only with tracing on: a layer costs every request even when idle.
    let router = if crate::spans::enabled() {
        router.layer(axum::middleware::from_fn(crate::spans::trace_context))
    } else {
        router
    };
    router.layer(TraceLayer::new_for_http())
}

/// `POST /v1/acquire`.
async fn acquire<S: Store>(
    State(state): State<AppState<S>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = request::parse_acquire(&body, &state.bounds)?;
    if !request.max_wait.is_zero() {
        return acquire_waiting(state, request).await;
    }
    let outcome =
        crate::spans::acquire(&*state.store, &request.key, &request.rules, request.cost).await?;
    crate::telemetry::metrics::acquire_decision(&outcome.decision);
    crate::telemetry::stats::global().record_acquire(&request.key, &outcome.decision);
    let status = if outcome.decision.allowed() {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    Ok(decision_response(status, &outcome))
}

/// `POST /v1/acquire` with `max_wait_ms`: a request that does not fit now
/// reserves the earliest time it fits, if that is within its wait, and is
/// answered 200 then, with `waited_ms`: a sleep, no store call and no
/// worker held. Beyond its wait it is answered 429 at once, and beyond
/// `--max-waiting` waiting requests 503 `too_many_waiting`. A client
/// that leaves while it waits gives its place back (the guard drops with
/// the handler); its reservation stays used.
async fn acquire_waiting<S: Store>(
    state: AppState<S>,
    request: request::AcquireRequest,
) -> Result<Response, ApiError> {
    let Some(_place) = state.waiting.enter() else {
        return Err(ApiError::new(
            ErrorCode::TooManyWaiting,
            "as many requests as --max-waiting allows are already waiting; try again, or without max_wait_ms",
        ));
    };
    let (outcome, wait) = adhoc::reserve(
        &*state.store,
        &request.key,
        &request.rules,
        request.cost,
        request.max_wait,
    )
    .await?;
    crate::telemetry::metrics::acquire_decision(&outcome.decision);
    crate::telemetry::stats::global().record_acquire(&request.key, &outcome.decision);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    if !outcome.decision.allowed() {
        return Ok(decision_response(StatusCode::TOO_MANY_REQUESTS, &outcome));
    }
    // The decision's fields, then how long it waited (rounded up).
    let mut body = DecisionBody::from(&outcome.decision).to_json();
    body.pop();
    body.push_str(",\"waited_ms\":");
    headers::push_decimal(&mut body, micros_to_ms_up(wait));
    body.push('}');
    Ok(respond(StatusCode::OK, &outcome, body))
}

fn micros_to_ms_up(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// `GET /v1/keys/{key}`: a read, so 200 even when a request would be denied.
/// Another client's remaining quota is the operator's business: with an
/// admin token set, only requests carrying it may look.
async fn peek<S: Store>(
    State(state): State<AppState<S>>,
    headers: http::HeaderMap,
    key: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    if let Some(token) = state.admin_token.as_deref()
        && let Some(refused) = auth::refusal(token, &headers, auth::Challenge::Bearer)
    {
        return Ok(refused);
    }
    let Path(key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("the key in the path is not valid: {e}"),
        )
    })?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the query string is not valid: {e}"),
        )
    })?;
    let request = request::parse_peek(key, query, &state.bounds)?;
    let outcome = adhoc::peek(&*state.store, &request.key, request.rule).await?;
    Ok(decision_response(StatusCode::OK, &outcome))
}

/// `POST /v1/check` and `POST /json`: Envoy's check in proto3 JSON.
async fn check<S: Store>(
    State(state): State<AppState<S>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = RateLimitRequestJson::from_slice(&body)
        .map_err(|e| {
            let code = match e.classify() {
                serde_json::error::Category::Data => ErrorCode::InvalidRequest,
                _ => ErrorCode::InvalidJson,
            };
            ApiError::new(code, format!("not a RateLimitRequest: {e}"))
        })?
        .into_request(&state.bounds)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.0))?;
    let config = state.config.load_full();
    let response = match crate::spans::check(&config, &*state.store, &request).await {
        Ok(response) => response,
        Err(CheckError::Store(error)) => return Err(error.into()),
        Err(other) => return Err(ApiError::new(ErrorCode::InvalidRequest, other.to_string())),
    };
    crate::telemetry::metrics::check_decisions(&request.domain, &response);
    crate::telemetry::stats::global().record_check(&request, &response);
    let status = match response.overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut answer = (
        status,
        Json(RateLimitResponseJson::of(&response).into_value()),
    )
        .into_response();
    for (name, value) in envoy_headers::fields(state.response_headers, &request.domain, &response) {
        // The values are built from digits, `;`, `=`, `,` and printable
        // ASCII names: always valid header values.
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            answer
                .headers_mut()
                .insert(http::HeaderName::from_static(name), value);
        }
    }
    Ok(answer)
}

/// `GET /metrics`: Prometheus text.
async fn metrics_text<S>(State(state): State<AppState<S>>) -> Result<Response, ApiError> {
    let handle = state.metrics.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "metrics are not enabled in this server",
        )
    })?;
    crate::telemetry::metrics::publish();
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

fn decision_response(status: StatusCode, outcome: &Outcome) -> Response {
    respond(
        status,
        outcome,
        DecisionBody::from(&outcome.decision).to_json(),
    )
}

/// A decision's answer with `body`, its JSON.
fn respond(status: StatusCode, outcome: &Outcome, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers::insert(
        response.headers_mut(),
        outcome,
        status == StatusCode::TOO_MANY_REQUESTS,
    );
    response
}

/// `GET /healthz`: the process is up and serving.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the store can take decisions.
async fn readyz<S: Store>(State(state): State<AppState<S>>) -> Response {
    let error = match tokio::time::timeout(READY_TIMEOUT, state.store.ready()).await {
        Ok(Ok(())) => return Json(json!({"status": "ready"})).into_response(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("the store did not answer within {READY_TIMEOUT:?}"),
    };
    tracing::warn!(%error, "not ready");
    let body = json!({
        "status": "unavailable",
        "error": {"code": ErrorCode::StoreUnavailable, "message": error},
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such route; the API has POST /v1/acquire, POST /v1/check, GET and DELETE /v1/keys/{key}, GET /healthz, GET /readyz, GET /metrics, GET /ui, GET /v1/stats and GET /v1/config",
    )
}
