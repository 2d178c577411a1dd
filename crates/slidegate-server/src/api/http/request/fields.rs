//! Reading the fields of a request, each mistake with its own code and
//! a message that names the field: shared by every request parser.

use std::time::Duration;

use slidegate::{Algorithm, Rate, Rule};

use super::parsed::MAX_WAIT_MS;
use crate::api::http::error::{ApiError, ErrorCode};
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

pub(super) fn parse_report(report: Option<JsonNode>) -> Result<Option<bool>, ApiError> {
    match report {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::Bool(report)) => Ok(Some(report)),
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidReport,
            format!("\"report\" must be true or false, got {}", other.brief()),
        )),
    }
}

/// `block_ms`: 0 for none, otherwise 1 ms up to the longest ad-hoc window.
pub(super) fn parse_block(
    block_ms: Option<JsonNode>,
    bounds: &RequestBounds,
) -> Result<Option<Duration>, ApiError> {
    let max = bounds.max_adhoc_window.min(Rate::MAX_WINDOW);
    match block_ms {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::Unsigned(ms)) if u128::from(ms) <= max.as_millis() => {
            Ok(Some(Duration::from_millis(ms)))
        }
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidBlock,
            format!(
                "\"block_ms\" must be a whole number of milliseconds from 0 to {} (--max-adhoc-window), got {}",
                max.as_millis(),
                other.brief()
            ),
        )),
    }
}

/// `burst`: absent (or null), or 1 up to the largest ad-hoc limit.
pub(super) fn parse_burst(
    burst: Option<JsonNode>,
    bounds: &RequestBounds,
) -> Result<Option<u64>, ApiError> {
    let max = bounds.max_adhoc_limit.min(Rate::MAX_LIMIT);
    match burst {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::Unsigned(n)) if (1..=max).contains(&n) => Ok(Some(n)),
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidBurst,
            format!(
                "\"burst\" must be a whole number from 1 to {max} (--max-adhoc-limit), got {}",
                other.brief()
            ),
        )),
    }
}

/// The algorithm of a rule: the one named, else `gcra` when it has a
/// burst (the one algorithm with a burst), else the default.
pub(super) fn algorithm_for(named: Option<Algorithm>, burst: Option<u64>) -> Algorithm {
    match (named, burst) {
        (Some(algorithm), _) => algorithm,
        (None, Some(_)) => Algorithm::Gcra,
        (None, None) => Algorithm::default(),
    }
}

/// `rule` with the `burst` asked for, if any.
pub(super) fn with_burst(rule: Rule, burst: Option<u64>) -> Result<Rule, ApiError> {
    match burst {
        None => Ok(rule),
        Some(burst) => rule
            .with_burst(burst)
            .map_err(|e| ApiError::new(ErrorCode::InvalidBurst, format!("\"burst\": {e}"))),
    }
}

/// `rule` with the options asked for.
pub(super) fn with_options(rule: Rule, report: bool, block: Duration) -> Result<Rule, ApiError> {
    let rule = if report { rule.reporting() } else { rule };
    rule.block_for(block)
        .map_err(|e| ApiError::new(ErrorCode::InvalidBlock, format!("\"block_ms\": {e}")))
}

pub(super) fn parse_max_wait(max_wait_ms: Option<JsonNode>) -> Result<Duration, ApiError> {
    match max_wait_ms {
        None | Some(JsonNode::Null) => Ok(Duration::ZERO),
        Some(JsonNode::Unsigned(ms)) if ms <= MAX_WAIT_MS => Ok(Duration::from_millis(ms)),
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidMaxWait,
            format!(
                "\"max_wait_ms\" must be a whole number of milliseconds from 0 to {MAX_WAIT_MS}, got {}",
                other.brief()
            ),
        )),
    }
}

/// Parses a body that must be one JSON object.
pub(super) fn parse_object(body: &[u8]) -> Result<Vec<(String, JsonNode)>, ApiError> {
    match serde_json::from_slice::<JsonNode>(body) {
        Ok(JsonNode::Object(members)) => Ok(members),
        Ok(other) => Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body must be a JSON object, got {}", other.kind()),
        )),
        Err(error) => Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {error}"),
        )),
    }
}

