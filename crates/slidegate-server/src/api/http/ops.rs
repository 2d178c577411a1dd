//! The routes of operators and orchestrators: `GET /healthz`, `GET
//! /readyz`, `GET /metrics`, and the answer to an unknown route.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;
use slidegate::Store;

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::telemetry::metrics;

/// How long `/readyz` waits for the store before answering 503.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a failing `/readyz` is logged at most: an orchestrator probes
/// every few seconds, and an outage must not write a line per probe.
pub const NOT_READY_LOG_EVERY: Duration = Duration::from_secs(30);

/// `GET /metrics`: Prometheus text.
pub(super) async fn metrics_text<S>(
    State(state): State<AppState<S>>,
) -> Result<Response, ApiError> {
    let handle = state.metrics.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "metrics are not enabled in this server",
        )
    })?;
    metrics::publish();
    let mut response = handle.render().into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// `GET /healthz`: the process is up and serving. The body is written
/// once: building it as a JSON value cost each probe a map, two strings
/// and their serialization.
pub(super) async fn healthz() -> Response {
    healthz_response()
}

/// The answer of `GET /healthz`, ready at once.
pub(super) fn healthz_response() -> Response {
    const OK: &str = r#"{"status":"ok"}"#;
    (
        [(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        )],
        OK,
    )
        .into_response()
}

/// `GET /readyz`: the rules have come and the store can take decisions.
pub(super) async fn readyz<S: Store>(State(state): State<AppState<S>>) -> Response {
    if let Some(pending) = state.limiter.config().pending() {
        let body = json!({
            "status": "unavailable",
            "error": {"code": ErrorCode::RulesPending, "message": pending},
        });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let ready = state.limiter.store().ready();
    let runtime = state.runtime.as_ref().map(|r| r.status());
    let error = match tokio::time::timeout(READY_TIMEOUT, ready).await {
        Ok(Ok(())) => {
            let mut body = json!({"status": "ready"});
            if let Some(runtime) = runtime {
                body["runtime_limits"] = runtime;
            }
            return Json(body).into_response();
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("the store did not answer within {READY_TIMEOUT:?}"),
    };
    log_not_ready(&error);
    let mut body = json!({
        "status": "unavailable",
        "error": {"code": ErrorCode::StoreUnavailable, "message": error},
    });
    if let Some(runtime) = runtime {
        body["runtime_limits"] = runtime;
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// Logs why the store is not ready, at most once per
/// [`NOT_READY_LOG_EVERY`], with how many failed probes went unlogged.
fn log_not_ready(error: &str) {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    static UNLOGGED: AtomicU64 = AtomicU64::new(0);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if last.is_some_and(|at| at.elapsed() < NOT_READY_LOG_EVERY) {
        UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    *last = Some(Instant::now());
    drop(last);
    let unlogged = UNLOGGED.swap(0, Ordering::Relaxed);
    tracing::warn!(
        %error,
        unlogged,
        "not ready (logged at most every {}s; `unlogged` failed probes since the last line)",
        NOT_READY_LOG_EVERY.as_secs()
    );
}

/// Any other route.
pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such route; the API has POST /v1/acquire, POST /v1/leases/{id}/commit, DELETE /v1/leases/{id}, POST /v1/check, POST /json (envoyproxy/ratelimit's name for /v1/check), ANY /v1/forward-auth/{domain}, GET and DELETE /v1/keys/{key}, PUT, GET and DELETE /v1/keys/{key}/limit, GET /v1/config/domains, PUT, GET and DELETE /v1/config/domains/{domain}, GET /healthz, GET /readyz, GET /metrics, GET /ui, GET /v1/stats, GET /v1/config and GET /openapi.json (this API's OpenAPI document)",
    )
}
