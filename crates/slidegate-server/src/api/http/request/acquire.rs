//! `POST /v1/acquire`: its body read at once in the common shape
//! ([`fast`](super::fast)), or through a JSON tree with every mistake
//! named.

use std::time::Duration;

use slidegate::{Algorithm, Rule};

use super::fast;
use super::fields::{
    algorithm_for, missing, parse_block, parse_burst, parse_max_wait, parse_named_algorithm,
    parse_object, parse_report, parse_rule, pick, with_burst, with_options,
};
use super::parsed::{AcquireRequest, MAX_RULES_PER_REQUEST};
use crate::api::http::error::{ApiError, ErrorCode};
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

const ACQUIRE_FIELDS: [&str; 11] = [
    "key",
    "limit",
    "window_ms",
    "cost",
    "algorithm",
    "rules",
    "max_wait_ms",
    "report",
    "block_ms",
    "burst",
    "lease_ms",
];
const RULE_FIELDS: [&str; 6] = [
    "limit",
    "window_ms",
    "algorithm",
    "report",
    "block_ms",
    "burst",
];
/// Parses the body of `POST /v1/acquire`:
/// `{"key":"k","limit":100,"window_ms":60000,"cost":1,"algorithm":"sliding_log"}`,
/// or `{"key":"k","rules":[{"limit":..,"window_ms":..,"algorithm":..},..],"cost":1}`.
/// A top-level `algorithm` is the default of rules that name none, and so
/// are `report` (record the cost whatever the answer), `block_ms` (lock
/// the key out this long once a rule denies it) and `burst` (a `gcra`
/// bucket of that many units; a rule with a burst and no algorithm named
/// is a `gcra` rule). `null` stands for an
/// absent optional field. Limits, windows and blocks are ad-hoc: at most
/// `bounds.max_adhoc_limit` and `bounds.max_adhoc_window`.
pub fn parse_acquire(body: &[u8], bounds: &RequestBounds) -> Result<AcquireRequest, ApiError> {
    match fast::parse_acquire(body, bounds) {
        Some(request) => Ok(request),
        None => parse_acquire_tree(body, bounds),
    }
}

/// [`parse_acquire`] through a JSON tree: every shape, every mistake named.
pub(super) fn parse_acquire_tree(
    body: &[u8],
    bounds: &RequestBounds,
) -> Result<AcquireRequest, ApiError> {
    let members = parse_object(body)?;
    let [
        key,
        limit,
        window_ms,
        cost,
        algorithm,
        rules,
        max_wait_ms,
        report,
        block_ms,
        burst,
        lease_ms,
    ] = pick(members, &ACQUIRE_FIELDS, "")?;
    let key = match key {
        Some(JsonNode::String(key)) => key,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidKey,
                format!("\"key\" must be a string, got {}", other.kind()),
            ));
        }
        None => return Err(missing("key")),
    };
    let names_a_rule = [
        &limit, &window_ms, &algorithm, &rules, &report, &block_ms, &burst,
    ]
    .iter()
    .any(|field| !matches!(field, None | Some(JsonNode::Null)));
    let defaults = RuleDefaults {
        algorithm: parse_named_algorithm(algorithm)?,
        report: parse_report(report)?.unwrap_or(false),
        block: parse_block(block_ms, bounds)?.unwrap_or(Duration::ZERO),
        burst: parse_burst(burst, bounds)?,
    };
    let rules = match (rules, limit, window_ms) {
        (Some(rules), None, None) => parse_rules(rules, &defaults, bounds)?,
        (Some(_), _, _) => {
            return Err(ApiError::new(
                ErrorCode::ConflictingFields,
                "give either \"rules\" or \"limit\" and \"window_ms\", not both",
            ));
        }
        // The key alone: decided under the limits set for it at run time.
        (None, None, None) if !names_a_rule => Vec::new(),
        (None, limit, window_ms) => {
            let algorithm = algorithm_for(defaults.algorithm, defaults.burst);
            let rule = parse_rule(limit, window_ms, algorithm, bounds)?;
            let rule = with_burst(rule, defaults.burst)?;
            vec![with_options(rule, defaults.report, defaults.block)?]
        }
    };
    let cost = match cost {
        None | Some(JsonNode::Null) => 1,
        Some(JsonNode::Unsigned(cost)) => cost,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidCost,
                format!(
                    "\"cost\" must be a whole number from 0 to {}, got {}",
                    u64::MAX,
                    other.brief()
                ),
            ));
        }
    };
    let max_wait = parse_max_wait(max_wait_ms)?;
    if !max_wait.is_zero() && rules.iter().any(Rule::reports) {
        return Err(ApiError::new(
            ErrorCode::ConflictingFields,
            "a request that reports usage (\"report\": true) cannot wait: leave out \"max_wait_ms\"",
        ));
    }
    let lease = parse_lease(lease_ms, bounds)?;
    if lease.is_none()
        && rules
            .iter()
            .any(|r| r.algorithm() == Algorithm::Concurrency)
        && cost > 0
    {
        return Err(ApiError::new(
            ErrorCode::MissingField,
            "a concurrency rule holds places by leases: give \"lease_ms\" (or \"cost\": 0 to see what is held)",
        ));
    }
    Ok(AcquireRequest {
        key: key.into(),
        rules: rules.into(),
        cost,
        max_wait,
        lease,
    })
}

