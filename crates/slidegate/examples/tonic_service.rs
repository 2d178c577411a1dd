//! A tonic gRPC server (the standard `grpc.health.v1.Health` service) with
//! the rate limit layer: each API key may call each method 5 times a
//! second; callers without a key share one bucket.
//!
//! A caller over the limit gets the status `RESOURCE_EXHAUSTED`, with the
//! wait in the metadata (`retry-after`, in seconds, next to the IETF
//! `ratelimit` and `ratelimit-policy` fields) and in the status details as
//! a `google.rpc.RetryInfo`.
//!
//! ```text
//! cargo run -p slidegate --example tonic_service --features tower
//! grpcurl -plaintext -H 'x-api-key: k1' 127.0.0.1:50051 grpc.health.v1.Health/Check
//! ```

use std::error::Error;

use http::HeaderName;
use slidegate::middleware::{BuildError, Key, KeyExtractor, MissingKey, RateLimitLayer};
use slidegate::{MemoryStore, Store};
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// The metadata entry that names the caller.
pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The rate limit layer: per API key and gRPC method (`/pkg.Service/Method`
/// is the HTTP path), 5 a second.
pub fn rate_limit<St: Store + 'static>(
    store: St,
) -> Result<RateLimitLayer<St, impl KeyExtractor>, BuildError> {
    RateLimitLayer::builder(store, Key::header(API_KEY).and(Key::path()))
        .policy("per-key", "5/s")
        .missing_key(MissingKey::Shared)
        .build()
}

/// Serves the health service on `listener`, behind the layer.
pub async fn serve<St: Store + 'static>(
    listener: TcpListener,
    store: St,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder()
        .layer(rate_limit(store)?)
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let listener = TcpListener::bind("127.0.0.1:50051").await?;
    println!("gRPC health service on {}", listener.local_addr()?);
    serve(listener, MemoryStore::new()).await
}
