//! The store the service decides with, chosen by `--store`.
//!
//! [`Backend`] is one enum over every store the binary can use, and it
//! implements [`Store`] by delegating to the chosen one. The HTTP handlers
//! are written against the [`Store`] trait only, so a new store (Redis) is
//! one more variant here and one more arm in [`Backend::connect`]: nothing
//! else changes.

use std::time::Duration;

use slidegate::clock::SystemClock;
use slidegate::store::redis::{Coalesce, RedisStore};
use slidegate::store::resilient::{FailurePolicy, ResilientStore};
use slidegate::{Decision, Error, Hit, MemoryStore, Rule, Store};

use super::options::{ClockMode, CoalesceMode, StoreOptions};
use super::reach;
use super::url::{StoreUrl, redact_url, redis_nodes};
use crate::spans;
use crate::telemetry::stats::{BreakerState, StoreInfo};
use crate::telemetry::store_calls::Instrumented;

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
    Redis {
        /// The store, behind its failure policy.
        store: ResilientStore<Instrumented<RedisStore>>,
        /// Its URL without credentials, for logs and for saying why it
        /// does not answer.
        address: String,
    },
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
    /// The answer of the failure policy to a request under a rule of
    /// `limit`, counted.
    fn when_full(&self, limit: u64) -> Decision {
        let allow = self.when_full == FailurePolicy::Allow;
        metrics::counter!("slidegate_policy_decisions_total", "policy" => self.when_full.to_string()).increment(1);
        Decision::by_policy(allow, limit, Duration::from_secs(1))
    }

    /// `result`, with a full store answered by the failure policy (made by
    /// `answer`): every call of the memory store goes through here.
    fn or_when_full<T>(
        &self,
        result: slidegate::Result<T>,
        answer: impl FnOnce(&Self) -> T,
    ) -> slidegate::Result<T> {
        match result {
            Err(Error::StoreFull { .. }) => Ok(answer(self)),
            other => other,
        }
    }
}

impl Backend {
    /// The Redis store under the resilient wrapper, for what is not a
    /// decision (the limits shared through Redis); `None` for memory.
    pub fn redis(&self) -> Option<RedisStore> {
        match self {
            Backend::Redis { store, .. } => Some(store.inner().inner().clone()),
            Backend::Memory(_) => None,
        }
    }

    /// Opens the store the flags name.
    pub async fn connect(args: &StoreOptions) -> Result<Backend, ConnectError> {
        match &args.url {
            StoreUrl::Memory => Ok(Backend::Memory(MemoryBackend {
                store: Instrumented::untimed(
                    MemoryStore::builder()
                        .max_keys(args.max_keys)
                        .max_bytes(args.max_memory_bytes)
                        .max_rules_per_key(usize::from(args.max_rules_per_key))
                        .max_leases(args.max_leases)
                        .build(),
                    "memory",
                ),
                when_full: args.on_error,
            })),
            StoreUrl::Redis(url) => {
                let timeout = args.timeout();
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
                let builder = builder.max_leases(args.max_leases);
                let redis = builder.build_lazy().map_err(ConnectError::Redis)?;
                spans::set_store_node(redis_nodes(url).to_owned());
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
                Ok(Backend::Redis {
                    store,
                    address: redact_url(url).into_owned(),
                })
            }
        }
    }

    /// The store's kind and breakers, for the status page.
    pub fn status(&self) -> StoreInfo {
        match self {
            Backend::Memory(memory) => StoreInfo {
                kind: self.kind().to_owned(),
                policy: Some(memory.when_full.to_string()),
                breakers: Vec::new(),
                deny_cache_entries: 0,
            },
            Backend::Redis { store, .. } => {
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

    /// Where the store is, for logs: `memory`, or the Redis URL without
    /// its credentials.
    pub fn address(&self) -> &str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Redis { address, .. } => address,
        }
    }

    /// The kind of store, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Redis { store, .. } if store.inner().inner().is_cluster() => "redis_cluster",
            Backend::Redis { .. } => "redis",
        }
    }
}

fn min_limit(rules: &[Rule]) -> u64 {
    rules.iter().map(Rule::limit).min().unwrap_or(0)
}

