//! A few gRPC methods served ahead of tonic's router: their calls go
//! straight to their service, where tonic's [`Routes`](tonic::service::Routes) (an
//! axum router) would match the path in its tree, insert the path's
//! parameters, the matched route and the original URI into the request's
//! extensions, clone a boxed route and poll the call through three more
//! futures: about 4,600 instructions of a `ShouldRateLimit` call or a
//! health `Check`. Every other path (the health service's `Watch`) goes
//! through the router as before, at the price of a comparison of the path
//! with each direct one.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::BoxFuture;

/// What the method's service is called with: the request, its answer.
pub type DirectCall =
    Arc<dyn Fn(http::Request<Body>) -> BoxFuture<http::Response<Body>, Infallible> + Send + Sync>;

/// A tower layer that answers the calls to each of its paths with that
/// path's service and hands every other request to the service it wraps.
#[derive(Clone)]
pub struct Direct {
    /// Compared in order: the busiest path first.
    methods: Arc<[(&'static str, DirectCall)]>,
}

impl Direct {
    /// Calls to `path` (the whole `/package.Service/Method`) answered by
    /// `call`.
    pub fn new(path: &'static str, call: DirectCall) -> Self {
        Direct {
            methods: Arc::new([(path, call)]),
        }
    }

    /// Calls to `path` answered by `call` too, after the paths before it.
    pub fn with(self, path: &'static str, call: DirectCall) -> Self {
        let methods = self.methods.iter().cloned().chain([(path, call)]).collect();
        Direct { methods }
    }
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let paths: Vec<&str> = self.methods.iter().map(|(path, _)| *path).collect();
        f.debug_struct("Direct").field("paths", &paths).finish()
    }
}

impl<S> tower::Layer<S> for Direct {
    type Service = DirectOr<S>;

    fn layer(&self, inner: S) -> DirectOr<S> {
        DirectOr {
            direct: self.clone(),
            inner,
        }
    }
}

/// The service of [`Direct`].
#[derive(Clone, Debug)]
pub struct DirectOr<S> {
    direct: Direct,
    inner: S,
}

impl<S> tower::Service<http::Request<Body>> for DirectOr<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = DirectFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path();
        match self
            .direct
            .methods
            .iter()
            .find(|(direct, _)| *direct == path)
        {
            Some((_, call)) => DirectFuture::Direct {
                answer: call(request),
            },
            None => DirectFuture::Routed {
                answer: self.inner.call(request),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// A call through [`DirectOr`]: answered by the direct service or by
    /// the router (each variant's `answer`).
    // pin-project-lite takes no attributes on a variant's fields.
    #[allow(missing_docs)]
    #[project = DirectFutureProjection]
    pub enum DirectFuture<F> {
        /// Answered by the direct service.
        Direct {
            answer: BoxFuture<http::Response<Body>, Infallible>,
        },
        /// Answered by the router.
        Routed {
            #[pin]
            answer: F,
        },
    }
}

impl<F> Future for DirectFuture<F>
where
    F: Future<Output = Result<http::Response<Body>, Infallible>>,
{
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DirectFutureProjection::Direct { answer } => answer.as_mut().poll(cx),
            DirectFutureProjection::Routed { answer } => answer.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use tower::{Layer, ServiceExt};

    use super::*;

    /// An answer marked with who made it.
    fn marked(by: &'static str) -> http::Response<Body> {
        let mut response = http::Response::new(Body::default());
        response
            .headers_mut()
            .insert("by", http::HeaderValue::from_static(by));
        response
    }

    async fn answered_by(path: &str) -> String {
        let direct = Direct::new(
            "/pkg.Service/Method",
            Arc::new(|_| Box::pin(std::future::ready(Ok(marked("direct"))))),
        )
        .with(
            "/pkg.Other/Check",
            Arc::new(|_| Box::pin(std::future::ready(Ok(marked("second"))))),
        );
        let router = tower::service_fn(|_: http::Request<Body>| {
            std::future::ready(Ok::<_, Infallible>(marked("router")))
        });
        let request = http::Request::builder()
            .uri(path)
            .body(Body::default())
            .unwrap();
        let response = direct.layer(router).oneshot(request).await.unwrap();
        response.headers()["by"].to_str().unwrap().to_owned()
    }

    /// Each direct path goes to its own service, every other one (another
    /// method of the same service too) to the router.
    #[tokio::test]
    async fn only_the_direct_paths_skip_the_router() {
        assert_eq!(answered_by("/pkg.Service/Method").await, "direct");
        assert_eq!(answered_by("/pkg.Other/Check").await, "second");
        assert_eq!(answered_by("/pkg.Other/Watch").await, "router");
        assert_eq!(answered_by("/pkg.Service/Other").await, "router");
        assert_eq!(answered_by("/pkg.Service/Method/more").await, "router");
        assert_eq!(answered_by("/grpc.health.v1.Health/Check").await, "router");
    }
}
