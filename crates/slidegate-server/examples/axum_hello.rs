//! A bare `axum::serve` hello-world: the floor of an HTTP/1.1 answer on
//! this framework, which `scripts/bench-http-peers.sh` measures beside
//! slidegate's `/healthz` and `/v1/acquire`. No layer, no state, the
//! system allocator: what any axum server pays before its own work.
//!
//! ```sh
//! cargo run --release -p slidegate-server --example axum_hello -- 127.0.0.1:8080
//! ```

use axum::Router;
use axum::routing::get;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let app = Router::new().route("/", get(|| async { "hello" }));
    let listener = tokio::net::TcpListener::bind(&address).await?;
    axum::serve(listener, app).await
}
