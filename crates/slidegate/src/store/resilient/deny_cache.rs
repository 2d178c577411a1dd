//! The local deny cache: a denial is remembered until its `retry_after`
//! passes, so a hot key under attack does not cost a store call per request.
//!
//! Exact for every algorithm: while a request is denied, time passing and
//! other admissions can only move the moment it passes later, and a larger
//! cost never passes sooner. The store decided at some moment between when
//! the request was sent and when its answer came back, so that moment is
//! known within those two bounds, and each serves its own end:
//!
//! - a denial is **held** until the early bound (sent + `retry_after`):
//!   the cache never denies after the store would have admitted;
//! - a client is **told** to wait until the late bound (answered +
//!   `retry_after`): a client that waits what it is told never comes back
//!   before the request can pass.
//!
//! Only the store's own answers are repeated, so the cache must also hear
//! of what changes the store's state behind its back (another process'
//! reset). A store shared with other processes reports those changes
//! ([`ChangeListener`]); the cache then answers only while the feed vouches
//! for it, drops what a change touches, and never remembers a denial
//! decided across a change or a loss of the feed (the generation). Whatever
//! the feed says, a denial is answered no longer than the maximum age after
//! it was asked for: the bound for changes no feed reports (a key deleted
//! by hand).
//!
//! When the store cannot be asked at all (it is down), nothing can change
//! its state through it either: a denial it made is then answered until
//! its wait ends ([`lookup_held`](DenyCache::lookup_held)), whether or not
//! the feed vouches, rather than leaving the request to the failure
//! policy. A feed that was lost drops everything once it is heard again:
//! what it missed meanwhile is unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::clock::Clock;
use crate::decision::{Decision, micros};
use crate::rate::Rule;
use crate::store::changes::{Change, ChangeListener};

#[derive(Debug, Clone)]
struct Denial {
    rules: Box<[Rule]>,
    cost: u64,
    /// Until when the store surely still denies (µs of the cache's clock):
    /// from when the request was sent.
    held_until: u64,
    /// Until when the denial is answered while the store can be asked:
    /// `held_until`, but no longer than the maximum age.
    fresh_until: u64,
    /// Until when a client is told to wait: from when the answer came back.
    retry_until: u64,
    reset_until: u64,
    decision: Decision,
}

/// How often, at most, a full cache looks for expired denials to make
/// room (in microseconds). Between two looks, new denials are not cached:
/// a flood of unique denials must not cost a walk of the whole cache each.
const PURGE_GAP_US: u64 = 100_000;

/// Denials by key, each for one set of rules.
pub(crate) struct DenyCache {
    entries: DashMap<String, Vec<Denial>, foldhash::fast::RandomState>,
    len: AtomicUsize,
    max_entries: usize,
    /// How long a denial is held at most, whatever its `retry_after`.
    max_age_us: u64,
    /// The earliest time a full cache may purge again.
    next_purge: AtomicU64,
    /// Purges so far (for tests).
    purges: AtomicUsize,
    /// Moves on at every change heard, every loss of the feed and every
    /// return of its trust: a denial asked for before and answered after
    /// one of them may be stale, and is not remembered.
    generation: AtomicU64,
    /// Until when held denials may be answered (µs of the cache's clock):
    /// `u64::MAX` for a store without a feed, 0 until the feed is heard.
    trusted_until: AtomicU64,
    /// The feed was lost: everything held goes when it is heard again.
    resync: AtomicBool,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenyCache")
            .field("len", &self.len())
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}

/// When a request went to the store, as the cache saw it: the time (µs of
/// the cache's clock) and the generation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub(crate) sent: u64,
    generation: u64,
}

impl DenyCache {
    /// A cache of at most `max_entries` denials, each held at most
    /// `max_age`, trusted until a feed says otherwise (see [`watched`](Self::watched)).
    pub(crate) fn new(max_entries: usize, max_age: Duration, clock: Arc<dyn Clock>) -> DenyCache {
        DenyCache {
            entries: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            len: AtomicUsize::new(0),
            max_entries: max_entries.max(1),
            max_age_us: micros(max_age),
            next_purge: AtomicU64::new(0),
            purges: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            trusted_until: AtomicU64::new(u64::MAX),
            resync: AtomicBool::new(false),
            clock,
        }
    }

    /// From now on, denials are answered only while a feed of the store's
    /// changes vouches for them ([`ChangeListener::heard`]).
    pub(crate) fn watched(&self) {
        self.trusted_until.store(0, Ordering::SeqCst);
    }

    /// Denials are answered without a feed (the store has none): until
    /// they expire.
    pub(crate) fn unwatched(&self) {
        self.trusted_until.store(u64::MAX, Ordering::SeqCst);
    }

