//! The layer every API request goes through, and the only one: it counts
//! the request in flight, answers a handler that panics with a JSON 500,
//! answers a request not answered within [`REQUEST_TIMEOUT`] with a 408,
//! gives a bare error response of the framework (404, 405, 408, 413, 415)
//! the API's JSON error body, marks every answer `X-Content-Type-Options:
//! nosniff` (so that a browser never reads client data in a JSON or text
//! answer as HTML or script), and logs the server errors.
//!
//! One small service whose future wraps the inner one. Each layer axum
//! stacks on a router boxes every route's service once more, and so costs
//! each request a boxed future and a service clone; tower-http's
//! `CatchPanicLayer`, `TimeoutLayer` and `TraceLayer` were three of those,
//! the timeout also a timer registered and removed per request, the trace
//! a clock read and a wrapped body. Here a request answered on its first
//! poll (every in-process decision, `/healthz`) touches no timer and no
//! clock: the deadline is armed the first time the request waits.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::X_CONTENT_TYPE_OPTIONS;
use http::{HeaderValue, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower::{Layer, Service};

use super::error::{json_errors, panic_response};
use crate::telemetry::metrics::{InFlight, Protocol};

/// How long one request may take, body included, before a 408. It also
/// bounds how long a graceful shutdown waits for a slow client.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Counts each API request in flight, answers panics (500) and requests
/// past [`REQUEST_TIMEOUT`] (408), gives the framework's bare error
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
        guarded(|| self.inner.call(request))
    }
}

/// The future `start` returns, kept as [`Api`] keeps a service's: counted
/// in flight, its panics answered 500, its deadline, its answer finished.
pub(super) fn guarded<F>(start: impl FnOnce() -> F) -> ApiFuture<F> {
    let in_flight = InFlight::start(Protocol::Http);
    // A handler's code may run in `call` as well as in its future.
    let (inner, panicked) = match catch_unwind(AssertUnwindSafe(start)) {
        Ok(inner) => (Some(inner), None),
        Err(panic) => (None, Some(panic_response(panic))),
    };
    ApiFuture {
        inner,
        panicked,
        deadline: None,
        _in_flight: in_flight,
    }
}

pin_project! {
    /// The future of [`Api`]: the request stays in flight until it is
    /// answered or dropped.
    pub struct ApiFuture<F> {
        #[pin]
        inner: Option<F>,
        panicked: Option<Response>,
        // Armed the first time the request waits: from then on it has
        // `REQUEST_TIMEOUT`. The first poll follows the call at once, so
        // the bound is the one a timer started at the call would keep.
        #[pin]
        deadline: Option<Sleep>,
        _in_flight: InFlight,
    }
}

impl<F, E> Future for ApiFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(response) = this.panicked.take() {
            return Poll::Ready(Ok(finish(response)));
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            // Polled again after its answer: a caller's bug, not a panic here.
            return Poll::Ready(Ok(finish(
                StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            )));
        };
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(answer)) => {
                this.inner.set(None);
                return Poll::Ready(answer.map(finish));
            }
            Ok(Poll::Pending) => {}
            Err(panic) => {
                this.inner.set(None);
                return Poll::Ready(Ok(finish(panic_response(panic))));
            }
        }
        if this.deadline.is_none() {
            this.deadline.set(Some(tokio::time::sleep(REQUEST_TIMEOUT)));
        }
        if let Some(deadline) = this.deadline.as_pin_mut()
            && deadline.poll(cx).is_ready()
        {
            // The handler is dropped now, as a timeout layer would.
            this.inner.set(None);
            return Poll::Ready(Ok(finish(StatusCode::REQUEST_TIMEOUT.into_response())));
        }
        Poll::Pending
    }
}

/// What every answer gets: the JSON error body for a bare error status,
/// `nosniff`, and a log line for a server error.
fn finish(response: Response) -> Response {
    let mut response = json_errors(response);
    response
        .headers_mut()
        .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    log_failure(response.status());
    response
}

/// A server error's log line, but a 503 at DEBUG: it is the answer of a
/// store that is not ready, or of too many waiters, which the code that
/// answers it logs once in a while (`/readyz` is probed every few
/// seconds; an ERROR line per probe would bury the cause).
fn log_failure(status: StatusCode) {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => tracing::debug!(%status, "response failed"),
        status if status.is_server_error() => tracing::error!(%status, "response failed"),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use http::header::CONTENT_TYPE;
    use tower::ServiceExt;

    use super::*;

    fn request() -> Request {
        Request::new(Body::empty())
    }

    fn is_json_error(response: &Response, status: StatusCode) -> bool {
        response.status() == status
            && response
                .headers()
                .get(CONTENT_TYPE)
                .map(HeaderValue::as_bytes)
                == Some(b"application/json")
            && response
                .headers()
                .get(X_CONTENT_TYPE_OPTIONS)
                .map(HeaderValue::as_bytes)
                == Some(b"nosniff")
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_waits_is_answered_408_at_the_request_timeout_not_before() {
        let never =
            tower::service_fn(|_: Request| std::future::pending::<Result<Response, Infallible>>());
        let answer = tokio::spawn(ApiLayer.layer(never).oneshot(request()));
        tokio::time::sleep(REQUEST_TIMEOUT - Duration::from_millis(1)).await;
        assert!(!answer.is_finished(), "answered before the request timeout");
        tokio::time::sleep(Duration::from_millis(1)).await;
        let response = tokio::time::timeout(Duration::from_millis(1), answer)
            .await
            .expect("no answer at the request timeout")
            .unwrap()
            .unwrap();
        assert!(
            is_json_error(&response, StatusCode::REQUEST_TIMEOUT),
            "{response:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_waits_then_answers_gets_its_answer() {
        let slow = tower::service_fn(|_: Request| async {
            tokio::time::sleep(REQUEST_TIMEOUT / 2).await;
            Ok::<_, Infallible>(StatusCode::OK.into_response())
        });
        let response = ApiLayer.layer(slow).oneshot(request()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_handler_that_panics_in_its_future_is_answered_500() {
        let panics = tower::service_fn(|_: Request| async {
            if true {
                panic!("a handler's bug");
            }
            Ok::<_, Infallible>(StatusCode::OK.into_response())
        });
        let response = ApiLayer.layer(panics).oneshot(request()).await.unwrap();
        assert!(
            is_json_error(&response, StatusCode::INTERNAL_SERVER_ERROR),
            "{response:?}"
        );
    }

    #[tokio::test]
    async fn a_service_that_panics_in_its_call_is_answered_500() {
        let panics = tower::service_fn(
            |_: Request| -> std::future::Ready<Result<Response, Infallible>> {
                panic!("a service's bug")
            },
        );
        let response = ApiLayer.layer(panics).oneshot(request()).await.unwrap();
        assert!(
            is_json_error(&response, StatusCode::INTERNAL_SERVER_ERROR),
            "{response:?}"
        );
    }
}
