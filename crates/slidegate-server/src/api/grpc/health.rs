//! The standard gRPC health service (`grpc.health.v1.Health`): SERVING
//! while the store is ready, for the whole server and for the rate limit
//! service by name.

use std::sync::Arc;
use std::time::Duration;

use slidegate::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};

/// The name the health service reports the rate limit service under.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// How often, and for how long at most, the store's readiness is asked.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The health service, and the task that keeps it up to date with the
/// store's readiness until `stopped` says stop.
pub fn health_service<S: Store + 'static>(
    store: Arc<S>,
    mut stopped: watch::Receiver<bool>,
) -> (HealthServer<impl Health>, JoinHandle<()>) {
    let (reporter, health) = tonic_health::server::health_reporter();
    let prober = tokio::spawn(async move {
        loop {
            let ready = matches!(
                tokio::time::timeout(PROBE_EVERY, store.ready()).await,
                Ok(Ok(()))
            );
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status("", status).await;
            reporter.set_service_status(SERVICE_NAME, status).await;
            tokio::select! {
                _ = tokio::time::sleep(PROBE_EVERY) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
        }
    });
    (health, prober)
}
