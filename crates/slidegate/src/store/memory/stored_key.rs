//! How the memory store keeps a key it was given by reference: the stored
//! form need not be the lookup type's `ToOwned` (a `&str` is kept as a
//! [`CompactString`], inline in the map's entry when short).

use std::hash::Hash;
use std::sync::Arc;

use compact_str::CompactString;

/// A key type the memory store can hold, made from and compared with the
/// `Q` a caller looks it up by (`K` itself, or a `str` for string keys).
///
/// The store finds a key by hashing the `Q` it is given and comparing it
/// with the stored keys of that hash, and rehashes stored keys when its
/// table grows; so, as with [`Borrow`](std::borrow::Borrow), an
/// implementation must hash a key exactly as it hashes every `Q` it
/// [`matches`](Self::matches), and `from_lookup(q)` must match `q`. A
/// type that breaks this is not unsafe, but loses its keys' states.
///
/// Implemented for every `Clone + Hash + Eq` type looked up by itself
/// (`u64`, `IpAddr`, your own key types), for [`CompactString`],
/// `String`, `Box<str>` and `Arc<str>` looked up by `str`, for
/// [`CompactString`] looked up by `String`, and for `Vec<T>` looked up by
/// `[T]`. A type of your own looked up by another can implement it.
pub trait StoredKey<Q: ?Sized> {
    /// The stored form of `key`, made when the store first records it.
    fn from_lookup(key: &Q) -> Self;

    /// Whether this stored key is `key`.
    fn matches(&self, key: &Q) -> bool;

    /// The bytes `from_lookup(key)` holds beyond its own size, as the
    /// store's byte bound ([`max_bytes`]) counts them: asked before the
    /// key is made, so that a full store refuses a new key without
    /// allocating it. The default counts `key`'s own size.
    ///
    /// [`max_bytes`]: super::MemoryStoreBuilder::max_bytes
    fn held_bytes(key: &Q) -> usize {
        size_of_val(key)
    }
}

impl<K: Clone + Hash + Eq> StoredKey<K> for K {
    #[inline]
    fn from_lookup(key: &K) -> K {
        key.clone()
    }

    #[inline]
    fn matches(&self, key: &K) -> bool {
        self == key
    }
}

/// Text up to this long is held inline in a [`CompactString`], with no
/// heap allocation (the size of a `String`).
const INLINE_TEXT: usize = size_of::<String>();

/// The heap capacity [`CompactString`] gives text too long to be inline:
/// at least 32 bytes (its `MIN_HEAP_SIZE`); checked against the crate in
/// the tests.
const MIN_SPILLED_CAPACITY: usize = INLINE_TEXT + size_of::<usize>();

impl StoredKey<str> for CompactString {
    #[inline]
    fn from_lookup(key: &str) -> CompactString {
        CompactString::new(key)
    }

    #[inline]
    fn matches(&self, key: &str) -> bool {
        self.as_str() == key
    }

    fn held_bytes(key: &str) -> usize {
        match key.len() {
            len if len <= INLINE_TEXT => 0,
            len => len.max(MIN_SPILLED_CAPACITY),
        }
    }
}

/// A `&String` is looked up as the `str` it holds.
impl StoredKey<String> for CompactString {
    #[inline]
    fn from_lookup(key: &String) -> CompactString {
        <CompactString as StoredKey<str>>::from_lookup(key)
    }

    #[inline]
    fn matches(&self, key: &String) -> bool {
        <CompactString as StoredKey<str>>::matches(self, key)
    }

    fn held_bytes(key: &String) -> usize {
        <CompactString as StoredKey<str>>::held_bytes(key)
    }
}

impl StoredKey<str> for String {
    #[inline]
    fn from_lookup(key: &str) -> String {
        key.to_owned()
    }

    #[inline]
    fn matches(&self, key: &str) -> bool {
        self == key
    }
}

impl StoredKey<str> for Box<str> {
    #[inline]
    fn from_lookup(key: &str) -> Box<str> {
        key.into()
    }

    #[inline]
    fn matches(&self, key: &str) -> bool {
        &**self == key
    }
}

impl StoredKey<str> for Arc<str> {
    #[inline]
    fn from_lookup(key: &str) -> Arc<str> {
        key.into()
    }

    #[inline]
    fn matches(&self, key: &str) -> bool {
        &**self == key
    }

    /// The text and the two reference counts before it, padded to the
    /// counts' alignment.
    fn held_bytes(key: &str) -> usize {
        (key.len() + 2 * size_of::<usize>()).next_multiple_of(align_of::<usize>())
    }
}

impl<T: Clone + Hash + Eq> StoredKey<[T]> for Vec<T> {
    #[inline]
    fn from_lookup(key: &[T]) -> Vec<T> {
        key.to_vec()
    }

    #[inline]
    fn matches(&self, key: &[T]) -> bool {
        self.as_slice() == key
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn text(len: usize) -> String {
        "k".repeat(len)
    }

    #[test]
    fn a_compact_key_holds_the_bytes_it_is_counted_for() {
        for len in (0..=100).chain([1_000, 4_096]) {
            let key = text(len);
            let stored = <CompactString as StoredKey<str>>::from_lookup(&key);
            let held = if stored.is_heap_allocated() {
                stored.capacity()
            } else {
                0
            };
            assert_eq!(
                <CompactString as StoredKey<str>>::held_bytes(&key),
                held,
                "{len} bytes"
            );
            assert_eq!(stored.is_heap_allocated(), len > INLINE_TEXT, "{len} bytes");
        }
    }

    #[test]
    fn a_stored_key_hashes_as_what_it_is_looked_up_by() {
        let hasher = foldhash::fast::RandomState::default();
        for len in [0, 23, 24, 25, 1_000] {
            let key = text(len);
            let compact = <CompactString as StoredKey<str>>::from_lookup(&key);
            assert_eq!(hasher.hash_one(&compact), hasher.hash_one(key.as_str()));
            assert_eq!(hasher.hash_one(&compact), hasher.hash_one(&key));
            let boxed = <Box<str> as StoredKey<str>>::from_lookup(&key);
            assert_eq!(hasher.hash_one(&boxed), hasher.hash_one(key.as_str()));
            let shared = <Arc<str> as StoredKey<str>>::from_lookup(&key);
            assert_eq!(hasher.hash_one(&shared), hasher.hash_one(key.as_str()));
            assert!(compact.matches(key.as_str()) && compact.matches(&key));
            assert!(!compact.matches(format!("{key}x").as_str()));
        }
    }
}
