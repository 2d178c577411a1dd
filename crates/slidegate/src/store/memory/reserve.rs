//! Reservations over several (key, rule) hits whose keys' shards are
//! locked: the earliest time every hit fits, recorded there in one step.
//!
//! Every algorithm's usage only falls as time passes while nothing is
//! admitted, so a request that fits a rule at one time fits it at any
//! later time: the batch fits at the latest of its hits' earliest times
//! (`now` plus the largest `retry_after` of a check at `now`). Each state
//! records the admission at that time (a sliding log at its newest entry's
//! time when that is later), and the decisions that follow at `now` count
//! it, so waiters are served in the order they reserved and a later
//! request never passes ahead of one that waits.

use super::batch::{
    Locked, LockedHit, answer_blocks, check_all, forget_created, record_all, report_state,
    start_blocks,
};
use super::bounds::Bounds;
use crate::decision::Decision;
use crate::error::Result;

/// What a reservation got: one decision per hit, and the wait in µs when
/// it was granted.
pub(crate) struct Reserved {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) wait: Option<u64>,
}

/// Reserves `hits` all-or-nothing at the earliest time they fit, if that
/// is at most `max_wait` µs after `now`; otherwise records nothing and
/// answers as [`decide_all`](super::batch::decide_all) does for a denial.
pub(crate) fn reserve_all(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    now: u64,
    max_wait: u64,
    bounds: &Bounds,
) -> Result<Reserved> {
    let checked = check_all(keys, hits, now, bounds)?;
    let mut decisions = checked.decisions;
    let wait = decisions
        .iter()
        .map(|d| d.retry_after_us)
        .max()
        .unwrap_or(0);
    let at_once = decisions.iter().all(Decision::allowed);
    if !at_once && wait > max_wait {
        // Refused: a denial like any other, which starts the lockouts of
        // the rules that denied.
        forget_created(keys, hits, &checked.created, now, bounds);
        start_blocks(keys, hits, &decisions, now, bounds);
        report_state(keys, hits, &mut decisions, now, bounds);
        answer_blocks(keys, hits, &mut decisions, now);
        return Ok(Reserved {
            decisions,
            wait: None,
        });
    }
    // Never a check at the reserved time: it would drop entries that
    // still count at `now`. Recording there drops nothing.
    let at = if at_once { now } else { now + wait };
    record_all(keys, hits, &checked.pairs, &checked.asked, at, bounds)?;
    if at_once {
        // Exactly what a plain decision answers.
        return Ok(Reserved {
            decisions,
            wait: Some(0),
        });
    }
    // What remains now, the reservation counted, as an admission reports.
    let decisions = hits
        .iter()
        .map(|hit| {
            let (slot, rules) = keys.get(hit.key);
            let state = slot.check(hit.rule, now, 0, bounds, rules);
            Decision::from_parts(true, state.limit, state.remaining, 0, state.reset_after_us)
        })
        .collect();
    Ok(Reserved {
        decisions,
        wait: Some(wait),
    })
}
