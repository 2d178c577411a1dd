//! What the service says about itself: Prometheus metrics ([`metrics`],
//! [`store_calls`]), the status page's statistics ([`stats`]), spans over
//! OTLP ([`otlp`]) and logs ([`logging`]).
//!
//! [`Telemetry`] is the limiter's [`Sink`]: every decision is counted in
//! the metrics and the statistics of the server that made it.

use std::sync::Arc;
use std::time::Duration;

use slidegate::{Decision, Store};

mod counts;
pub mod families;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod otlp;
mod registry;
pub mod stats;
pub mod store_calls;

use crate::limiter::Sink;
use crate::limiter::check::{CheckRequest, CheckResponse};
use crate::rules::{CurrentConfig, RateLimitConfig};
use limits::Limits;
use stats::{SAMPLE_EVERY, Snapshot, Stats};

/// How long the sampler waits for the store's readiness.
const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// One server's metrics and statistics: what each decision is counted in.
#[derive(Debug, Default)]
pub struct Telemetry {
    stats: Stats,
    limits: Limits,
}

impl Telemetry {
    /// Nothing counted yet.
    pub fn new() -> Telemetry {
        Telemetry::default()
    }

    /// The status page's statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Takes one point of every series of the status page, each limit of
    /// `config` counting.
    pub fn sample(&self, config: &CurrentConfig) {
        let table = self.limits.for_config(&config.load());
        self.stats.sample(&table);
    }

    /// Everything `GET /v1/stats` answers.
    pub fn snapshot(&self, config: &CurrentConfig) -> Snapshot {
        self.stats.snapshot(&config.load(), config.last_refused())
    }

    /// Takes a point of every series each [`SAMPLE_EVERY`] and checks the
    /// store's readiness, until the returned handle is dropped.
    pub fn spawn_sampler<S: Store + 'static>(
        self: &Arc<Self>,
        config: CurrentConfig,
        store: S,
    ) -> Sampler {
        let telemetry = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(SAMPLE_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                telemetry.sample(&config);
                let ready = match tokio::time::timeout(READY_TIMEOUT, store.ready()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err(format!("no answer within {READY_TIMEOUT:?}")),
                };
                telemetry.stats.set_health(ready);
            }
        });
        Sampler(task)
    }
}

impl Sink for Telemetry {
    fn adhoc_decided(&self, key: &str, decision: &Decision) {
        metrics::acquire_decision(decision);
        self.stats.record_acquire(key, decision);
    }

    fn check_decided(
        &self,
        config: &RateLimitConfig,
        request: &CheckRequest,
        response: &CheckResponse<'_>,
    ) {
        let table = self.limits.for_config(config);
        let table = (table.generation() == config.generation()).then_some(&**table);
        metrics::check_decisions(&request.domain, response, table);
        self.stats.record_check(request, response, table);
    }
}

/// The running sampler; dropping it stops it.
#[derive(Debug)]
pub struct Sampler(tokio::task::JoinHandle<()>);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}
