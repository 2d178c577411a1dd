//! Finding the limit of a request descriptor in a domain's tree.

use std::collections::HashMap;

use super::limit::{Enforcement, Limit, Unit};
use super::yaml::DescriptorSpec;
use crate::keys::CounterKey;

/// The maps of a level are looked up with request text on every check:
/// a fast hash. Their keys come from the config, so request text can only
/// probe them, never fill them.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One level of descriptors: exact `key`/`value` pairs, wildcard values
/// (in file order) and key-only defaults.
#[derive(Debug, Default)]
pub(super) struct Level {
    nodes: Vec<DescriptorNode>,
    /// Exact values by key, then by value: found without copying the
    /// request's text into a composite key.
    exact: Map<String, Map<String, usize>>,
    defaults: Map<String, usize>,
    wildcards: Vec<usize>,
}

#[derive(Debug)]
pub(super) struct DescriptorNode {
    key: String,
    /// The configured value: a literal, or a pattern with `*` anywhere.
    value: Option<String>,
    /// The value is a pattern.
    wildcard: bool,
    limit: Option<Limit>,
    share_threshold: bool,
    value_to_metric: bool,
    children: Level,
}

impl DescriptorNode {
    pub(super) fn new(
        spec: &DescriptorSpec,
        limit: Option<Limit>,
        children: Level,
    ) -> DescriptorNode {
        DescriptorNode {
            key: spec.key.clone(),
            value: spec.value.clone(),
            wildcard: spec.value.as_deref().is_some_and(|v| v.contains('*')),
            limit,
            share_threshold: spec.share_threshold,
            value_to_metric: spec.value_to_metric,
            children,
        }
    }

    /// The request's value goes into the stats key (`value_to_metric` on a
    /// wildcard whose values have counters of their own).
    fn shows_request_value(&self) -> bool {
        self.wildcard && self.value_to_metric && !self.share_threshold
    }
}

impl Level {
    pub(super) fn contains(&self, key: &str, value: Option<&str>) -> bool {
        match value {
            Some(v) => {
                self.exact
                    .get(key)
                    .is_some_and(|values| values.contains_key(v))
                    || self.wildcards.iter().any(|&i| {
                        self.nodes[i].key == key && self.nodes[i].value.as_deref() == Some(v)
                    })
            }
            None => self.defaults.contains_key(key),
        }
    }

    pub(super) fn insert(&mut self, node: DescriptorNode) {
        let index = self.nodes.len();
        match &node.value {
            None => {
                self.defaults.insert(node.key.clone(), index);
            }
            Some(_) if node.wildcard => self.wildcards.push(index),
            Some(value) => {
                self.exact
                    .entry(node.key.clone())
                    .or_default()
                    .insert(value.clone(), index);
            }
        }
        self.nodes.push(node);
    }

    fn find(&self, key: &str, value: &str) -> Option<&DescriptorNode> {
        let index = self
            .exact
            .get(key)
            .and_then(|values| values.get(value))
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
    pub(super) fn for_each_limit<'a>(&'a self, f: &mut impl FnMut(&'a Limit)) {
        for node in &self.nodes {
            if let Some(limit) = &node.limit {
                f(limit);
            }
            node.children.for_each_limit(f);
        }
    }

    /// The descriptors of this level and below as JSON, in file order.
    pub(super) fn to_json(&self) -> serde_json::Value {
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
        Enforcement::Rule(rule) => {
            json["algorithm"] = rule.algorithm().to_string().into();
            if rule.has_burst() {
                json["burst"] = rule.burst().into();
            }
            if rule.reports() {
                json["report"] = true.into();
            }
            if let Some(block) = rule.block() {
                json["block_for_ms"] = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).into();
            }
        }
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
    pub limit: &'a Limit,
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

/// Walks `root` along `entries`, level by level, calling `visit` with each
/// entry and the node it matched; returns the node of the last entry when
/// it has a limit (a limit applies only at the descriptor's own depth).
fn walk<'a, K, V>(
    root: &'a Level,
    entries: &[(K, V)],
    mut visit: impl FnMut(&str, &'a DescriptorNode),
) -> Option<&'a DescriptorNode>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut level = root;
    for (i, (key, value)) in entries.iter().enumerate() {
        let value = value.as_ref();
        let node = level.find(key.as_ref(), value)?;
        visit(value, node);
        if i + 1 == entries.len() {
            return node.limit.is_some().then_some(node);
        }
        if node.children.nodes.is_empty() {
            return None;
        }
        level = &node.children;
    }
    None
}

pub(super) fn lookup<'a, K, V>(
    root: &'a Level,
    domain: &str,
    entries: &[(K, V)],
) -> Option<Matched<'a>>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    // Found first, then named: a descriptor without a limit costs no key.
    let mut detailed = false;
    let last = walk(root, entries, |_, node| {
        detailed |= node.shows_request_value();
    })?;
    let limit = last.limit.as_ref()?;
    let detailed_limit = limit.detailed_metric && last.value.is_none();
    let mut counter_key = CounterKey::configured(domain);
    let mut metric_key = (detailed || detailed_limit).then(|| domain.to_owned());
    walk(root, entries, |value, node| {
        let counted_value = match node.value.as_deref() {
            Some(pattern) if node.share_threshold => pattern,
            _ => value,
        };
        counter_key.entry(&node.key, counted_value);
        if let Some(metric_key) = &mut metric_key {
            metric_key.push('.');
            metric_key.push_str(&node.key);
            let shown = match node.value.as_deref() {
                Some(_) if node.shows_request_value() => Some(value),
                configured => configured,
            };
            if let Some(shown) = shown {
                metric_key.push('_');
                metric_key.push_str(shown);
            }
        }
    });
    if detailed_limit
        && let Some(metric_key) = &mut metric_key
        && let Some((_, value)) = entries.last()
    {
        metric_key.push('_');
        metric_key.push_str(value.as_ref());
    }
    Some(Matched {
        limit,
        counter_key: counter_key.finish(),
        detailed_key: metric_key,
    })
}

/// `*` matches any run of characters (possibly empty); everything else
/// matches itself.
pub(super) fn glob(pattern: &str, text: &str) -> bool {
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
