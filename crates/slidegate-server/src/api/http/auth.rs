//! The admin token check every protected route shares: `GET` and `DELETE
//! /v1/keys/{key}`, the status page, `/v1/stats` and `/v1/config`. Each
//! takes one of the extractors here ([`KeyReader`], [`PageReader`],
//! [`Admin`]) as its first argument, so the check runs before anything of
//! the request is read; all three call [`refusal`].
//!
//! The token is accepted as `Authorization: Bearer TOKEN`, or as the
//! password of HTTP Basic authentication (any user name), which a browser
//! asks for and then sends with the page's own requests. The scheme's name
//! is case-insensitive (RFC 9110, section 11.1): `bearer` and `BASIC` work.

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{HeaderMap, HeaderValue};

use super::error::{ApiError, ErrorCode};
use super::state::AppState;

/// A request to a route that is open while no admin token is set, and
/// needs it once one is (`GET /v1/keys/{key}`): an API client's, asked
/// for a Bearer token.
#[derive(Debug)]
pub(super) struct KeyReader;

/// Like [`KeyReader`], for the routes a browser opens (the status page,
/// `/v1/stats`, `/v1/config`): asked for Basic credentials first.
#[derive(Debug)]
pub(super) struct PageReader;

/// A request to an admin route (`DELETE /v1/keys/{key}`): refused 403
/// while no admin token is set, and without the token once one is.
#[derive(Debug)]
pub(super) struct Admin;

impl<S: Send + Sync> FromRequestParts<AppState<S>> for KeyReader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState<S>) -> Result<Self, Response> {
        match state.admin_token.as_deref() {
            Some(token) => match refusal(token, &parts.headers, Challenge::Bearer) {
                Some(refused) => Err(refused),
                None => Ok(KeyReader),
            },
            None => Ok(KeyReader),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<AppState<S>> for PageReader {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState<S>) -> Result<Self, Response> {
        match state.admin_token.as_deref() {
            Some(token) => match refusal(token, &parts.headers, Challenge::Browser) {
                Some(refused) => Err(refused),
                None => Ok(PageReader),
            },
            None => Ok(PageReader),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<AppState<S>> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState<S>) -> Result<Self, Response> {
        let Some(token) = state.admin_token.as_deref() else {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "the admin API is disabled; start the server with --admin-token to enable it",
            )
            .into_response());
        };
        match refusal(token, &parts.headers, Challenge::Bearer) {
            Some(refused) => Err(refused),
            None => Ok(Admin),
        }
    }
}

/// A request that changes the runtime limits: refused 403
/// `admin_token_not_configured` while no admin token is set, and without
/// the token once one is. Carries who made the change, as logged: a
/// digest of the token, never the token.
#[derive(Debug)]
pub(super) struct Writer {
    /// `token:` and the first 8 hex digits of the token's digest.
    pub(super) who: String,
}

impl<S: Send + Sync> FromRequestParts<AppState<S>> for Writer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState<S>) -> Result<Self, Response> {
        let Some(token) = state.admin_token.as_deref() else {
            return Err(ApiError::new(
                ErrorCode::AdminTokenNotConfigured,
                "changing limits at run time needs an admin token: start the server with --admin-token TOKEN or --admin-token-file PATH, and send it as `Authorization: Bearer TOKEN`",
            )
            .into_response());
        };
        match refusal(token, &parts.headers, Challenge::Bearer) {
            Some(refused) => Err(refused),
            None => Ok(Writer { who: who(token) }),
        }
    }
}

/// How logs name the holder of `token`.
fn who(token: &str) -> String {
    let digest = slidegate::store::key_digest(token.as_bytes());
    format!("token:{:08x}", (digest >> 96) as u32)
}

/// Which login a `401` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Challenge {
    /// An API client: `WWW-Authenticate: Bearer`.
    Bearer,
    /// A route a browser opens: Basic first (the browser shows its login
    /// prompt), then Bearer.
    Browser,
}

/// `None` when the request carries `token`; otherwise the answer to give
/// instead: 401 when it carries no credentials of either scheme, 403 when
/// they are wrong.
fn refusal(token: &str, headers: &HeaderMap, challenge: Challenge) -> Option<Response> {
    let Some(given) = presented(headers) else {
        let mut response = ApiError::new(
            ErrorCode::Unauthorized,
            "send the admin token as `Authorization: Bearer TOKEN` (or as the password of HTTP Basic authentication)",
        )
        .into_response();
        let challenges = response.headers_mut();
        if challenge == Challenge::Browser {
            challenges.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"slidegate\", charset=\"UTF-8\""),
            );
        }
        challenges.append(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Some(response);
    };
    // Credentials that do not decode are wrong credentials, not missing ones.
    let matches = given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()));
    if !matches {
        return Some(ApiError::new(ErrorCode::Forbidden, "wrong admin token").into_response());
    }
    None
}

/// The token a request presents: `None` without credentials of a known
/// scheme, `Some(None)` for Basic credentials that do not decode.
fn presented(headers: &HeaderMap) -> Option<Option<String>> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.trim().split_once(' ')?;
    let credentials = credentials.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(Some(credentials.to_owned()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let password = STANDARD
            .decode(credentials)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|pair| pair.split_once(':').map(|(_, p)| p.to_owned()));
        return Some(password);
    }
    None
}

/// Equal, taking the same time wherever the first difference is (the
/// length itself is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(authorization).unwrap());
        headers
    }

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_is_not() {
        // "anyone:s3cret" in base64.
        for accepted in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER  s3cret ",
            "Basic YW55b25lOnMzY3JldA==",
            "basic YW55b25lOnMzY3JldA==",
        ] {
            assert!(
                refusal("s3cret", &with(accepted), Challenge::Bearer).is_none(),
                "{accepted}"
            );
        }
        for (refused, status) in [
            ("Bearer S3CRET", 403),
            ("Basic !!!", 403),
            ("Bearers3cret", 401),
            ("Token s3cret", 401),
        ] {
            let answer = refusal("s3cret", &with(refused), Challenge::Bearer).expect(refused);
            assert_eq!(answer.status().as_u16(), status, "{refused}");
        }
        assert_eq!(
            refusal("s3cret", &HeaderMap::new(), Challenge::Bearer).map(|r| r.status().as_u16()),
            Some(401)
        );
    }
}
