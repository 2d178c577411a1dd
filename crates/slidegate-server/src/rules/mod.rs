//! Rate limit rules in envoyproxy/ratelimit's YAML format, so existing
//! configs load unchanged, with two slidegate extensions inside
//! `rate_limit`: `window` (any duration, in place of `unit`) and
//! `algorithm` (`sliding_log` by default).
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: path
//!     value: /login
//!     rate_limit: {requests_per_unit: 5, window: 250ms, algorithm: sliding_log}
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use slidegate::{Rate, Rule};

mod matcher;
mod reload;
mod yaml;

pub use matcher::Matched;
use matcher::{Level, Node};
pub use reload::{ConfigWatcher, LiveConfig, ReloadCounts, ReloadOutcome};
use yaml::{DescriptorSpec, FileSpec};

/// A config file that could not be loaded, with where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file's name.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                write!(f, "{}:{line}:{column}: {}", self.file, self.message)
            }
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The time unit of a limit, as envoyproxy/ratelimit names them, or a
/// window of any length (slidegate's `window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3600 s.
    Hour,
    /// 86400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days.
    Year,
    /// A `window` that is not one of the units above.
    Window(Duration),
}

impl Unit {
    fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// A window expressed as a unit when it is exactly one.
    fn of_window(window: Duration) -> Unit {
        [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ]
        .into_iter()
        .find(|u| u.duration() == window)
        .unwrap_or(Unit::Window(window))
    }

    /// The unit's length.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
            Unit::Window(w) => return w,
        })
    }
}

/// What a matched limit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// `unlimited: true`: always OK, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: always over the limit, nothing counted.
    Blocked,
    /// Counted by the store under this rule.
    Rule(Rule),
}

/// One configured limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// What it does.
    pub enforcement: Enforcement,
    /// Requests per unit, as configured.
    pub requests_per_unit: u64,
    /// The unit (or window), as configured.
    pub unit: Unit,
    /// `name`, for `replaces`.
    pub name: Option<String>,
    /// Names of the limits this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// Counted and reported, never enforced.
    pub shadow_mode: bool,
    /// A soft quota: counted, reported in the response's metadata, never enforced.
    pub quota_mode: bool,
    /// Metrics carry the descriptor's value.
    pub detailed_metric: bool,
    /// envoyproxy/ratelimit's stats key: `domain.key_value.subkey`.
    pub full_key: String,
    /// Its decision counters, made on first use.
    pub counters: crate::telemetry::metrics::LimitCounters,
    /// Its decisions for the status page.
    pub stats: crate::telemetry::stats::Counts,
}

/// Every domain's rules, ready to match requests against.
#[derive(Debug, Default)]
pub struct RateLimitConfig {
    domains: HashMap<String, Level>,
    /// The files each domain comes from, in load order.
    files: HashMap<String, Vec<String>>,
    /// When the rules were loaded (`None` for no rules at all).
    loaded_at: Option<SystemTime>,
}

/// How to load several files.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Merge a domain split over several files (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`); otherwise a domain in two files is an error.
    pub merge_domains: bool,
}

impl RateLimitConfig {
    /// Loads config files and directories (every `.yaml`/`.yml` file in a
    /// directory, by name, skipping hidden ones such as Kubernetes'
    /// `..data`).
    pub fn load(paths: &[PathBuf], options: LoadOptions) -> Result<RateLimitConfig, ConfigError> {
        RateLimitConfig::from_sources(&read_sources(paths)?, options)
    }

    /// Loads configs given as `(name, text)` pairs.
    pub fn from_sources(
        sources: &[(String, String)],
        options: LoadOptions,
    ) -> Result<RateLimitConfig, ConfigError> {
        let mut config = RateLimitConfig {
            loaded_at: Some(SystemTime::now()),
            ..RateLimitConfig::default()
        };
        for (name, text) in sources {
            let file = yaml::parse_file(name, text)?;
            config.add_file(name, file, options)?;
        }
        Ok(config)
    }

