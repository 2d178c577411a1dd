//! The rate limit service as a tower service of its own, in place of the
//! server tonic generates for it: the same one method
//! (`ShouldRateLimit`), but its request read straight into the limiter's
//! check and its answer the bytes the service wrote (see [`AnswerCodec`]),
//! rather than prost's structures of either.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use slidegate::Store;
use tonic::codegen::{Body, BoxFuture, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::codec::{AnswerCodec, EncodedAnswer};
use super::health::SERVICE_NAME;
use super::service::RateLimitGrpc;
use crate::limiter::check::CheckRequest;

/// The path of the one method.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

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
        self.answer(request)
    }
}

impl<S: Store + 'static> RateLimitServer<S> {
    /// The answer to `request`: `ShouldRateLimit`'s, or UNIMPLEMENTED for
    /// any other path.
    pub fn answer<B>(
        &self,
        request: http::Request<B>,
    ) -> BoxFuture<http::Response<tonic::body::Body>, Infallible>
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(std::future::ready(Ok(unimplemented())));
        }
        let method = should_rate_limit(Arc::clone(&self.service));
        let codec = AnswerCodec::new(*self.service.bounds());
        let max_decoding_message_size = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(codec)
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

/// The `ShouldRateLimit` method of `service`, as tonic's unary calls take
/// it: its future is held in the call's own, not boxed apart (a box of
/// more than a kilobyte, which the allocator serves off its fast path).
pub fn should_rate_limit<S: Store + 'static>(
    service: Arc<RateLimitGrpc<S>>,
) -> impl UnaryService<
    CheckRequest,
    Response = EncodedAnswer,
    Future = impl Future<Output = Result<Response<EncodedAnswer>, Status>> + Send,
> + Send {
    Method(move |request| {
        let service = Arc::clone(&service);
        async move { service.should_rate_limit(request).await }
    })
}

/// A unary method answered by the future its function makes: a type that
/// names the future (an async block's, which has no name of its own), so
/// that tonic holds it inline.
struct Method<F>(F);

impl<F, Fut> UnaryService<CheckRequest> for Method<F>
where
    F: FnMut(Request<CheckRequest>) -> Fut,
    Fut: Future<Output = Result<Response<EncodedAnswer>, Status>>,
{
    type Response = EncodedAnswer;
    type Future = Fut;

    fn call(&mut self, request: Request<CheckRequest>) -> Fut {
        (self.0)(request)
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
    use http_body_util::{BodyExt, Full};
    use prost::Message;
    use prost::bytes::Bytes;
    use slidegate::MemoryStore;
    use tower::ServiceExt;

    use super::*;
    use crate::limiter::Limiter;
    use crate::rules::{CurrentConfig, LoadOptions, RateLimitConfig};
    use crate::telemetry::Telemetry;

    const RULES: &str = "\
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
";

    const MAX_MESSAGE_BYTES: usize = 256;

    fn server() -> RateLimitServer<MemoryStore> {
        let config = RateLimitConfig::from_sources(
            &[("rules.yaml".into(), RULES.into())],
            LoadOptions::default(),
        )
        .expect("the rules load");
        let limiter = Limiter::new(
            MemoryStore::new(),
            CurrentConfig::new(config),
            Arc::new(Telemetry::new()),
        );
        RateLimitServer::new(RateLimitGrpc::new(limiter), MAX_MESSAGE_BYTES)
    }

    fn request(value: &str) -> RateLimitRequest {
        RateLimitRequest {
            domain: "api".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "remote_address".into(),
                    value: value.into(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        }
    }

    /// `message` in one uncompressed gRPC frame.
    fn frame(message: &[u8]) -> Bytes {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        bytes.extend_from_slice(message);
        bytes.into()
    }

    /// The call's gRPC status (from its headers when it has no message, its
    /// trailers otherwise) and its message's bytes.
    async fn call(path: &str, body: Bytes) -> (i32, Vec<u8>) {
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .body(Full::new(body))
            .expect("a request");
        let Ok(response) = server().oneshot(request).await;
        let status_in = |headers: &http::HeaderMap| {
            headers
                .get(Status::GRPC_STATUS)
                .map(|s| s.to_str().expect("ASCII").parse::<i32>().expect("a code"))
        };
        let in_headers = status_in(response.headers());
        let body = response.into_body().collect().await.expect("the body");
        let in_trailers = body.trailers().and_then(status_in);
        let bytes = body.to_bytes();
        let message = if bytes.is_empty() {
            Vec::new()
        } else {
            bytes[5..].to_vec()
        };
        let status = in_headers.or(in_trailers).expect("a grpc-status");
        (status, message)
    }

    #[tokio::test]
    async fn should_rate_limit_is_answered_with_the_encoded_answer() {
        let message = request("10.0.0.1").encode_to_vec();
        let (status, answer) = call(SHOULD_RATE_LIMIT, frame(&message)).await;
        assert_eq!(status, tonic::Code::Ok as i32);
        let answer = RateLimitResponse::decode(answer.as_slice()).expect("the answer decodes");
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert_eq!(answer.statuses.len(), 1);
    }

    #[tokio::test]
    async fn another_method_is_unimplemented() {
        let message = request("10.0.0.1").encode_to_vec();
        let path = "/envoy.service.ratelimit.v3.RateLimitService/Other";
        let (status, answer) = call(path, frame(&message)).await;
        assert_eq!(status, tonic::Code::Unimplemented as i32);
        assert!(answer.is_empty());
    }

    /// A message over the bound is refused from its frame's length prefix
    /// (OUT_OF_RANGE), one within it decided.
    #[tokio::test]
    async fn a_message_over_the_bound_is_out_of_range() {
        let long = request(&"x".repeat(MAX_MESSAGE_BYTES)).encode_to_vec();
        assert!(long.len() > MAX_MESSAGE_BYTES);
        let (status, _) = call(SHOULD_RATE_LIMIT, frame(&long)).await;
        assert_eq!(status, tonic::Code::OutOfRange as i32);
        let within = request(&"x".repeat(MAX_MESSAGE_BYTES - 40)).encode_to_vec();
        assert!(within.len() <= MAX_MESSAGE_BYTES);
        let (status, _) = call(SHOULD_RATE_LIMIT, frame(&within)).await;
        assert_eq!(status, tonic::Code::Ok as i32);
    }

    /// A message prost cannot decode (a length past its end, a domain
    /// that is not UTF-8) is refused as tonic's generated server refuses
    /// it (INTERNAL), never answered.
    #[tokio::test]
    async fn a_message_prost_cannot_decode_is_refused() {
        for message in [&[0x0a, 0xff][..], &[0x0a, 0x01, 0xff]] {
            let (status, answer) = call(SHOULD_RATE_LIMIT, frame(message)).await;
            assert_eq!(status, tonic::Code::Internal as i32, "{message:02x?}");
            assert!(answer.is_empty());
        }
    }

    /// A well-formed request that is no valid check is INVALID_ARGUMENT,
    /// as the service answered it when prost had decoded it.
    #[tokio::test]
    async fn an_invalid_check_is_an_invalid_argument() {
        let mut negative = request("10.0.0.1");
        negative.descriptors[0].is_negative_hits = true;
        let (status, answer) = call(SHOULD_RATE_LIMIT, frame(&negative.encode_to_vec())).await;
        assert_eq!(status, tonic::Code::InvalidArgument as i32);
        assert!(answer.is_empty());
    }
}
