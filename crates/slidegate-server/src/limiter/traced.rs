//! Decisions in a span of their own (`slidegate.decision`) when spans are
//! exported (`--otlp-endpoint`); otherwise the plain decision, with no
//! span made.

use slidegate::{Rule, Store};
use tracing::Instrument;

use super::adhoc::{self, ADHOC_RULE, AdhocDecision};
use super::check::{self, CheckError, CheckRequest, CheckResponse, Code};
use crate::rules::RateLimitConfig;
use crate::spans;

/// [`check::check`], in a decision span when spans are exported.
pub async fn check<'c, S: Store>(
    config: &'c RateLimitConfig,
    store: &S,
    request: &CheckRequest,
) -> Result<CheckResponse<'c>, CheckError> {
    if !spans::enabled() {
        return check::check(config, store, request).await;
    }
    let span = tracing::debug_span!(
        target: spans::TARGET,
        "slidegate.decision",
        domain = %request.domain,
        descriptors = request.descriptors.len(),
        outcome = tracing::field::Empty,
        degraded = tracing::field::Empty,
        fallback = tracing::field::Empty,
        error = tracing::field::Empty,
    );
    let result = check::check(config, store, request)
        .instrument(span.clone())
        .await;
    match &result {
        Ok(response) => {
            span.record(
                "outcome",
                match response.overall {
                    Code::Ok => "allowed",
                    Code::OverLimit => "denied",
                },
            );
            mark_degraded(&span, response.degraded);
        }
        Err(error) => {
            span.record("outcome", "error");
            span.record("error", tracing::field::display(error));
        }
    }
    result
}

/// [`adhoc::acquire`], in a decision span when spans are exported.
pub async fn acquire<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[Rule],
    cost: u64,
) -> slidegate::Result<AdhocDecision> {
    if !spans::enabled() {
        return adhoc::acquire(store, key, rules, cost).await;
    }
    let span = tracing::debug_span!(
        target: spans::TARGET,
        "slidegate.decision",
        domain = "",
        rule = ADHOC_RULE,
        outcome = tracing::field::Empty,
        degraded = tracing::field::Empty,
        fallback = tracing::field::Empty,
    );
    // Boxed: the span and its instrumented future, held inline, would
    // make the future of every decision larger, traced or not.
    let result = Box::pin(adhoc::acquire(store, key, rules, cost).instrument(span.clone())).await;
    match &result {
        Ok(answer) => {
            let allowed = answer.decision.allowed();
            span.record("outcome", if allowed { "allowed" } else { "denied" });
            mark_degraded(&span, answer.decision.degraded());
        }
        Err(_) => {
            span.record("outcome", "error");
        }
    }
    result
}

fn mark_degraded(span: &tracing::Span, degraded: bool) {
    span.record("degraded", degraded);
    if degraded {
        span.record("fallback", "policy");
    }
}
