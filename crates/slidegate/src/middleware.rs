//! Rate limiting for tower services: axum routers and routes, tonic
//! servers, anything that is a `tower::Service<http::Request<B>>`
//! (feature `tower`).
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use slidegate::MemoryStore;
//! use slidegate::middleware::{Key, RateLimitLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let limit = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
//!     .rule("10/s")      // and, all or nothing with it,
//!     .rule("300/m")     // at most 300 a minute
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! A request over the limit gets `429 Too Many Requests` with
//! `Retry-After`, the IETF `RateLimit` and `RateLimit-Policy` fields
//! (see [`crate::headers`]) and an `application/problem+json`
//! body of type
//! [`quota-exceeded`](https://iana.org/assignments/http-problem-types#quota-exceeded):
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! ratelimit-policy: "p0";q=10;w=1, "p1";q=300;w=60
//! ratelimit: "p0";r=0;t=1, "p1";r=290;t=60
//! retry-after: 1
//! content-type: application/problem+json
//!
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//!  "title":"Request cannot be satisfied as assigned quota has been exceeded",
//!  "status":429,"detail":"the quota 10/1s of policy \"p0\" is used up; retry in 1 s",
//!  "violated-policies":["p0"]}
//! ```
//!
//! # What the layer does, per request
//!
//! 1. **Key**: the [`KeyExtractor`] names the bucket (`ip=203.0.113.7`,
//!    `user=42|route=POST /login`); see [`Key`] for the built-in ones and
//!    their combinations. A request without a key gets the
//!    [`MissingKey`] outcome: rejected with a 4xx (400 by default),
//!    passed unlimited, or counted in one shared bucket. Never a 500.
//! 2. **Cost**: 1, or what the [`cost`](RateLimitBuilder::cost) function
//!    says (bytes, tokens). A cost above the smallest limit can never pass
//!    and gets `413 Content Too Large` at once.
//! 3. **Decision**: one store call decides every rule of the layer, all or
//!    nothing: a request denied by `10/s` is not counted in `300/m` either.
//!    One rule is one [`Store::acquire`](crate::store::Store::acquire) (or [`Store::acquire_now`](crate::store::Store::acquire_now), when
//!    the store can answer without waiting); several are one
//!    [`Store::acquire_batch`](crate::store::Store::acquire_batch) with a hit per rule on the same key, which
//!    answers for each rule: the `RateLimit` field gives every policy its
//!    own `r` and `t`, and `violated-policies` names exactly the ones that
//!    denied. The store is any [`Store`](crate::store::Store): [`MemoryStore`](crate::MemoryStore)
//!    in process, or a shared one so that several instances share a limit.
//! 4. **When the store cannot decide**: a full store denies (`429`); a
//!    store that is down is left to [`OnStoreError`] (pass by default, or
//!    `503`); see [below](#when-the-store-cannot-decide). Such responses
//!    carry `Slidegate-Degraded: true`.
//! 5. **Response**: allowed requests go to the inner service; with
//!    [`headers_on_success`](RateLimitBuilder::headers_on_success) they
//!    get the `RateLimit` fields too. Rejections can be rewritten with
//!    [`on_rejection`](RateLimitBuilder::on_rejection). Responses keep the
//!    inner service's body type (see [`RejectionBody`]).
//!
//! # IP keys
//!
//! [`Key::peer_ip`] and [`Key::client_ip`] count an IPv4 client per
//! address and an IPv6 client per /64 network
//! ([`DEFAULT_IPV6_PREFIX`]): one subscriber holds at least a /64 and may
//! send every request from a new address in it, which per address would
//! never be limited and would fill the store with keys. Change it with
//! [`PeerIp::ipv6_prefix`] (`128` per address).
//!
//! # When the store cannot decide
//!
//! Every error a store may return has an answer chosen on purpose:
//!
//! | the store says | the layer answers | why |
//! |---|---|---|
//! | [`CostExceedsLimit`](crate::Error::CostExceedsLimit) | `413` | the request can never pass |
//! | full: [`StoreFull`](crate::Error::StoreFull) (keys or bytes), [`TooManyRules`](crate::Error::TooManyRules) | `429`, `Retry-After: 1`, always, whatever [`OnStoreError`] says | see below |
//! | down: [`Timeout`](crate::Error::Timeout), [`Store`](crate::Error::Store) | [`OnStoreError`]: pass (the default) or `503` | an availability choice: see [`OnStoreError`] |
//! | anything else (the store refuses the layer's own key or configuration, such as a prefix that is no valid key) | `503`, logged at error level, whatever [`OnStoreError`] says | a misconfiguration: passing would switch the limit off unnoticed |
//!
//! A full store denies rather than evicting or passing. A store fills up
//! when many new clients (or addresses, or rules on a key) arrive faster
//! than idle ones are swept: the signature of a flood. Passing their
//! requests would switch the limit off for whoever can fill the store;
//! evicting live state to make room would hand the evicted clients a fresh
//! quota, and a flood of new keys would churn the state of everyone else.
//! Denying keeps every limit exact: the keys already held are decided as
//! usual, and new ones get in as soon as a sweep frees room (idle keys are
//! swept every second by [`MemoryStore`](crate::MemoryStore)). Size the
//! store's bounds ([`max_keys`](crate::MemoryStoreBuilder::max_keys),
//! [`max_bytes`](crate::MemoryStoreBuilder::max_bytes)) for the clients a
//! window may see, and key IPv6 clients per network (the default), so
//! that legitimate clients never meet the bound.
//!
//! # Cost
//!
//! With one rule and a store that answers at once (the memory store), an
//! admitted request costs the layer no allocation and no boxed future: the
//! request is read in place ([`RequestHead`]), the key is written into a
//! buffer each thread reuses, the store decides synchronously
//! ([`Store::acquire_now`](crate::store::Store::acquire_now)) and the inner service's future and response
//! pass through unwrapped. With `headers_on_success`, one string per
//! response holds the `RateLimit` value. Several rules, or a store that
//! waits (Redis), cost a boxed future and a copy of the key.
//!
//! # gRPC
//!
//! A request whose `content-type` starts with `application/grpc` is
//! answered the gRPC way: HTTP 200 with the status in the headers
//! ("Trailers-Only"). A denial is `RESOURCE_EXHAUSTED` with `retry-after`
//! (seconds), `ratelimit` and `ratelimit-policy` in the metadata, and a
//! `google.rpc.RetryInfo` in the status details. Put the layer on a tonic
//! server with `Server::builder().layer(limit)`; keys can come from
//! metadata ([`Key::header`]) or the method path ([`Key::path`]).
//!
//! # Leases: places in flight, budgets reserved
//!
//! [`max_in_flight`](RateLimitBuilder::max_in_flight) holds a place per
//! request (per key, across processes) until its response body ends;
//! [`reserve_and_commit`](RateLimitBuilder::reserve_and_commit) reserves
//! the cost function's estimate before the inner service runs and
//! commits what the handler reports ([`ReportedCost`]) when the body
//! ends. Both are settled on every path a request can end by (see
//! [`Holding`]), and both take the boxed path: a lease is awaited.
//!
//! # Several layers
//!
//! Each layer is one key and its rules. Limits on different keys (per user
//! and per route) are separate layers; the outer one counts a request
//! before the inner one decides, so put the layer that should reject first
//! outermost. Give layers that share a store and could build the same key
//! a [`prefix`](RateLimitBuilder::prefix) each.

