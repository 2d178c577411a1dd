//! [`RateLimit`], the service, and its future.
//!
//! A request is decided before the inner service is called, on one of
//! three paths:
//!
//! - the store decides at once ([`Store::acquire_now`]: the memory store,
//!   a cached denial; one rule);
//! - otherwise the store's future gets one poll inside `call`; if it
//!   answers then (the memory store deciding several rules), fine;
//! - otherwise (a network store) the readied inner service moves into a
//!   boxed future that waits for the answer, and a clone stays behind.
//!
//! On the first two the inner service readied by `poll_ready` is called
//! right away: no clone of it and no boxed response future. The response
//! keeps the inner service's body type ([`RejectionBody`]), so nothing is
//! wrapped or boxed on the way out either.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::RejectionBody;
use super::decide::{Config, Extra, Prepared, Verdict};
use super::head::RequestHead;
use super::hold::ReportedCost;
use super::key::{KeyExtractor, ThreadKey};
use super::leased;
use super::policies::PolicySet;
use crate::store::contract::Store;

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

type BoxedResponse<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send + 'static>>;

impl<S, St, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, St, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    St: Store + 'static,
    K: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: RejectionBody + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &*self.config;
        let (verdict, own) = {
            let mut key = ThreadKey::take();
            match config.prepare(&RequestHead::from(&request), &mut key) {
                Prepared::Decided(verdict) => (verdict, None),
                Prepared::Ask { cost, policies } if config.leases.is_some() => {
                    let key = key.as_str().to_owned();
                    return self.ask_leased(key, cost, policies, request);
                }
                Prepared::Ask { cost, policies } => {
                    let now =
                        config.decide_now(key.as_str(), cost, config.policies(policies.as_deref()));
                    match now {
                        Some(answer) => (
                            config.judge(answer, config.policies(policies.as_deref())),
                            policies,
                        ),
                        None => {
                            let key = key.as_str().to_owned();
                            return self.ask(key, cost, policies, request);
                        }
                    }
                }
            }
            // The key buffer is given back here, before the inner service
            // runs: a layer inside this one takes it next.
        };
        self.act(verdict, request, own.as_deref())
    }
}

impl<S, St: Store + 'static, K: KeyExtractor> RateLimit<S, St, K> {
    /// Calls the inner service with the request, or answers.
    fn act<ReqBody, ResBody>(
        &mut self,
        verdict: Verdict,
        request: Request<ReqBody>,
        own: Option<&PolicySet>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: RejectionBody,
    {
        let kind = match verdict {
            Verdict::Pass(extra) => Kind::Called {
                future: self.inner.call(request),
                extra,
            },
            Verdict::Refuse(refusal) => Kind::Answered {
                response: Some(self.config.reject(
                    &refusal,
                    &RequestHead::from(&request),
                    self.config.policies(own),
                )),
            },
        };
        ResponseFuture { kind }
    }

    /// Asks the store for `cost` units of `key` when it cannot answer at
    /// once.
    fn ask<ReqBody, ResBody>(
        &mut self,
        key: String,
        cost: u64,
        own: Option<Arc<PolicySet>>,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        ReqBody: Send + 'static,
        ResBody: RejectionBody + Send + 'static,
    {
        let shared = Arc::clone(&self.config);
        let asked = own.clone();
        let mut answer = Box::pin(async move {
            let set = shared.policies(asked.as_deref());
            shared.ask(&key, cost, set).await
        });
        // A store that can answer at once does so on the first poll.
        if let Poll::Ready(answer) = answer
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            let verdict = self
                .config
                .judge(answer, self.config.policies(own.as_deref()));
            return self.act(verdict, request, own.as_deref());
        }
        // The store is waiting: the readied service goes into the future
        // (tower's rule: the one poll_ready readied is the one called), a
        // fresh clone stays behind for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let rest: BoxedResponse<ResBody, S::Error> = Box::pin(async move {
            let set = config.policies(own.as_deref());
            match config.judge(answer.await, set) {
                Verdict::Pass(extra) => {
                    let mut response = inner.call(request).await?;
                    extra.apply(&mut response);
                    Ok(response)
                }
                Verdict::Refuse(refusal) => {
                    Ok(config.reject(&refusal, &RequestHead::from(&request), set))
                }
            }
        });
        ResponseFuture {
            kind: Kind::Waiting { future: rest },
        }
    }
}

impl<S, St: Store + 'static, K: KeyExtractor> RateLimit<S, St, K> {
    /// Decides with the layer's leases (a place in flight, a reserved
    /// budget), calls the inner service, and hands what was taken to the
    /// response body, which holds it until it ends.
    fn ask_leased<ReqBody, ResBody>(
        &mut self,
        key: String,
        cost: u64,
        own: Option<Arc<PolicySet>>,
        mut request: Request<ReqBody>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        ReqBody: Send + 'static,
        ResBody: RejectionBody + Send + 'static,
    {
        // Tower's rule: the service poll_ready readied is the one called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let rest: BoxedResponse<ResBody, S::Error> = Box::pin(async move {
            let Some(options) = &config.leases else {
                unreachable!("ask_leased is called for a layer with leases")
            };
            let set = config.policies(own.as_deref());
            let reported = ReportedCost::new();
            let leased = leased::decide(&config, options, &key, cost, set, &reported).await;
            let mut holding = leased.holding;
            match leased.verdict {
                Verdict::Pass(extra) => {
                    request.extensions_mut().insert(reported);
                    // A panic in there drops `holding` while unwinding.
                    let mut response = match inner.call(request).await {
                        Ok(response) => response,
                        Err(error) => {
                            holding.failed();
                            return Err(error);
                        }
                    };
                    extra.apply(&mut response);
                    holding.read_report(response.extensions());
                    Ok(response.map(|body| body.hold(holding)))
                }
                Verdict::Refuse(refusal) => {
                    let set = match &options.in_flight {
                        Some(in_flight) if leased.by_in_flight => &in_flight.policies,
                        _ => set,
                    };
                    Ok(config.reject(&refusal, &RequestHead::from(&request), set))
                }
            }
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
            extra: Extra,
        },
        // The layer answered.
        Answered {
            response: Option<Response<B>>,
        },
        // The store had not answered yet when the request came.
        Waiting {
            future: BoxedResponse<B, E>,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called { future, extra } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                std::mem::take(extra).apply(&mut response);
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
