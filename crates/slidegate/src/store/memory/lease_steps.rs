//! The steps of a lease on the locked slots of its key: taking a budget
//! or places, all or nothing, and settling them (see `store::lease`).

use super::batch::{
    Locked, LockedHit, check_all, decide_all, forget_created, record_all, report_state,
};
use super::bounds::Bounds;
use crate::algorithm::concurrency::{Turn, Waiter};
use crate::algorithm::meter::until;
use crate::decision::Decision;
use crate::error::Result;
use crate::rate::Rule;

/// What a lease's hits got: one decision per hit, and, when granted, what
/// names each admission for its give-back.
pub(super) struct Taken {
    pub(super) decisions: Vec<Decision>,
    pub(super) marks: Option<Vec<u64>>,
}

/// Takes a budget: `hits` decided at `now` all or nothing, as a plain
/// decision is; when granted, each admission's mark.
pub(super) fn take_budget(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    now: u64,
    bounds: &Bounds,
) -> Result<Taken> {
    let checked = check_all(keys, hits, now, bounds)?;
    let mut decisions = checked.decisions;
    if !decisions.iter().all(Decision::allowed) {
        forget_created(keys, hits, &checked.created, now, bounds);
        report_state(keys, hits, &mut decisions, now, bounds);
        return Ok(Taken {
            decisions,
            marks: None,
        });
    }
    record_all(keys, hits, &checked.pairs, &checked.asked, now, bounds)?;
    let marks = hits
        .iter()
        .map(|hit| {
            let (slot, rules) = keys.get(hit.key);
            slot.mark(hit.rule, now, rules)
        })
        .collect();
    Ok(Taken {
        decisions,
        marks: Some(marks),
    })
}

/// How a request for places stands in the queue of waiters.
#[derive(Clone, Copy, Debug)]
pub(super) struct Queue {
    /// The waiter's ticket.
    pub(super) ticket: u64,
    /// When it stops waiting; a waiter not queued yet is queued when
    /// denied.
    pub(super) deadline: u64,
}

/// Takes places until `expires`: `hits` (concurrency rules) at `now`, all
/// or nothing, as the waiter of `queue` when given (queued when denied),
/// otherwise as a newcomer behind every waiter.
pub(super) fn take_places(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    now: u64,
    expires: u64,
    queue: Option<Queue>,
    bounds: &Bounds,
) -> Result<Taken> {
    let ticket = queue.map(|q| q.ticket);
    let mut decisions = Vec::with_capacity(hits.len());
    let mut created = Vec::with_capacity(hits.len());
    for hit in hits {
        let (slot, rules) = keys.get(hit.key);
        created.push(!slot.holds(hit.rule, rules));
        let keep = |rule: Rule| hits.iter().any(|h| h.key == hit.key && h.rule == rule);
        let places = slot.places(hit.rule, now, bounds, rules, keep)?;
        decisions.push(places.check_waiting(hit.rule.rate(), now, hit.cost, ticket));
    }
    let granted = decisions.iter().all(Decision::allowed);
    for (hit, decision) in hits.iter().zip(&mut decisions) {
        let (slot, rules) = keys.get(hit.key);
        let Some(places) = slot.places_held(hit.rule, rules) else {
            continue;
        };
        if granted {
            places.hold(expires, hit.cost);
            if let Some(ticket) = ticket {
                places.dequeue(ticket);
            }
            *decision = Decision::from_parts(
                true,
                decision.limit,
                decision.remaining,
                0,
                decision.reset_after_us.max(until(expires, now)),
            );
        } else if let Some(queue) = queue
            && places.turn(queue.ticket) == Turn::Absent
        {
            places.enqueue(Waiter {
                ticket: queue.ticket,
                places: hit.cost,
                deadline: queue.deadline,
            });
        }
    }
    if !granted && queue.is_none() {
        forget_created(keys, hits, &created, now, bounds);
    }
    let marks = granted.then(|| vec![expires; hits.len()]);
    Ok(Taken { decisions, marks })
}

/// Takes `ticket` out of the queue of every hit's state (a waiter served
/// elsewhere, or gone).
pub(super) fn leave_queue(keys: &mut Locked<'_, '_>, hits: &[LockedHit], ticket: u64) {
    for hit in hits {
        let (slot, rules) = keys.get(hit.key);
        if let Some(places) = slot.places_held(hit.rule, rules) {
            places.dequeue(ticket);
        }
    }
}

/// One rule of a lease being settled: its rule, the mark of its
/// admission, and what to give back of it.
pub(super) struct Part {
    pub(super) rule: Rule,
    pub(super) mark: u64,
}

/// Settles a lease of `reserved` on the key of `hits` (one hit per part,
/// in order, at index 0) at `now`: gives back what was reserved beyond
/// `used`, and records what was used beyond it as a report. Then answers
/// `(over_limit, state)`: whether a report took a rule past its limit,
/// and a probe of every rule.
pub(super) fn settle(
    keys: &mut Locked<'_, '_>,
    parts: &[Part],
    now: u64,
    reserved: u64,
    used: u64,
    bounds: &Bounds,
) -> Result<(bool, Vec<Decision>)> {
    if used < reserved {
        let (slot, rules) = keys.get(0);
        for part in parts {
            slot.give_back(
                part.rule,
                now,
                part.mark,
                reserved - used,
                used,
                bounds,
                rules,
            );
        }
    }
    let mut over_limit = false;
    if used > reserved {
        let reports: Vec<LockedHit> = parts
            .iter()
            .map(|part| LockedHit::new(0, part.rule.reporting(), used - reserved))
            .collect();
        let decisions = decide_all(keys, &reports, now, bounds)?;
        over_limit = !decisions.iter().all(Decision::allowed);
    }
    let (slot, rules) = keys.get(0);
    let state = parts
        .iter()
        .map(|part| slot.check(part.rule, now, 0, bounds, rules))
        .collect();
    Ok((over_limit, state))
}
