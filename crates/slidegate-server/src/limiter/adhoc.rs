//! Ad-hoc decisions: a key and its rules, sent by the client. Shared by
//! every protocol (`POST /v1/acquire`, `GET /v1/keys/{key}`, `slidegate
//! check`).
//!
//! Keys given here are ad-hoc keys: each is decided in the ad-hoc key space
//! ([`keys::adhoc_key`]), never in the space of the counters of the
//! configured rules.

use slidegate::{Decision, Hit, Rule, Store};

use crate::keys;
use crate::limiter::store_call::acquire_one;

/// What ad-hoc decisions are counted under, as a rule: their limits and
/// windows come from clients, so they are no label.
pub const ADHOC_RULE: &str = "adhoc";

/// The store's answer to one request: the decision the caller sees and the
/// decision of each rule (for the `RateLimit` headers, one item per rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdhocDecision {
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
) -> slidegate::Result<AdhocDecision> {
    let key = keys::adhoc_key(key)?;
    let key = key.as_str();
    if let [rule] = rules {
        let decision = acquire_one(store, Hit::new(key, *rule, cost)).await?;
        return Ok(AdhocDecision {
            decision,
            rules: vec![(*rule, decision)],
        });
    }
    let hits: Vec<Hit<'_>> = rules.iter().map(|r| Hit::new(key, *r, cost)).collect();
    // Boxed, as `acquire_one` explains.
    let decisions = Box::pin(store.acquire_batch(&hits)).await?;
    let decision = Decision::combine(&decisions).ok_or(slidegate::Error::NoRules)?;
    Ok(AdhocDecision {
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
) -> slidegate::Result<(AdhocDecision, std::time::Duration)> {
    let key = keys::adhoc_key(key)?;
    let key = key.as_str();
    let hits: Vec<Hit<'_>> = rules.iter().map(|r| Hit::new(key, *r, cost)).collect();
    let reserved = Box::pin(store.reserve_batch(&hits, max_wait)).await?;
    let wait = reserved.wait();
    let decisions = reserved.into_decisions();
    let decision = Decision::combine(&decisions).ok_or(slidegate::Error::NoRules)?;
    let outcome = AdhocDecision {
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
) -> slidegate::Result<AdhocDecision> {
    let decision = store.peek(&keys::adhoc_key(key)?, &[rule]).await?;
    Ok(AdhocDecision {
        decision,
        rules: vec![(rule, decision)],
    })
}

/// Forgets the ad-hoc `key` under every rule.
pub async fn reset<S: Store + ?Sized>(store: &S, key: &str) -> slidegate::Result<()> {
    store.reset(&keys::adhoc_key(key)?).await
}

/// Decides `cost` units of redis-cell's `CL.THROTTLE` for `key` under
/// `rule` (a GCRA rule), in the throttle key space.
pub async fn throttle<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rule: Rule,
    cost: u64,
) -> slidegate::Result<Decision> {
    let key = keys::throttle_key(key)?;
    acquire_one(store, Hit::new(&key, rule, cost)).await
}

/// The state of the `CL.THROTTLE` key `key` under `rule`, consuming nothing.
pub async fn throttle_peek<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rule: Rule,
) -> slidegate::Result<Decision> {
    store.peek(&keys::throttle_key(key)?, &[rule]).await
}
