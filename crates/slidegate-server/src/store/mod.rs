//! The store the service decides with, chosen by `--store`: what it is
//! opened with ([`StoreOptions`]), its URL ([`StoreUrl`]), and the
//! [`Backend`] that decides with it.

mod backend;
mod options;
mod reach;
mod url;

pub use backend::{Backend, ConnectError, MemoryBackend};
pub use options::{
    ClockMode, CoalesceMode, DEFAULT_DENY_CACHE_ENTRIES, DEFAULT_MAX_KEYS, DEFAULT_MAX_LEASES,
    DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_RULES_PER_KEY, DEFAULT_MAX_STORE_CALLS, DEFAULT_ON_ERROR,
    DEFAULT_TIMEOUT_MS, MAX_STORE_CALLS_HELP, StoreOptions,
};
pub use url::{StoreUrl, UnknownStore, redact_url, redis_nodes};
