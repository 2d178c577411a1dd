//! Per-tenant quotas set at run time: each tenant (the `x-tenant`
//! header) is limited by the quota its plan gives it, changed while the
//! service runs (by an admin API, a billing system), and every other
//! tenant by a default of 2 a minute.
//!
//! ```text
//! cargo run -p slidegate --example tenant_quotas --features tower
//! curl -i localhost:3000/ -H 'x-tenant: acme'
//! ```
//!
//! The quotas live in a [`LimitRegistry`]; the layer reads them per
//! request (`rules_from`), so a change applies from the next request. A
//! raised quota keeps what the tenant used: `set` carries it over.

use std::net::SocketAddr;

use axum::Router;
use axum::http::HeaderName;
use axum::routing::get;
use slidegate::limits::LimitRegistry;
use slidegate::middleware::{BuildError, Key, RateLimitLayer};
use slidegate::{MemoryStore, Store};

/// The service: `GET /` limited per tenant, by its quota in `registry`
/// or by 2 a minute.
pub fn app<S: Store + Clone + 'static>(registry: &LimitRegistry<S>) -> Result<Router, BuildError> {
    let key = Key::header(HeaderName::from_static("x-tenant"));
    let limit = RateLimitLayer::builder(registry.store().clone(), key)
        .rule("2/1m")
        .rules_from(registry)
        .headers_on_success(true)
        .build()?;
    Ok(Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(limit))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = LimitRegistry::new(MemoryStore::new());
    // The key the layer looks up is what its extractor writes.
    registry
        .set("x-tenant=acme", vec![slidegate::Rule::parse("100/1m")?])
        .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    let app = app(&registry)?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
