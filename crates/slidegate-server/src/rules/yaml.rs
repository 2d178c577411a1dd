//! Reading one config file: YAML into a generic tree that keeps every
//! node's line and column ([`yaml_tree`](super::yaml_tree)), checked key
//! by key as envoyproxy/ratelimit checks it, then turned into typed
//! descriptors.

use std::time::Duration;

use serde_saphyr::{Location, Spanned};
use slidegate::{Algorithm, Rate};

use super::error::{ConfigError, NAME_CHARS, PATH_CHARS, WORD_CHARS, quoted};
use super::forward_auth::{BUILT_IN_KEYS, HeaderFeed, MAX_HEADER_FEEDS, is_header_name};
use super::yaml_tree::{SpannedYaml, Yaml};

/// Every key a config file may use. `metadata` holds free-form data that
/// is not checked.
const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // slidegate's extensions, at the top:
    "forward_auth",
    // slidegate's extensions, inside `rate_limit`:
    "window",
    "algorithm",
    "report",
    "block_for",
    "burst",
];

/// One file's content, typed.
#[derive(Debug, Clone)]
pub(crate) struct FileSpec {
    pub domain: String,
    pub descriptors: Vec<DescriptorSpec>,
    /// `forward_auth.headers`: request headers that feed descriptor keys.
    pub forward_auth: Vec<HeaderFeed>,
}

/// One `descriptors` entry, typed but not yet checked against its siblings.
#[derive(Debug, Clone)]
pub(crate) struct DescriptorSpec {
    pub key: String,
    pub value: Option<String>,
    pub rate_limit: Option<RateLimitSpec>,
    pub descriptors: Vec<DescriptorSpec>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub share_threshold: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    /// Where the descriptor starts, for error messages.
    pub line: u64,
    pub column: u64,
}

/// A `rate_limit` block, typed.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitSpec {
    pub unit: Option<String>,
    pub window: Option<Duration>,
    pub requests_per_unit: u64,
    pub unlimited: bool,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// The algorithm named, if any (see `set.rs` for the default).
    pub algorithm: Option<Algorithm>,
    /// Every hit is recorded, whether or not it fits (usage reporting).
    pub report: bool,
    /// Once a request is denied, its key is locked out this long.
    pub block_for: Option<Duration>,
    /// A `gcra` bucket of this many units, refilled at the rate.
    pub burst: Option<u64>,
}

/// Parses and checks one file. `name` is used in error messages.
pub(crate) fn parse_file(name: &str, text: &str) -> Result<FileSpec, ConfigError> {
    let root: SpannedYaml = if text.trim().is_empty() {
        Spanned::new(Yaml::Null, Location::UNKNOWN, Location::UNKNOWN)
    } else {
        serde_saphyr::from_str(text).map_err(|e| syntax_error(name, &e))?
    };
    let reader = Reader { file: name };
    match &root.value {
        Yaml::Map(entries) => reader.check_keys(entries)?,
        Yaml::Null => {}
        other => {
            return Err(reader.error(
                &root,
                format!(
                    "error loading config file: expected a map at the top, found {}",
                    other.kind()
                ),
            ));
        }
    }
    reader.file(&root)
}

/// A file that is not YAML, by position and kind of fault. The parser's
/// own message can carry the text around the fault (a snippet, a
/// duplicate key): only what comes before its first `: ` is kept.
fn syntax_error(file: &str, error: &serde_saphyr::Error) -> ConfigError {
    let error = error.without_snippet();
    let location = error.location().filter(|l| l.line() > 0);
    let what = match error {
        serde_saphyr::Error::DuplicateMappingKey { .. } => "duplicate mapping key".to_owned(),
        other => {
            let text = other.to_string();
            // The position is reported apart, before or after the text.
            let mut text = text.trim_start_matches("error: ");
            if text.starts_with("line ")
                && let Some((_, rest)) = text.split_once(": ")
            {
                text = rest;
            }
            if let Some((what, _)) = text.rsplit_once(" at line ") {
                text = what;
            }
            let what = text.split([':', ';', '\n']).next().unwrap_or_default();
            what.chars().take(PATH_CHARS).collect()
        }
    };
    ConfigError {
        file: file.to_owned(),
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
        message: format!("error loading config file: not valid YAML ({what})"),
    }
}

