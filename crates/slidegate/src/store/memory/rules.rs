//! The rules a shard's slots refer to: a slot keeps a 2-byte index into
//! its shard's table instead of a 24-byte copy of its rule, which leaves
//! room in its cache line for the log itself.
//!
//! The table lives under the shard's lock, as the slots do, so reading it
//! costs no synchronization. It holds at most [`MAX_RULES`] rules; a rule
//! that finds it full is kept in full by its slot (the slower form for
//! keys with several rules) until a sweep compacts the table.

use crate::rate::Rule;

/// The index of a rule in its shard's [`RuleTable`].
pub(crate) type RuleId = u16;

/// The most rules one shard's table holds: a caller that makes up new
/// rules (an API taking a limit and a window) cannot make it grow beyond
/// 128 × 24 bytes per shard.
pub(crate) const MAX_RULES: usize = 128;

/// Rules kept in the table itself, in the shard's own cache lines next to
/// its lock: most stores use a handful of rules.
const FIRST: usize = 2;

/// The rules of one shard.
#[derive(Debug, Default)]
pub(crate) struct RuleTable {
    first: [Option<Rule>; FIRST],
    rest: Vec<Rule>,
}

impl RuleTable {
    /// The rule at `id`.
    #[inline]
    pub(crate) fn get(&self, id: RuleId) -> Rule {
        match self.find(id) {
            Some(rule) => rule,
            None => unreachable!("a slot refers to a rule of its shard's table"),
        }
    }

    #[inline]
    fn find(&self, id: RuleId) -> Option<Rule> {
        let id = usize::from(id);
        match id.checked_sub(FIRST) {
            None => self.first[id],
            Some(i) => self.rest.get(i).copied(),
        }
    }

    /// True when `id` names `rule`.
    #[inline]
    pub(crate) fn is(&self, id: RuleId, rule: Rule) -> bool {
        self.find(id) == Some(rule)
    }

    /// The index of `rule`, added if the table has room.
    pub(crate) fn intern(&mut self, rule: Rule) -> Option<RuleId> {
        // A scan: the table is short (most stores see a handful of rules),
        // bounded, and only read when a key takes a new rule.
        let held = self.len();
        if let Some(i) = (0..held).position(|i| self.find(i as RuleId) == Some(rule)) {
            return RuleId::try_from(i).ok();
        }
        if held >= MAX_RULES {
            return None;
        }
        match self.first.get_mut(held) {
            Some(place) => *place = Some(rule),
            None => self.rest.push(rule),
        }
        RuleId::try_from(held).ok()
    }

    /// Number of rules held.
    pub(crate) fn len(&self) -> usize {
        self.first.iter().flatten().count() + self.rest.len()
    }

    /// Keeps only the rules `used` names (by their old index) and returns
    /// each old index's new one.
    pub(crate) fn compact(&mut self, used: &[bool]) -> Vec<RuleId> {
        let held = self.len();
        let mut renumbered = vec![RuleId::MAX; held];
        let mut kept = RuleTable::default();
        for (old, place) in renumbered.iter_mut().enumerate() {
            if used.get(old).copied().unwrap_or(false)
                && let Some(id) = kept.intern(self.get(old as RuleId))
            {
                *place = id;
            }
        }
        *self = kept;
        renumbered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nth(n: usize) -> Rule {
        Rule::parse(&format!("{}/1s", n + 1)).unwrap()
    }

    #[test]
    fn a_rule_keeps_its_index() {
        let mut table = RuleTable::default();
        let a = table.intern(nth(0)).unwrap();
        let b = table.intern(nth(1)).unwrap();
        assert_ne!(a, b);
        assert_eq!(table.intern(nth(0)), Some(a));
        assert!(table.is(a, nth(0)) && !table.is(a, nth(1)));
        assert_eq!(table.get(b), nth(1));
    }

    #[test]
    fn a_full_table_takes_no_new_rule() {
        let mut table = RuleTable::default();
        for n in 0..MAX_RULES {
            assert!(table.intern(nth(n)).is_some());
        }
        assert_eq!(table.intern(nth(MAX_RULES)), None);
        assert_eq!(table.intern(nth(3)), Some(3));
    }

    #[test]
    fn compacting_keeps_the_used_rules_in_order() {
        let mut table = RuleTable::default();
        for n in 0..4 {
            table.intern(nth(n));
        }
        let renumbered = table.compact(&[false, true, false, true]);
        assert_eq!(renumbered[1], 0);
        assert_eq!(renumbered[3], 1);
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(1), nth(3));
    }
}
