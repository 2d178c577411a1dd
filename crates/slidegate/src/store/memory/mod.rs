//! The in-process store: a sharded hash table from key to the states of
//! its rules.
//!
//! - **Hot path**: one hash lookup under the key's shard lock (four shards
//!   per thread the machine runs, at least one per 32,768 keys the store
//!   may hold: see [`MemoryStoreBuilder::shards`]), one algorithm step. No global lock: keys in different
//!   shards never wait for each other. Batches over several keys lock
//!   their shards in index order.
//! - **One cache line per key**: the key and its slot fill 64 bytes (for
//!   keys of up to 24 bytes, a `u64` or a [`CompactString`], whose text
//!   of up to 24 bytes is inline there too: the default key type, see
//!   [`StoredKey`]). The slot refers to
//!   its rule by an index into the shard's rule table, and keeps a sliding
//!   log's first entries inline, their times as deltas at the width the
//!   window needs; longer logs move their entries to a ring and keep their
//!   summary inline, so that a denial still reads one line.
//! - **Exactness**: a key is only ever removed under its shard's lock, and
//!   only when all its states are idle (equivalent to fresh ones). So
//!   sweeping never loses a hit.
//! - **Bounded memory**: idle keys are swept by a background thread every
//!   `sweep_interval` (1 s by default). Three bounds hold whatever callers
//!   send: at most `max_keys` keys (1,000,000 by default), at most
//!   `max_bytes` bytes (1 GiB by default: keys, states and sliding-log
//!   buffers, counted where they are allocated), at most
//!   `max_rules_per_key` rules per key (16 by default). A request that
//!   would need more than a bound allows is refused with a typed error and
//!   records nothing; see [`MemoryStoreBuilder::max_bytes`]. A sliding log
//!   holds at most one entry per distinct admission time inside its
//!   window, so at most `L`, and never more than the byte bound.
//! - **Leases** (`store::lease`) are taken and settled under the key's
//!   shard lock like any decision; their records sit in a book of their
//!   own, sharded by id, never locked while a key's shard is, and counted
//!   in `max_bytes` and against `max_leases`. A give-back changes the
//!   admission in place: a sliding log's entry at the reservation's time
//!   costs less, or goes.
//! - **Batches** are linear in their length: keys and (key, rule) pairs
//!   are indexed by hashing (by scanning, up to 16 hits), never by
//!   comparing every hit with every other.

pub use builder::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_RULES_PER_KEY, MAX_RULES_PER_KEY, MemoryStoreBuilder,
};
pub use compact_str::CompactString;
pub use store::{MemoryStats, MemoryStore};
pub use stored_key::StoredKey;

mod batch;
mod bounds;
mod builder;
mod inner;
mod lease_steps;
mod leased;
mod leases;
mod log;
mod map;
mod reserve;
mod rules;
mod slot;
mod states;
mod store;
mod stored_key;
mod sweep;
#[cfg(test)]
mod tests;
