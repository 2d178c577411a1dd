//! The memory store's book of leases: by id, what each holds and until
//! when, and the count of open ones against `max_leases`.
//!
//! Sharded by id (ids are random), each shard under its own lock, never
//! held while a key's shard is locked. Every record's bytes are counted in
//! the store's [`Bounds`]. A lease stops being open when settled or when
//! its time runs out; its record is kept until its retention ends (see
//! `store::lease::retention`), then forgotten. Both happen lazily, on the
//! next call that locks its shard, and on every shard before a lease is
//! refused for `max_leases`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::bounds::Bounds;
use super::stored_key::StoredKey;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::lease::LeaseKind;

/// A lease id's bytes.
pub(super) type LeaseId = [u8; 16];

const SHARDS: usize = 16;

/// What a lease holds, as settling it needs.
#[derive(Clone, Debug)]
pub(super) struct Record<K> {
    pub(super) key: K,
    pub(super) kind: LeaseKind,
    pub(super) cost: u64,
    /// Per rule, the mark of its admission (see `State::mark`).
    pub(super) parts: Vec<(Rule, u64)>,
    pub(super) expires: u64,
    retain_until: u64,
    open: bool,
    bytes: usize,
}

impl<K> Record<K> {
    /// A record of an open lease of `cost` on `key` (`key_bytes`, as the
    /// store counts keys) until `expires`, kept until `retain_until`.
    pub(super) fn new(
        key: K,
        key_bytes: usize,
        kind: LeaseKind,
        cost: u64,
        parts: Vec<(Rule, u64)>,
        expires: u64,
        retain_until: u64,
    ) -> Record<K> {
        let bytes = Self::bytes_for(key_bytes, parts.len());
        Record {
            key,
            kind,
            cost,
            parts,
            expires,
            retain_until,
            open: true,
            bytes,
        }
    }

    /// What a record of `rules` rules on a key of `key_bytes` costs: the
    /// record, its rules, its place in the map and in both time orders.
    pub(super) fn bytes_for(key_bytes: usize, rules: usize) -> usize {
        let entry = size_of::<LeaseId>() + size_of::<Record<K>>() + 1;
        let orders = 2 * (size_of::<(u64, LeaseId)>() + 16);
        entry + orders + key_bytes + rules * size_of::<(Rule, u64)>()
    }
}

struct Shard<K> {
    records: HashMap<LeaseId, Record<K>, foldhash::fast::RandomState>,
    /// Open leases by expiry.
    open: BTreeSet<(u64, LeaseId)>,
    /// Every record by the end of its retention.
    kept: BTreeSet<(u64, LeaseId)>,
}

impl<K> Default for Shard<K> {
    fn default() -> Self {
        Shard {
            records: HashMap::default(),
            open: BTreeSet::new(),
            kept: BTreeSet::new(),
        }
    }
}

impl<K> Shard<K> {
    /// Closes the leases whose time ran out at `now` and forgets the
    /// records past their retention; returns how many it closed.
    fn purge(&mut self, now: u64, bounds: &Bounds) -> usize {
        let mut closed = 0;
        while let Some(&(expires, id)) = self.open.first() {
            if expires > now {
                break;
            }
            self.open.pop_first();
            if let Some(record) = self.records.get_mut(&id) {
                record.open = false;
            }
            closed += 1;
        }
        while let Some(&(until, id)) = self.kept.first() {
            if until > now {
                break;
            }
            self.kept.pop_first();
            if let Some(record) = self.records.remove(&id) {
                bounds.credit(record.bytes);
            }
        }
        closed
    }
}

/// Every lease of one memory store.
pub(super) struct LeaseBook<K> {
    shards: Box<[Mutex<Shard<K>>]>,
    open: AtomicUsize,
    max_open: usize,
}

impl<K> LeaseBook<K> {
    /// A book of at most `max_open` open leases.
    pub(super) fn new(max_open: usize) -> LeaseBook<K> {
        LeaseBook {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            open: AtomicUsize::new(0),
            max_open,
        }
    }

    fn shard(&self, id: &LeaseId) -> &Mutex<Shard<K>> {
        &self.shards[usize::from(id[0]) % SHARDS]
    }

