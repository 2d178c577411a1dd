//! Every domain's rules, loaded from YAML and ready to match requests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

use slidegate::{Algorithm, Rate, Rule};

use super::carry::{Carries, Carry, carries};
use super::error::{ConfigError, PATH_CHARS, WORD_CHARS, quoted};
use super::files::read_sources;
use super::forward_auth::{HeaderFeed, MAX_HEADER_FEEDS};
use super::limit::{Enforcement, Limit, LimitId, Unit};
use super::matcher::{self, DescriptorNode, Level, Matched};
use super::runtime_domain::RuntimeDomain;
use super::yaml::{self, DescriptorSpec, FileSpec};
use crate::epoch::millis_since_epoch;

/// Every domain's rules, ready to match requests against.
#[derive(Debug, Default)]
pub struct RateLimitConfig {
    /// Which load this is: each config made in the process has its own,
    /// larger than any before it (the empty default has 0).
    generation: u64,
    /// How many limits it holds: their ids are `0..limit_count`.
    limit_count: u32,
    /// By domain: looked up by every check, with foldhash, as the
    /// matcher's maps are (a domain is only read, never inserted, by a
    /// request).
    domains: HashMap<String, Level, foldhash::fast::RandomState>,
    /// The files each domain comes from, in load order.
    files: HashMap<String, Vec<String>>,
    /// Each domain's forward-auth mapping (`forward_auth.headers`).
    forward_auth: HashMap<String, Vec<HeaderFeed>>,
    /// When the rules were loaded (`None` for no rules at all).
    loaded_at: Option<SystemTime>,
    /// The files' sources and how they were loaded: what the config is
    /// built from again when the runtime domains change.
    sources: Vec<(String, String)>,
    options: LoadOptions,
    /// The domains set at run time, with their versions.
    runtime: HashMap<String, u64>,
    /// The domains a control plane sent, kept beside the files' sources
    /// for the same reason.
    xds: Vec<(String, FileSpec)>,
    /// The limits whose counters carry over what they used under the
    /// config before this one (see [`Carry`]).
    carries: Carries,
}

/// How to load several files.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Merge a domain split over several files (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`); otherwise a domain in two files is an error.
    pub merge_domains: bool,
}

/// How the name of a control plane's resource starts where a file's name
/// would be.
pub(crate) const XDS_PREFIX: &str = "xds:";

