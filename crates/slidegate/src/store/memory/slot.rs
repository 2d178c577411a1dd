//! What the map holds per key: the state of its one rule in 40 bytes, so
//! that the key and its state share one cache line, or the states of
//! several rules in a box.
//!
//! A slot refers to its rule by a 2-byte index into its shard's
//! [`RuleTable`] and keeps:
//!
//! - a sliding log inline ([`InlineLog`]), or with its entries in a ring
//!   and its summary inline ([`SpilledLog`]);
//! - the state of a GCRA, fixed window or sliding counter rule, as is;
//! - or, for keys with several rules (and rules a slot has no compact form
//!   for: sliding logs of windows over an hour or limits over `u32::MAX`,
//!   rules that found their shard's table full), [`KeyStates`] in a box.
//!
//! Every byte a key's states take or give back is counted in the store's
//! [`Bounds`] here, where it happens; growth is asked for first, so the
//! count never passes the bound. Checks and denials never grow anything.

use std::mem::size_of;

use super::bounds::Bounds;
use super::log::{
    INLINE, Inline, InlineLog, Spilled, SpilledLog, UNSPILL_AT, inline_cost_bits, ring_fits,
};
use super::rules::{RuleId, RuleTable};
use super::states::{KeyStates, check_held, make_room_in};
use crate::algorithm::concurrency::Concurrency;
use crate::algorithm::fixed_window::FixedWindow;
use crate::algorithm::gcra::Gcra;
use crate::algorithm::log_algorithm::{self, LogEntries, effective_now};
use crate::algorithm::meter::Meter;
use crate::algorithm::sliding_counter::SlidingCounter;
use crate::algorithm::sliding_log::SlidingLog;
use crate::algorithm::state::State;
use crate::decision::Decision;
use crate::error::Result;
use crate::rate::{Algorithm, Rate, Rule};

/// The state of one key. 40 bytes: with a key of up to 24 bytes (a
/// `String`, a `u64`), one 64-byte cache line per key.
#[derive(Debug)]
pub(crate) enum Slot {
    /// No state yet: a key made room for by a request that then failed.
    Empty {
        key_bytes: u32,
    },
    /// A sliding log of `len` entries, all in the slot.
    Inline {
        rule: RuleId,
        len: u8,
        key_bytes: u32,
        log: InlineLog,
    },
    /// A sliding log whose entries are in a ring.
    Spilled {
        rule: RuleId,
        usage: u32,
        log: SpilledLog,
    },
    Gcra {
        rule: RuleId,
        key_bytes: u32,
        state: Gcra,
    },
    Fixed {
        rule: RuleId,
        key_bytes: u32,
        state: FixedWindow,
    },
    Counter {
        rule: RuleId,
        key_bytes: u32,
        state: SlidingCounter,
    },
    Many(Box<KeyStates>),
}

const _: () = assert!(
    size_of::<Slot>() == 40,
    "a slot and a 24-byte key fill one cache line"
);

