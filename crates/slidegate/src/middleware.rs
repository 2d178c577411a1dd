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
//! ratelimit: "p0";r=0;t=1
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
//! 3. **Decision**: one [`Store::acquire`] call decides every rule of the
//!    layer, all or nothing: a request denied by `10/s` is not counted in
//!    `300/m` either. The store is any [`Store`]: [`MemoryStore`](crate::MemoryStore)
//!    in process, or a shared one so that several instances share a limit.
//! 4. **Store failure**: when the store fails, [`OnStoreError`] decides:
//!    pass (the default: a limiter outage does not become an outage of
//!    the service) or deny with `503`. Either way the response carries
//!    `Slidegate-Degraded: true`.
//! 5. **Response**: allowed requests go to the inner service; with
//!    [`headers_on_success`](RateLimitBuilder::headers_on_success) they
//!    get the `RateLimit` fields too. Rejections can be rewritten with
//!    [`on_rejection`](RateLimitBuilder::on_rejection).
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
//! # Several layers
//!
//! Each layer is one key and its rules. Limits on different keys (per user
//! and per route) are separate layers; the outer one counts a request
//! before the inner one decides, so put the layer that should reject first
//! outermost. Give layers that share a store and could build the same key
//! a [`prefix`](RateLimitBuilder::prefix) each.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::error::Error;
use crate::headers::{self, InvalidPolicyName};
use crate::rate::{Rate, Rule};
use crate::store::{MAX_KEY_LEN, Store};

mod body;
mod key;
mod proxy;
mod response;

pub use body::ResponseBody;
pub use key::{
    And, ClientIp, ExtensionKey, FromFn, Global, HeaderKey, Key, KeyExtractor, KeyWriter, NoKey,
    PathKey, PeerIp, Route,
};
pub use proxy::{InvalidProxyRange, ProxyHeader, TrustedProxies};
pub use response::{DEGRADED, QUOTA_EXCEEDED, Rejection, TEMPORARY_REDUCED_CAPACITY};

