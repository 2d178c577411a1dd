//! Envoy's rate limit service over gRPC:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use slidegate::Store;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use super::codec::EncodedAnswer;
use crate::api::envoy::answer::encode_answer;
use crate::api::envoy::headers::{self, ResponseHeaders};
use crate::api::envoy::reuse;
use crate::bounds::RequestBounds;
use crate::limiter::Limiter;
use crate::limiter::check::{CheckError, CheckRequest};
use crate::telemetry::metrics::{InFlight, Protocol};

/// The metadata key that marks an answer made by a failure policy.
pub const DEGRADED_METADATA: &str = "x-slidegate-degraded";

/// The gRPC service: the limiter, the bounds on requests and the header
/// fields its answers carry.
pub struct RateLimitGrpc<S> {
    limiter: Limiter<S>,
    bounds: RequestBounds,
    response_headers: ResponseHeaders,
}

impl<S> RateLimitGrpc<S> {
    /// A service deciding with `limiter`, within the default
    /// [`RequestBounds`], with no header fields.
    pub fn new(limiter: Limiter<S>) -> Self {
        RateLimitGrpc {
            limiter,
            bounds: RequestBounds::default(),
            response_headers: ResponseHeaders::Off,
        }
    }

    /// Answers carry these rate limit header fields in
    /// `response_headers_to_add`.
    pub fn with_response_headers(mut self, mode: ResponseHeaders) -> Self {
        self.response_headers = mode;
        self
    }

    /// Refuses requests beyond `bounds`.
    pub fn with_bounds(mut self, bounds: RequestBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// The bounds its requests are read within (see
    /// [`AnswerCodec`](super::codec::AnswerCodec)).
    pub fn bounds(&self) -> &RequestBounds {
        &self.bounds
    }
}

/// Room for an answer's usual bytes: about 30 a status (more with a named
/// limit), and the header fields.
const STATUS_BYTES: usize = 40;

impl<S: Store + 'static> RateLimitGrpc<S> {
    /// Envoy's `ShouldRateLimit`, its request already read within the
    /// bounds: the answer as the protobuf bytes of a `RateLimitResponse`,
    /// or the gRPC status of a bad request or a failed check (see
    /// [`status_of`]).
    pub async fn should_rate_limit(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<EncodedAnswer>, Status> {
        let _in_flight = InFlight::start(Protocol::Grpc);
        let span = crate::spans::grpc_span(request.metadata());
        let request = request.into_inner();
        // A guard, not a clone of the Arc: no write to the config's shared
        // count per call.
        let config = self.limiter.config().load();
        let checked = self.limiter.check(&config, &request);
        let checked = match span {
            Some(span) => tracing::Instrument::instrument(checked, span).await,
            None => checked.await,
        };
        let response = checked.map_err(|error| status_of(&error))?;
        let fields = headers::fields(self.response_headers, &request.domain, &response);
        let header_bytes: usize = fields.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
        let mut bytes =
            Vec::with_capacity(8 + STATUS_BYTES * response.statuses.len() + header_bytes);
        encode_answer(&response, &fields, &mut bytes);
        drop(fields);
        // Its buffers are the next check's on this thread.
        reuse::give(request);
        let mut answer = Response::new(EncodedAnswer::new(bytes));
        if response.degraded {
            answer
                .metadata_mut()
                .insert(DEGRADED_METADATA, MetadataValue::from_static("true"));
        }
        Ok(answer)
    }
}

/// The gRPC status of a failed check: `UNAVAILABLE` when the store failed
/// (Envoy's `failure_mode_deny` then decides), `FAILED_PRECONDITION` when
/// one of the request's keys holds a value slidegate did not write (see
/// [`slidegate::Error::KeyConflict`]), `INVALID_ARGUMENT` for bad input.
pub fn status_of(error: &CheckError) -> Status {
    match error {
        CheckError::Store(e) if e.is_store_failure() => Status::unavailable(e.to_string()),
        // The request is fine; the state stored at one of its keys is not.
        CheckError::Store(e @ slidegate::Error::KeyConflict { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        other => Status::invalid_argument(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_say_whose_fault_a_failed_check_is() {
        let status = |e: slidegate::Error| status_of(&CheckError::Store(e)).code();
        assert_eq!(
            status(slidegate::Error::Store("refused".into())),
            tonic::Code::Unavailable
        );
        assert_eq!(
            status(slidegate::Error::KeyConflict {
                key: "k".into(),
                detail: "holds a list".into()
            }),
            tonic::Code::FailedPrecondition
        );
        assert_eq!(
            status(slidegate::Error::InvalidKey("empty".into())),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn too_many_rules_is_an_invalid_argument_over_grpc() {
        let error = CheckError::Store(slidegate::Error::TooManyRules { max: 16 });
        assert_eq!(status_of(&error).code(), tonic::Code::InvalidArgument);
    }
}
