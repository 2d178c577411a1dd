//! Each descriptor's plan: the limit it matched (or its override's), its
//! counter, its cost, bounded against what one decision may ask.

use std::collections::{HashMap, HashSet};

use slidegate::{Decision, Hit, Rate, Rule};

use super::request::{CheckError, DescriptorRequest};
use super::response::{AppliedLimit, MetricName};
use crate::keys::CounterKey;
use crate::rules::{Enforcement, Limit, LimitId, RateLimitConfig, Unit};

/// A descriptor's plan: its limit, key and cost, and the store's decision
/// once it is asked.
pub(super) struct Planned<'a> {
    /// The configured limit (borrowed from the config), or an override's.
    pub(super) limit: AppliedLimit<'a>,
    pub(super) key: String,
    pub(super) metric: MetricName,
    pub(super) cost: u64,
    /// The cost (with the costs of earlier descriptors on the same counter)
    /// exceeds the limit: over the limit whatever the state.
    pub(super) too_costly: bool,
    pub(super) decision: Option<Decision>,
}

impl Planned<'_> {
    pub(super) fn is_soft(&self) -> bool {
        self.limit.shadow_mode || self.limit.quota_mode
    }

    /// Bounds the cost under `rule`, after `before` units asked by earlier
    /// descriptors of the request on the same counter.
    fn bound_cost(&mut self, rule: Rule, before: u64) {
        let left = rule.max_cost().saturating_sub(before);
        if rule.reports() {
            self.cost = self.cost.min(left);
        } else {
            self.too_costly = self.cost > left;
        }
    }

    /// Over the limit before any counting: blocked, or asking too much.
    pub(super) fn over_regardless(&self) -> bool {
        self.too_costly || self.limit.enforcement == Enforcement::Blocked
    }

    /// The rule the store counts this descriptor under, if it has one.
    pub(super) fn rule(&self) -> Option<Rule> {
        match self.limit.enforcement {
            Enforcement::Rule(rule) => Some(rule),
            Enforcement::Unlimited | Enforcement::Blocked => None,
        }
    }

    /// A hard limit the store counts: decided with the others, all or nothing.
    pub(super) fn is_hard_rule(&self) -> bool {
        !self.is_soft() && self.rule().is_some()
    }

    /// The store hit: the descriptor's cost when the request `pass`es and
    /// this descriptor can, otherwise 0 (the state only).
    pub(super) fn hit(&self, pass: bool) -> Option<Hit<'_>> {
        let rule = self.rule()?;
        // A rule that reports usage records it whatever the answer.
        let cost = if (pass || rule.reports()) && !self.over_regardless() {
            self.cost
        } else {
            0
        };
        Some(Hit::new(self.key.as_str(), rule, cost))
    }
}

/// Descriptors up to this many are compared with each other by scanning,
/// more by hashing: either way a request's cost stays linear in its size.
pub(super) const SCAN_UP_TO: usize = 16;

pub(super) fn plan<'a>(
    config: &'a RateLimitConfig,
    domain: &str,
    index: usize,
    descriptor: &DescriptorRequest,
    cost: u64,
) -> Result<Option<Planned<'a>>, CheckError> {
    if let Some((requests_per_unit, unit)) = descriptor.limit_override {
        // As in envoyproxy/ratelimit, an override applies only in a
        // configured domain: a client cannot make counters (and store
        // keys) in domains of its own invention.
        if !config.has_domain(domain) {
            return Ok(None);
        }
        return plan_override(domain, index, descriptor, requests_per_unit, unit, cost).map(Some);
    }
    Ok(config.lookup(domain, &descriptor.entries).map(|m| Planned {
        limit: AppliedLimit::Configured(m.limit),
        key: m.counter_key,
        metric: match m.detailed_key {
            Some(key) => MetricName::Detailed(key),
            None => MetricName::Configured,
        },
        cost,
        too_costly: false,
        decision: None,
    }))
}

