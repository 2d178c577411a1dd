//! Each gRPC call marked dispatched and answered on its connection's
//! [`ConnectionClock`](super::conn::ConnectionClock), so that the connection's phase (busy, idle) follows
//! its calls.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use super::conn::{ConnInfo, RequestGuard};

/// A tower layer that marks each request dispatched and answered on its
/// connection's [`ConnectionClock`](super::conn::ConnectionClock) (found in the request's [`ConnInfo`]). A
/// request is answered once its response body has ended (or was dropped):
/// a streaming call (the health service's `Watch`) keeps its connection
/// busy, never idle, while its stream is open.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrackRequests;

impl<S> tower::Layer<S> for TrackRequests {
    type Service = Tracked<S>;

    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked { inner }
    }
}

/// The service of [`TrackRequests`].
#[derive(Clone, Debug)]
pub struct Tracked<S> {
    inner: S,
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for Tracked<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<Tracking<ResBody>>;
    type Error = S::Error;
    type Future = TrackedCall<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<ConnInfo>()
            .map(|info| info.clock.request_started());
        TrackedCall {
            answer: self.inner.call(request),
            guard,
        }
    }
}

pin_project_lite::pin_project! {
    /// A call through [`Tracked`]: its answer, whose body then holds the
    /// request in flight. Unboxed: a call pays no allocation for it.
    pub struct TrackedCall<F> {
        #[pin]
        answer: F,
        guard: Option<RequestGuard>,
    }
}

impl<F, ResBody, E> Future for TrackedCall<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
{
    type Output = Result<http::Response<Tracking<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // On an error the guard goes when the call is dropped: answered.
        let answer = ready!(this.answer.poll(cx))?;
        let guard = this.guard.take();
        Poll::Ready(Ok(answer.map(|body| Tracking { body, guard })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its request in flight until it ends.
    pub struct Tracking<B> {
        #[pin]
        body: B,
        guard: Option<RequestGuard>,
    }
}

impl<B: hyper::body::Body> hyper::body::Body for Tracking<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        if frame.as_ref().is_none_or(Result::is_err) {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
