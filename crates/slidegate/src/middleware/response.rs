//! What the middleware answers when it does not pass a request on: an
//! `application/problem+json` HTTP response, or a gRPC status.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::head::RequestHead;
use super::key::NoKey;
use super::policies::PolicyDecisions;
use crate::decision::Decision;
use crate::error::Error;
use crate::headers;
use crate::rate::Rule;

/// `Slidegate-Degraded: true` marks a response whose request was decided by
/// the store-failure policy (or by a store's own fallback) instead of the
/// store itself.
pub const DEGRADED: HeaderName = HeaderName::from_static("slidegate-degraded");

/// The problem type of a 429 (draft-ietf-httpapi-ratelimit-headers).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of a 503 sent when the store failed and the policy
/// denies (draft-ietf-httpapi-ratelimit-headers).
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// Why the middleware answered a request itself. Passed to the
/// [`on_rejection`](super::RateLimitBuilder::on_rejection) hook.
///
/// | rejection | HTTP | gRPC |
/// |---|---|---|
/// | `RateLimited` | 429, `quota-exceeded` problem, `Retry-After`, `RateLimit`, `RateLimit-Policy` | `RESOURCE_EXHAUSTED`, the same headers as metadata, `RetryInfo` details |
/// | `CostTooHigh` | 413 | `RESOURCE_EXHAUSTED` without retry metadata |
/// | `MissingKey` | the configured 4xx (400 by default) | the matching code (`INVALID_ARGUMENT`, `UNAUTHENTICATED`, `PERMISSION_DENIED`, ...) |
/// | `StoreFailure` | 503, `temporary-reduced-capacity` problem, `Retry-After`, `Slidegate-Degraded` | `UNAVAILABLE`, `retry-after`, `RetryInfo` |
/// | `StoreFull` | 429, `Retry-After`, `Slidegate-Degraded` | `RESOURCE_EXHAUSTED`, `retry-after`, `RetryInfo` |
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// The request is over a limit.
    RateLimited {
        /// The decision of the policy that denied it, or, when several
        /// did, of the one that makes the client wait longest: its
        /// `retry_after` is the wait after which the request would pass
        /// (`Retry-After`).
        decision: Decision,
        /// The name of that policy.
        policy: &'a str,
        /// That policy's rule.
        rule: Rule,
        /// Every policy's own decision, in the order of the rules; the
        /// [`violated`](PolicyDecisions::violated) ones denied.
        policies: PolicyDecisions<'a>,
    },
    /// The request costs more than a rule's whole limit: it can never pass.
    CostTooHigh {
        /// The request's cost.
        cost: u64,
        /// The smallest limit among the rules.
        limit: u64,
    },
    /// The request has no key and [`MissingKey::Reject`](super::MissingKey::Reject) applies.
    MissingKey {
        /// Why the key is missing.
        reason: NoKey,
        /// The status to answer with.
        status: StatusCode,
    },
    /// The store failed and [`OnStoreError::Deny`](super::OnStoreError::Deny)
    /// applies, or the store refused the layer's request (a configuration
    /// it does not accept), which is always answered so.
    StoreFailure {
        /// The store's error.
        error: &'a Error,
        /// The wait suggested to the client.
        retry_after: Duration,
    },
    /// The store is full ([`Error::StoreFull`]: its keys or bytes; or
    /// [`Error::TooManyRules`]: the key's rules) and could not make room
    /// for this request. Always denied, whatever the
    /// [`OnStoreError`](super::OnStoreError) policy: a full store is what a
    /// flood of new clients causes, and must not open the gate.
    StoreFull {
        /// The store's error.
        error: &'a Error,
        /// The wait suggested to the client: idle keys are swept by then.
        retry_after: Duration,
    },
}

/// Everything the default responses need beyond the rejection.
pub(crate) struct Context<'a> {
    /// The request's content type when it is gRPC (`application/grpc...`).
    pub grpc: Option<&'a HeaderValue>,
    /// `RateLimit-Policy`.
    pub policy_header: &'a HeaderValue,
}

/// The request's content type when it is a gRPC call: `application/grpc`,
/// optionally followed by `+proto`, `+json`, `-web`, ... or parameters.
pub(crate) fn grpc_content_type<'a>(request: &RequestHead<'a>) -> Option<&'a HeaderValue> {
    let value = request.headers.get(CONTENT_TYPE)?;
    value
        .as_bytes()
        .starts_with(b"application/grpc")
        .then_some(value)
}