    /// Open leases, as counted (those whose time ran out count until the
    /// next call that purges their shard).
    pub(super) fn open_count(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Counts one more open lease, or refuses it once `max_open` are
    /// open, every shard purged first.
    pub(super) fn open_one(&self, now: u64, bounds: &Bounds) -> Result<()> {
        let take = || {
            self.open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.max_open).then_some(n + 1)
                })
                .is_ok()
        };
        if take() {
            return Ok(());
        }
        self.purge(now, bounds);
        if take() {
            return Ok(());
        }
        Err(Error::TooManyLeases { max: self.max_open })
    }

    /// Closes the leases whose time ran out and forgets the records past
    /// their retention, in every shard (the sweeper's round).
    pub(super) fn purge(&self, now: u64, bounds: &Bounds) {
        for shard in self.shards.iter() {
            let closed = shard.lock().purge(now, bounds);
            self.open.fetch_sub(closed, Ordering::AcqRel);
        }
    }

    /// Gives back a count taken by [`open_one`](Self::open_one) for a
    /// lease that was not granted.
    pub(super) fn unopen_one(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Files the record of a granted lease (its bytes already charged).
    pub(super) fn insert(&self, id: LeaseId, record: Record<K>, now: u64, bounds: &Bounds) {
        let mut shard = self.shard(&id).lock();
        let closed = shard.purge(now, bounds);
        self.open.fetch_sub(closed, Ordering::AcqRel);
        shard.open.insert((record.expires, id));
        shard.kept.insert((record.retain_until, id));
        shard.records.insert(id, record);
    }

    /// Closes the open lease `id` of `key` (any key when `None`) at
    /// `now`, and answers what it holds. Refused alike for an id unknown
    /// or of another key ([`Error::LeaseNotFound`]); a lease no longer
    /// open is [`Error::LeaseExpired`]; a lease `refuse` says no to stays
    /// open and answers `refuse`'s error.
    pub(super) fn close<Q>(
        &self,
        id: &LeaseId,
        key: Option<&Q>,
        now: u64,
        bounds: &Bounds,
        refuse: impl FnOnce(&Record<K>) -> Option<Error>,
    ) -> Result<Record<K>>
    where
        K: StoredKey<Q> + Clone,
        Q: ?Sized,
    {
        let mut shard = self.shard(id).lock();
        let closed = shard.purge(now, bounds);
        self.open.fetch_sub(closed, Ordering::AcqRel);
        let record = match shard.records.get_mut(id) {
            Some(record) if key.is_none_or(|key| record.key.matches(key)) => record,
            _ => return Err(Error::LeaseNotFound),
        };
        if !record.open {
            return Err(Error::LeaseExpired);
        }
        if let Some(error) = refuse(record) {
            return Err(error);
        }
        record.open = false;
        let closing = (record.expires, *id);
        let record = record.clone();
        shard.open.remove(&closing);
        self.open.fetch_sub(1, Ordering::AcqRel);
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(expires: u64) -> Record<String> {
        Record::new(
            "k".to_owned(),
            1,
            LeaseKind::Budget,
            1,
            Vec::new(),
            expires,
            expires + 100,
        )
    }

    #[test]
    fn open_leases_are_bounded_and_stop_counting_once_expired() {
        let bounds = Bounds::new(10, 1 << 20, 4);
        let book = LeaseBook::new(2);
        for (i, expires) in [10, 20].into_iter().enumerate() {
            book.open_one(0, &bounds).unwrap();
            bounds
                .try_charge(Record::<String>::bytes_for(1, 0))
                .unwrap();
            book.insert([i as u8; 16], record(expires), 0, &bounds);
        }
        assert_eq!(
            book.open_one(5, &bounds),
            Err(Error::TooManyLeases { max: 2 })
        );
        assert!(
            book.open_one(10, &bounds).is_ok(),
            "the first expired at 10"
        );
        let no_key: Option<&str> = None;
        assert_eq!(
            book.close(&[0; 16], no_key, 11, &bounds, |_| None).err(),
            Some(Error::LeaseExpired)
        );
        assert_eq!(
            book.close(&[1; 16], Some("other"), 11, &bounds, |_| None)
                .err(),
            Some(Error::LeaseNotFound),
            "another key's lease is not told apart from none"
        );
        assert!(
            book.close(&[1; 16], Some("k"), 11, &bounds, |_| None)
                .is_ok()
        );
        assert_eq!(
            book.close(&[1; 16], no_key, 12, &bounds, |_| None).err(),
            Some(Error::LeaseExpired),
            "settled once"
        );
        assert_eq!(
            book.close(&[0; 16], no_key, 110, &bounds, |_| None).err(),
            Some(Error::LeaseNotFound),
            "forgotten once its retention ended"
        );
    }
}
