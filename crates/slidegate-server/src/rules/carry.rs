//! What a changed limit keeps: when a config replaces a limit's rule by
//! one of the same window and algorithm but another limit, the counters
//! used under the old rule are carried to the new one, so that a raised
//! (or lowered) limit does not hand every counter a fresh quota.
//!
//! A domain's counters are not known when its rules change (they are
//! keyed by the descriptor values requests send), so a carry is made when
//! a counter is first decided under the new rule, for one window after the
//! change: past that, nothing counted under the old rule is left.
//! [`Carry`] is that plan, found by the new limit's id; the limiter makes
//! the carry itself.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashSet;

use slidegate::Rule;

use super::limit::{Enforcement, Limit, LimitId};

/// The most counters a carry remembers as carried on this server; past
/// it, each one is asked of the store's marker, which is as exact.
pub const MAX_REMEMBERED: usize = 100_000;

/// The most earlier rules a carry reads from, when a limit changes again
/// within a window of its last change.
pub const MAX_EARLIER: usize = 4;

/// A limit whose rule changed: what its counters carry over, and until when.
#[derive(Debug)]
pub struct Carry {
    /// The rule in force now.
    pub new: Rule,
    /// The rules the counters were kept under before, the latest first.
    pub old: Vec<Rule>,
    /// One window after the change: nothing is left to carry after it.
    pub until: Instant,
    /// Counters this server has carried (hashes of their keys): sharded,
    /// since every decision of the limit asks it for a window.
    carried: DashSet<u64>,
    remembered: AtomicUsize,
    hasher: foldhash::fast::RandomState,
}

