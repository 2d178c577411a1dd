//! A sliding log whose entries are in a ring, its summary in the key's slot
//! (see the `log` module): the oldest and newest times and the usage stay
//! in the slot, so that a denial of a full key still reads one line; the
//! entries go to a ring of `u64` (time delta and running total, 32 bits
//! each) that grows by doubling, never past the limit.

use crate::algorithm::log_algorithm::{LogEntries, expired};
use crate::rate::{Algorithm, Rule};

/// True when a ring can hold the log of `rule`: its times fit 32 bits
/// from a base moved forward now and then (windows up to about an hour),
/// its running totals 32 bits (limits up to `u32::MAX`).
pub(crate) fn ring_fits(rule: Rule) -> bool {
    rule.algorithm() == Algorithm::SlidingLog
        && rule.window_micros() <= RING_MAX_WINDOW
        && u32::try_from(rule.limit()).is_ok()
}

/// The longest window a ring takes: 2^29 µs short of 2^32, so that its
/// base moves (an O(n) pass) at most once per 9 minutes.
const RING_MAX_WINDOW: u64 = (1 << 32) - (1 << 29);

/// A log whose entries are in a ring; what a denial reads is in the slot.
/// The slot keeps the usage beside it (in the bytes next to its tag) and
/// lends it to [`Spilled`].
#[derive(Debug)]
pub(crate) struct SpilledLog {
    /// Entry times are kept from here; moved forward when they would not
    /// fit 32 bits.
    base: u64,
    /// Time of the oldest entry, from `base`.
    oldest: u32,
    /// Time of the newest entry, from `base`.
    newest: u32,
    /// [`HEADER`] words, then the entries: `delta << 32 | running total`
    /// (the total of the costs up to and including the entry, modulo
    /// 2^32; differences are exact, the usage being below 2^32).
    ring: Box<[u64]>,
}

/// The ring's first words: where it starts and how many entries it holds,
/// the key's bytes (kept for the byte count, as the slot has no room
/// left), and the last denial (cost asked, time it passes).
const HEADER: usize = 4;
const HEAD_LEN: usize = 0;
const KEY_BYTES: usize = 1;
const DENIED_COST: usize = 2;
const DENIED_UNTIL: usize = 3;

/// A [`SpilledLog`] with its usage.
pub(crate) struct Spilled<'a> {
    usage: &'a mut u32,
    log: &'a mut SpilledLog,
}

impl SpilledLog {
    /// An empty ring of `capacity` entries for a key of `key_bytes`.
    pub(crate) fn new(key_bytes: u32, capacity: usize) -> SpilledLog {
        let mut ring = vec![0; HEADER + capacity].into_boxed_slice();
        ring[KEY_BYTES] = u64::from(key_bytes);
        SpilledLog {
            base: 0,
            oldest: 0,
            newest: 0,
            ring,
        }
    }

