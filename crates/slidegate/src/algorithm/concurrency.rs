//! The concurrency limit: at most `L` places held at once.
//!
//! A place is taken by a lease and held until the lease is released or
//! its time runs out: held while `now < expires`, free from `expires` on
//! (so a holder that crashed frees its place by itself). A request of `c`
//! places passes iff `held(now) + waiting ahead + c <= L`, where *waiting
//! ahead* is what the requests queued before it still wait for: a queue
//! served in arrival order, so that a request that does not wait never
//! passes ahead of one that does.
//!
//! The window of the rule is the longest lease it grants. A plain
//! [`record`](Meter::record) (which the stores never make: a cost above 0
//! outside a lease is refused) holds its places for a whole window.

use super::meter::{Meter, until};
use crate::decision::Decision;
use crate::rate::Rate;

/// One request waiting for places: a ticket, served in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Names the waiter: the store that queued it asks again with it.
    pub ticket: u64,
    /// The places it asks for.
    pub places: u64,
    /// When it stops waiting (µs): from then on it is dropped unseen.
    pub deadline: u64,
}

/// The state of one concurrency limit: the places held, by the time each
/// is given back, and the requests waiting for places.
#[derive(Clone, Debug, Default)]
pub struct Concurrency {
    /// `(expires, places)` in increasing expiry, one entry per expiry.
    held: Vec<(u64, u64)>,
    /// The sum of the places in `held`.
    total: u64,
    /// Waiters in arrival order.
    waiting: std::collections::VecDeque<Waiter>,
}

/// Where a waiter stands in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Not in the queue (never queued, served, or past its deadline).
    Absent,
    /// In the queue, with this many places asked by the waiters ahead.
    Queued {
        /// The places the waiters ahead of it ask for.
        ahead: u64,
    },
}

impl Concurrency {
    /// Places held at the time of the last step (expired ones are dropped
    /// by every step).
    pub fn held(&self) -> u64 {
        self.total
    }

    /// The waiters, in arrival order.
    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.waiting.iter()
    }

    /// Heap bytes held by the entries and the queue.
    pub fn heap_bytes(&self) -> usize {
        self.held.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.waiting.capacity() * std::mem::size_of::<Waiter>()
    }

    /// The bytes a new entry or waiter may allocate: a full buffer
    /// doubles (at least 4).
    pub(crate) fn growth(&self) -> usize {
        let grow = |len: usize, cap: usize, size: usize| {
            if len < cap {
                0
            } else {
                (cap.saturating_mul(2).max(4) - cap) * size
            }
        };
        grow(
            self.held.len(),
            self.held.capacity(),
            std::mem::size_of::<(u64, u64)>(),
        ) + grow(
            self.waiting.len(),
            self.waiting.capacity(),
            std::mem::size_of::<Waiter>(),
        )
    }

    /// Makes room for one more entry and one more waiter, as
    /// [`growth`](Self::growth) said.
    pub(crate) fn grow(&mut self) {
        if self.held.len() == self.held.capacity() {
            let more = self.held.capacity().max(4);
            self.held.reserve_exact(more);
        }
        if self.waiting.len() == self.waiting.capacity() {
            let more = self.waiting.capacity().max(4);
            self.waiting.reserve_exact(more);
        }
    }

    /// Drops the places whose time ran out at `now`, and the waiters past
    /// their deadline.
    pub fn expire(&mut self, now: u64) {
        let gone = self.held.partition_point(|&(expires, _)| expires <= now);
        if gone > 0 {
            let freed: u64 = self.held[..gone].iter().map(|&(_, n)| n).sum();
            self.held.drain(..gone);
            self.total -= freed;
        }
        if self.waiting.iter().any(|w| w.deadline <= now) {
            self.waiting.retain(|w| w.deadline > now);
        }
        // Memory follows what is held, not the peak.
        if self.held.capacity() > 64 && self.held.capacity() > 4 * self.held.len() {
            self.held.shrink_to(2 * self.held.len());
        }
    }

    /// Where `ticket` stands (see [`Turn`]).
    pub fn turn(&self, ticket: u64) -> Turn {
        let mut ahead = 0;
        for waiter in &self.waiting {
            if waiter.ticket == ticket {
                return Turn::Queued { ahead };
            }
            ahead += waiter.places;
        }
        Turn::Absent
    }

    /// What a request of `places` at `now` gets, recording nothing: with
    /// `ticket`, as the waiter of that ticket (the waiters ahead of it
    /// count), otherwise as a newcomer (every waiter counts). Drops what
    /// expired first. `places` 0 asks whether one would pass, and what
    /// is held.
    pub fn check_waiting(
        &mut self,
        rate: Rate,
        now: u64,
        places: u64,
        ticket: Option<u64>,
    ) -> Decision {
        self.expire(now);
        let queued = match ticket.map(|t| self.turn(t)) {
            Some(Turn::Queued { ahead }) => ahead,
            _ => self.waiting.iter().map(|w| w.places).sum(),
        };
        let limit = rate.limit();
        let reset_now = self
            .held
            .last()
            .map_or(0, |&(expires, _)| until(expires, now));
        let asked = places.max(1);
        let taken = self.total.saturating_add(queued);
        if taken.saturating_add(asked) <= limit {
            let remaining = limit - taken - places;
            return Decision::from_parts(true, limit, remaining, 0, reset_now);
        }
        // Passes at the earliest once enough held places are given back
        // (by their time; a release frees them sooner).
        let need = (taken + asked - limit).min(self.total);
        let mut freed = 0;
        let mut retry = 0;
        for &(expires, n) in &self.held {
            freed += n;
            if freed >= need {
                retry = until(expires, now);
                break;
            }
        }
        Decision::from_parts(false, limit, limit.saturating_sub(taken), retry, reset_now)
    }

    /// Holds `places` until `expires` (after a check at the same time
    /// allowed them).
    pub fn hold(&mut self, expires: u64, places: u64) {
        self.total += places;
        let at = self.held.partition_point(|&(e, _)| e < expires);
        match self.held.get_mut(at) {
            Some(entry) if entry.0 == expires => entry.1 += places,
            _ => self.held.insert(at, (expires, places)),
        }
    }

    /// Gives back `places` held until `expires`; false when they are no
    /// longer held (their time ran out: nothing changes).
    pub fn release(&mut self, expires: u64, places: u64) -> bool {
        let at = self.held.partition_point(|&(e, _)| e < expires);
        match self.held.get_mut(at) {
            Some(entry) if entry.0 == expires && entry.1 >= places => {
                entry.1 -= places;
                if entry.1 == 0 {
                    self.held.remove(at);
                }
                self.total -= places;
                true
            }
            _ => false,
        }
    }

    /// Queues a waiter (one not queued yet).
    pub fn enqueue(&mut self, waiter: Waiter) {
        self.waiting.push_back(waiter);
    }

    /// Takes `ticket` out of the queue (served, or given up).
    pub fn dequeue(&mut self, ticket: u64) {
        if let Some(at) = self.waiting.iter().position(|w| w.ticket == ticket) {
            self.waiting.remove(at);
        }
    }
}