/// `lease_ms`: from 1 ms to `--max-adhoc-window` (the library then holds
/// it to the shortest window of the request's rules).
fn parse_lease(
    lease_ms: Option<JsonNode>,
    bounds: &RequestBounds,
) -> Result<Option<Duration>, ApiError> {
    let max = bounds.max_adhoc_window.min(slidegate::Rate::MAX_WINDOW);
    match lease_ms {
        None | Some(JsonNode::Null) => Ok(None),
        Some(JsonNode::Unsigned(ms)) if ms >= 1 && u128::from(ms) <= max.as_millis() => {
            Ok(Some(Duration::from_millis(ms)))
        }
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidLease,
            format!(
                "\"lease_ms\" must be a whole number of milliseconds from 1 to {} (and at most the window), got {}",
                max.as_millis(),
                other.brief()
            ),
        )),
    }
}

/// What a rule of `rules` takes from the request when it says nothing.
#[derive(Default)]
pub(super) struct RuleDefaults {
    /// The algorithm named at the top level, if any.
    algorithm: Option<Algorithm>,
    report: bool,
    block: Duration,
    burst: Option<u64>,
}

pub(super) fn parse_rules(
    rules: JsonNode,
    defaults: &RuleDefaults,
    bounds: &RequestBounds,
) -> Result<Vec<Rule>, ApiError> {
    let items = match rules {
        JsonNode::Array(items) if !items.is_empty() && items.len() <= MAX_RULES_PER_REQUEST => {
            items
        }
        JsonNode::Array(items) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRules,
                format!(
                    "\"rules\" must hold 1 to {MAX_RULES_PER_REQUEST} rules, got {}",
                    items.len()
                ),
            ));
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidRules,
                format!(
                    "\"rules\" must be an array of rule objects, got {}",
                    other.kind()
                ),
            ));
        }
    };
    let mut rules: Vec<Rule> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let place = format!("rules[{i}]");
        let JsonNode::Object(members) = item else {
            return Err(ApiError::new(
                ErrorCode::InvalidRules,
                format!(
                    "{place} must be an object such as {{\"limit\":100,\"window_ms\":60000}}, got {}",
                    item.kind()
                ),
            ));
        };
        let [limit, window_ms, algorithm, report, block_ms, burst] =
            pick(members, &RULE_FIELDS, &format!("{place}."))?;
        let burst = parse_burst(burst, bounds)
            .map_err(|e| e.at(&place))?
            .or(defaults.burst);
        let named = parse_named_algorithm(algorithm)
            .map_err(|e| e.at(&place))?
            .or(defaults.algorithm);
        let algorithm = algorithm_for(named, burst);
        let report = parse_report(report)
            .map_err(|e| e.at(&place))?
            .unwrap_or(defaults.report);
        let block = parse_block(block_ms, bounds)
            .map_err(|e| e.at(&place))?
            .unwrap_or(defaults.block);
        let rule = parse_rule(limit, window_ms, algorithm, bounds)
            .and_then(|rule| with_burst(rule, burst))
            .and_then(|rule| with_options(rule, report, block))
            .map_err(|e| e.at(&place))?;
        if let Some(j) = rules.iter().position(|r| r.same_state(&rule)) {
            return Err(ApiError::new(
                ErrorCode::InvalidRules,
                format!("{place} repeats rules[{j}]"),
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}
