//! A JSON tree that keeps what `serde_json::Value` drops: repeated names in
//! an object. `{"limit":1,"limit":1000}` must be refused, not read as
//! whichever came last.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonNode {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number from 0 to 2^64-1.
    Unsigned(u64),
    /// A negative whole number.
    Negative(i64),
    /// A number with a fraction or an exponent, or beyond the 64-bit range.
    Float(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<JsonNode>),
    /// An object, its members in order, repeated names kept.
    Object(Vec<(String, JsonNode)>),
}

impl JsonNode {
    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            JsonNode::Null => "null",
            JsonNode::Bool(_) => "a boolean",
            JsonNode::Unsigned(_) | JsonNode::Negative(_) => "a whole number",
            JsonNode::Float(_) => "a number that is not a 64-bit whole number",
            JsonNode::String(_) => "a string",
            JsonNode::Array(_) => "an array",
            JsonNode::Object(_) => "an object",
        }
    }

    /// The value as it would be written in JSON, shortened for messages.
    pub fn brief(&self) -> String {
        match self {
            JsonNode::Null => "null".into(),
            JsonNode::Bool(b) => b.to_string(),
            JsonNode::Unsigned(n) => n.to_string(),
            JsonNode::Negative(n) => n.to_string(),
            JsonNode::Float(f) => f.to_string(),
            JsonNode::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
            JsonNode::String(s) => format!("{:?}...", s.chars().take(40).collect::<String>()),
            JsonNode::Array(_) => "[...]".into(),
            JsonNode::Object(_) => "{...}".into(),
        }
    }
}

impl<'de> Deserialize<'de> for JsonNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JsonNode, D::Error> {
        deserializer.deserialize_any(JsonNodeVisitor)
    }
}

struct JsonNodeVisitor;

impl<'de> Visitor<'de> for JsonNodeVisitor {
    type Value = JsonNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<JsonNode, E> {
        Ok(JsonNode::Null)
    }

    fn visit_none<E>(self) -> Result<JsonNode, E> {
        Ok(JsonNode::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<JsonNode, E> {
        Ok(JsonNode::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<JsonNode, E> {
        Ok(JsonNode::Unsigned(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<JsonNode, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => JsonNode::Unsigned(u),
            Err(_) => JsonNode::Negative(v),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<JsonNode, E> {
        Ok(JsonNode::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<JsonNode, E> {
        Ok(JsonNode::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<JsonNode, E> {
        Ok(JsonNode::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(JsonNode::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonNode, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, JsonNode>()? {
            members.push(member);
        }
        Ok(JsonNode::Object(members))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<JsonNode, E> {
        Err(E::custom("bytes are not JSON"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> JsonNode {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn repeated_names_are_kept_in_order() {
        assert_eq!(
            parse(r#"{"a":1,"a":-2}"#),
            JsonNode::Object(vec![
                ("a".into(), JsonNode::Unsigned(1)),
                ("a".into(), JsonNode::Negative(-2)),
            ])
        );
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(parse("18446744073709551615"), JsonNode::Unsigned(u64::MAX));
        assert!(matches!(parse("18446744073709551616"), JsonNode::Float(_)));
        assert!(matches!(parse("1.0"), JsonNode::Float(_)));
        assert!(matches!(parse("1e2"), JsonNode::Float(_)));
        // serde_json reads `-0` as a float: refused where a count is expected.
        assert!(matches!(parse("-0"), JsonNode::Float(_)));
        assert_eq!(parse("-1"), JsonNode::Negative(-1));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(serde_json::from_str::<JsonNode>(&deep).is_err());
    }
}
