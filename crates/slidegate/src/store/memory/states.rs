//! The states of a key with several rules (or with a rule its slot has no
//! compact form for): boxed, each rule kept in full beside its state.
//!
//! Every byte is counted in the store's [`Bounds`] where it changes hands:
//! a state added or replaced, a sliding log's buffer grown (asked for
//! first, so the count never passes the bound) or shrunk.

use std::mem::size_of;

use super::bounds::Bounds;
use crate::algorithm::meter::Meter;
use crate::algorithm::sliding_log::SlidingLog;
use crate::algorithm::state::State;
use crate::decision::Decision;
use crate::error::Result;
use crate::rate::{Rate, Rule};

pub(crate) type RuleState = (Rule, State);

/// The states of one key, one per rule it was used with.
///
/// A key holds at most `max_rules` states, so finding a rule's state is a
/// scan of at most that many (16 by default): cheaper than hashing at that
/// size, and no caller can make it longer.
#[derive(Debug)]
pub(crate) struct KeyStates {
    states: Vec<RuleState>,
    /// Lockouts ([`Rule::block_for`]): per rule, when its block ends.
    /// Empty (no allocation) for keys that were never blocked.
    blocks: Vec<(Rule, u64)>,
    /// What the key itself costs ([`key_bytes`](super::slot::key_bytes)).
    key_bytes: u32,
}