impl Meter for Concurrency {
    fn check(&mut self, rate: Rate, now: u64, cost: u64) -> Decision {
        self.check_waiting(rate, now, cost, None)
    }

    /// Holds `cost` places for a whole window.
    fn record(&mut self, rate: Rate, now: u64, cost: u64) {
        self.hold(now.saturating_add(rate.window_micros()), cost);
    }

    fn is_idle(&self, _rate: Rate, now: u64) -> bool {
        self.held.last().is_none_or(|&(expires, _)| expires <= now)
            && self.waiting.iter().all(|w| w.deadline <= now)
    }

    /// As [`record`](Meter::record): places are held whatever the count.
    fn report(&mut self, rate: Rate, now: u64, cost: u64) {
        self.record(rate, now, cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rate(limit: u64) -> Rate {
        Rate::new(limit, Duration::from_secs(60)).unwrap()
    }

    #[test]
    fn places_are_held_until_released_or_their_time_runs_out() {
        let r = rate(2);
        let mut c = Concurrency::default();
        assert!(c.check(r, 0, 1).allowed());
        c.hold(1_000, 1);
        assert!(c.check(r, 0, 1).allowed());
        c.hold(500, 1);
        let full = c.check(r, 10, 1);
        assert!(!full.allowed());
        assert_eq!(
            full.retry_after(),
            Duration::from_micros(490),
            "the earliest expiry"
        );
        assert_eq!(full.reset_after(), Duration::from_micros(990));
        assert!(c.release(500, 1));
        assert!(!c.release(500, 1), "a second release frees nothing");
        assert_eq!(c.check(r, 10, 0).remaining(), 1);
        assert!(c.check(r, 1_000, 1).allowed(), "free from its expiry on");
        assert_eq!(c.held(), 0);
        assert!(c.is_idle(r, 1_000));
    }

    #[test]
    fn waiters_are_served_in_arrival_order() {
        let r = rate(1);
        let mut c = Concurrency::default();
        c.hold(100, 1);
        c.enqueue(Waiter {
            ticket: 7,
            places: 1,
            deadline: 1_000,
        });
        c.enqueue(Waiter {
            ticket: 8,
            places: 1,
            deadline: 1_000,
        });
        assert!(c.release(100, 1));
        assert!(!c.check(r, 50, 1).allowed(), "a newcomer waits behind them");
        assert!(
            !c.check_waiting(r, 50, 1, Some(8)).allowed(),
            "8 is behind 7"
        );
        assert!(c.check_waiting(r, 50, 1, Some(7)).allowed());
        c.dequeue(7);
        assert!(c.check_waiting(r, 50, 1, Some(8)).allowed());
        assert_eq!(c.turn(8), Turn::Queued { ahead: 0 });
        c.expire(1_000);
        assert_eq!(c.turn(8), Turn::Absent, "past its deadline");
    }
}
