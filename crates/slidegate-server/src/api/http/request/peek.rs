//! `GET /v1/keys/{key}`: its query string.

use std::time::Duration;

use super::fields::{
    algorithm_for, parse_block, parse_burst, parse_named_algorithm, parse_rule, pick, with_burst,
    with_options,
};
use super::parsed::PeekRequest;
use crate::api::http::error::ApiError;
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

const PEEK_PARAMS: [&str; 5] = ["limit", "window_ms", "algorithm", "block_ms", "burst"];

/// Parses the query of `GET /v1/keys/{key}`: `limit`, `window_ms` and an
/// optional `algorithm`, `block_ms` (to see the key's lockout under a
/// rule that has one) and `burst` (a `gcra` bucket's size: part of the
/// rule's state), each at most once, within the ad-hoc `bounds`.
pub fn parse_peek(
    key: String,
    query: Vec<(String, String)>,
    bounds: &RequestBounds,
) -> Result<PeekRequest, ApiError> {
    let members = query
        .into_iter()
        .map(|(name, value)| (name, JsonNode::String(value)))
        .collect();
    let [limit, window_ms, algorithm, block_ms, burst] = pick(members, &PEEK_PARAMS, "")?;
    // Digits only: `u64::from_str` would also take a leading `+`.
    let number = |node: Option<JsonNode>| match node {
        Some(JsonNode::String(text)) => match text.parse::<u64>() {
            Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Some(JsonNode::Unsigned(n)),
            _ => Some(JsonNode::String(text)),
        },
        other => other,
    };
    let burst = parse_burst(number(burst), bounds)?;
    let algorithm = algorithm_for(parse_named_algorithm(algorithm)?, burst);
    let block = parse_block(number(block_ms), bounds)?.unwrap_or(Duration::ZERO);
    let rule = parse_rule(number(limit), number(window_ms), algorithm, bounds)
        .and_then(|rule| with_burst(rule, burst))
        .and_then(|rule| with_options(rule, false, block))?;
    Ok(PeekRequest { key, rule })
}