/// The response the middleware sends for `rejection` unless a hook changes it.
pub(crate) fn default_response(rejection: &Rejection<'_>, cx: &Context<'_>) -> Response<Bytes> {
    let mut headers = HeaderMap::new();
    let (status, problem, retry) = match *rejection {
        Rejection::RateLimited {
            decision, policies, ..
        } => {
            headers.insert(headers::RATELIMIT_POLICY, policies.policy_header().clone());
            headers.insert(headers::RATELIMIT, policies.ratelimit_header());
            let wait = headers::retry_after(&decision);
            headers.insert(RETRY_AFTER, HeaderValue::from(wait));
            if decision.degraded() {
                headers.insert(DEGRADED, HeaderValue::from_static("true"));
            }
            let problem = Problem {
                kind: QUOTA_EXCEEDED,
                title: "Request cannot be satisfied as assigned quota has been exceeded",
                status: StatusCode::TOO_MANY_REQUESTS,
                detail: quota_detail(&policies, wait),
                violated_policies: policies.violated().map(|policy| policy.name).collect(),
                grpc_code: GrpcCode::ResourceExhausted,
            };
            (problem.status, problem, Some(decision.retry_after()))
        }
        Rejection::CostTooHigh { cost, limit } => {
            headers.insert(headers::RATELIMIT_POLICY, cx.policy_header.clone());
            let problem = Problem {
                kind: "about:blank",
                title: "Content Too Large",
                status: StatusCode::PAYLOAD_TOO_LARGE,
                detail: format!(
                    "the request costs {cost} units, more than the limit of {limit}: it can never pass"
                ),
                violated_policies: Vec::new(),
                grpc_code: GrpcCode::ResourceExhausted,
            };
            (problem.status, problem, None)
        }
        Rejection::MissingKey { reason, status } => {
            let problem = Problem {
                kind: "about:blank",
                title: status.canonical_reason().unwrap_or("Bad Request"),
                status,
                detail: format!("no rate-limit key: {reason}"),
                violated_policies: Vec::new(),
                grpc_code: GrpcCode::from_http(status),
            };
            (status, problem, None)
        }
        Rejection::StoreFull { retry_after, .. } => {
            let secs = whole_seconds(retry_after);
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
            headers.insert(DEGRADED, HeaderValue::from_static("true"));
            let problem = Problem {
                kind: "about:blank",
                title: "Too Many Requests",
                status: StatusCode::TOO_MANY_REQUESTS,
                detail: format!(
                    "the rate limiter is full and cannot count this request; retry in {secs} s"
                ),
                violated_policies: Vec::new(),
                grpc_code: GrpcCode::ResourceExhausted,
            };
            (problem.status, problem, Some(retry_after))
        }
        Rejection::StoreFailure { retry_after, .. } => {
            let secs = whole_seconds(retry_after);
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
            headers.insert(DEGRADED, HeaderValue::from_static("true"));
            let problem = Problem {
                kind: TEMPORARY_REDUCED_CAPACITY,
                title: "Temporarily reduced capacity",
                status: StatusCode::SERVICE_UNAVAILABLE,
                detail: format!("the rate limiter cannot decide now; retry in {secs} s"),
                violated_policies: Vec::new(),
                grpc_code: GrpcCode::Unavailable,
            };
            (problem.status, problem, Some(retry_after))
        }
    };
    match cx.grpc {
        Some(content_type) => grpc_response(headers, content_type, &problem, retry),
        None => {
            headers.insert(CONTENT_TYPE, PROBLEM_JSON);
            let mut response = Response::new(Bytes::from(problem.to_json()));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    }
}

/// A wait in whole seconds for `Retry-After`: rounded up, at least 1.
fn whole_seconds(wait: Duration) -> u64 {
    let secs = wait.as_micros().div_ceil(1_000_000).max(1);
    u64::try_from(secs).unwrap_or(u64::MAX)
}

/// The problem's `detail` for a denial: which quotas are used up, and the
/// wait in seconds.
fn quota_detail(policies: &PolicyDecisions<'_>, wait: u64) -> String {
    let violated: Vec<_> = policies.violated().collect();
    let mut out = String::from(if violated.len() > 1 {
        "the quotas "
    } else {
        "the quota "
    });
    for (i, policy) in violated.iter().enumerate() {
        if i > 0 {
            out.push_str(if i + 1 == violated.len() {
                " and "
            } else {
                ", "
            });
        }
        let _ = write!(out, "{} of policy \"{}\"", policy.rule.rate(), policy.name);
    }
    let verb = if violated.len() > 1 { "are" } else { "is" };
    let _ = write!(out, " {verb} used up; retry in {wait} s");
    out
}

/// An RFC 9457 problem, and its gRPC counterpart.
struct Problem<'a> {
    kind: &'static str,
    title: &'static str,
    status: StatusCode,
    detail: String,
    violated_policies: Vec<&'a str>,
    grpc_code: GrpcCode,
}

impl Problem<'_> {
    fn to_json(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("{\"type\":");
        push_json_string(&mut out, self.kind);
        out.push_str(",\"title\":");
        push_json_string(&mut out, self.title);
        let _ = write!(out, ",\"status\":{},\"detail\":", self.status.as_u16());
        push_json_string(&mut out, &self.detail);
        if !self.violated_policies.is_empty() {
            out.push_str(",\"violated-policies\":[");
            for (i, policy) in self.violated_policies.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(&mut out, policy);
            }
            out.push(']');
        }
        out.push('}');
        out
    }
}

fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The gRPC status codes the middleware uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GrpcCode {
    InvalidArgument = 3,
    NotFound = 5,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Unavailable = 14,
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The code for a 4xx chosen for HTTP.
    fn from_http(status: StatusCode) -> GrpcCode {
        match status {
            StatusCode::UNAUTHORIZED => GrpcCode::Unauthenticated,
            StatusCode::FORBIDDEN => GrpcCode::PermissionDenied,
            StatusCode::NOT_FOUND => GrpcCode::NotFound,
            StatusCode::TOO_MANY_REQUESTS => GrpcCode::ResourceExhausted,
            StatusCode::PRECONDITION_FAILED | StatusCode::PRECONDITION_REQUIRED => {
                GrpcCode::FailedPrecondition
            }
            _ => GrpcCode::InvalidArgument,
        }
    }
}

/// A gRPC "Trailers-Only" response: HTTP 200, no body, the status in the
/// headers, the HTTP headers kept as metadata.
fn grpc_response(
    mut headers: HeaderMap,
    content_type: &HeaderValue,
    problem: &Problem<'_>,
    retry: Option<Duration>,
) -> Response<Bytes> {
    headers.insert(CONTENT_TYPE, content_type.clone());
    headers.insert(GRPC_STATUS, HeaderValue::from(problem.grpc_code as u16));
    if let Ok(message) = HeaderValue::try_from(grpc_percent_encode(&problem.detail)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    let details = grpc_status_details(problem.grpc_code, &problem.detail, retry);
    if let Ok(details) = HeaderValue::try_from(base64(&details)) {
        headers.insert(GRPC_STATUS_DETAILS, details);
    }
    let mut response = Response::new(Bytes::new());
    *response.headers_mut() = headers;
    response
}

/// `grpc-message` encoding: printable ASCII but `%` as is, the rest `%XX`.
fn grpc_percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A `google.rpc.Status` message, with a `google.rpc.RetryInfo` detail when
/// there is a wait to suggest, encoded as protobuf by hand (three nested
/// messages do not justify a code generator).
fn grpc_status_details(code: GrpcCode, message: &str, retry: Option<Duration>) -> Vec<u8> {
    let mut status = Vec::with_capacity(128);
    push_varint_field(&mut status, 1, code as u64);
    push_bytes_field(&mut status, 2, message.as_bytes());
    if let Some(retry) = retry {
        let mut duration = Vec::new();
        push_varint_field(&mut duration, 1, retry.as_secs());
        push_varint_field(&mut duration, 2, u64::from(retry.subsec_nanos()));
        let mut retry_info = Vec::new();
        push_bytes_field(&mut retry_info, 1, &duration);
        let mut any = Vec::new();
        push_bytes_field(&mut any, 1, b"type.googleapis.com/google.rpc.RetryInfo");
        push_bytes_field(&mut any, 2, &retry_info);
        push_bytes_field(&mut status, 3, &any);
    }
    status
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A varint field; zero is the default and is left out, as protobuf does.
fn push_varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    if value != 0 {
        push_varint(out, field << 3);
        push_varint(out, value);
    }
}

fn push_bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    push_varint(out, (field << 3) | 2);
    push_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Standard base64 with padding, as `-bin` metadata is sent.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, output) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), output);
        }
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(grpc_percent_encode("50% off, é"), "50%25 off, %C3%A9");
    }

    #[test]
    fn problem_json_escapes_its_strings() {
        let problem = Problem {
            kind: QUOTA_EXCEEDED,
            title: "t",
            status: StatusCode::TOO_MANY_REQUESTS,
            detail: "a \"b\" \\ \n".into(),
            violated_policies: vec!["p\"0", "p1"],
            grpc_code: GrpcCode::ResourceExhausted,
        };
        assert_eq!(
            problem.to_json(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"t","status":429,"detail":"a \"b\" \\ \u000a","violated-policies":["p\"0","p1"]}"#
        );
    }

    #[test]
    fn status_details_encode_retry_info() {
        let bytes = grpc_status_details(
            GrpcCode::ResourceExhausted,
            "m",
            Some(Duration::from_millis(1500)),
        );
        let type_url = b"type.googleapis.com/google.rpc.RetryInfo";
        let mut expected = vec![0x08, 8, 0x12, 1, b'm', 0x1a];
        // Any = type_url (2 + 40 bytes) + value (2 + RetryInfo)
        // RetryInfo = field 1 (2 + Duration); Duration = secs 1, nanos 500_000_000.
        let duration = [0x08, 1, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01];
        let retry_info_len = 2 + duration.len();
        let any_len = 2 + type_url.len() + 2 + retry_info_len;
        expected.push(any_len as u8);
        expected.extend([0x0a, type_url.len() as u8]);
        expected.extend(type_url);
        expected.extend([0x12, retry_info_len as u8, 0x0a, duration.len() as u8]);
        expected.extend(duration);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn http_statuses_map_to_grpc_codes() {
        assert_eq!(
            GrpcCode::from_http(StatusCode::UNAUTHORIZED),
            GrpcCode::Unauthenticated
        );
        assert_eq!(
            GrpcCode::from_http(StatusCode::FORBIDDEN),
            GrpcCode::PermissionDenied
        );
        assert_eq!(
            GrpcCode::from_http(StatusCode::BAD_REQUEST),
            GrpcCode::InvalidArgument
        );
    }
}
