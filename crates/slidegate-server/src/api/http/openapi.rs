//! `GET /openapi.json`: the OpenAPI 3.1 document of this API, compiled
//! into the binary. Public (no token): it describes the API, not its data.

use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

/// The OpenAPI document (the file `openapi.json` of this crate, which
/// `docs/openapi.json` links to).
pub const OPENAPI_JSON: &str = include_str!("../../../openapi.json");

/// `GET /openapi.json`.
pub(super) async fn document() -> Response {
    let mut response = OPENAPI_JSON.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // The same for the life of the process: a client may keep it an hour.
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}
