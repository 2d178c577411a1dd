//! The state of one key: one algorithm state per rule, behind one lock, and
//! the all-or-nothing decision over several of them.
//!
//! Every byte a key's states take or give back is counted in the store's
//! [`Bounds`] here, where it happens: a state added or replaced, a sliding
//! log's buffer grown (asked for first, so the count never passes the
//! bound) or shrunk. Checks and denials never grow anything.

use std::collections::HashMap;
use std::mem::size_of;

use parking_lot::Mutex;

use super::bounds::Bounds;
use crate::algorithm::{Meter, SlidingLog, State};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::{Rate, Rule};

/// What the map holds per key.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) states: Mutex<KeyStates>,
}

impl Slot {
    /// The slot of a new key that costs `key_bytes` (see [`key_bytes`]).
    pub(crate) fn new(key_bytes: usize) -> Slot {
        Slot {
            states: Mutex::new(KeyStates {
                key_bytes,
                ..KeyStates::default()
            }),
        }
    }
}

/// The bytes a key costs besides its states' heap: its map entry (the key,
/// the slot, and the hash table's control byte) and the key's own bytes
/// (`size_of_val` of the key as given: the text of a string key).
pub(crate) fn key_bytes<K, Q: ?Sized>(key: &Q) -> usize {
    size_of::<(K, Slot)>() + 1 + std::mem::size_of_val(key)
}

type RuleState = (Rule, State);

/// The states of one key, one per rule it was used with. Most keys have one
/// rule, kept inline; more spill into a vector.
///
/// A key holds at most `max_rules` states, so finding a rule's state is a
/// scan of at most that many (16 by default): cheaper than hashing at that
/// size, and no caller can make it longer.
#[derive(Debug, Default)]
pub(crate) struct KeyStates {
    first: Option<RuleState>,
    /// Boxed: rare, and one pointer (not a 24-byte `Vec`) keeps the common
    /// slot small enough to stay in cache with many keys.
    #[allow(clippy::box_collection)]
    rest: Option<Box<Vec<RuleState>>>,
    /// What the key itself costs ([`key_bytes`]), given back with it.
    key_bytes: usize,
}

impl KeyStates {
    fn position(&self, rule: Rule) -> Option<usize> {
        match &self.first {
            Some((r, _)) if *r == rule => Some(0),
            Some(_) => self
                .rest
                .as_ref()?
                .iter()
                .position(|(r, _)| *r == rule)
                .map(|i| i + 1),
            None => None,
        }
    }

    fn state_at(&mut self, index: usize) -> Option<&mut State> {
        if index == 0 {
            self.first.as_mut().map(|(_, s)| s)
        } else {
            self.rest.as_mut()?.get_mut(index - 1).map(|(_, s)| s)
        }
    }

    #[inline]
    fn state_mut(&mut self, rule: Rule) -> Option<&mut State> {
        let index = self.position(rule)?;
        self.state_at(index)
    }

    /// What a request of `cost` would get under `rule`, recording nothing
    /// (a missing state is seen as a fresh one and not kept).
    fn check(&mut self, rule: Rule, now: u64, cost: u64, bounds: &Bounds) -> Decision {
        match self.state_mut(rule) {
            Some(state) => check_held(state, rule, now, cost, bounds),
            None => State::new(rule.algorithm()).check(rule.rate(), now, cost),
        }
    }

    /// One rule, the common case.
    #[inline]
    pub(crate) fn decide_one(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
    ) -> Result<Decision> {
        match self.state_mut(rule) {
            Some(state) => decide_in(state, rule, now, cost, bounds),
            None if cost == 0 => Ok(State::new(rule.algorithm()).check(rule.rate(), now, 0)),
            None => {
                let state = self.add(rule, now, bounds, |_| false)?;
                decide_in(state, rule, now, cost, bounds)
            }
        }
    }

    /// What a request of `cost` would get under each rule, recording nothing.
    pub(crate) fn dry_run(
        &mut self,
        rules: &[Rule],
        now: u64,
        cost: u64,
        bounds: &Bounds,
    ) -> Vec<Decision> {
        rules
            .iter()
            .map(|&rule| self.check(rule, now, cost, bounds))
            .collect()
    }

