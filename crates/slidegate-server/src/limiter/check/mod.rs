//! Envoy's rate limit check, independent of the wire: what gRPC
//! `ShouldRateLimit` and `POST /v1/check` both translate to and from.
//!
//! The descriptors of one request that are enforced are decided in one
//! batch: all pass and are recorded, or none is recorded. On Redis Cluster,
//! descriptors whose counters live in different slots are decided slot by
//! slot by the store, which undoes what it recorded when a later slot
//! denies (see the Redis store's cross-slot decisions). Shadow-mode
//! and quota-mode limits are counted when the request passes and they have
//! room, and never deny it.
//!
//! A cost above what one decision may ask of a counter ([`Rule::max_cost`])
//! is over the limit whatever the state, and nothing is counted; under a
//! limit that reports usage it is recorded as that ceiling (10^12, more
//! than any limit) instead: Envoy sends a report once the response is done
//! and acts on no answer, so a report refused, or dropped, would leave a
//! client that used more with more quota than one that used less.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use slidegate::{Decision, Hit, Rate, Rule, Store};

use crate::keys::CounterKey;
use crate::rules::{Enforcement, Limit, RateLimitConfig, Unit};

/// `limitRemaining` of a descriptor under an `unlimited: true` limit, as
/// envoyproxy/ratelimit answers it: the largest `uint32`.
pub const UNLIMITED_REMAINING: u64 = u32::MAX as u64;

/// One request: a domain and its descriptors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckRequest {
    /// The config domain.
    pub domain: String,
    /// The descriptors, each decided against its own limit.
    pub descriptors: Vec<DescriptorRequest>,
    /// Units per descriptor; 0 means 1, as in Envoy.
    pub hits_addend: u64,
}

/// One descriptor of a request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DescriptorRequest {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// Overrides the request's `hits_addend`; 0 checks without consuming.
    pub hits_addend: Option<u64>,
    /// A limit sent by Envoy in place of the config's.
    pub limit_override: Option<(u64, Unit)>,
}

/// The verdict on a request or a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or not limited).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The answer for one descriptor.
#[derive(Clone, Debug, PartialEq)]
pub struct DescriptorStatus {
    /// OK or OVER_LIMIT (shadow and quota limits always say OK).
    pub code: Code,
    /// The limit that applied, if any.
    pub current_limit: Option<CurrentLimit>,
    /// Units left in the window.
    pub limit_remaining: u64,
    /// When over the limit: the least wait until the same request passes;
    /// otherwise: until the window is empty again.
    pub duration_until_reset: Duration,
}

/// The limit reported with a status.
#[derive(Clone, Debug, PartialEq)]
pub struct CurrentLimit {
    /// The limit's name, if configured.
    pub name: Option<String>,
    /// Requests per unit.
    pub requests_per_unit: u64,
    /// The unit.
    pub unit: Unit,
}

/// What happened to one descriptor, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No limit applied.
    Unlimited,
    /// Within the limit.
    Allowed,
    /// Over the limit and enforced.
    Denied,
    /// Over a shadow-mode limit: reported OK.
    ShadowDenied,
    /// Over a quota-mode limit: reported OK, listed in the metadata.
    QuotaExceeded,
}

/// What one descriptor's decision is counted under in the metrics.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricName {
    /// No limit matched (or one was replaced).
    NoLimit,
    /// A configured limit: named by its configured stats key.
    Configured(Arc<Limit>),
    /// A configured limit with `detailed_metric` or `value_to_metric`:
    /// envoyproxy/ratelimit's stats key with the request's values in it.
    Detailed(Arc<Limit>, String),
    /// A limit override sent with the request.
    Override,
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckResponse {
    /// OVER_LIMIT if any descriptor is.
    pub overall: Code,
    /// One status per descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Per descriptor: what happened and what it is counted under.
    pub outcomes: Vec<(Outcome, MetricName)>,
    /// The request's domain is configured.
    pub known_domain: bool,
    /// Indices of descriptors over a quota-mode limit.
    pub quota_violations: Vec<usize>,
    /// True when some limit is in quota mode.
    pub quota_mode: bool,
    /// True when a failure policy decided some descriptor, not the store.
    pub degraded: bool,
}

