//! `PUT`, `GET` and `DELETE /v1/keys/{key}/limit`: the per-key limits set
//! at run time, which `POST /v1/acquire {"key": ...}` decides under.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::HeaderMap;
use serde_json::json;
use slidegate::{Rule, Store};

use super::auth::{KeyReader, Writer};
use super::body::LimitBody;
use super::error::{ApiError, ErrorCode};
use super::request::parse_limit;
use super::state::AppState;
use super::versions::{if_match, refused, runtime_of, with_etag};
use crate::keys;
use crate::runtime::rule_json;

fn key_of(key: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(key) = key.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidKey,
            format!("the key in the path is not valid: {e}"),
        )
    })?;
    keys::adhoc_key(&key)?;
    Ok(key)
}

fn answer(key: &str, rules: &[Rule], version: u64) -> Response {
    let rules: Vec<_> = rules.iter().map(rule_json).collect();
    with_etag(
        Json(json!({"key": key, "rules": rules, "version": version})).into_response(),
        version,
    )
}

/// `PUT /v1/keys/{key}/limit`.
pub(super) async fn put<S: Store + 'static>(
    writer: Writer,
    State(state): State<AppState<S>>,
    key: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?.clone();
    let key = key_of(key)?;
    let expected = if_match(&headers)?;
    let body = LimitBody::read(request, runtime.bounds().max_body_bytes, &["json"]).await?;
    let rules = parse_limit(body.text.as_bytes(), &state.bounds)?;
    // The change and the carry-over of what was used, in a task of their
    // own: a client that hangs up between them would otherwise leave the
    // key a fresh quota under its new limit.
    let change = tokio::spawn(async move {
        let before = runtime.key(&key);
        let version = runtime
            .put_key(&key, &rules, expected, &writer.who)
            .await
            .map_err(|e| refused(e, "the key"))?;
        if let Some(before) = before
            && let Err(error) = state.limiter.carry_over(&key, before.rules(), &rules).await
        {
            // The limit is changed; what the key used may count afresh.
            tracing::warn!(%key, %error, "what the key used under its old limit could not be carried over");
        }
        Ok::<_, ApiError>(answer(&key, &rules, version))
    });
    change.await.map_err(|e| {
        ApiError::new(
            ErrorCode::StoreUnavailable,
            format!("the change did not end: {e}"),
        )
    })?
}

/// `GET /v1/keys/{key}/limit`.
pub(super) async fn get<S: Store>(
    _reader: KeyReader,
    State(state): State<AppState<S>>,
    key: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let key = key_of(key)?;
    let limits = runtime
        .key(&key)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, "no limit is set for this key"))?;
    Ok(answer(&key, limits.rules(), limits.version()))
}

/// `DELETE /v1/keys/{key}/limit`.
pub(super) async fn delete<S: Store>(
    writer: Writer,
    State(state): State<AppState<S>>,
    key: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let key = key_of(key)?;
    let expected = if_match(&headers)?;
    let version = runtime
        .delete_key(&key, expected, &writer.who)
        .await
        .map_err(|e| refused(e, "the key"))?;
    Ok(Json(json!({"key": key, "deleted": true, "version": version})).into_response())
}