/// The bytes a key costs besides its states' heap: its map entry (the key,
/// the slot, padded to a cache line, and the hash table's control byte)
/// and the bytes the key holds of its own (`held`, its
/// [`StoredKey::held_bytes`](super::StoredKey::held_bytes): the heap text
/// of a string key, none for one inline). Saturates at `u32::MAX`, and is
/// counted as saturated.
pub(crate) fn key_bytes<E>(held: usize) -> u32 {
    let bytes = (size_of::<E>() + 1).saturating_add(held);
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The state of one rule of a slot, borrowed.
pub(crate) enum StateMut<'a> {
    Inline(Inline<'a>),
    Spilled(Spilled<'a>),
    Gcra(&'a mut Gcra),
    Fixed(&'a mut FixedWindow),
    Counter(&'a mut SlidingCounter),
    Boxed(&'a mut State),
}

impl StateMut<'_> {
    /// What a request of `cost` would get, recording nothing.
    pub(crate) fn check(&mut self, rule: Rule, now: u64, cost: u64, bounds: &Bounds) -> Decision {
        let rate = rule.rate();
        match self {
            StateMut::Inline(log) => log_algorithm::check(log, rate, now, cost),
            StateMut::Spilled(log) => {
                // A check may shrink a ring whose entries expired.
                let before = log.heap_bytes();
                let decision = log_algorithm::check(log, rate, now, cost);
                bounds.settle(before, 0, log.heap_bytes());
                decision
            }
            StateMut::Gcra(state) => state.check_burst(rate, rule.burst(), now, cost),
            StateMut::Fixed(state) => state.check(rate, now, cost),
            StateMut::Counter(state) => state.check(rate, now, cost),
            StateMut::Boxed(state) => check_held(state, rule, now, cost, bounds),
        }
    }
}

impl Slot {
    /// The slot of a new key that costs `key_bytes` ([`key_bytes`]).
    pub(crate) fn empty(key_bytes: u32) -> Slot {
        Slot::Empty { key_bytes }
    }

    /// What the key itself costs ([`key_bytes`]).
    pub(crate) fn key_bytes(&self) -> usize {
        let bytes = match self {
            Slot::Empty { key_bytes }
            | Slot::Inline { key_bytes, .. }
            | Slot::Gcra { key_bytes, .. }
            | Slot::Fixed { key_bytes, .. }
            | Slot::Counter { key_bytes, .. } => *key_bytes,
            Slot::Spilled { log, .. } => log.key_bytes(),
            Slot::Many(states) => states.key_bytes(),
        };
        bytes as usize
    }

    /// Heap bytes held by the states (a ring, or the box of several).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Slot::Spilled { log, .. } => log.heap_bytes(),
            Slot::Many(states) => states.heap_bytes(),
            _ => 0,
        }
    }

    /// Every byte the store counts for this key.
    pub(crate) fn bytes(&self) -> usize {
        self.key_bytes() + self.heap_bytes()
    }

    /// The rule of a slot holding one, as its index.
    pub(crate) fn rule_id(&self) -> Option<RuleId> {
        match self {
            Slot::Inline { rule, .. }
            | Slot::Spilled { rule, .. }
            | Slot::Gcra { rule, .. }
            | Slot::Fixed { rule, .. }
            | Slot::Counter { rule, .. } => Some(*rule),
            Slot::Empty { .. } | Slot::Many(_) => None,
        }
    }

    /// Points the slot's rule index at its new place ([`RuleTable::compact`]).
    pub(crate) fn renumber(&mut self, renumbered: &[RuleId]) {
        if let Slot::Inline { rule, .. }
        | Slot::Spilled { rule, .. }
        | Slot::Gcra { rule, .. }
        | Slot::Fixed { rule, .. }
        | Slot::Counter { rule, .. } = self
        {
            *rule = renumbered[usize::from(*rule)];
        }
    }

    /// True when the slot holds a state for `rule`.
    pub(crate) fn holds(&self, rule: Rule, rules: &RuleTable) -> bool {
        match self {
            Slot::Empty { .. } => false,
            Slot::Many(states) => states.holds(rule),
            one => one.rule_id().is_some_and(|id| rules.is(id, rule)),
        }
    }

    /// The state of `rule`, if the slot holds one.
    pub(crate) fn state_mut(&mut self, rule: Rule, rules: &RuleTable) -> Option<StateMut<'_>> {
        let rate = rule.rate();
        match self {
            Slot::Inline {
                rule: id, len, log, ..
            } if rules.is(*id, rule) => {
                Some(StateMut::Inline(Inline::new(len, log, cost_bits(rate))))
            }
            Slot::Spilled {
                rule: id,
                usage,
                log,
            } if rules.is(*id, rule) => Some(StateMut::Spilled(Spilled::new(usage, log))),
            Slot::Gcra {
                rule: id, state, ..
            } if rules.is(*id, rule) => Some(StateMut::Gcra(state)),
            Slot::Fixed {
                rule: id, state, ..
            } if rules.is(*id, rule) => Some(StateMut::Fixed(state)),
            Slot::Counter {
                rule: id, state, ..
            } if rules.is(*id, rule) => Some(StateMut::Counter(state)),
            Slot::Many(states) => states.state_mut(rule).map(StateMut::Boxed),
            _ => None,
        }
    }

    /// One rule, the common case: check, then, if allowed, record.
    #[inline]
    pub(crate) fn decide_one(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
    ) -> Result<Decision> {
        let rate = rule.rate();
        match self {
            Slot::Inline {
                rule: id, len, log, ..
            } if rules.is(*id, rule) => {
                let mut log = Inline::new(len, log, cost_bits(rate));
                let decision = log_algorithm::check(&mut log, rate, now, cost);
                if decision.allowed() && cost > 0 {
                    let t = effective_now(&log, now);
                    if !log.fits(t, cost) {
                        self.spill(rule, now, bounds, rules)?;
                        self.record(rule, now, cost, bounds, rules);
                        return Ok(decision);
                    }
                    log.push(t, cost);
                }
                Ok(decision)
            }
            Slot::Spilled {
                rule: id,
                usage,
                log,
            } if rules.is(*id, rule) => {
                let decision = decide_in_ring(usage, log, rate, now, cost, bounds)?;
                if *usage <= UNSPILL_AT {
                    self.unspill(rate, bounds);
                }
                Ok(decision)
            }
            Slot::Gcra {
                rule: id, state, ..
            } if rules.is(*id, rule) => Ok(state.decide_burst(rate, rule.burst(), now, cost)),
            Slot::Fixed {
                rule: id, state, ..
            } if rules.is(*id, rule) => Ok(state.decide(rate, now, cost)),
            Slot::Counter {
                rule: id, state, ..
            } if rules.is(*id, rule) => Ok(state.decide(rate, now, cost)),
            Slot::Many(states) => states.decide_one(rule, now, cost, bounds),
            _ => self.decide_new(rule, now, cost, bounds, rules),
        }
    }

    /// [`decide_one`](Self::decide_one) for a rule the slot does not hold.
    #[cold]
    #[inline(never)]
    fn decide_new(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
    ) -> Result<Decision> {
        if cost == 0 {
            return Ok(State::new(rule.algorithm()).check_rule(rule, now, 0));
        }
        self.add(rule, now, bounds, rules, |_| false)?;
        self.decide_one(rule, now, cost, bounds, rules)
    }

    /// What a request of `cost` would get under `rule`, recording nothing
    /// (a missing state is seen as a fresh one and not kept).
    pub(crate) fn check(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) -> Decision {
        match self.state_mut(rule, rules) {
            Some(mut state) => state.check(rule, now, cost, bounds),
            None => State::new(rule.algorithm()).check_rule(rule, now, cost),
        }
    }

    /// The state of `rule`, added if the slot does not hold it; see
    /// [`add`](Self::add) for `keep`.
    pub(crate) fn state_or_add(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<StateMut<'_>> {
        if !self.holds(rule, rules) {
            self.add(rule, now, bounds, rules, keep)?;
        }
        match self.state_mut(rule, rules) {
            Some(state) => Ok(state),
            None => unreachable!("the state of the rule was just added"),
        }
    }

    /// Adds a fresh state for `rule`, which the slot does not hold. A key
    /// at `max_rules` states puts it in place of an idle one (equivalent
    /// to a fresh one, so dropping it changes no answer) whose rule `keep`
    /// does not name, or fails with [`Error::TooManyRules`](crate::Error::TooManyRules).
    fn add(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<()> {
        match self {
            Slot::Empty { key_bytes } => {
                *self = Slot::fresh(rule, *key_bytes, bounds, rules)?;
                Ok(())
            }
            Slot::Many(states) => states.add(rule, now, bounds, keep).map(drop),
            _ if bounds.max_rules() == 1 => {
                let Some(held) = self.rule_id().map(|id| rules.get(id)) else {
                    unreachable!("a slot of one rule")
                };
                if keep(held) || !self.is_idle(now, rules) {
                    return Err(bounds.rules_error());
                }
                let freed = self.heap_bytes();
                *self = Slot::fresh(rule, self.key_bytes() as u32, bounds, rules)?;
                bounds.credit(freed);
                Ok(())
            }
            _ => {
                self.box_states(bounds, rules)?;
                match self {
                    Slot::Many(states) => states.add(rule, now, bounds, keep).map(drop),
                    _ => unreachable!("the slot was just made one of several rules"),
                }
            }
        }
    }

    /// The slot of a fresh state for `rule`, in its compact form when it
    /// has one and the shard's table takes the rule.
    fn fresh(rule: Rule, key_bytes: u32, bounds: &Bounds, rules: &mut RuleTable) -> Result<Slot> {
        let compact = match rule.algorithm() {
            // An inline log moves to a ring when it outgrows the slot, so
            // a log has a compact form only when a ring can hold it (an
            // inline form takes windows a ring takes, not larger limits).
            Algorithm::SlidingLog => ring_fits(rule),
            // Places held are few and settled by leases: boxed.
            Algorithm::Concurrency => false,
            _ => true,
        };
        if let Some(id) = compact.then(|| rules.intern(rule)).flatten() {
            return Ok(match rule.algorithm() {
                Algorithm::SlidingLog if inline_cost_bits(rule.rate()).is_some() => Slot::Inline {
                    rule: id,
                    len: 0,
                    key_bytes,
                    log: InlineLog::default(),
                },
                Algorithm::SlidingLog => {
                    bounds.try_charge(SpilledLog::bytes_for(0))?;
                    Slot::Spilled {
                        rule: id,
                        usage: 0,
                        log: SpilledLog::new(key_bytes, 0),
                    }
                }
                Algorithm::Gcra => Slot::Gcra {
                    rule: id,
                    key_bytes,
                    state: Gcra::default(),
                },
                Algorithm::FixedWindow => Slot::Fixed {
                    rule: id,
                    key_bytes,
                    state: FixedWindow::default(),
                },
                Algorithm::SlidingCounter => Slot::Counter {
                    rule: id,
                    key_bytes,
                    state: SlidingCounter::default(),
                },
                Algorithm::Concurrency => unreachable!("a concurrency rule has no compact form"),
            });
        }
        bounds.try_charge(KeyStates::bytes_for(1))?;
        let first = (rule, State::new(rule.algorithm()));
        Ok(Slot::Many(Box::new(KeyStates::with(first, key_bytes, 1))))
    }

    /// Makes the slot one of several rules (its state, if any, kept): the
    /// form that keeps lockouts and takes reports, which rules with
    /// options use.
    pub(crate) fn box_all(&mut self, bounds: &Bounds, rules: &RuleTable) -> Result<()> {
        match self {
            Slot::Many(_) => Ok(()),
            Slot::Empty { key_bytes } => {
                let capacity = bounds.max_rules().min(4);
                bounds.try_charge(KeyStates::bytes_for(capacity))?;
                *self = Slot::Many(Box::new(KeyStates::empty(*key_bytes, capacity)));
                Ok(())
            }
            _ => self.box_states(bounds, rules),
        }
    }

    /// When the key's lockout under `rule` ends (0 when there is none).
    pub(crate) fn blocked_until(&self, rule: Rule) -> u64 {
        match self {
            Slot::Many(states) => states.blocked_until(rule),
            _ => 0,
        }
    }

    /// Drops the state of `rule` if it is idle at `now` (equivalent to a
    /// fresh one): what a refused decision does with the states it made,
    /// so that, as on Redis, a refusal leaves no new state behind.
    pub(crate) fn forget_if_idle(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) {
        match self {
            Slot::Empty { .. } => {}
            Slot::Many(states) => states.forget_if_idle(rule, now, bounds),
            one => {
                if one.rule_id().is_some_and(|id| rules.is(id, rule)) && one.is_idle(now, rules) {
                    let freed = one.heap_bytes();
                    *one = Slot::empty(one.key_bytes() as u32);
                    bounds.credit(freed);
                }
            }
        }
    }

    /// Locks the key out under `rule` until `until`.
    pub(crate) fn start_block(
        &mut self,
        rule: Rule,
        until: u64,
        now: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) -> Result<()> {
        self.box_all(bounds, rules)?;
        match self {
            Slot::Many(states) => states.block(rule, until, now, bounds),
            _ => unreachable!("the slot was just boxed"),
        }
    }

    /// Records a report of `cost` under `rule` (whatever the usage) in a
    /// slot that [`make_room`](Self::make_room) made room in after
    /// [`box_all`](Self::box_all).
    pub(crate) fn report(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) {
        if let Some(StateMut::Boxed(state)) = self.state_mut(rule, rules) {
            let before = state.heap_bytes();
            state.report(rule.rate(), now, cost);
            bounds.settle(before, 0, state.heap_bytes());
        }
    }

    /// Turns a slot of one rule into one of several, its state kept.
    fn box_states(&mut self, bounds: &Bounds, rules: &RuleTable) -> Result<()> {
        let Some(many) = self.boxed(rules) else {
            return Ok(());
        };
        let (before, after) = (self.heap_bytes(), many.heap_bytes());
        let charge = after.saturating_sub(before);
        bounds.try_charge(charge)?;
        *self = Slot::Many(Box::new(many));
        bounds.settle(before, charge, after);
        Ok(())
    }

    /// The states of a slot of one rule, boxed (`None` for an empty slot).
    fn boxed(&self, rules: &RuleTable) -> Option<KeyStates> {
        let held = self.rule_id().map(|id| rules.get(id))?;
        let state = match self {
            Slot::Inline { len, log, .. } => {
                let admissions = log.admissions(*len, cost_bits(held.rate()));
                State::SlidingLog(SlidingLog::from_admissions(admissions))
            }
            Slot::Spilled { usage, log, .. } => {
                State::SlidingLog(SlidingLog::from_admissions(log.admissions(*usage)))
            }
            Slot::Gcra { state, .. } => State::Gcra(*state),
            Slot::Fixed { state, .. } => State::FixedWindow(*state),
            Slot::Counter { state, .. } => State::SlidingCounter(*state),
            Slot::Empty { .. } | Slot::Many(_) => unreachable!("a slot of one rule"),
        };
        Some(KeyStates::with((held, state), self.key_bytes() as u32, 4))
    }

    /// Makes sure the state of `rule` exists and can record admissions of
    /// `total` cost at `now` (what a batch asks of it) without allocating;
    /// see [`add`](Self::add) for `keep`.
    pub(crate) fn make_room(
        &mut self,
        rule: Rule,
        now: u64,
        total: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<()> {
        match self.state_or_add(rule, now, bounds, rules, keep)? {
            StateMut::Inline(log) => {
                if !log.fits(effective_now(&log, now), total) {
                    // A ring's first capacity has room for one more entry.
                    self.spill(rule, now, bounds, rules)?;
                }
                Ok(())
            }
            StateMut::Spilled(log) => {
                let t = effective_now(&log, now);
                let merges = !log.is_empty() && log.newest_at() == t;
                match self {
                    Slot::Spilled { log, .. } => grow_ring(log, merges, rule.limit(), bounds),
                    _ => unreachable!("the state is the slot's ring"),
                }
            }
            StateMut::Boxed(state) => make_room_in(state, now, bounds),
            StateMut::Gcra(_) | StateMut::Fixed(_) | StateMut::Counter(_) => Ok(()),
        }
    }

    /// Records an admission that [`make_room`](Self::make_room) made room
    /// for (or that fits as is).
    pub(crate) fn record(
        &mut self,
        rule: Rule,
        now: u64,
        cost: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) {
        let rate = rule.rate();
        match self {
            Slot::Inline {
                rule: id, len, log, ..
            } if rules.is(*id, rule) => {
                let mut log = Inline::new(len, log, cost_bits(rate));
                let t = effective_now(&log, now);
                if log.fits(t, cost) {
                    return log.push(t, cost);
                }
                // Not reached when room was made first; kept exact (and
                // counted) all the same.
                self.spill_uncounted(rule, now, bounds, rules);
                self.record(rule, now, cost, bounds, rules);
            }
            Slot::Spilled {
                rule: id,
                usage,
                log,
            } if rules.is(*id, rule) => {
                let ring = Spilled::new(usage, log);
                let t = effective_now(&ring, now);
                let merges = !ring.is_empty() && ring.newest_at() == t;
                if log.growth(merges, rate.limit()) > 0 {
                    // As above: counted, though room was made first.
                    let before = log.heap_bytes();
                    log.grow(rate.limit());
                    bounds.settle(before, 0, log.heap_bytes());
                }
                Spilled::new(usage, log).push(t, cost);
            }
            _ => match self.state_mut(rule, rules) {
                Some(StateMut::Gcra(state)) => state.record(rate, now, cost),
                Some(StateMut::Fixed(state)) => state.record(rate, now, cost),
                Some(StateMut::Counter(state)) => state.record(rate, now, cost),
                Some(StateMut::Boxed(state)) => state.record(rate, now, cost),
                Some(StateMut::Inline(_) | StateMut::Spilled(_)) | None => {}
            },
        }
    }

    /// Moves an inline log to a ring with room for more, or, when its
    /// rule has no ring form (a limit over `u32::MAX`, whose running
    /// totals a ring cannot hold), to a boxed log with room for one more
    /// admission at `now`.
    #[cold]
    fn spill(&mut self, rule: Rule, now: u64, bounds: &Bounds, rules: &RuleTable) -> Result<()> {
        if !ring_fits(rule) {
            self.box_states(bounds, rules)?;
            return match self.state_mut(rule, rules) {
                Some(StateMut::Boxed(state)) => make_room_in(state, now, bounds),
                _ => Ok(()),
            };
        }
        let capacity = spill_capacity(rule);
        bounds.try_charge(SpilledLog::bytes_for(capacity))?;
        self.spill_to(rule, capacity);
        Ok(())
    }

    #[cold]
    fn spill_uncounted(&mut self, rule: Rule, now: u64, bounds: &Bounds, rules: &RuleTable) {
        if !ring_fits(rule) {
            // Counted once done, as below.
            let before = self.heap_bytes();
            if let Some(many) = self.boxed(rules) {
                *self = Slot::Many(Box::new(many));
            }
            if let Some(StateMut::Boxed(state)) = self.state_mut(rule, rules)
                && state.record_growth(now) > 0
            {
                state.grow_for_record();
            }
            bounds.settle(before, 0, self.heap_bytes());
            return;
        }
        let capacity = spill_capacity(rule);
        self.spill_to(rule, capacity);
        bounds.settle(0, 0, SpilledLog::bytes_for(capacity));
    }

    fn spill_to(&mut self, rule: Rule, capacity: usize) {
        if let Slot::Inline {
            rule: id,
            len,
            key_bytes,
            log,
        } = self
        {
            let admissions = log.admissions(*len, cost_bits(rule.rate()));
            let (usage, log) = SpilledLog::from_admissions(admissions, *key_bytes, capacity);
            *self = Slot::Spilled {
                rule: *id,
                usage,
                log,
            };
        }
    }

    /// Moves a ring of few entries back into the slot, when its rule has
    /// an inline form and the entries fit it.
    #[cold]
    fn unspill(&mut self, rate: Rate, bounds: &Bounds) {
        let Some(bits) = inline_cost_bits(rate) else {
            return;
        };
        let Slot::Spilled { rule, usage, log } = self else {
            return;
        };
        if log.len() > INLINE || log.admissions(*usage).any(|(_, cost)| cost >> bits != 0) {
            return;
        }
        // A reservation can lie more than a window after the oldest entry:
        // the times must fit an inline entry's width.
        let mut times = log.admissions(*usage).map(|(at, _)| at);
        let oldest = times.next().unwrap_or(0);
        if times
            .last()
            .is_some_and(|newest| (newest - oldest) >> (u32::BITS - bits) != 0)
        {
            return;
        }
        let freed = log.heap_bytes();
        let (len, inline) = InlineLog::from_admissions(log.admissions(*usage), bits);
        *self = Slot::Inline {
            rule: *rule,
            len,
            key_bytes: log.key_bytes(),
            log: inline,
        };
        bounds.credit(freed);
    }

    /// What names the admission just recorded at `now` under `rule`, for
    /// a [give-back](Self::give_back) (see `State::mark`).
    pub(crate) fn mark(&self, rule: Rule, now: u64, rules: &RuleTable) -> u64 {
        let bits = cost_bits(rule.rate());
        match self {
            Slot::Inline {
                rule: id, len, log, ..
            } if rules.is(*id, rule) => log.newest_at(*len, bits),
            Slot::Spilled { rule: id, log, .. } if rules.is(*id, rule) => log.newest_at(),
            Slot::Gcra { rule: id, .. } if rules.is(*id, rule) => now,
            Slot::Fixed {
                rule: id, state, ..
            } if rules.is(*id, rule) => state.mark(),
            Slot::Counter {
                rule: id, state, ..
            } if rules.is(*id, rule) => state.mark(),
            Slot::Many(states) => states.state(rule).map_or(0, |state| state.mark(now)),
            _ => 0,
        }
    }

    /// Gives back `cost` of an admission of `cost + kept` under `rule`
    /// named by `mark`, as far as the algorithm can (see `State::give_back`);
    /// false when the slot holds no state of `rule` or nothing of the
    /// admission counts any more.
    #[allow(clippy::too_many_arguments)] // the state's address, what to give, and the store's books
    pub(crate) fn give_back(
        &mut self,
        rule: Rule,
        now: u64,
        mark: u64,
        cost: u64,
        kept: u64,
        bounds: &Bounds,
        rules: &RuleTable,
    ) -> bool {
        let rate = rule.rate();
        let given = match self.state_mut(rule, rules) {
            None => return false,
            Some(StateMut::Inline(mut log)) => log.give_back(mark, cost),
            Some(StateMut::Spilled(mut log)) => log.give_back(mark, cost),
            Some(StateMut::Gcra(state)) => {
                state.give_back(rate, now, mark, cost, kept);
                true
            }
            Some(StateMut::Fixed(state)) => state.give_back(mark, cost),
            Some(StateMut::Counter(state)) => state.give_back(rate, mark, cost),
            Some(StateMut::Boxed(state)) => {
                let before = state.heap_bytes();
                let given = state.give_back(rate, now, mark, cost, kept);
                bounds.settle(before, 0, state.heap_bytes());
                given
            }
        };
        if let Slot::Spilled { usage, .. } = self
            && *usage <= UNSPILL_AT
        {
            self.unspill(rate, bounds);
        }
        given
    }

    /// The concurrency state of `rule` (added if the slot holds none; see
    /// [`add`](Self::add) for `keep`), with room for one more entry and
    /// one more waiter.
    pub(crate) fn places(
        &mut self,
        rule: Rule,
        now: u64,
        bounds: &Bounds,
        rules: &mut RuleTable,
        keep: impl Fn(Rule) -> bool,
    ) -> Result<&mut Concurrency> {
        match self.state_or_add(rule, now, bounds, rules, keep)? {
            StateMut::Boxed(state) => {
                make_room_in(state, now, bounds)?;
                match state {
                    State::Concurrency(places) => Ok(places),
                    _ => unreachable!("the state of a concurrency rule"),
                }
            }
            _ => unreachable!("a concurrency rule's state is boxed"),
        }
    }

    /// The concurrency state of `rule`, if the slot holds one.
    pub(crate) fn places_held(
        &mut self,
        rule: Rule,
        rules: &RuleTable,
    ) -> Option<&mut Concurrency> {
        match self.state_mut(rule, rules) {
            Some(StateMut::Boxed(State::Concurrency(places))) => Some(places),
            _ => None,
        }
    }

    /// True when every state may be dropped at `now` without changing any
    /// answer.
    pub(crate) fn is_idle(&self, now: u64, rules: &RuleTable) -> bool {
        let rate = |id: &RuleId| rules.get(*id).rate();
        match self {
            Slot::Empty { .. } => true,
            Slot::Inline { rule, len, log, .. } => {
                *len == 0
                    || log_algorithm::expired(
                        log.newest_at(*len, cost_bits(rate(rule))),
                        rate(rule).window_micros(),
                        now,
                    )
            }
            Slot::Spilled { rule, usage, log } => {
                *usage == 0
                    || log_algorithm::expired(log.newest_at(), rate(rule).window_micros(), now)
            }
            Slot::Gcra { rule, state, .. } => state.is_idle(rate(rule), now),
            Slot::Fixed { rule, state, .. } => state.is_idle(rate(rule), now),
            Slot::Counter { rule, state, .. } => state.is_idle(rate(rule), now),
            Slot::Many(states) => states.is_idle(now),
        }
    }

    /// `(states, sliding log entries)` held, for the store's statistics.
    pub(crate) fn count(&self) -> (usize, usize) {
        match self {
            Slot::Empty { .. } => (0, 0),
            Slot::Inline { len, .. } => (1, usize::from(*len)),
            Slot::Spilled { log, .. } => (1, log.len()),
            Slot::Gcra { .. } | Slot::Fixed { .. } | Slot::Counter { .. } => (1, 0),
            Slot::Many(states) => {
                states
                    .iter()
                    .fold((0, 0), |(n, entries), (_, state)| match state {
                        State::SlidingLog(log) => (n + 1, entries + log.len()),
                        _ => (n + 1, entries),
                    })
            }
        }
    }

    /// The admissions of the sliding log of `rule`, if the slot holds one.
    pub(crate) fn admissions(&self, rule: Rule, rules: &RuleTable) -> Option<Vec<(u64, u64)>> {
        match self {
            Slot::Inline {
                rule: id, len, log, ..
            } if rules.is(*id, rule) => {
                Some(log.admissions(*len, cost_bits(rule.rate())).collect())
            }
            Slot::Spilled {
                rule: id,
                usage,
                log,
            } if rules.is(*id, rule) => Some(log.admissions(*usage).collect()),
            Slot::Many(states) => states
                .iter()
                .find(|(r, _)| *r == rule)
                .and_then(|(_, state)| match state {
                    State::SlidingLog(log) => Some(log.entries().collect()),
                    _ => None,
                }),
            _ => None,
        }
    }
}

/// The cost bits of an inline log's rule (which has them: checked when
/// the slot took the rule).
#[inline]
fn cost_bits(rate: Rate) -> u32 {
    u32::BITS.saturating_sub(u64::BITS - rate.window_micros().leading_zeros())
}

/// The first ring of a log leaving its slot: room for twice the inline
/// entries, never more than the limit allows.
fn spill_capacity(rule: Rule) -> usize {
    let limit = usize::try_from(rule.limit()).unwrap_or(usize::MAX);
    (2 * INLINE).min(limit).max(INLINE + 1)
}

/// Grows a ring, if it is full and a new entry is coming, asking the
/// bound first.
fn grow_ring(log: &mut SpilledLog, merges: bool, limit: u64, bounds: &Bounds) -> Result<()> {
    let growth = log.growth(merges, limit);
    if growth > 0 {
        let before = log.heap_bytes();
        bounds.try_charge(growth)?;
        log.grow(limit);
        bounds.settle(before, growth, log.heap_bytes());
    }
    Ok(())
}

/// One rule's whole decision on a ring: check, then, if allowed, grow if
/// need be and record.
#[inline]
fn decide_in_ring(
    usage: &mut u32,
    log: &mut SpilledLog,
    rate: Rate,
    now: u64,
    cost: u64,
    bounds: &Bounds,
) -> Result<Decision> {
    let before = log.heap_bytes();
    let mut ring = Spilled::new(usage, log);
    let decision = log_algorithm::check(&mut ring, rate, now, cost);
    let mut charged = 0;
    if decision.allowed() && cost > 0 {
        let t = effective_now(&ring, now);
        let merges = !ring.is_empty() && ring.newest_at() == t;
        let growth = log.growth(merges, rate.limit());
        if growth > 0 {
            if let Err(full) = bounds.try_charge(growth) {
                bounds.settle(before, 0, log.heap_bytes());
                return Err(full);
            }
            log.grow(rate.limit());
            charged = growth;
        }
        Spilled::new(usage, log).push(t, cost);
    }
    let after = log.heap_bytes();
    if after != before + charged {
        bounds.settle(before, charged, after);
    }
    Ok(decision)
}

#[cfg(test)]
mod tests;
