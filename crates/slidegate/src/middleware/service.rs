//! [`RateLimit`], the service, and its future.
//!
//! A request is decided before the inner service is called, on one of
//! three paths:
//!
//! - the [`MemoryStore`] decides synchronously;
//! - any other store gets one poll of its `acquire` future inside `call`;
//!   if it answers at once, fine;
//! - otherwise (a network store) the readied inner service moves into a
//!   boxed future that waits for the answer, and a clone stays behind.
//!
//! On the first two the inner service readied by `poll_ready` is called
//! right away: no clone of it and no boxed response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::ResponseBody;
use super::head::RequestHead;
use super::key::{KeyExtractor, KeyWriter, NoKey};
use super::response::{self, DEGRADED, Rejection};
use super::{MissingKey, OnStoreError};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::headers;
use crate::rate::Rule;
use crate::store::{MAX_KEY_LEN, Store};

pub(crate) type CostFn = dyn Fn(&RequestHead<'_>) -> u64 + Send + Sync;
pub(crate) type RejectionHook =
    dyn Fn(&Rejection<'_>, &RequestHead<'_>, Response<Bytes>) -> Response<Bytes> + Send + Sync;

/// A layer's configuration, shared by its services.
pub(crate) struct Config<St, K> {
    pub store: St,
    pub key: K,
    pub rules: Box<[Rule]>,
    pub names: Box<[Box<str>]>,
    pub min_limit: u64,
    pub policy_header: HeaderValue,
    pub cost: Option<Box<CostFn>>,
    pub missing_key: MissingKey,
    pub on_store_error: OnStoreError,
    pub headers_on_success: bool,
    pub prefix: Option<String>,
    pub on_rejection: Option<Box<RejectionHook>>,
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

/// What a request needs before the store is asked.
enum Prepared<'a> {
    /// Ask the store for `cost` units of `key`.
    Ask { key: String, cost: u64 },
    /// Decided without the store.
    Decided(Verdict<'a>),
}

/// The outcome of the checks made before the inner service is called.
enum Verdict<'a> {
    /// Call the inner service, then add these headers.
    Pass(Extra),
    /// Answer with this rejection.
    Reject(Rejection<'a>),
    /// The store failed and the policy denies.
    StoreDenied { error: Error, retry_after: Duration },
}

/// The headers added to a passed request's response.
#[derive(Debug, Default)]
struct Extra {
    /// `RateLimit-Policy` and `RateLimit`, with `headers_on_success`.
    ratelimit: Option<(HeaderValue, HeaderValue)>,
    degraded: bool,
}

impl Extra {
    fn apply<B>(self, response: &mut Response<B>) {
        let headers = response.headers_mut();
        if let Some((policy, state)) = self.ratelimit {
            // Appended: layers stacked on one route each add their policies.
            headers.append(headers::RATELIMIT_POLICY, policy);
            headers.append(headers::RATELIMIT, state);
        }
        if self.degraded {
            headers.insert(DEGRADED, HeaderValue::from_static("true"));
        }
    }
}

impl<St: Store, K: KeyExtractor> Config<St, K> {
    /// The store key of `request`: the prefix and the extracted parts.
    fn key(&self, request: &RequestHead<'_>) -> Result<String, NoKey> {
        let mut key = KeyWriter::with_capacity(48);
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

    /// Key and cost, or a verdict that needs no store.
    fn prepare(&self, request: &RequestHead<'_>) -> Prepared<'_> {
        let key = match self.key(request) {
            Ok(key) => key,
            Err(reason) => match self.missing_key {
                MissingKey::Allow => return Prepared::Decided(Verdict::Pass(Extra::default())),
                MissingKey::Shared => self.shared_key(),
                MissingKey::Reject(status) => {
                    return Prepared::Decided(Verdict::Reject(Rejection::MissingKey {
                        reason,
                        status,
                    }));
                }
            },
        };
        let cost = self.cost.as_ref().map_or(1, |cost| cost(request));
        if cost > self.min_limit {
            return Prepared::Decided(Verdict::Reject(Rejection::CostTooHigh {
                cost,
                limit: self.min_limit,
            }));
        }
        Prepared::Ask { key, cost }
    }

    /// The verdict on the store's answer.
    fn judge(&self, answer: Result<Decision>) -> Verdict<'_> {
        match answer {
            Ok(decision) if decision.allowed() => {
                let ratelimit = self
                    .headers_on_success
                    .then(|| {
                        let name = &self.names[self.deciding_rule(&decision)];
                        let state = HeaderValue::try_from(headers::ratelimit(name, &decision));
                        Some((self.policy_header.clone(), state.ok()?))
                    })
                    .flatten();
                Verdict::Pass(Extra {
                    ratelimit,
                    degraded: decision.degraded(),
                })
            }
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
            // Other errors (the store failed, or refused what it was given)
            // leave the request undecided: the failure policy applies.
            Err(error) => match self.on_store_error {
                OnStoreError::Allow => Verdict::Pass(Extra {
                    ratelimit: None,
                    degraded: true,
                }),
                OnStoreError::Deny { retry_after } => Verdict::StoreDenied { error, retry_after },
            },
        }
    }

    /// The rule a combined decision reports on. The store says only its
    /// limit, so rules sharing a limit are told apart by window: a denial
    /// never asks to wait longer than its rule's window.
    fn deciding_rule(&self, decision: &Decision) -> usize {
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

    /// The response to a rejection: the default one, through the hook.
    fn reject<B>(
        &self,
        rejection: &Rejection<'_>,
        request: &RequestHead<'_>,
    ) -> Response<ResponseBody<B>> {
        let cx = response::Context {
            grpc: response::grpc_content_type(request),
            policy_header: &self.policy_header,
        };
        let default = response::default_response(rejection, &cx);
        let response = match &self.on_rejection {
            Some(hook) => hook(rejection, request, default),
            None => default,
        };
        response.map(ResponseBody::rejection)
    }

    /// Acts on a verdict: calls `inner` with the request, or answers.
    fn act<S, ReqBody, ResBody>(
        &self,
        verdict: Verdict<'_>,
        inner: &mut S,
        request: Request<ReqBody>,
    ) -> Acted<S::Future, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        match verdict {
            Verdict::Pass(extra) => Acted::Called(inner.call(request), extra),
            Verdict::Reject(rejection) => {
                Acted::Answered(self.reject(&rejection, &RequestHead::from(&request)))
            }
            Verdict::StoreDenied { error, retry_after } => {
                let rejection = Rejection::StoreFailure {
                    error: &error,
                    retry_after,
                };
                Acted::Answered(self.reject(&rejection, &RequestHead::from(&request)))
            }
        }
    }
}

enum Acted<F, B> {
    Called(F, Extra),
    Answered(Response<ResponseBody<B>>),
}

/// The [`Service`] made by [`RateLimitLayer`](super::RateLimitLayer):
/// decides each request, then calls the inner service or answers itself.
pub struct RateLimit<S, St, K> {
    inner: S,
    config: Arc<Config<St, K>>,
}

impl<S, St, K> RateLimit<S, St, K> {
    pub(crate) fn new(inner: S, config: Arc<Config<St, K>>) -> Self {
        RateLimit { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
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

type BoxedResponse<B, E> =
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
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &*self.config;
        let (key, cost) = match config.prepare(&RequestHead::from(&request)) {
            Prepared::Ask { key, cost } => (key, cost),
            Prepared::Decided(verdict) => {
                return config.act(verdict, &mut self.inner, request).into();
            }
        };
        if let Some(answer) = decide_in_process(&config.store, &key, &config.rules, cost) {
            let verdict = config.judge(answer);
            return config.act(verdict, &mut self.inner, request).into();
        }
        let shared = Arc::clone(&self.config);
        let mut answer =
            Box::pin(async move { shared.store.acquire(&key, &shared.rules, cost).await });
        // A store that can answer at once does so on the first poll.
        if let Poll::Ready(answer) = answer
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            let verdict = config.judge(answer);
            return config.act(verdict, &mut self.inner, request).into();
        }
        // The store is waiting: the readied service goes into the future
        // (tower's rule: the one poll_ready readied is the one called), a
        // fresh clone stays behind for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let rest: BoxedResponse<ResBody, S::Error> = Box::pin(async move {
            let verdict = config.judge(answer.await);
            let (future, extra) = match config.act(verdict, &mut inner, request) {
                Acted::Called(future, extra) => (future, extra),
                Acted::Answered(response) => return Ok(response),
            };
            let mut response = future.await?.map(ResponseBody::inner);
            extra.apply(&mut response);
            Ok(response)
        });
        ResponseFuture {
            kind: Kind::Waiting { future: rest },
        }
    }
}

/// The decision, when the store can take it without waiting
/// ([`Store::acquire_now`]: the memory store, a cached denial): the layer
/// then answers without creating a future.
fn decide_in_process<St: Store + 'static>(
    store: &St,
    key: &str,
    rules: &[Rule],
    cost: u64,
) -> Option<Result<Decision>> {
    store.acquire_now(key, rules, cost)
}