/// Sorts an object's members into the fields `names`, in that order,
/// refusing unknown and repeated names. `place` prefixes field names in
/// messages (`rules[1].`).
pub(super) fn pick<const N: usize>(
    members: Vec<(String, JsonNode)>,
    names: &[&str; N],
    place: &str,
) -> Result<[Option<JsonNode>; N], ApiError> {
    let mut fields: [Option<JsonNode>; N] = std::array::from_fn(|_| None);
    for (name, value) in members {
        let Some(index) = names.iter().position(|n| *n == name) else {
            return Err(ApiError::new(
                ErrorCode::UnknownField,
                format!(
                    "unknown field \"{place}{}\"; expected {}",
                    truncate(&name),
                    names.join(", ")
                ),
            ));
        };
        if fields[index].replace(value).is_some() {
            return Err(ApiError::new(
                ErrorCode::DuplicateField,
                format!("\"{place}{name}\" is given more than once"),
            ));
        }
    }
    Ok(fields)
}

pub(super) fn parse_rule(
    limit: Option<JsonNode>,
    window_ms: Option<JsonNode>,
    algorithm: Algorithm,
    bounds: &RequestBounds,
) -> Result<Rule, ApiError> {
    let max_limit = bounds.max_adhoc_limit.min(Rate::MAX_LIMIT);
    let max_window = bounds.max_adhoc_window.min(Rate::MAX_WINDOW);
    let limit_error = |got: &str| {
        ApiError::new(
            ErrorCode::InvalidLimit,
            format!(
                "\"limit\" must be a whole number from 1 to {max_limit} (--max-adhoc-limit), got {got}"
            ),
        )
    };
    let window_error = |got: &str| {
        ApiError::new(
            ErrorCode::InvalidWindow,
            format!(
                "\"window_ms\" must be a whole number of milliseconds from {} to {} (--max-adhoc-window), got {got}",
                Rate::MIN_WINDOW.as_millis(),
                max_window.as_millis()
            ),
        )
    };
    let limit = match limit {
        Some(JsonNode::Unsigned(limit)) if (1..=max_limit).contains(&limit) => limit,
        Some(other) => return Err(limit_error(&other.brief())),
        None => return Err(missing("limit")),
    };
    let window_ms = match window_ms {
        Some(JsonNode::Unsigned(ms)) if ms >= 1 && u128::from(ms) <= max_window.as_millis() => ms,
        Some(other) => return Err(window_error(&other.brief())),
        // A concurrency rule's window only bounds its leases: the longest
        // window allowed, unless the client names one.
        None if algorithm == Algorithm::Concurrency => {
            u64::try_from(max_window.as_millis()).unwrap_or(u64::MAX)
        }
        None => return Err(missing("window_ms")),
    };
    let rate = Rate::new(limit, Duration::from_millis(window_ms)).map_err(|e| match e {
        slidegate::Error::InvalidLimit { .. } => limit_error(&limit.to_string()),
        slidegate::Error::InvalidWindow { .. } => window_error(&window_ms.to_string()),
        other => ApiError::from(other),
    })?;
    Ok(Rule::new(rate).with_algorithm(algorithm))
}

/// The algorithm a field names, if it names one.
pub(super) fn parse_named_algorithm(
    algorithm: Option<JsonNode>,
) -> Result<Option<Algorithm>, ApiError> {
    match algorithm {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::String(name)) => name.parse().map(Some).map_err(|_| {
            ApiError::new(
                ErrorCode::UnknownAlgorithm,
                format!(
                    "unknown algorithm \"{}\"; expected sliding_log, sliding_counter, fixed_window or gcra",
                    truncate(&name)
                ),
            )
        }),
        Some(other) => Err(ApiError::new(
            ErrorCode::UnknownAlgorithm,
            format!(
                "\"algorithm\" must be a string (sliding_log, sliding_counter, fixed_window or gcra), got {}",
                other.kind()
            ),
        )),
    }
}

pub(super) fn missing(field: &str) -> ApiError {
    ApiError::new(
        ErrorCode::MissingField,
        format!("the field \"{field}\" is required"),
    )
}

/// Echoes at most 64 characters of caller-supplied text in a message.
pub(super) fn truncate(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}
