//! A store whose calls are timed and whose failures are counted
//! (`slidegate_store_call_duration_seconds`, `slidegate_store_errors_total`).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics::{Counter, Histogram};
use slidegate::{Decision, Error, Hit, Rule, Store};

use super::registry::cached;

/// A store whose calls are timed and whose failures are counted.
#[derive(Clone, Debug)]
pub struct Instrumented<S> {
    inner: S,
    handles: Arc<StoreHandles>,
}

/// The store operations timed, in the order of [`StoreHandles::latency`].
const OPS: [&str; 4] = ["acquire", "acquire_batch", "reset", "ready"];
/// The store error kinds counted, in the order of [`StoreHandles::errors`].
const ERROR_KINDS: [&str; 3] = ["timeout", "full", "unavailable"];

struct StoreHandles {
    name: &'static str,
    /// Calls are timed (not those of the memory store).
    timed: bool,
    latency: [OnceLock<Histogram>; 4],
    errors: [OnceLock<Counter>; 3],
}

impl std::fmt::Debug for StoreHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandles")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, labelled `name` (redis, redis_cluster): its calls
    /// are timed and its failures counted.
    pub fn new(inner: S, name: &'static str) -> Self {
        Instrumented::with_timing(inner, name, true)
    }

    /// Wraps an in-process store, labelled `name` (memory): its failures
    /// are counted, its calls are not timed. A call takes well under a
    /// microsecond, below the histogram's first bucket (50 µs), so every
    /// sample would land there and tell nothing that
    /// `slidegate_decisions_total` does not, at the price of two clock
    /// reads and a shared write per decision.
    pub fn untimed(inner: S, name: &'static str) -> Self {
        Instrumented::with_timing(inner, name, false)
    }

    fn with_timing(inner: S, name: &'static str, timed: bool) -> Self {
        Instrumented {
            inner,
            handles: Arc::new(StoreHandles {
                name,
                timed,
                latency: Default::default(),
                errors: Default::default(),
            }),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The start of a call, when calls are timed.
    fn start(&self) -> Option<Instant> {
        self.handles.timed.then(Instant::now)
    }

    fn observe<T>(&self, op: usize, started: Option<Instant>, result: &Result<T, Error>) {
        let handles = &*self.handles;
        if let Some(started) = started {
            let elapsed: Duration = started.elapsed();
            cached(
                &handles.latency[op],
                || metrics::histogram!("slidegate_store_call_duration_seconds", "store" => handles.name, "op" => OPS[op]),
                |histogram| histogram.record(elapsed.as_secs_f64()),
            );
        }
        if let Err(error) = result {
            let kind = match error {
                Error::Timeout(_) => 0,
                Error::StoreFull { .. } => 1,
                Error::Store(_) => 2,
                _ => return,
            };
            cached(
                &handles.errors[kind],
                || metrics::counter!("slidegate_store_errors_total", "store" => handles.name, "kind" => ERROR_KINDS[kind]),
                |counter| counter.increment(1),
            );
        }
    }
}

impl<S: Store> Store for Instrumented<S> {
    async fn acquire(&self, key: &str, rules: &[Rule], cost: u64) -> Result<Decision, Error> {
        let started = self.start();
        let result = self.inner.acquire(key, rules, cost).await;
        self.observe(0, started, &result);
        result
    }

    fn acquire_now(&self, key: &str, rules: &[Rule], cost: u64) -> Option<Result<Decision, Error>> {
        let started = self.start();
        let result = self.inner.acquire_now(key, rules, cost)?;
        self.observe(0, started, &result);
        Some(result)
    }

    async fn acquire_batch(&self, hits: &[Hit<'_>]) -> Result<Vec<Decision>, Error> {
        let started = self.start();
        let result = self.inner.acquire_batch(hits).await;
        self.observe(1, started, &result);
        result
    }

    /// Timed as a batch: one call deciding several hits.
    async fn reserve_batch(
        &self,
        hits: &[Hit<'_>],
        max_wait: Duration,
    ) -> Result<slidegate::store::BatchReservation, Error> {
        let started = self.start();
        let result = self.inner.reserve_batch(hits, max_wait).await;
        self.observe(1, started, &result);
        result
    }

    /// Leases pass through untimed: the call histograms are of decisions,
    /// resets and readiness.
    async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
    ) -> Result<slidegate::store::Lease, Error> {
        self.inner.reserve_lease(key, rules, cost, time).await
    }

    async fn reserve_lease_wait(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> Result<slidegate::store::Lease, Error> {
        self.inner
            .reserve_lease_wait(key, rules, cost, time, max_wait)
            .await
    }

    async fn commit(
        &self,
        id: &str,
        key: Option<&str>,
        cost: u64,
    ) -> Result<slidegate::store::Settled, Error> {
        self.inner.commit(id, key, cost).await
    }

    async fn release(
        &self,
        id: &str,
        key: Option<&str>,
    ) -> Result<slidegate::store::Settled, Error> {
        self.inner.release(id, key).await
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        let started = self.start();
        let result = self.inner.reset(key).await;
        self.observe(2, started, &result);
        result
    }

    async fn ready(&self) -> Result<(), Error> {
        let started = self.start();
        let result = self.inner.ready().await;
        self.observe(3, started, &result);
        result
    }

    /// Forwarded: the deny cache around this store hears of the resets
    /// other servers make through the wrapped one.
    fn watch_changes(
        &self,
        listener: std::sync::Weak<dyn slidegate::store::ChangeListener>,
    ) -> bool {
        self.inner.watch_changes(listener)
    }
}
