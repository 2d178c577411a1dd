//! The Redis store: the same decisions as the memory store, shared by every
//! process that uses the same Redis or Redis Cluster.
//!
//! - **One atomic script per decision.** A constant Lua script (one file
//!   per algorithm plus a driver, joined at compile time) runs every rule
//!   of every hit of a call in one EVALSHA, all-or-nothing. Redis caches
//!   the script once; after a restart or failover (`NOSCRIPT`) it is loaded
//!   again and the call retried, and only then: never after a timeout, when
//!   the first call may have been applied.
//! - **One clock.** By default the script reads Redis' `TIME`, so app
//!   servers with skewed clocks still share one window. With
//!   [`RedisStoreBuilder::client_clock`] the caller's time is sent instead
//!   (for services that forbid `TIME` in scripts).
//! - **Keys** are `prefix:v2:{key}:rule` (`slidegate:v2:{login:10.0.0.1}:100/1m`,
//!   plus `:gcra` etc. for the other algorithms); a key that carries its own
//!   hash tag is kept as is, after a `t:` (`slidegate:v2:t:user:{42}:login:100/1m`),
//!   so `X` and `{X}` are two keys here as in the memory store. `v2` is the
//!   version of the stored format: old and new formats never meet. All
//!   rules of one key share a cluster slot.
//! - **All or nothing across slots.** On a cluster, a batch over keys in
//!   several slots is decided slot by slot, in slot order, stopping at the
//!   first slot that denies, and the slots that recorded are undone (in a
//!   task of their own, so even when the caller's future is dropped) when
//!   a later one denies or fails: a denied batch leaves no charge, and
//!   concurrent decisions may be denied meanwhile (never admitted) by a
//!   charge about to be undone. `cross_slot.rs` has the details and, per
//!   algorithm, why an undo never lets more through.
//! - **One breaker per master.** Inside a
//!   [`ResilientStore`](crate::store::resilient::ResilientStore), each call
//!   goes through the circuit breaker of the master that serves its slot
//!   (from `CLUSTER SLOTS`, fetched again every second while in use and
//!   after failures): a dead master degrades only its own keys. The store
//!   is ready while some master answers.
//! - **Redis Sentinel.** With a `redis+sentinel://` URL, calls go to the
//!   master a majority of the sentinels name (once it answers `ROLE` as
//!   one), asked again once a second while in use and soon after a failed
//!   call; a promoted replica gets a lane and a breaker of its own (see
//!   `sentinel.rs` and `quorum.rs`).
//! - **Compact state, little Redis CPU.** A sliding log is one binary
//!   STRING: fixed-size records (time and running total, each truncated to
//!   the few bytes the rule's window and limit need: 4 bytes at `100/1s`)
//!   followed by a header, so a decision reads the header and the newest
//!   records with one `GETRANGE`, and an admission writes the new record
//!   and the header with one `SETRANGE`; expired records are dropped in the
//!   header and their bytes reclaimed by an occasional compaction. See
//!   `sliding_log.lua` for the layout and why it decodes exactly. The other
//!   algorithms keep one short STRING. Keys expire when the state becomes
//!   idle (a busy sliding log up to half a window later, so that its expiry
//!   is not moved on every admission); a probe never creates a key.
//! - **A change feed.** A reset publishes the key on a channel of the
//!   prefix (`slidegate:v2:changes`), and every store a deny cache
//!   watches ([`ResilientStore`](crate::store::resilient::ResilientStore))
//!   subscribes to it and pings it: a reset reaches the deny cache of
//!   every process within [`CHANGE_FEED_TRUST`] (1 s), or that cache
//!   answers nothing (see `changes.rs`).
//! - **Errors** are [`Error::Timeout`](crate::Error::Timeout) (the per-call deadline passed),
//!   [`Error::Store`](crate::Error::Store) (connection or Redis failure), [`Error::Config`](crate::Error::Config)
//!   (bad URL or option) and [`Error::KeyConflict`](crate::Error::KeyConflict) (the Redis key of one
//!   decision holds a value slidegate did not write: another type, or a
//!   string without this format's mark; that key is refused, never read
//!   as state or overwritten); callers never see Redis' own error types.

pub use builder::{
    DEFAULT_CLIENT_CLOCK_EXPIRY_MARGIN, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRY_MARGIN,
    DEFAULT_PREFIX, DEFAULT_TIMEOUT, RedisStoreBuilder,
};
pub use calls::Coalesce;
pub use changes::CHANGE_FEED_TRUST;
pub use limits::{LOG_LEN, LimitKind, LimitWrite, LimitsSync, SharedLimit, Written};
pub use store::RedisStore;

mod builder;
mod calls;
mod changes;
mod coalesce;
mod codes;
mod cross_slot;
mod errors;
mod inner;
mod keys;
mod leases;
mod limits;
mod plan;
mod quorum;
mod script;
mod sentinel;
mod store;
mod topology;
mod turns;
mod url;
