//! The exact sliding log.
//!
//! `usage(t)` is the sum of the costs admitted at times `t_i` with
//! `t - W <= t_i <= t`: an entry stops counting only once it is *more* than
//! `W` old. A request of cost `c` passes iff `usage(t) + c <= L`, and only
//! then is `(t, c)` recorded. With this rule no real interval of length `W`
//! ever holds more than `L` admissions, even with truncated timestamps.
//!
//! Entries hold the time and the *running total* of costs up to and
//! including them, so usage is one subtraction and the entry that decides
//! `retry_after` is a binary search: O(log n) for any mix of costs, O(1)
//! amortized for the trimming. Entries recorded in the same microsecond are
//! merged, so memory is bounded by both L and the number of distinct
//! microseconds inside the window.
//!
//! Time never runs backwards inside a log: a request that arrives with a
//! time older than the newest entry (a reservation ahead of now, or a
//! clock that stepped back) is recorded at the newest entry's time, and
//! counts every entry not yet expired at its own time, the ones ahead of
//! it included: an upper bound of any window that holds `now`, so no
//! real window ever holds more than `L`.
//!
//! The algorithm is written once (`log_algorithm.rs`), against where a
//! log keeps its entries. [`SlidingLog`] keeps them in a buffer of its
//! own, with their summary inline; the memory store keeps the first ones
//! inside its per-key slot and the rest in a compact ring.

use std::collections::VecDeque;

use super::log_algorithm::{self, LogEntries, effective_now, expired};
use super::meter::Meter;
use crate::decision::Decision;
use crate::rate::Rate;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    at: u64,
    /// Sum of the costs of every entry up to and including this one, since
    /// the log was last empty.
    total: u64,
}

/// The state of one sliding log.
///
/// Besides the entries, it keeps their summary inline (oldest and newest
/// time, running totals) and the deadline of the last denial, so that the
/// common calls (a denial of a key under attack, an admission that drops
/// nothing) never touch the entry buffer: what makes a large number of busy
/// keys cheap. The cached denial is exact: until its deciding entry
/// expires, the same cost cannot pass, and any admission clears it.
#[derive(Clone, Debug, Default)]
#[repr(C)] // the summary first: what most calls read, in one cache line
pub struct SlidingLog {
    /// Time of the first entry (meaningless when empty).
    oldest_at: u64,
    /// Time of the last entry (meaningless when empty).
    newest_at: u64,
    /// Running total of the last entry (0 when empty).
    newest_total: u64,
    /// Running total just before the first entry.
    dropped_total: u64,
    /// Cost (as asked) of the last denial, 0 when none is cached.
    denied_cost: u64,
    /// When a request of `denied_cost` passes again.
    denied_until: u64,
    entries: VecDeque<Entry>,
}

impl SlidingLog {
    /// Number of entries held (distinct admission times inside the window).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the log holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Heap bytes held by the entries.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// The admissions in the log as `(time, cost)` pairs, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut before = self.dropped_total;
        self.entries.iter().map(move |e| {
            let cost = e.total - before;
            before = e.total;
            (e.at, cost)
        })
    }

    /// Time of the newest entry (0 when empty): where the last admission
    /// was recorded.
    pub(crate) fn newest_time(&self) -> u64 {
        if self.holds_nothing() {
            0
        } else {
            self.newest_at
        }
    }

    /// Empty iff the totals are equal: every entry costs at least 1, and
    /// an emptied log starts over from zero. Reads no entry.
    #[inline]
    fn holds_nothing(&self) -> bool {
        self.newest_total == self.dropped_total
    }

    /// Builds a log from its admissions, `(time, cost)` pairs, oldest
    /// first, in increasing time and of cost at least 1 (what another
    /// representation of a log held).
    pub(crate) fn from_admissions(
        admissions: impl ExactSizeIterator<Item = (u64, u64)>,
    ) -> SlidingLog {
        let mut log = SlidingLog {
            entries: VecDeque::with_capacity(admissions.len()),
            ..SlidingLog::default()
        };
        for (at, cost) in admissions {
            log.push(at, cost);
        }
        log
    }

    /// The heap bytes [`record`](Meter::record) at `now` would allocate:
    /// none unless it needs a new entry (not merged into the newest) and
    /// the buffer is full. Lets a store with a memory bound ask for them
    /// first ([`grow_for_record`](Self::grow_for_record)).
    #[inline]
    pub(crate) fn record_growth(&self, now: u64) -> usize {
        let capacity = self.entries.capacity();
        if self.entries.len() < capacity {
            return 0;
        }
        let merges = !self.holds_nothing() && self.newest_at == effective_now(self, now);
        if merges {
            return 0;
        }
        (grown_capacity(capacity) - capacity) * std::mem::size_of::<Entry>()
    }

    /// Grows the buffer by [`record_growth`](Self::record_growth) bytes,
    /// so that the next `record` allocates nothing.
    pub(crate) fn grow_for_record(&mut self) {
        let additional = grown_capacity(self.entries.capacity()) - self.entries.len();
        self.entries.reserve_exact(additional);
    }
}

