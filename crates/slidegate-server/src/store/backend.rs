//! The store the service decides with, chosen by `--store`.
//!
//! [`Backend`] is one enum over every store the binary can use, and it
//! implements [`Store`] by delegating to the chosen one. The HTTP handlers
//! are written against the [`Store`] trait only, so a new store (Redis) is
//! one more variant here and one more arm in [`Backend::connect`]: nothing
//! else changes.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use std::time::Duration;

use slidegate::clock::SystemClock;
use slidegate::store::redis::{Coalesce, RedisStore};
use slidegate::store::resilient::{FailurePolicy, ResilientStore};
use slidegate::{Decision, Error, Hit, MemoryStore, Rule, Store};

use crate::cli::{ClockMode, CoalesceMode, StoreArgs};
use crate::telemetry::store_calls::Instrumented;

/// A parsed `--store` value.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory`: the in-process store.
    Memory,
    /// `redis://…`, `rediss://…`, `redis+cluster://…` or
    /// `redis+sentinel://…`: the Redis store.
    Redis(String),
}

impl fmt::Debug for StoreUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("Memory"),
            StoreUrl::Redis(url) => f.debug_tuple("Redis").field(&redact_url(url)).finish(),
        }
    }
}

/// A `--store` value that names no known store (shown without its password).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown store {:?}: expected `memory`, `redis://HOST:PORT`, `rediss://HOST:PORT`, `redis+cluster://H1:P1,H2:P2` or `redis+sentinel://H1:P1,H2:P2/MASTER_NAME`",
    redact_url(.0)
)]
pub struct UnknownStore(String);

/// `url` fit to be shown: whatever follows the user name in its user info
/// (`user:password@`) becomes `***`, as does its query string (Redis URLs
/// may carry `?pass=`). Works on mistyped URLs too: the password is
/// whatever stands between the first `:` after the scheme and the last `@`.
///
/// `redis://app:s3cret@10.0.0.1:6379/0` → `redis://app:***@10.0.0.1:6379/0`
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let (url, query) = match url.split_once('?') {
        Some((url, _)) => (url, "?***"),
        None => (url, ""),
    };
    let Some((before, host)) = url.rsplit_once('@') else {
        return match query {
            "" => Cow::Borrowed(url),
            query => Cow::Owned(format!("{url}{query}")),
        };
    };
    let (scheme, user_info) = match before.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, before),
    };
    let user = match user_info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    Cow::Owned(match scheme {
        Some(scheme) => format!("{scheme}://{user}@{host}{query}"),
        None => format!("{user}@{host}{query}"),
    })
}

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
            Some(
                "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
                | "rediss+sentinel",
            ) => Ok(StoreUrl::Redis(trimmed.to_owned())),
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
    /// The Redis URL or options are wrong (an unreachable Redis is not an
    /// error: the service starts, degraded, and follows it when it answers).
    #[error("redis store: {0}")]
    Redis(Error),
}

/// Every store the service can decide with.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Backend {
    /// The in-process store: fast, exact, per instance, lost on restart.
    Memory(MemoryBackend),
    /// Redis, Redis Cluster or a master found through Redis Sentinel,
    /// shared by every instance, behind the failure
    /// policy, the deadline, the circuit breaker and the local deny cache.
    Redis(ResilientStore<Instrumented<RedisStore>>),
}

/// The memory store, and what to answer when it is full (of keys or of
/// bytes). A key with too many rules is not "full": it is bad input, an
/// error the API answers with 400.
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    store: Instrumented<MemoryStore>,
    /// Decides requests for new keys when the store is full: a full memory
    /// store has no local fallback but itself, so `local` denies.
    when_full: FailurePolicy,
}

impl MemoryBackend {
    fn when_full(&self, limit: u64) -> Decision {
        let allow = self.when_full == FailurePolicy::Allow;
        metrics::counter!("slidegate_policy_decisions_total", "policy" => self.when_full.to_string()).increment(1);
        Decision::by_policy(allow, limit, std::time::Duration::from_secs(1))
    }
}

