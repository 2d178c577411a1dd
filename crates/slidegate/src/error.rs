//! The one error type of the library.

use std::time::Duration;

/// Everything that can go wrong in slidegate, as a type.
///
/// A *denial* is not an error: it is a [`Decision`](crate::Decision) with
/// `allowed == false`. Errors are bad input (the caller's fault), a full
/// store, or a store that failed (network, timeout, Redis error).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A rate such as `"100/1m"` could not be parsed or is out of range.
    #[error("invalid rate {input:?}: {reason}")]
    InvalidRate {
        /// The text that was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A limit of 0, or above [`Rate::MAX_LIMIT`](crate::Rate::MAX_LIMIT).
    #[error("limit must be between 1 and {max}, got {got}")]
    InvalidLimit {
        /// The limit that was given.
        got: u64,
        /// The largest limit slidegate accepts.
        max: u64,
    },
    /// A window shorter than 1 ms or longer than [`Rate::MAX_WINDOW`](crate::Rate::MAX_WINDOW).
    #[error("window must be between 1ms and {max:?}, got {got:?}")]
    InvalidWindow {
        /// The window that was given.
        got: Duration,
        /// The longest window slidegate accepts.
        max: Duration,
    },
    /// A rule's text (see [the rule grammar](crate::Rule#the-rule-grammar))
    /// that is not a rule.
    #[error("invalid rule {input:?}: {reason}")]
    InvalidRule {
        /// The text that was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A [burst](crate::Rule::with_burst) for another algorithm than
    /// `gcra`, out of range, or that would take too long to refill.
    #[error("invalid burst {got}: {reason}")]
    InvalidBurst {
        /// The burst that was given.
        got: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An algorithm name that is not one of the five.
    #[error(
        "unknown algorithm {0:?} (expected sliding_log, sliding_counter, fixed_window, gcra or concurrency)"
    )]
    UnknownAlgorithm(String),
    /// A request whose cost exceeds the limit of one of its rules: it can never pass.
    #[error("cost {cost} exceeds the limit {limit}: such a request can never pass")]
    CostExceedsLimit {
        /// The cost asked for.
        cost: u64,
        /// The smallest limit among the rules.
        limit: u64,
    },
    /// A lockout ([`Rule::block_for`](crate::Rule::block_for)) shorter
    /// than 1 ms or longer than [`Rate::MAX_WINDOW`](crate::Rate::MAX_WINDOW).
    #[error("block_for must be between 1ms and {max:?}, got {got:?}")]
    InvalidBlock {
        /// The block that was given.
        got: Duration,
        /// The longest block slidegate accepts.
        max: Duration,
    },
    /// A reservation (a wait) asked for a rule that
    /// [reports](crate::Rule::reporting) usage: reported usage has already
    /// happened and is recorded at once, never waited for.
    #[error("a rule that reports usage cannot wait: report with max_wait 0")]
    ReportCannotWait,
    /// A key that is empty, too long, or whose braces do not form a hash tag.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A decision without any rule.
    #[error("a decision needs at least one rule")]
    NoRules,
    /// The memory store is at one of its bounds (`max_keys` keys, or
    /// `max_bytes` bytes) and sweeping idle keys made no room: the request
    /// that needed more (a new key, a new rule on a key, a longer sliding
    /// log) is refused rather than dropping the state of a live key.
    #[error("the store is full ({bound}) and no idle key could be swept to make room")]
    StoreFull {
        /// The bound that was reached.
        bound: StoreBound,
    },
    /// A new rule on a key that already holds `max` rules, none of them
    /// idle (see [`MemoryStoreBuilder::max_rules_per_key`](crate::MemoryStoreBuilder::max_rules_per_key)).
    /// Bad input, not a store failure: the caller asks for more distinct
    /// rules on one key than the store keeps.
    #[error(
        "the key already holds {max} rules in use, the most a key may hold; a new rule is accepted once one of them is idle"
    )]
    TooManyRules {
        /// The most rules a key holds at once.
        max: usize,
    },
    /// A [`LimitTable`](crate::limits::LimitTable) already holds the rules
    /// of `max` keys: a new key is refused until one is removed.
    #[error("limits are set for {max} keys, the most the table holds; remove one first")]
    TooManyKeys {
        /// The most keys the table holds.
        max: usize,
    },
    /// An atomic decision over keys that live in different Redis Cluster
    /// slots, by a store that cannot make one. The Redis store of this
    /// crate decides such batches slot by slot with compensation instead.
    #[error(
        "keys {first:?} and {other:?} have different hash tags: an atomic decision needs one slot (put a common {{tag}} in the keys)"
    )]
    CrossSlot {
        /// The first key of the decision.
        first: String,
        /// A key that does not share its slot.
        other: String,
    },
    /// The store holds something at the key that is not slidegate's state
    /// of this version: another type (`WRONGTYPE`), another application's
    /// value, a manual `SET`. The key is refused (never decoded, never
    /// overwritten) until the value is removed; every other key is decided
    /// as usual. Not a store failure: no failure policy applies, and it
    /// never counts toward a circuit breaker.
    #[error("key {key:?}: {detail}; remove that value or use another key prefix")]
    KeyConflict {
        /// The key of the decision.
        key: String,
        /// What the store holds, and where (the Redis key).
        detail: String,
    },
    /// A call not made because the circuit breaker of the node that serves
    /// the key is open (one Redis Cluster master down): a store failure,
    /// decided by the failure policy. Seen only by stores that a
    /// [`ResilientStore`](crate::store::resilient::ResilientStore) wraps.
    #[error("the circuit of store node {node} is open: not called")]
    CircuitOpen {
        /// The node (`host:port`).
        node: String,
    },
    /// The store did not answer within its deadline.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store could not be reached or answered with an error.
    #[error("store error: {0}")]
    Store(String),
    /// The store is configured wrongly (bad URL, bad option).
    #[error("store configuration: {0}")]
    Config(String),
    /// A cost above 0 under a [concurrency](crate::Algorithm::Concurrency)
    /// rule outside a lease: places are taken by
    /// [`Store::reserve_lease`](crate::Store::reserve_lease), so that they
    /// can be given back.
    #[error(
        "a concurrency rule holds places by leases only: reserve a lease (lease_ms), or ask with cost 0 to see what is held"
    )]
    LeaseRequired,
    /// A lease that cannot be granted as asked (see the message): a lease
    /// time of 0 or longer than a rule's window, rules with options
    /// (reports, lockouts), or concurrency rules beside rules of a rate.
    #[error("invalid lease: {0}")]
    InvalidLease(String),
    /// No open, expired or settled lease has this id for this key: the
    /// id was never given out, is past the time its trace is kept, or
    /// belongs to another key (which is not told apart, so that ids
    /// reveal nothing of other keys).
    #[error("no lease with this id (for this key)")]
    LeaseNotFound,
    /// The lease is no longer open: its time ran out (it was charged in
    /// full), or it was already committed or released. Nothing changed.
    #[error(
        "the lease is no longer open: its time ran out (charged in full), or it was already committed or released"
    )]
    LeaseExpired,
    /// A commit of a [concurrency](crate::Algorithm::Concurrency) lease:
    /// it holds places, not a budget. Release it instead.
    #[error(
        "a concurrency lease holds places, not a budget: release it, there is no cost to commit"
    )]
    NotCommittable,
    /// The store holds as many open leases as it may (`max_leases`): one
    /// more is refused, nothing recorded. Leases stop counting once
    /// settled or expired.
    #[error("the store holds {max} open leases, its max_leases: one more is refused")]
    TooManyLeases {
        /// The most open leases the store holds.
        max: usize,
    },
    /// The store does not offer this operation (a store of another crate
    /// that kept the `Store` trait's default).
    #[error("this store does not offer {0}")]
    Unsupported(&'static str),
}

/// Which bound of a memory store was reached: see [`Error::StoreFull`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreBound {
    /// The store holds this many keys, its `max_keys`.
    Keys(usize),
    /// The store holds as many bytes as it may, its `max_bytes`, and the
    /// request needed more.
    Bytes(usize),
}

impl std::fmt::Display for StoreBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreBound::Keys(max) => write!(f, "{max} live keys, its max_keys"),
            StoreBound::Bytes(max) => write!(f, "{max} bytes, its max_bytes"),
        }
    }
}

impl Error {
    /// True when the error is the store's fault (unreachable, timed out,
    /// failed, full), as opposed to bad input from the caller or a
    /// [`KeyConflict`](Error::KeyConflict) on one key. A failure policy
    /// applies to these, never to the others.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_)
                | Error::Store(_)
                | Error::StoreFull { .. }
                | Error::CircuitOpen { .. }
        )
    }
}

/// Shorthand for `Result<T, slidegate::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
