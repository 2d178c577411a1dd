//! The layer every API request goes through: it counts the request in
//! flight, gives a bare error response of the framework (404, 405, 408,
//! 413, 415) the API's JSON error body, and marks every answer
//! `X-Content-Type-Options: nosniff`, so that a browser never reads client
//! data in a JSON or text answer as HTML or script.
//!
//! One small service whose future wraps the inner one: axum's `from_fn`
//! and `map_response` would each clone the inner service and box a future
//! per request, on every route, `/healthz` included.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use http::HeaderValue;
use http::header::X_CONTENT_TYPE_OPTIONS;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::error::json_errors;
use crate::telemetry::metrics::{InFlight, Protocol};

/// Counts each API request in flight, gives the framework's bare error
/// responses the API's JSON error body, and marks every answer `nosniff`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApiLayer;

impl<S> Layer<S> for ApiLayer {
    type Service = Api<S>;

    fn layer(&self, inner: S) -> Api<S> {
        Api { inner }
    }
}

/// The service of [`ApiLayer`].
#[derive(Clone, Debug)]
pub struct Api<S> {
    inner: S,
}

impl<S> Service<Request> for Api<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ApiFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let in_flight = InFlight::start(Protocol::Http);
        ApiFuture {
            inner: self.inner.call(request),
            _in_flight: in_flight,
        }
    }
}

pin_project! {
    /// The future of [`Api`]: the request stays in flight until it is
    /// answered or dropped.
    pub struct ApiFuture<F> {
        #[pin]
        inner: F,
        _in_flight: InFlight,
    }
}

impl<F, E> Future for ApiFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = ready!(self.project().inner.poll(cx))?;
        let mut response = json_errors(response);
        response
            .headers_mut()
            .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        Poll::Ready(Ok(response))
    }
}
