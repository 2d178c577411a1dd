//! The store's map: shards, each a hash table of keys and their slots and
//! the rules those slots refer to, behind one lock.
//!
//! A table entry is the key and its [`Slot`] aligned to a cache line: with
//! a key of up to 24 bytes (a `u64`, a `String`, a `CompactString`), a
//! decision reads the table's control bytes and one line, the one its key
//! is compared in (and, for a string key, its text: inline in that line
//! for a `CompactString` of up to 24 bytes, on the heap otherwise).
//! The shard's lock is the slot's lock: a decision holds it from the
//! lookup to the record, batches take their keys' shards in index order
//! (so they cannot deadlock), and a sweep takes one shard at a time.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::rules::RuleTable;
use super::slot::Slot;
use super::stored_key::StoredKey;

type Hasher = foldhash::fast::RandomState;

/// One key and its state, on a cache line of its own.
#[repr(C, align(64))]
pub(crate) struct Entry<K> {
    pub(crate) key: K,
    pub(crate) slot: Slot,
}

/// What one lock guards.
pub(crate) struct Shard<K> {
    pub(crate) table: HashTable<Entry<K>>,
    pub(crate) rules: RuleTable,
}

/// A shard's lock, alone on its cache lines, so that threads on different
/// shards do not slow each other down.
#[repr(align(128))]
struct Padded<K>(Mutex<Shard<K>>);

const _: () = assert!(
    size_of::<Padded<u64>>() == 128,
    "a shard's lock, table and first rules fill two cache lines"
);

pub(crate) struct Map<K> {
    shards: Box<[Padded<K>]>,
    hasher: Hasher,
    /// `64 - log2(shards)`.
    shift: u32,
}

impl<K: Hash + Eq> Map<K> {
    /// A map of `shards` shards (a power of two, at least 2).
    pub(crate) fn new(shards: usize) -> Map<K> {
        Map {
            shards: (0..shards)
                .map(|_| {
                    Padded(Mutex::new(Shard {
                        table: HashTable::new(),
                        rules: RuleTable::default(),
                    }))
                })
                .collect(),
            hasher: Hasher::default(),
            shift: u64::BITS - shards.trailing_zeros(),
        }
    }

    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of `hash`: bits below the 7 the table compares in its
    /// control bytes, so that keys of one shard still differ there.
    #[inline]
    pub(crate) fn shard_of(&self, hash: u64) -> usize {
        ((hash << 7) >> self.shift) as usize
    }

    #[inline]
    pub(crate) fn lock(&self, shard: usize) -> MutexGuard<'_, Shard<K>> {
        self.shards[shard].0.lock()
    }

    pub(crate) fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The key's entry in `shard`, if held.
    #[inline]
    pub(crate) fn find<'s, Q>(
        table: &'s mut HashTable<Entry<K>>,
        hash: u64,
        key: &Q,
    ) -> Option<&'s mut Entry<K>>
    where
        K: StoredKey<Q>,
        Q: ?Sized,
    {
        table.find_mut(hash, |e| e.key.matches(key))
    }

    /// Inserts a key the table does not hold.
    pub(crate) fn insert<'s>(
        &self,
        table: &'s mut HashTable<Entry<K>>,
        hash: u64,
        key: K,
        slot: Slot,
    ) -> &'s mut Entry<K> {
        table
            .insert_unique(hash, Entry { key, slot }, |e| self.hasher.hash_one(&e.key))
            .into_mut()
    }

    /// Gives back table room once it is mostly empty, and all of it once
    /// empty (so that a store whose keys all went idle is back to its
    /// shards alone, whatever the keys' spread over them was).
    pub(crate) fn shrink(&self, table: &mut HashTable<Entry<K>>) {
        let empty = table.is_empty() && table.capacity() > 0;
        if empty || table.capacity() > 4 * table.len() + 64 {
            table.shrink_to_fit(|e| self.hasher.hash_one(&e.key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(map: &Map<u64>, keys: u64) -> HashTable<Entry<u64>> {
        let mut table = HashTable::new();
        for key in 0..keys {
            map.insert(&mut table, map.hash(&key), key, Slot::empty(8));
        }
        table
    }

    #[test]
    fn an_emptied_table_gives_back_all_its_room_however_small() {
        let map: Map<u64> = Map::new(2);
        let mut table = table_with(&map, 10);
        table.clear();
        map.shrink(&mut table);
        assert_eq!(table.capacity(), 0);
    }

    #[test]
    fn a_table_keeps_its_room_while_mostly_used() {
        let map: Map<u64> = Map::new(2);
        let mut table = table_with(&map, 100);
        let capacity = table.capacity();
        map.shrink(&mut table);
        assert_eq!(table.capacity(), capacity);
    }

    #[test]
    fn a_mostly_empty_table_shrinks_to_what_it_holds() {
        let map: Map<u64> = Map::new(2);
        let mut table = table_with(&map, 1_000);
        let capacity = table.capacity();
        table.retain(|e| e.key < 10);
        map.shrink(&mut table);
        assert!(table.capacity() < capacity / 8, "{}", table.capacity());
        assert!((0..10).all(|k| Map::find(&mut table, map.hash(&k), &k).is_some()));
    }
}
