//! The layer on a real tonic server, called by a tonic client over loopback.

use std::net::SocketAddr;

use slidegate::middleware::{Key, KeyExtractor, RateLimitLayer};
use slidegate::{MemoryStore, Store};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Serves the health service behind `layer`; returns a connected client.
async fn health_behind<St, K>(
    layer: RateLimitLayer<St, K>,
) -> HealthClient<tonic::transport::Channel>
where
    St: Store + 'static,
    K: KeyExtractor,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let (_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .expect("serve");
    });
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    HealthClient::new(channel)
}

fn check() -> tonic::Request<HealthCheckRequest> {
    tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    })
}

#[tokio::test]
async fn a_grpc_call_without_a_key_is_an_invalid_argument() {
    let layer = RateLimitLayer::builder(
        MemoryStore::new(),
        Key::header(http::HeaderName::from_static("x-api-key")),
    )
    .rule("5/s")
    .build()
    .expect("layer");
    let mut client = health_behind(layer).await;
    let status = client.check(check()).await.expect_err("no key");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "no rate-limit key: the request lacks the key header"
    );
}

#[tokio::test]
async fn a_grpc_call_over_a_global_limit_is_resource_exhausted() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::global().and(Key::path()))
        .rule("2/m")
        .build()
        .expect("layer");
    let mut client = health_behind(layer).await;
    client.check(check()).await.expect("first");
    client.check(check()).await.expect("second");
    let status = client.check(check()).await.expect_err("third");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status
            .metadata()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("60")
    );
}

#[cfg(feature = "tonic")]
#[tokio::test]
async fn tonic_peers_are_keyed_by_address() {
    let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
        .rule("1/m")
        .build()
        .expect("layer");
    let mut client = health_behind(layer).await;
    client
        .check(check())
        .await
        .expect("first call from 127.0.0.1");
    let status = client.check(check()).await.expect_err("second call");
    assert_eq!(status.code(), Code::ResourceExhausted);
}