    fn add_file(
        &mut self,
        name: &str,
        file: FileSpec,
        options: LoadOptions,
    ) -> Result<(), ConfigError> {
        let error = |message: String| ConfigError {
            file: name.to_owned(),
            line: None,
            column: None,
            message,
        };
        if file.domain.is_empty() {
            return Err(error("config file cannot have empty domain".into()));
        }
        if self.domains.contains_key(&file.domain) && !options.merge_domains {
            return Err(error(format!(
                "duplicate domain {} in config file",
                yaml::quoted(&file.domain, yaml::PATH_CHARS)
            )));
        }
        self.files
            .entry(file.domain.clone())
            .or_default()
            .push(name.to_owned());
        let level = self.domains.entry(file.domain.clone()).or_default();
        add_descriptors(name, level, &format!("{}.", file.domain), &file.descriptors)
    }

    /// The domains configured.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The limit of one request descriptor (its `key`/`value` entries), as
    /// envoyproxy/ratelimit finds it: level by level, an exact `key_value`
    /// first, then a wildcard value, then the key alone; a limit applies
    /// only at the descriptor's own depth.
    pub fn lookup<'a, K, V>(&'a self, domain: &str, entries: &[(K, V)]) -> Option<Matched<'a>>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        matcher::lookup(self.domains.get(domain)?, domain, entries)
    }

    /// True when `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every configured limit with its domain, domains sorted, limits in
    /// file order.
    pub fn limits(&self) -> Vec<(&str, &Arc<Limit>)> {
        let mut limits = Vec::new();
        for (domain, level) in self.sorted_domains() {
            level.for_each_limit(&mut |limit| limits.push((domain, limit)));
        }
        limits
    }

    /// When the rules were loaded; `None` for the empty default.
    pub fn loaded_at(&self) -> Option<SystemTime> {
        self.loaded_at
    }

    /// The files the rules come from, in load order, each once.
    pub fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = Vec::new();
        for (_, level_files) in self.sorted_files() {
            for file in level_files {
                if !files.contains(file) {
                    files.push(file.clone());
                }
            }
        }
        files
    }

    /// The rules in force as JSON, for `GET /v1/config`: every domain with
    /// its files and its descriptor tree.
    pub fn to_json(&self) -> serde_json::Value {
        let domains: Vec<serde_json::Value> = self
            .sorted_domains()
            .into_iter()
            .map(|(domain, level)| {
                serde_json::json!({
                    "domain": domain,
                    "files": self.files.get(domain).cloned().unwrap_or_default(),
                    "descriptors": level.to_json(),
                })
            })
            .collect();
        serde_json::json!({
            "loaded_at_ms": self.loaded_at.map(crate::telemetry::stats::millis_since_epoch),
            "domains": domains,
        })
    }

    fn sorted_domains(&self) -> Vec<(&str, &Level)> {
        let mut domains: Vec<(&str, &Level)> =
            self.domains.iter().map(|(d, l)| (d.as_str(), l)).collect();
        domains.sort_unstable_by_key(|(d, _)| *d);
        domains
    }

    fn sorted_files(&self) -> Vec<(&str, &Vec<String>)> {
        let mut files: Vec<(&str, &Vec<String>)> =
            self.files.iter().map(|(d, f)| (d.as_str(), f)).collect();
        files.sort_unstable_by_key(|(d, _)| *d);
        files
    }
}

fn add_descriptors(
    file: &str,
    level: &mut Level,
    parent_key: &str,
    specs: &[DescriptorSpec],
) -> Result<(), ConfigError> {
    for spec in specs {
        let error = |message: String| ConfigError {
            file: file.to_owned(),
            line: (spec.line > 0).then_some(spec.line),
            column: (spec.line > 0).then_some(spec.column),
            message,
        };
        if spec.key.is_empty() {
            return Err(error("descriptor has empty key".into()));
        }
        let final_key = match &spec.value {
            Some(value) => format!("{}_{value}", spec.key),
            None => spec.key.clone(),
        };
        let full_key = format!("{parent_key}{final_key}");
        if level.contains(&spec.key, spec.value.as_deref()) {
            return Err(error(format!(
                "duplicate descriptor composite key {}",
                yaml::quoted(&full_key, yaml::PATH_CHARS)
            )));
        }
        let limit = spec
            .rate_limit
            .as_ref()
            .map(|rl| limit_of(rl, spec, &full_key).map_err(&error))
            .transpose()?;
        let mut children = Level::default();
        add_descriptors(
            file,
            &mut children,
            &format!("{full_key}."),
            &spec.descriptors,
        )?;
        level.insert(Node::new(spec, limit.map(Arc::new), children));
    }
    Ok(())
}

