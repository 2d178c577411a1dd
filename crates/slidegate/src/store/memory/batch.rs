//! The all-or-nothing decision over several (key, rule) hits whose keys'
//! shards are locked.

use std::collections::HashMap;

use super::bounds::Bounds;
use super::rules::RuleTable;
use super::slot::Slot;
use crate::algorithm::options::{blocked, reported};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

/// One hit of a batch, its key given as an index into the locked slots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockedHit {
    pub(crate) key: usize,
    /// The rule without its options: what names the state.
    pub(crate) rule: Rule,
    pub(crate) cost: u64,
    /// The rule [reports](Rule::reporting): recorded whatever the usage.
    pub(crate) report: bool,
    /// The rule's lockout (µs), 0 when none.
    pub(crate) block_us: u64,
    /// [`Rule::max_cost`] of the rule asked.
    pub(crate) max_cost: u64,
}

impl LockedHit {
    /// The hit of `rule` (options and all) on the key at index `key`.
    pub(crate) fn new(key: usize, rule: Rule, cost: u64) -> LockedHit {
        LockedHit {
            key,
            rule: rule.without_options(),
            cost,
            report: rule.reports(),
            block_us: rule.block_micros(),
            max_cost: rule.max_cost(),
        }
    }

    fn has_options(&self) -> bool {
        self.report || self.block_us > 0
    }
}

/// Batches up to this many hits are indexed by scanning them: cheaper
/// than a hash map at that size, and a bounded cost.
pub(crate) const SCAN_UP_TO: usize = 16;

/// The slots of a batch's keys, with their shards' rule tables.
pub(crate) struct Locked<'a, 'b> {
    /// One per distinct key.
    pub(crate) slots: &'a mut [Slot],
    /// One per locked shard.
    pub(crate) tables: &'a mut [&'b mut RuleTable],
    /// For each slot, its shard's table.
    pub(crate) table_of: &'a [usize],
}

impl Locked<'_, '_> {
    pub(super) fn get(&mut self, key: usize) -> (&mut Slot, &mut RuleTable) {
        (&mut self.slots[key], &mut *self.tables[self.table_of[key]])
    }
}

/// The (key, rule) pairs of a batch, with the costs asked of each so far.
pub(super) struct Pairs<'a> {
    hits: &'a [LockedHit],
    /// For batches longer than [`SCAN_UP_TO`].
    totals: Option<HashMap<(usize, Rule), u64, foldhash::fast::RandomState>>,
}