impl Carry {
    /// A carry to `new` from `old` (latest first), for one window from `now`.
    pub fn new(new: Rule, old: Vec<Rule>, now: Instant) -> Carry {
        Carry {
            new,
            old,
            until: now + new.rate().window(),
            carried: DashSet::new(),
            remembered: AtomicUsize::new(0),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Whether a counter decided at `now` may still hold use to carry.
    #[inline]
    pub fn is_live(&self, now: Instant) -> bool {
        now < self.until
    }

    /// Claims the carry of `key` on this server: true the first time,
    /// false once claimed. When this server remembers [`MAX_REMEMBERED`]
    /// counters already, every claim is true (the store's marker decides).
    pub fn claim(&self, key: &str) -> bool {
        let hash = self.hasher.hash_one(key);
        if self.carried.contains(&hash) {
            return false;
        }
        if self.remembered.load(Ordering::Relaxed) >= MAX_REMEMBERED {
            return true;
        }
        let claimed = self.carried.insert(hash);
        if claimed {
            self.remembered.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }

    /// Gives back the claim of `key`, whose carry could not be made, so
    /// that its next decision tries again.
    pub fn unclaim(&self, key: &str) {
        if self.carried.remove(&self.hasher.hash_one(key)).is_some() {
            self.remembered.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The window of the rules, the same for old and new.
    pub fn window(&self) -> Duration {
        self.new.rate().window()
    }
}

/// The carries of a config, by the id of the limit they carry to.
pub type Carries = HashMap<LimitId, Arc<Carry>>;

/// The carries a config of `new` limits makes from the `old` config's
/// limits (with the old config's carries still live at `now`): a limit
/// of the same domain and descriptor path (its `full_key`) whose rule
/// changed its limit (or burst) but kept its window and algorithm.
pub fn carries<'a>(
    old: impl IntoIterator<Item = (&'a str, &'a Limit)>,
    old_carries: &Carries,
    new: impl IntoIterator<Item = (&'a str, &'a Limit)>,
    now: Instant,
) -> Carries {
    let before: HashMap<(&str, &str), &Limit> = old
        .into_iter()
        .map(|(domain, limit)| ((domain, limit.full_key.as_str()), limit))
        .collect();
    let mut carries = Carries::new();
    for (domain, limit) in new {
        let Enforcement::Rule(rule) = limit.enforcement else {
            continue;
        };
        let Some(previous) = before.get(&(domain, limit.full_key.as_str())) else {
            continue;
        };
        let earlier = old_carries
            .get(&previous.id)
            .filter(|carry| carry.is_live(now));
        let changed = match previous.enforcement {
            Enforcement::Rule(was) => !was.same_state(&rule),
            Enforcement::Unlimited | Enforcement::Blocked => false,
        };
        if !changed {
            // The same rule: a carry of an earlier change goes on as it was.
            if let Some(earlier) = earlier
                && earlier.new.same_state(&rule)
            {
                carries.insert(limit.id, Arc::clone(earlier));
            }
            continue;
        }
        let mut old_rules = Vec::new();
        if let Enforcement::Rule(was) = previous.enforcement {
            old_rules.push(was);
        }
        // A limit changed again within a window: its counters may still
        // hold use under the rules before, never carried.
        for was in earlier.iter().flat_map(|carry| carry.old.iter()) {
            if old_rules.len() < MAX_EARLIER && !was.same_state(&rule) && !old_rules.contains(was) {
                old_rules.push(*was);
            }
        }
        old_rules.retain(|was| {
            was.rate().window() == rule.rate().window() && was.algorithm() == rule.algorithm()
        });
        if old_rules.is_empty() {
            continue;
        }
        let carry = Carry::new(rule, old_rules, now);
        carries.insert(limit.id, Arc::new(carry));
    }
    carries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Unit;

    fn limit(id: u32, full_key: &str, rule: &str) -> Limit {
        let rule = Rule::parse(rule).unwrap();
        Limit {
            id: LimitId(id),
            enforcement: Enforcement::Rule(rule),
            requests_per_unit: rule.limit(),
            unit: Unit::of_window(rule.rate().window()),
            name: None,
            replaces: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            full_key: full_key.to_owned(),
        }
    }

    #[test]
    fn a_changed_limit_of_the_same_window_and_algorithm_is_carried() {
        let old = [
            limit(0, "api.user", "3/1h"),
            limit(1, "api.ip", "10/1m"),
            limit(2, "api.path", "10/1m"),
            limit(3, "api.token", "10/1m"),
        ];
        let new = [
            // Ids are renumbered by a reload: found by path, not id.
            limit(3, "api.user", "5/1h"),
            limit(0, "api.ip", "10/1m"),
            limit(1, "api.path", "10/1s"),
            limit(2, "api.token", "20/1m gcra"),
            limit(4, "api.new", "20/1m"),
        ];
        let now = Instant::now();
        let carries = carries(
            old.iter().map(|l| ("api", l)),
            &Carries::new(),
            new.iter().map(|l| ("api", l)),
            now,
        );
        assert_eq!(carries.len(), 1, "{carries:?}");
        let carry = &carries[&LimitId(3)];
        assert_eq!(carry.old, [Rule::parse("3/1h").unwrap()]);
        assert_eq!(carry.new, Rule::parse("5/1h").unwrap());
        assert_eq!(carry.until, now + Duration::from_secs(3600));
        assert!(carry.is_live(now) && !carry.is_live(carry.until));
        // Another domain's limit of the same path is another limit.
        let elsewhere = super::carries(
            old.iter().map(|l| ("web", l)),
            &Carries::new(),
            new.iter().map(|l| ("api", l)),
            now,
        );
        assert!(elsewhere.is_empty());
    }

    #[test]
    fn a_second_change_within_a_window_reads_the_rules_before_too() {
        let now = Instant::now();
        let first = [limit(0, "api.user", "3/1h")];
        let second = [limit(0, "api.user", "5/1h")];
        let third = [limit(0, "api.user", "8/1h")];
        let once = carries(
            first.iter().map(|l| ("api", l)),
            &Carries::new(),
            second.iter().map(|l| ("api", l)),
            now,
        );
        let later = now + Duration::from_secs(60);
        let twice = carries(
            second.iter().map(|l| ("api", l)),
            &once,
            third.iter().map(|l| ("api", l)),
            later,
        );
        let carry = &twice[&LimitId(0)];
        assert_eq!(
            carry.old,
            [Rule::parse("5/1h").unwrap(), Rule::parse("3/1h").unwrap()]
        );
        // Back to the first rule: its own state is the new one, not carried.
        let back = carries(
            third.iter().map(|l| ("api", l)),
            &twice,
            first.iter().map(|l| ("api", l)),
            later,
        );
        assert_eq!(
            back[&LimitId(0)].old,
            [Rule::parse("8/1h").unwrap(), Rule::parse("5/1h").unwrap()]
        );
        // Past a window, the earlier carry is spent.
        let spent = carries(
            second.iter().map(|l| ("api", l)),
            &once,
            third.iter().map(|l| ("api", l)),
            now + Duration::from_secs(3600),
        );
        assert_eq!(spent[&LimitId(0)].old, [Rule::parse("5/1h").unwrap()]);
    }

    #[test]
    fn a_reload_of_the_same_rules_keeps_the_carry_in_force() {
        let now = Instant::now();
        let first = [limit(0, "api.user", "3/1h")];
        let second = [limit(7, "api.user", "5/1h")];
        let once = carries(
            first.iter().map(|l| ("api", l)),
            &Carries::new(),
            second.iter().map(|l| ("api", l)),
            now,
        );
        let reloaded = [limit(2, "api.user", "5/1h")];
        let again = carries(
            second.iter().map(|l| ("api", l)),
            &once,
            reloaded.iter().map(|l| ("api", l)),
            now + Duration::from_secs(60),
        );
        assert!(Arc::ptr_eq(&again[&LimitId(2)], &once[&LimitId(7)]));
    }

    #[test]
    fn a_counter_is_claimed_once() {
        let carry = Carry::new(
            Rule::parse("5/1h").unwrap(),
            vec![Rule::parse("3/1h").unwrap()],
            Instant::now(),
        );
        assert!(carry.claim("c:api|user=1"));
        assert!(!carry.claim("c:api|user=1"));
        assert!(carry.claim("c:api|user=2"));
        carry.unclaim("c:api|user=2");
        assert!(carry.claim("c:api|user=2"), "given back, claimed again");
        // Full: still once for what it remembers, and every time for the
        // rest (the store's marker decides them).
        carry.remembered.store(MAX_REMEMBERED, Ordering::Relaxed);
        assert!(!carry.claim("c:api|user=1"));
        assert!(carry.claim("c:api|user=3"));
        assert!(carry.claim("c:api|user=3"));
        assert_eq!(carry.carried.len(), 2);
    }
}
