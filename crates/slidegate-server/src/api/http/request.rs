//! Reading the API's requests: a JSON body for `POST /v1/acquire`, a query
//! string for `GET /v1/keys/{key}`. Every mistake gets its own code and a
//! message that names the field.
//!
//! Unknown fields are refused (`unknown_field`), not ignored: in a rate
//! limiter a misspelt `"cost"` or `"window_ms"` would otherwise silently
//! change what is enforced.

use std::time::Duration;

use slidegate::{Algorithm, Rate, Rule};

use super::error::{ApiError, ErrorCode};
use super::json::JsonNode;
use crate::bounds::RequestBounds;

/// The most rules one request may carry.
pub const MAX_RULES: usize = 16;

/// A parsed `POST /v1/acquire`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRequest {
    /// The key to decide for, as the client wrote it: an ad-hoc key (see
    /// [`keyspace::adhoc_key`](crate::keys::adhoc_key)), of any length.
    pub key: String,
    /// One rule, or several decided all-or-nothing. Never empty.
    pub rules: Vec<Rule>,
    /// Units the request consumes; 0 checks without consuming.
    pub cost: u64,
    /// How long the request may wait for its turn when it does not fit
    /// now (`max_wait_ms`, 0 by default: refused at once); at most
    /// [`MAX_WAIT_MS`].
    pub max_wait: Duration,
}

/// The most `max_wait_ms` may ask: 5 s. A waiting request is answered
/// within the API's request timeout (10 s) with room to spare.
pub const MAX_WAIT_MS: u64 = 5_000;

/// A parsed `GET /v1/keys/{key}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekRequest {
    /// The key to look at.
    pub key: String,
    /// The rule to look at it under.
    pub rule: Rule,
}

const ACQUIRE_FIELDS: [&str; 9] = [
    "key",
    "limit",
    "window_ms",
    "cost",
    "algorithm",
    "rules",
    "max_wait_ms",
    "report",
    "block_ms",
];
const RULE_FIELDS: [&str; 5] = ["limit", "window_ms", "algorithm", "report", "block_ms"];
const PEEK_PARAMS: [&str; 4] = ["limit", "window_ms", "algorithm", "block_ms"];

/// Parses the body of `POST /v1/acquire`:
/// `{"key":"k","limit":100,"window_ms":60000,"cost":1,"algorithm":"sliding_log"}`,
/// or `{"key":"k","rules":[{"limit":..,"window_ms":..,"algorithm":..},..],"cost":1}`.
/// A top-level `algorithm` is the default of rules that name none, and so
/// are `report` (record the cost whatever the answer) and `block_ms` (lock
/// the key out this long once a rule denies it). `null` stands for an
/// absent optional field. Limits, windows and blocks are ad-hoc: at most
/// `bounds.max_adhoc_limit` and `bounds.max_adhoc_window`.
pub fn parse_acquire(body: &[u8], bounds: &RequestBounds) -> Result<AcquireRequest, ApiError> {
    match fast::parse_acquire(body, bounds) {
        Some(request) => Ok(request),
        None => parse_acquire_tree(body, bounds),
    }
}

