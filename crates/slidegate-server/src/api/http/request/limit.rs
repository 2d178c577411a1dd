//! `PUT /v1/keys/{key}/limit`: `{"rules": [...]}`, the rule objects
//! `POST /v1/acquire` takes in `rules`, read by the same code.

use slidegate::Rule;

use super::acquire::{RuleDefaults, parse_rules};
use super::fields::{missing, parse_object, pick};
use crate::api::http::error::ApiError;
use crate::bounds::RequestBounds;

/// Parses the body of `PUT /v1/keys/{key}/limit`.
pub fn parse_limit(body: &[u8], bounds: &RequestBounds) -> Result<Vec<Rule>, ApiError> {
    let members = parse_object(body)?;
    let [rules] = pick(members, &["rules"], "")?;
    let rules = rules.ok_or_else(|| missing("rules"))?;
    parse_rules(rules, &RuleDefaults::default(), bounds)
}