impl Backend {
    /// Opens the store the flags name.
    pub async fn connect(args: &StoreArgs) -> Result<Backend, ConnectError> {
        match &args.url {
            StoreUrl::Memory => Ok(Backend::Memory(MemoryBackend {
                store: Instrumented::untimed(
                    MemoryStore::builder()
                        .max_keys(args.max_keys)
                        .max_bytes(args.max_memory_bytes)
                        .max_rules_per_key(usize::from(args.max_rules_per_key))
                        .build(),
                    "memory",
                ),
                when_full: args.on_error,
            })),
            StoreUrl::Redis(url) => {
                let timeout = Duration::from_millis(args.timeout_ms.max(1));
                let builder = RedisStore::builder(url.clone()).timeout(timeout).coalesce(
                    match args.coalesce {
                        CoalesceMode::On => Coalesce::on(),
                        CoalesceMode::Off => Coalesce::off(),
                    },
                );
                let builder = match args.clock {
                    ClockMode::Server => builder.server_clock(),
                    ClockMode::Client => builder.client_clock(SystemClock),
                };
                let builder = match args.expiry_margin_ms {
                    Some(ms) => builder.expiry_margin(Duration::from_millis(ms)),
                    None => builder,
                };
                let redis = builder.build_lazy().map_err(ConnectError::Redis)?;
                crate::spans::set_store_node(redis_nodes(url));
                let kind = if redis.is_cluster() {
                    "redis_cluster"
                } else {
                    "redis"
                };
                let store = ResilientStore::builder(Instrumented::new(redis, kind))
                    .policy(args.on_error)
                    .timeout(timeout)
                    .local_max_keys(args.max_keys)
                    .local_max_bytes(args.max_memory_bytes)
                    .deny_cache((args.deny_cache_entries > 0).then_some(args.deny_cache_entries))
                    .max_in_flight(args.max_store_calls as usize)
                    .build();
                Ok(Backend::Redis(store))
            }
        }
    }

    /// The store's kind and breakers, for the status page.
    pub fn status(&self) -> crate::telemetry::stats::StoreInfo {
        use crate::telemetry::stats::{BreakerState, StoreInfo};
        match self {
            Backend::Memory(memory) => StoreInfo {
                kind: self.kind().to_owned(),
                policy: Some(memory.when_full.to_string()),
                breakers: Vec::new(),
                deny_cache_entries: 0,
            },
            Backend::Redis(store) => {
                let open_nodes = store.open_circuits();
                // The whole store's breaker is open when the store is
                // degraded with no node's open.
                let mut breakers = vec![BreakerState {
                    node: "store".to_owned(),
                    open: store.is_degraded() && open_nodes.is_empty(),
                }];
                breakers.extend(
                    open_nodes
                        .into_iter()
                        .map(|node| BreakerState { node, open: true }),
                );
                StoreInfo {
                    kind: self.kind().to_owned(),
                    policy: Some(store.policy().to_string()),
                    breakers,
                    deny_cache_entries: store.deny_cache_len(),
                }
            }
        }
    }

    /// The kind of store, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Redis(store) if store.inner().inner().is_cluster() => "redis_cluster",
            Backend::Redis(_) => "redis",
        }
    }
}

/// The `host:port` list of a Redis URL, without user, password, database
/// or query: what the store call spans name as `node`.
fn redis_nodes(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[..end].to_owned()
}

fn min_limit(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::limit).min().unwrap_or(0)
}

