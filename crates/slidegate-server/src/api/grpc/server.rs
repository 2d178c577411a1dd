//! The rate limit service as a tower service of its own, in place of the
//! server tonic generates for it: the same one method
//! (`ShouldRateLimit`), decoded by prost as there, but answered with the
//! bytes the service wrote (see [`AnswerCodec`]) rather than with prost's
//! structures of the answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use slidegate::Store;
use tonic::codegen::{Body, BoxFuture, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::codec::{AnswerCodec, EncodedAnswer};
use super::health::SERVICE_NAME;
use super::service::RateLimitGrpc;

/// The path of the one method.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService` over gRPC.
pub struct RateLimitServer<S> {
    service: Arc<RateLimitGrpc<S>>,
    max_decoding_message_size: usize,
}

impl<S> RateLimitServer<S> {
    /// `service`, refusing a request message larger than
    /// `max_decoding_message_size` from its length prefix.
    pub fn new(service: RateLimitGrpc<S>, max_decoding_message_size: usize) -> Self {
        RateLimitServer {
            service: Arc::new(service),
            max_decoding_message_size,
        }
    }
}

impl<S> Clone for RateLimitServer<S> {
    fn clone(&self) -> Self {
        RateLimitServer {
            service: Arc::clone(&self.service),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<S> NamedService for RateLimitServer<S> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<S, B> tower::Service<http::Request<B>> for RateLimitServer<S>
where
    S: Store + 'static,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(std::future::ready(Ok(unimplemented())));
        }
        let method = ShouldRateLimit(Arc::clone(&self.service));
        let max_decoding_message_size = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(AnswerCodec)
                .apply_max_message_size_config(Some(max_decoding_message_size), None);
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// The answer to a method the service does not have, as tonic's generated
/// servers give it: UNIMPLEMENTED, no message.
fn unimplemented() -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::default());
    let headers = response.headers_mut();
    headers.insert(
        Status::GRPC_STATUS,
        http::HeaderValue::from(tonic::Code::Unimplemented as i32),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}

/// The `ShouldRateLimit` method, as tonic's unary calls take it.
pub struct ShouldRateLimit<S>(pub Arc<RateLimitGrpc<S>>);

impl<S: Store + 'static> UnaryService<RateLimitRequest> for ShouldRateLimit<S> {
    type Response = EncodedAnswer;
    type Future = BoxFuture<Response<EncodedAnswer>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let service = Arc::clone(&self.0);
        Box::pin(async move { service.should_rate_limit(request).await })
    }
}
