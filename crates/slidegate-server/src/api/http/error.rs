//! Every error the API answers, as `{"error":{"code":"...","message":"..."}}`.
//!
//! The codes are stable, snake_case, and part of the API: clients may match
//! on them. The messages are for people and may change.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use serde::Serialize;

/// The stable code of an error, and the HTTP status it is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The body is not JSON, not UTF-8, or not a JSON object.
    InvalidJson,
    /// A required field (or query parameter) is absent.
    MissingField,
    /// A field (or query parameter) the API does not know; rejected so a
    /// typo such as `"windowms"` is not silently ignored.
    UnknownField,
    /// A field given twice.
    DuplicateField,
    /// Fields that cannot be used together (`rules` with `limit`/`window_ms`).
    ConflictingFields,
    /// The key is not a string, is empty, or has braces that do not form a
    /// `{hash tag}`. (A long key is not an error: it is counted under its
    /// digest.)
    InvalidKey,
    /// The limit is not a whole number from 1 to `--max-adhoc-limit`
    /// (1,000,000 by default).
    InvalidLimit,
    /// The window is not a whole number of milliseconds from 1 ms to
    /// `--max-adhoc-window` (1 day by default).
    InvalidWindow,
    /// The cost is not a whole number from 0 to 2^64-1.
    InvalidCost,
    /// The algorithm is not one of `sliding_log`, `sliding_counter`,
    /// `fixed_window`, `gcra`.
    UnknownAlgorithm,
    /// `rules` is not a non-empty array of rule objects, has too many, or
    /// repeats a rule.
    InvalidRules,
    /// The cost is above a rule's limit: such a request can never pass.
    CostExceedsLimit,
    /// The key already holds as many rules as `--max-rules-per-key`
    /// allows, all in use: a new rule on it is refused until one is idle.
    TooManyRules,
    /// Any other bad request.
    InvalidRequest,
    /// No such route.
    NotFound,
    /// The admin route needs `Authorization: Bearer TOKEN`.
    Unauthorized,
    /// The admin token is wrong, or the admin API is disabled.
    Forbidden,
    /// The route exists, but not for this method (see the `Allow` header).
    MethodNotAllowed,
    /// The request did not complete in time.
    RequestTimeout,
    /// The body is larger than the limit (64 KiB; for the runtime limits,
    /// `--max-runtime-body-bytes`).
    PayloadTooLarge,
    /// The body is not sent as `Content-Type: application/json` (or, for a
    /// domain's rules, `application/yaml`).
    UnsupportedMediaType,
    /// The store holds a value at the request's key that slidegate did not
    /// write (another type of Redis value, another application's string):
    /// that key is refused, answered 409 until the value is removed, while
    /// every other key is decided as usual. Not a store outage: no failure
    /// policy applies to it.
    KeyConflict,
    /// `max_wait_ms` is not a whole number of milliseconds from 0 to
    /// 5,000.
    InvalidMaxWait,
    /// `report` is not `true` or `false`.
    InvalidReport,
    /// `block_ms` is not a whole number of milliseconds from 0 to
    /// `--max-adhoc-window`.
    InvalidBlock,
    /// `burst` is not a whole number from 1 to `--max-adhoc-limit`, is
    /// given with another algorithm than `gcra`, or would take more than
    /// 10 years to refill (`burst × window / limit`).
    InvalidBurst,
    /// The request asked to wait (`max_wait_ms`), and as many requests as
    /// `--max-waiting` allows are already waiting: answered 503 at once,
    /// nothing recorded. Try again, or without waiting.
    TooManyWaiting,
    /// A write to the runtime limits, and no admin token is configured
    /// (`--admin-token` or `--admin-token-file`): 403.
    AdminTokenNotConfigured,
    /// A new per-key limit beyond `--max-runtime-keys`: 409.
    TooManyRuntimeKeys,
    /// A new runtime domain beyond `--max-runtime-domains`: 409.
    TooManyRuntimeDomains,
    /// A runtime write to a domain that a rule file defines: 409.
    DomainDefinedInFile,
    /// The domain named in the body is not the one in the path: 400.
    DomainMismatch,
    /// A domain's rules do not load (the message says where in the body,
    /// as `request body:LINE:COLUMN`): 400.
    InvalidConfig,
    /// `If-Match` names another version than the entry's: 412.
    VersionMismatch,
    /// `lease_ms` is not a whole number of milliseconds from 1 to the
    /// shortest window of the request's rules, or the lease cannot be
    /// granted as asked (rules with `report` or `block_ms`, concurrency
    /// rules beside rules of a rate, a cost of 0).
    InvalidLease,
    /// No lease has this id for this key: never given out, forgotten, or
    /// another key's (not told apart). 404.
    LeaseNotFound,
    /// The lease is no longer open: its time ran out (a budget is then
    /// charged in full) or it was already committed or released. Nothing
    /// changed. 409.
    LeaseExpired,
    /// A commit of a lease of places (a concurrency lease): release it
    /// instead. 409.
    NotCommittable,
    /// The store holds as many open leases as `--max-leases` allows: 503,
    /// nothing recorded.
    TooManyLeases,
    /// The store failed or could not be reached.
    StoreUnavailable,
    /// `/readyz`: a source of rules (the xDS control plane) has not sent
    /// them yet, so the limits of its domains are not known.
    RulesPending,
    /// A bug or a misconfiguration of the service, never bad input.
    InternalError,
}