/// A limit sent by Envoy in place of the config's, with a counter of its
/// own. As in envoyproxy/ratelimit, `requests_per_unit: 0` is a limit that
/// nothing passes.
fn plan_override(
    domain: &str,
    index: usize,
    descriptor: &DescriptorRequest,
    requests_per_unit: u64,
    unit: Unit,
    cost: u64,
) -> Result<Planned<'static>, CheckError> {
    let window = unit.duration();
    let enforcement = if requests_per_unit == 0 {
        Enforcement::Blocked
    } else {
        let rate =
            Rate::new(requests_per_unit, window).map_err(|_| CheckError::BadOverride(index))?;
        Enforcement::Rule(Rule::new(rate))
    };
    let mut key = CounterKey::overridden(domain);
    for (k, v) in &descriptor.entries {
        key.entry(k, v);
    }
    key.rate(requests_per_unit, window.as_millis());
    let limit = Limit {
        id: LimitId::OVERRIDE,
        enforcement,
        requests_per_unit,
        unit,
        name: None,
        replaces: Vec::new(),
        shadow_mode: false,
        quota_mode: false,
        detailed_metric: false,
        // Overrides are counted as `override` in the metrics, never by name.
        full_key: String::new(),
    };
    Ok(Planned {
        limit: AppliedLimit::Override(Box::new(limit)),
        key: key.finish(),
        metric: MetricName::Override,
        cost,
        too_costly: false,
        decision: None,
    })
}

/// envoyproxy/ratelimit's `replaces`: a limit named by another matched
/// limit's `replaces` is not applied.
pub(super) fn drop_replaced(plans: &mut [Option<Planned<'_>>]) {
    if !plans.iter().flatten().any(|p| !p.limit.replaces.is_empty()) {
        return;
    }
    let replaced: HashSet<&str> = plans
        .iter()
        .flatten()
        .flat_map(|p| p.limit.replaces.iter().map(String::as_str))
        .collect();
    let dropped: Vec<bool> = plans
        .iter()
        .map(|plan| {
            plan.as_ref()
                .and_then(|p| p.limit.name.as_deref())
                .is_some_and(|n| replaced.contains(n))
        })
        .collect();
    for (plan, dropped) in plans.iter_mut().zip(dropped) {
        if dropped {
            *plan = None;
        }
    }
}

/// Bounds each descriptor's cost, added to the costs of earlier ones on
/// the same counter and rule, by the rule's [`Rule::max_cost`]: a report is
/// cut to what is left under it (saturating: a larger report never counts
/// for less), any other cost past it is marked too costly.
pub(super) fn bound_costs(plans: &mut [Option<Planned<'_>>]) {
    if plans.len() <= SCAN_UP_TO {
        for i in 0..plans.len() {
            let (earlier, rest) = plans.split_at_mut(i);
            let Some(p) = &mut rest[0] else { continue };
            let Some(rule) = p.rule() else { continue };
            let before = earlier
                .iter()
                .flatten()
                .filter(|e| e.rule() == Some(rule) && e.key == p.key)
                .fold(0, |sum: u64, e| sum.saturating_add(e.cost));
            p.bound_cost(rule, before);
        }
        return;
    }
    // The sums run over the costs as asked: a report cut to what is left
    // leaves nothing either way.
    let mut sums: HashMap<(&str, Rule), u64> = HashMap::with_capacity(plans.len());
    let before: Vec<Option<(Rule, u64)>> = plans
        .iter()
        .map(|plan| {
            let p = plan.as_ref()?;
            let rule = p.rule()?;
            let sum = sums.entry((p.key.as_str(), rule)).or_insert(0);
            let before = *sum;
            *sum = sum.saturating_add(p.cost);
            Some((rule, before))
        })
        .collect();
    for (plan, before) in plans.iter_mut().zip(before) {
        if let (Some(p), Some((rule, before))) = (plan, before) {
            p.bound_cost(rule, before);
        }
    }
}
