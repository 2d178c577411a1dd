//! `DELETE /v1/keys/{key}`: forgetting an ad-hoc key, for operators.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::json;
use slidegate::Store;

use super::auth::{self, Challenge};
use super::{ApiError, AppState, ErrorCode};
use crate::limiter::adhoc;

/// Resets the ad-hoc `key` under every rule, for a request with the admin
/// bearer token.
pub(super) async fn reset<S: Store>(
    State(state): State<AppState<S>>,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Some(token) = state.admin_token.as_deref() else {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the admin API is disabled; start the server with --admin-token to enable it",
        ));
    };
    if let Some(refused) = auth::refusal(token, &headers, Challenge::Bearer) {
        return Ok(refused);
    }
    let Path(key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("the key in the path is not valid: {e}"),
        )
    })?;
    adhoc::reset(&*state.store, &key).await?;
    tracing::info!(%key, "key reset by an admin");
    Ok((StatusCode::OK, Json(json!({"reset": key}))).into_response())
}
