//! The proto3 JSON form of Envoy's `RateLimitRequest` and
//! `RateLimitResponse`, for `POST /v1/check` (and `POST /json`, as
//! envoyproxy/ratelimit names it).
//!
//! As proto3 JSON parsers do, field names are accepted in lowerCamelCase
//! or as in the proto (`hitsAddend` or `hits_addend`), 64-bit numbers as
//! numbers or strings, enums by name or number. Unknown fields are refused.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::request::{DescriptorParts, InvalidCheck, WireDescriptor, check_request};
use super::units::unit_to_proto;
use crate::bounds::RequestBounds;
use crate::limiter::check::{CheckRequest, CheckResponse, Code};

/// `RateLimitRequest` in proto3 JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRequestJson {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<DescriptorJson>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "number"
    )]
    hits_addend: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorJson {
    #[serde(default)]
    entries: Vec<EntryJson>,
    #[serde(default)]
    limit: Option<LimitOverrideJson>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "optional_number"
    )]
    hits_addend: Option<u64>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryJson {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitOverrideJson {
    #[serde(
        default,
        alias = "requests_per_unit",
        rename = "requestsPerUnit",
        deserialize_with = "number"
    )]
    requests_per_unit: u64,
    #[serde(default)]
    unit: UnitJson,
}

#[derive(Debug, Default)]
struct UnitJson(i32);

impl<'de> Deserialize<'de> for UnitJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(name) => ProtoUnit::from_str_name(&name)
                .map(|u| UnitJson(u as i32))
                .ok_or_else(|| de::Error::custom(format!("unknown unit {name:?}"))),
            Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .map(UnitJson)
                .ok_or_else(|| de::Error::custom("unit out of range")),
            _ => Err(de::Error::custom("unit must be a name such as \"SECOND\"")),
        }
    }
}

/// A non-negative integer given as a JSON number or a decimal string.
fn number<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    optional_number(d).map(Option::unwrap_or_default)
}

fn optional_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            de::Error::custom(format!("expected a non-negative whole number, found {n}"))
        }),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            de::Error::custom(format!("expected a non-negative whole number, found {s:?}"))
        }),
        // The UInt64Value wrapper may also be written as {"value": n}.
        Some(Value::Object(o)) if o.len() == 1 && o.contains_key("value") => {
            optional_number(o.get("value").cloned().unwrap_or(Value::Null))
                .map_err(de::Error::custom)
        }
        Some(other) => Err(de::Error::custom(format!(
            "expected a whole number, found {other}"
        ))),
    }
}

impl WireDescriptor for DescriptorJson {
    fn entry_count(&self) -> usize {
        self.entries.len()
    }

    fn into_parts(self) -> DescriptorParts {
        DescriptorParts {
            entries: self.entries.into_iter().map(|e| (e.key, e.value)).collect(),
            limit: self.limit.map(|l| (l.requests_per_unit, l.unit.0)),
            hits_addend: self.hits_addend,
            is_negative_hits: self.is_negative_hits,
        }
    }
}

impl RateLimitRequestJson {
    /// Parses a request body: a JSON object (serde would also take a list).
    pub fn from_slice(body: &[u8]) -> Result<RateLimitRequestJson, serde_json::Error> {
        match serde_json::from_slice::<Value>(body)? {
            object @ Value::Object(_) => serde_json::from_value(object),
            other => Err(de::Error::custom(format!(
                "expected a RateLimitRequest object, found {}",
                match other {
                    Value::Array(_) => "a list",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            ))),
        }
    }

    /// The request in the limiter's terms, once its shape is within
    /// `bounds` (checked before anything else is read).
    pub fn into_request(self, bounds: &RequestBounds) -> Result<CheckRequest, InvalidCheck> {
        check_request(self.domain, self.descriptors, self.hits_addend, bounds)
    }
}

/// `RateLimitResponse` in proto3 JSON.
#[derive(Debug, Serialize)]
pub struct RateLimitResponseJson(Value);

impl RateLimitResponseJson {
    /// The body for `response`.
    pub fn of(response: &CheckResponse<'_>) -> RateLimitResponseJson {
        let code = |c: Code| match c {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        };
        let statuses: Vec<Value> = response
            .statuses
            .iter()
            .map(|s| {
                let mut status = Map::new();
                status.insert("code".into(), json!(code(s.code())));
                if let Some(limit) = s.current_limit() {
                    let mut l = Map::new();
                    if let Some(name) = &limit.name {
                        l.insert("name".into(), json!(name));
                    }
                    l.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                    l.insert(
                        "unit".into(),
                        json!(unit_to_proto(limit.unit).as_str_name()),
                    );
                    status.insert("currentLimit".into(), Value::Object(l));
                }
                status.insert("limitRemaining".into(), json!(s.limit_remaining()));
                status.insert(
                    "durationUntilReset".into(),
                    json!(duration(s.duration_until_reset())),
                );
                Value::Object(status)
            })
            .collect();
        let mut body = Map::new();
        body.insert("overallCode".into(), json!(code(response.overall)));
        body.insert("statuses".into(), Value::Array(statuses));
        if response.degraded {
            body.insert("degraded".into(), json!(true));
        }
        if response.quota_mode {
            body.insert(
                "dynamicMetadata".into(),
                json!({"quotaModeEnabled": true, "quotaModeViolations": response.quota_violations}),
            );
        }
        RateLimitResponseJson(Value::Object(body))
    }