impl<'a> Pairs<'a> {
    pub(super) fn new(hits: &'a [LockedHit]) -> Pairs<'a> {
        let totals = (hits.len() > SCAN_UP_TO)
            .then(|| HashMap::with_capacity_and_hasher(hits.len(), Default::default()));
        Pairs { hits, totals }
    }

    /// Counts hit `i` and returns the cost asked of its pair by the hits
    /// up to and including it.
    pub(super) fn add(&mut self, i: usize) -> u64 {
        let hit = self.hits[i];
        match &mut self.totals {
            Some(totals) => {
                let total = totals.entry((hit.key, hit.rule)).or_insert(0);
                *total = total.saturating_add(hit.cost);
                *total
            }
            None => self.hits[..=i]
                .iter()
                .filter(|h| h.key == hit.key && h.rule == hit.rule)
                .fold(0, |sum: u64, h| sum.saturating_add(h.cost)),
        }
    }

    /// True when some hit asks for `rule` on `key`.
    pub(super) fn contains(&self, key: usize, rule: Rule) -> bool {
        match &self.totals {
            Some(totals) => totals.contains_key(&(key, rule)),
            None => self.hits.iter().any(|h| h.key == key && h.rule == rule),
        }
    }
}

/// Decides `hits` all-or-nothing over the (locked) slots of their keys.
///
/// Hits on the same key and rule add up: each is checked with the costs of
/// the ones before it included, so a batch can never take more than the
/// limit between them. Room for every admission (longer logs) is made
/// before any is recorded, so a batch refused for want of room records
/// nothing either. Linear in the number of hits.
pub(crate) fn decide_all(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    now: u64,
    bounds: &Bounds,
) -> Result<Vec<Decision>> {
    let checked = check_all(keys, hits, now, bounds)?;
    let mut decisions = checked.decisions;
    if !decisions.iter().all(Decision::allowed) {
        forget_created(keys, hits, &checked.created, now, bounds);
        if hits.iter().any(LockedHit::has_options) {
            start_blocks(keys, hits, &decisions, now, bounds);
            record_reports(keys, hits, &checked.pairs, now, bounds)?;
            // The hits that would have passed answer the state, reports
            // included; a denied report answers it too, still denied (a
            // probe that the report left denied is the same answer).
            report_state(keys, hits, &mut decisions, now, bounds);
            for (hit, decision) in hits.iter().zip(&mut decisions) {
                if hit.report && hit.cost > 0 && !decision.allowed() {
                    let (slot, rules) = keys.get(hit.key);
                    *decision = reported(slot.check(hit.rule, now, 0, bounds, rules));
                }
            }
            answer_blocks(keys, hits, &mut decisions, now);
            return Ok(decisions);
        }
        report_state(keys, hits, &mut decisions, now, bounds);
        return Ok(decisions);
    }
    record_all(keys, hits, &checked.pairs, &checked.asked, now, bounds)?;
    Ok(decisions)
}

/// Locks out, until its block ends, every key whose rule has a lockout
/// and denied its own consuming hit (`before`), unless already locked
/// out: a block is never extended by the denials it causes.
///
/// A block the store has no room for (its byte or rule bound) is not
/// kept, and the denial stands: failing the decision instead would hand
/// a denied request to the failure policy, which may let it through.
pub(super) fn start_blocks(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    before: &[Decision],
    now: u64,
    bounds: &Bounds,
) {
    for (hit, before) in hits.iter().zip(before) {
        if hit.block_us == 0 || hit.cost == 0 || before.allowed() {
            continue;
        }
        let (slot, rules) = keys.get(hit.key);
        if slot.blocked_until(hit.rule) <= now {
            let _ = slot.start_block(hit.rule, now + hit.block_us, now, bounds, rules);
        }
    }
}

/// Drops the states a refused decision made and recorded nothing in (a
/// report records): a refusal leaves no new state behind, as on Redis,
/// where such a state is never written.
pub(super) fn forget_created(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    created: &[bool],
    now: u64,
    bounds: &Bounds,
) {
    for (hit, &created) in hits.iter().zip(created) {
        if created && !hit.report {
            let (slot, rules) = keys.get(hit.key);
            slot.forget_if_idle(hit.rule, now, bounds, rules);
        }
    }
}

/// The answers of a refused batch's hits under a lockout that runs now
/// (one this batch started included): denied until it ends.
pub(super) fn answer_blocks(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    decisions: &mut [Decision],
    now: u64,
) {
    for (hit, decision) in hits.iter().zip(decisions) {
        if hit.block_us > 0 {
            let (slot, _) = keys.get(hit.key);
            *decision = blocked(*decision, slot.blocked_until(hit.rule), now);
        }
    }
}

/// Records the reporting hits of a refused batch, whose usage happened
/// whatever the answer; room for all of them is made first.
fn record_reports(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    pairs: &Pairs<'_>,
    now: u64,
    bounds: &Bounds,
) -> Result<()> {
    let reports = || hits.iter().filter(|h| h.report && h.cost > 0);
    for hit in reports() {
        let (slot, rules) = keys.get(hit.key);
        let keep = |rule: Rule| pairs.contains(hit.key, rule);
        slot.make_room(
            hit.rule,
            now,
            hit.cost.min(hit.rule.burst()),
            bounds,
            rules,
            keep,
        )?;
    }
    for hit in reports() {
        let (slot, rules) = keys.get(hit.key);
        slot.report(hit.rule, now, hit.cost, bounds, rules);
    }
    Ok(())
}

/// The hits of a batch checked at `now`, nothing recorded yet.
pub(super) struct Checked<'a> {
    /// The hits on each (key, rule), to keep their states in place.
    pub(super) pairs: Pairs<'a>,
    /// Per hit: the cost it asks with the costs of the earlier hits on
    /// the same (key, rule) included (0 for a probe).
    pub(super) asked: Vec<u64>,
    /// Per hit: what a check at `now` answers.
    pub(super) decisions: Vec<Decision>,
    /// Per hit: its state was made by this check (it held none).
    pub(super) created: Vec<bool>,
}