fn limit_of(
    rl: &yaml::RateLimitSpec,
    spec: &DescriptorSpec,
    full_key: &str,
) -> Result<Limit, String> {
    let unit = rl.unit.as_deref().filter(|u| !u.is_empty());
    let parsed_unit = unit.and_then(Unit::parse);
    if rl.unlimited {
        if parsed_unit.is_some() || rl.window.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
    } else if rl.window.is_some() && unit.is_some() {
        return Err("specify either 'unit' or 'window', not both".into());
    } else if rl.window.is_none() && parsed_unit.is_none() {
        return Err(format!(
            "invalid rate limit unit {}",
            yaml::quoted(unit.unwrap_or_default(), yaml::WORD_CHARS)
        ));
    }
    for replaced in &rl.replaces {
        if replaced.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if rl.name.as_deref() == Some(replaced.as_str()) {
            return Err("replaces should not contain name of same descriptor".into());
        }
    }
    let unit = match (rl.window, parsed_unit) {
        (Some(window), _) => Unit::of_window(window),
        (None, Some(unit)) => unit,
        (None, None) => Unit::Second,
    };
    let enforcement = if rl.unlimited {
        Enforcement::Unlimited
    } else if rl.requests_per_unit == 0 {
        Enforcement::Blocked
    } else {
        let rate = Rate::new(rl.requests_per_unit, unit.duration()).map_err(|e| e.to_string())?;
        let rule = Rule::new(rate).with_algorithm(rl.algorithm);
        let rule = if rl.report { rule.reporting() } else { rule };
        let rule = match rl.block_for {
            Some(block) => rule.block_for(block).map_err(|e| e.to_string())?,
            None => rule,
        };
        Enforcement::Rule(rule)
    };
    if (rl.report || rl.block_for.is_some()) && !matches!(enforcement, Enforcement::Rule(_)) {
        return Err("'report' and 'block_for' need a rate limit (not unlimited, not 0)".into());
    }
    Ok(Limit {
        enforcement,
        requests_per_unit: rl.requests_per_unit,
        unit,
        name: rl.name.clone(),
        replaces: rl.replaces.clone(),
        shadow_mode: spec.shadow_mode,
        quota_mode: spec.quota_mode,
        detailed_metric: spec.detailed_metric,
        full_key: full_key.to_owned(),
        counters: Default::default(),
        stats: Default::default(),
    })
}

/// The largest config file read: 4 MiB. A larger file is refused before
/// it is read.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The text of every file the `--config` paths stand for, as `(name,
/// text)` pairs in load order.
pub fn read_sources(paths: &[PathBuf]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut sources = Vec::new();
    for path in paths {
        for file in config_files(path)? {
            let text = read_file(&file)?;
            sources.push((file.display().to_string(), text));
        }
    }
    Ok(sources)
}

/// Reads one config file: a regular file (through symlinks) of at most
/// [`MAX_FILE_BYTES`] of UTF-8. A device, a FIFO or a huge file behind a
/// config name is refused without reading it.
fn read_file(path: &Path) -> Result<String, ConfigError> {
    let fail = |message: String| ConfigError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("error loading config file: {message}"),
    };
    let io = |e: std::io::Error| fail(e.to_string());
    let too_large = || fail(format!("larger than {} MiB", MAX_FILE_BYTES >> 20));
    // Checked before opening: opening a FIFO would block.
    let metadata = std::fs::metadata(path).map_err(io)?;
    if !metadata.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Checked again on the opened file, which a swap of the path since
    // cannot change; the read is bounded all the same.
    if !file.metadata().map_err(io)?.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))
}

/// The files a `--config` path stands for.
fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let unreadable = |e: std::io::Error| ConfigError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("error loading config file: {e}"),
    };
    if !path.is_dir() {
        // Reading reports a missing file.
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(unreadable)? {
        let file = entry.map_err(unreadable)?.path();
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        // Anything else named like a config file is read, so that what
        // cannot be (a dangling link, a device) is reported, not skipped.
        if yaml && !name.starts_with('.') && !file.is_dir() {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
