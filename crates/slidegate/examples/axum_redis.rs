//! Two instances of the login application of `axum_login.rs`, sharing
//! their limits through Redis: 5 attempts a minute per account and
//! address, and 100 a second on the route, across both instances together,
//! exactly as if they were one.
//!
//! The only change from the single-instance example is the store: each
//! instance opens its own connection to the same Redis, as separate
//! processes on separate machines would. Every decision is one atomic
//! script in Redis, on Redis' clock, so neither concurrency between the
//! instances nor skew between their clocks lets one more request through.
//!
//! ```text
//! redis-server --port 6379 &          # or REDIS_URL=redis://host:port
//! cargo run -p slidegate --example axum_redis --features tower,redis
//! for port in 3000 3001 3000 3001 3000 3001; do
//!   curl -s -o /dev/null -w "$port %{http_code}\n" localhost:$port/login \
//!        -H 'content-type: application/json' -d '{"user":"alice","password":"guess"}'
//! done                                # five 401s, then 429 on both
//! ```

#[path = "axum_login.rs"]
#[allow(dead_code)] // its `main`
pub mod axum_login;

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use slidegate::store::redis::RedisStore;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

type BoxError = Box<dyn Error + Send + Sync>;

/// One instance of the login application, its limits kept in the Redis at
/// `url` (`redis://`, `rediss://`, `redis+cluster://`): every instance
/// given the same `url` shares them.
pub async fn instance(url: &str) -> Result<Router, BoxError> {
    let store = RedisStore::builder(url)
        // How long a decision may wait for Redis; after that the layer's
        // store-failure policy decides (by default: pass, marked degraded).
        .timeout(Duration::from_millis(250))
        .build()
        .await?;
    Ok(axum_login::app(store)?)
}

/// Serves `app` on `listener`, with the peer addresses the limits key on.
pub async fn serve(listener: TcpListener, app: Router) -> std::io::Result<()> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut servers = JoinSet::new();
    for port in [3000, 3001] {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        println!("instance on http://{}", listener.local_addr()?);
        servers.spawn(serve(listener, instance(&url).await?));
    }
    // Runs until a server fails.
    while let Some(served) = servers.join_next().await {
        served??;
    }
    Ok(())
}
