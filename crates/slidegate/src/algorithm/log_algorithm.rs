//! The exact sliding log's algorithm (what it decides and why: see the
//! public `sliding_log` module), written once, against [`LogEntries`]:
//! where a log keeps its entries. `SlidingLog` keeps them in a buffer of
//! its own; the memory store keeps the first ones inside its per-key slot
//! and the rest in a compact ring. Both run these same steps ([`check`],
//! [`record`], [`is_idle`]).

use super::meter::until;
use crate::decision::Decision;
use crate::rate::Rate;

/// Where a sliding log keeps its entries: what the algorithm ([`check`],
/// [`record`], [`is_idle`]) reads and changes. Entries are `(time, cost)`
/// admissions in increasing time, each of cost at least 1.
pub(crate) trait LogEntries {
    /// True when the log holds no entry.
    fn is_empty(&self) -> bool;

    /// Time of the oldest entry (only asked when not empty).
    fn oldest_at(&self) -> u64;

    /// Time of the newest entry (only asked when not empty).
    fn newest_at(&self) -> u64;

    /// Sum of the costs of the entries held.
    fn usage(&self) -> u64;

    /// Drops the entries more than `window` old at `t` ([`expired`]),
    /// oldest first; only asked when the oldest one is.
    fn drop_expired(&mut self, window: u64, t: u64);

    /// Time of the first entry, oldest first, at which the costs add up
    /// to `need` (`2 <= need <= usage`).
    fn deciding_at(&self, need: u64) -> u64;

    /// The last denial kept, `(cost asked, time it passes)`, if the log
    /// keeps one: a log whose deciding entry is found without a search
    /// need not.
    fn cached_denial(&self) -> Option<(u64, u64)>;

    /// Keeps a denial for [`cached_denial`](Self::cached_denial), or not.
    fn cache_denial(&mut self, asked: u64, until: u64);

    /// Records `cost` at `t` (never before the newest entry), merged into
    /// the newest entry when at the same time; forgets a kept denial.
    fn push(&mut self, t: u64, cost: u64);

    /// Takes `cost` back from the entry at `at`, in place: that entry
    /// costs `cost` less (it goes once it costs nothing) and no other
    /// admission changes; forgets a kept denial. False, and nothing
    /// changed, when no entry is at `at` or it holds less than `cost`
    /// (expired, reset, or trimmed by a report).
    fn give_back(&mut self, at: u64, cost: u64) -> bool;
}

/// True when an entry admitted `at` no longer counts at `t`: it is more
/// than `window` old.
#[inline]
pub(crate) fn expired(at: u64, window: u64, t: u64) -> bool {
    at.saturating_add(window) < t
}

/// `now`, or the newest entry's time if the clock is behind it.
#[inline]
pub(crate) fn effective_now<L: LogEntries + ?Sized>(log: &L, now: u64) -> u64 {
    if log.is_empty() {
        now
    } else {
        log.newest_at().max(now)
    }
}

/// [`Meter::check`] of the sliding log, over any [`LogEntries`].
#[inline]
pub(crate) fn check<L: LogEntries + ?Sized>(
    log: &mut L,
    rate: Rate,
    now: u64,
    cost: u64,
) -> Decision {
    let (limit, window) = (rate.limit(), rate.window_micros());
    // Dropping expired entries never drops the newest unless it empties
    // the log: read it once.
    let newest = if log.is_empty() { now } else { log.newest_at() };
    let t = newest.max(now);
    // Entries count until they expire at `now`, even when newer ones lie
    // ahead of it (reservations, or a clock that stepped back): judged at
    // the newest time instead, a request admitted now would not see the
    // entries still inside its own window. Without entries ahead of `now`
    // this is the same time.
    if !log.is_empty() && expired(log.oldest_at(), window, now) {
        log.drop_expired(window, now);
    }
    let usage = log.usage();
    let asked = cost.max(1);
    let reset_now = if usage == 0 {
        0
    } else {
        until(newest + window + 1, now)
    };
    if usage + asked <= limit {
        return if cost == 0 {
            Decision::from_parts(true, limit, limit - usage, 0, reset_now)
        } else {
            Decision::from_parts(
                true,
                limit,
                limit - usage - cost,
                0,
                until(t + window + 1, now),
            )
        };
    }
    let retry_after = until(pass_time(log, window, now, asked, usage, limit), now);
    Decision::from_parts(
        false,
        limit,
        limit.saturating_sub(usage),
        retry_after,
        reset_now,
    )
}

/// When a request of `asked` passes, if nothing else is admitted: once
/// the entries up to the one at which the costs add up to what it needs
/// have expired (never, 0, when they never add up to it).
#[inline]
fn pass_time<L: LogEntries + ?Sized>(
    log: &mut L,
    window: u64,
    t: u64,
    asked: u64,
    usage: u64,
    limit: u64,
) -> u64 {
    let need = usage + asked - limit;
    if need > usage {
        return 0;
    }
    if need == 1 {
        // The oldest entry decides: what a cost of 1 at the limit asks.
        return log.oldest_at() + window + 1;
    }
    // The kept denial is exact: until its deciding entry expires, the same
    // cost cannot pass, and any admission forgets it.
    match log.cached_denial() {
        Some((cost, until)) if cost == asked && t < until => until,
        _ => {
            let until = log.deciding_at(need) + window + 1;
            log.cache_denial(asked, until);
            until
        }
    }
}

/// [`Meter::record`] of the sliding log, over any [`LogEntries`].
#[inline]
pub(crate) fn record<L: LogEntries + ?Sized>(log: &mut L, now: u64, cost: u64) {
    let t = effective_now(log, now);
    log.push(t, cost);
}

/// [`Meter::is_idle`] of the sliding log, over any [`LogEntries`].
#[inline]
pub(crate) fn is_idle<L: LogEntries + ?Sized>(log: &L, rate: Rate, now: u64) -> bool {
    log.is_empty() || expired(log.newest_at(), rate.window_micros(), now)
}