/// The capacity a full buffer grows to: double, as `VecDeque` itself does,
/// so pushes stay amortized O(1).
fn grown_capacity(capacity: usize) -> usize {
    capacity.saturating_mul(2).max(4)
}

impl LogEntries for SlidingLog {
    #[inline]
    fn is_empty(&self) -> bool {
        self.holds_nothing()
    }

    #[inline]
    fn oldest_at(&self) -> u64 {
        self.oldest_at
    }

    #[inline]
    fn newest_at(&self) -> u64 {
        self.newest_at
    }

    #[inline]
    fn usage(&self) -> u64 {
        self.newest_total - self.dropped_total
    }

    fn drop_expired(&mut self, window: u64, t: u64) {
        while let Some(oldest) = self.entries.front() {
            if !expired(oldest.at, window, t) {
                self.oldest_at = oldest.at;
                break;
            }
            self.dropped_total = oldest.total;
            self.entries.pop_front();
        }
        if self.entries.is_empty() {
            *self = SlidingLog {
                entries: std::mem::take(&mut self.entries),
                ..SlidingLog::default()
            };
        }
        // Memory follows the entries inside the window, not the peak.
        let (len, cap) = (self.entries.len(), self.entries.capacity());
        if cap > 64 && cap > 4 * len {
            self.entries.shrink_to(2 * len);
        }
    }

    fn deciding_at(&self, need: u64) -> u64 {
        let target = self.dropped_total + need;
        let k = self.entries.partition_point(|e| e.total < target);
        self.entries.get(k).map_or(0, |deciding| deciding.at)
    }

    #[inline]
    fn cached_denial(&self) -> Option<(u64, u64)> {
        Some((self.denied_cost, self.denied_until))
    }

    #[inline]
    fn cache_denial(&mut self, asked: u64, until: u64) {
        self.denied_cost = asked;
        self.denied_until = until;
    }

    fn give_back(&mut self, at: u64, cost: u64) -> bool {
        let k = self.entries.partition_point(|e| e.at < at);
        let Some(entry) = self.entries.get(k).copied() else {
            return false;
        };
        let before = match k {
            0 => self.dropped_total,
            _ => self.entries[k - 1].total,
        };
        if entry.at != at || entry.total - before < cost {
            return false;
        }
        self.denied_cost = 0;
        for later in self.entries.range_mut(k..) {
            later.total -= cost;
        }
        self.newest_total -= cost;
        if entry.total - before == cost {
            self.entries.remove(k);
            match (self.entries.front(), self.entries.back()) {
                (Some(oldest), Some(newest)) => {
                    self.oldest_at = oldest.at;
                    self.newest_at = newest.at;
                }
                _ => {
                    *self = SlidingLog {
                        entries: std::mem::take(&mut self.entries),
                        ..SlidingLog::default()
                    }
                }
            }
        }
        true
    }

    #[inline]
    fn push(&mut self, t: u64, cost: u64) {
        let was_empty = self.holds_nothing();
        self.denied_cost = 0;
        self.newest_total += cost;
        match self.entries.back_mut() {
            Some(newest) if !was_empty && self.newest_at == t => newest.total = self.newest_total,
            _ => {
                if was_empty {
                    self.oldest_at = t;
                }
                self.entries.push_back(Entry {
                    at: t,
                    total: self.newest_total,
                });
            }
        }
        self.newest_at = t;
    }
}

