//! The server behind the loopback benchmark of the layer: one trivial axum
//! handler, with no layer, with slidegate's layer (memory store) or with
//! tower_governor 0.8, keyed by the peer address (one key under load from
//! one machine) or by an `x-client` header (as many keys as the load
//! generator sends). Limits are high enough that every request passes:
//! this measures what the admission path costs over real HTTP.
//!
//! ```text
//! cargo build --release -p slidegate --example bench_server --features tower
//! target/release/examples/bench_server slidegate ip 127.0.0.1:8080 &
//! wrk -t1 -c64 -d5s --latency http://127.0.0.1:8080/
//! wrk -t1 -c64 -d5s --latency -s clients.lua http://127.0.0.1:8080/  # with LAYER header
//! ```
//!
//! with `clients.lua` sending 10,000 different `x-client` values:
//!
//! ```text
//! n = 0
//! request = function()
//!   n = n + 1
//!   return wrk.format(nil, nil, { ["x-client"] = tostring(n % 10000) })
//! end
//! ```
//!
//! Arguments: `LAYER KEY [ADDR] [WORKERS]`, with `LAYER` one of `none`,
//! `slidegate`, `governor`; `KEY` one of `ip`, `header`; `ADDR`
//! 127.0.0.1:8080 and `WORKERS` (tokio worker threads) 1 by default.

use std::error::Error;
use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use http::{HeaderName, Request};
use slidegate::MemoryStore;
use slidegate::middleware::{Key, RateLimitLayer};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{KeyExtractor, PeerIpKeyExtractor};

const CLIENT: HeaderName = HeaderName::from_static("x-client");
const RULE: &str = "1000000000/1s";

/// tower_governor keyed by the `x-client` header, as slidegate's
/// `Key::header` is.
#[derive(Clone, Copy)]
struct ClientHeader;

impl KeyExtractor for ClientHeader {
    type Key = String;

    fn extract<T>(&self, request: &Request<T>) -> Result<String, tower_governor::GovernorError> {
        request
            .headers()
            .get(CLIENT)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .ok_or(tower_governor::GovernorError::UnableToExtractKey)
    }
}

fn app(layer: &str, key: &str) -> Result<Router, Box<dyn Error>> {
    let app = Router::new().route("/", get(|| async { "ok" }));
    Ok(match (layer, key) {
        ("none", _) => app,
        ("slidegate", "ip") => app.layer(
            RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
                .rule(RULE)
                .build()?,
        ),
        ("slidegate", "header") => app.layer(
            RateLimitLayer::builder(MemoryStore::new(), Key::header(CLIENT))
                .rule(RULE)
                .build()?,
        ),
        ("governor", "ip") => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .key_extractor(PeerIpKeyExtractor)
                .finish()
                .ok_or("governor config")?;
            app.layer(GovernorLayer::new(config))
        }
        ("governor", "header") => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .key_extractor(ClientHeader)
                .finish()
                .ok_or("governor config")?;
            app.layer(GovernorLayer::new(config))
        }
        other => return Err(format!("unknown layer and key {other:?}").into()),
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layer = args.first().map_or("none", String::as_str);
    let key = args.get(1).map_or("ip", String::as_str);
    let addr: SocketAddr = args
        .get(2)
        .map_or("127.0.0.1:8080", String::as_str)
        .parse()?;
    let workers: usize = args.get(3).map_or(Ok(1), |w| w.parse())?;
    let app = app(layer, key)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            eprintln!("{layer} ({key}) on http://{addr}, {workers} worker(s)");
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await?;
            Ok(())
        })
}