/// The generation of the next config made.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

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
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            loaded_at: Some(SystemTime::now()),
            sources: sources.to_vec(),
            options,
            ..RateLimitConfig::default()
        };
        for (name, text) in sources {
            let file = yaml::parse_file(name, text)?;
            config.add_file(name, file, options)?;
        }
        Ok(config)
    }

    /// These files' rules and the domains set at run time, in one config
    /// (a new generation). A runtime domain that a file defines too is
    /// left out: files stay the operator's. Each runtime domain was
    /// checked alone when it was set; one that no longer loads is left
    /// out and logged, never a reason to drop the files' rules.
    pub fn with_runtime(&self, runtime: &[RuntimeDomain]) -> RateLimitConfig {
        let mut config = match RateLimitConfig::with_xds(&self.sources, &self.xds, self.options) {
            Ok(config) => config,
            // The same sources loaded once already.
            Err(error) => {
                tracing::error!(%error, "the files' rules no longer load; keeping them without the runtime domains");
                return RateLimitConfig::from_sources(&[], self.options).unwrap_or_default();
            }
        };
        let file_domains: Vec<String> = config.domains.keys().cloned().collect();
        for domain in runtime {
            if file_domains.contains(&domain.domain) {
                tracing::warn!(domain = %domain.domain, version = domain.version, "a runtime domain is defined in a file too: the file's rules are in force");
                continue;
            }
            let name = domain.source_name();
            let added = yaml::parse_file(&name, &domain.text)
                .and_then(|file| config.add_file(&name, file, LoadOptions::default()));
            match added {
                Ok(()) => {
                    config.files.remove(&domain.domain);
                    config.runtime.insert(domain.domain.clone(), domain.version);
                }
                Err(error) => {
                    tracing::error!(domain = %domain.domain, %error, "a runtime domain no longer loads: left out");
                    config.domains.remove(&domain.domain);
                    config.files.remove(&domain.domain);
                }
            }
        }
        config
    }

    /// The config these files' rules alone make (what a reload compares
    /// against, whatever is set at run time).
    pub fn files_only(&self) -> RateLimitConfig {
        self.with_runtime(&[])
    }

    /// The version of a domain set at run time; `None` for a domain of
    /// the files (or none).
    pub fn runtime_version(&self, domain: &str) -> Option<u64> {
        self.runtime.get(domain).copied()
    }

    /// True when a file defines `domain`.
    pub fn in_files(&self, domain: &str) -> bool {
        self.files.contains_key(domain)
    }

    /// Loads configs given as `(name, text)` pairs, then the domains a
    /// control plane sends (`xds`, each named `xds:NAME`). A domain comes
    /// from the files or from the control plane, never both: one in both
    /// is an error (whichever changed last is refused).
    pub(crate) fn with_xds(
        sources: &[(String, String)],
        xds: &[(String, FileSpec)],
        options: LoadOptions,
    ) -> Result<RateLimitConfig, ConfigError> {
        let mut config = RateLimitConfig::from_sources(sources, options)?;
        for (name, spec) in xds {
            if let Some(files) = config.files.get(&spec.domain)
                && files.iter().any(|file| !file.starts_with(XDS_PREFIX))
            {
                return Err(ConfigError {
                    file: name.clone(),
                    line: None,
                    column: None,
                    message: format!(
                        "domain {} is defined in the config file {} too: a domain comes from the files or from the control plane, not both",
                        quoted(&spec.domain, PATH_CHARS),
                        quoted(&files.join(", "), PATH_CHARS)
                    ),
                });
            }
            config.add_file(name, spec.clone(), options)?;
        }
        config.xds = xds.to_vec();
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
                quoted(&file.domain, PATH_CHARS)
            )));
        }
        self.files
            .entry(file.domain.clone())
            .or_default()
            .push(name.to_owned());
        let feeds = self.forward_auth.entry(file.domain.clone()).or_default();
        for feed in file.forward_auth {
            // A domain merged from several files maps each key once.
            if feeds.iter().any(|f| f.key == feed.key) {
                return Err(error(format!(
                    "'forward_auth.headers' of domain {} names the key {} in two files",
                    quoted(&file.domain, PATH_CHARS),
                    quoted(&feed.key, PATH_CHARS)
                )));
            }
            feeds.push(feed);
        }
        if feeds.len() > MAX_HEADER_FEEDS {
            return Err(error(format!(
                "'forward_auth.headers' of domain {} maps more than {MAX_HEADER_FEEDS} headers",
                quoted(&file.domain, PATH_CHARS)
            )));
        }
        let level = self.domains.entry(file.domain.clone()).or_default();
        add_descriptors(
            name,
            level,
            &format!("{}.", file.domain),
            &file.descriptors,
            &mut self.limit_count,
        )
    }

    /// Which load this config is: a config made later has a larger one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many limits the config holds; their ids are below it.
    pub fn limit_count(&self) -> usize {
        self.limit_count as usize
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

    /// The request headers that feed descriptor keys of `domain` in a
    /// forward-auth request (empty without a mapping).
    pub fn forward_auth_headers(&self, domain: &str) -> &[HeaderFeed] {
        self.forward_auth.get(domain).map_or(&[], Vec::as_slice)
    }

    /// True when `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// What the counters of limit `id` carry over from the rules before
    /// a change, if they do (see [`Carry`]).
    #[inline]
    pub fn carry(&self, id: LimitId) -> Option<&Arc<Carry>> {
        self.carries.get(&id)
    }

    /// Whether any limit's counters carry over use from before a change.
    #[inline]
    pub fn has_carries(&self) -> bool {
        !self.carries.is_empty()
    }

    /// Makes this config, about to replace `previous` at `now`, carry
    /// over what its counters used under the rules they replace.
    pub fn carry_from(&mut self, previous: &RateLimitConfig, now: Instant) {
        let made = carries(previous.limits(), &previous.carries, self.limits(), now);
        self.carries = made;
    }

    /// Every configured limit with its domain, domains sorted, limits in
    /// file order.
    pub fn limits(&self) -> Vec<(&str, &Limit)> {
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
                let mut json = serde_json::json!({
                    "domain": domain,
                    "origin": if self.runtime.contains_key(domain) { "runtime" } else { "file" },
                    "files": self.files.get(domain).cloned().unwrap_or_default(),
                    "descriptors": level.to_json(),
                });
                if let Some(version) = self.runtime.get(domain) {
                    json["version"] = (*version).into();
                }
                json
            })
            .collect();
        serde_json::json!({
            "loaded_at_ms": self.loaded_at.map(millis_since_epoch),
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

/// Adds `specs` to `level`, numbering their limits from `next_id` on.
fn add_descriptors(
    file: &str,
    level: &mut Level,
    parent_key: &str,
    specs: &[DescriptorSpec],
    next_id: &mut u32,
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
                quoted(&full_key, PATH_CHARS)
            )));
        }
        let limit = spec
            .rate_limit
            .as_ref()
            .map(|rl| {
                let id = LimitId(*next_id);
                if id == LimitId::OVERRIDE {
                    return Err(error("more limits than a config can hold".into()));
                }
                *next_id += 1;
                limit_of(rl, spec, &full_key, id).map_err(&error)
            })
            .transpose()?;
        let mut children = Level::default();
        add_descriptors(
            file,
            &mut children,
            &format!("{full_key}."),
            &spec.descriptors,
            next_id,
        )?;
        level.insert(DescriptorNode::new(spec, limit, children));
    }
    Ok(())
}

fn limit_of(
    rl: &yaml::RateLimitSpec,
    spec: &DescriptorSpec,
    full_key: &str,
    id: LimitId,
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
            quoted(unit.unwrap_or_default(), WORD_CHARS)
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
        // A burst with no algorithm named is a gcra rule, the one
        // algorithm with a burst (as in the rule grammar).
        let algorithm = match (rl.algorithm, rl.burst) {
            (Some(algorithm), _) => algorithm,
            (None, Some(_)) => Algorithm::Gcra,
            (None, None) => Algorithm::SlidingLog,
        };
        let rule = Rule::new(rate).with_algorithm(algorithm);
        let rule = match rl.burst {
            Some(burst) => rule.with_burst(burst).map_err(|e| e.to_string())?,
            None => rule,
        };
        let rule = if rl.report { rule.reporting() } else { rule };
        let rule = match rl.block_for {
            Some(block) => rule.block_for(block).map_err(|e| e.to_string())?,
            None => rule,
        };
        Enforcement::Rule(rule)
    };
    if (rl.report || rl.block_for.is_some() || rl.burst.is_some())
        && !matches!(enforcement, Enforcement::Rule(_))
    {
        return Err(
            "'report', 'block_for' and 'burst' need a rate limit (not unlimited, not 0)".into(),
        );
    }
    Ok(Limit {
        id,
        enforcement,
        requests_per_unit: rl.requests_per_unit,
        unit,
        name: rl.name.clone(),
        replaces: rl.replaces.clone(),
        shadow_mode: spec.shadow_mode,
        quota_mode: spec.quota_mode,
        detailed_metric: spec.detailed_metric,
        full_key: full_key.to_owned(),
    })
}
