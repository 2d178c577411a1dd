//! Carrying a counter's use to a changed limit, at its first decision
//! under it (see [`Carry`]): what the counter used under the rules before
//! is recorded under the new one, less what it already holds there.
//!
//! Once per counter: this server remembers the counters it carried, and
//! servers sharing a store take a marker before they record (a limit of 1
//! per window, in a key space of its own), so that only the first one
//! carries. A carry that fails (the store does not answer) is tried again
//! at the counter's next decision; the decision itself goes on under the
//! new limit, never without one. Decisions of the same counter made on
//! other servers while a carry is being made (a few store round trips)
//! do not see it.

use slidegate::limits::{owed_to, record_carry};
use slidegate::{Rate, Rule, Store};

use super::plan::Planned;
use crate::keys::carry_marker;
use crate::rules::{Carry, LimitId, RateLimitConfig};

/// Makes the carries the planned counters are owed, before they are decided.
pub(super) async fn carry_in<S: Store>(
    config: &RateLimitConfig,
    store: &S,
    plans: &[Option<Planned<'_>>],
) {
    let now = std::time::Instant::now();
    for plan in plans.iter().flatten() {
        if plan.rule().is_none() || plan.limit.id == LimitId::OVERRIDE {
            continue;
        }
        let Some(carry) = config.carry(plan.limit.id) else {
            continue;
        };
        if carry.is_live(now)
            && carry.claim(&plan.key)
            && let Err(error) = carry_counter(store, carry, &plan.key).await
        {
            // Asked again at the counter's next decision.
            carry.unclaim(&plan.key);
            tracing::debug!(%error, key = %plan.key, "a counter's use was not carried to its changed limit");
        }
    }
}

/// Carries `key`'s use under `carry.old` to `carry.new`, if this call
/// takes the counter's marker. The marker is taken once the use is read,
/// so a store that fails before leaves the carry to a later decision.
async fn carry_counter<S: Store>(store: &S, carry: &Carry, key: &str) -> slidegate::Result<()> {
    let owed = owed_to(store, key, &carry.old, carry.new).await?;
    if owed == 0 {
        return Ok(());
    }
    let marker = Rule::new(Rate::new(1, carry.window())?);
    let taken = store
        .acquire(&carry_marker(key, carry.new), &[marker], 1)
        .await?;
    if taken.allowed() && !taken.degraded() {
        record_carry(store, key, carry.new, owed).await?;
    }
    Ok(())
}
