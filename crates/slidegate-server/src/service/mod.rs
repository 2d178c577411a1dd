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

use std::sync::Arc;
use std::time::Duration;

use slidegate::{Decision, Hit, Rate, Rule, Store};

use crate::config::{Enforcement, Limit, RateLimitConfig, Unit};

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

/// The answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckResponse {
    /// OVER_LIMIT if any descriptor is.
    pub overall: Code,
    /// One status per descriptor, in order.
    pub statuses: Vec<DescriptorStatus>,
    /// Per descriptor: what happened and the metrics name of its limit.
    pub outcomes: Vec<(Outcome, Option<String>)>,
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
    /// An override with a zero or unknown unit.
    #[error("descriptor {0}: the limit override needs requests_per_unit > 0 and a known unit")]
    BadOverride(usize),
    /// The store refused the decision (bad input) or failed.
    #[error(transparent)]
    Store(#[from] slidegate::Error),
}

/// A descriptor's plan: its limit, key and cost.
struct Planned {
    limit: Arc<Limit>,
    key: String,
    metric: String,
    cost: u64,
    /// The cost (with the costs of earlier descriptors on the same counter)
    /// exceeds the limit: over the limit whatever the state.
    too_costly: bool,
}

impl Planned {
    fn is_soft(&self) -> bool {
        self.limit.shadow_mode || self.limit.quota_mode
    }

    /// Over the limit before any counting: blocked, or asking too much.
    fn over_regardless(&self) -> bool {
        self.too_costly || self.limit.enforcement == Enforcement::Blocked
    }
}

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
    let mut plans: Vec<Option<Planned>> = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() {
            return Err(CheckError::EmptyDescriptor(i));
        }
        let cost = descriptor.hits_addend.unwrap_or(request_hits);
        plans.push(plan(config, &request.domain, i, descriptor, cost)?);
    }
    drop_replaced(&mut plans);
    mark_too_costly(&mut plans);

    // A hard limit that is over whatever the state vetoes the request:
    // nothing is counted, the others only report their state.
    let vetoed = plans
        .iter()
        .flatten()
        .any(|p| !p.is_soft() && p.over_regardless());
    let counted = |p: &Planned, pass: bool| {
        if pass && !p.over_regardless() {
            p.cost
        } else {
            0
        }
    };
    let hard: Vec<usize> = counted_indices(&plans, false);
    let mut decisions: Vec<Option<Decision>> = vec![None; plans.len()];
    let hits: Vec<Hit<'_>> = hard
        .iter()
        .filter_map(|&i| plans[i].as_ref().and_then(|p| hit(p, counted(p, !vetoed))))
        .collect();
    let mut passed = !vetoed;
    if !hits.is_empty() {
        // All or nothing, across Redis Cluster slots too (the store undoes
        // the slots it recorded when another denies).
        let results = store.acquire_batch(&hits).await?;
        passed &= results.iter().all(Decision::allowed);
        for (&i, decision) in hard.iter().zip(results) {
            decisions[i] = Some(decision);
        }
    }
    // Shadow and quota limits count only when the request goes through.
    for i in counted_indices(&plans, true) {
        let Some(hit) = plans[i].as_ref().and_then(|p| hit(p, counted(p, passed))) else {
            continue;
        };
        decisions[i] = Some(store.acquire(hit.key, &[hit.rule], hit.cost).await?);
    }
    Ok(respond(&plans, &decisions))
}

fn plan(
    config: &RateLimitConfig,
    domain: &str,
    index: usize,
    descriptor: &DescriptorRequest,
    cost: u64,
) -> Result<Option<Planned>, CheckError> {
    let entries: Vec<(&str, &str)> = descriptor
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some((requests_per_unit, unit)) = descriptor.limit_override {
        let rate = Rate::new(requests_per_unit, unit.duration())
            .map_err(|_| CheckError::BadOverride(index))?;
        let full_key = std::iter::once(domain.to_owned())
            .chain(entries.iter().map(|(k, v)| format!("{k}_{v}")))
            .collect::<Vec<_>>()
            .join(".");
        let limit = Limit {
            enforcement: Enforcement::Rule(Rule::new(rate)),
            requests_per_unit,
            unit,
            name: None,
            replaces: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            full_key: full_key.clone(),
        };
        let key = format!(
            "{}|override|{requests_per_unit}/{}",
            override_key(domain, &entries),
            unit.duration().as_millis()
        );
        return Ok(Some(Planned {
            limit: Arc::new(limit),
            key,
            metric: full_key,
            cost,
            too_costly: false,
        }));
    }
    Ok(config.lookup(domain, &entries).map(|m| Planned {
        limit: Arc::clone(m.limit),
        key: m.counter_key,
        metric: m.metric_key,
        cost,
        too_costly: false,
    }))
}

