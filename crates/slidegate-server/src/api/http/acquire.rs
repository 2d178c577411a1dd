//! `POST /v1/acquire` and `GET /v1/keys/{key}`: ad-hoc decisions, and
//! their answers.

use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use slidegate::Store;

use super::auth::KeyReader;
use super::body::{JsonBody, read_json};
use super::decision_json::DecisionBody;
use super::error::{ApiError, ErrorCode};
use super::headers;
use super::request::{self, AcquireRequest};
use super::state::AppState;
use crate::limiter::AdhocDecision;

/// `POST /v1/acquire` behind the router (while requests are traced).
pub(super) async fn acquire<S: Store>(
    State(state): State<AppState<S>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    decide(&state, &body).await
}

/// `POST /v1/acquire` answered before the router: the body read as the
/// connection gives it, the state borrowed rather than cloned.
pub(super) async fn acquire_hot<S: Store, B>(
    state: &AppState<S>,
    request: http::Request<B>,
) -> Response
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match read_json(request).await {
        Ok(body) => decide(state, &body).await.into_response(),
        Err(error) => error.into_response(),
    }
}

/// The answer to the body of a `POST /v1/acquire`.
async fn decide<S: Store>(state: &AppState<S>, body: &[u8]) -> Result<Response, ApiError> {
    let request = request::parse_acquire(body, &state.bounds)?;
    let Some(rules) = state.limiter.rules_for(&request.key, &request.rules) else {
        return Err(no_rules(state));
    };
    // Leases and waits in boxes of their own: held inline, their futures
    // (a timer among them) would make every decision's as large, and the
    // hot route allocates and copies that future whole per request.
    if let Some(time) = request.lease {
        let lease = super::leases::acquire_lease(state.clone(), &request, &rules, time);
        return Box::pin(lease).await;
    }
    if !request.max_wait.is_zero() {
        return Box::pin(acquire_waiting(state, &request, &rules)).await;
    }
    let answer = state
        .limiter
        .acquire(&request.key, &rules, request.cost)
        .await?;
    let status = if answer.decision.allowed() {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    Ok(decision_response(status, &answer))
}

/// `POST /v1/acquire` with `max_wait_ms`: a request that does not fit now
/// reserves the earliest time it fits, if that is within its wait, and is
/// answered 200 then, with `waited_ms`: a sleep, no store call and no
/// worker held. Beyond its wait it is answered 429 at once, and beyond
/// `--max-waiting` waiting requests 503 `too_many_waiting`. A client
/// that leaves while it waits gives its place back (the guard drops with
/// the handler); its reservation stays used.
async fn acquire_waiting<S: Store>(
    state: &AppState<S>,
    request: &AcquireRequest,
    rules: &[slidegate::Rule],
) -> Result<Response, ApiError> {
    let Some(_place) = state.waiting.enter() else {
        return Err(ApiError::new(
            ErrorCode::TooManyWaiting,
            "as many requests as --max-waiting allows are already waiting; try again, or without max_wait_ms",
        ));
    };
    let (answer, wait) = state
        .limiter
        .reserve(&request.key, rules, request.cost, request.max_wait)
        .await?;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    if !answer.decision.allowed() {
        return Ok(decision_response(StatusCode::TOO_MANY_REQUESTS, &answer));
    }
    // The decision's fields, then how long it waited (rounded up).
    let mut body = DecisionBody::from(&answer.decision).to_json();
    body.pop();
    body.push_str(",\"waited_ms\":");
    body.push_str(itoa::Buffer::new().format(micros_to_ms_up(wait)));
    body.push('}');
    Ok(respond(StatusCode::OK, &answer, body))
}

/// The answer to a key named alone that has no limit set: a 400 as for a
/// request without a rule, or a 503 while the runtime limits were never
/// read (the key may have one: never decided as "no limit").
fn no_rules<S>(state: &AppState<S>) -> ApiError {
    if state.runtime.as_ref().is_some_and(|r| !r.read()) {
        return ApiError::new(
            ErrorCode::StoreUnavailable,
            "the runtime limits could not be read yet, and this request names no limit of its own",
        );
    }
    ApiError::new(
        ErrorCode::MissingField,
        "the field \"limit\" is required (or \"rules\"), unless a limit is set for the key with PUT /v1/keys/{key}/limit",
    )
}

fn micros_to_ms_up(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// `GET /v1/keys/{key}`: a read, so 200 even when a request would be denied.
/// Another client's remaining quota is the operator's business: with an
/// admin token set, only requests carrying it may look.
pub(super) async fn peek<S: Store>(
    _reader: KeyReader,
    State(state): State<AppState<S>>,
    key: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
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
    let answer = state.limiter.peek(&request.key, request.rule).await?;
    if request.rule.algorithm() == slidegate::Algorithm::Concurrency {
        // The places held: what a concurrency limit is about.
        let held = request
            .rule
            .limit()
            .saturating_sub(answer.decision.remaining());
        let mut body = DecisionBody::from(&answer.decision).to_json();
        body.pop();
        body.push_str(",\"held\":");
        body.push_str(itoa::Buffer::new().format(held));
        body.push('}');
        return Ok(respond(StatusCode::OK, &answer, body));
    }
    Ok(decision_response(StatusCode::OK, &answer))
}

fn decision_response(status: StatusCode, answer: &AdhocDecision) -> Response {
    respond(
        status,
        answer,
        DecisionBody::from(&answer.decision).to_json(),
    )
}

/// A decision's answer with `body`, its JSON. Made as it is sent: axum's
/// `(status, String)` answer would first mark it `text/plain`.
fn respond(status: StatusCode, answer: &AdhocDecision, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers::insert(
        response.headers_mut(),
        answer,
        status == StatusCode::TOO_MANY_REQUESTS,
    );
    response
}