pin_project! {
    /// The future of a [`RateLimit`] call.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // The inner service was called; its response gets `extra`.
        Called {
            #[pin]
            future: F,
            extra: Option<Extra>,
        },
        // The layer answered.
        Answered {
            response: Option<Response<ResponseBody<B>>>,
        },
        // The store had not answered yet when the request came.
        Waiting {
            future: BoxedResponse<B, E>,
        },
    }
}

impl<F, B, E> From<Acted<F, B>> for ResponseFuture<F, B, E> {
    fn from(acted: Acted<F, B>) -> Self {
        let kind = match acted {
            Acted::Called(future, extra) => Kind::Called {
                future,
                extra: Some(extra),
            },
            Acted::Answered(response) => Kind::Answered {
                response: Some(response),
            },
        };
        ResponseFuture { kind }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called { future, extra } => {
                let response = std::task::ready!(future.poll(cx))?;
                let mut response = response.map(ResponseBody::inner);
                if let Some(extra) = extra.take() {
                    extra.apply(&mut response);
                }
                Poll::Ready(Ok(response))
            }
            KindProj::Answered { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => panic!("ResponseFuture polled after completion"),
            },
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.kind {
            Kind::Called { .. } => "called",
            Kind::Answered { .. } => "answered",
            Kind::Waiting { .. } => "waiting for the store",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
