//! Stores keep the state of every (key, rule) and apply the algorithms to it.
//!
//! [`MemoryStore`](memory::MemoryStore) keeps it in this process; the Redis
//! store (feature `redis`) keeps it in Redis, shared by every process that
//! uses the same Redis. Both obey the same contract, decision by decision.

pub use changes::{Change, ChangeListener};
pub use contract::Store;
pub use hit::Hit;
pub use key::{MAX_KEY_LEN, fit_key, hash_tag, key_digest, slot_key, validate_key};
pub use lease::{DEFAULT_MAX_LEASES, Lease, MIN_LEASE, Settled};
pub use reserve::{BatchReservation, MAX_WAIT, Reservation};

pub mod changes;
pub(crate) mod checks;
pub(crate) mod contract;
pub(crate) mod hit;
pub mod key;
pub mod lease;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
pub mod reserve;
pub mod resilient;
