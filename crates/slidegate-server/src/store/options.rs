//! What the store is opened with (`--store` and the flags beside it), and
//! the default of each.

use std::time::Duration;

use slidegate::store::resilient::FailurePolicy;

use super::url::StoreUrl;

/// `--on-store-error`'s default: an in-process store with the same rules.
pub const DEFAULT_ON_ERROR: FailurePolicy = FailurePolicy::Local;

/// `--store-timeout-ms`' default.
pub const DEFAULT_TIMEOUT_MS: u64 = 50;

/// `--max-leases`' default.
pub const DEFAULT_MAX_LEASES: usize = slidegate::store::DEFAULT_MAX_LEASES;

/// `--max-keys`' default.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// `--max-memory-bytes`' default: the library's.
pub const DEFAULT_MAX_MEMORY_BYTES: usize = slidegate::store::memory::DEFAULT_MAX_BYTES;

/// `--max-rules-per-key`' default.
pub const DEFAULT_MAX_RULES_PER_KEY: u16 = 16;

/// `--deny-cache-entries`' default.
pub const DEFAULT_DENY_CACHE_ENTRIES: usize = 100_000;

/// `--max-store-calls`' default.
pub const DEFAULT_MAX_STORE_CALLS: u32 = 1024;

/// What `--max-store-calls` does, in the words of `serve`, `check` and
/// `bench --help`: one sentence, so that help, README and behaviour
/// (`tests/store_calls.rs`) cannot drift apart again.
pub const MAX_STORE_CALLS_HELP: &str = "Calls to a Redis store in flight at once; a decision \
    beyond them waits for one to end, within --store-timeout-ms, then is answered by \
    --on-store-error (with `local`, by this instance's own memory store). Raise it for bursts \
    of more requests at once (waiting ones: `max_wait_ms`); lower it to bound what a slow \
    Redis can hold.";

/// Whose clock the Redis store uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Redis' own clock (`TIME` in the script): one clock for every instance.
    #[default]
    Server,
    /// This process' clock, for Redis deployments that forbid `TIME` in
    /// scripts; keep the instances' clocks in sync.
    Client,
}

/// Whether the Redis store coalesces concurrent decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CoalesceMode {
    /// Decisions that arrive while calls to the same Redis node are out
    /// wait and go together in one script call, each decided as alone.
    #[default]
    On,
    /// One script call per decision.
    Off,
}

/// How to open the store (see `slidegate serve --help` for each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Which store.
    pub url: StoreUrl,
    /// What answers when the store fails or is too slow.
    pub on_error: FailurePolicy,
    /// Deadline of one store call, in milliseconds.
    pub timeout_ms: u64,
    /// Whose clock decides time with the Redis store.
    pub clock: ClockMode,
    /// Whether the Redis store coalesces concurrent decisions.
    pub coalesce: CoalesceMode,
    /// How much longer than its window Redis keeps an idle key, in
    /// milliseconds; `None` for the store's default.
    pub expiry_margin_ms: Option<u64>,
    /// Most keys the memory store (and the local fallback) holds.
    pub max_keys: usize,
    /// Most bytes the memory store (and the local fallback) holds.
    pub max_memory_bytes: usize,
    /// Most distinct rules one key holds at once in the memory store.
    pub max_rules_per_key: u16,
    /// Bound of the local deny cache in entries (Redis store); 0 turns it
    /// off.
    pub deny_cache_entries: usize,
    /// Calls to a Redis store in flight at once.
    pub max_store_calls: u32,
    /// Most leases open at once in the store (`--max-leases`; for Redis,
    /// in the whole Redis, for every server that shares it).
    pub max_leases: usize,
}

impl StoreOptions {
    /// The deadline of one store call (at least 1 ms).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

impl Default for StoreOptions {
    /// The memory store, and each flag's default.
    fn default() -> Self {
        StoreOptions {
            url: StoreUrl::Memory,
            on_error: DEFAULT_ON_ERROR,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            clock: ClockMode::default(),
            coalesce: CoalesceMode::default(),
            expiry_margin_ms: None,
            max_keys: DEFAULT_MAX_KEYS,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_rules_per_key: DEFAULT_MAX_RULES_PER_KEY,
            deny_cache_entries: DEFAULT_DENY_CACHE_ENTRIES,
            max_store_calls: DEFAULT_MAX_STORE_CALLS,
            max_leases: DEFAULT_MAX_LEASES,
        }
    }
}
