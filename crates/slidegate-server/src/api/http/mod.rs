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
//! | `GET /openapi.json` | this API's OpenAPI 3.1 document (public: no token) |
//! | `GET /v1/config/domains`, `PUT`, `GET`, `DELETE /v1/config/domains/{domain}` | Envoy domains set at run time, YAML or JSON by `Content-Type` (415 otherwise), checked as files are; the same token rules and `If-Match` |
//!
//! The routes and their methods are listed once, in [`routes::ROUTES`],
//! which the router is built from and `tests/openapi.rs` holds the
//! OpenAPI document to.
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

use axum::Router;
use axum::routing::{MethodRouter, any, delete, get, post};
use slidegate::Store;

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
mod hot;
mod json;
mod layer;
mod leases;
mod limits;
mod openapi;
mod ops;
pub mod request;
pub mod routes;
mod state;
mod status;
mod versions;
pub mod waiting;

pub use body::{JsonBody, MAX_BODY_BYTES};
pub use decision_json::DecisionBody;
pub use error::{ApiError, ErrorCode};
pub use hot::HttpApi;
pub use layer::{Api, ApiFuture, ApiLayer, REQUEST_TIMEOUT};
pub use openapi::OPENAPI_JSON;
pub use ops::READY_TIMEOUT;
use routes::{Endpoint, ROUTES};
pub use state::AppState;

/// The whole API as served: `POST /v1/acquire` and `GET /healthz` answered
/// before the [`router`], the same as it would answer them.
pub fn service<S: Store + 'static>(state: AppState<S>) -> HttpApi<S> {
    let router = router(state.clone());
    HttpApi::new(state, router, !crate::spans::enabled())
}

/// The whole API, every route through the router.
pub fn router<S: Store + 'static>(state: AppState<S>) -> Router {
    let mut router = Router::new();
    for route in ROUTES {
        router = router.route(route.path, handlers::<S>(route.endpoint));
    }
    let router = router
        .fallback(ops::not_found)
        .with_state(state)
        // One layer for the panics, the deadline, the error bodies and the
        // failure log: each layer here costs every request a boxed future.
        .layer(ApiLayer);
    // Only with tracing on: a layer costs every request even when idle.
    if crate::spans::enabled() {
        router.layer(axum::middleware::from_fn(crate::spans::trace_context))
    } else {
        router
    }
}

/// The handlers of `endpoint`, one per method it answers (the methods
/// [`ROUTES`] lists for it: `tests/openapi.rs` probes each).
fn handlers<S: Store + 'static>(endpoint: Endpoint) -> MethodRouter<AppState<S>> {
    match endpoint {
        Endpoint::Acquire => post(acquire::acquire::<S>),
        Endpoint::LeaseCommit => post(leases::commit::<S>),
        Endpoint::LeaseRelease => delete(leases::release::<S>),
        Endpoint::Check | Endpoint::CheckJson => post(check::check::<S>),
        Endpoint::ForwardAuth => any(forward_auth::forward_auth::<S>),
        Endpoint::Key => get(acquire::peek::<S>).delete(admin::reset::<S>),
        Endpoint::KeyLimit => get(limits::get::<S>)
            .put(limits::put::<S>)
            .delete(limits::delete::<S>),
        Endpoint::Domains => get(domains::list::<S>),
        Endpoint::Domain => get(domains::get::<S>)
            .put(domains::put::<S>)
            .delete(domains::delete::<S>),
        Endpoint::Healthz => get(ops::healthz),
        Endpoint::Readyz => get(ops::readyz::<S>),
        Endpoint::Metrics => get(ops::metrics_text::<S>),
        Endpoint::Ui => get(status::page),
        Endpoint::UiAsset => get(status::asset),
        Endpoint::Stats => get(status::stats::<S>),
        Endpoint::Config => get(status::config::<S>),
        Endpoint::OpenApi => get(openapi::document),
    }
}