/// Checks every hit at `now`, the costs of earlier hits on the same
/// (key, rule) included; a total above the limit is an error.
///
/// A consuming hit's state is added before it is checked; a refused
/// batch then drops the states it added and recorded nothing in
/// ([`forget_created`]), as the Redis store never writes them: a check
/// may move a fresh state's clock (a window rolled forward), which later
/// decisions would see when the clock steps back. A state the batch uses
/// is never replaced to make room for another.
pub(super) fn check_all<'a>(
    keys: &mut Locked<'_, '_>,
    hits: &'a [LockedHit],
    now: u64,
    bounds: &Bounds,
) -> Result<Checked<'a>> {
    let mut pairs = Pairs::new(hits);
    let mut asked = Vec::with_capacity(hits.len());
    for (i, hit) in hits.iter().enumerate() {
        let total = pairs.add(i);
        if total > hit.max_cost {
            return Err(Error::CostExceedsLimit {
                cost: total,
                limit: hit.max_cost,
            });
        }
        asked.push(if hit.cost == 0 { 0 } else { total });
    }
    let mut decisions = Vec::with_capacity(hits.len());
    let mut created = Vec::with_capacity(hits.len());
    for (hit, &total) in hits.iter().zip(&asked) {
        let (slot, rules) = keys.get(hit.key);
        created.push(hit.cost > 0 && !slot.holds(hit.rule, rules));
        if hit.has_options() && hit.cost > 0 {
            slot.box_all(bounds, rules)?;
        }
        // More than the limit never fits (and is not what a check asks).
        let cost = total.min(hit.rule.burst());
        let mut decision = if hit.cost > 0 {
            let keep = |rule: Rule| pairs.contains(hit.key, rule);
            let mut state = slot.state_or_add(hit.rule, now, bounds, rules, keep)?;
            state.check(hit.rule, now, cost, bounds)
        } else {
            slot.check(hit.rule, now, cost, bounds, rules)
        };
        if total > hit.rule.burst() {
            decision.allowed = false;
        }
        if hit.block_us > 0 {
            decision = blocked(decision, slot.blocked_until(hit.rule), now);
        }
        decisions.push(decision);
    }
    Ok(Checked {
        pairs,
        asked,
        decisions,
        created,
    })
}

/// A refused batch records nothing: the hits that would have passed
/// report the state as it is.
pub(super) fn report_state(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    decisions: &mut [Decision],
    now: u64,
    bounds: &Bounds,
) {
    for (hit, decision) in hits.iter().zip(decisions.iter_mut()) {
        if decision.allowed() && hit.cost > 0 {
            let (slot, rules) = keys.get(hit.key);
            *decision = slot.check(hit.rule, now, 0, bounds, rules);
        }
    }
}

/// Records every consuming hit at `at`, after making room for the whole
/// cost each (key, rule) asks (its last hit asks the most), so that a
/// batch refused for want of room records nothing.
pub(super) fn record_all(
    keys: &mut Locked<'_, '_>,
    hits: &[LockedHit],
    pairs: &Pairs<'_>,
    asked: &[u64],
    at: u64,
    bounds: &Bounds,
) -> Result<()> {
    for (hit, &total) in hits.iter().zip(asked) {
        if hit.cost > 0 {
            let (slot, rules) = keys.get(hit.key);
            let keep = |rule: Rule| pairs.contains(hit.key, rule);
            slot.make_room(hit.rule, at, total, bounds, rules, keep)?;
        }
    }
    for hit in hits.iter().filter(|h| h.cost > 0) {
        let (slot, rules) = keys.get(hit.key);
        slot.record(hit.rule, at, hit.cost, bounds, rules);
    }
    Ok(())
}
