//! The routes of operators and orchestrators: `GET /healthz`, `GET
//! /readyz`, `GET /metrics`, and the answer to an unknown route.

use std::time::Duration;

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

/// `GET /healthz`: the process is up and serving.
pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the store can take decisions.
pub(super) async fn readyz<S: Store>(State(state): State<AppState<S>>) -> Response {
    let ready = state.limiter.store().ready();
    let error = match tokio::time::timeout(READY_TIMEOUT, ready).await {
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

/// Any other route.
pub(super) async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such route; the API has POST /v1/acquire, POST /v1/leases/{id}/commit, DELETE /v1/leases/{id}, POST /v1/check, GET and DELETE /v1/keys/{key}, GET /healthz, GET /readyz, GET /metrics, GET /ui, GET /v1/stats and GET /v1/config",
    )
}
