//! What the runtime limits routes share: the `If-Match` precondition,
//! the `ETag` of an entry, the runtime limits of the state, and how their
//! refusals are answered.

use axum::response::Response;
use http::header::{ETAG, IF_MATCH};
use http::{HeaderMap, HeaderValue};

use super::error::{ApiError, ErrorCode};
use super::state::AppState;
use crate::rules::DomainRefused;
use crate::runtime::{RuntimeError, RuntimeLimits};

/// The version `If-Match` names (`"7"`, or `7`): the write is made only
/// if the entry is at that version (`"0"`: only if there is none).
pub(super) fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<u64>().map(Some).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "If-Match must name one version, as the ETag gives it: If-Match: \"7\"",
        )
    })
}

/// Sets `ETag: "VERSION"`.
pub(super) fn with_etag(mut response: Response, version: u64) -> Response {
    if let Ok(value) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(ETAG, value);
    }
    response
}

/// The state's runtime limits, or a 404 when the server has none.
pub(super) fn runtime_of<S>(state: &AppState<S>) -> Result<&RuntimeLimits, ApiError> {
    state.runtime.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "this server does not serve the runtime limits API",
        )
    })
}

/// The answer to a refused change.
pub(super) fn refused(error: RuntimeError, what: &str) -> ApiError {
    match error {
        RuntimeError::VersionMismatch { current } => ApiError::new(
            ErrorCode::VersionMismatch,
            format!(
                "{what} is at version {current}, not the one If-Match names: read it again, then retry with If-Match: \"{current}\""
            ),
        ),
        RuntimeError::NotFound => {
            ApiError::new(ErrorCode::NotFound, format!("{what} has no runtime limit"))
        }
        RuntimeError::TooManyKeys { .. } => {
            ApiError::new(ErrorCode::TooManyRuntimeKeys, error.to_string())
        }
        RuntimeError::TooManyDomains { .. } => {
            ApiError::new(ErrorCode::TooManyRuntimeDomains, error.to_string())
        }
        RuntimeError::DomainInFile => ApiError::new(
            ErrorCode::DomainDefinedInFile,
            format!(
                "{what} is defined in a rule file: the files stay the operator's, and a runtime domain must be a domain of its own"
            ),
        ),
        RuntimeError::Refused(DomainRefused::Invalid(error)) => {
            ApiError::new(ErrorCode::InvalidConfig, error.to_string())
        }
        RuntimeError::Refused(DomainRefused::OtherDomain { named }) => ApiError::new(
            ErrorCode::DomainMismatch,
            format!(
                "the body names the domain \"{}\", not the path's {what}",
                named.escape_default()
            ),
        ),
        RuntimeError::Unavailable(message) => {
            tracing::warn!(%message, "a runtime limit could not be written");
            ApiError::new(ErrorCode::StoreUnavailable, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_takes_a_quoted_or_bare_version() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(IF_MATCH, HeaderValue::from_str(value).unwrap());
            if_match(&headers)
        };
        assert_eq!(if_match(&HeaderMap::new()), Ok(None));
        assert_eq!(with("\"7\""), Ok(Some(7)));
        assert_eq!(with("W/\"7\""), Ok(Some(7)));
        assert_eq!(with("0"), Ok(Some(0)));
        assert!(with("*").is_err());
        assert!(with("\"7\", \"8\"").is_err());
    }
}