    /// The bytes of a ring of `capacity` entries.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        (HEADER + capacity) * size_of::<u64>()
    }

    /// Heap bytes held (the ring).
    #[inline]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ring.len() * size_of::<u64>()
    }

    /// What the key costs besides its states ([`key_bytes`](super::slot::key_bytes)).
    pub(crate) fn key_bytes(&self) -> u32 {
        self.ring[KEY_BYTES] as u32
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.ring.len() - HEADER
    }

    #[inline]
    fn head(&self) -> usize {
        self.ring[HEAD_LEN] as u32 as usize
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        (self.ring[HEAD_LEN] >> 32) as usize
    }

    #[inline]
    fn set_head_len(&mut self, head: usize, len: usize) {
        self.ring[HEAD_LEN] = head as u64 | ((len as u64) << 32);
    }

    /// The `i`th entry from the oldest.
    #[inline]
    fn entry(&self, i: usize) -> u64 {
        let mut at = self.head() + i;
        if at >= self.capacity() {
            at -= self.capacity();
        }
        self.ring[HEADER + at]
    }

    #[inline]
    fn entry_mut(&mut self, i: usize) -> &mut u64 {
        let mut at = self.head() + i;
        if at >= self.capacity() {
            at -= self.capacity();
        }
        &mut self.ring[HEADER + at]
    }

    /// The heap bytes a push of a new entry would allocate: none unless
    /// the ring is full. It doubles, up to `limit` entries, which no log
    /// of that limit exceeds (every entry costs at least 1).
    #[inline]
    pub(crate) fn growth(&self, merges: bool, limit: u64) -> usize {
        if merges || self.len() < self.capacity() {
            return 0;
        }
        (self.grown_capacity(limit) - self.capacity()) * size_of::<u64>()
    }

    fn grown_capacity(&self, limit: u64) -> usize {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let capacity = self.capacity();
        capacity
            .saturating_mul(2)
            .max(4)
            .min(limit)
            .max(capacity + 1)
    }

    /// Grows the ring by [`growth`](Self::growth) bytes.
    pub(crate) fn grow(&mut self, limit: u64) {
        self.resize(self.grown_capacity(limit));
    }

    /// Moves the entries to a ring of `capacity` (at least their number).
    fn resize(&mut self, capacity: usize) {
        let len = self.len();
        let mut ring = vec![0; HEADER + capacity].into_boxed_slice();
        ring[..HEADER].copy_from_slice(&self.ring[..HEADER]);
        for i in 0..len {
            ring[HEADER + i] = self.entry(i);
        }
        self.ring = ring;
        self.set_head_len(0, len);
    }

    /// The running total just before the oldest entry of a ring of
    /// `usage` (not empty).
    #[inline]
    fn dropped_total(&self, usage: u32) -> u32 {
        (self.entry(self.len() - 1) as u32).wrapping_sub(usage)
    }

    /// The admissions of a ring of `usage`, `(time, cost)`, oldest first.
    pub(crate) fn admissions(&self, usage: u32) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        let len = self.len();
        let mut before = if len == 0 {
            0
        } else {
            self.dropped_total(usage)
        };
        (0..len).map(move |i| {
            let entry = self.entry(i);
            let cost = (entry as u32).wrapping_sub(before);
            before = entry as u32;
            (self.base + (entry >> 32), u64::from(cost))
        })
    }

    /// Time of the newest entry (meaningless when empty).
    pub(crate) fn newest_at(&self) -> u64 {
        self.base + u64::from(self.newest)
    }

    /// A ring of `capacity` holding `admissions` (in increasing time, each
    /// of cost at least 1, `capacity` at least their number), and its usage.
    pub(crate) fn from_admissions(
        admissions: impl Iterator<Item = (u64, u64)>,
        key_bytes: u32,
        capacity: usize,
    ) -> (u32, SpilledLog) {
        let (mut usage, mut log) = (0, SpilledLog::new(key_bytes, capacity));
        let mut spilled = Spilled::new(&mut usage, &mut log);
        for (at, cost) in admissions {
            spilled.push(at, cost);
        }
        (usage, log)
    }
}

impl<'a> Spilled<'a> {
    #[inline]
    pub(crate) fn new(usage: &'a mut u32, log: &'a mut SpilledLog) -> Spilled<'a> {
        Spilled { usage, log }
    }

    /// The running total just before the oldest entry.
    #[inline]
    fn dropped_total(&self) -> u32 {
        self.log.dropped_total(*self.usage)
    }

    /// Heap bytes held (the ring).
    #[inline]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.log.heap_bytes()
    }

    /// Moves the base to the oldest entry, so that times up to a window
    /// after it fit 32 bits again.
    #[cold]
    fn rebase(&mut self) {
        let shift = self.log.oldest;
        for i in 0..self.log.len() {
            *self.log.entry_mut(i) -= u64::from(shift) << 32;
        }
        self.log.base += u64::from(shift);
        self.log.newest -= shift;
        self.log.oldest = 0;
    }

    /// The ring shrinks once it is mostly empty: memory follows the
    /// entries inside the window, not the peak.
    fn shrink(&mut self) {
        let (len, capacity) = (self.log.len(), self.log.capacity());
        if capacity > 64 && capacity > 4 * len {
            self.log.resize((2 * len).max(16));
        }
    }
}

