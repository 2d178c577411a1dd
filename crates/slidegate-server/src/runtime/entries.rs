//! How a runtime limit is written where it is kept (Redis, the file):
//! a key's rules as `{"rules":[...]}`, the rule objects `POST
//! /v1/acquire` takes; a domain as `{"format":"yaml","config":"..."}`.

use std::time::Duration;

use serde_json::{Value, json};
use slidegate::{Algorithm, Rate, Rule};

use crate::rules::RuntimeDomain;

/// One rule as its JSON object: `limit`, `window_ms`, `algorithm`, and
/// `report` and `block_ms` when set.
pub fn rule_json(rule: &Rule) -> Value {
    let mut json = json!({
        "limit": rule.limit(),
        "window_ms": u64::try_from(rule.rate().window().as_millis()).unwrap_or(u64::MAX),
        "algorithm": rule.algorithm().name(),
    });
    if rule.reports() {
        json["report"] = true.into();
    }
    if let Some(block) = rule.block() {
        json["block_ms"] = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).into();
    }
    json
}

/// A key's rules as kept.
pub fn encode_rules(rules: &[Rule]) -> String {
    json!({ "rules": rules.iter().map(rule_json).collect::<Vec<_>>() }).to_string()
}

/// A key's rules as read back; `None` for text this release cannot read
/// (written by another one): the entry is skipped and logged.
pub fn decode_rules(text: &str) -> Option<Vec<Rule>> {
    let value: Value = serde_json::from_str(text).ok()?;
    let mut rules = Vec::new();
    for item in value.get("rules")?.as_array()? {
        let limit = item.get("limit")?.as_u64()?;
        let window = Duration::from_millis(item.get("window_ms")?.as_u64()?);
        let algorithm: Algorithm = match item.get("algorithm") {
            Some(name) => name.as_str()?.parse().ok()?,
            None => Algorithm::default(),
        };
        let mut rule = Rule::new(Rate::new(limit, window).ok()?).with_algorithm(algorithm);
        if item.get("report").and_then(Value::as_bool) == Some(true) {
            rule = rule.reporting();
        }
        if let Some(block) = item.get("block_ms").and_then(Value::as_u64) {
            rule = rule.block_for(Duration::from_millis(block)).ok()?;
        }
        rules.push(rule);
    }
    (!rules.is_empty()).then_some(rules)
}

/// A domain as kept.
pub fn encode_domain(format: &str, text: &str) -> String {
    json!({ "format": format, "config": text }).to_string()
}

/// A domain as read back at `version`.
pub fn decode_domain(domain: &str, stored: &str, version: u64) -> Option<RuntimeDomain> {
    let value: Value = serde_json::from_str(stored).ok()?;
    Some(RuntimeDomain {
        domain: domain.to_owned(),
        text: value.get("config")?.as_str()?.to_owned(),
        format: value.get("format")?.as_str()?.to_owned(),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_back_as_written() {
        let rules = vec![
            Rule::parse("5/1h").unwrap(),
            Rule::parse("100/1s")
                .unwrap()
                .with_algorithm(Algorithm::Gcra)
                .reporting(),
            Rule::parse("3/1m")
                .unwrap()
                .block_for(Duration::from_secs(600))
                .unwrap(),
        ];
        assert_eq!(decode_rules(&encode_rules(&rules)), Some(rules));
        assert_eq!(decode_rules("{\"rules\":[]}"), None);
        assert_eq!(decode_rules("not json"), None);
        let domain = decode_domain("api", &encode_domain("yaml", "domain: api\n"), 4).unwrap();
        assert_eq!((domain.text.as_str(), domain.version), ("domain: api\n", 4));
    }
}
