//! # slidegate
//!
//! An exact sliding-window rate limiter: at most `L` requests in *any*
//! window of length `W`, per key, decided atomically, in process or shared
//! through Redis.
//!
//! ```
//! use slidegate::{MemoryStore, Rule};
//!
//! let store = MemoryStore::new();
//! let rule = Rule::parse("3/1s")?;               // 3 per second, sliding log
//! for _ in 0..3 {
//!     assert!(store.acquire("login:10.0.0.1", &[rule], 1)?.allowed());
//! }
//! let denied = store.acquire("login:10.0.0.1", &[rule], 1)?;
//! assert!(!denied.allowed());
//! println!("retry in {} ms", denied.retry_after_ms());
//! # Ok::<(), slidegate::Error>(())
//! ```
//!
//! - [`Rate`] and [`Rule`]: `"100/1m"` and the algorithm enforcing it.
//! - [`Decision`]: allowed, remaining, `retry_after`, `reset_after`.
//! - [`algorithm`]: the four algorithms as pure state machines.
//! - [`MemoryStore`]: the in-process store; the [`Store`] trait is what
//!   every store offers.
//! - `RedisStore` (feature `redis`): the same decisions, shared through
//!   Redis or Redis Cluster.
#![cfg_attr(
    feature = "tower",
    doc = "- [`middleware`]: [`RateLimitLayer`], the tower layer for axum routers, routes and tonic servers, with its own quick start."
)]
#![cfg_attr(
    feature = "http",
    doc = "- [`headers`]: the IETF `RateLimit` and `RateLimit-Policy` fields."
)]
//!
//! Features: `redis` (the Redis store), `tower` (the middleware), `http`
//! (the header formatting only).
//!
//! # Layers
//!
//! Each layer uses only the layers below it, and no module imports one
//! that imports it back: a module's `mod.rs` names its files and
//! re-exports them, and what its files share lives in a file of its own.
//!
//! 1. **Values**: [`rate`] (`Rate`, `Algorithm`, `Rule`), [`decision`],
//!    [`error`], [`clock`].
//! 2. **Algorithms**, pure: [`algorithm`] steps a state with a rate, a time
//!    and a cost; no I/O, no clock, no locks.
//! 3. **The store contract**: [`store`]'s `Store` trait, `Hit`, key rules
//!    and reservations, which every store and every caller speaks.
//! 4. **Stores**, which own the clocks, the state and the I/O:
//!    [`MemoryStore`] runs the algorithms on its sharded map;
//!    [`ResilientStore`](store::resilient::ResilientStore) wraps any store
//!    (its local fallback is a memory store); `RedisStore` sends the same
//!    algorithms, written in Lua, to Redis (its calls go through the
//!    resilient store's per-node breakers).
//! 5. **On top**: [`limits`] decides keys under rules set at run time,
//!    through any `Store`; `headers` formats a decision, `middleware`
//!    decides requests through any `Store`; nothing below knows of them.
//!
//! A new algorithm goes in layer 2 (and in the Redis script), a new store
//! in layer 4 behind the `Store` trait, a new front in layer 5.
#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say
// which one.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
pub mod clock;
pub mod decision;
pub mod error;
#[cfg(feature = "http")]
pub mod headers;
pub mod limits;
#[cfg(feature = "tower")]
pub mod middleware;
pub mod rate;
pub mod store;

pub use algorithm::Algorithm;
pub use decision::Decision;
pub use error::{Error, Result, StoreBound};
pub use rate::{Rate, Rule};
pub use store::memory::{MemoryStats, MemoryStore, MemoryStoreBuilder};
#[cfg(feature = "redis")]
pub use store::redis::{RedisStore, RedisStoreBuilder};
pub use store::{Hit, Store};

#[cfg(feature = "tower")]
pub use middleware::RateLimitLayer;