/// What happens to a request from which no key can be extracted (no peer
/// address, no authenticated user, no API key header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer with this status and a problem+json body saying why (gRPC:
    /// the matching code). Statuses outside 4xx are replaced by 400.
    /// The default, `Reject(400 Bad Request)`, fails closed.
    Reject(StatusCode),
    /// Pass the request on, unlimited.
    Allow,
    /// Count every keyless request in one shared bucket (key `nokey`),
    /// under the same rules.
    Shared,
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What happens when the store fails (times out, is unreachable, errs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnStoreError {
    /// Pass the request on (fail open). The default.
    #[default]
    Allow,
    /// Answer `503 Service Unavailable` (gRPC `UNAVAILABLE`) with this
    /// `Retry-After` (fail closed).
    Deny {
        /// The wait suggested to the client.
        retry_after: Duration,
    },
}

/// Something that names a rule: a [`Rule`], a [`Rate`], or the text of a
/// rate (`"10/s"`, `"300/m"`), parsed when the layer is built.
pub trait IntoRule {
    /// The rule, or why the text is not one.
    fn into_rule(self) -> Result<Rule, Error>;
}

impl IntoRule for Rule {
    fn into_rule(self) -> Result<Rule, Error> {
        Ok(self)
    }
}

impl IntoRule for Rate {
    fn into_rule(self) -> Result<Rule, Error> {
        Ok(Rule::new(self))
    }
}

impl IntoRule for &str {
    fn into_rule(self) -> Result<Rule, Error> {
        Rule::parse(self)
    }
}

impl IntoRule for String {
    fn into_rule(self) -> Result<Rule, Error> {
        Rule::parse(&self)
    }
}

/// Why a [`RateLimitBuilder`] could not build its layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A rule that does not parse or is out of range.
    #[error("rule {index}: {source}")]
    Rule {
        /// The position of the rule, from 0.
        index: usize,
        /// What is wrong with it.
        source: Error,
    },
    /// A layer without rules.
    #[error("a rate limit layer needs at least one rule")]
    NoRules,
    /// A policy name that is not a valid sf-string.
    #[error(transparent)]
    PolicyName(#[from] InvalidPolicyName),
    /// Two policies with the same name.
    #[error("two policies are named {0:?}")]
    DuplicatePolicy(String),
}

type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;
type RejectionHook =
    dyn Fn(&Rejection<'_>, &Parts, Response<Bytes>) -> Response<Bytes> + Send + Sync;

/// Configures a [`RateLimitLayer`]; made by [`RateLimitLayer::builder`].
pub struct RateLimitBuilder<St, K> {
    store: St,
    key: K,
    rules: Vec<(Option<String>, Result<Rule, Error>)>,
    cost: Option<Box<CostFn>>,
    missing_key: MissingKey,
    on_store_error: OnStoreError,
    headers_on_success: bool,
    prefix: Option<String>,
    on_rejection: Option<Box<RejectionHook>>,
}

impl<St, K> RateLimitBuilder<St, K> {
    /// Adds a rule. Unnamed rules are the policy `"default"` when alone,
    /// `"p0"`, `"p1"`, ... (by position) otherwise.
    pub fn rule(mut self, rule: impl IntoRule) -> Self {
        self.rules.push((None, rule.into_rule()));
        self
    }

    /// Adds a rule with the policy name shown in the `RateLimit` fields
    /// and the problem's `violated-policies` (printable ASCII).
    pub fn policy(mut self, name: impl Into<String>, rule: impl IntoRule) -> Self {
        self.rules.push((Some(name.into()), rule.into_rule()));
        self
    }

    /// The cost of each request, in the rules' units (1 by default): bytes
    /// from `Content-Length`, tokens, the price of an expensive call. A cost
    /// of 0 passes when the quota has room, without using any.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer}};
    /// // One megabyte a minute per client, counted in kilobytes.
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .rule("1024/m")
    ///     .cost(|req| {
    ///         let bytes = req.headers.get(http::header::CONTENT_LENGTH)
    ///             .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    ///             .unwrap_or(0);
    ///         bytes.div_ceil(1024).max(1)
    ///     })
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Box::new(cost));
        self
    }

    /// What to do with requests without a key (default: reject with 400).
    pub fn missing_key(mut self, outcome: MissingKey) -> Self {
        self.missing_key = outcome;
        self
    }

    /// What to do when the store fails (default: allow).
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Also send `RateLimit-Policy` and `RateLimit` on the responses of
    /// allowed requests (default: only on rejections).
    pub fn headers_on_success(mut self, yes: bool) -> Self {
        self.headers_on_success = yes;
        self
    }

    /// Starts every key with `prefix`, so layers sharing a store keep apart
    /// (`login|ip=203.0.113.7`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Rewrites the responses of rejected requests. The hook gets the
    /// rejection, the request's head and the default response, and returns
    /// the response to send.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer, Rejection}};
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .rule("10/s")
    ///     .on_rejection(|rejection, _request, mut response| {
    ///         if let Rejection::RateLimited { .. } = rejection {
    ///             *response.body_mut() = "slow down".into();
    ///             response.headers_mut().insert(
    ///                 http::header::CONTENT_TYPE,
    ///                 http::HeaderValue::from_static("text/plain"),
    ///             );
    ///         }
    ///         response
    ///     })
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn on_rejection(
        mut self,
        hook: impl Fn(&Rejection<'_>, &Parts, Response<Bytes>) -> Response<Bytes>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.on_rejection = Some(Box::new(hook));
        self
    }

    /// The layer, or what is wrong with the rules.
    pub fn build(self) -> Result<RateLimitLayer<St, K>, BuildError> {
        let count = self.rules.len();
        if count == 0 {
            return Err(BuildError::NoRules);
        }
        let mut defaults = headers::default_policy_names(count).into_iter();
        let mut policies: Vec<(String, Rule)> = Vec::with_capacity(count);
        for (index, (name, rule)) in self.rules.into_iter().enumerate() {
            let rule = rule.map_err(|source| BuildError::Rule { index, source })?;
            let default = defaults.next().unwrap_or_default();
            let name = name.unwrap_or(default);
            headers::check_policy_name(&name)?;
            if policies.iter().any(|(other, _)| *other == name) {
                return Err(BuildError::DuplicatePolicy(name));
            }
            policies.push((name, rule));
        }
        let rules: Box<[Rule]> = policies.iter().map(|(_, rule)| *rule).collect();
        let min_limit = rules.iter().map(Rule::limit).min().unwrap_or(1);
        let policy_header =
            headers::ratelimit_policy(policies.iter().map(|(name, rule)| (name.as_str(), *rule)));
        let policy_header = HeaderValue::try_from(policy_header)
            .map_err(|_| InvalidPolicyName(policies[0].0.clone()))?;
        let missing_key = match self.missing_key {
            MissingKey::Reject(status) if !status.is_client_error() => {
                MissingKey::Reject(StatusCode::BAD_REQUEST)
            }
            other => other,
        };
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                store: self.store,
                key: self.key,
                rules,
                names: policies.into_iter().map(|(name, _)| name.into()).collect(),
                min_limit,
                policy_header,
                cost: self.cost,
                missing_key,
                on_store_error: self.on_store_error,
                headers_on_success: self.headers_on_success,
                prefix: self.prefix,
                on_rejection: self.on_rejection,
            }),
        })
    }
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimitBuilder<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("store", &self.store)
            .field("key", &self.key)
            .field("rules", &self.rules)
            .field("missing_key", &self.missing_key)
            .field("on_store_error", &self.on_store_error)
            .field("headers_on_success", &self.headers_on_success)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A tower [`Layer`] that rate limits requests: see the [module docs](self).
