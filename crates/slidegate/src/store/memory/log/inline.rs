//! A sliding log kept inside the key's slot: up to [`INLINE`] entries, each
//! a `u32` holding its time as a delta from the oldest entry, at the width
//! the window needs, and its cost in the bits left (see the `log` module).

use crate::algorithm::log_algorithm::{LogEntries, expired};
use crate::rate::Rate;

/// Entries an [`InlineLog`] holds.
pub(crate) const INLINE: usize = 6;

/// A ring left with at most this much usage (so at most as many entries)
/// moves back into the slot. Well below [`INLINE`], so that a key near
/// the boundary does not move at every decision.
pub(crate) const UNSPILL_AT: u32 = 3;

/// The fewest cost bits an inline entry may have: windows up to 2^28 µs
/// (4.4 minutes) keep their first entries inline, with costs up to 15
/// (more for shorter windows).
const MIN_COST_BITS: u32 = 4;

/// The bits an inline entry keeps for its cost under `rate`, or `None`
/// when the window leaves too few: the time takes as many bits as the
/// window needs, since every entry is at most one window newer than the
/// oldest.
#[inline]
pub(crate) fn inline_cost_bits(rate: Rate) -> Option<u32> {
    let time_bits = u64::BITS - rate.window_micros().leading_zeros();
    let cost_bits = u32::BITS.checked_sub(time_bits)?;
    (cost_bits >= MIN_COST_BITS).then_some(cost_bits)
}

/// Up to [`INLINE`] entries, in the slot. How many is kept by the slot
/// (one byte of it), which lends it to [`Inline`] with the rule's rate.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InlineLog {
    /// Time of the oldest entry, in two halves: 4-byte alignment lets the
    /// slot put its small fields next to its tag.
    base: [u32; 2],
    /// `delta << cost_bits | cost`, oldest first; 0 past the last (no
    /// entry costs 0), so that the usage is a sum of all of them.
    entries: [u32; INLINE],
}

/// An [`InlineLog`] with its length and the layout of its rule's entries.
pub(crate) struct Inline<'a> {
    len: &'a mut u8,
    log: &'a mut InlineLog,
    cost_bits: u32,
}

impl InlineLog {
    /// The admissions of a log of `len` entries whose rule has
    /// `cost_bits`, `(time, cost)`, oldest first.
    pub(crate) fn admissions(
        &self,
        len: u8,
        cost_bits: u32,
    ) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        let base = self.base();
        let max_cost = (1u32 << cost_bits) - 1;
        self.entries[..usize::from(len)]
            .iter()
            .map(move |&e| (base + u64::from(e >> cost_bits), u64::from(e & max_cost)))
    }

    /// Time of the newest of `len` entries (at least 1).
    pub(crate) fn newest_at(&self, len: u8, cost_bits: u32) -> u64 {
        let newest = self.entries[usize::from(len).saturating_sub(1)];
        self.base() + u64::from(newest >> cost_bits)
    }

    /// An inline log of `admissions` (at most [`INLINE`], costs that fit
    /// `cost_bits`, times within 2^(32 - cost_bits) of the first), and
    /// its length.
    pub(crate) fn from_admissions(
        admissions: impl Iterator<Item = (u64, u64)>,
        cost_bits: u32,
    ) -> (u8, InlineLog) {
        let (mut len, mut log) = (0, InlineLog::default());
        let mut inline = Inline::new(&mut len, &mut log, cost_bits);
        for (at, cost) in admissions {
            inline.push(at, cost);
        }
        (len, log)
    }

    fn base(&self) -> u64 {
        u64::from(self.base[0]) | (u64::from(self.base[1]) << 32)
    }

    fn set_base(&mut self, base: u64) {
        self.base = [base as u32, (base >> 32) as u32];
    }
}