    /// Notes a request about to go to the store at `now`.
    pub(crate) fn ask(&self, now: u64) -> Asked {
        Asked {
            sent: now,
            generation: self.generation.load(Ordering::SeqCst),
        }
    }

    /// A denial that still holds for `cost` of `rules` on `key`, answered
    /// instead of the store: while the feed vouches for it, and no longer
    /// than the maximum age.
    pub(crate) fn lookup(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        if now >= self.trusted_until.load(Ordering::Relaxed) {
            return None;
        }
        self.find(key, rules, cost, now, |d| d.fresh_until)
    }

    /// The store's last word on `cost` of `rules` on `key`, for when it
    /// cannot be asked: a denial it made whose wait has not ended.
    pub(crate) fn lookup_held(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        self.find(key, rules, cost, now, |d| d.held_until)
    }

    fn find(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        now: u64,
        until: impl Fn(&Denial) -> u64,
    ) -> Option<Decision> {
        if never_cached(rules) {
            return None;
        }
        let denials = self.entries.get(key)?;
        let denial = denials
            .iter()
            .find(|d| &*d.rules == rules && cost.max(1) >= d.cost && now < until(d))?;
        let mut decision = denial.decision;
        decision.retry_after_us = denial.retry_until.saturating_sub(now);
        decision.reset_after_us = denial.reset_until.saturating_sub(now);
        Some(decision)
    }