///
/// Cheap to clone: clones share the configuration and the store.
pub struct RateLimitLayer<St, K> {
    config: Arc<Config<St, K>>,
}

impl<St, K> RateLimitLayer<St, K>
where
    St: Store + 'static,
    K: KeyExtractor,
{
    /// Starts configuring a layer that counts requests in `store` under the
    /// key that `key` extracts. Add at least one rule, then
    /// [`build`](RateLimitBuilder::build).
    pub fn builder(store: St, key: K) -> RateLimitBuilder<St, K> {
        RateLimitBuilder {
            store,
            key,
            rules: Vec::new(),
            cost: None,
            missing_key: MissingKey::default(),
            on_store_error: OnStoreError::default(),
            headers_on_success: false,
            prefix: None,
            on_rejection: None,
        }
    }
}

impl<St, K> RateLimitLayer<St, K> {
    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.config.rules
    }

    /// The policy names, in the order of the rules.
    pub fn policy_names(&self) -> impl Iterator<Item = &str> {
        self.config.names.iter().map(|name| &**name)
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.config.store
    }
}

impl<St, K> Clone for RateLimitLayer<St, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimitLayer<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St, K> Layer<S> for RateLimitLayer<St, K> {
    type Service = RateLimit<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

struct Config<St, K> {
    store: St,
    key: K,
    rules: Box<[Rule]>,
    names: Box<[Box<str>]>,
    min_limit: u64,
    policy_header: HeaderValue,
    cost: Option<Box<CostFn>>,
    missing_key: MissingKey,
    on_store_error: OnStoreError,
    headers_on_success: bool,
    prefix: Option<String>,
    on_rejection: Option<Box<RejectionHook>>,
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for Config<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("store", &self.store)
            .field("key", &self.key)
            .field("rules", &self.rules)
            .field("names", &self.names)
            .field("missing_key", &self.missing_key)
            .field("on_store_error", &self.on_store_error)
            .field("headers_on_success", &self.headers_on_success)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The outcome of the checks before the inner service is called.
enum Verdict<'a> {
    /// Call the inner service; add these headers to its response.
    Pass {
        decision: Option<crate::Decision>,
        degraded: bool,
    },
    Reject(Rejection<'a>),
    /// The store failed and the policy denies.
    StoreDenied {
        error: Error,
        retry_after: Duration,
    },
}

impl<St: Store, K: KeyExtractor> Config<St, K> {
    /// The store key of `request`: the prefix and the extracted parts.
    fn key(&self, request: &Parts) -> Result<String, NoKey> {
        let mut key = KeyWriter::with_capacity(64);
        if let Some(prefix) = &self.prefix {
            key.push_word(prefix);
        }
        let start = key.as_str().len();
        self.key.extract(request, &mut key)?;
        if key.as_str().len() == start {
            return Err(NoKey::new("the key extractor wrote no key"));
        }
        Ok(key.into_store_key(MAX_KEY_LEN))
    }

    fn shared_key(&self) -> String {
        let mut key = KeyWriter::new();
        if let Some(prefix) = &self.prefix {
            key.push_word(prefix);
        }
        key.push_word("nokey");
        key.into_store_key(MAX_KEY_LEN)
    }

