//! The status page: `GET /ui` (and its script and style under `/ui/`),
//! `GET /v1/stats` (what it shows) and `GET /v1/config` (the rules in
//! force). The page is static HTML, JS and CSS compiled into the binary; it
//! polls `/v1/stats` and `/v1/config` and writes client data (keys) with
//! `textContent` only.
//!
//! Keys are client data, and the config names the server's files: with an
//! admin token set, `/ui`, `/v1/stats` and `/v1/config` answer only
//! requests carrying it (see `http/auth.rs`), which a browser asks
//! for and then sends with the page's own requests.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

use super::auth::PageReader;
use super::error::{ApiError, ErrorCode};
use super::state::AppState;

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

/// The page loads nothing but its own script and style, and fetches only
/// from its own origin.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`.
pub(super) async fn page(_reader: PageReader) -> Response {
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
pub(super) async fn stats<S>(_reader: PageReader, State(state): State<AppState<S>>) -> Response {
    let snapshot = state.telemetry.snapshot(state.limiter.config());
    no_store(Json(snapshot).into_response())
}

/// `GET /v1/config`: the rules in force.
pub(super) async fn config<S>(_reader: PageReader, State(state): State<AppState<S>>) -> Response {
    let mut config = state.limiter.config().load().to_json();
    if let Some(runtime) = &state.runtime {
        config["runtime"] = runtime.status();
    }
    no_store(Json(config).into_response())
}

fn static_file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    // `nosniff` is set on every answer, by the API's layer.
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
