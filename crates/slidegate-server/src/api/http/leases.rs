//! `POST /v1/acquire` with `lease_ms`, `POST /v1/leases/{id}/commit` and
//! `DELETE /v1/leases/{id}`: leases over HTTP.
//!
//! A lease id is opaque: an unknown id and another key's answer the same
//! 404 `lease_not_found`; a lease no longer open (expired, settled)
//! answers 409 `lease_expired` and changes nothing.

use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use slidegate::Store;
use slidegate::store::Settled;

use super::body::JsonBody;
use super::decision_json::DecisionBody;
use super::error::{ApiError, ErrorCode};
use super::headers;
use super::request::{self, AcquireRequest};
use super::state::AppState;
use crate::limiter::AdhocDecision;

/// The longest id accepted in a path; longer is no id of ours (404).
const MAX_ID_LEN: usize = 64;

/// `POST /v1/acquire` with `lease_ms`: 200 with `lease_id` and `lease_ms`
/// (and `waited_ms` after a wait), or 429 as a denied decision.
pub(super) async fn acquire_lease<S: Store>(
    state: AppState<S>,
    request: &AcquireRequest,
    rules: &[slidegate::Rule],
    time: Duration,
) -> Result<Response, ApiError> {
    let _place = if request.max_wait.is_zero() {
        None
    } else {
        Some(state.waiting.enter().ok_or_else(|| {
            ApiError::new(
                ErrorCode::TooManyWaiting,
                "as many requests as --max-waiting allows are already waiting; try again, or without max_wait_ms",
            )
        })?)
    };
    let leased = state
        .limiter
        .reserve_lease(&request.key, rules, request.cost, time, request.max_wait)
        .await?;
    let granted = leased.lease.id().is_some();
    let status = if granted {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut body = DecisionBody::from(&leased.answer.decision).to_json();
    if let Some(id) = leased.lease.id() {
        body.pop();
        // Ids are hex: nothing to escape.
        body.push_str(",\"lease_id\":\"");
        body.push_str(id);
        body.push_str("\",\"lease_ms\":");
        body.push_str(itoa::Buffer::new().format(leased.lease.time().as_millis()));
        if !request.max_wait.is_zero() {
            let waited = leased.lease.waited().as_micros().div_ceil(1000);
            body.push_str(",\"waited_ms\":");
            body.push_str(itoa::Buffer::new().format(waited));
        }
        body.push('}');
    }
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers::insert(response.headers_mut(), &leased.answer, !granted);
    Ok(response)
}

/// `POST /v1/leases/{id}/commit` `{"cost": N, "key"?: "k"}`: 200 with
/// `over_limit` and the state afterwards.
pub(super) async fn commit<S: Store>(
    State(state): State<AppState<S>>,
    id: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let commit = request::parse_commit(&body)?;
    let settled = state
        .limiter
        .settle_lease(&id, commit.key.as_deref(), Some(commit.cost))
        .await?;
    Ok(settled_response(&settled))
}

/// `DELETE /v1/leases/{id}?key=K`: gives the whole lease back.
pub(super) async fn release<S: Store>(
    State(state): State<AppState<S>>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the query string is not valid: {e}"),
        )
    })?;
    let key = request::parse_release(query)?;
    let settled = state
        .limiter
        .settle_lease(&id, key.as_deref(), None)
        .await?;
    Ok(settled_response(&settled))
}

/// The id in the path; one that cannot be ours is not found, as an
/// unknown id is.
fn lease_id(id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    match id {
        Ok(Path(id)) if id.len() <= MAX_ID_LEN => Ok(id),
        _ => Err(ApiError::from(slidegate::Error::LeaseNotFound)),
    }
}

fn settled_response(settled: &Settled) -> Response {
    let mut body = String::from("{\"over_limit\":");
    body.push_str(if settled.over_limit() {
        "true"
    } else {
        "false"
    });
    body.push(',');
    body.push_str(&DecisionBody::from(&settled.decision()).to_json()[1..]);
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    // The rate limit fields of the state afterwards, as an acquire's
    // answer carries them (no Retry-After: a settlement is no denial).
    if !settled.rules().is_empty() {
        let answer = AdhocDecision {
            decision: settled.decision(),
            rules: settled.rules().to_vec(),
        };
        headers::insert(response.headers_mut(), &answer, false);
    }
    response
}
