//! Envoy's `RateLimitRequest` and `RateLimitResponse` (protobuf, as gRPC
//! carries them) in the limiter's terms.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as ProtoCode, DescriptorStatus as ProtoStatus, RateLimit as ProtoLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{self, ListValue, Struct, value::Kind};

use super::request::{DescriptorParts, InvalidCheck, WireDescriptor, check_request};
use super::units::unit_to_proto;
use crate::bounds::RequestBounds;
use crate::limiter::check::{CheckRequest, CheckResponse, Code};

impl WireDescriptor for RateLimitDescriptor {
    fn entry_count(&self) -> usize {
        self.entries.len()
    }

    fn into_parts(self) -> DescriptorParts {
        DescriptorParts {
            entries: self.entries.into_iter().map(|e| (e.key, e.value)).collect(),
            limit: self.limit.map(|l| (u64::from(l.requests_per_unit), l.unit)),
            hits_addend: self.hits_addend.map(|h| h.value),
            is_negative_hits: self.is_negative_hits,
        }
    }
}

/// Envoy's request, in the limiter's terms, once its shape is within
/// `bounds` (checked before anything else is read).
pub fn from_proto(
    request: RateLimitRequest,
    bounds: &RequestBounds,
) -> Result<CheckRequest, InvalidCheck> {
    check_request(
        request.domain,
        request.descriptors,
        u64::from(request.hits_addend),
        bounds,
    )
}

/// The proto code of a check's code.
pub fn code_to_proto(code: Code) -> ProtoCode {
    match code {
        Code::Ok => ProtoCode::Ok,
        Code::OverLimit => ProtoCode::OverLimit,
    }
}

/// The limiter's answer, as Envoy expects it, in prost's structures: the
/// reference [`encode_answer`](super::answer::encode_answer) is tested
/// against (the gRPC service writes the answer's bytes with that).
pub fn to_proto(response: &CheckResponse<'_>) -> RateLimitResponse {
    let statuses = response
        .statuses
        .iter()
        .map(|s| ProtoStatus {
            code: code_to_proto(s.code()) as i32,
            current_limit: s.current_limit().map(|l| ProtoLimit {
                name: l.name.clone().unwrap_or_default(),
                requests_per_unit: u32::try_from(l.requests_per_unit).unwrap_or(u32::MAX),
                unit: unit_to_proto(l.unit) as i32,
            }),
            limit_remaining: u32::try_from(s.limit_remaining()).unwrap_or(u32::MAX),
            duration_until_reset: Some(duration_to_proto(s.duration_until_reset())),
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

/// Header fields (`(lowercase name, value)` pairs) as Envoy adds them to
/// its client's response: `response_headers_to_add`.
pub fn headers_to_proto(fields: Vec<(&'static str, String)>) -> Vec<HeaderValue> {
    fields
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.to_owned(),
            value,
            ..HeaderValue::default()
        })
        .collect()
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
