//! A bare tonic server, for `scripts/bench-tonic-floor.sh`: the standard
//! health service (`grpc.health.v1.Health`, SERVING) and Envoy's rate
//! limit service answering every `ShouldRateLimit` OK without a limiter,
//! on `tonic::transport::Server::builder()` with no options (no timeout,
//! no concurrency limit, no keepalive, no layer), on the multi-thread
//! runtime slidegate uses, with its allocator.
//!
//!     tonic-bare ADDRESS
//!
//! What a gRPC call costs in tonic itself: the floor under slidegate's
//! own per-call cost.

use std::error::Error;
use std::net::SocketAddr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Server;
use tonic::{Request, Response, Status};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers every call OK, one OK status per descriptor with the limit of
/// slidegate's benchmark rule (100 a second), as slidegate's answer has:
/// the load client reads an OK answer without a limit as "no rule
/// applied".
struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok.into(),
                current_limit: Some(RateLimit {
                    requests_per_unit: 100,
                    unit: Unit::Second.into(),
                    ..RateLimit::default()
                }),
                limit_remaining: 99,
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .ok_or("usage: tonic-bare ADDRESS")?
        .parse()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder()
        .add_service(health)
        .add_service(RateLimitServiceServer::new(AlwaysOk))
        .serve(addr)
        .await?;
    Ok(())
}