impl LogEntries for Spilled<'_> {
    #[inline]
    fn is_empty(&self) -> bool {
        *self.usage == 0
    }

    #[inline]
    fn oldest_at(&self) -> u64 {
        self.log.base + u64::from(self.log.oldest)
    }

    #[inline]
    fn newest_at(&self) -> u64 {
        self.log.base + u64::from(self.log.newest)
    }

    #[inline]
    fn usage(&self) -> u64 {
        u64::from(*self.usage)
    }

    fn drop_expired(&mut self, window: u64, t: u64) {
        let newest_total = self.log.entry(self.log.len() - 1) as u32;
        let (mut head, mut len) = (self.log.head(), self.log.len());
        let mut dropped = self.dropped_total();
        while len > 0 {
            let oldest = self.log.ring[HEADER + head];
            if !expired(self.log.base + (oldest >> 32), window, t) {
                self.log.oldest = (oldest >> 32) as u32;
                break;
            }
            dropped = oldest as u32;
            head += 1;
            if head == self.log.capacity() {
                head = 0;
            }
            len -= 1;
        }
        if len == 0 {
            head = 0;
        }
        self.log.set_head_len(head, len);
        *self.usage = newest_total.wrapping_sub(dropped);
        self.shrink();
    }

    fn deciding_at(&self, need: u64) -> u64 {
        let dropped = self.dropped_total();
        let (mut lo, mut hi) = (0, self.log.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if u64::from((self.log.entry(mid) as u32).wrapping_sub(dropped)) < need {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == self.log.len() {
            return 0;
        }
        self.log.base + (self.log.entry(lo) >> 32)
    }

    #[inline]
    fn cached_denial(&self) -> Option<(u64, u64)> {
        Some((self.log.ring[DENIED_COST], self.log.ring[DENIED_UNTIL]))
    }

    #[inline]
    fn cache_denial(&mut self, asked: u64, until: u64) {
        self.log.ring[DENIED_COST] = asked;
        self.log.ring[DENIED_UNTIL] = until;
    }

    fn give_back(&mut self, at: u64, cost: u64) -> bool {
        let len = self.log.len();
        if len == 0 || at < self.log.base {
            return false;
        }
        let time = |log: &SpilledLog, i: usize| log.base + (log.entry(i) >> 32);
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if time(self.log, mid) < at {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let k = lo;
        if k == len || time(self.log, k) != at {
            return false;
        }
        let before = match k {
            0 => self.dropped_total(),
            _ => self.log.entry(k - 1) as u32,
        };
        let held = u64::from((self.log.entry(k) as u32).wrapping_sub(before));
        if held < cost {
            return false;
        }
        self.log.ring[DENIED_COST] = 0;
        let cost32 = cost as u32;
        for i in k..len {
            let entry = self.log.entry_mut(i);
            *entry =
                (*entry & !u64::from(u32::MAX)) | u64::from((*entry as u32).wrapping_sub(cost32));
        }
        *self.usage -= cost32;
        if held == cost {
            for i in k..len - 1 {
                let next = self.log.entry(i + 1);
                *self.log.entry_mut(i) = next;
            }
            let head = self.log.head();
            self.log.set_head_len(head, len - 1);
            if len - 1 == 0 {
                self.log.set_head_len(0, 0);
            } else {
                self.log.oldest = (self.log.entry(0) >> 32) as u32;
                self.log.newest = (self.log.entry(len - 2) >> 32) as u32;
            }
        }
        true
    }

    /// Only when the ring has room ([`SpilledLog::growth`] is 0).
    #[inline]
    fn push(&mut self, t: u64, cost: u64) {
        self.log.ring[DENIED_COST] = 0;
        let len = self.log.len();
        let cost32 = cost as u32;
        if len > 0 && self.newest_at() == t {
            let newest = self.log.entry_mut(len - 1);
            *newest =
                (*newest & !u64::from(u32::MAX)) | u64::from((*newest as u32).wrapping_add(cost32));
            *self.usage += cost32;
            return;
        }
        let total = if len == 0 {
            self.log.base = t;
            self.log.oldest = 0;
            cost32
        } else {
            if t - self.log.base > u64::from(u32::MAX) {
                self.rebase();
            }
            (self.log.entry(len - 1) as u32).wrapping_add(cost32)
        };
        let delta = (t - self.log.base) as u32;
        let head = self.log.head();
        self.log.set_head_len(head, len + 1);
        *self.log.entry_mut(len) = (u64::from(delta) << 32) | u64::from(total);
        self.log.newest = delta;
        *self.usage += cost32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::log_algorithm::{check, record};
    use crate::algorithm::meter::Meter;
    use crate::algorithm::sliding_log::SlidingLog;
    use crate::rate::Rate;
    use std::time::Duration;

    fn rate(limit: u64, window_us: u64) -> Rate {
        Rate::new(limit, Duration::from_micros(window_us)).unwrap()
    }

    #[test]
    fn a_ring_decides_like_the_sliding_log_across_growth_and_rebase() {
        // A window of an hour: the base moves every few steps of 40 minutes.
        let r = rate(50, 3_600_000_000);
        let (mut usage, mut ring) = (0, SpilledLog::new(7, 0));
        let mut reference = SlidingLog::default();
        let mut now = 1 << 40;
        for step in 0..400u64 {
            now += [1, 0, 7, 2_400_000_000, 13][step as usize % 5];
            let cost = 1 + step % 3;
            let mut log = Spilled::new(&mut usage, &mut ring);
            let got = check(&mut log, r, now, cost);
            assert_eq!(got, reference.check(r, now, cost), "step {step}");
            if got.allowed() {
                let t = now.max(if log.is_empty() { 0 } else { log.newest_at() });
                let merges = !log.is_empty() && log.newest_at() == t;
                if ring.growth(merges, r.limit()) > 0 {
                    ring.grow(r.limit());
                }
                let mut log = Spilled::new(&mut usage, &mut ring);
                record(&mut log, now, cost);
                reference.record(r, now, cost);
            }
            assert!(
                ring.admissions(usage).eq(reference.entries()),
                "step {step}"
            );
        }
        assert_eq!(ring.key_bytes(), 7);
        assert!(ring.capacity() <= 50, "never more than the limit");
    }

    #[test]
    fn a_ring_gives_back_in_place() {
        let (mut usage, mut ring) =
            SpilledLog::from_admissions([(100, 3), (200, 4), (300, 3), (400, 1)].into_iter(), 0, 8);
        let mut log = Spilled::new(&mut usage, &mut ring);
        assert!(!log.give_back(250, 1));
        assert!(!log.give_back(200, 5));
        assert!(log.give_back(200, 4), "the entry goes");
        assert!(log.give_back(400, 1), "the newest goes");
        assert!(log.give_back(100, 2));
        assert_eq!(
            (log.oldest_at(), log.newest_at(), log.usage()),
            (100, 300, 4)
        );
        assert!(ring.admissions(usage).eq([(100, 1), (300, 3)]));
        let mut log = Spilled::new(&mut usage, &mut ring);
        assert!(log.give_back(100, 1));
        assert!(log.give_back(300, 3));
        assert!(log.is_empty());
        assert_eq!(ring.len(), 0);
    }

    #[test]
    fn a_ring_finds_the_deciding_entry_of_a_weighted_denial() {
        let r = rate(10, 1_000);
        let (mut usage, mut ring) =
            SpilledLog::from_admissions([(0, 3), (100, 4), (200, 3)].into_iter(), 0, 4);
        let mut log = Spilled::new(&mut usage, &mut ring);
        let d = check(&mut log, r, 300, 5);
        assert!(!d.allowed());
        assert_eq!(
            d.retry_after(),
            Duration::from_micros(100 + 1_000 + 1 - 300)
        );
        assert_eq!(log.cached_denial(), Some((5, 1_101)));
    }
}