impl Meter for SlidingLog {
    #[inline]
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        log_algorithm::check(self, rate, now, cost)
    }

    #[inline]
    fn record(&mut self, _rate: Rate, now: u64, cost: u64) {
        log_algorithm::record(self, now, cost);
    }

    fn is_idle(&self, rate: Rate, now: u64) -> bool {
        log_algorithm::is_idle(self, rate, now)
    }

    /// Records `cost` as an admission, then keeps only the newest `L`
    /// units: the oldest usage over the limit is dropped. That changes no
    /// answer: while the newest `L` units are inside the window nothing
    /// passes, with or without what came before them, and older units
    /// leave the window first. So a log never holds more than `L` units,
    /// reported or not.
    fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        let (limit, window) = (rate.limit(), rate.window_micros());
        if !self.holds_nothing() && expired(self.oldest_at, window, now) {
            self.drop_expired(window, now);
        }
        log_algorithm::record(self, now, cost.min(limit));
        let usage = self.newest_total - self.dropped_total;
        if usage > limit {
            self.dropped_total += usage - limit;
            while self
                .entries
                .front()
                .is_some_and(|oldest| oldest.total <= self.dropped_total)
            {
                self.entries.pop_front();
            }
            if let Some(oldest) = self.entries.front() {
                self.oldest_at = oldest.at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rate(limit: u64, window_ms: u64) -> Rate {
        Rate::new(limit, Duration::from_millis(window_ms)).unwrap()
    }

    #[test]
    fn an_entry_counts_until_it_is_more_than_a_window_old() {
        let r = rate(1, 1000);
        let mut log = SlidingLog::default();
        assert!(log.decide(r, 0, 1).allowed());
        let denied = log.decide(r, 1_000_000, 1);
        assert!(!denied.allowed(), "exactly W old still counts");
        assert_eq!(denied.retry_after(), Duration::from_micros(1));
        assert!(log.decide(r, 1_000_001, 1).allowed());
    }

    #[test]
    fn a_report_over_the_limit_keeps_the_newest_limit_units() {
        let r = rate(100, 60_000);
        let mut log = SlidingLog::default();
        assert!(log.decide(r, 0, 60).allowed());
        log.report(r, 10_000_000, 80);
        assert_eq!(
            log.entries().collect::<Vec<_>>(),
            vec![(0, 20), (10_000_000, 80)],
            "40 of the oldest 60 are past the limit"
        );
        let d = log.check(r, 20_000_000, 1);
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Duration::from_micros(40_000_001));
        let d = log.check(r, 20_000_000, 30);
        assert_eq!(d.retry_after(), Duration::from_micros(50_000_001));
        log.report(r, 30_000_000, 1_000);
        assert_eq!(log.entries().collect::<Vec<_>>(), vec![(30_000_000, 100)]);
    }

    #[test]
    fn a_give_back_changes_the_admission_in_place() {
        let r = rate(10, 1000);
        let mut log = SlidingLog::default();
        log.decide(r, 0, 3);
        log.decide(r, 100, 4);
        log.decide(r, 200, 3);
        assert!(!log.give_back(100, 5), "more than the entry holds");
        assert!(!log.give_back(150, 1), "no entry there");
        assert!(log.give_back(100, 3));
        assert_eq!(
            log.entries().collect::<Vec<_>>(),
            vec![(0, 3), (100, 1), (200, 3)]
        );
        assert!(log.give_back(100, 1), "down to nothing: the entry goes");
        assert!(log.give_back(0, 3));
        assert_eq!(log.entries().collect::<Vec<_>>(), vec![(200, 3)]);
        let d = log.check(r, 300, 8);
        assert!(!d.allowed());
        assert_eq!(
            d.retry_after(),
            Duration::from_micros(200 + 1_000_000 + 1 - 300)
        );
        assert!(log.give_back(200, 3));
        assert!(log.is_empty());
        assert!(log.decide(r, 400, 10).allowed());
    }

    #[test]
    fn two_requests_in_one_microsecond_are_both_counted() {
        let r = rate(2, 1000);
        let mut log = SlidingLog::default();
        assert!(log.decide(r, 5, 1).allowed());
        assert!(log.decide(r, 5, 1).allowed());
        assert!(!log.decide(r, 5, 1).allowed());
        assert_eq!(log.len(), 1, "same-microsecond entries merge");
        assert_eq!(log.entries().collect::<Vec<_>>(), vec![(5, 2)]);
    }

    #[test]
    fn denied_requests_record_nothing() {
        let r = rate(1, 1000);
        let mut log = SlidingLog::default();
        log.decide(r, 0, 1);
        for t in 1..100 {
            assert!(!log.decide(r, t * 1000, 1).allowed());
        }
        assert_eq!(log.len(), 1);
        assert!(log.decide(r, 1_000_001, 1).allowed());
    }

    #[test]
    fn retry_after_finds_the_deciding_entry_for_weighted_costs() {
        let r = rate(10, 1000);
        let mut log = SlidingLog::default();
        log.decide(r, 0, 3);
        log.decide(r, 100, 4);
        log.decide(r, 200, 3);
        // usage 10; a cost of 5 needs the first two entries (3 + 4) gone.
        let d = log.check(r, 300, 5);
        assert!(!d.allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(
            d.retry_after(),
            Duration::from_micros(100 + 1_000_000 + 1 - 300)
        );
        assert_eq!(
            d.reset_after(),
            Duration::from_micros(200 + 1_000_000 + 1 - 300)
        );
        assert!(log.decide(r, 1_000_101, 5).allowed());
    }

    #[test]
    fn probe_reports_without_consuming() {
        let r = rate(2, 1000);
        let mut log = SlidingLog::default();
        let p = log.decide(r, 0, 0);
        assert!(p.allowed());
        assert_eq!((p.remaining(), p.reset_after()), (2, Duration::ZERO));
        log.decide(r, 0, 2);
        let p = log.decide(r, 10, 0);
        assert!(!p.allowed());
        assert_eq!(p.retry_after(), Duration::from_micros(1_000_001 - 10));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn a_clock_stepping_back_records_at_the_newest_time() {
        let r = rate(5, 1000);
        let mut log = SlidingLog::default();
        log.decide(r, 1_000, 1);
        log.decide(r, 500, 1);
        assert_eq!(log.entries().collect::<Vec<_>>(), vec![(1_000, 2)]);
    }

    #[test]
    fn entries_ahead_of_now_leave_older_ones_counting() {
        // L=2, W=1 s: two admissions at 0, a reservation at 1.000001 s.
        let r = rate(2, 1000);
        let mut log = SlidingLog::default();
        log.decide(r, 0, 2);
        let wait = log.check(r, 500_000, 1).retry_after();
        assert_eq!(wait, Duration::from_micros(500_001));
        log.record(r, 1_000_001, 1);
        // At 0.6 s the two at 0 still count: a third in [0, 1 s] is denied.
        let d = log.check(r, 600_000, 1);
        assert!(!d.allowed());
        assert_eq!(d.retry_after(), Duration::from_micros(400_001));
        // Once they expire, one more fits beside the reservation.
        assert!(log.decide(r, 1_000_001, 1).allowed());
        assert_eq!(
            log.entries().collect::<Vec<_>>(),
            vec![(1_000_001, 2)],
            "recorded at the newest time"
        );
    }

    #[test]
    fn growing_first_leaves_record_nothing_to_allocate() {
        let r = rate(1_000, 1000);
        let mut log = SlidingLog::default();
        for t in 0..100 {
            assert!(log.check(r, t, 1).allowed());
            let growth = log.record_growth(t);
            let before = log.heap_bytes();
            if growth > 0 {
                log.grow_for_record();
            }
            assert_eq!(log.heap_bytes(), before + growth, "at {t}");
            log.record(r, t, 1);
            assert_eq!(log.heap_bytes(), before + growth, "record allocated at {t}");
        }
        // A second admission in the same microsecond merges: no growth.
        assert_eq!(log.record_growth(99), 0);
        assert_eq!(log.len(), 100);
    }

    #[test]
    fn memory_returns_after_a_burst_expires() {
        let r = rate(10_000, 1000);
        let mut log = SlidingLog::default();
        for t in 0..10_000 {
            log.decide(r, t, 1);
        }
        let peak = log.heap_bytes();
        log.decide(r, 1_009_999 + 1, 1);
        assert_eq!(log.len(), 1);
        assert!(
            log.heap_bytes() < peak / 100,
            "{} of {peak}",
            log.heap_bytes()
        );
        assert!(!log.is_idle(r, 2_009_999));
        assert!(log.is_idle(r, 2_010_001));
    }
}
