//! The state of one key: one algorithm state per rule, behind one lock, and
//! the all-or-nothing decision over several of them.

use parking_lot::Mutex;

use crate::algorithm::State;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

/// What the map holds per key.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) states: Mutex<KeyStates>,
}

/// The states of one key, one per rule it was used with. Most keys have one
/// rule, kept inline; more spill into a vector.
#[derive(Debug, Default)]
pub(crate) struct KeyStates {
    first: Option<(Rule, State)>,
    /// Boxed: rare, and one pointer (not a 24-byte `Vec`) keeps the common
    /// slot small enough to stay in cache with many keys.
    #[allow(clippy::box_collection)]
    rest: Option<Box<Vec<(Rule, State)>>>,
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

    fn get_or_insert(&mut self, rule: Rule) -> &mut State {
        let index = match self.position(rule) {
            Some(index) => index,
            None if self.first.is_none() => {
                return &mut self
                    .first
                    .get_or_insert_with(|| (rule, State::new(rule.algorithm())))
                    .1;
            }
            None => {
                let rest = self.rest.get_or_insert_with(Box::default);
                rest.push((rule, State::new(rule.algorithm())));
                rest.len()
            }
        };
        match self.state_at(index) {
            Some(state) => state,
            None => unreachable!("position() returned an index that exists"),
        }
    }

    /// Applies `f` to the state of `rule`, creating it when `create`;
    /// otherwise a missing state is seen as a fresh one and not kept.
    fn with_state<T>(&mut self, rule: Rule, create: bool, f: impl FnOnce(&mut State) -> T) -> T {
        if create {
            f(self.get_or_insert(rule))
        } else if let Some(state) = self.position(rule).and_then(|i| self.state_at(i)) {
            f(state)
        } else {
            f(&mut State::new(rule.algorithm()))
        }
    }

    /// One rule, the common case.
    #[inline]
    pub(crate) fn decide_one(&mut self, rule: Rule, now: u64, cost: u64) -> Decision {
        self.with_state(rule, cost > 0, |s| s.decide(rule.rate(), now, cost))
    }

    /// What a request of `cost` would get under each rule, recording nothing.
    pub(crate) fn dry_run(&mut self, rules: &[Rule], now: u64, cost: u64) -> Vec<Decision> {
        rules
            .iter()
            .map(|&rule| self.with_state(rule, false, |s| s.check(rule.rate(), now, cost)))
            .collect()
    }

    /// True when every state may be dropped at `now` without changing any answer.
    pub(crate) fn is_idle(&self, now: u64) -> bool {
        self.iter()
            .all(|(rule, state)| state.is_idle(rule.rate(), now))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Rule, State)> {
        self.first
            .iter()
            .chain(self.rest.iter().flat_map(|rest| rest.iter()))
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.rest.as_ref().map_or(0, |rest| {
            std::mem::size_of::<Vec<(Rule, State)>>()
                + rest.capacity() * std::mem::size_of::<(Rule, State)>()
        }) + self.iter().map(|(_, s)| s.heap_bytes()).sum::<usize>()
    }
}

/// One hit of a batch, its key given as an index into the locked states.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockedHit {
    pub(crate) key: usize,
    pub(crate) rule: Rule,
    pub(crate) cost: u64,
}

/// Decides `hits` all-or-nothing over the (locked) states of their keys.
///
/// Hits on the same key and rule add up: each is checked with the costs of
/// the ones before it included, so a batch can never take more than the
/// limit between them.
pub(crate) fn decide_all(
    keys: &mut [&mut KeyStates],
    hits: &[LockedHit],
    now: u64,
) -> Result<Vec<Decision>> {
    let mut asked = Vec::with_capacity(hits.len());
    for (i, hit) in hits.iter().enumerate() {
        let before: u64 = hits[..i]
            .iter()
            .filter(|h| h.key == hit.key && h.rule == hit.rule)
            .map(|h| h.cost)
            .sum();
        let total = before + hit.cost;
        if total > hit.rule.limit() {
            return Err(Error::CostExceedsLimit {
                cost: total,
                limit: hit.rule.limit(),
            });
        }
        asked.push(if hit.cost == 0 { 0 } else { total });
    }
    let mut decisions: Vec<Decision> = hits
        .iter()
        .zip(&asked)
        .map(|(hit, &cost)| {
            keys[hit.key].with_state(hit.rule, hit.cost > 0, |s| {
                s.check(hit.rule.rate(), now, cost)
            })
        })
        .collect();
    if decisions.iter().all(Decision::allowed) {
        for hit in hits.iter().filter(|h| h.cost > 0) {
            keys[hit.key].with_state(hit.rule, true, |s| s.record(hit.rule.rate(), now, hit.cost));
        }
    } else {
        // Nothing is recorded: the hits that would have passed report the
        // state as it is.
        for (hit, decision) in hits.iter().zip(decisions.iter_mut()) {
            if decision.allowed() && hit.cost > 0 {
                *decision =
                    keys[hit.key].with_state(hit.rule, false, |s| s.check(hit.rule.rate(), now, 0));
            }
        }
    }
    Ok(decisions)
}
