//! `GET /v1/config/domains`, and `PUT`, `GET` and `DELETE
//! /v1/config/domains/{domain}`: Envoy domains set at run time, in the
//! envoyproxy/ratelimit form the files use (YAML or JSON by
//! `Content-Type`), checked by the code that loads files.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use serde_json::json;
use slidegate::Store;

use super::auth::{KeyReader, Writer};
use super::body::LimitBody;
use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use super::versions::{if_match, refused, runtime_of, with_etag};

fn domain_of(domain: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(domain) = domain.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the domain in the path is not valid: {e}"),
        )
    })?;
    if domain.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "the domain is empty",
        ));
    }
    Ok(domain)
}

fn named(domain: &str) -> String {
    format!("the domain \"{}\"", domain.escape_default())
}

/// `GET /v1/config/domains`: every domain in force, with its origin
/// (`file` or `runtime`) and, for a runtime one, its version.
pub(super) async fn list<S: Store>(
    _reader: KeyReader,
    State(state): State<AppState<S>>,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let config = state.limiter.config().load().to_json();
    let domains: Vec<_> = config["domains"]
        .as_array()
        .map(|domains| {
            domains
                .iter()
                .map(|d| {
                    let mut item = json!({"domain": d["domain"], "origin": d["origin"]});
                    if d["origin"] == "runtime" {
                        item["version"] = d["version"].clone();
                    } else {
                        item["files"] = d["files"].clone();
                    }
                    item
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Json(json!({"runtime": runtime.status(), "domains": domains})).into_response())
}

/// `GET /v1/config/domains/{domain}`: a runtime domain as it was sent
/// (its `Content-Type`, an `ETag` of its version); a file's domain as
/// `/v1/config` shows it.
pub(super) async fn get<S: Store>(
    _reader: KeyReader,
    State(state): State<AppState<S>>,
    domain: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let domain = domain_of(domain)?;
    let config = state.limiter.config().load();
    if config.in_files(&domain) {
        let json = config.to_json();
        let found = json["domains"]
            .as_array()
            .and_then(|ds| ds.iter().find(|d| d["domain"] == domain.as_str()).cloned())
            .unwrap_or_default();
        return Ok(Json(found).into_response());
    }
    let Some(set) = runtime.domain(&domain).await else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("{} is not configured", named(&domain)),
        ));
    };
    let content_type = if set.format == "yaml" {
        "application/yaml"
    } else {
        "application/json"
    };
    let mut response = set.text.into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(with_etag(response, set.version))
}

/// `PUT /v1/config/domains/{domain}`.
pub(super) async fn put<S: Store>(
    writer: Writer,
    State(state): State<AppState<S>>,
    domain: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let domain = domain_of(domain)?;
    let expected = if_match(&headers)?;
    let body = LimitBody::read(request, runtime.bounds().max_body_bytes, &["json", "yaml"]).await?;
    let version = runtime
        .put_domain(&domain, &body.text, body.format, expected, &writer.who)
        .await
        .map_err(|e| refused(e, &named(&domain)))?;
    Ok(with_etag(
        Json(json!({"domain": domain, "version": version})).into_response(),
        version,
    ))
}

/// `DELETE /v1/config/domains/{domain}`.
pub(super) async fn delete<S: Store>(
    writer: Writer,
    State(state): State<AppState<S>>,
    domain: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let runtime = runtime_of(&state)?;
    let domain = domain_of(domain)?;
    let expected = if_match(&headers)?;
    let version = runtime
        .delete_domain(&domain, expected, &writer.who)
        .await
        .map_err(|e| refused(e, &named(&domain)))?;
    Ok(Json(json!({"domain": domain, "deleted": true, "version": version})).into_response())
}