/// [`parse_acquire`] through a JSON tree: every shape, every mistake named.
fn parse_acquire_tree(body: &[u8], bounds: &RequestBounds) -> Result<AcquireRequest, ApiError> {
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
    let defaults = RuleDefaults {
        algorithm: parse_algorithm(algorithm)?,
        report: parse_report(report)?.unwrap_or(false),
        block: parse_block(block_ms, bounds)?.unwrap_or(Duration::ZERO),
    };
    let rules = match (rules, limit, window_ms) {
        (Some(rules), None, None) => parse_rules(rules, &defaults, bounds)?,
        (Some(_), _, _) => {
            return Err(ApiError::new(
                ErrorCode::ConflictingFields,
                "give either \"rules\" or \"limit\" and \"window_ms\", not both",
            ));
        }
        (None, limit, window_ms) => {
            let rule = parse_rule(limit, window_ms, defaults.algorithm, bounds)?;
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
    Ok(AcquireRequest {
        key,
        rules,
        cost,
        max_wait,
    })
}

/// What a rule of `rules` takes from the request when it says nothing.
struct RuleDefaults {
    algorithm: Algorithm,
    report: bool,
    block: Duration,
}

fn parse_report(report: Option<JsonNode>) -> Result<Option<bool>, ApiError> {
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
fn parse_block(
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

/// `rule` with the options asked for.
fn with_options(rule: Rule, report: bool, block: Duration) -> Result<Rule, ApiError> {
    let rule = if report { rule.reporting() } else { rule };
    rule.block_for(block)
        .map_err(|e| ApiError::new(ErrorCode::InvalidBlock, format!("\"block_ms\": {e}")))
}

fn parse_max_wait(max_wait_ms: Option<JsonNode>) -> Result<Duration, ApiError> {
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

/// The common `POST /v1/acquire`, read without building a JSON tree: one
/// object with `key`, `limit` and `window_ms`, and maybe `cost` and
/// `algorithm`, each once, of the right types and within bounds. Anything
/// else (rules, nulls, an unknown or repeated field, a bad value) is left
/// to the full parser, which says exactly what is wrong.
mod fast {
    use std::borrow::Cow;
    use std::fmt;

    use serde::de::{self, Deserializer, MapAccess, Visitor};
    use slidegate::{Algorithm, Rule};

    use super::{AcquireRequest, JsonNode, RequestBounds, parse_rule};

    pub(super) fn parse_acquire(body: &[u8], bounds: &RequestBounds) -> Option<AcquireRequest> {
        let mut json = serde_json::Deserializer::from_slice(body);
        let fields = json.deserialize_map(FieldsVisitor).ok()?;
        json.end().ok()?;
        let algorithm = match fields.algorithm {
            None => Algorithm::default(),
            Some(name) => name.parse().ok()?,
        };
        let limit = Some(JsonNode::Unsigned(fields.limit?));
        let window_ms = Some(JsonNode::Unsigned(fields.window_ms?));
        let rule: Rule = parse_rule(limit, window_ms, algorithm, bounds).ok()?;
        Some(AcquireRequest {
            key: fields.key?.into_owned(),
            rules: vec![rule],
            cost: fields.cost.unwrap_or(1),
            max_wait: std::time::Duration::ZERO,
        })
    }

    #[derive(Default)]
    struct Fields<'a> {
        key: Option<Cow<'a, str>>,
        limit: Option<u64>,
        window_ms: Option<u64>,
        cost: Option<u64>,
        algorithm: Option<Cow<'a, str>>,
    }

    struct FieldsVisitor;

    impl<'de> Visitor<'de> for FieldsVisitor {
        type Value = Fields<'de>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an acquire request")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
            let mut fields = Fields::default();
            while let Some(name) = map.next_key::<Text<'de>>()? {
                let fresh = match &*name.0 {
                    "key" => fields
                        .key
                        .replace(map.next_value::<Text<'de>>()?.0)
                        .is_none(),
                    "limit" => fields.limit.replace(map.next_value()?).is_none(),
                    "window_ms" => fields.window_ms.replace(map.next_value()?).is_none(),
                    "cost" => fields.cost.replace(map.next_value()?).is_none(),
                    "algorithm" => fields
                        .algorithm
                        .replace(map.next_value::<Text<'de>>()?.0)
                        .is_none(),
                    _ => false,
                };
                if !fresh {
                    // Unknown or repeated: the full parser names it.
                    return Err(de::Error::custom("not the common shape"));
                }
            }
            Ok(fields)
        }
    }

    /// A JSON string, borrowed from the body when it has no escapes.
    struct Text<'a>(Cow<'a, str>);

    impl<'de> de::Deserialize<'de> for Text<'de> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_str(TextVisitor)
        }
    }

    struct TextVisitor;

    impl<'de> Visitor<'de> for TextVisitor {
        type Value = Text<'de>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
            Ok(Text(Cow::Borrowed(text)))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
            Ok(Text(Cow::Owned(text.to_owned())))
        }

        fn visit_string<E: de::Error>(self, text: String) -> Result<Text<'de>, E> {
            Ok(Text(Cow::Owned(text)))
        }
    }
}

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

