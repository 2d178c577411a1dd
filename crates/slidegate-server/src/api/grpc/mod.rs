//! The gRPC front: Envoy's rate limit service and the standard health
//! service, as the routes every gRPC connection serves.

use slidegate::Store;
use tonic::service::Routes;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::net::grpc_direct::Direct;

pub mod codec;
pub mod health;
pub mod server;
pub mod service;

pub use codec::EncodedAnswer;
pub use health::health_service;
pub use server::RateLimitServer;
pub use service::{DEGRADED_METADATA, RateLimitGrpc, status_of};

/// The rate limit service and `health`, each refusing a request message
/// larger than `max_message_bytes` from its length prefix; with them
/// `ShouldRateLimit` alone, to be answered ahead of the routes' router
/// (see [`Direct`]: the routes answer the service's other paths).
pub fn routes<S: Store + 'static>(
    service: RateLimitGrpc<S>,
    health: HealthServer<impl Health>,
    max_message_bytes: usize,
) -> (Routes, Direct) {
    let service = RateLimitServer::new(service, max_message_bytes);
    let direct = service.clone();
    let direct = Direct::new(
        server::SHOULD_RATE_LIMIT,
        std::sync::Arc::new(move |request| direct.answer(request)),
    );
    let routes =
        Routes::new(health.max_decoding_message_size(max_message_bytes)).add_service(service);
    (routes, direct)
}
