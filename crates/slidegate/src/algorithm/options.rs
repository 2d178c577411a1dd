//! How a rule's options ([`Rule::block_for`](crate::Rule::block_for),
//! [`Rule::reporting`](crate::Rule::reporting)) change what an algorithm
//! answers: the same for every store.

use crate::decision::Decision;

/// The answer to a hit whose key is locked out under its rule until
/// `blocked_until` ([`Rule::block_for`](crate::Rule::block_for)), given
/// what the algorithm answers: denied until the later of the block's end
/// and the time the algorithm says, nothing remaining. Unchanged when the
/// block has ended (or there is none: 0).
pub(crate) fn blocked(decision: Decision, blocked_until: u64, now: u64) -> Decision {
    if blocked_until <= now {
        return decision;
    }
    let rest = blocked_until - now;
    let retry = if decision.allowed {
        rest
    } else {
        decision.retry_after_us.max(rest)
    };
    Decision::from_parts(
        false,
        decision.limit,
        0,
        retry,
        decision.reset_after_us.max(rest),
    )
}

/// The answer to a reporting hit that was denied, once its cost is
/// recorded: `probe` is a check of cost 0 after recording. Still denied,
/// with the state as the report left it: when the next request may pass.
pub(crate) fn reported(probe: Decision) -> Decision {
    let retry = if probe.allowed {
        0
    } else {
        probe.retry_after_us
    };
    Decision::from_parts(
        false,
        probe.limit,
        probe.remaining,
        retry,
        probe.reset_after_us,
    )
}
