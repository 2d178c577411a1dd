//! A store that keeps answering when its backend does not.
//!
//! [`ResilientStore`] wraps any [`Store`](crate::store::Store) (typically the Redis store) with:
//!
//! - a **deadline** per call (`timeout`, default 50 ms): a stalled backend
//!   costs at most that much;
//! - a **circuit breaker**: after `failure_threshold` failures in a row no
//!   call is made at all; after a cool-down (200 ms, doubling to 1 s) one
//!   probe goes through, and the first success closes it again. A backend
//!   that is down is probed at least once a second, however long it was
//!   down, so decisions go back to it about a second after it returns. A
//!   probe whose caller leaves before its deadline gives its turn back (the
//!   next probe goes one cool-down later); one still unanswered at its
//!   deadline is a failure. On a Redis Cluster there is one breaker per
//!   master: a dead master degrades only the keys it serves
//!   ([`open_circuits`](ResilientStore::open_circuits) names them);
//! - a **bound on calls in flight** (`max_in_flight`, default 1024): a
//!   decision beyond it waits for a call to end, within its own deadline,
//!   and is answered by the policy if none ends in time;
//! - a **failure policy** for every decision the backend could not make:
//!   [`FailurePolicy::Deny`], [`FailurePolicy::Allow`], or
//!   [`FailurePolicy::Local`] (the default: an in-process store with the
//!   same rules, per instance). Such decisions say
//!   [`degraded`](crate::Decision::degraded);
//! - an exact **local deny cache** (on by default): once the backend denies
//!   a request with `retry_after = d`, the same key, rules and an equal or
//!   larger cost are denied locally for `d`, without a call. Batches use it
//!   too: a hit denied on its own counter is remembered, and a batch whose
//!   every hit is denied that way is answered without a call. A denial is
//!   held for `d` from when the request was sent, and the client told to
//!   wait `d` from when the answer came back: the cache never denies after
//!   the backend would admit, and never says to come back before the
//!   request can pass. A backend shared with other processes (Redis) tells
//!   the cache of their resets ([`Store::watch_changes`](crate::store::Store::watch_changes)): it drops what
//!   they touch as it hears of them, and answers nothing while it cannot
//!   hear them (see [`RedisStore`](crate::RedisStore)'s change feed for
//!   the bound). A denial is answered instead of the backend for at most
//!   [`deny_cache_max_age`](ResilientStoreBuilder::deny_cache_max_age)
//!   (default 10 s): the bound for changes no feed reports (a key deleted
//!   by hand). When the backend cannot be asked, its denials are answered
//!   until their wait ends, before the failure policy.
//!
//! Bad input (an invalid key, a cost above the limit) is an error as
//! always: no policy applies to it.
//!
//! ```
//! use slidegate::store::resilient::{FailurePolicy, ResilientStore};
//! use slidegate::{MemoryStore, Rule, Store};
//! # tokio_test_block(async {
//! let store = ResilientStore::builder(MemoryStore::new())
//!     .policy(FailurePolicy::Deny)
//!     .timeout(std::time::Duration::from_millis(20))
//!     .build();
//! let d = store.acquire("user:1", &[Rule::parse("10/s")?], 1).await?;
//! assert!(d.allowed() && !d.degraded());
//! # Ok::<(), slidegate::Error>(())
//! # });
//! # fn tokio_test_block<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

pub use builder::{DEFAULT_DENY_CACHE_MAX_AGE, DEFAULT_LOCAL_MAX_BYTES, ResilientStoreBuilder};
pub use policy::FailurePolicy;
pub use store::ResilientStore;

mod breaker;
mod builder;
mod deny_cache;
// Per-node circuits: only the Redis store has nodes.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod gate;
mod policy;
mod shared;
mod store;

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod tests;