/// Parses a body that must be one JSON object.
fn parse_object(body: &[u8]) -> Result<Vec<(String, JsonNode)>, ApiError> {
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
fn pick<const N: usize>(
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

fn parse_rules(
    rules: JsonNode,
    defaults: &RuleDefaults,
    bounds: &RequestBounds,
) -> Result<Vec<Rule>, ApiError> {
    let items = match rules {
        JsonNode::Array(items) if !items.is_empty() && items.len() <= MAX_RULES => items,
        JsonNode::Array(items) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRules,
                format!(
                    "\"rules\" must hold 1 to {MAX_RULES} rules, got {}",
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
        let [limit, window_ms, algorithm, report, block_ms] =
            pick(members, &RULE_FIELDS, &format!("{place}."))?;
        let algorithm = match algorithm {
            None | Some(JsonNode::Null) => defaults.algorithm,
            some => parse_algorithm(some).map_err(|e| e.at(&place))?,
        };
        let report = parse_report(report)
            .map_err(|e| e.at(&place))?
            .unwrap_or(defaults.report);
        let block = parse_block(block_ms, bounds)
            .map_err(|e| e.at(&place))?
            .unwrap_or(defaults.block);
        let rule = parse_rule(limit, window_ms, algorithm, bounds)
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

fn parse_rule(
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
        None => return Err(missing("window_ms")),
    };
    let rate = Rate::new(limit, Duration::from_millis(window_ms)).map_err(|e| match e {
        slidegate::Error::InvalidLimit { .. } => limit_error(&limit.to_string()),
        slidegate::Error::InvalidWindow { .. } => window_error(&window_ms.to_string()),
        other => ApiError::from(other),
    })?;
    Ok(Rule::new(rate).with_algorithm(algorithm))
}

fn parse_algorithm(algorithm: Option<JsonNode>) -> Result<Algorithm, ApiError> {
    match algorithm {
        None | Some(JsonNode::Null) => Ok(Algorithm::default()),
        Some(JsonNode::String(name)) => name.parse().map_err(|_| {
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

fn missing(field: &str) -> ApiError {
    ApiError::new(
        ErrorCode::MissingField,
        format!("the field \"{field}\" is required"),
    )
}

/// Echoes at most 64 characters of caller-supplied text in a message.
fn truncate(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> ErrorCode {
        match parse_acquire(body.as_bytes(), &RequestBounds::default()) {
            Ok(request) => panic!("{body} was accepted: {request:?}"),
            Err(error) => error.code(),
        }
    }

    #[test]
    fn report_and_block_ms_apply_to_every_rule_unless_a_rule_says_otherwise() {
        let request = parse_acquire(
            br#"{"key":"k","report":true,"block_ms":60000,"rules":[
                {"limit":100,"window_ms":60000},
                {"limit":5,"window_ms":1000,"report":false,"block_ms":0}]}"#,
            &RequestBounds::default(),
        )
        .unwrap();
        assert!(request.rules[0].reports());
        assert_eq!(request.rules[0].block(), Some(Duration::from_secs(60)));
        assert!(!request.rules[1].reports());
        assert_eq!(request.rules[1].block(), None);
        let one = parse_acquire(
            br#"{"key":"k","limit":5,"window_ms":1000,"cost":150,"report":true}"#,
            &RequestBounds::default(),
        )
        .unwrap();
        assert!(one.rules[0].reports());
        assert_eq!(one.cost, 150);
        for (body, want) in [
            (
                r#"{"key":"k","limit":1,"window_ms":1,"report":"yes"}"#,
                ErrorCode::InvalidReport,
            ),
            (
                r#"{"key":"k","limit":1,"window_ms":1,"block_ms":-1}"#,
                ErrorCode::InvalidBlock,
            ),
            (
                r#"{"key":"k","limit":1,"window_ms":1,"block_ms":86400001}"#,
                ErrorCode::InvalidBlock,
            ),
            (
                r#"{"key":"k","rules":[{"limit":1,"window_ms":1,"block_ms":1.5}]}"#,
                ErrorCode::InvalidBlock,
            ),
            (
                r#"{"key":"k","limit":1,"window_ms":1,"report":true,"max_wait_ms":10}"#,
                ErrorCode::ConflictingFields,
            ),
        ] {
            assert_eq!(code(body), want, "{body}");
        }
    }

    #[test]
    fn a_single_rule_request_parses_with_defaults() {
        let request = parse_acquire(
            br#"{"key":"login:1","limit":100,"window_ms":60000}"#,
            &RequestBounds::default(),
        )
        .unwrap();
        assert_eq!(request.key, "login:1");
        assert_eq!(request.cost, 1);
        assert_eq!(request.rules, vec![Rule::parse("100/1m").unwrap()]);
        assert_eq!(request.max_wait, Duration::ZERO);
    }

    #[test]
    fn max_wait_is_read_and_bounded() {
        let bounds = RequestBounds::default();
        let waits = parse_acquire(
            br#"{"key":"k","limit":3,"window_ms":1000,"max_wait_ms":3000}"#,
            &bounds,
        )
        .unwrap();
        assert_eq!(waits.max_wait, Duration::from_secs(3));
        for bad in [r#"5001"#, r#"-1"#, r#""1s""#, r#"1.5"#] {
            let body = format!(r#"{{"key":"k","limit":3,"window_ms":1000,"max_wait_ms":{bad}}}"#);
            assert_eq!(code(&body), ErrorCode::InvalidMaxWait, "max_wait_ms {bad}");
        }
    }

    #[test]
    fn rules_take_the_top_level_algorithm_unless_they_name_one() {
        let request = parse_acquire(
            br#"{"key":"k","algorithm":"gcra","cost":0,"rules":[
                {"limit":10,"window_ms":1000},
                {"limit":1000,"window_ms":3600000,"algorithm":"sliding_log"}]}"#,
            &RequestBounds::default(),
        )
        .unwrap();
        assert_eq!(request.cost, 0);
        assert_eq!(request.rules[0].algorithm(), Algorithm::Gcra);
        assert_eq!(request.rules[1].algorithm(), Algorithm::SlidingLog);
    }

    #[test]
    fn each_mistake_has_its_own_code() {
        assert_eq!(
            code(r#"{"limit":1,"window_ms":1}"#),
            ErrorCode::MissingField
        );
        assert_eq!(
            code(r#"{"key":"k","window_ms":1}"#),
            ErrorCode::MissingField
        );
        assert_eq!(code(r#"{"key":"k","limit":1}"#), ErrorCode::MissingField);
        assert_eq!(
            code(r#"{"key":1,"limit":1,"window_ms":1}"#),
            ErrorCode::InvalidKey
        );
        assert_eq!(
            code(r#"{"key":"k","limit":0,"window_ms":1}"#),
            ErrorCode::InvalidLimit
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1.5,"window_ms":1}"#),
            ErrorCode::InvalidLimit
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1,"window_ms":0}"#),
            ErrorCode::InvalidWindow
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1,"window_ms":1,"cost":-1}"#),
            ErrorCode::InvalidCost
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1,"window_ms":1,"algorithm":"x"}"#),
            ErrorCode::UnknownAlgorithm
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1,"window_ms":1,"extra":1}"#),
            ErrorCode::UnknownField
        );
        assert_eq!(
            code(r#"{"key":"k","key":"j","limit":1,"window_ms":1}"#),
            ErrorCode::DuplicateField
        );
        assert_eq!(
            code(r#"{"key":"k","limit":1,"rules":[]}"#),
            ErrorCode::ConflictingFields
        );
        assert_eq!(code(r#"{"key":"k","rules":[]}"#), ErrorCode::InvalidRules);
        assert_eq!(code(r#"{"key":"k","rules":[1]}"#), ErrorCode::InvalidRules);
        assert_eq!(
            code(r#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":1,"window_ms":1}]}"#),
            ErrorCode::InvalidRules
        );
        assert_eq!(
            code(r#"{"key":"k","rules":[{"limit":1,"window_ms":1,"limit":2}]}"#),
            ErrorCode::DuplicateField
        );
        assert_eq!(code("[1]"), ErrorCode::InvalidJson);
        assert_eq!(code("{"), ErrorCode::InvalidJson);
    }

    #[test]
    fn messages_name_the_rule_at_fault() {
        let error = parse_acquire(
            br#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":0,"window_ms":1}]}"#,
            &RequestBounds::default(),
        )
        .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidLimit);
        assert!(
            error.message().starts_with("rules[1]: "),
            "{}",
            error.message()
        );
    }

    #[test]
    fn the_common_shape_is_read_as_the_full_parser_reads_it() {
        let bounds = RequestBounds::default();
        for body in [
            r#"{"key":"login:1","limit":100,"window_ms":60000}"#,
            r#"{"window_ms":1000,"cost":0,"key":"k","limit":5,"algorithm":"gcra"}"#,
            r#" {"key":"a\u0062c","limit":1,"window_ms":1,"cost":3} "#,
        ] {
            let fast = fast::parse_acquire(body.as_bytes(), &bounds);
            assert_eq!(
                fast,
                parse_acquire_tree(body.as_bytes(), &bounds).ok(),
                "{body}"
            );
            assert!(fast.is_some(), "{body}");
        }
        for other in [
            r#"{"key":"k","limit":1,"window_ms":1,"cost":null}"#,
            r#"{"key":"k","limit":1,"window_ms":1,"key":"j"}"#,
            r#"{"key":"k","limit":1.0,"window_ms":1}"#,
            r#"{"key":"k","limit":0,"window_ms":1}"#,
            r#"{"key":"k","limit":1,"window_ms":1,"algorithm":"x"}"#,
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1}]}"#,
            r#"{"key":"k","limit":1,"window_ms":1} x"#,
            r#"{"key":"k","limit":1}"#,
            "[1]",
        ] {
            assert_eq!(
                fast::parse_acquire(other.as_bytes(), &bounds),
                None,
                "{other}"
            );
        }
    }

    #[test]
    fn peek_reads_its_query() {
        let query = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let request = parse_peek(
            "k".into(),
            query(&[("limit", "5"), ("window_ms", "250"), ("algorithm", "gcra")]),
            &RequestBounds::default(),
        )
        .unwrap();
        assert_eq!(
            request.rule,
            Rule::parse("5/250ms")
                .unwrap()
                .with_algorithm(Algorithm::Gcra)
        );
        let code = |pairs: &[(&str, &str)]| {
            parse_peek("k".into(), query(pairs), &RequestBounds::default())
                .unwrap_err()
                .code()
        };
        assert_eq!(code(&[("limit", "5")]), ErrorCode::MissingField);
        let locked = parse_peek(
            "k".into(),
            query(&[
                ("limit", "5"),
                ("window_ms", "900000"),
                ("block_ms", "3600000"),
            ]),
            &RequestBounds::default(),
        )
        .unwrap();
        assert_eq!(locked.rule.block(), Some(Duration::from_secs(3600)));
        assert_eq!(
            code(&[("limit", "5"), ("window_ms", "1"), ("block_ms", "soon")]),
            ErrorCode::InvalidBlock
        );
        assert_eq!(
            code(&[("limit", "+5"), ("window_ms", "1")]),
            ErrorCode::InvalidLimit
        );
        assert_eq!(
            code(&[("limit", "99999999999999999999"), ("window_ms", "1")]),
            ErrorCode::InvalidLimit
        );
        assert_eq!(
            code(&[("limit", "5"), ("window_ms", "")]),
            ErrorCode::InvalidWindow
        );
        assert_eq!(
            code(&[("limit", "5"), ("limit", "6"), ("window_ms", "1")]),
            ErrorCode::DuplicateField
        );
        assert_eq!(
            code(&[("limit", "5"), ("window_ms", "1"), ("cost", "1")]),
            ErrorCode::UnknownField
        );
    }

    #[test]
    fn adhoc_limits_and_windows_are_bounded_by_their_flags() {
        let bounds = RequestBounds {
            max_adhoc_limit: 100,
            max_adhoc_window: Duration::from_secs(60),
            ..RequestBounds::default()
        };
        let parse = |body: &str| parse_acquire(body.as_bytes(), &bounds);
        assert!(parse(r#"{"key":"k","limit":100,"window_ms":60000}"#).is_ok());
        let limit = parse(r#"{"key":"k","limit":101,"window_ms":1000}"#).unwrap_err();
        assert_eq!(limit.code(), ErrorCode::InvalidLimit);
        assert!(limit.message().contains("--max-adhoc-limit"), "{limit}");
        let window = parse(r#"{"key":"k","limit":1,"window_ms":60001}"#).unwrap_err();
        assert_eq!(window.code(), ErrorCode::InvalidWindow);
        assert!(window.message().contains("--max-adhoc-window"), "{window}");
        let in_rules = parse(
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":1000,"window_ms":1}]}"#,
        )
        .unwrap_err();
        assert!(in_rules.message().starts_with("rules[1]: "), "{in_rules}");
        let peek = parse_peek(
            "k".into(),
            vec![
                ("limit".into(), "1".into()),
                ("window_ms".into(), "86400000".into()),
            ],
            &bounds,
        );
        assert_eq!(peek.unwrap_err().code(), ErrorCode::InvalidWindow);
    }

    #[test]
    fn the_default_bounds_are_one_million_per_day() {
        let parse = |body: &str| parse_acquire(body.as_bytes(), &RequestBounds::default());
        assert!(parse(r#"{"key":"k","limit":1000000,"window_ms":86400000}"#).is_ok());
        assert!(parse(r#"{"key":"k","limit":1000000000000,"window_ms":1000}"#).is_err());
        assert!(parse(r#"{"key":"k","limit":1,"window_ms":315360000000}"#).is_err());
    }
}
