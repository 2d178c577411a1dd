//! `GET /v1/keys/{key}`: its query string.

use std::time::Duration;

use super::fields::{parse_algorithm, parse_block, parse_rule, pick, with_options};
use super::parsed::PeekRequest;
use crate::api::http::error::ApiError;
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

const PEEK_PARAMS: [&str; 4] = ["limit", "window_ms", "algorithm", "block_ms"];

/// Parses the query of `GET /v1/keys/{key}`: `limit`, `window_ms` and an
/// optional `algorithm` and `block_ms` (to see the key's lockout under a
/// rule that has one), each at most once, within the ad-hoc `bounds`.
pub fn parse_peek(
    key: String,
    query: Vec<(String, String)>,
    bounds: &RequestBounds,
) -> Result<PeekRequest, ApiError> {
    let members = query
        .into_iter()
        .map(|(name, value)| (name, JsonNode::String(value)))
        .collect();
    let [limit, window_ms, algorithm, block_ms] = pick(members, &PEEK_PARAMS, "")?;
    // Digits only: `u64::from_str` would also take a leading `+`.
    let number = |node: Option<JsonNode>| match node {
        Some(JsonNode::String(text)) => match text.parse::<u64>() {
            Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Some(JsonNode::Unsigned(n)),
            _ => Some(JsonNode::String(text)),
        },
        other => other,
    };
    let algorithm = parse_algorithm(algorithm)?;
    let block = parse_block(number(block_ms), bounds)?.unwrap_or(Duration::ZERO);
    let rule = parse_rule(number(limit), number(window_ms), algorithm, bounds)
        .and_then(|rule| with_options(rule, false, block))?;
    Ok(PeekRequest { key, rule })
}