impl<'a> Inline<'a> {
    /// The log of a slot whose rule has `cost_bits` ([`inline_cost_bits`]).
    #[inline]
    pub(crate) fn new(len: &'a mut u8, log: &'a mut InlineLog, cost_bits: u32) -> Inline<'a> {
        Inline {
            len,
            log,
            cost_bits,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        usize::from(*self.len)
    }

    #[inline]
    fn max_cost(&self) -> u64 {
        (1 << self.cost_bits) - 1
    }

    #[inline]
    fn cost(&self, entry: u32) -> u64 {
        u64::from(entry) & self.max_cost()
    }

    #[inline]
    fn delta(&self, entry: u32) -> u64 {
        u64::from(entry >> self.cost_bits)
    }

    /// True when [`push`](LogEntries::push) of `cost` at `t` (the time
    /// the check decided at) fits in the slot.
    #[inline]
    pub(crate) fn fits(&self, t: u64, cost: u64) -> bool {
        let len = self.len();
        if len > 0 && self.newest_at() == t {
            return self.cost(self.log.entries[len - 1]) + cost <= self.max_cost();
        }
        len < INLINE
            && cost <= self.max_cost()
            && (len == 0 || (t - self.log.base()) >> (u32::BITS - self.cost_bits) == 0)
    }
}