/// Bad requests, answered with a client error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// No descriptor.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor without entries.
    #[error("descriptor {0} has no entries")]
    EmptyDescriptor(usize),
    /// An override whose rate is out of range.
    #[error(
        "descriptor {0}: the limit override's requests_per_unit must be at most {max}",
        max = Rate::MAX_LIMIT
    )]
    BadOverride(usize),
    /// The store refused the decision (bad input) or failed.
    #[error(transparent)]
    Store(#[from] slidegate::Error),
}

/// A descriptor's plan: its limit, key and cost, and the store's decision
/// once it is asked.
struct Planned<'a> {
    /// The configured limit (borrowed from the config), or an override's.
    limit: Cow<'a, Arc<Limit>>,
    key: String,
    metric: MetricName,
    cost: u64,
    /// The cost (with the costs of earlier descriptors on the same counter)
    /// exceeds the limit: over the limit whatever the state.
    too_costly: bool,
    decision: Option<Decision>,
}

impl Planned<'_> {
    fn is_soft(&self) -> bool {
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
    fn over_regardless(&self) -> bool {
        self.too_costly || self.limit.enforcement == Enforcement::Blocked
    }

    /// The rule the store counts this descriptor under, if it has one.
    fn rule(&self) -> Option<Rule> {
        match self.limit.enforcement {
            Enforcement::Rule(rule) => Some(rule),
            Enforcement::Unlimited | Enforcement::Blocked => None,
        }
    }

    /// A hard limit the store counts: decided with the others, all or nothing.
    fn is_hard_rule(&self) -> bool {
        !self.is_soft() && self.rule().is_some()
    }

    /// The store hit: the descriptor's cost when the request `pass`es and
    /// this descriptor can, otherwise 0 (the state only).
    fn hit(&self, pass: bool) -> Option<Hit<'_>> {
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
const SCAN_UP_TO: usize = 16;

/// Decides `request` against `config` in `store`.
pub async fn check<S: Store>(
    config: &RateLimitConfig,
    store: &S,
    request: &CheckRequest,
) -> Result<CheckResponse, CheckError> {
    if request.domain.is_empty() {
        return Err(CheckError::EmptyDomain);
    }
    if request.descriptors.is_empty() {
        return Err(CheckError::NoDescriptors);
    }
    let request_hits = request.hits_addend.max(1);
    let mut plans: Vec<Option<Planned<'_>>> = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() {
            return Err(CheckError::EmptyDescriptor(i));
        }
        let cost = descriptor.hits_addend.unwrap_or(request_hits);
        plans.push(plan(config, &request.domain, i, descriptor, cost)?);
    }
    drop_replaced(&mut plans);
    bound_costs(&mut plans);

    // A hard limit that is over whatever the state vetoes the request:
    // nothing is counted, the others only report their state.
    let vetoed = plans
        .iter()
        .flatten()
        .any(|p| !p.is_soft() && p.over_regardless());
    let passed = decide_hard(store, &mut plans, !vetoed).await?;
    // Shadow and quota limits count only when the request goes through.
    for plan in plans.iter_mut().flatten().filter(|p| p.is_soft()) {
        let Some(hit) = plan.hit(passed) else {
            continue;
        };
        let decision = acquire(store, hit).await?;
        plan.decision = Some(decision);
    }
    let mut response = respond(plans);
    response.known_domain = config.has_domain(&request.domain);
    Ok(response)
}