struct Reader<'a> {
    file: &'a str,
}

impl Reader<'_> {
    fn error(&self, at: &SpannedYaml, message: impl Into<String>) -> ConfigError {
        let known = at.referenced.line() > 0;
        ConfigError {
            file: self.file.to_owned(),
            line: known.then(|| at.referenced.line()),
            column: known.then(|| at.referenced.column()),
            message: message.into(),
        }
    }

    /// envoyproxy/ratelimit's key check: every key a known string, every
    /// list a list of maps, recursively (but not inside `metadata`).
    fn check_keys(&self, entries: &[(SpannedYaml, SpannedYaml)]) -> Result<(), ConfigError> {
        for (key, value) in entries {
            let Yaml::Str(name) = &key.value else {
                return Err(self.error(
                    key,
                    format!(
                        "config error, key is not of type string: {}",
                        key.value.described()
                    ),
                ));
            };
            if !VALID_KEYS.contains(&name.as_str()) {
                return Err(self.error(
                    key,
                    format!("config error, unknown key {}", quoted(name, NAME_CHARS)),
                ));
            }
            // Free-form data, and the forward-auth mapping, whose keys
            // are the operator's descriptor keys (read by `forward_auth`).
            if name == "metadata" || name == "forward_auth" {
                continue;
            }
            match &value.value {
                Yaml::Seq(items) => {
                    for item in items {
                        let Yaml::Map(inner) = &item.value else {
                            return Err(self.error(
                                item,
                                format!(
                                    "config error, yaml file contains list of type other than map: {}",
                                    item.value.described()
                                ),
                            ));
                        };
                        self.check_keys(inner)?;
                    }
                }
                Yaml::Map(inner) => self.check_keys(inner)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn file(&self, root: &SpannedYaml) -> Result<FileSpec, ConfigError> {
        let fields = Fields::of(root);
        let domain = self
            .string(fields.get("domain"), "domain")?
            .unwrap_or_default();
        let descriptors = self.descriptors(fields.get("descriptors"))?;
        let forward_auth = self.forward_auth(fields.get("forward_auth"))?;
        Ok(FileSpec {
            domain,
            descriptors,
            forward_auth,
        })
    }

    /// `forward_auth: {headers: {KEY: Header-Name, ...}}`, in file order.
    fn forward_auth(&self, node: Option<&SpannedYaml>) -> Result<Vec<HeaderFeed>, ConfigError> {
        let Some(node) = node else {
            return Ok(Vec::new());
        };
        let entries = match &node.value {
            Yaml::Null => return Ok(Vec::new()),
            Yaml::Map(entries) => entries,
            other => {
                return Err(self.error(
                    node,
                    format!("'forward_auth' must be a map, found {}", other.kind()),
                ));
            }
        };
        let mut feeds = Vec::new();
        for (key, value) in entries {
            if !matches!(&key.value, Yaml::Str(name) if name == "headers") {
                return Err(self.error(
                    key,
                    format!(
                        "config error, unknown key {} in 'forward_auth' (expected 'headers')",
                        quoted(&key.value.described(), NAME_CHARS)
                    ),
                ));
            }
            let headers = match &value.value {
                Yaml::Null => continue,
                Yaml::Map(headers) => headers,
                other => {
                    return Err(self.error(
                        value,
                        format!(
                            "'forward_auth.headers' must map descriptor keys to header names, found {}",
                            other.kind()
                        ),
                    ));
                }
            };
            for (descriptor_key, header) in headers {
                feeds.push(self.header_feed(descriptor_key, header, &feeds)?);
            }
        }
        if feeds.len() > MAX_HEADER_FEEDS {
            return Err(self.error(
                node,
                format!("'forward_auth.headers' maps more than {MAX_HEADER_FEEDS} headers"),
            ));
        }
        Ok(feeds)
    }

    fn header_feed(
        &self,
        key: &SpannedYaml,
        header: &SpannedYaml,
        earlier: &[HeaderFeed],
    ) -> Result<HeaderFeed, ConfigError> {
        let key_text = self
            .string(Some(key), "forward_auth.headers key")?
            .unwrap_or_default();
        if key_text.is_empty() || BUILT_IN_KEYS.contains(&key_text.as_str()) {
            return Err(self.error(
                key,
                format!(
                    "'forward_auth.headers' cannot feed the descriptor key {} (every forwarded request has remote_address, method and path)",
                    quoted(&key_text, NAME_CHARS)
                ),
            ));
        }
        if earlier.iter().any(|feed| feed.key == key_text) {
            return Err(self.error(
                key,
                format!(
                    "'forward_auth.headers' names the key {} twice",
                    quoted(&key_text, NAME_CHARS)
                ),
            ));
        }
        let name = self
            .string(Some(header), "forward_auth.headers value")?
            .unwrap_or_default();
        if !is_header_name(&name) {
            return Err(self.error(
                header,
                format!(
                    "{} is not a header name (letters, digits and -, at most 64)",
                    quoted(&name, NAME_CHARS)
                ),
            ));
        }
        Ok(HeaderFeed {
            key: key_text,
            header: name.to_ascii_lowercase(),
        })
    }

    fn descriptors(&self, node: Option<&SpannedYaml>) -> Result<Vec<DescriptorSpec>, ConfigError> {
        let Some(node) = node else {
            return Ok(Vec::new());
        };
        match &node.value {
            Yaml::Null => Ok(Vec::new()),
            Yaml::Seq(items) => items.iter().map(|item| self.descriptor(item)).collect(),
            other => Err(self.error(
                node,
                format!(
                    "'descriptors' must be a list of maps, found {}",
                    other.kind()
                ),
            )),
        }
    }

    fn descriptor(&self, node: &SpannedYaml) -> Result<DescriptorSpec, ConfigError> {
        let fields = Fields::of(node);
        Ok(DescriptorSpec {
            key: self.string(fields.get("key"), "key")?.unwrap_or_default(),
            value: self
                .string(fields.get("value"), "value")?
                .filter(|v| !v.is_empty()),
            rate_limit: fields
                .get("rate_limit")
                .map(|n| self.rate_limit(n))
                .transpose()?,
            descriptors: self.descriptors(fields.get("descriptors"))?,
            shadow_mode: self.flag(fields.get("shadow_mode"), "shadow_mode")?,
            quota_mode: self.flag(fields.get("quota_mode"), "quota_mode")?,
            share_threshold: self.flag(fields.get("share_threshold"), "share_threshold")?,
            detailed_metric: self.flag(fields.get("detailed_metric"), "detailed_metric")?,
            value_to_metric: self.flag(fields.get("value_to_metric"), "value_to_metric")?,
            line: node.referenced.line(),
            column: node.referenced.column(),
        })
    }

    fn rate_limit(&self, node: &SpannedYaml) -> Result<RateLimitSpec, ConfigError> {
        if !matches!(node.value, Yaml::Map(_) | Yaml::Null) {
            return Err(self.error(
                node,
                format!("'rate_limit' must be a map, found {}", node.value.kind()),
            ));
        }
        let fields = Fields::of(node);
        let replaces = match fields.get("replaces") {
            None => Vec::new(),
            Some(list) => match &list.value {
                Yaml::Null => Vec::new(),
                Yaml::Seq(items) => items
                    .iter()
                    .map(|item| {
                        Ok(self
                            .string(Fields::of(item).get("name"), "name")?
                            .unwrap_or_default())
                    })
                    .collect::<Result<_, ConfigError>>()?,
                other => {
                    return Err(self.error(
                        list,
                        format!(
                            "'replaces' must be a list of {{name: ...}}, found {}",
                            other.kind()
                        ),
                    ));
                }
            },
        };
        let window = match fields.get("window") {
            None => None,
            Some(w) => {
                let text = self.string(Some(w), "window")?.unwrap_or_default();
                Some(slidegate::rate::parse_window(&text).map_err(|_| {
                    self.error(
                        w,
                        format!(
                            "invalid window {} (expected e.g. 250ms, 90s, 1m, 1h)",
                            quoted(&text, WORD_CHARS)
                        ),
                    )
                })?)
            }
        };
        let block_for = match fields.get("block_for") {
            None => None,
            Some(b) => {
                let text = self.string(Some(b), "block_for")?.unwrap_or_default();
                let block = slidegate::rate::parse_window(&text)
                    .ok()
                    .filter(|d| *d >= Rate::MIN_WINDOW && *d <= Rate::MAX_WINDOW)
                    .ok_or_else(|| {
                        self.error(
                            b,
                            format!(
                                "invalid block_for {} (expected a duration from 1ms to 10 years, e.g. 15m, 1h)",
                                quoted(&text, WORD_CHARS)
                            ),
                        )
                    })?;
                Some(block)
            }
        };
        let algorithm = match fields.get("algorithm") {
            None => None,
            Some(a) => {
                let text = self.string(Some(a), "algorithm")?.unwrap_or_default();
                Some(text.parse().map_err(|_: slidegate::Error| {
                    self.error(
                        a,
                        format!(
                            "unknown algorithm {} (expected sliding_log, sliding_counter, fixed_window or gcra)",
                            quoted(&text, WORD_CHARS)
                        ),
                    )
                })?)
            }
        };
        let burst = match fields.get("burst") {
            None => None,
            Some(b) if matches!(b.value, Yaml::Null) => None,
            Some(b) => Some(self.count(Some(b), "burst")?),
        };
        Ok(RateLimitSpec {
            unit: self.string(fields.get("unit"), "unit")?,
            window,
            requests_per_unit: self.count(fields.get("requests_per_unit"), "requests_per_unit")?,
            unlimited: self.flag(fields.get("unlimited"), "unlimited")?,
            name: self
                .string(fields.get("name"), "name")?
                .filter(|n| !n.is_empty()),
            replaces,
            algorithm,
            report: self.flag(fields.get("report"), "report")?,
            block_for,
            burst,
        })
    }

    /// A scalar read as text (numbers and booleans too, as YAML allows
    /// `value: 200`).
    fn string(
        &self,
        node: Option<&SpannedYaml>,
        what: &str,
    ) -> Result<Option<String>, ConfigError> {
        let Some(node) = node else { return Ok(None) };
        match &node.value {
            Yaml::Null => Ok(None),
            Yaml::Str(s) => Ok(Some(s.clone())),
            Yaml::Int(_) | Yaml::Float(_) | Yaml::Bool(_) => Ok(Some(node.value.described())),
            other => Err(self.error(
                node,
                format!("'{what}' must be a string, found {}", other.kind()),
            )),
        }
    }

    fn flag(&self, node: Option<&SpannedYaml>, what: &str) -> Result<bool, ConfigError> {
        let Some(node) = node else { return Ok(false) };
        match &node.value {
            Yaml::Null => Ok(false),
            Yaml::Bool(b) => Ok(*b),
            other => Err(self.error(
                node,
                format!(
                    "'{what}' must be true or false, found {}",
                    other.described_scalar()
                ),
            )),
        }
    }

    fn count(&self, node: Option<&SpannedYaml>, what: &str) -> Result<u64, ConfigError> {
        let Some(node) = node else { return Ok(0) };
        match &node.value {
            Yaml::Null => Ok(0),
            Yaml::Int(i) if *i >= 0 && *i <= i128::from(slidegate::Rate::MAX_LIMIT) => {
                Ok(*i as u64)
            }
            other => Err(self.error(
                node,
                format!(
                    "'{what}' must be a whole number from 0 to {}, found {}",
                    slidegate::Rate::MAX_LIMIT,
                    other.described_scalar()
                ),
            )),
        }
    }
}

/// The fields of a map node by name (the last one wins on duplicates).
struct Fields<'a>(Vec<(&'a str, &'a SpannedYaml)>);

impl<'a> Fields<'a> {
    fn of(node: &'a SpannedYaml) -> Fields<'a> {
        match &node.value {
            Yaml::Map(entries) => Fields(
                entries
                    .iter()
                    .filter_map(|(k, v)| match &k.value {
                        Yaml::Str(name) => Some((name.as_str(), v)),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => Fields(Vec::new()),
        }
    }

    fn get(&self, name: &str) -> Option<&'a SpannedYaml> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }
}
