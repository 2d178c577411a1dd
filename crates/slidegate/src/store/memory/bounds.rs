//! The bounds of a memory store, and the counts held against them: keys,
//! bytes, and rules per key.
//!
//! Bytes are counted where memory changes hands (a key inserted or
//! dropped, a rule added or replaced, a sliding log's buffer grown or
//! shrunk), never by walking the store. Growth asks first
//! ([`Bounds::try_charge`]), so the count never passes `max_bytes`.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, StoreBound};

/// The store's bounds and what is held against them.
#[derive(Debug)]
pub(crate) struct Bounds {
    keys: AtomicUsize,
    max_keys: usize,
    bytes: AtomicUsize,
    max_bytes: usize,
    max_rules: usize,
}

impl Bounds {
    pub(crate) fn new(max_keys: usize, max_bytes: usize, max_rules: usize) -> Bounds {
        Bounds {
            keys: AtomicUsize::new(0),
            max_keys,
            bytes: AtomicUsize::new(0),
            max_bytes,
            max_rules,
        }
    }

    /// Keys held.
    pub(crate) fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// Bytes held, as counted.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The most rules one key holds at once.
    pub(crate) fn max_rules(&self) -> usize {
        self.max_rules
    }

    /// Takes one key and `bytes` bytes for it, or neither.
    pub(crate) fn try_add_key(&self, bytes: usize) -> Result<(), Error> {
        self.keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |keys| {
                (keys < self.max_keys).then_some(keys + 1)
            })
            .map_err(|_| self.keys_error())?;
        if let Err(error) = self.try_charge(bytes) {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            return Err(error);
        }
        Ok(())
    }

    /// Gives back `count` keys and `bytes` bytes (keys swept or reset).
    pub(crate) fn remove_keys(&self, count: usize, bytes: usize) {
        self.keys.fetch_sub(count, Ordering::Relaxed);
        self.credit(bytes);
    }

    /// Takes `bytes` more, unless that would pass `max_bytes`.
    pub(crate) fn try_charge(&self, bytes: usize) -> Result<(), Error> {
        if bytes == 0 {
            return Ok(());
        }
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&sum| sum <= self.max_bytes)
            })
            .map(drop)
            .map_err(|_| self.bytes_error())
    }

    /// Gives back `bytes`.
    pub(crate) fn credit(&self, bytes: usize) {
        if bytes > 0 {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Brings the count in line with a state whose heap went from
    /// `before` to `after` bytes, `charged` of which were already taken
    /// by [`try_charge`](Self::try_charge).
    #[inline]
    pub(crate) fn settle(&self, before: usize, charged: usize, after: usize) {
        let counted = before + charged;
        if after < counted {
            self.credit(counted - after);
        } else if after > counted {
            // Only if an allocation gave more than it was asked for (the
            // standard collections give exactly that): counted all the
            // same, so the count stays the truth.
            self.bytes.fetch_add(after - counted, Ordering::Relaxed);
        }
    }

    pub(crate) fn keys_error(&self) -> Error {
        Error::StoreFull {
            bound: StoreBound::Keys(self.max_keys),
        }
    }

    pub(crate) fn bytes_error(&self) -> Error {
        Error::StoreFull {
            bound: StoreBound::Bytes(self.max_bytes),
        }
    }

    pub(crate) fn rules_error(&self) -> Error {
        Error::TooManyRules {
            max: self.max_rules,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_that_would_pass_the_bound_takes_nothing() {
        let bounds = Bounds::new(10, 100, 16);
        assert!(bounds.try_charge(60).is_ok());
        assert_eq!(bounds.try_charge(41), Err(bounds.bytes_error()));
        assert_eq!(bounds.bytes(), 60);
        assert!(bounds.try_charge(40).is_ok());
        assert_eq!(bounds.bytes(), 100);
        bounds.credit(100);
        assert_eq!(bounds.bytes(), 0);
    }

    #[test]
    fn a_key_takes_its_bytes_or_nothing() {
        let bounds = Bounds::new(2, 100, 16);
        assert!(bounds.try_add_key(50).is_ok());
        assert_eq!(bounds.try_add_key(51), Err(bounds.bytes_error()));
        assert_eq!((bounds.keys(), bounds.bytes()), (1, 50));
        assert!(bounds.try_add_key(50).is_ok());
        assert_eq!(bounds.try_add_key(0), Err(bounds.keys_error()));
        bounds.remove_keys(2, 100);
        assert_eq!((bounds.keys(), bounds.bytes()), (0, 0));
    }

    #[test]
    fn settling_counts_what_the_heap_holds() {
        let bounds = Bounds::new(1, 1000, 16);
        bounds.try_charge(100).unwrap();
        // 64 charged for a growth from 100 to 164: nothing to settle.
        bounds.try_charge(64).unwrap();
        bounds.settle(100, 64, 164);
        assert_eq!(bounds.bytes(), 164);
        // A shrink from 164 to 32.
        bounds.settle(164, 0, 32);
        assert_eq!(bounds.bytes(), 32);
    }
}
