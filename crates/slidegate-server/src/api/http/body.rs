//! Reading a JSON request body: `Content-Type` checked (415), size bounded
//! (413), and an oversized `Content-Length` refused before a single byte of
//! the body is read, so a client cannot hold a task by announcing a body it
//! never sends.

use std::pin::pin;

use axum::BoxError;
use axum::body::{Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use http::HeaderMap;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::{ApiError, ErrorCode};

/// The largest request body accepted: 64 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The raw bytes of a JSON body of at most [`MAX_BODY_BYTES`].
#[derive(Debug)]
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<JsonBody, ApiError> {
        read_json(request).await.map(JsonBody)
    }
}

/// The body of `request`, checked and bounded as [`JsonBody`]'s, read
/// from the body type the connection gives: the hot routes call it
/// without boxing the body first.
pub(super) async fn read_json<B>(request: http::Request<B>) -> Result<Bytes, ApiError>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    // hyper's body knows its `Content-Length`: its bound is read there,
    // without a second look-up and parse of the header. A body that does
    // not know its length is judged by the header, as before.
    let hint = request.body().size_hint();
    match hint.upper() {
        Some(length) if length > MAX_BODY_BYTES as u64 => return Err(too_large()),
        Some(_) => {}
        None => check_length(request.headers())?,
    }
    // A body of a known length is whole once that many bytes came: the
    // poll that would only learn it has ended is not made.
    let length = hint.exact();
    check_content_type(request.headers())?;
    let mut body = pin!(Limited::new(request.into_body(), MAX_BODY_BYTES));
    // A small body comes in one frame: kept as it came, not copied
    // into a list of buffers first.
    let mut first: Option<Bytes> = None;
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(read_error)?.into_data() else {
            continue;
        };
        match (&mut joined, first.take()) {
            (Some(joined), _) => joined.extend_from_slice(&data),
            (None, None) => {
                let whole = length == Some(data.len() as u64);
                first = Some(data);
                if whole {
                    break;
                }
            }
            (None, Some(earlier)) => {
                let mut both = Vec::with_capacity(earlier.len() + data.len());
                both.extend_from_slice(&earlier);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(match joined {
        Some(joined) => Bytes::from(joined),
        None => first.unwrap_or_default(),
    })
}

/// A runtime limit's body: JSON, or for a domain's rules YAML too (the
/// `Content-Type` says which, 415 otherwise), of at most
/// `--max-runtime-body-bytes` (413 naming the flag).
#[derive(Debug)]
pub(super) struct LimitBody {
    /// `json` or `yaml`.
    pub(super) format: &'static str,
    /// The body as UTF-8 text.
    pub(super) text: String,
}

/// The body's format from its `Content-Type`: `json`, `yaml`, or `None`.
fn format_of(headers: &HeaderMap) -> Option<&'static str> {
    let essence = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())?;
    if essence.eq_ignore_ascii_case("application/json") {
        return Some("json");
    }
    ["application/yaml", "application/x-yaml", "text/yaml"]
        .iter()
        .any(|t| essence.eq_ignore_ascii_case(t))
        .then_some("yaml")
}

impl LimitBody {
    /// Reads `request`'s body, of at most `max` bytes, in one of `formats`.
    pub(super) async fn read(
        request: Request,
        max: usize,
        formats: &[&'static str],
    ) -> Result<LimitBody, ApiError> {
        let too_large = || {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the body is larger than {max} bytes, the most --max-runtime-body-bytes allows"
                ),
            )
        };
        let announced = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|length| length > max as u64) {
            return Err(too_large());
        }
        let format = format_of(request.headers())
            .filter(|f| formats.contains(f))
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::UnsupportedMediaType,
                    if formats.contains(&"yaml") {
                        "send the body as Content-Type: application/json or application/yaml"
                    } else {
                        "send the body as JSON with the header Content-Type: application/json"
                    },
                )
            })?;
        let bytes = Limited::new(request.into_body(), max)
            .collect()
            .await
            .map_err(|error| {
                if error.downcast_ref::<LengthLimitError>().is_some() {
                    too_large()
                } else {
                    ApiError::new(
                        ErrorCode::InvalidRequest,
                        format!("cannot read the request body: {error}"),
                    )
                }
            })?
            .to_bytes();
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| ApiError::new(ErrorCode::InvalidRequest, "the body is not UTF-8 text"))?;
        Ok(LimitBody { format, text })
    }
}

fn read_error(error: Box<dyn std::error::Error + Send + Sync>) -> ApiError {
    if error.downcast_ref::<LengthLimitError>().is_some() {
        return too_large();
    }
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("cannot read the request body: {error}"),
    )
}

fn check_length(headers: &HeaderMap) -> Result<(), ApiError> {
    let announced = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match announced {
        Some(length) if length > MAX_BODY_BYTES as u64 => Err(too_large()),
        _ => Ok(()),
    }
}

fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let value = headers.get(CONTENT_TYPE);
    // What nearly every client sends, settled without reading the value
    // as text, splitting and trimming it.
    if value.is_some_and(|v| v.as_bytes() == b"application/json") {
        return Ok(());
    }
    let essence = value
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim());
    match essence {
        Some(essence) if essence.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the body as JSON with the header Content-Type: application/json",
        )),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    )
}