    /// Remembers a denial of a request `asked` for, whose answer came back
    /// at `answered`, unless the store's state may have changed meanwhile.
    pub(crate) fn insert(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        asked: Asked,
        answered: u64,
        decision: Decision,
    ) {
        if decision.allowed() || decision.retry_after().is_zero() || never_cached(rules) {
            return;
        }
        if self.len.load(Ordering::Relaxed) >= self.max_entries {
            let due = self.next_purge.load(Ordering::Relaxed);
            if answered >= due
                && self
                    .next_purge
                    .compare_exchange(
                        due,
                        answered.saturating_add(PURGE_GAP_US),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                self.purge(answered);
            }
            if self.len.load(Ordering::Relaxed) >= self.max_entries {
                return;
            }
        }
        let denial = Denial {
            rules: rules.into(),
            cost: cost.max(1),
            held_until: asked.sent.saturating_add(decision.retry_after_us),
            fresh_until: asked
                .sent
                .saturating_add(decision.retry_after_us.min(self.max_age_us)),
            retry_until: answered.saturating_add(decision.retry_after_us),
            reset_until: answered.saturating_add(decision.reset_after_us),
            decision,
        };
        // Checked under the key's lock, trust first: a change (or a loss)
        // moves the generation on before it drops what it touches under
        // the same lock, and the feed's trust returns only after the
        // generation moved on; so a denial checked before either is
        // dropped by it, and one checked after is refused here.
        let entry = self.entries.entry(key.to_owned());
        if answered >= self.trusted_until.load(Ordering::SeqCst)
            || self.generation.load(Ordering::SeqCst) != asked.generation
        {
            return;
        }
        match entry {
            Entry::Occupied(mut held) => {
                let denials = held.get_mut();
                match denials.iter_mut().find(|d| *d.rules == *rules) {
                    Some(existing) => *existing = denial,
                    None => {
                        denials.push(denial);
                        self.len.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Entry::Vacant(vacant) => {
                vacant.insert(vec![denial]);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops every denial `change` touches.
    fn forget(&self, change: &Change) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Change::Key(key) = change {
            if let Some((_, denials)) = self.entries.remove(key.as_str()) {
                self.len.fetch_sub(denials.len(), Ordering::Relaxed);
            }
            return;
        }
        self.drop_where(|key, denial| change.touches(key, &denial.rules));
    }

    /// Drops expired denials.
    pub(crate) fn purge(&self, now: u64) {
        self.purges.fetch_add(1, Ordering::Relaxed);
        self.drop_where(|_, denial| now >= denial.held_until);
    }

    fn drop_where(&self, expired: impl Fn(&str, &Denial) -> bool) {
        let mut removed = 0;
        self.entries.retain(|key, denials| {
            let before = denials.len();
            denials.retain(|d| !expired(key, d));
            removed += before - denials.len();
            !denials.is_empty()
        });
        self.len.fetch_sub(removed, Ordering::Relaxed);
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

impl ChangeListener for DenyCache {
    fn changed(&self, change: &Change) {
        self.forget(change);
    }

    fn heard(&self, trust_for: Duration) {
        let now = self.clock.now_micros();
        if self.resync.swap(false, Ordering::SeqCst) {
            // What the lost feed missed is unknown.
            self.forget(&Change::All);
        } else if self.trusted_until.load(Ordering::SeqCst) <= now {
            // Trust returns on the same feed, which missed nothing: but
            // what was asked for while it was away is not remembered.
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.trusted_until
            .store(now.saturating_add(micros(trust_for)), Ordering::SeqCst);
    }

    /// Answers nothing from now on, but keeps what it holds for when the
    /// store cannot be asked (see [`lookup_held`](DenyCache::lookup_held)),
    /// until the feed is heard again.
    fn lost(&self) {
        self.trusted_until.store(0, Ordering::SeqCst);
        self.resync.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// Rules whose denials are never cached: a report is recorded whatever the
/// answer, and a concurrency rule's places come back with any release,
/// which no change feed announces: a cached "full" would hold a freed
/// place back until its expiry.
fn never_cached(rules: &[Rule]) -> bool {
    rules
        .iter()
        .any(|rule| rule.reports() || rule.algorithm() == crate::rate::Algorithm::Concurrency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn denial(retry_ms: u64) -> Decision {
        Decision::from_parts(false, 5, 0, retry_ms * 1000, retry_ms * 2000)
    }

    fn cache(max_entries: usize, clock: &ManualClock) -> DenyCache {
        DenyCache::new(
            max_entries,
            Duration::from_secs(3600),
            Arc::new(clock.clone()),
        )
    }

    /// A request asked for and answered at `at`.
    fn insert(cache: &DenyCache, key: &str, rule: Rule, cost: u64, at: u64, decision: Decision) {
        cache.insert(key, &[rule], cost, cache.ask(at), at, decision);
    }

    #[test]
    fn holds_for_equal_or_larger_costs_until_the_deadline() {
        let cache = cache(10, &ManualClock::new());
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        insert(&cache, "k", rule, 2, t0, denial(100));
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

    /// The store decided somewhere between the request's sending and its
    /// answer: the denial is held from the first, the wait told from the
    /// second. The reported figures: a 50 ms stall made the cache answer 47
    /// ms too short a wait.
    #[test]
    fn holds_from_the_sending_and_tells_from_the_answer() {
        let cache = cache(10, &ManualClock::new());
        let rule = Rule::parse("1/2s").unwrap();
        let sent = 1_000_000u64;
        let answered = sent + 50_000;
        let asked = cache.ask(sent);
        cache.insert("k", &[rule], 1, asked, answered, denial(1_746));
        let now = answered + 48_000;
        let told = cache.lookup("k", &[rule], 1, now).unwrap();
        assert_eq!(
            told.retry_after(),
            Duration::from_micros(answered + 1_746_000 - now),
            "the wait runs from the answer"
        );
        assert_eq!(
            told.reset_after(),
            Duration::from_micros(answered + 3_492_000 - now)
        );
        assert!(
            cache
                .lookup("k", &[rule], 1, sent + 1_746_000 - 1)
                .is_some()
        );
        assert!(
            cache.lookup("k", &[rule], 1, sent + 1_746_000).is_none(),
            "held no longer than from the sending"
        );
    }

    #[test]
    fn holds_no_longer_than_the_max_age_and_still_tells_the_whole_wait() {
        let clock = ManualClock::new();
        let cache = DenyCache::new(10, Duration::from_secs(10), Arc::new(clock));
        let rule = Rule::parse("2/1h").unwrap();
        let t0 = 1_000_000u64;
        insert(&cache, "k", rule, 1, t0, denial(3_600_000));
        let told = cache.lookup("k", &[rule], 1, t0 + 9_000_000).unwrap();
        assert_eq!(told.retry_after(), Duration::from_secs(3_591));
        assert!(cache.lookup("k", &[rule], 1, t0 + 10_000_000).is_none());
        let held = cache.lookup_held("k", &[rule], 1, t0 + 10_000_000).unwrap();
        assert_eq!(
            held.retry_after(),
            Duration::from_secs(3_590),
            "the store's last word, for when it cannot be asked"
        );
        cache.purge(t0 + 10_000_000);
        assert_eq!(cache.len(), 1, "held until the wait ends");
        cache.purge(t0 + 3_600_000_000);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn answers_only_while_the_feed_vouches_for_it() {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1));
        let cache = cache(10, &clock);
        cache.watched();
        let rule = Rule::parse("5/1m").unwrap();
        let at = |c: &ManualClock| c.now_micros();
        insert(&cache, "k", rule, 1, at(&clock), denial(60_000));
        assert_eq!(cache.len(), 0, "not remembered before the feed is heard");

        cache.heard(Duration::from_millis(800));
        insert(&cache, "k", rule, 1, at(&clock), denial(60_000));
        assert!(cache.lookup("k", &[rule], 1, at(&clock)).is_some());
        clock.advance(Duration::from_millis(799));
        assert!(cache.lookup("k", &[rule], 1, at(&clock)).is_some());
        clock.advance(Duration::from_millis(1));
        assert!(
            cache.lookup("k", &[rule], 1, at(&clock)).is_none(),
            "the feed was not heard within the trust it gave"
        );
        assert_eq!(cache.len(), 1, "held, in case the feed is heard again");
        cache.heard(Duration::from_millis(800));
        assert!(cache.lookup("k", &[rule], 1, at(&clock)).is_some());

        cache.lost();
        assert!(
            cache.lookup("k", &[rule], 1, at(&clock)).is_none(),
            "a lost feed vouches for nothing"
        );
        assert!(
            cache.lookup_held("k", &[rule], 1, at(&clock)).is_some(),
            "kept for when the store cannot be asked"
        );
        insert(&cache, "k2", rule, 1, at(&clock), denial(60_000));
        assert_eq!(cache.len(), 1, "nothing remembered while the feed is lost");
        cache.heard(Duration::from_millis(800));
        assert_eq!(cache.len(), 0, "dropped once the feed is back");
    }

    #[test]
    fn a_change_drops_what_it_touches() {
        let cache = cache(10, &ManualClock::new());
        let (a, b) = (Rule::parse("5/1m").unwrap(), Rule::parse("7/1m").unwrap());
        let t0 = 1_000_000u64;
        for key in ["k1", "k2"] {
            insert(&cache, key, a, 1, t0, denial(1_000));
            insert(&cache, key, b, 1, t0, denial(1_000));
        }
        cache.changed(&Change::Key("k1".into()));
        assert!(cache.lookup("k1", &[a], 1, t0).is_none());
        assert!(cache.lookup("k2", &[a], 1, t0).is_some());
        cache.changed(&Change::Rule(Rule::parse("5/1m").unwrap().reporting()));
        assert!(cache.lookup("k2", &[a], 1, t0).is_none(), "the same state");
        assert!(cache.lookup("k2", &[b], 1, t0).is_some());
        assert_eq!(cache.len(), 1);
        cache.changed(&Change::All);
        assert_eq!(cache.len(), 0);
    }

    /// A denial the store made before a change, answered after the cache
    /// heard of it, is stale: answered, never remembered.
    #[test]
    fn a_denial_asked_for_across_a_change_or_a_loss_is_not_remembered() {
        let clock = ManualClock::new();
        let cache = cache(10, &clock);
        let rule = Rule::parse("5/1m").unwrap();
        let t0 = 1_000_000u64;
        let asked = cache.ask(t0);
        cache.changed(&Change::Key("k".into()));
        cache.insert("k", &[rule], 1, asked, t0, denial(1_000));
        assert_eq!(cache.len(), 0);

        cache.watched();
        cache.heard(Duration::from_secs(1));
        let asked = cache.ask(clock.now_micros());
        cache.lost();
        cache.heard(Duration::from_secs(1));
        cache.insert("k", &[rule], 1, asked, clock.now_micros(), denial(1_000));
        assert_eq!(cache.len(), 0, "asked for before the loss");
        let asked = cache.ask(clock.now_micros());
        cache.insert("k", &[rule], 1, asked, clock.now_micros(), denial(1_000));
        assert_eq!(cache.len(), 1);

        // The feed went unheard past its trust (no loss reported): what
        // was asked for meanwhile may have missed a change.
        clock.advance(Duration::from_secs(1));
        let asked = cache.ask(clock.now_micros());
        cache.heard(Duration::from_secs(1));
        cache.insert("k2", &[rule], 1, asked, clock.now_micros(), denial(1_000));
        assert_eq!(cache.len(), 1, "asked for while the feed was not trusted");
    }

    #[test]
    fn a_full_cache_looks_for_room_at_most_once_per_gap() {
        let cache = cache(100, &ManualClock::new());
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        for k in 0..1_000 {
            insert(&cache, &format!("k{k}"), rule, 1, t0, denial(500));
        }
        assert_eq!(cache.len(), 100);
        assert_eq!(
            cache.purges.load(Ordering::Relaxed),
            1,
            "900 denials past the bound, one walk of the cache"
        );
        insert(&cache, "later", rule, 1, t0 + PURGE_GAP_US, denial(500));
        assert_eq!(cache.purges.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn stays_within_its_bound() {
        let cache = cache(3, &ManualClock::new());
        let rule = Rule::parse("5/1s").unwrap();
        let t0 = 1_000_000u64;
        for k in 0..10 {
            insert(&cache, &format!("k{k}"), rule, 1, t0, denial(100));
        }
        assert_eq!(cache.len(), 3);
        // Expired entries make room.
        let later = t0 + 200_000;
        insert(&cache, "fresh", rule, 1, later, denial(100));
        assert_eq!(cache.len(), 1);
        assert!(cache.lookup("fresh", &[rule], 1, later).is_some());
    }
}