    /// The JSON value.
    pub fn into_value(self) -> Value {
        self.0
    }
}

/// A proto3 JSON duration: seconds with up to 9 decimals and an `s`.
fn duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        format!("{}s", d.as_secs())
    } else {
        let fraction = format!("{nanos:09}");
        format!("{}.{}s", d.as_secs(), fraction.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CheckRequest, String> {
        let json = RateLimitRequestJson::from_slice(text.as_bytes()).map_err(|e| e.to_string())?;
        json.into_request(&RequestBounds::default())
            .map_err(|e| e.0)
    }

    #[test]
    fn accepts_camel_and_snake_case_and_numbers_as_strings() {
        let camel = parse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0"}],"hitsAddend":3}"#,
        )
        .unwrap();
        let snake =
            parse(r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":0}],"hits_addend":"3"}"#)
                .unwrap();
        assert_eq!(camel, snake);
        assert_eq!(camel.hits_addend, 3);
        assert_eq!(camel.descriptors[0].hits_addend, Some(0));
        assert_eq!(
            camel.descriptors[0].entries,
            [("k".to_string(), "v".to_string())]
        );
    }

    #[test]
    fn reads_limit_overrides_by_unit_name_or_number() {
        let by_name =
            parse(r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}"#)
                .unwrap();
        let by_number =
            parse(r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":5,"unit":2}}]}"#)
                .unwrap();
        assert_eq!(by_name, by_number);
        assert_eq!(
            by_name.descriptors[0].limit_override,
            Some((5, crate::rules::Unit::Minute))
        );
    }

    #[test]
    fn refuses_what_proto3_json_refuses() {
        for bad in [
            r#"{"domain":"d","descriptor":[]}"#,
            r#"{"domain":"d","hitsAddend":-1}"#,
            r#"{"domain":"d","hitsAddend":1.5}"#,
            r#"{"domain":"d","hitsAddend":"x"}"#,
            r#"{"domain":7}"#,
            r#"{"domain":"d","descriptors":[{"entries":[{"value":"v"}]}]}"#,
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"unit":"FORTNIGHT"}}]}"#,
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"isNegativeHits":true}]}"#,
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":4294967296,"unit":"SECOND"}}]}"#,
            r#"[]"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn descriptors_beyond_the_bounds_are_refused_before_reading_them() {
        let bounds = RequestBounds {
            max_descriptors: 1,
            max_descriptor_entries: 1,
            ..RequestBounds::default()
        };
        let refuse = |text: &str| {
            let json = RateLimitRequestJson::from_slice(text.as_bytes()).unwrap();
            json.into_request(&bounds).unwrap_err().0
        };
        let two = refuse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k"}]},{"entries":[{"key":"k"}]}]}"#,
        );
        assert!(two.contains("--max-descriptors"), "{two}");
        // Counted before the bad unit of the first descriptor is read.
        let wide = refuse(
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"a"},{"key":"b"}],"limit":{"requestsPerUnit":1,"unit":0}}]}"#,
        );
        assert!(wide.contains("--max-descriptor-entries"), "{wide}");
    }

    #[test]
    fn durations_are_proto3_json_strings() {
        assert_eq!(duration(Duration::from_secs(60)), "60s");
        assert_eq!(duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration(Duration::from_micros(1)), "0.000001s");
    }
}
