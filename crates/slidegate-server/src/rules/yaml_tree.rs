//! A YAML file as a generic tree that keeps every node's line and
//! column, and how an error message describes a node of it.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::error::{NAME_CHARS, shown};

/// A YAML node, as written.
#[derive(Debug, Clone)]
pub(super) enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<SpannedYaml>),
    Map(Vec<(SpannedYaml, SpannedYaml)>),
}

pub(super) type SpannedYaml = Spanned<Yaml>;

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        Yaml::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Yaml, E> {
        Ok(Yaml::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Yaml, E> {
        Ok(i128::try_from(v).map_or(Yaml::Float(v as f64), Yaml::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Yaml, E> {
        Ok(Yaml::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<SpannedYaml>()? {
            items.push(item);
        }
        Ok(Yaml::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<SpannedYaml>()? {
            let value = map.next_value::<SpannedYaml>()?;
            entries.push((key, value));
        }
        Ok(Yaml::Map(entries))
    }
}

impl Yaml {
    /// What an error message says about a value: numbers and booleans as
    /// written, a string as [`shown`] shows it, a list or a map by kind.
    pub(super) fn described(&self) -> String {
        match self {
            Yaml::Null => "null".into(),
            Yaml::Bool(b) => b.to_string(),
            Yaml::Int(i) => i.to_string(),
            Yaml::Float(x) => x.to_string(),
            Yaml::Str(s) => shown(s, NAME_CHARS),
            Yaml::Seq(_) => "a list".into(),
            Yaml::Map(_) => "a map".into(),
        }
    }

    /// What an error message says about a value where a number or a
    /// boolean was expected: the value when it is one, else its kind.
    pub(super) fn described_scalar(&self) -> String {
        match self {
            Yaml::Bool(_) | Yaml::Int(_) | Yaml::Float(_) | Yaml::Null => self.described(),
            other => other.kind().into(),
        }
    }

    /// The value's kind alone.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Yaml::Null => "null",
            Yaml::Bool(_) => "a boolean",
            Yaml::Int(_) | Yaml::Float(_) => "a number",
            Yaml::Str(_) => "a string",
            Yaml::Seq(_) => "a list",
            Yaml::Map(_) => "a map",
        }
    }
}