impl ErrorCode {
    /// The HTTP status this code is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::KeyConflict
            | ErrorCode::TooManyRuntimeKeys
            | ErrorCode::TooManyRuntimeDomains
            | ErrorCode::DomainDefinedInFile
            | ErrorCode::LeaseExpired
            | ErrorCode::NotCommittable => StatusCode::CONFLICT,
            ErrorCode::LeaseNotFound => StatusCode::NOT_FOUND,
            ErrorCode::AdminTokenNotConfigured => StatusCode::FORBIDDEN,
            ErrorCode::VersionMismatch => StatusCode::PRECONDITION_FAILED,
            ErrorCode::StoreUnavailable
            | ErrorCode::TooManyWaiting
            | ErrorCode::RulesPending
            | ErrorCode::TooManyLeases => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The code that stands for a bare status answered by the framework or
    /// a middleware (a 405 from routing, a 408 from the timeout).
    fn for_status(status: StatusCode) -> ErrorCode {
        match status {
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
            StatusCode::FORBIDDEN => ErrorCode::Forbidden,
            StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
            StatusCode::REQUEST_TIMEOUT => ErrorCode::RequestTimeout,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            StatusCode::SERVICE_UNAVAILABLE => ErrorCode::StoreUnavailable,
            s if s.is_client_error() => ErrorCode::InvalidRequest,
            _ => ErrorCode::InternalError,
        }
    }
}

/// An error answer: a code, a message, and the JSON body they make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    code: ErrorCode,
    message: String,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: ErrorCode,
    message: &'a str,
}

impl ApiError {
    /// An error with `code` and a message for people.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error, its message prefixed with where it happened
    /// (`rules[1]: ...`).
    pub fn at(self, place: &str) -> ApiError {
        ApiError {
            message: format!("{place}: {}", self.message),
            ..self
        }
    }

    fn body(&self) -> Vec<u8> {
        let envelope = Envelope {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        };
        // Serializing a struct of a unit enum and a string cannot fail.
        serde_json::to_vec(&envelope).unwrap_or_default()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body()));
        *response.status_mut() = self.code.status();
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// The one place where library errors become HTTP answers.
///
/// Bad input is a 400 with the matching code. A store failure is, for now,
/// a 503 `store_unavailable`: this is where a failure policy (deny, allow,
/// or decide locally) will take over.
impl From<slidegate::Error> for ApiError {
    fn from(error: slidegate::Error) -> ApiError {
        use slidegate::Error as E;
        if let E::TooManyRules { max } = error {
            tracing::debug!(max, "too many rules on a key");
            return ApiError::new(
                ErrorCode::TooManyRules,
                format!(
                    "the key already holds {max} rules in use, the most --max-rules-per-key allows; \
                     use fewer distinct rules per key, or retry once one of them is idle"
                ),
            );
        }
        if let E::TooManyLeases { max } = error {
            tracing::warn!(max, "too many open leases");
            return ApiError::new(
                ErrorCode::TooManyLeases,
                format!(
                    "the store holds {max} open leases, the most --max-leases allows: \
                     nothing was recorded; retry once leases are committed, released or expired"
                ),
            );
        }
        let code = match &error {
            E::InvalidLease(_) => ErrorCode::InvalidLease,
            E::LeaseRequired => ErrorCode::MissingField,
            E::LeaseNotFound => ErrorCode::LeaseNotFound,
            E::LeaseExpired => ErrorCode::LeaseExpired,
            E::NotCommittable => ErrorCode::NotCommittable,
            E::Unsupported(_) => ErrorCode::InternalError,
            E::InvalidLimit { .. } => ErrorCode::InvalidLimit,
            E::InvalidWindow { .. } => ErrorCode::InvalidWindow,
            E::UnknownAlgorithm(_) => ErrorCode::UnknownAlgorithm,
            E::CostExceedsLimit { .. } => ErrorCode::CostExceedsLimit,
            E::InvalidBlock { .. } => ErrorCode::InvalidBlock,
            E::InvalidBurst { .. } => ErrorCode::InvalidBurst,
            E::ReportCannotWait => ErrorCode::ConflictingFields,
            E::InvalidKey(_) | E::CrossSlot { .. } => ErrorCode::InvalidKey,
            E::NoRules => ErrorCode::InvalidRules,
            E::KeyConflict { .. } => ErrorCode::KeyConflict,
            E::Config(_) => ErrorCode::InternalError,
            e if e.is_store_failure() => ErrorCode::StoreUnavailable,
            _ => ErrorCode::InvalidRequest,
        };
        match code {
            ErrorCode::StoreUnavailable | ErrorCode::KeyConflict => {
                tracing::warn!(%error, "store failure")
            }
            ErrorCode::InternalError => tracing::error!(%error, "cannot decide"),
            _ => tracing::debug!(%error, "bad request"),
        }
        ApiError::new(code, error.to_string())
    }
}