mod body;
mod build_error;
mod builder;
mod decide;
mod fallback;
mod head;
mod hold;
mod in_flight;
mod key;
mod layer;
mod lease_options;
mod leased;
mod policies;
mod proxy;
mod response;
mod runtime_rules;
mod service;

pub use body::{RejectionBody, ResponseBody};
pub use build_error::BuildError;
pub use builder::{DEFAULT_IN_FLIGHT_LEASE, IntoRule, RateLimitBuilder};
pub use fallback::{MissingKey, OnStoreError};
pub use head::RequestHead;
pub use hold::{HeldBody, Holding, ReportedCost};
pub use in_flight::{InFlight, InFlightLayer};
pub use key::{
    And, ClientIp, DEFAULT_IPV6_PREFIX, ExtensionKey, FromFn, Global, HeaderKey, Key, KeyExtractor,
    KeyWriter, NoKey, PathKey, PeerIp, Route,
};
pub use layer::RateLimitLayer;
pub use policies::{PolicyDecision, PolicyDecisions};
pub use proxy::{InvalidProxyRange, ProxyHeader, TrustedProxies};
pub use response::{DEGRADED, QUOTA_EXCEEDED, Rejection, TEMPORARY_REDUCED_CAPACITY};
pub use service::{RateLimit, ResponseFuture};
