//! `DELETE /v1/keys/{key}`: forgetting an ad-hoc key, for operators; and
//! the bearer token check it shares with `GET /v1/keys/{key}`.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::json;
use slidegate::Store;

use super::{ApiError, AppState, ErrorCode};
use crate::decision;

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
    if let Some(refused) = refusal(token, &headers) {
        return Ok(refused);
    }
    let Path(key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("the key in the path is not valid: {e}"),
        )
    })?;
    decision::reset(&*state.store, &key).await?;
    tracing::info!(%key, "key reset by an admin");
    Ok((StatusCode::OK, Json(json!({"reset": key}))).into_response())
}

/// Checks `Authorization: Bearer TOKEN` against `token`: `None` when it
/// matches, otherwise the answer to give instead (401 without the header,
/// 403 when wrong).
pub(super) fn refusal(token: &str, headers: &HeaderMap) -> Option<Response> {
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(given) = given else {
        let mut response = ApiError::new(
            ErrorCode::Unauthorized,
            "send the admin token as `Authorization: Bearer TOKEN`",
        )
        .into_response();
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Some(response);
    };
    if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return Some(ApiError::new(ErrorCode::Forbidden, "wrong admin token").into_response());
    }
    None
}

/// Equal, taking the same time wherever the first difference is (the
/// length itself is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