impl Store for Backend {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> slidegate::Result<Decision> {
        match self {
            Backend::Memory(m) => {
                let call = Store::acquire(&m.store, key, rules, cost);
                let result = spans::store_call("memory", "acquire", call).await;
                m.or_when_full(result, |m| m.when_full(min_limit(rules)))
            }
            Backend::Redis { store, .. } => {
                let call = store.acquire(key, rules, cost);
                spans::store_call(self.kind(), "acquire", call).await
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
        if spans::enabled() {
            // Traced decisions take the awaited path: its store call has a
            // span of its own.
            return None;
        }
        match self {
            Backend::Memory(m) => {
                let result = m.store.acquire_now(key, rules, cost)?;
                Some(m.or_when_full(result, |m| m.when_full(min_limit(rules))))
            }
            Backend::Redis { store, .. } => store.acquire_now(key, rules, cost),
        }
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> slidegate::Result<Vec<Decision>> {
        match self {
            Backend::Memory(m) => {
                let call = Store::acquire_batch(&m.store, hits);
                let result = spans::store_call("memory", "acquire_batch", call).await;
                m.or_when_full(result, |m| {
                    hits.iter().map(|h| m.when_full(h.rule.limit())).collect()
                })
            }
            Backend::Redis { store, .. } => {
                let call = store.acquire_batch(hits);
                spans::store_call(self.kind(), "acquire_batch", call).await
            }
        }
    }

    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: std::time::Duration,
    ) -> slidegate::Result<slidegate::store::BatchReservation> {
        match self {
            Backend::Memory(m) => {
                let result = Store::reserve_batch(&m.store, hits, max_wait).await;
                m.or_when_full(result, |m| {
                    let decisions = hits.iter().map(|h| m.when_full(h.rule.limit())).collect();
                    slidegate::store::BatchReservation::new(decisions, None)
                })
            }
            Backend::Redis { store, .. } => store.reserve_batch(hits, max_wait).await,
        }
    }

    /// Leases have no failure policy: a full memory store or a store that
    /// cannot answer is an error (503), never a lease.
    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: std::time::Duration,
    ) -> slidegate::Result<slidegate::store::Lease> {
        match self {
            Backend::Memory(m) => Store::reserve_lease(&m.store, key, rules, cost, time).await,
            Backend::Redis { store, .. } => store.reserve_lease(key, rules, cost, time).await,
        }
    }

    async fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: std::time::Duration,
        max_wait: std::time::Duration,
    ) -> slidegate::Result<slidegate::store::Lease> {
        match self {
            Backend::Memory(m) => {
                Store::reserve_lease_wait(&m.store, key, rules, cost, time, max_wait).await
            }
            Backend::Redis { store, .. } => {
                store
                    .reserve_lease_wait(key, rules, cost, time, max_wait)
                    .await
            }
        }
    }

    async fn commit(
        &self,
        id: &str,
        key: Option<&str>,
        cost: u64,
    ) -> slidegate::Result<slidegate::store::Settled> {
        match self {
            Backend::Memory(m) => Store::commit(&m.store, id, key, cost).await,
            Backend::Redis { store, .. } => store.commit(id, key, cost).await,
        }
    }

    async fn release(
        &self,
        id: &str,
        key: Option<&str>,
    ) -> slidegate::Result<slidegate::store::Settled> {
        match self {
            Backend::Memory(m) => Store::release(&m.store, id, key).await,
            Backend::Redis { store, .. } => store.release(id, key).await,
        }
    }

    async fn reset(&self, key: &str) -> slidegate::Result<()> {
        match self {
            Backend::Memory(m) => Store::reset(&m.store, key).await,
            Backend::Redis { store, .. } => store.reset(key).await,
        }
    }

    async fn ready(&self) -> slidegate::Result<()> {
        match self {
            Backend::Memory(m) => Store::ready(&m.store).await,
            Backend::Redis { store, address } => match store.ready().await {
                Ok(()) => Ok(()),
                // The store's own error is a timeout or a closed circuit:
                // the network says why.
                Err(error) => Err(match reach::unreachable(redis_nodes(address)).await {
                    Some(why) => Error::Store(format!("{error}: {why}")),
                    None => error,
                }),
            },
        }
    }

    fn watch_changes(
        &self,
        listener: std::sync::Weak<dyn slidegate::store::ChangeListener>,
    ) -> bool {
        match self {
            Backend::Memory(_) => false,
            Backend::Redis { store, .. } => store.watch_changes(listener),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory_args(max_keys: usize, on_error: FailurePolicy) -> StoreOptions {
        StoreOptions {
            url: StoreUrl::Memory,
            on_error,
            timeout_ms: 50,
            clock: ClockMode::Server,
            coalesce: CoalesceMode::On,
            expiry_margin_ms: None,
            max_keys,
            max_memory_bytes: 1 << 30,
            max_rules_per_key: 2,
            deny_cache_entries: 0,
            max_store_calls: 1024,
            max_leases: slidegate::store::DEFAULT_MAX_LEASES,
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
