//! The gRPC front: Envoy's rate limit service and the standard health
//! service, as the routes every gRPC connection serves.

use std::sync::Arc;

use slidegate::Store;
use tonic::service::Routes;
use tonic_health::pb::health_server::{Health, HealthServer};
use tower::Service;

use crate::net::grpc_direct::Direct;

pub mod codec;
pub mod health;
pub mod server;
pub mod service;

pub use codec::EncodedAnswer;
pub use health::health_service;
pub use server::RateLimitServer;
pub use service::{DEGRADED_METADATA, RateLimitGrpc, status_of};

/// The health service's `Check`, answered ahead of the router.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// The rate limit service and `health`, each refusing a request message
/// larger than `max_message_bytes` from its length prefix; with them
/// `ShouldRateLimit` and the health `Check`, to be answered ahead of the
/// routes' router (see [`Direct`]: the routes answer the services' other
/// paths, the health `Watch` among them).
pub fn routes<S: Store + 'static>(
    service: RateLimitGrpc<S>,
    health: HealthServer<impl Health>,
    max_message_bytes: usize,
) -> (Routes, Direct) {
    let service = RateLimitServer::new(service, max_message_bytes);
    let health = health.max_decoding_message_size(max_message_bytes);
    let should_rate_limit = service.clone();
    let check = health.clone();
    let direct = Direct::new(
        server::SHOULD_RATE_LIMIT,
        Arc::new(move |request| should_rate_limit.answer(request)),
    )
    .with(
        HEALTH_CHECK,
        // The generated server answers its own paths, and holds its state
        // behind an `Arc`: a clone per call is a count, not a copy.
        Arc::new(move |request| check.clone().call(request)),
    );
    let routes = Routes::new(health).add_service(service);
    (routes, direct)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, Full};
    use prost::Message;
    use prost::bytes::Bytes;
    use slidegate::MemoryStore;
    use tonic_health::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::limiter::Limiter;
    use crate::rules::{CurrentConfig, RateLimitConfig};
    use crate::telemetry::Telemetry;

    /// The answer of the router the direct paths are layered over.
    const ROUTED: &str = "routed";

    /// The gRPC status and message of a call to `path` asking about
    /// `service`, through [`routes`]' direct methods layered over a router
    /// that answers every call with the message [`ROUTED`] (and the status
    /// -1).
    async fn call(path: &str, service: &str, status: ServingStatus) -> (i32, Vec<u8>) {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status(health::SERVICE_NAME, status)
            .await;
        let limiter = Limiter::new(
            MemoryStore::new(),
            CurrentConfig::new(RateLimitConfig::default()),
            Arc::new(Telemetry::new()),
        );
        let (_, direct) = routes(RateLimitGrpc::new(limiter), health, 1024);
        let router = tower::service_fn(|_: http::Request<tonic::body::Body>| {
            let mut routed = http::Response::new(tonic::body::Body::default());
            routed.headers_mut().insert("grpc-status", 0.into());
            routed
                .headers_mut()
                .insert("grpc-message", http::HeaderValue::from_static(ROUTED));
            std::future::ready(Ok::<_, Infallible>(routed))
        });
        let message = HealthCheckRequest {
            service: service.into(),
        }
        .encode_to_vec();
        let mut frame = vec![0];
        frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(&message);
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .body(tonic::body::Body::new(Full::new(Bytes::from(frame))))
            .unwrap();
        let Ok(response) = direct.layer(router).oneshot(request).await;
        let (parts, body) = response.into_parts();
        if parts
            .headers
            .get("grpc-message")
            .is_some_and(|m| m == ROUTED)
        {
            // No gRPC status: the router answered.
            return (-1, ROUTED.as_bytes().to_vec());
        }
        let body = body.collect().await.unwrap();
        let code = |headers: &http::HeaderMap| {
            headers
                .get("grpc-status")
                .map(|s| s.to_str().unwrap().parse::<i32>().unwrap())
        };
        let status = code(&parts.headers)
            .or_else(|| body.trailers().and_then(code))
            .expect("a grpc-status");
        let bytes = body.to_bytes();
        (status, bytes.get(5..).unwrap_or_default().to_vec())
    }

    fn serving_status(message: &[u8]) -> i32 {
        HealthCheckResponse::decode(message).unwrap().status
    }

    /// The health `Check` is answered by the health service itself, ahead
    /// of the router, with the status of the service named; its `Watch`
    /// still goes through the router.
    #[tokio::test]
    async fn the_health_check_skips_the_router_and_keeps_its_answers() {
        let name = health::SERVICE_NAME;
        let (status, message) = call(HEALTH_CHECK, name, ServingStatus::Serving).await;
        assert_eq!(status, tonic::Code::Ok as i32, "{message:?}");
        assert_eq!(serving_status(&message), ServingStatus::Serving as i32);
        let (status, message) = call(HEALTH_CHECK, name, ServingStatus::NotServing).await;
        assert_eq!(status, tonic::Code::Ok as i32, "{message:?}");
        assert_eq!(serving_status(&message), ServingStatus::NotServing as i32);
        let (status, _) = call(HEALTH_CHECK, "no.such.Service", ServingStatus::Serving).await;
        assert_eq!(status, tonic::Code::NotFound as i32);
        let watch = "/grpc.health.v1.Health/Watch";
        let (_, message) = call(watch, name, ServingStatus::Serving).await;
        assert_eq!(message, ROUTED.as_bytes());
    }
}