    async fn decide(&self, request: &Parts) -> Verdict<'_> {
        let key = match self.key(request) {
            Ok(key) => key,
            Err(reason) => match self.missing_key {
                MissingKey::Allow => {
                    return Verdict::Pass {
                        decision: None,
                        degraded: false,
                    };
                }
                MissingKey::Shared => self.shared_key(),
                MissingKey::Reject(status) => {
                    return Verdict::Reject(Rejection::MissingKey { reason, status });
                }
            },
        };
        let cost = self.cost.as_ref().map_or(1, |cost| cost(request));
        if cost > self.min_limit {
            return Verdict::Reject(Rejection::CostTooHigh {
                cost,
                limit: self.min_limit,
            });
        }
        match self.store.acquire(&key, &self.rules, cost).await {
            Ok(decision) if decision.allowed() => Verdict::Pass {
                decision: Some(decision),
                degraded: decision.degraded(),
            },
            Ok(decision) => {
                let index = self.deciding_rule(&decision);
                Verdict::Reject(Rejection::RateLimited {
                    decision,
                    policy: &self.names[index],
                    rule: self.rules[index],
                })
            }
            Err(Error::CostExceedsLimit { cost, limit }) => {
                Verdict::Reject(Rejection::CostTooHigh { cost, limit })
            }
            Err(error) => self.store_failed(error),
        }
    }

    fn store_failed(&self, error: Error) -> Verdict<'_> {
        match self.on_store_error {
            OnStoreError::Allow => Verdict::Pass {
                decision: None,
                degraded: true,
            },
            OnStoreError::Deny { retry_after } => Verdict::StoreDenied { error, retry_after },
        }
    }

    /// The rule a combined decision reports on. The store says only its
    /// limit, so rules sharing a limit are told apart by window: a denial
    /// never asks to wait longer than its rule's window.
    fn deciding_rule(&self, decision: &crate::Decision) -> usize {
        let same_limit = || {
            self.rules
                .iter()
                .enumerate()
                .filter(|(_, rule)| rule.limit() == decision.limit())
        };
        let first = same_limit().next().map_or(0, |(index, _)| index);
        if decision.allowed() {
            return first;
        }
        let wait = decision.retry_after().as_micros();
        same_limit()
            .filter(|(_, rule)| u128::from(rule.window_micros()) + 1 >= wait)
            .min_by_key(|(_, rule)| rule.window_micros())
            .map_or(first, |(index, _)| index)
    }

    fn reject(&self, rejection: &Rejection<'_>, request: &Parts) -> Response<Bytes> {
        let cx = response::Context {
            grpc: response::grpc_content_type(request),
            policy_header: &self.policy_header,
        };
        let default = response::default_response(rejection, &cx);
        match &self.on_rejection {
            Some(hook) => hook(rejection, request, default),
            None => default,
        }
    }
}

/// The [`Service`] made by [`RateLimitLayer`]: decides each request, then
/// calls the inner service or answers itself.
pub struct RateLimit<S, St, K> {
    inner: S,
    config: Arc<Config<St, K>>,
}

impl<S: Clone, St, K> Clone for RateLimit<S, St, K> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, St: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimit<S, St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

/// The future of a [`RateLimit`] call.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static>>;

impl<S, St, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, St, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    St: Store + 'static,
    K: KeyExtractor,
    ReqBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that poll_ready readied goes into the future; a fresh
        // clone, not yet ready, stays behind for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let (decision, degraded) = match config.decide(&parts).await {
                Verdict::Pass { decision, degraded } => (decision, degraded),
                Verdict::Reject(rejection) => {
                    let response = config.reject(&rejection, &parts);
                    return Ok(response.map(ResponseBody::rejection));
                }
                Verdict::StoreDenied { error, retry_after } => {
                    let rejection = Rejection::StoreFailure {
                        error: &error,
                        retry_after,
                    };
                    let response = config.reject(&rejection, &parts);
                    return Ok(response.map(ResponseBody::rejection));
                }
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.map(ResponseBody::inner);
            let headers = response.headers_mut();
            if let Some(decision) = decision.filter(|_| config.headers_on_success) {
                let index = config.deciding_rule(&decision);
                headers.append(headers::RATELIMIT_POLICY, config.policy_header.clone());
                if let Ok(value) =
                    HeaderValue::try_from(headers::ratelimit(&config.names[index], &decision))
                {
                    headers.append(headers::RATELIMIT, value);
                }
            }
            if degraded {
                headers.insert(DEGRADED, HeaderValue::from_static("true"));
            }
            Ok(response)
        })
    }
}