    /// Adds a fresh state for `rule`, which the key does not hold: in a new
    /// place, or, when the key holds `max_rules` states, in place of an idle
    /// one (equivalent to a fresh one, so dropping it changes no answer)
    /// whose rule `keep` does not name.
    fn add(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<&mut State> {
        let fresh = (rule, State::new(rule.algorithm()));
        if self.first.is_none() {
            return Ok(&mut self.first.insert(fresh).1);
        }
        let spilled = self.rest.as_ref().map_or(0, |rest| rest.len());
        if 1 + spilled >= bounds.max_rules() {
            return self.replace_idle(fresh, now, bounds, keep);
        }
        let capacity = self.rest.as_ref().map_or(0, |rest| rest.capacity());
        if spilled == capacity {
            // `spilled + 1 < max_rules` here, so the new capacity has room.
            let grown = capacity
                .saturating_mul(2)
                .max(4)
                .min(bounds.max_rules() - 1);
            let before = self.rest_bytes();
            let boxed = if self.rest.is_none() {
                size_of::<Vec<RuleState>>()
            } else {
                0
            };
            let charge = boxed + (grown - capacity) * size_of::<RuleState>();
            bounds.try_charge(charge)?;
            self.rest
                .get_or_insert_with(Box::default)
                .reserve_exact(grown - spilled);
            bounds.settle(before, charge, self.rest_bytes());
        }
        let rest = self.rest.get_or_insert_with(Box::default);
        rest.push(fresh);
        match rest.last_mut() {
            Some((_, state)) => Ok(state),
            None => unreachable!("a state was just pushed"),
        }
    }

    /// Puts `fresh` in place of the first idle state whose rule `keep`
    /// does not name.
    fn replace_idle(
        &mut self,
        fresh: RuleState,
        now: u64,
        bounds: &Bounds,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<&mut State> {
        let spilled = self.rest.iter_mut().flat_map(|rest| rest.iter_mut());
        let idle = self
            .first
            .iter_mut()
            .chain(spilled)
            .find(|(rule, state)| !keep(*rule) && state.is_idle(rule.rate(), now))
            .ok_or_else(|| bounds.rules_error())?;
        bounds.credit(idle.1.heap_bytes());
        *idle = fresh;
        Ok(&mut idle.1)
    }

    /// The state of `rule`, added if the key does not hold it; see
    /// [`add`](Self::add) for `keep`.
    fn state_or_add(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<&mut State> {
        match self.position(rule) {
            Some(index) => match self.state_at(index) {
                Some(state) => Ok(state),
                None => unreachable!("position() returned an index that exists"),
            },
            None => self.add(rule, now, bounds, keep),
        }
    }

    /// Makes sure the state of `rule` exists and can record one admission
    /// at `now` without allocating; see [`add`](Self::add) for `keep`.
    fn make_room(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<()> {
        let state = self.state_or_add(rule, now, bounds, keep)?;
        let growth = state.record_growth(now);
        if growth > 0 {
            let before = state.heap_bytes();
            bounds.try_charge(growth)?;
            state.grow_for_record();
            bounds.settle(before, growth, state.heap_bytes());
        }
        Ok(())
    }

    /// Records an admission that [`make_room`](Self::make_room) made room for.
    fn record(&mut self, rule: Rule, now: u64, cost: u64) {
        if let Some(state) = self.state_mut(rule) {
            state.record(rule.rate(), now, cost);
        }
    }

    /// True when every state may be dropped at `now` without changing any answer.
    pub(crate) fn is_idle(&self, now: u64) -> bool {
        self.iter()
            .all(|(rule, state)| state.is_idle(rule.rate(), now))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &RuleState> {
        self.first
            .iter()
            .chain(self.rest.iter().flat_map(|rest| rest.iter()))
    }

    fn rest_bytes(&self) -> usize {
        self.rest.as_ref().map_or(0, |rest| {
            size_of::<Vec<RuleState>>() + rest.capacity() * size_of::<RuleState>()
        })
    }

    /// Heap bytes held by the states (their buffers, and the spilled ones).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.rest_bytes() + self.iter().map(|(_, s)| s.heap_bytes()).sum::<usize>()
    }

    /// What the key itself costs ([`key_bytes`]).
    pub(crate) fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    /// Every byte the store counts for this key.
    pub(crate) fn bytes(&self) -> usize {
        self.key_bytes + self.heap_bytes()
    }
}

/// What a request of `cost` would get from a held state, recording nothing.
fn check_held(state: &mut State, rule: Rule, now: u64, cost: u64, bounds: &Bounds) -> Decision {
    // A check may shrink a log whose entries expired.
    let before = state.heap_bytes();
    let decision = state.check(rule.rate(), now, cost);
    bounds.settle(before, 0, state.heap_bytes());
    decision
}

/// Check, then, if allowed, grow if need be and record: one rule's whole
/// decision on a held state. Only a sliding log holds heap, so only its
/// bytes are followed (one dispatch on the algorithm, as before the bound).
#[inline]
fn decide_in(
    state: &mut State,
    rule: Rule,
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Result<Decision> {
    match state {
        State::SlidingLog(log) => decide_in_log(log, rule.rate(), now, cost, bounds),
        other => Ok(other.decide(rule.rate(), now, cost)),
    }
}

#[inline]
fn decide_in_log(
    log: &mut SlidingLog,
    rate: Rate,
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Result<Decision> {
    // A check may shrink a log whose entries expired.
    let before = log.heap_bytes();
    let decision = log.check(rate, now, cost);
    if decision.allowed() && cost > 0 {
        let growth = log.record_growth(now);
        if growth > 0 {
            return grow_and_record(log, rate, now, cost, bounds, before, growth)
                .map(|()| decision);
        }
        log.record(rate, now, cost);
    }
    let after = log.heap_bytes();
    if after != before {
        bounds.settle(before, 0, after);
    }
    Ok(decision)
}

/// The rest of [`decide_in_log`] when the log must grow to record: rare
/// (the buffer doubles), so kept out of the common path.
#[cold]
fn grow_and_record(
    log: &mut SlidingLog,
    rate: Rate,
    now: u64,
    cost: u64,
    bounds: &Bounds,
    before: usize,
    growth: usize,
) -> Result<()> {
    if let Err(full) = bounds.try_charge(growth) {
        bounds.settle(before, 0, log.heap_bytes());
        return Err(full);
    }
    log.grow_for_record();
    log.record(rate, now, cost);
    bounds.settle(before, growth, log.heap_bytes());
    Ok(())
}

/// One hit of a batch, its key given as an index into the locked states.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockedHit {
    pub(crate) key: usize,
    pub(crate) rule: Rule,
    pub(crate) cost: u64,
}

/// Batches up to this many hits are indexed by scanning them: cheaper
/// than a hash map at that size, and a bounded cost.
pub(crate) const SCAN_UP_TO: usize = 16;

/// The (key, rule) pairs of a batch, with the costs asked of each so far.
struct Pairs<'a> {
    hits: &'a [LockedHit],
    /// For batches longer than [`SCAN_UP_TO`].
    totals: Option<HashMap<(usize, Rule), u64, foldhash::fast::RandomState>>,
}

impl<'a> Pairs<'a> {
    fn new(hits: &'a [LockedHit]) -> Pairs<'a> {
        let totals = (hits.len() > SCAN_UP_TO)
            .then(|| HashMap::with_capacity_and_hasher(hits.len(), Default::default()));
        Pairs { hits, totals }
    }

    /// Counts hit `i` and returns the cost asked of its pair by the hits
    /// up to and including it.
    fn add(&mut self, i: usize) -> u64 {
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
    fn contains(&self, key: usize, rule: Rule) -> bool {
        match &self.totals {
            Some(totals) => totals.contains_key(&(key, rule)),
            None => self.hits.iter().any(|h| h.key == key && h.rule == rule),
        }
    }
}

/// Decides `hits` all-or-nothing over the (locked) states of their keys.
///
/// Hits on the same key and rule add up: each is checked with the costs of
/// the ones before it included, so a batch can never take more than the
/// limit between them. Room for every admission (longer logs) is made
/// before any is recorded, so a batch refused for want of room records
/// nothing either. Linear in the number of hits.
pub(crate) fn decide_all(
    keys: &mut [&mut KeyStates],
    hits: &[LockedHit],
    now: u64,
    bounds: &Bounds,
) -> Result<Vec<Decision>> {
    let mut pairs = Pairs::new(hits);
    let mut asked = Vec::with_capacity(hits.len());
    for (i, hit) in hits.iter().enumerate() {
        let total = pairs.add(i);
        if total > hit.rule.limit() {
            return Err(Error::CostExceedsLimit {
                cost: total,
                limit: hit.rule.limit(),
            });
        }
        asked.push(if hit.cost == 0 { 0 } else { total });
    }
    // A consuming hit's state is added before it is checked, even if the
    // batch is then denied, as the Redis store does: a check may move a
    // state's clock (a window rolled forward), which later decisions see
    // when the clock steps back. A state the batch uses is never replaced
    // to make room for another.
    let pairs = &pairs;
    let keep = |key: usize| move |rule: Rule| pairs.contains(key, rule);
    let mut decisions = Vec::with_capacity(hits.len());
    for (hit, &cost) in hits.iter().zip(&asked) {
        let states = &mut *keys[hit.key];
        decisions.push(if hit.cost > 0 {
            let state = states.state_or_add(hit.rule, now, bounds, keep(hit.key))?;
            check_held(state, hit.rule, now, cost, bounds)
        } else {
            states.check(hit.rule, now, cost, bounds)
        });
    }
    if !decisions.iter().all(Decision::allowed) {
        // Nothing is recorded: the hits that would have passed report the
        // state as it is.
        for (hit, decision) in hits.iter().zip(decisions.iter_mut()) {
            if decision.allowed() && hit.cost > 0 {
                *decision = keys[hit.key].check(hit.rule, now, 0, bounds);
            }
        }
        return Ok(decisions);
    }
    let consuming = || hits.iter().filter(|h| h.cost > 0);
    for hit in consuming() {
        keys[hit.key].make_room(hit.rule, now, bounds, keep(hit.key))?;
    }
    for hit in consuming() {
        keys[hit.key].record(hit.rule, now, hit.cost);
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap()
    }

    /// Rules `1/1s`, `2/1s`, ... : distinct rules of one window.
    fn nth_rule(n: u64) -> Rule {
        rule(&format!("{}/1s", n + 1))
    }

    #[test]
    fn a_new_rule_at_the_cap_replaces_an_idle_state() {
        let bounds = Bounds::new(10, usize::MAX, 2);
        let mut key = KeyStates::default();
        key.decide_one(nth_rule(0), 0, 1, &bounds).unwrap();
        key.decide_one(nth_rule(1), 500_000, 1, &bounds).unwrap();
        // At 1.2 s rule 0's admission (at 0) is more than a window old.
        let third = key.decide_one(nth_rule(2), 1_200_000, 1, &bounds).unwrap();
        assert!(third.allowed());
        let held: Vec<Rule> = key.iter().map(|(r, _)| *r).collect();
        assert_eq!(held, [nth_rule(2), nth_rule(1)]);
        assert_eq!(key.heap_bytes(), bounds.bytes(), "the count follows");
    }

    #[test]
    fn a_new_rule_at_the_cap_is_refused_when_none_is_idle() {
        let bounds = Bounds::new(10, usize::MAX, 2);
        let mut key = KeyStates::default();
        key.decide_one(nth_rule(0), 0, 1, &bounds).unwrap();
        key.decide_one(nth_rule(1), 0, 1, &bounds).unwrap();
        assert_eq!(
            key.decide_one(nth_rule(2), 1_000, 1, &bounds),
            Err(Error::TooManyRules { max: 2 })
        );
        // Probes of a new rule need no state and are answered.
        assert!(
            key.decide_one(nth_rule(2), 1_000, 0, &bounds)
                .unwrap()
                .allowed()
        );
        // The held rules are served as before.
        assert_eq!(
            key.decide_one(nth_rule(1), 1_000, 1, &bounds)
                .map(|d| d.remaining()),
            Ok(0)
        );
        assert_eq!(key.iter().count(), 2);
    }

    #[test]
    fn a_batch_never_replaces_a_state_it_uses() {
        let bounds = Bounds::new(10, usize::MAX, 2);
        let mut key = KeyStates::default();
        // Both idle by 2 s.
        key.decide_one(nth_rule(0), 0, 1, &bounds).unwrap();
        key.decide_one(nth_rule(1), 0, 1, &bounds).unwrap();
        let batch = |rules: &[Rule]| -> Vec<LockedHit> {
            rules
                .iter()
                .map(|&rule| LockedHit {
                    key: 0,
                    rule,
                    cost: 1,
                })
                .collect()
        };
        // Three distinct rules cannot fit two places, even though both
        // held states are idle.
        let three = batch(&[nth_rule(2), nth_rule(0), nth_rule(1)]);
        assert_eq!(
            decide_all(&mut [&mut key], &three, 2_000_000, &bounds),
            Err(Error::TooManyRules { max: 2 })
        );
        // Two fit: rule 5 replaces the idle rule 1, rule 0 keeps its place.
        let two = batch(&[nth_rule(5), nth_rule(0)]);
        let ds = decide_all(&mut [&mut key], &two, 2_000_000, &bounds).unwrap();
        assert!(ds.iter().all(Decision::allowed));
        let mut held: Vec<Rule> = key.iter().map(|(r, _)| *r).collect();
        held.sort_by_key(|r| r.limit());
        assert_eq!(held, [nth_rule(0), nth_rule(5)]);
    }

    #[test]
    fn a_log_that_cannot_grow_refuses_and_records_nothing() {
        let r = rule("1000/1h");
        // Room for the first buffer of 4 entries (64 bytes), not the next.
        let bounds = Bounds::new(10, 64, 16);
        let mut key = KeyStates::default();
        for t in 0..4 {
            assert!(key.decide_one(r, t, 1, &bounds).unwrap().allowed());
        }
        assert_eq!(bounds.bytes(), 64);
        assert_eq!(key.decide_one(r, 4, 1, &bounds), Err(bounds.bytes_error()));
        // Same microsecond as the newest entry: merged, no growth needed.
        assert!(key.decide_one(r, 3, 1, &bounds).unwrap().allowed());
        assert_eq!(key.check(r, 5, 0, &bounds).remaining(), 1000 - 5);
        assert_eq!(key.heap_bytes(), 64);
    }

    #[test]
    fn a_batch_refused_for_room_records_nothing() {
        let (a, b) = (rule("100/1h"), rule("200/1h"));
        // Both states fit (the second spills: a vector of 4), and one log
        // of 4 entries (64 bytes), not two.
        let spill = size_of::<Vec<RuleState>>() + 4 * size_of::<RuleState>();
        let bounds = Bounds::new(10, spill + 64 + 32, 16);
        let mut key = KeyStates::default();
        let hits = [
            LockedHit {
                key: 0,
                rule: a,
                cost: 1,
            },
            LockedHit {
                key: 0,
                rule: b,
                cost: 1,
            },
        ];
        assert_eq!(
            decide_all(&mut [&mut key], &hits, 0, &bounds),
            Err(bounds.bytes_error())
        );
        assert_eq!(key.iter().count(), 2, "refused at the logs, not the states");
        assert_eq!(key.check(a, 0, 0, &bounds).remaining(), 100);
        assert_eq!(key.check(b, 0, 0, &bounds).remaining(), 200);
        assert_eq!(key.heap_bytes(), bounds.bytes());
    }

    #[test]
    fn long_batches_add_up_costs_per_key_and_rule() {
        let bounds = Bounds::new(10, usize::MAX, 16);
        let (mut x, mut y) = (KeyStates::default(), KeyStates::default());
        let r = rule("30/1s");
        // 40 hits over two keys, alternating: 20 units each.
        let hits: Vec<LockedHit> = (0..40)
            .map(|i| LockedHit {
                key: i % 2,
                rule: r,
                cost: 1,
            })
            .collect();
        let ds = decide_all(&mut [&mut x, &mut y], &hits, 0, &bounds).unwrap();
        assert_eq!(ds[38].remaining(), 10);
        assert_eq!(ds[39].remaining(), 10);
        // 11 more on one key: 20 + 11 > 30.
        let over: Vec<LockedHit> = (0..11)
            .map(|_| LockedHit {
                key: 1,
                rule: r,
                cost: 1,
            })
            .collect();
        assert_eq!(
            decide_all(&mut [&mut x, &mut y], &over, 0, &bounds).map(|ds| ds[10].allowed()),
            Ok(false)
        );
    }
}
