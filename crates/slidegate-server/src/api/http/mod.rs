//! The HTTP/JSON API v1.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/acquire` | 200 allowed, 429 denied; decision as JSON, `RateLimit-Policy`, `RateLimit`, and `Retry-After` on 429 |
//! | `GET /v1/keys/{key}?limit=..&window_ms=..[&algorithm=..]` | 200; the key's state under that rule, consuming nothing; with `--admin-token`, only for a request carrying it |
//! | `POST /v1/acquire` with `lease_ms` | 200 with `lease_id` and `lease_ms`: the cost reserved (or, under `concurrency` rules, places held) until committed, released or expired; 429 denied |
//! | `POST /v1/leases/{id}/commit` | `{"cost", "key"?}`: settles a budget lease; 200 with `over_limit` and the `RateLimit` fields of the state afterwards; 404 `lease_not_found`, 409 `lease_expired` / `not_committable` |
//! | `DELETE /v1/leases/{id}?key=K` | gives the lease back (budget or places); 200; 404, 409 as for a commit |
//! | `POST /v1/check` (alias `POST /json`) | Envoy's `RateLimitRequest` in proto3 JSON, decided against the `--config` rules; 200 OK, 429 OVER_LIMIT, body `RateLimitResponse` |
//! | `/v1/forward-auth/{domain}` (any method) | a reverse proxy's check of the request it forwards: 200 allowed, 429 (or `?deny_status=403`) denied, with `RateLimit-Policy`, `RateLimit` and `Retry-After` |
//! | `DELETE /v1/keys/{key}` | forgets the key under every rule; only with `--admin-token`, sent as `Authorization: Bearer` (401 without, 403 when wrong or disabled) |
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 when the store can decide, 503 otherwise |
//! | `GET /metrics` | Prometheus text |
//! | `GET /ui` | the status page (HTML; with `--admin-token`, only for a request carrying it, as Bearer or Basic password) |
//! | `GET /v1/stats` | what the status page shows, as JSON ([`Snapshot`](crate::telemetry::stats::Snapshot)); admin token as for `/ui` |
//! | `GET /v1/config` | the rules in force as JSON: domains, their origin (`file` or `runtime`), files or version, descriptors and limits, when loaded, and the runtime layer's state; admin token as for `/ui` |
//! | `PUT`, `GET`, `DELETE /v1/keys/{key}/limit` | the key's limits set at run time (`{"rules": [...]}`), which `POST /v1/acquire {"key": ...}` decides under; writes need the admin token (403 `admin_token_not_configured` without one configured), reads too once one is set; `If-Match: "VERSION"` or 412 |
//! | `GET /v1/config/domains`, `PUT`, `GET`, `DELETE /v1/config/domains/{domain}` | Envoy domains set at run time, YAML or JSON by `Content-Type` (415 otherwise), checked as files are; the same token rules and `If-Match` |
//!
//! The admin token is checked by one extractor (`auth.rs`) on every route
//! that needs it (Bearer or Basic, the scheme's name in any case). Every answer carries
//! `X-Content-Type-Options: nosniff`.
//!
//! Every error is `{"error":{"code":"...","message":"..."}}` with a stable
//! code ([`ErrorCode`]): 400 for bad input, 404, 405, 408, 413, 415, and
//! 503 when the store fails. Bad input is never a 5xx.
//!
//! `/v1/acquire` and `/v1/keys/{key}` address ad-hoc keys only
//! ([`keys`](crate::keys)): no key they take reaches a counter of
//! the configured rules.
//!
//! The router is generic over the [`Store`]: the binary uses
//! [`Backend`](crate::store::Backend), tests may use any store. Its
//! handlers read the request, call the [`Limiter`](crate::limiter::Limiter)
//! and write its answer, nothing else.

use std::time::Duration;

use axum::Router;
use axum::routing::{any, get, post};
use http::StatusCode;
use slidegate::Store;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

mod acquire;
mod admin;
mod auth;
mod body;
mod check;
pub mod decision_json;
mod domains;
mod error;
pub mod forward_auth;
pub mod headers;
mod json;
mod layer;
mod leases;
mod limits;
mod ops;
pub mod request;
mod state;
mod status;
mod versions;
pub mod waiting;

pub use body::{JsonBody, MAX_BODY_BYTES};
pub use decision_json::DecisionBody;
pub use error::{ApiError, ErrorCode};
pub use layer::{Api, ApiFuture, ApiLayer};
pub use ops::READY_TIMEOUT;
pub use state::AppState;

/// How long one request may take, body included, before a 408. It also
/// bounds how long a graceful shutdown waits for a slow client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The whole API, ready to be served.
pub fn router<S: Store + 'static>(state: AppState<S>) -> Router {
    let router = Router::new()
        .route("/v1/acquire", post(acquire::acquire::<S>))
        .route("/v1/leases/{id}/commit", post(leases::commit::<S>))
        .route(
            "/v1/leases/{id}",
            axum::routing::delete(leases::release::<S>),
        )
        .route("/v1/check", post(check::check::<S>))
        .route("/json", post(check::check::<S>))
        .route(
            "/v1/forward-auth/{domain}",
            any(forward_auth::forward_auth::<S>),
        )
        .route(
            "/v1/keys/{key}",
            get(acquire::peek::<S>).delete(admin::reset::<S>),
        )
        .route(
            "/v1/keys/{key}/limit",
            get(limits::get::<S>)
                .put(limits::put::<S>)
                .delete(limits::delete::<S>),
        )
        .route("/v1/config/domains", get(domains::list::<S>))
        .route(
            "/v1/config/domains/{domain}",
            get(domains::get::<S>)
                .put(domains::put::<S>)
                .delete(domains::delete::<S>),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz::<S>))
        .route("/metrics", get(ops::metrics_text::<S>))
        .route("/ui", get(status::page))
        .route("/ui/{asset}", get(status::asset))
        .route("/v1/stats", get(status::stats::<S>))
        .route("/v1/config", get(status::config::<S>))
        .fallback(ops::not_found)
        .with_state(state)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(ApiLayer);
    // Only with tracing on: a layer costs every request even when idle.
    let router = if crate::spans::enabled() {
        router.layer(axum::middleware::from_fn(crate::spans::trace_context))
    } else {
        router
    };
    router.layer(TraceLayer::new_for_http().on_failure(log_failure))
}

/// tower-http's failure log, but a 503 at DEBUG: it is the answer of a
/// store that is not ready, or of too many waiters, which the code that
/// answers it logs once in a while (`/readyz` is probed every few
/// seconds; an ERROR line per probe would bury the cause).
fn log_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    match class {
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::debug!(classification = %class, ?latency, "response failed");
        }
        class => tracing::error!(classification = %class, ?latency, "response failed"),
    }
}
