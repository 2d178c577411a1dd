//! Asking the store, and the JSON form of its answer. Shared by every
//! protocol (`POST /v1/acquire`, `GET /v1/keys/{key}`, `slidegate check`).
//!
//! Keys given here are ad-hoc keys: each is decided in the ad-hoc key space
//! ([`keys::adhoc_key`]), never in the space of the counters of the
//! configured rules.

use serde::Serialize;
use slidegate::{Decision, Hit, Rule, Store};

use crate::api::http::headers::push_decimal;
use crate::keys;

/// The store's answer to one request: the decision the caller sees and the
/// decision of each rule (for the `RateLimit` headers, one item per rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// All rules folded into one (see [`Decision::combine`]).
    pub decision: Decision,
    /// Each rule with its own decision, in the order asked.
    pub rules: Vec<(Rule, Decision)>,
}

/// Decides `cost` units for the ad-hoc `key` under every rule, all-or-nothing.
pub async fn acquire<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[Rule],
    cost: u64,
) -> slidegate::Result<Outcome> {
    let key = keys::adhoc_key(key)?;
    let key = key.as_str();
    if let [rule] = rules {
        let decision = crate::limiter::check::acquire(store, Hit::new(key, *rule, cost)).await?;
        return Ok(Outcome {
            decision,
            rules: vec![(*rule, decision)],
        });
    }
    let hits: Vec<Hit<'_>> = rules.iter().map(|r| Hit::new(key, *r, cost)).collect();
    // Boxed, as `service::acquire` explains.
    let decisions = Box::pin(store.acquire_batch(&hits)).await?;
    let decision = Decision::combine(&decisions).ok_or(slidegate::Error::NoRules)?;
    Ok(Outcome {
        decision,
        rules: rules.iter().copied().zip(decisions).collect(),
    })
}

/// Reserves `cost` units for the ad-hoc `key` under every rule,
/// all-or-nothing, at the earliest time they fit if that is within
/// `max_wait` (see [`Store::reserve_batch`]): the outcome, and how long to
/// wait before answering (zero when admitted at once or denied).
pub async fn reserve<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[Rule],
    cost: u64,
    max_wait: std::time::Duration,
) -> slidegate::Result<(Outcome, std::time::Duration)> {
    let key = keys::adhoc_key(key)?;
    let key = key.as_str();
    let hits: Vec<Hit<'_>> = rules.iter().map(|r| Hit::new(key, *r, cost)).collect();
    let reserved = Box::pin(store.reserve_batch(&hits, max_wait)).await?;
    let wait = reserved.wait();
    let decisions = reserved.into_decisions();
    let decision = Decision::combine(&decisions).ok_or(slidegate::Error::NoRules)?;
    let outcome = Outcome {
        decision,
        rules: rules.iter().copied().zip(decisions).collect(),
    };
    Ok((outcome, wait))
}

/// The state of the ad-hoc `key` under `rule`, consuming nothing.
pub async fn peek<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rule: Rule,
) -> slidegate::Result<Outcome> {
    let decision = store.peek(&keys::adhoc_key(key)?, &[rule]).await?;
    Ok(Outcome {
        decision,
        rules: vec![(rule, decision)],
    })
}

/// Forgets the ad-hoc `key` under every rule.
pub async fn reset<S: Store + ?Sized>(store: &S, key: &str) -> slidegate::Result<()> {
    store.reset(&keys::adhoc_key(key)?).await
}

/// A decision as JSON:
/// `{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60000,"retry_after_ms":0}`,
/// plus `"degraded":true` only when a failure policy decided instead of the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DecisionBody {
    /// The request may pass.
    pub allowed: bool,
    /// The limit of the deciding rule.
    pub limit: u64,
    /// Units left in its window.
    pub remaining: u64,
    /// Milliseconds until the full quota is back, rounded up.
    pub reset_after_ms: u64,
    /// Milliseconds until the same request would pass, rounded up; 0 when allowed.
    pub retry_after_ms: u64,
    /// Decided by a failure policy, not by the store.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

impl DecisionBody {
    /// The body as JSON, written field by field: the same text as
    /// `serde_json::to_string` (checked in the tests), without the
    /// serializer's machinery on every `/v1/acquire`.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(128);
        out.push_str(if self.allowed {
            "{\"allowed\":true,\"limit\":"
        } else {
            "{\"allowed\":false,\"limit\":"
        });
        push_decimal(&mut out, self.limit);
        out.push_str(",\"remaining\":");
        push_decimal(&mut out, self.remaining);
        out.push_str(",\"reset_after_ms\":");
        push_decimal(&mut out, self.reset_after_ms);
        out.push_str(",\"retry_after_ms\":");
        push_decimal(&mut out, self.retry_after_ms);
        if self.degraded {
            out.push_str(",\"degraded\":true");
        }
        out.push('}');
        out
    }
}

impl From<&Decision> for DecisionBody {
    fn from(d: &Decision) -> DecisionBody {
        DecisionBody {
            allowed: d.allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            reset_after_ms: d.reset_after_ms(),
            retry_after_ms: d.retry_after_ms(),
            degraded: d.degraded(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_exactly_the_documented_fields() {
        let d = Decision::from_parts(true, 100, 99, 0, 59_999_001);
        let json = serde_json::to_string(&DecisionBody::from(&d)).unwrap();
        assert_eq!(
            json,
            r#"{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":60000,"retry_after_ms":0}"#
        );
        let degraded = DecisionBody::from(&d.into_degraded());
        let json = serde_json::to_value(&degraded).unwrap();
        assert_eq!(json["degraded"], true);
    }

    #[test]
    fn the_body_written_by_hand_is_what_serde_writes() {
        for d in [
            Decision::from_parts(true, 100, 99, 0, 59_999_001),
            Decision::from_parts(false, 5, 0, 1_500_000, 60_000_000),
            Decision::from_parts(true, u64::MAX, u64::MAX - 1, 0, 0).into_degraded(),
            Decision::from_parts(false, 1, 0, 999, 1).into_degraded(),
        ] {
            let body = DecisionBody::from(&d);
            assert_eq!(body.to_json(), serde_json::to_string(&body).unwrap());
        }
    }
}
