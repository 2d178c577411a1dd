//! The store the service decides with, chosen by `--store`.
//!
//! [`Backend`] is one enum over every store the binary can use, and it
//! implements [`Store`] by delegating to the chosen one. The HTTP handlers
//! are written against the [`Store`] trait only, so a new store (Redis) is
//! one more variant here and one more arm in [`Backend::connect`]: nothing
//! else changes.

use std::fmt;
use std::str::FromStr;

use slidegate::{Decision, Hit, MemoryStore, Rule, Store};

/// A parsed `--store` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory`: the in-process store.
    Memory,
    /// `redis://…`, `rediss://…` or `redis+cluster://…`: the Redis store.
    Redis(String),
}

/// A `--store` value that names no known store.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown store {0:?}: expected `memory`, `redis://HOST:PORT`, `rediss://HOST:PORT` or `redis+cluster://H1:P1,H2:P2`"
)]
pub struct UnknownStore(String);

impl FromStr for StoreUrl {
    type Err = UnknownStore;

    fn from_str(s: &str) -> Result<StoreUrl, UnknownStore> {
        let trimmed = s.trim();
        if trimmed.eq_ignore_ascii_case("memory") || trimmed.eq_ignore_ascii_case("memory://") {
            return Ok(StoreUrl::Memory);
        }
        let scheme = trimmed
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("redis" | "rediss" | "redis+cluster") => Ok(StoreUrl::Redis(trimmed.to_owned())),
            _ => Err(UnknownStore(s.to_owned())),
        }
    }
}

impl fmt::Display for StoreUrl {
    /// The kind of store, never the URL itself (it may carry a password).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory"),
            StoreUrl::Redis(_) => f.write_str("redis"),
        }
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The store exists in the design but not in this build yet.
    #[error("the {0} store is not available in this version of slidegate; use --store memory")]
    Unsupported(&'static str),
}

/// Every store the service can decide with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Backend {
    /// The in-process store: fast, exact, per instance, lost on restart.
    Memory(MemoryStore),
}

impl Backend {
    /// Opens the store `url` names.
    pub async fn connect(url: &StoreUrl) -> Result<Backend, ConnectError> {
        match url {
            StoreUrl::Memory => Ok(Backend::Memory(MemoryStore::new())),
            StoreUrl::Redis(_) => Err(ConnectError::Unsupported("redis")),
        }
    }

    /// The kind of store, for logs and `/readyz`.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
        }
    }
}

impl Store for Backend {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        match self {
            Backend::Memory(store) => Store::acquire(store, key, rules, cost).await,
        }
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        match self {
            Backend::Memory(store) => Store::acquire_batch(store, hits).await,
        }
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        match self {
            Backend::Memory(store) => Store::reset(store, key).await,
        }
    }

    async fn ready(&self) -> slidegate::Result<()> {
        match self {
            Backend::Memory(store) => Store::ready(store).await,
        }
    }

    async fn peek(&self, key: &str, rules: &[Rule]) -> slidegate::Result<Decision> {
        match self {
            Backend::Memory(store) => Store::peek(store, key, rules).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse_by_scheme() {
        assert_eq!("memory".parse(), Ok(StoreUrl::Memory));
        assert_eq!(" MEMORY ".parse(), Ok(StoreUrl::Memory));
        assert_eq!(
            "redis://127.0.0.1:6379".parse(),
            Ok(StoreUrl::Redis("redis://127.0.0.1:6379".into()))
        );
        assert!(matches!(
            "redis+cluster://a:1,b:2".parse(),
            Ok(StoreUrl::Redis(_))
        ));
        for bad in ["", "mem", "http://x", "redis", "postgres://db"] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_store_url_never_prints_its_password() {
        let url: StoreUrl = "redis://user:secret@host:6379".parse().unwrap();
        assert_eq!(url.to_string(), "redis");
    }

    #[tokio::test]
    async fn redis_is_refused_clearly_until_it_exists() {
        let url: StoreUrl = "redis://127.0.0.1:6379".parse().unwrap();
        let error = Backend::connect(&url).await.unwrap_err();
        assert!(error.to_string().contains("--store memory"), "{error}");
    }
}