impl LogEntries for Inline<'_> {
    #[inline]
    fn is_empty(&self) -> bool {
        *self.len == 0
    }

    #[inline]
    fn oldest_at(&self) -> u64 {
        self.log.base()
    }

    #[inline]
    fn newest_at(&self) -> u64 {
        let newest = self.log.entries[self.len().saturating_sub(1)];
        self.log.base() + self.delta(newest)
    }

    #[inline]
    fn usage(&self) -> u64 {
        let max_cost = (1 << self.cost_bits) - 1;
        self.log
            .entries
            .iter()
            .map(|&e| e & max_cost)
            .sum::<u32>()
            .into()
    }

    fn drop_expired(&mut self, window: u64, t: u64) {
        let (base, len) = (self.log.base(), self.len());
        let gone = self.log.entries[..len]
            .iter()
            .take_while(|&&e| expired(base + self.delta(e), window, t))
            .count();
        self.log.entries.copy_within(gone..len, 0);
        self.log.entries[len - gone..len].fill(0);
        *self.len = (len - gone) as u8;
        if gone < len {
            // Times are kept from the oldest entry: move the base to it.
            let shift = self.delta(self.log.entries[0]);
            self.log.set_base(base + shift);
            let by = (shift as u32) << self.cost_bits;
            for entry in &mut self.log.entries[..len - gone] {
                *entry -= by;
            }
        }
    }

    fn deciding_at(&self, need: u64) -> u64 {
        let mut sum = 0;
        for &entry in &self.log.entries[..self.len()] {
            sum += self.cost(entry);
            if sum >= need {
                return self.log.base() + self.delta(entry);
            }
        }
        0
    }

    /// None kept: the deciding entry is one of a handful, found by a scan.
    #[inline]
    fn cached_denial(&self) -> Option<(u64, u64)> {
        None
    }

    #[inline]
    fn cache_denial(&mut self, _asked: u64, _until: u64) {}

    fn give_back(&mut self, at: u64, cost: u64) -> bool {
        let (base, len) = (self.log.base(), self.len());
        let Some(k) = self.log.entries[..len]
            .iter()
            .position(|&e| base + self.delta(e) == at)
        else {
            return false;
        };
        let held = self.cost(self.log.entries[k]);
        if held < cost {
            return false;
        }
        if held > cost {
            self.log.entries[k] -= cost as u32;
            return true;
        }
        self.log.entries.copy_within(k + 1..len, k);
        self.log.entries[len - 1] = 0;
        *self.len -= 1;
        if k == 0 && len > 1 {
            // Times are kept from the oldest entry: move the base to it.
            let shift = self.delta(self.log.entries[0]);
            self.log.set_base(base + shift);
            let by = (shift as u32) << self.cost_bits;
            for entry in &mut self.log.entries[..len - 1] {
                *entry -= by;
            }
        }
        true
    }

    /// Only when [`fits`](Inline::fits).
    #[inline]
    fn push(&mut self, t: u64, cost: u64) {
        let len = self.len();
        if len > 0 && self.newest_at() == t {
            self.log.entries[len - 1] += cost as u32;
            return;
        }
        if len == 0 {
            self.log.set_base(t);
        }
        let delta = (t - self.log.base()) as u32;
        self.log.entries[len] = (delta << self.cost_bits) | cost as u32;
        *self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::log_algorithm::{check, record};
    use crate::algorithm::meter::Meter;
    use crate::algorithm::sliding_log::SlidingLog;
    use std::time::Duration;

    fn rate(limit: u64, window_us: u64) -> Rate {
        Rate::new(limit, Duration::from_micros(window_us)).unwrap()
    }

    #[test]
    fn the_window_sets_the_width_of_an_inline_entry() {
        assert_eq!(inline_cost_bits(rate(100, 1_000_000)), Some(12));
        assert_eq!(inline_cost_bits(rate(100, 60_000_000)), Some(6));
        assert_eq!(inline_cost_bits(rate(100, 1 << 28)), None);
        assert_eq!(inline_cost_bits(rate(100, (1 << 28) - 1)), Some(4));
    }

    /// An inline log decides as the reference log does, for a few entries.
    #[test]
    fn an_inline_log_decides_like_the_sliding_log() {
        let r = rate(5, 1_000);
        let bits = inline_cost_bits(r).unwrap();
        let (mut len, mut inline) = (0, InlineLog::default());
        let mut reference = SlidingLog::default();
        let steps = [
            (0, 1),
            (10, 2),
            (10, 1),
            (500, 1),
            (999, 1),
            (1_001, 2),
            (1_011, 3),
            (2_600, 1),
        ];
        for (now, cost) in steps {
            let mut log = Inline::new(&mut len, &mut inline, bits);
            let got = check(&mut log, r, now, cost);
            assert_eq!(got, reference.check(r, now, cost), "at {now}");
            if got.allowed() {
                assert!(log.fits(now, cost));
                record(&mut log, now, cost);
                reference.record(r, now, cost);
            }
            assert!(
                inline.admissions(len, bits).eq(reference.entries()),
                "at {now}"
            );
        }
    }

    #[test]
    fn an_inline_log_gives_back_in_place() {
        let r = rate(10, 1_000);
        let bits = inline_cost_bits(r).unwrap();
        let (mut len, mut inline) =
            InlineLog::from_admissions([(5, 2), (9, 3), (20, 1)].into_iter(), bits);
        let mut log = Inline::new(&mut len, &mut inline, bits);
        assert!(!log.give_back(9, 4));
        assert!(log.give_back(9, 1));
        assert!(log.give_back(5, 2), "the oldest goes: the base moves");
        assert_eq!(log.oldest_at(), 9);
        assert_eq!(log.usage(), 3);
        assert!(inline.admissions(len, bits).eq([(9, 2), (20, 1)]));
    }

    #[test]
    fn an_inline_log_is_full_at_its_entries_or_its_cost_bits() {
        let r = rate(100, 1_000_000);
        let bits = inline_cost_bits(r).unwrap();
        let (mut len, mut inline) = (0, InlineLog::default());
        let mut log = Inline::new(&mut len, &mut inline, bits);
        for t in 0..INLINE as u64 {
            assert!(log.fits(t, 1));
            log.push(t, 1);
        }
        assert!(!log.fits(INLINE as u64, 1), "no seventh entry");
        assert!(
            log.fits(INLINE as u64 - 1, 4_094),
            "merging fits the cost bits"
        );
        assert!(!log.fits(INLINE as u64 - 1, 4_095), "but not past them");
    }
}
