//! The common `POST /v1/acquire`, read without building a JSON tree: one
//! object with `key`, `limit` and `window_ms`, and maybe `cost` and
//! `algorithm`, each once, of the right types and within bounds. Anything
//! else (rules, nulls, an unknown or repeated field, a bad value) is left
//! to the full parser, which says exactly what is wrong.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use slidegate::{Algorithm, Rule};

use super::fields::parse_rule;
use super::parsed::AcquireRequest;
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

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
        lease: None,
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
