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
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::ResponseBody;
use super::head::RequestHead;
use super::key::{KeyExtractor, KeyWriter, NoKey};
use super::policies::PolicySet;
use super::response::{self, DEGRADED, Rejection};
use super::{MissingKey, OnStoreError};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::headers;
use crate::store::{Hit, MAX_KEY_LEN, Store};

pub(crate) type CostFn = dyn Fn(&RequestHead<'_>) -> u64 + Send + Sync;
pub(crate) type RejectionHook =
    dyn Fn(&Rejection<'_>, &RequestHead<'_>, Response<Bytes>) -> Response<Bytes> + Send + Sync;

/// A layer's configuration, shared by its services.
pub(crate) struct Config<St, K> {
    pub store: St,
    pub key: K,
    pub policies: PolicySet,
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
            .field("policies", &self.policies)
            .field("missing_key", &self.missing_key)
            .field("on_store_error", &self.on_store_error)
            .field("headers_on_success", &self.headers_on_success)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The store's answer: one decision per rule, in the order of the rules.
enum Decisions {
    /// A layer with one rule.
    One(Decision),
    /// A layer with several: one hit per rule in a batch.
    Each(Vec<Decision>),
}

impl Decisions {
    fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::One(decision) => std::slice::from_ref(decision),
            Decisions::Each(decisions) => decisions,
        }
    }
}

/// The denying decision that makes the client wait longest (the first of
/// equals), if any denied.
fn longest_wait(decisions: &[Decision]) -> Option<usize> {
    let mut longest: Option<usize> = None;
    for (i, decision) in decisions.iter().enumerate() {
        let longer = |l: usize| decision.retry_after() > decisions[l].retry_after();
        if !decision.allowed() && longest.is_none_or(longer) {
            longest = Some(i);
        }
    }
    longest
}

/// Rules up to this many are put in a batch without allocating.
const INLINE_RULES: usize = 4;

/// What a request needs before the store is asked.
enum Prepared {
    /// Ask the store for `cost` units of `key`.
    Ask { key: String, cost: u64 },
    /// Decided without the store.
    Decided(Verdict),
}

/// The outcome of the checks made before the inner service is called.
enum Verdict {
    /// Call the inner service, then add these headers.
    Pass(Extra),
    /// Answer without calling it.
    Refuse(Refusal),
}

/// Why a request is answered by the layer: what a [`Rejection`] borrows.
enum Refusal {
    /// Denied: `deciding` indexes the denying decision that makes the
    /// client wait longest.
    Limited {
        decisions: Decisions,
        deciding: usize,
    },
    CostTooHigh {
        cost: u64,
        limit: u64,
    },
    MissingKey {
        reason: NoKey,
        status: StatusCode,
    },
    StoreFailed {
        error: Error,
        retry_after: Duration,
    },
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
    fn prepare(&self, request: &RequestHead<'_>) -> Prepared {
        let key = match self.key(request) {
            Ok(key) => key,
            Err(reason) => match self.missing_key {
                MissingKey::Allow => return Prepared::Decided(Verdict::Pass(Extra::default())),
                MissingKey::Shared => self.shared_key(),
                MissingKey::Reject(status) => {
                    return Prepared::Decided(Verdict::Refuse(Refusal::MissingKey {
                        reason,
                        status,
                    }));
                }
            },
        };
        let cost = self.cost.as_ref().map_or(1, |cost| cost(request));
        let limit = self.policies.min_limit();
        if cost > limit {
            return Prepared::Decided(Verdict::Refuse(Refusal::CostTooHigh { cost, limit }));
        }
        Prepared::Ask { key, cost }
    }

    /// The decision, when the store can take it without waiting
    /// ([`Store::acquire_now`]: the memory store, a cached denial): the
    /// layer then answers without creating a future. Only for one rule:
    /// several are decided as a batch, to know each one's decision.
    fn decide_now(&self, key: &str, cost: u64) -> Option<Result<Decisions>> {
        let rules = self.policies.rules();
        if rules.len() > 1 {
            return None;
        }
        let answer = self.store.acquire_now(key, rules, cost)?;
        Some(answer.map(Decisions::One))
    }

