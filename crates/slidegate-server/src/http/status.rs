//! The status page: `GET /ui` (and its script and style under `/ui/`),
//! `GET /v1/stats` (what it shows) and `GET /v1/config` (the rules in
//! force). The page is static HTML, JS and CSS compiled into the binary; it
//! polls `/v1/stats` and `/v1/config` and writes client data (keys) with
//! `textContent` only.
//!
//! Keys are client data: with an admin token set, `/ui` and `/v1/stats`
//! answer only requests carrying it, as `Authorization: Bearer TOKEN` or as
//! the password of HTTP Basic authentication (any user name), which a
//! browser asks for and then sends with the page's own requests.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::{ApiError, AppState, ErrorCode, admin};

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const STYLE_CSS: &str = include_str!("../ui/style.css");

/// The page loads nothing but its own script and style, and fetches only
/// from its own origin.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`.
pub(super) async fn page<S>(State(state): State<AppState<S>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let mut response = static_file(INDEX_HTML, "text/html; charset=utf-8");
    response.headers_mut().insert(
        "content-security-policy",
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    response
}

/// `GET /ui/{asset}`: the page's script and style (no client data).
pub(super) async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    match name.as_str() {
        "app.js" => Ok(static_file(APP_JS, "text/javascript; charset=utf-8")),
        "style.css" => Ok(static_file(STYLE_CSS, "text/css; charset=utf-8")),
        _ => Err(ApiError::new(
            ErrorCode::NotFound,
            "no such file; the status page is at GET /ui",
        )),
    }
}

/// `GET /v1/stats`.
pub(super) async fn stats<S>(State(state): State<AppState<S>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let config = state.config.load();
    no_store(Json(crate::stats::global().snapshot(&config)).into_response())
}

/// `GET /v1/config`: the rules in force.
pub(super) async fn config<S>(State(state): State<AppState<S>>) -> Response {
    no_store(Json(state.config.load().to_json()).into_response())
}

fn static_file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `None` when no admin token is set or the request carries it (Bearer,
/// or Basic with it as the password); otherwise the answer to give.
fn refusal<S>(state: &AppState<S>, headers: &HeaderMap) -> Option<Response> {
    let token = state.admin_token.as_deref()?;
    let basic = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "));
    let Some(basic) = basic else {
        let mut refused = admin::refusal(token, headers)?;
        if refused.status() == StatusCode::UNAUTHORIZED {
            // A browser asks for Basic credentials; other clients may use
            // Bearer.
            refused.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"slidegate\", charset=\"UTF-8\""),
            );
            refused
                .headers_mut()
                .append(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return Some(refused);
    };
    let password = STANDARD
        .decode(basic.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|pair| pair.split_once(':').map(|(_, p)| p.to_owned()));
    let mut bearer = HeaderMap::new();
    if let Some(password) = password
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {password}"))
    {
        bearer.insert(AUTHORIZATION, value);
    }
    admin::refusal(token, &bearer)
        .map(|_| ApiError::new(ErrorCode::Forbidden, "wrong admin token").into_response())
}
