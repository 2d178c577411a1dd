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
//! A cost above what one decision may ask of a counter ([`Rule::max_cost`](slidegate::Rule::max_cost))
//! is over the limit whatever the state, and nothing is counted; under a
//! limit that reports usage it is recorded as that ceiling (10^12, more
//! than any limit) instead: Envoy sends a report once the response is done
//! and acts on no answer, so a report refused, or dropped, would leave a
//! client that used more with more quota than one that used less.

use std::time::Duration;

use slidegate::{Decision, Hit, Store};
use smallvec::SmallVec;

use crate::limiter::store_call::acquire_one;
use crate::rules::{Enforcement, RateLimitConfig};

mod carry;
mod plan;
mod request;
mod response;

use plan::{Planned, bound_costs, drop_replaced, plan};
pub use request::{CheckError, CheckRequest, DescriptorRequest};
pub use response::{
    AppliedLimit, CheckResponse, Code, DescriptorStatus, MetricName, UNLIMITED_REMAINING, Verdict,
};

/// Each descriptor's plan, in order: held inline for the usual check of
/// one descriptor, which then allocates no list.
type Plans<'c> = SmallVec<[Option<Planned<'c>>; 1]>;

/// Decides `request` against `config` in `store`.
pub async fn check<'c, S: Store>(
    config: &'c RateLimitConfig,
    store: &S,
    request: &CheckRequest,
) -> Result<CheckResponse<'c>, CheckError> {
    if request.domain.is_empty() {
        return Err(CheckError::EmptyDomain);
    }
    if request.descriptors.is_empty() {
        return Err(CheckError::NoDescriptors);
    }
    let request_hits = request.hits_addend.max(1);
    let mut plans = Plans::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() {
            return Err(CheckError::EmptyDescriptor(i));
        }
        let cost = descriptor.hits_addend.unwrap_or(request_hits);
        plans.push(plan(config, &request.domain, i, descriptor, cost)?);
    }
    // A configured limit matches only in a configured domain: then the
    // domain is not looked up a second time (the lookup hashed its name).
    let known_domain = plans
        .iter()
        .flatten()
        .any(|p| matches!(p.limit, AppliedLimit::Configured(_)))
        || config.has_domain(&request.domain);
    drop_replaced(&mut plans);
    bound_costs(&mut plans);
    if config.has_carries() {
        carry::carry_in(config, store, &plans).await;
    }

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
        let decision = acquire_one(store, hit).await?;
        plan.decision = Some(decision);
    }
    // Drained in place: the list is not moved (copied) into the answer.
    let mut response = respond(&mut plans);
    response.known_domain = known_domain;
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
            let decision = acquire_one(store, hit).await?;
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
    // Boxed: see `acquire_one`.
    let decisions = Box::pin(store.acquire_batch(&hits)).await?;
    let passed = pass && decisions.iter().all(Decision::allowed);
    let hard = plans.iter_mut().flatten().filter(|p| p.is_hard_rule());
    for (plan, decision) in hard.zip(decisions) {
        plan.decision = Some(decision);
    }
    Ok(passed)
}

fn respond<'c>(plans: &mut Plans<'c>) -> CheckResponse<'c> {
    let mut response = CheckResponse {
        overall: Code::Ok,
        statuses: Vec::with_capacity(plans.len()),
        quota_violations: Vec::new(),
        quota_mode: false,
        known_domain: false,
        degraded: plans
            .iter()
            .flatten()
            .filter_map(|p| p.decision)
            .any(|d| d.degraded()),
    };
    for (i, plan) in plans.drain(..).enumerate() {
        let Some(Planned {
            limit,
            metric,
            too_costly,
            decision,
            ..
        }) = plan
        else {
            response.statuses.push(DescriptorStatus {
                limit: None,
                verdict: Verdict::Unlimited,
                decision: None,
                metric: MetricName::NoLimit,
            });
            continue;
        };
        response.quota_mode |= limit.quota_mode;
        let decision = match (limit.enforcement, decision) {
            (Enforcement::Unlimited, _) => None,
            // Nothing passes: the limiter's own denial, for the whole window.
            (Enforcement::Blocked, _) => Some(over_for(0, 0, limit.unit.duration())),
            // No wait lets this cost pass: the whole window, and the state.
            (Enforcement::Rule(_), Some(d)) if too_costly => {
                Some(over_for(d.limit(), d.remaining(), limit.unit.duration()))
            }
            (Enforcement::Rule(_), decision) => decision,
        };
        let over = decision.is_some_and(|d| !d.allowed());
        let verdict = match (limit.enforcement, over) {
            (Enforcement::Unlimited, _) => Verdict::Unlimited,
            (_, false) => Verdict::Allowed,
            (_, true) if limit.shadow_mode => Verdict::ShadowDenied,
            (_, true) if limit.quota_mode => Verdict::QuotaExceeded,
            (_, true) => Verdict::Denied,
        };
        if verdict == Verdict::QuotaExceeded {
            response.quota_violations.push(i);
        }
        if verdict == Verdict::Denied {
            response.overall = Code::OverLimit;
        }
        response.statuses.push(DescriptorStatus {
            limit: Some(limit),
            verdict,
            decision,
            metric,
        });
    }
    response
}

/// A denial that waits `window`: what no wait would let pass.
fn over_for(limit: u64, remaining: u64, window: Duration) -> Decision {
    let window_us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    Decision::from_parts(false, limit, remaining, window_us, window_us)
}

#[cfg(test)]
mod tests;