    /// Asks the store: `acquire` for one rule; for several, a batch of one
    /// hit per rule on the same key, which is decided all or nothing just
    /// as `acquire` is, and answers for each rule.
    async fn ask(&self, key: &str, cost: u64) -> Result<Decisions> {
        let rules = self.policies.rules();
        let [first, ..] = rules else {
            return Err(Error::NoRules);
        };
        if rules.len() == 1 {
            return self
                .store
                .acquire(key, rules, cost)
                .await
                .map(Decisions::One);
        }
        let mut inline = [Hit::new(key, *first, cost); INLINE_RULES];
        let spilled: Vec<Hit<'_>>;
        let hits: &[Hit<'_>] = if rules.len() <= INLINE_RULES {
            for (hit, &rule) in inline.iter_mut().zip(rules) {
                hit.rule = rule;
            }
            &inline[..rules.len()]
        } else {
            spilled = rules
                .iter()
                .map(|&rule| Hit::new(key, rule, cost))
                .collect();
            &spilled
        };
        self.store.acquire_batch(hits).await.map(Decisions::Each)
    }

    /// The verdict on the store's answer.
    fn judge(&self, answer: Result<Decisions>) -> Verdict {
        match answer {
            Ok(decisions) if decisions.as_slice().len() != self.policies.len() => self
                .store_failed(Error::Store(format!(
                    "the store answered {} decisions for {} rules",
                    decisions.as_slice().len(),
                    self.policies.len()
                ))),
            Ok(decisions) => {
                let all = decisions.as_slice();
                if let Some(deciding) = longest_wait(all) {
                    return Verdict::Refuse(Refusal::Limited {
                        decisions,
                        deciding,
                    });
                }
                let ratelimit = self.headers_on_success.then(|| {
                    let policy = self.policies.policy_header().clone();
                    (policy, self.policies.ratelimit(all))
                });
                Verdict::Pass(Extra {
                    ratelimit,
                    degraded: all.iter().any(Decision::degraded),
                })
            }
            Err(Error::CostExceedsLimit { cost, limit }) => {
                Verdict::Refuse(Refusal::CostTooHigh { cost, limit })
            }
            Err(error) => self.store_failed(error),
        }
    }

    /// The verdict when the store failed, or refused what it was given:
    /// the request is undecided, and the failure policy applies.
    fn store_failed(&self, error: Error) -> Verdict {
        match self.on_store_error {
            OnStoreError::Allow => Verdict::Pass(Extra {
                ratelimit: None,
                degraded: true,
            }),
            OnStoreError::Deny { retry_after } => {
                Verdict::Refuse(Refusal::StoreFailed { error, retry_after })
            }
        }
    }

    /// What the rejection hook and the default response see of a refusal.
    fn rejection<'a>(&'a self, refusal: &'a Refusal) -> Rejection<'a> {
        match refusal {
            Refusal::Limited {
                decisions,
                deciding,
            } => self.rate_limited(decisions.as_slice(), *deciding),
            &Refusal::CostTooHigh { cost, limit } => Rejection::CostTooHigh { cost, limit },
            &Refusal::MissingKey { reason, status } => Rejection::MissingKey { reason, status },
            Refusal::StoreFailed { error, retry_after } => Rejection::StoreFailure {
                error,
                retry_after: *retry_after,
            },
        }
    }

    /// A denial: every policy's decision, and the one `Retry-After` follows.
    fn rate_limited<'a>(&'a self, decisions: &'a [Decision], deciding: usize) -> Rejection<'a> {
        let policies = self.policies.decisions(decisions);
        let mut decision = decisions[deciding];
        if decisions.iter().any(Decision::degraded) {
            decision = decision.into_degraded();
        }
        Rejection::RateLimited {
            decision,
            policy: &self.policies.names()[deciding],
            rule: self.policies.rules()[deciding],
            policies,
        }
    }

    /// The response to a refusal: the default one, through the hook.
    fn reject<B>(&self, refusal: &Refusal, request: &RequestHead<'_>) -> Response<ResponseBody<B>> {
        let rejection = self.rejection(refusal);
        let cx = response::Context {
            grpc: response::grpc_content_type(request),
            policy_header: self.policies.policy_header(),
        };
        let default = response::default_response(&rejection, &cx);
        let response = match &self.on_rejection {
            Some(hook) => hook(&rejection, request, default),
            None => default,
        };
        response.map(ResponseBody::rejection)
    }

    /// Acts on a verdict: calls `inner` with the request, or answers.
    fn act<S, ReqBody, ResBody>(
        &self,
        verdict: Verdict,
        inner: &mut S,
        request: Request<ReqBody>,
    ) -> Acted<S::Future, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        match verdict {
            Verdict::Pass(extra) => Acted::Called(inner.call(request), extra),
            Verdict::Refuse(refusal) => {
                Acted::Answered(self.reject(&refusal, &RequestHead::from(&request)))
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
        if let Some(answer) = config.decide_now(&key, cost) {
            let verdict = config.judge(answer);
            return config.act(verdict, &mut self.inner, request).into();
        }
        let shared = Arc::clone(&self.config);
        let mut answer = Box::pin(async move { shared.ask(&key, cost).await });
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
