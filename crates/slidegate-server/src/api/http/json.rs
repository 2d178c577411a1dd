//! A JSON tree that keeps what `serde_json::Value` drops: repeated names in
//! an object. `{"limit":1,"limit":1000}` must be refused, not read as
//! whichever came last.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
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
    Array(Vec<Node>),
    /// An object, its members in order, repeated names kept.
    Object(Vec<(String, Node)>),
}

impl Node {
    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Unsigned(_) | Node::Negative(_) => "a whole number",
            Node::Float(_) => "a number that is not a 64-bit whole number",
            Node::String(_) => "a string",
            Node::Array(_) => "an array",
            Node::Object(_) => "an object",
        }
    }

    /// The value as it would be written in JSON, shortened for messages.
    pub fn brief(&self) -> String {
        match self {
            Node::Null => "null".into(),
            Node::Bool(b) => b.to_string(),
            Node::Unsigned(n) => n.to_string(),
            Node::Negative(n) => n.to_string(),
            Node::Float(f) => f.to_string(),
            Node::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
            Node::String(s) => format!("{:?}...", s.chars().take(40).collect::<String>()),
            Node::Array(_) => "[...]".into(),
            Node::Object(_) => "{...}".into(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Unsigned(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Node::Unsigned(u),
            Err(_) => Node::Negative(v),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, Node>()? {
            members.push(member);
        }
        Ok(Node::Object(members))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
        Err(E::custom("bytes are not JSON"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn repeated_names_are_kept_in_order() {
        assert_eq!(
            parse(r#"{"a":1,"a":-2}"#),
            Node::Object(vec![
                ("a".into(), Node::Unsigned(1)),
                ("a".into(), Node::Negative(-2)),
            ])
        );
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(parse("18446744073709551615"), Node::Unsigned(u64::MAX));
        assert!(matches!(parse("18446744073709551616"), Node::Float(_)));
        assert!(matches!(parse("1.0"), Node::Float(_)));
        assert!(matches!(parse("1e2"), Node::Float(_)));
        // serde_json reads `-0` as a float: refused where a count is expected.
        assert!(matches!(parse("-0"), Node::Float(_)));
        assert_eq!(parse("-1"), Node::Negative(-1));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(serde_json::from_str::<Node>(&deep).is_err());
    }
}