fn override_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let escape = |s: &str| {
        s.replace('%', "%25")
            .replace('|', "%7C")
            .replace('=', "%3D")
            .replace('{', "%7B")
            .replace('}', "%7D")
    };
    let mut key = escape(domain);
    for (k, v) in entries {
        key.push('|');
        key.push_str(&escape(k));
        key.push('=');
        key.push_str(&escape(v));
    }
    key
}

/// envoyproxy/ratelimit's `replaces`: a limit named by another matched
/// limit's `replaces` is not applied.
fn drop_replaced(plans: &mut [Option<Planned>]) {
    let replaced: Vec<String> = plans
        .iter()
        .flatten()
        .flat_map(|p| p.limit.replaces.iter().cloned())
        .collect();
    for plan in plans.iter_mut() {
        if plan
            .as_ref()
            .and_then(|p| p.limit.name.as_ref())
            .is_some_and(|n| replaced.contains(n))
        {
            *plan = None;
        }
    }
}

/// Marks descriptors whose cost, added to earlier ones on the same counter
/// and rule, exceeds the limit.
fn mark_too_costly(plans: &mut [Option<Planned>]) {
    for i in 0..plans.len() {
        let Some(p) = plans[i].as_ref() else { continue };
        let Enforcement::Rule(rule) = p.limit.enforcement else {
            continue;
        };
        let before: u64 = plans[..i]
            .iter()
            .flatten()
            .filter(|q| q.key == p.key && q.limit.enforcement == p.limit.enforcement)
            .map(|q| q.cost)
            .sum();
        let too_costly = before.saturating_add(p.cost) > rule.limit();
        if let Some(p) = plans[i].as_mut() {
            p.too_costly = too_costly;
        }
    }
}

/// Descriptors counted by the store, soft (shadow/quota) or hard.
fn counted_indices(plans: &[Option<Planned>], soft: bool) -> Vec<usize> {
    plans
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.as_ref().is_some_and(|p| {
                matches!(p.limit.enforcement, Enforcement::Rule(_)) && p.is_soft() == soft
            })
        })
        .map(|(i, _)| i)
        .collect()
}

fn hit(planned: &Planned, cost: u64) -> Option<Hit<'_>> {
    match planned.limit.enforcement {
        Enforcement::Rule(rule) => Some(Hit::new(planned.key.as_str(), rule, cost)),
        _ => None,
    }
}

fn respond(plans: &[Option<Planned>], decisions: &[Option<Decision>]) -> CheckResponse {
    let mut response = CheckResponse {
        overall: Code::Ok,
        statuses: Vec::with_capacity(plans.len()),
        outcomes: Vec::with_capacity(plans.len()),
        quota_violations: Vec::new(),
        quota_mode: false,
        degraded: decisions.iter().flatten().any(Decision::degraded),
    };
    for (i, (plan, decision)) in plans.iter().zip(decisions).enumerate() {
        let Some(plan) = plan else {
            response.statuses.push(DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: Duration::ZERO,
            });
            response.outcomes.push((Outcome::Unlimited, None));
            continue;
        };
        let limit = &plan.limit;
        response.quota_mode |= limit.quota_mode;
        let current_limit = Some(CurrentLimit {
            name: limit.name.clone(),
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit,
        });
        let (over, remaining, wait) = match (limit.enforcement, decision) {
            (Enforcement::Unlimited, _) => (false, 0, Duration::ZERO),
            (Enforcement::Blocked, _) => (true, 0, limit.unit.duration()),
            // No wait lets this cost pass: report the whole window.
            (Enforcement::Rule(_), Some(d)) if plan.too_costly => {
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
        response.statuses.push(DescriptorStatus {
            code,
            current_limit: if limit.enforcement == Enforcement::Unlimited {
                None
            } else {
                current_limit
            },
            limit_remaining: remaining,
            duration_until_reset: wait,
        });
        response.outcomes.push((outcome, Some(plan.metric.clone())));
    }
    response
}

#[cfg(test)]
mod tests;