/// Decides the hard limits all or nothing, across Redis Cluster slots too
/// (the store undoes the slots it recorded when another denies), counting
/// them only if the request may `pass`; returns whether it passes.
async fn decide_hard<S: Store>(
    store: &S,
    plans: &mut [Option<Planned<'_>>],
    pass: bool,
) -> Result<bool, CheckError> {
    let hard = plans.iter().flatten().filter(|p| p.is_hard_rule()).count();
    if hard == 1 {
        // The common request, one descriptor: a batch of one is the store's
        // plain decision, without the batch's bookkeeping.
        if let Some(plan) = plans.iter_mut().flatten().find(|p| p.is_hard_rule())
            && let Some(hit) = plan.hit(pass)
        {
            let decision = acquire(store, hit).await?;
            plan.decision = Some(decision);
            return Ok(pass && decision.allowed());
        }
        return Ok(pass);
    }
    if hard == 0 {
        return Ok(pass);
    }
    let hits: Vec<Hit<'_>> = plans
        .iter()
        .flatten()
        .filter(|p| p.is_hard_rule())
        .filter_map(|p| p.hit(pass))
        .collect();
    // Boxed: see `acquire`.
    let decisions = Box::pin(store.acquire_batch(&hits)).await?;
    let passed = pass && decisions.iter().all(Decision::allowed);
    let hard = plans.iter_mut().flatten().filter(|p| p.is_hard_rule());
    for (plan, decision) in hard.zip(decisions) {
        plan.decision = Some(decision);
    }
    Ok(passed)
}

/// One hit's decision: at once when the store can take it without waiting
/// (the memory store, a cached denial), otherwise awaited in a box of its
/// own. A network store's future is large; held inline, it would make the
/// future of every check as large, and moving it (into the gRPC
/// framework's box, say) would cost every request that much copying.
pub async fn acquire<S: Store + ?Sized>(store: &S, hit: Hit<'_>) -> slidegate::Result<Decision> {
    let rules = [hit.rule];
    match store.acquire_now(hit.key, &rules, hit.cost) {
        Some(answer) => answer,
        None => Box::pin(store.acquire(hit.key, &rules, hit.cost)).await,
    }
}

fn plan<'a>(
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
        limit: Cow::Borrowed(m.limit),
        key: m.counter_key,
        metric: match m.detailed_key {
            Some(key) => MetricName::Detailed(Arc::clone(m.limit), key),
            None => MetricName::Configured(Arc::clone(m.limit)),
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
        counters: Default::default(),
        stats: Default::default(),
    };
    Ok(Planned {
        limit: Cow::Owned(Arc::new(limit)),
        key: key.finish(),
        metric: MetricName::Override,
        cost,
        too_costly: false,
        decision: None,
    })
}

/// envoyproxy/ratelimit's `replaces`: a limit named by another matched
/// limit's `replaces` is not applied.
fn drop_replaced(plans: &mut [Option<Planned<'_>>]) {
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
fn bound_costs(plans: &mut [Option<Planned<'_>>]) {
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

fn respond(plans: Vec<Option<Planned<'_>>>) -> CheckResponse {
    let mut response = CheckResponse {
        overall: Code::Ok,
        statuses: Vec::with_capacity(plans.len()),
        outcomes: Vec::with_capacity(plans.len()),
        quota_violations: Vec::new(),
        quota_mode: false,
        known_domain: false,
        degraded: plans
            .iter()
            .flatten()
            .filter_map(|p| p.decision)
            .any(|d| d.degraded()),
    };
    for (i, plan) in plans.into_iter().enumerate() {
        let Some(Planned {
            limit,
            metric,
            too_costly,
            decision,
            ..
        }) = plan
        else {
            response.statuses.push(DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: Duration::ZERO,
            });
            response
                .outcomes
                .push((Outcome::Unlimited, MetricName::NoLimit));
            continue;
        };
        response.quota_mode |= limit.quota_mode;
        let (over, remaining, wait) = match (limit.enforcement, decision) {
            (Enforcement::Unlimited, _) => (false, UNLIMITED_REMAINING, Duration::ZERO),
            (Enforcement::Blocked, _) => (true, 0, limit.unit.duration()),
            // No wait lets this cost pass: report the whole window.
            (Enforcement::Rule(_), Some(d)) if too_costly => {
                (true, d.remaining(), limit.unit.duration())
            }
            (Enforcement::Rule(_), Some(d)) => (
                !d.allowed(),
                d.remaining(),
                if d.allowed() {
                    d.reset_after()
                } else {
                    d.retry_after()
                },
            ),
            (Enforcement::Rule(_), None) => (false, 0, Duration::ZERO),
        };
        let outcome = match (limit.enforcement, over) {
            (Enforcement::Unlimited, _) => Outcome::Unlimited,
            (_, false) => Outcome::Allowed,
            (_, true) if limit.shadow_mode => Outcome::ShadowDenied,
            (_, true) if limit.quota_mode => Outcome::QuotaExceeded,
            (_, true) => Outcome::Denied,
        };
        if outcome == Outcome::QuotaExceeded {
            response.quota_violations.push(i);
        }
        let code = if outcome == Outcome::Denied {
            Code::OverLimit
        } else {
            Code::Ok
        };
        if code == Code::OverLimit {
            response.overall = Code::OverLimit;
        }
        let current_limit = (limit.enforcement != Enforcement::Unlimited).then(|| CurrentLimit {
            name: limit.name.clone(),
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit,
        });
        response.statuses.push(DescriptorStatus {
            code,
            current_limit,
            limit_remaining: remaining,
            duration_until_reset: wait,
        });
        response.outcomes.push((outcome, metric));
    }
    response
}

#[cfg(test)]
mod tests;
