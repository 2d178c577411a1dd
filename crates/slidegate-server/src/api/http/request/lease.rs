//! `POST /v1/leases/{id}/commit` and `DELETE /v1/leases/{id}`: their body
//! and query.

use super::fields::{missing, parse_object, pick};
use crate::api::http::error::{ApiError, ErrorCode};
use crate::api::http::json::JsonNode;

const COMMIT_FIELDS: [&str; 2] = ["cost", "key"];
const RELEASE_PARAMS: [&str; 1] = ["key"];

/// A parsed commit: the cost the work took, and the key the lease must be
/// for (optional).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRequest {
    /// The actual cost (the library bounds it by `Rate::MAX_LIMIT`).
    pub cost: u64,
    /// The lease's key, when the client names it.
    pub key: Option<String>,
}

/// Parses `{"cost": N, "key"?: "k"}`.
pub fn parse_commit(body: &[u8]) -> Result<CommitRequest, ApiError> {
    let members = parse_object(body)?;
    let [cost, key] = pick(members, &COMMIT_FIELDS, "")?;
    let cost = match cost {
        Some(JsonNode::Unsigned(cost)) => cost,
        None | Some(JsonNode::Null) => return Err(missing("cost")),
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidCost,
                format!(
                    "\"cost\" must be a whole number from 0 to {}, got {}",
                    slidegate::Rate::MAX_LIMIT,
                    other.brief()
                ),
            ));
        }
    };
    Ok(CommitRequest {
        cost,
        key: parse_key(key)?,
    })
}

/// Parses the query of a release: an optional `key`.
pub fn parse_release(query: Vec<(String, String)>) -> Result<Option<String>, ApiError> {
    let members = query
        .into_iter()
        .map(|(name, value)| (name, JsonNode::String(value)))
        .collect();
    let [key] = pick(members, &RELEASE_PARAMS, "")?;
    parse_key(key)
}

fn parse_key(key: Option<JsonNode>) -> Result<Option<String>, ApiError> {
    match key {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::String(key)) => Ok(Some(key)),
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidKey,
            format!("\"key\" must be a string, got {}", other.kind()),
        )),
    }
}