/// Gives every error answered without a JSON body (axum's 405, the
/// timeout's 408, ...) the API's JSON error body (applied to every answer
/// by [`ApiLayer`](super::ApiLayer)),
/// keeping its status and its other headers (such as `Allow`).
pub fn json_errors(response: Response) -> Response {
    let status = response.status();
    // The status first: a success is never rewritten, and its type is
    // not looked up.
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let code = ErrorCode::for_status(status);
    // The `Allow` header of a 405 is added after this middleware runs.
    let message = match code {
        ErrorCode::MethodNotAllowed => {
            "method not allowed on this route; the Allow header lists the methods it accepts"
                .to_owned()
        }
        _ => status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase(),
    };
    let error = ApiError::new(code, message);
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(error.body()))
}

/// The answer to a handler that panicked: a JSON 500, and the process goes on.
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(ErrorCode::InternalError, "internal error").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_in_snake_case() {
        let body = ApiError::new(ErrorCode::CostExceedsLimit, "x").body();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "cost_exceeds_limit");
        assert_eq!(json["error"]["message"], "x");
    }

    #[tokio::test]
    async fn bare_error_responses_get_the_json_body_and_keep_their_status() {
        let bare = Response::builder()
            .status(StatusCode::REQUEST_TIMEOUT)
            .header(CONTENT_LENGTH, "0")
            .body(Body::empty())
            .unwrap();
        let mapped = json_errors(bare);
        assert_eq!(mapped.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(mapped.headers()[CONTENT_TYPE], "application/json");
        assert!(mapped.headers().get(CONTENT_LENGTH).is_none());
        let body = axum::body::to_bytes(mapped.into_body(), 1024)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "request_timeout");
    }

    #[tokio::test]
    async fn json_and_successful_responses_pass_unchanged() {
        let own = ApiError::new(ErrorCode::InvalidKey, "mine").into_response();
        let passed = json_errors(own);
        let body = axum::body::to_bytes(passed.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(body, ApiError::new(ErrorCode::InvalidKey, "mine").body());
        let ok = json_errors(Response::new(Body::from("fine")));
        assert_eq!(ok.status(), StatusCode::OK);
        let body = axum::body::to_bytes(ok.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"fine");
    }

    #[test]
    fn store_failures_are_503_and_bad_input_is_400() {
        let full = ApiError::from(slidegate::Error::StoreFull {
            bound: slidegate::StoreBound::Keys(1),
        });
        assert_eq!(full.code().status(), StatusCode::SERVICE_UNAVAILABLE);
        let timeout = ApiError::from(slidegate::Error::Timeout(std::time::Duration::from_millis(
            50,
        )));
        assert_eq!(timeout.code(), ErrorCode::StoreUnavailable);
        let key = ApiError::from(slidegate::Error::InvalidKey("empty".into()));
        assert_eq!(key.code(), ErrorCode::InvalidKey);
        assert_eq!(key.code().status(), StatusCode::BAD_REQUEST);
        let rules = ApiError::from(slidegate::Error::TooManyRules { max: 16 });
        assert_eq!(rules.code(), ErrorCode::TooManyRules);
        assert_eq!(rules.code().status(), StatusCode::BAD_REQUEST);
        assert!(rules.message().contains("--max-rules-per-key"));
        let rate = ApiError::from(slidegate::Error::InvalidRate {
            input: "x".into(),
            reason: "y".into(),
        });
        assert_eq!(rate.code().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_key_conflict_is_a_409_naming_the_key() {
        let conflict = ApiError::from(slidegate::Error::KeyConflict {
            key: "login:1".into(),
            detail: "the Redis key \"slidegate:v2:{login:1}:5/1s\" holds a list".into(),
        });
        assert_eq!(conflict.code().status(), StatusCode::CONFLICT);
        let body: serde_json::Value = serde_json::from_slice(&conflict.body()).unwrap();
        assert_eq!(body["error"]["code"], "key_conflict");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("login:1")
        );
    }
}