impl KeyStates {
    /// The bytes of the box and of a vector of `capacity` states, empty.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        size_of::<KeyStates>() + capacity * size_of::<RuleState>()
    }

    /// The states of a key of `key_bytes` holding `first` (room for
    /// `capacity`, at least 1).
    pub(crate) fn with(first: RuleState, key_bytes: u32, capacity: usize) -> KeyStates {
        let mut states = Vec::with_capacity(capacity.max(1));
        states.push(first);
        KeyStates {
            states,
            blocks: Vec::new(),
            key_bytes,
        }
    }

    /// The states of a key of `key_bytes` holding none yet (room for
    /// `capacity`).
    pub(crate) fn empty(key_bytes: u32, capacity: usize) -> KeyStates {
        KeyStates {
            states: Vec::with_capacity(capacity),
            blocks: Vec::new(),
            key_bytes,
        }
    }

    /// When the key's block under `rule` ends: 0 when it has none.
    pub(crate) fn blocked_until(&self, rule: Rule) -> u64 {
        self.blocks
            .iter()
            .find(|(r, _)| *r == rule)
            .map_or(0, |&(_, until)| until)
    }

    /// Blocks the key under `rule` until `until`. A key keeps at most
    /// `max_rules` blocks: blocks that have ended by `now` are forgotten
    /// only to make room (an ended block is kept, as Redis keeps its key
    /// until it expires, so that both stores answer alike when a clock
    /// steps back), and a key with that many blocks running refuses more.
    pub(crate) fn block(
        &mut self,
        rule: Rule,
        until: u64,
        now: u64,
        bounds: &Bounds,
    ) -> Result<()> {
        if let Some(held) = self.blocks.iter_mut().find(|(r, _)| *r == rule) {
            held.1 = until;
            return Ok(());
        }
        if self.blocks.len() >= bounds.max_rules() {
            self.blocks.retain(|&(_, end)| end > now);
            if self.blocks.len() >= bounds.max_rules() {
                return Err(bounds.rules_error());
            }
        }
        let capacity = self.blocks.capacity();
        if self.blocks.len() == capacity {
            let grown = capacity.saturating_mul(2).max(1);
            let charge = (grown - capacity) * size_of::<(Rule, u64)>();
            bounds.try_charge(charge)?;
            self.blocks.reserve_exact(grown - self.blocks.len());
            let after = self.blocks.capacity() * size_of::<(Rule, u64)>();
            bounds.settle(capacity * size_of::<(Rule, u64)>(), charge, after);
        }
        self.blocks.push((rule, until));
        Ok(())
    }

    fn position(&self, rule: Rule) -> Option<usize> {
        self.states.iter().position(|(r, _)| *r == rule)
    }

    /// The state of `rule`, if held.
    pub(crate) fn state(&self, rule: Rule) -> Option<&State> {
        let index = self.position(rule)?;
        self.states.get(index).map(|(_, s)| s)
    }

    #[inline]
    pub(crate) fn state_mut(&mut self, rule: Rule) -> Option<&mut State> {
        let index = self.position(rule)?;
        self.states.get_mut(index).map(|(_, s)| s)
    }

    /// True when the key holds a state for `rule`.
    pub(crate) fn holds(&self, rule: Rule) -> bool {
        self.position(rule).is_some()
    }

    /// One rule, the common case.
    pub(crate) fn decide_one(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
    ) -> Result<Decision> {
        match self.state_mut(rule) {
            Some(state) => decide_in(state, rule, now, cost, bounds),
            None if cost == 0 => Ok(State::new(rule.algorithm()).check_rule(rule, now, 0)),
            None => {
                let state = self.add(rule, now, bounds, |_| false)?;
                decide_in(state, rule, now, cost, bounds)
            }
        }
    }

    /// Adds a fresh state for `rule`, which the key does not hold: in a new
    /// place, or, when the key holds `max_rules` states, in place of an idle
    /// one (equivalent to a fresh one, so dropping it changes no answer)
    /// whose rule `keep` does not name.
    pub(crate) fn add(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<&mut State> {
        let fresh = (rule, State::new(rule.algorithm()));
        let held = self.states.len();
        if held >= bounds.max_rules() {
            return self.replace_idle(fresh, now, bounds, keep);
        }
        let capacity = self.states.capacity();
        if held == capacity {
            // `held < max_rules` here, so the new capacity has room.
            let grown = capacity.saturating_mul(2).max(4).min(bounds.max_rules());
            let before = self.vec_bytes();
            let charge = (grown - capacity) * size_of::<RuleState>();
            bounds.try_charge(charge)?;
            self.states.reserve_exact(grown - held);
            bounds.settle(before, charge, self.vec_bytes());
        }
        self.states.push(fresh);
        match self.states.last_mut() {
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
        let idle = self
            .states
            .iter_mut()
            .find(|(rule, state)| !keep(*rule) && state.is_idle(rule.rate(), now))
            .ok_or_else(|| bounds.rules_error())?;
        bounds.credit(idle.1.heap_bytes());
        *idle = fresh;
        Ok(&mut idle.1)
    }

    /// Drops the state of `rule` if it is idle at `now`.
    pub(crate) fn forget_if_idle(&mut self, rule: Rule, now: u64, bounds: &Bounds) {
        if let Some(index) = self.position(rule)
            && self.states[index].1.is_idle(rule.rate(), now)
        {
            let (_, state) = self.states.remove(index);
            bounds.credit(state.heap_bytes());
        }
    }

    /// True when every state may be dropped at `now` without changing any answer.
    pub(crate) fn is_idle(&self, now: u64) -> bool {
        self.states
            .iter()
            .all(|(rule, state)| state.is_idle(rule.rate(), now))
            && self.blocks.iter().all(|&(_, until)| until <= now)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &RuleState> {
        self.states.iter()
    }

    fn vec_bytes(&self) -> usize {
        Self::bytes_for(self.states.capacity())
    }

    /// Heap bytes held: the box, the vector and the states' buffers.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.vec_bytes()
            + self.blocks.capacity() * size_of::<(Rule, u64)>()
            + self
                .states
                .iter()
                .map(|(_, s)| s.heap_bytes())
                .sum::<usize>()
    }

    /// What the key itself costs.
    pub(crate) fn key_bytes(&self) -> u32 {
        self.key_bytes
    }
}

/// What a request of `cost` would get from a held state, recording nothing.
pub(crate) fn check_held(
    state: &mut State,
    rule: Rule,
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Decision {
    // A check may shrink a log whose entries expired.
    let before = state.heap_bytes();
    let decision = state.check_rule(rule, now, cost);
    bounds.settle(before, 0, state.heap_bytes());
    decision
}

/// Makes sure a held state can record one admission at `now` without
/// allocating.
pub(crate) fn make_room_in(state: &mut State, now: u64, bounds: &Bounds) -> Result<()> {
    let growth = state.record_growth(now);
    if growth > 0 {
        let before = state.heap_bytes();
        bounds.try_charge(growth)?;
        state.grow_for_record();
        bounds.settle(before, growth, state.heap_bytes());
    }
    Ok(())
}

/// Check, then, if allowed, grow if need be and record: one rule's whole
/// decision on a held state. Only a sliding log holds heap, so only its
/// bytes are followed.
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
        other => Ok(other.decide_rule(rule, now, cost)),
    }
}

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
    let mut charged = 0;
    if decision.allowed() && cost > 0 {
        let growth = log.record_growth(now);
        if growth > 0 {
            if let Err(full) = bounds.try_charge(growth) {
                bounds.settle(before, 0, log.heap_bytes());
                return Err(full);
            }
            log.grow_for_record();
            charged = growth;
        }
        log.record(rate, now, cost);
    }
    let after = log.heap_bytes();
    if after != before + charged {
        bounds.settle(before, charged, after);
    }
    Ok(decision)
}
