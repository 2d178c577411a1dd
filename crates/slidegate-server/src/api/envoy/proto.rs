//! Envoy's rate limit service over gRPC:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as ProtoCode, DescriptorStatus as ProtoStatus, RateLimit as ProtoLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{self, ListValue, Struct, value::Kind};
use slidegate::Store;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use crate::api::envoy::headers::{self as envoy_headers, ResponseHeaders};
use crate::bounds::Bounds;
use crate::limiter::check::{CheckError, CheckRequest, CheckResponse, Code, DescriptorRequest};
use crate::rules::{RateLimitConfig, Unit};
use crate::telemetry::metrics::Protocol;

/// The gRPC service: the current config, a store, the bounds on requests
/// and the header fields its answers carry.
pub struct RateLimitGrpc<S> {
    config: Arc<ArcSwap<RateLimitConfig>>,
    store: S,
    bounds: Bounds,
    response_headers: ResponseHeaders,
}

impl<S> RateLimitGrpc<S> {
    /// A service deciding with `store` under whatever config `config` holds,
    /// within the default [`Bounds`].
    pub fn new(config: Arc<ArcSwap<RateLimitConfig>>, store: S) -> Self {
        RateLimitGrpc {
            config,
            store,
            bounds: Bounds::default(),
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
    pub fn with_bounds(mut self, bounds: Bounds) -> Self {
        self.bounds = bounds;
        self
    }
}

/// The metadata key that marks an answer made by a failure policy.
pub const DEGRADED_METADATA: &str = "x-slidegate-degraded";

#[tonic::async_trait]
impl<S: Store + 'static> RateLimitService for RateLimitGrpc<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let _in_flight = crate::telemetry::metrics::InFlight::start(Protocol::Grpc);
        let span = crate::spans::grpc_span(request.metadata());
        let request = from_proto(request.into_inner(), &self.bounds)?;
        // A guard, not a clone of the Arc: no write to the config's shared
        // count per call.
        let config = self.config.load();
        let checked = crate::spans::check(&config, &self.store, &request);
        let checked = match span {
            Some(span) => tracing::Instrument::instrument(checked, span).await,
            None => checked.await,
        };
        match checked {
            Ok(response) => {
                crate::telemetry::metrics::check_decisions(&request.domain, &response);
                crate::telemetry::stats::global().record_check(&request, &response);
                let mut proto = to_proto(&response);
                proto.response_headers_to_add =
                    envoy_headers::fields(self.response_headers, &request.domain, &response)
                        .into_iter()
                        .map(|(key, value)| HeaderValue {
                            key: key.to_owned(),
                            value,
                            ..HeaderValue::default()
                        })
                        .collect();
                let mut answer = Response::new(proto);
                if response.degraded {
                    answer
                        .metadata_mut()
                        .insert(DEGRADED_METADATA, MetadataValue::from_static("true"));
                }
                Ok(answer)
            }
            Err(error) => Err(status_of(&error)),
        }
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

/// Envoy's request, in the service's terms, once its shape is within
/// `bounds` (checked before anything else is read).
pub fn from_proto(request: RateLimitRequest, bounds: &Bounds) -> Result<CheckRequest, Status> {
    bounds
        .check_descriptors(
            request.descriptors.len(),
            request.descriptors.iter().map(|d| d.entries.len()),
        )
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(i, d)| descriptor_from_proto(i, d))
        .collect::<Result<_, _>>()?;
    Ok(CheckRequest {
        domain: request.domain,
        descriptors,
        hits_addend: u64::from(request.hits_addend),
    })
}

fn descriptor_from_proto(
    index: usize,
    d: RateLimitDescriptor,
) -> Result<DescriptorRequest, Status> {
    if d.is_negative_hits {
        return Err(Status::invalid_argument(format!(
            "descriptor {index}: negative hits are not supported (an exact log cannot give admissions back)"
        )));
    }
    let limit_override = d
        .limit
        .map(|l| {
            let unit = ProtoUnit::try_from(l.unit)
                .ok()
                .and_then(unit_from_proto)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "descriptor {index}: unknown limit override unit {}",
                        l.unit
                    ))
                })?;
            Ok::<_, Status>((u64::from(l.requests_per_unit), unit))
        })
        .transpose()?;
    Ok(DescriptorRequest {
        entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
        hits_addend: d.hits_addend.map(|h| h.value),
        limit_override,
    })
}

pub(crate) fn unit_from_proto(unit: ProtoUnit) -> Option<Unit> {
    Some(match unit {
        ProtoUnit::Unknown => return None,
        ProtoUnit::Second => Unit::Second,
        ProtoUnit::Minute => Unit::Minute,
        ProtoUnit::Hour => Unit::Hour,
        ProtoUnit::Day => Unit::Day,
        ProtoUnit::Week => Unit::Week,
        ProtoUnit::Month => Unit::Month,
        ProtoUnit::Year => Unit::Year,
    })
}

pub(crate) fn unit_to_proto(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
        // A window that is no unit: the proto has no field for it.
        Unit::Window(_) => ProtoUnit::Unknown,
    }
}

fn code_to_proto(code: Code) -> ProtoCode {
    match code {
        Code::Ok => ProtoCode::Ok,
        Code::OverLimit => ProtoCode::OverLimit,
    }
}

/// The service's answer, as Envoy expects it.
pub fn to_proto(response: &CheckResponse) -> RateLimitResponse {
    let statuses = response
        .statuses
        .iter()
        .map(|s| ProtoStatus {
            code: code_to_proto(s.code) as i32,
            current_limit: s.current_limit.as_ref().map(|l| ProtoLimit {
                name: l.name.clone().unwrap_or_default(),
                requests_per_unit: u32::try_from(l.requests_per_unit).unwrap_or(u32::MAX),
                unit: unit_to_proto(l.unit) as i32,
            }),
            limit_remaining: u32::try_from(s.limit_remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(duration_to_proto(s.duration_until_reset)),
            quota: None,
        })
        .collect();
    RateLimitResponse {
        overall_code: code_to_proto(response.overall) as i32,
        statuses,
        dynamic_metadata: response
            .quota_mode
            .then(|| quota_metadata(&response.quota_violations)),
        ..RateLimitResponse::default()
    }
}

fn duration_to_proto(d: Duration) -> protobuf::Duration {
    protobuf::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// `quotaModeEnabled` and `quotaModeViolations` (descriptor indices), as
/// envoyproxy/ratelimit reports soft quotas.
fn quota_metadata(violations: &[usize]) -> Struct {
    let number = |n: f64| protobuf::Value {
        kind: Some(Kind::NumberValue(n)),
    };
    let mut fields = std::collections::HashMap::new();
    fields.insert(
        "quotaModeEnabled".to_owned(),
        protobuf::Value {
            kind: Some(Kind::BoolValue(true)),
        },
    );
    fields.insert(
        "quotaModeViolations".to_owned(),
        protobuf::Value {
            kind: Some(Kind::ListValue(ListValue {
                values: violations.iter().map(|&i| number(i as f64)).collect(),
            })),
        },
    );
    Struct {
        fields: fields.into_iter().collect(),
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
}
