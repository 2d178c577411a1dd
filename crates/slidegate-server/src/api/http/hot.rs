//! The API as served ([`HttpApi`]): `POST /v1/acquire` and `GET /healthz`,
//! the routes nearly every request takes, answered before the router when
//! the method and the path match exactly; every other request goes to the
//! router, its 404s and 405s (with `Allow`) included.
//!
//! The router costs each request a lookup in its path tree, four
//! extensions (a map allocated per request: the original URI, the matched
//! path, the path's parameters) and a clone of the route's boxed service,
//! none of which these two handlers read. Nor do they go through axum's
//! handler machinery: `/v1/acquire` reads the body as the connection
//! gives it (not boxed into axum's body first) and borrows the state
//! (not a clone of its handles per request), and `/healthz` is answered
//! at once. They run behind the same [`guarded`] future as every route:
//! counted in flight, panics answered 500, the request deadline, the
//! JSON error bodies and `nosniff`.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use axum::routing::future::RouteFuture;
use futures_util::FutureExt;
use futures_util::future::{Either, Map};
use http::Method;
use slidegate::Store;
use tower::Service;

use super::layer::{ApiFuture, guarded};
use super::state::AppState;
use super::{acquire, ops};

/// A handler's answer as a service's.
type Answered = fn(Response) -> Result<Response, Infallible>;

/// A hot route's future: `/healthz`'s answer at once, or the acquire's
/// future, boxed (its type cannot be named).
type HotFuture = Either<
    Ready<Result<Response, Infallible>>,
    Map<Pin<Box<dyn Future<Output = Response> + Send>>, Answered>,
>;

/// The HTTP API: the hot routes, then the router.
pub struct HttpApi<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    state: AppState<S>,
    router: Router,
    /// Off while requests are traced: the router's layers carry the
    /// trace context, which the hot routes would skip.
    hot: bool,
}

impl<S> Clone for HttpApi<S> {
    fn clone(&self) -> Self {
        HttpApi {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: Store + 'static> HttpApi<S> {
    /// `router` (made of `state`) with the hot routes of `state` before it.
    pub(super) fn new(state: AppState<S>, router: Router, hot: bool) -> HttpApi<S> {
        HttpApi {
            inner: Arc::new(Inner { state, router, hot }),
        }
    }
}

/// A route answered before the router.
enum Hot {
    Acquire,
    Healthz,
}

fn hot_route(method: &Method, path: &str) -> Option<Hot> {
    match *method {
        Method::POST if path == "/v1/acquire" => Some(Hot::Acquire),
        Method::GET if path == "/healthz" => Some(Hot::Healthz),
        _ => None,
    }
}

impl<S, B> Service<http::Request<B>> for HttpApi<S>
where
    S: Store + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<ApiFuture<HotFuture>, RouteFuture<Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let hot = if self.inner.hot {
            hot_route(request.method(), request.uri().path())
        } else {
            None
        };
        let Some(hot) = hot else {
            return Either::Right(self.inner.router.clone().call(request.map(Body::new)));
        };
        Either::Left(guarded(|| match hot {
            Hot::Healthz => Either::Left(ready(Ok(ops::healthz_response()))),
            Hot::Acquire => {
                // The handler reads the body as it came and borrows the
                // state: no boxed body, no clone of the state's handles.
                let api = Arc::clone(&self.inner);
                let answer: Pin<Box<dyn Future<Output = Response> + Send>> =
                    Box::pin(async move { acquire::acquire_hot(&api.state, request).await });
                let answered: Answered = Ok;
                Either::Right(answer.map(answered))
            }
        }))
    }
}
