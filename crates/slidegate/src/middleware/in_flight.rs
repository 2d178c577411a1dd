//! [`InFlightLayer`]: at most `n` requests in flight per key, across every
//! process that shares the store (a [concurrency](crate::Algorithm::Concurrency)
//! rule held by a lease per request).
//!
//! A request takes a place before the inner service runs and holds it
//! until its response body ends. The place is given back on every path:
//! the body's end, the body dropped early (the client left), the inner
//! service's error, a panic inside it (the guard drops while unwinding),
//! or the response future dropped before it answered. A holder that dies
//! without any of these (the process killed) frees its place when the
//! lease's time runs out.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use super::body::RejectionBody;
use super::head::RequestHead;
use super::hold::{HeldBody, Holding, Place};
use super::key::{KeyExtractor, KeyWriter};
use crate::error::Result;
use crate::rate::{Rate, Rule};
use crate::store::contract::Store;

/// Limits the requests in flight per key: a place of a concurrency rule
/// held by each request until its response body ends or is dropped.
pub struct InFlightLayer<St, K> {
    shared: Arc<Shared<St, K>>,
}

struct Shared<St, K> {
    store: St,
    key: K,
    rule: Rule,
    lease: Duration,
}

impl<St, K> InFlightLayer<St, K> {
    /// At most `max_in_flight` requests per key of `key`, each holding its
    /// place for at most `lease` (the longest a request may take: past it,
    /// its place is freed even while it runs). [`Error::InvalidLimit`](crate::Error::InvalidLimit) or
    /// [`Error::InvalidWindow`](crate::Error::InvalidWindow) for a bound of 0 or a lease out of range.
    pub fn max_in_flight(store: St, key: K, max_in_flight: u64, lease: Duration) -> Result<Self> {
        let rule = Rule::new(Rate::new(max_in_flight, lease)?)
            .with_algorithm(crate::rate::Algorithm::Concurrency);
        Ok(InFlightLayer {
            shared: Arc::new(Shared {
                store,
                key,
                rule,
                lease,
            }),
        })
    }
}

impl<St, K> Clone for InFlightLayer<St, K> {
    fn clone(&self) -> Self {
        InFlightLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<St, K> fmt::Debug for InFlightLayer<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightLayer")
            .field("rule", &self.shared.rule)
            .field("lease", &self.shared.lease)
            .finish_non_exhaustive()
    }
}

impl<S, St, K> Layer<S> for InFlightLayer<St, K> {
    type Service = InFlight<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlight {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of an [`InFlightLayer`].
pub struct InFlight<S, St, K> {
    inner: S,
    shared: Arc<Shared<St, K>>,
}

impl<S: Clone, St, K> Clone for InFlight<S, St, K> {
    fn clone(&self) -> Self {
        InFlight {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = std::result::Result<T, E>> + Send + 'static>>;

impl<S, St, K, ReqBody, ResBody> Service<Request<ReqBody>> for InFlight<S, St, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: Store + 'static,
    K: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: RejectionBody + Send + 'static,
{
    type Response = Response<HeldBody<ResBody>>;
    type Error = S::Error;
    type Future = Boxed<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let mut writer = KeyWriter::new();
        let key = self
            .shared
            .key
            .extract(&RequestHead::from(&request), &mut writer)
            .map(|()| writer.as_str().to_owned());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let Ok(key) = key else {
                return Ok(answer(StatusCode::BAD_REQUEST, "no key for this request"));
            };
            let reserved = shared
                .store
                .reserve_lease(&key, &[shared.rule], 1, shared.lease)
                .await;
            let place = match reserved {
                Ok(lease) => match lease.into_id() {
                    Some(id) => Place::new(Arc::clone(&shared), |shared| &shared.store, id, key),
                    None => {
                        return Ok(answer(
                            StatusCode::TOO_MANY_REQUESTS,
                            "too many requests in flight for this key",
                        ));
                    }
                },
                // Never a pass without a place: the limit stays on.
                Err(error) => {
                    tracing::warn!(%error, "in-flight limit: no place could be taken");
                    return Ok(answer(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the rate limiter's store cannot be reached",
                    ));
                }
            };
            // An error or a panic of the inner service drops `place` here.
            let response = inner.call(request).await?;
            let holding = Holding {
                place: Some(place),
                budget: None,
            };
            Ok(response.map(|body| HeldBody::new(body, holding)))
        })
    }
}

fn answer<B: RejectionBody>(status: StatusCode, detail: &'static str) -> Response<HeldBody<B>> {
    let mut response = Response::new(HeldBody::new(
        B::from_rejection(Bytes::from_static(detail.as_bytes())),
        Holding::default(),
    ));
    *response.status_mut() = status;
    response
}

impl<S, St, K> fmt::Debug for InFlight<S, St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("rule", &self.shared.rule)
            .finish_non_exhaustive()
    }
}
