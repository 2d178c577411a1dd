//! `DELETE /v1/keys/{key}`: forgetting an ad-hoc key, for operators.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;
use slidegate::Store;

use super::auth::Admin;
use super::error::{ApiError, ErrorCode};
use super::state::AppState;

/// Resets the ad-hoc `key` under every rule, for a request with the admin
/// token.
pub(super) async fn reset<S: Store>(
    _admin: Admin,
    State(state): State<AppState<S>>,
    key: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("the key in the path is not valid: {e}"),
        )
    })?;
    state.limiter.reset(&key).await?;
    tracing::info!(%key, "key reset by an admin");
    Ok((StatusCode::OK, Json(json!({"reset": key}))).into_response())
}