impl Store for Backend {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        match self {
            Backend::Memory(m) => {
                let call = Store::acquire(&m.store, key, rules, cost);
                match crate::spans::store_call("memory", "acquire", call).await {
                    Err(Error::StoreFull { .. }) => Ok(m.when_full(min_limit(rules))),
                    other => other,
                }
            }
            Backend::Redis(store) => {
                let call = store.acquire(key, rules, cost);
                crate::spans::store_call(self.kind(), "acquire", call).await
            }
        }
    }

    /// The memory store decides at once; the Redis store only from its
    /// deny cache.
    fn acquire_now(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> Option<slidegate::Result<Decision>> {
        if crate::spans::enabled() {
            // Traced decisions take the awaited path: its store call has a
            // span of its own.
            return None;
        }
        match self {
            Backend::Memory(m) => Some(match m.store.acquire_now(key, rules, cost)? {
                Err(Error::StoreFull { .. }) => Ok(m.when_full(min_limit(rules))),
                other => other,
            }),
            Backend::Redis(store) => store.acquire_now(key, rules, cost),
        }
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        match self {
            Backend::Memory(m) => {
                let call = Store::acquire_batch(&m.store, hits);
                match crate::spans::store_call("memory", "acquire_batch", call).await {
                    Err(Error::StoreFull { .. }) => {
                        Ok(hits.iter().map(|h| m.when_full(h.rule.limit())).collect())
                    }
                    other => other,
                }
            }
            Backend::Redis(store) => {
                let call = store.acquire_batch(hits);
                crate::spans::store_call(self.kind(), "acquire_batch", call).await
            }
        }
    }

    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: std::time::Duration,
    ) -> slidegate::Result<slidegate::store::BatchReservation> {
        match self {
            Backend::Memory(m) => match Store::reserve_batch(&m.store, hits, max_wait).await {
                Err(Error::StoreFull { .. }) => Ok(slidegate::store::BatchReservation::new(
                    hits.iter().map(|h| m.when_full(h.rule.limit())).collect(),
                    None,
                )),
                other => other,
            },
            Backend::Redis(store) => store.reserve_batch(hits, max_wait).await,
        }
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        match self {
            Backend::Memory(m) => Store::reset(&m.store, key).await,
            Backend::Redis(store) => store.reset(key).await,
        }
    }

    async fn ready(&self) -> slidegate::Result<()> {
        match self {
            Backend::Memory(m) => Store::ready(&m.store).await,
            Backend::Redis(store) => store.ready().await,
        }
    }

    fn watch_changes(
        &self,
        listener: std::sync::Weak<dyn slidegate::store::ChangeListener>,
    ) -> bool {
        match self {
            Backend::Memory(_) => false,
            Backend::Redis(store) => store.watch_changes(listener),
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
        for sentinel in [
            "redis+sentinel://a:26379,b:26379/mymaster",
            "rediss+sentinel://a:26379/mymaster/1",
        ] {
            assert_eq!(sentinel.parse(), Ok(StoreUrl::Redis(sentinel.into())));
        }
        for bad in ["", "mem", "http://x", "redis", "postgres://db"] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_store_url_never_prints_its_password() {
        let url: StoreUrl = "redis://user:secret@host:6379".parse().unwrap();
        assert_eq!(url.to_string(), "redis");
        assert_eq!(format!("{url:?}"), r#"Redis("redis://user:***@host:6379")"#);
        let unknown = "redis:/user:secret@host".parse::<StoreUrl>().unwrap_err();
        assert!(!unknown.to_string().contains("secret"), "{unknown}");
    }

    #[test]
    fn redaction_hides_passwords_in_urls_well_formed_or_not() {
        for (url, shown) in [
            (
                "redis://app:s3cret@10.0.0.1:6379/0",
                "redis://app:***@10.0.0.1:6379/0",
            ),
            ("rediss://:s3cret@host", "rediss://:***@host"),
            ("redis://s3cret@host", "redis://***@host"),
            (
                "redis+cluster://u:s3cret@a:1,b:2",
                "redis+cluster://u:***@a:1,b:2",
            ),
            (
                "redis+sentinel://u:s3cret@a:1,b:2/mymaster?sentinel_password=s3cret",
                "redis+sentinel://u:***@a:1,b:2/mymaster?***",
            ),
            ("redis://u:p@ss:s3cret@host", "redis://u:***@host"),
            ("redis:/u:s3cret@host", "redis:***@host"),
            (
                "redis+unix:///tmp/r.sock?pass=s3cret",
                "redis+unix:///tmp/r.sock?***",
            ),
            ("redis://host:6379", "redis://host:6379"),
            ("memory", "memory"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    fn memory_args(max_keys: usize, on_error: FailurePolicy) -> StoreArgs {
        StoreArgs {
            url: StoreUrl::Memory,
            on_error,
            timeout_ms: 50,
            clock: crate::cli::ClockMode::Server,
            coalesce: crate::cli::CoalesceMode::On,
            expiry_margin_ms: None,
            max_keys,
            max_memory_bytes: 1 << 30,
            max_rules_per_key: 2,
            deny_cache_entries: 0,
            max_store_calls: 1024,
        }
    }

    #[tokio::test]
    async fn a_full_memory_store_answers_new_keys_by_policy() {
        let rule = [Rule::parse("5/1s").unwrap()];
        for (policy, allowed) in [
            (FailurePolicy::Deny, false),
            (FailurePolicy::Local, false),
            (FailurePolicy::Allow, true),
        ] {
            let backend = Backend::connect(&memory_args(1, policy)).await.unwrap();
            assert!(!backend.acquire("held", &rule, 1).await.unwrap().degraded());
            let new = backend.acquire("new", &rule, 1).await.unwrap();
            assert_eq!((new.allowed(), new.degraded()), (allowed, true), "{policy}");
            let held = backend.acquire("held", &rule, 1).await.unwrap();
            assert_eq!(
                (held.allowed(), held.remaining(), held.degraded()),
                (true, 3, false)
            );
        }
    }

    #[tokio::test]
    async fn too_many_rules_on_a_key_is_an_error_under_every_policy() {
        let rules = [
            Rule::parse("5/1s").unwrap(),
            Rule::parse("6/1s").unwrap(),
            Rule::parse("7/1s").unwrap(),
        ];
        for policy in [
            FailurePolicy::Deny,
            FailurePolicy::Local,
            FailurePolicy::Allow,
        ] {
            let backend = Backend::connect(&memory_args(10, policy)).await.unwrap();
            assert!(backend.acquire("k", &rules[..2], 1).await.is_ok());
            assert_eq!(
                backend.acquire("k", &rules[2..], 1).await,
                Err(Error::TooManyRules { max: 2 }),
                "{policy}"
            );
        }
    }
}
