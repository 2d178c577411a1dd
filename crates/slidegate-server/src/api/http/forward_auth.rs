//! `/v1/forward-auth/{domain}` (any method): a proxy's question before it
//! forwards a request (see [`api::forward_auth`](crate::api::forward_auth)
//! for how the request becomes descriptors). 200 when allowed; 429 when
//! denied, or the status of `?deny_status=` (401, 403 or 429) for a proxy
//! that passes only some statuses through (NGINX's `auth_request`: 401 and
//! 403). Both answers carry `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers-10), the denial `Retry-After`,
//! whatever `--response-headers` says: the proxy copies them to its client.

use std::net::SocketAddr;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use slidegate::Store;

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::api::envoy::headers::{self, ResponseHeaders};
use crate::api::forward_auth::{ClientAddress, forwarded_check};
use crate::limiter::check::{CheckError, Code};

/// The statuses `deny_status` may ask for.
const DENY_STATUSES: [u16; 3] = [401, 403, 429];

/// The query string of a forward-auth call. Other parameters are
/// ignored: a proxy may pass its client's own query along (Caddy's
/// `forward_auth` does).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ForwardAuthQuery {
    /// The status of a denial: 429 (the default), 403 or 401.
    #[serde(default)]
    pub deny_status: Option<u16>,
}

/// The body of a forward-auth answer, allowed or denied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForwardAuthBody {
    /// True when the request may pass.
    pub allowed: bool,
    /// The client's `remote_address` descriptor value.
    pub client: String,
    /// When denied, the least wait in milliseconds (rounded up) before the
    /// same request may pass; 0 when allowed.
    pub retry_after_ms: u64,
}

/// `/v1/forward-auth/{domain}`.
pub(super) async fn forward_auth<S: Store>(
    State(state): State<AppState<S>>,
    domain: Result<Path<String>, PathRejection>,
    query: Result<Query<ForwardAuthQuery>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let Path(domain) = domain.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the domain in the path is not valid: {e}"),
        )
    })?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the query string is not valid: {}", e.body_text()),
        )
    })?;
    let deny_status = match query.deny_status {
        None => StatusCode::TOO_MANY_REQUESTS,
        Some(status) if DENY_STATUSES.contains(&status) => {
            StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
        }
        Some(status) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("deny_status {status} is not one of 401, 403, 429"),
            ));
        }
    };
    // Our own listener's peer, else that of a server which attaches it.
    let peer = crate::net::http1::peer().or_else(|| {
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer)
    });
    let Some(peer) = peer else {
        return Err(ApiError::new(
            ErrorCode::InternalError,
            "the connection's peer is unknown",
        ));
    };
    let client = ClientAddress::of(peer.ip(), request.headers(), &state.trusted_proxies)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))?;
    let config = state.limiter.config().load_full();
    if !config.has_domain(&domain) {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "no rules for this domain: load its YAML with --config",
        ));
    }
    let check = forwarded_check(
        &domain,
        request.method().as_str(),
        request.headers(),
        client,
        config.forward_auth_headers(&domain),
    )
    .map_err(|e| ApiError::new(ErrorCode::MissingField, e.to_string()))?;
    let response = match state.limiter.check(&config, &check).await {
        Ok(response) => response,
        Err(CheckError::Store(error)) => return Err(error.into()),
        Err(other) => return Err(ApiError::new(ErrorCode::InvalidRequest, other.to_string())),
    };
    let allowed = response.overall == Code::Ok;
    let retry_after_ms = if allowed {
        0
    } else {
        response
            .statuses
            .iter()
            .filter(|s| s.code() == Code::OverLimit)
            .map(|s| s.duration_until_reset().as_micros().div_ceil(1000))
            .max()
            .map_or(0, |ms| u64::try_from(ms).unwrap_or(u64::MAX))
    };
    let body = ForwardAuthBody {
        allowed,
        client: client.descriptor_value(),
        retry_after_ms,
    };
    let status = if allowed { StatusCode::OK } else { deny_status };
    let mut answer = (status, Json(body)).into_response();
    for (name, value) in headers::fields(ResponseHeaders::Draft10, &domain, &response) {
        // Digits, `;`, `=`, `,` and printable ASCII names: valid values.
        if let Ok(value) = HeaderValue::from_str(&value) {
            answer
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
    }
    Ok(answer)
}
