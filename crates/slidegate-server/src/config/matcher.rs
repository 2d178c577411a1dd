//! Finding the limit of a request descriptor in a domain's tree.

use std::collections::HashMap;
use std::sync::Arc;

use super::Limit;
use super::yaml::DescriptorSpec;
use crate::keyspace::CounterKey;

/// One level of descriptors: exact `key`/`value` pairs, wildcard values
/// (in file order) and key-only defaults.
#[derive(Debug, Default)]
pub(crate) struct Level {
    nodes: Vec<Node>,
    exact: HashMap<(String, String), usize>,
    defaults: HashMap<String, usize>,
    wildcards: Vec<usize>,
}

#[derive(Debug)]
pub(crate) struct Node {
    key: String,
    /// The configured value: a literal, or a pattern with `*` anywhere.
    value: Option<String>,
    limit: Option<Arc<Limit>>,
    share_threshold: bool,
    value_to_metric: bool,
    children: Level,
}

impl Node {
    pub(crate) fn new(spec: &DescriptorSpec, limit: Option<Arc<Limit>>, children: Level) -> Node {
        Node {
            key: spec.key.clone(),
            value: spec.value.clone(),
            limit,
            share_threshold: spec.share_threshold,
            value_to_metric: spec.value_to_metric,
            children,
        }
    }

    fn is_wildcard(&self) -> bool {
        self.value.as_deref().is_some_and(|v| v.contains('*'))
    }
}

impl Level {
    pub(crate) fn contains(&self, key: &str, value: Option<&str>) -> bool {
        match value {
            Some(v) => {
                self.exact.contains_key(&(key.to_owned(), v.to_owned()))
                    || self.wildcards.iter().any(|&i| {
                        self.nodes[i].key == key && self.nodes[i].value.as_deref() == Some(v)
                    })
            }
            None => self.defaults.contains_key(key),
        }
    }

    pub(crate) fn insert(&mut self, node: Node) {
        let index = self.nodes.len();
        match &node.value {
            None => {
                self.defaults.insert(node.key.clone(), index);
            }
            Some(_) if node.is_wildcard() => self.wildcards.push(index),
            Some(value) => {
                self.exact.insert((node.key.clone(), value.clone()), index);
            }
        }
        self.nodes.push(node);
    }

    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let index = self
            .exact
            .get(&(key.to_owned(), value.to_owned()))
            .or_else(|| {
                self.wildcards.iter().find(|&&i| {
                    let node = &self.nodes[i];
                    node.key == key && node.value.as_deref().is_some_and(|p| glob(p, value))
                })
            })
            .or_else(|| self.defaults.get(key))?;
        self.nodes.get(*index)
    }
}

impl Level {
    /// Calls `f` with every limit of this level and below, in file order.
    pub(crate) fn for_each_limit<'a>(&'a self, f: &mut impl FnMut(&'a Arc<Limit>)) {
        for node in &self.nodes {
            if let Some(limit) = &node.limit {
                f(limit);
            }
            node.children.for_each_limit(f);
        }
    }

    /// The descriptors of this level and below as JSON, in file order.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        self.nodes
            .iter()
            .map(|node| {
                let mut json = serde_json::json!({ "key": node.key });
                if let Some(value) = &node.value {
                    json["value"] = value.as_str().into();
                }
                if let Some(limit) = &node.limit {
                    json["rate_limit"] = limit_json(limit);
                }
                if node.share_threshold {
                    json["share_threshold"] = true.into();
                }
                if node.value_to_metric {
                    json["value_to_metric"] = true.into();
                }
                if !node.children.nodes.is_empty() {
                    json["descriptors"] = node.children.to_json();
                }
                json
            })
            .collect()
    }
}

fn limit_json(limit: &Limit) -> serde_json::Value {
    use super::{Enforcement, Unit};
    let mut json = serde_json::json!({
        "requests_per_unit": limit.requests_per_unit,
        "stats_key": limit.full_key,
    });
    match limit.unit {
        Unit::Window(window) => {
            json["window_ms"] = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).into();
        }
        unit => json["unit"] = format!("{unit:?}").to_ascii_uppercase().into(),
    }
    match limit.enforcement {
        Enforcement::Unlimited => json["unlimited"] = true.into(),
        Enforcement::Blocked => json["blocked"] = true.into(),
        Enforcement::Rule(rule) => json["algorithm"] = rule.algorithm().to_string().into(),
    }
    if let Some(name) = &limit.name {
        json["name"] = name.as_str().into();
    }
    if !limit.replaces.is_empty() {
        json["replaces"] = limit.replaces.clone().into();
    }
    for (flag, on) in [
        ("shadow_mode", limit.shadow_mode),
        ("quota_mode", limit.quota_mode),
        ("detailed_metric", limit.detailed_metric),
    ] {
        if on {
            json[flag] = true.into();
        }
    }
    json
}

/// A request descriptor's limit and the names it is counted and reported under.
#[derive(Debug, Clone)]
pub struct Matched<'a> {
    /// The limit.
    pub limit: &'a Arc<Limit>,
    /// The store key of its counter ([`CounterKey::configured`]): the
    /// domain and each entry, with the wildcard pattern in place of the
    /// value where `share_threshold` makes every matching value share one
    /// counter.
    pub counter_key: String,
    /// envoyproxy/ratelimit's stats key with the request's values in it,
    /// when `detailed_metric` or `value_to_metric` put some there;
    /// otherwise the limit's [`full_key`](Limit::full_key) names it.
    pub detailed_key: Option<String>,
}

pub(crate) fn lookup<'a>(
    root: &'a Level,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<Matched<'a>> {
    let mut level = root;
    let mut counter_key = CounterKey::configured(domain);
    let mut metric_key = domain.to_owned();
    let mut detailed = false;
    let mut found = None;
    for (i, (key, value)) in entries.iter().enumerate() {
        let node = level.find(key, value)?;
        let counted_value = if node.share_threshold {
            node.value.as_deref().unwrap_or(value)
        } else {
            value
        };
        counter_key.entry(key, counted_value);
        metric_key.push('.');
        metric_key.push_str(&node.key);
        let shown = match node.value.as_deref() {
            Some(_) if node.is_wildcard() && node.value_to_metric && !node.share_threshold => {
                detailed = true;
                Some(*value)
            }
            Some(configured) => Some(configured),
            None => None,
        };
        if let Some(shown) = shown {
            metric_key.push('_');
            metric_key.push_str(shown);
        }
        let last = i + 1 == entries.len();
        if last && let Some(limit) = &node.limit {
            if limit.detailed_metric && node.value.is_none() {
                detailed = true;
                metric_key.push('_');
                metric_key.push_str(value);
            }
            found = Some(limit);
        }
        if node.children.nodes.is_empty() {
            break;
        }
        level = &node.children;
    }
    found.map(|limit| Matched {
        limit,
        counter_key: counter_key.finish(),
        detailed_key: detailed.then_some(metric_key),
    })
}

/// `*` matches any run of characters (possibly empty); everything else
/// matches itself.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}
