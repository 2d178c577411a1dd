//! The local deny cache: a denial is remembered until its `retry_after`
//! passes, so a hot key under attack does not cost a store call per request.
//!
//! Exact for every algorithm: while a request is denied, time passing and
//! other admissions can only move the moment it passes later, and a larger
//! cost never passes sooner. The deadline is measured from when the request
//! was *sent*, so network delay only ever makes it earlier than the store's.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;

use crate::decision::Decision;
use crate::rate::Rule;

#[derive(Debug, Clone)]
struct Denial {
    rules: Box<[Rule]>,
    cost: u64,
    /// Microseconds of the store's local clock.
    until: u64,
    reset_until: u64,
    decision: Decision,
}

/// How often, at most, a full cache looks for expired denials to make
/// room (in microseconds). Between two looks, new denials are not cached:
/// a flood of unique denials must not cost a walk of the whole cache each.
const PURGE_GAP_US: u64 = 100_000;

/// Denials by key, each for one set of rules.
#[derive(Debug)]
pub(crate) struct DenyCache {
    entries: DashMap<String, Vec<Denial>, foldhash::fast::RandomState>,
    len: AtomicUsize,
    max_entries: usize,
    /// The earliest time a full cache may purge again.
    next_purge: AtomicU64,
    /// Purges so far (for tests).
    purges: AtomicUsize,
}

impl DenyCache {
    pub(crate) fn new(max_entries: usize) -> DenyCache {
        DenyCache {
            entries: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            len: AtomicUsize::new(0),
            max_entries: max_entries.max(1),
            next_purge: AtomicU64::new(0),
            purges: AtomicUsize::new(0),
        }
    }

    /// A denial that still holds for `cost` of `rules` on `key`.
    pub(crate) fn lookup(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        // A report is recorded whatever the answer: never answered here.
        if rules.iter().any(Rule::reports) {
            return None;
        }
        let denials = self.entries.get(key)?;
        let denial = denials
            .iter()
            .find(|d| &*d.rules == rules && cost.max(1) >= d.cost && now < d.until)?;
        let mut decision = denial.decision;
        decision.retry_after_us = denial.until - now;
        decision.reset_after_us = denial.reset_until.saturating_sub(now);
        Some(decision)
    }

    /// Remembers a denial of a request sent at `sent`.
    pub(crate) fn insert(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        sent: u64,
        decision: Decision,
    ) {
        if decision.allowed() || decision.retry_after().is_zero() || rules.iter().any(Rule::reports)
        {
            return;
        }
        if self.len.load(Ordering::Relaxed) >= self.max_entries {
            let due = self.next_purge.load(Ordering::Relaxed);
            if sent >= due
                && self
                    .next_purge
                    .compare_exchange(
                        due,
                        sent.saturating_add(PURGE_GAP_US),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                self.purge(sent);
            }
            if self.len.load(Ordering::Relaxed) >= self.max_entries {
                return;
            }
        }
        let denial = Denial {
            rules: rules.into(),
            cost: cost.max(1),
            until: sent.saturating_add(decision.retry_after_us),
            reset_until: sent.saturating_add(decision.reset_after_us),
            decision,
        };
        let mut denials = self.entries.entry(key.to_owned()).or_default();
        match denials.iter_mut().find(|d| *d.rules == *rules) {
            Some(existing) => *existing = denial,
            None => {
                denials.push(denial);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Forgets `key` (after a reset).
    pub(crate) fn forget(&self, key: &str) {
        if let Some((_, denials)) = self.entries.remove(key) {
            self.len.fetch_sub(denials.len(), Ordering::Relaxed);
        }
    }

    /// Drops expired denials.
    pub(crate) fn purge(&self, now: u64) {
        self.purges.fetch_add(1, Ordering::Relaxed);
        let mut removed = 0;
        self.entries.retain(|_, denials| {
            let before = denials.len();
            denials.retain(|d| now < d.until);
            removed += before - denials.len();
            !denials.is_empty()
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn denial(retry_ms: u64) -> Decision {
        Decision::from_parts(false, 5, 0, retry_ms * 1000, retry_ms * 2000)
    }

    #[test]
    fn holds_for_equal_or_larger_costs_until_the_deadline() {
        let cache = DenyCache::new(10);
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        cache.insert("k", &[rule], 2, t0, denial(100));
        assert!(cache.lookup("k", &[rule], 2, t0).is_some());
        assert!(cache.lookup("k", &[rule], 3, t0).is_some());
        assert!(
            cache.lookup("k", &[rule], 1, t0).is_none(),
            "a smaller cost may pass"
        );
        assert!(cache.lookup("other", &[rule], 2, t0).is_none());
        let later = cache.lookup("k", &[rule], 2, t0 + 40_000).unwrap();
        assert_eq!(later.retry_after(), Duration::from_millis(60));
        assert!(cache.lookup("k", &[rule], 2, t0 + 100_000).is_none());
    }

    #[test]
    fn a_full_cache_looks_for_room_at_most_once_per_gap() {
        let cache = DenyCache::new(100);
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        for k in 0..1_000 {
            cache.insert(&format!("k{k}"), &[rule], 1, t0, denial(500));
        }
        assert_eq!(cache.len(), 100);
        assert_eq!(
            cache.purges.load(Ordering::Relaxed),
            1,
            "900 denials past the bound, one walk of the cache"
        );
        cache.insert("later", &[rule], 1, t0 + PURGE_GAP_US, denial(500));
        assert_eq!(cache.purges.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn stays_within_its_bound() {
        let cache = DenyCache::new(3);
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        for k in 0..10 {
            cache.insert(&format!("k{k}"), &[rule], 1, t0, denial(100));
        }
        assert_eq!(cache.len(), 3);
        // Expired entries make room.
        let later = t0 + 200_000;
        cache.insert("fresh", &[rule], 1, later, denial(100));
        assert_eq!(cache.len(), 1);
        assert!(cache.lookup("fresh", &[rule], 1, later).is_some());
    }
}
