//! Every route of the HTTP API and the methods it answers: the one list
//! the router is built from (`router` in `mod.rs` adds no route of its
//! own), so that a test can hold the OpenAPI document to it both ways
//! (`tests/openapi.rs`).

/// What a route does: the router picks the handlers of each by this,
/// in a `match` that names every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// `POST /v1/acquire`.
    Acquire,
    /// `POST /v1/leases/{id}/commit`.
    LeaseCommit,
    /// `DELETE /v1/leases/{id}`.
    LeaseRelease,
    /// `POST /v1/check`.
    Check,
    /// `POST /json`, envoyproxy/ratelimit's name for `/v1/check`.
    CheckJson,
    /// `/v1/forward-auth/{domain}`, any method.
    ForwardAuth,
    /// `GET` and `DELETE /v1/keys/{key}`.
    Key,
    /// `PUT`, `GET` and `DELETE /v1/keys/{key}/limit`.
    KeyLimit,
    /// `GET /v1/config/domains`.
    Domains,
    /// `PUT`, `GET` and `DELETE /v1/config/domains/{domain}`.
    Domain,
    /// `GET /healthz`.
    Healthz,
    /// `GET /readyz`.
    Readyz,
    /// `GET /metrics`.
    Metrics,
    /// `GET /ui`.
    Ui,
    /// `GET /ui/{asset}`.
    UiAsset,
    /// `GET /v1/stats`.
    Stats,
    /// `GET /v1/config`.
    Config,
    /// `GET /openapi.json`.
    OpenApi,
}

/// The methods a route answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Methods {
    /// These methods, by their names (`GET` answers `HEAD` too).
    Only(&'static [&'static str]),
    /// Any method: a proxy's forwarded request keeps its own.
    Any,
}

/// One route: its path as axum writes it (`{name}` for a segment), the
/// methods it answers, and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The path, with `{name}` for a path segment.
    pub path: &'static str,
    /// The methods it answers.
    pub methods: Methods,
    /// What it does.
    pub endpoint: Endpoint,
}

const fn route(path: &'static str, methods: Methods, endpoint: Endpoint) -> Route {
    Route {
        path,
        methods,
        endpoint,
    }
}

/// Every route of the HTTP API.
pub const ROUTES: [Route; 18] = [
    route("/v1/acquire", Methods::Only(&["POST"]), Endpoint::Acquire),
    route(
        "/v1/leases/{id}/commit",
        Methods::Only(&["POST"]),
        Endpoint::LeaseCommit,
    ),
    route(
        "/v1/leases/{id}",
        Methods::Only(&["DELETE"]),
        Endpoint::LeaseRelease,
    ),
    route("/v1/check", Methods::Only(&["POST"]), Endpoint::Check),
    route("/json", Methods::Only(&["POST"]), Endpoint::CheckJson),
    route(
        "/v1/forward-auth/{domain}",
        Methods::Any,
        Endpoint::ForwardAuth,
    ),
    route(
        "/v1/keys/{key}",
        Methods::Only(&["GET", "DELETE"]),
        Endpoint::Key,
    ),
    route(
        "/v1/keys/{key}/limit",
        Methods::Only(&["GET", "PUT", "DELETE"]),
        Endpoint::KeyLimit,
    ),
    route(
        "/v1/config/domains",
        Methods::Only(&["GET"]),
        Endpoint::Domains,
    ),
    route(
        "/v1/config/domains/{domain}",
        Methods::Only(&["GET", "PUT", "DELETE"]),
        Endpoint::Domain,
    ),
    route("/healthz", Methods::Only(&["GET"]), Endpoint::Healthz),
    route("/readyz", Methods::Only(&["GET"]), Endpoint::Readyz),
    route("/metrics", Methods::Only(&["GET"]), Endpoint::Metrics),
    route("/ui", Methods::Only(&["GET"]), Endpoint::Ui),
    route("/ui/{asset}", Methods::Only(&["GET"]), Endpoint::UiAsset),
    route("/v1/stats", Methods::Only(&["GET"]), Endpoint::Stats),
    route("/v1/config", Methods::Only(&["GET"]), Endpoint::Config),
    route("/openapi.json", Methods::Only(&["GET"]), Endpoint::OpenApi),
];
