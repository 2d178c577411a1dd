//! `POST /v1/check` (and `POST /json`): Envoy's check in proto3 JSON,
//! decided against the rules in force.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use slidegate::Store;

use super::body::JsonBody;
use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::api::envoy::headers;
use crate::api::envoy::json::{RateLimitRequestJson, RateLimitResponseJson};
use crate::limiter::check::{CheckError, Code};

/// `POST /v1/check` and `POST /json`.
pub(super) async fn check<S: Store>(
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
    let config = state.limiter.config().load_full();
    let response = match state.limiter.check(&config, &request).await {
        Ok(response) => response,
        Err(CheckError::Store(error)) => return Err(error.into()),
        Err(other) => return Err(ApiError::new(ErrorCode::InvalidRequest, other.to_string())),
    };
    let status = match response.overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut answer = (
        status,
        Json(RateLimitResponseJson::of(&response).into_value()),
    )
        .into_response();
    for (name, value) in headers::fields(state.response_headers, &request.domain, &response) {
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
