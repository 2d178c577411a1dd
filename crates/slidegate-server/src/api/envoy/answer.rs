//! Envoy's `RateLimitResponse` written as protobuf bytes straight from the
//! check's answer: the same bytes prost writes for
//! [`to_proto`](super::proto::to_proto) with the header fields of
//! [`headers_to_proto`](super::proto::headers_to_proto), without building
//! (and dropping) the message's structures on every call.
//!
//! Fields go out in the order prost writes them (by field number, whatever
//! order the generated structures declare them in: `RateLimit`'s `name` is
//! number 3 but declared first), proto3 defaults left out as prost leaves them
//! out; only the quota metadata's two map entries may come in another
//! order than prost's, whose map is a `HashMap`.

use std::time::Duration;

use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use super::proto::code_to_proto;
use super::units::unit_to_proto;
use crate::limiter::check::{CheckResponse, DescriptorStatus};
use crate::rules::Limit;

// Field numbers of envoy.service.ratelimit.v3.RateLimitResponse.
const RESPONSE_OVERALL_CODE: u32 = 1;
const RESPONSE_STATUSES: u32 = 2;
const RESPONSE_HEADERS_TO_ADD: u32 = 3;
const RESPONSE_DYNAMIC_METADATA: u32 = 6;
// Of RateLimitResponse.DescriptorStatus.
const STATUS_CODE: u32 = 1;
const STATUS_CURRENT_LIMIT: u32 = 2;
const STATUS_LIMIT_REMAINING: u32 = 3;
const STATUS_DURATION_UNTIL_RESET: u32 = 4;
// Of RateLimitResponse.RateLimit.
const LIMIT_REQUESTS_PER_UNIT: u32 = 1;
const LIMIT_UNIT: u32 = 2;
const LIMIT_NAME: u32 = 3;
// Of google.protobuf.Duration.
const DURATION_SECONDS: u32 = 1;
const DURATION_NANOS: u32 = 2;
// Of envoy.config.core.v3.HeaderValue.
const HEADER_KEY: u32 = 1;
const HEADER_VALUE: u32 = 2;
// Of google.protobuf.Struct, its map entries, Value and ListValue.
const STRUCT_FIELDS: u32 = 1;
const ENTRY_KEY: u32 = 1;
const ENTRY_VALUE: u32 = 2;
const VALUE_NUMBER: u32 = 2;
const VALUE_BOOL: u32 = 4;
const VALUE_LIST: u32 = 6;
const LIST_VALUES: u32 = 1;

const QUOTA_ENABLED: &str = "quotaModeEnabled";
const QUOTA_VIOLATIONS: &str = "quotaModeViolations";

/// Writes `response`, with the header fields `headers` (`(lowercase name,
/// value)` pairs) as its `response_headers_to_add`, into `out` as the
/// protobuf bytes of a `RateLimitResponse`.
pub fn encode_answer(
    response: &CheckResponse<'_>,
    headers: &[(&'static str, String)],
    out: &mut Vec<u8>,
) {
    varint_field(
        RESPONSE_OVERALL_CODE,
        enum_value(code_to_proto(response.overall) as i32),
        out,
    );
    for status in &response.statuses {
        encode_key(RESPONSE_STATUSES, WireType::LengthDelimited, out);
        encode_varint(status_len(status) as u64, out);
        encode_status(status, out);
    }
    for (key, value) in headers {
        let len = string_field_len(HEADER_KEY, key) + string_field_len(HEADER_VALUE, value);
        encode_key(RESPONSE_HEADERS_TO_ADD, WireType::LengthDelimited, out);
        encode_varint(len as u64, out);
        string_field(HEADER_KEY, key, out);
        string_field(HEADER_VALUE, value, out);
    }
    if response.quota_mode {
        encode_key(RESPONSE_DYNAMIC_METADATA, WireType::LengthDelimited, out);
        encode_varint(quota_metadata_len(&response.quota_violations) as u64, out);
        encode_quota_metadata(&response.quota_violations, out);
    }
}

/// A proto enum's number as prost writes it: an `int32` varint (negative
/// numbers sign-extended, as none of ours are).
fn enum_value(number: i32) -> u64 {
    number as u64
}

fn status_fields<'s>(status: &'s DescriptorStatus<'_>) -> (u64, Option<&'s Limit>, u64, Duration) {
    (
        enum_value(code_to_proto(status.code()) as i32),
        status.current_limit(),
        u64::from(u32::try_from(status.limit_remaining()).unwrap_or(u32::MAX)),
        status.duration_until_reset(),
    )
}

fn status_len(status: &DescriptorStatus<'_>) -> usize {
    let (code, limit, remaining, reset) = status_fields(status);
    varint_field_len(STATUS_CODE, code)
        + limit.map_or(0, |l| message_field_len(STATUS_CURRENT_LIMIT, limit_len(l)))
        + varint_field_len(STATUS_LIMIT_REMAINING, remaining)
        + message_field_len(STATUS_DURATION_UNTIL_RESET, duration_len(reset))
}

fn encode_status(status: &DescriptorStatus<'_>, out: &mut Vec<u8>) {
    let (code, limit, remaining, reset) = status_fields(status);
    varint_field(STATUS_CODE, code, out);
    if let Some(limit) = limit {
        encode_key(STATUS_CURRENT_LIMIT, WireType::LengthDelimited, out);
        encode_varint(limit_len(limit) as u64, out);
        encode_limit(limit, out);
    }
    varint_field(STATUS_LIMIT_REMAINING, remaining, out);
    encode_key(STATUS_DURATION_UNTIL_RESET, WireType::LengthDelimited, out);
    encode_varint(duration_len(reset) as u64, out);
    encode_duration(reset, out);
}

fn limit_fields(limit: &Limit) -> (&str, u64, u64) {
    (
        limit.name.as_deref().unwrap_or_default(),
        u64::from(u32::try_from(limit.requests_per_unit).unwrap_or(u32::MAX)),
        enum_value(unit_to_proto(limit.unit) as i32),
    )
}

fn limit_len(limit: &Limit) -> usize {
    let (name, requests, unit) = limit_fields(limit);
    string_field_len(LIMIT_NAME, name)
        + varint_field_len(LIMIT_REQUESTS_PER_UNIT, requests)
        + varint_field_len(LIMIT_UNIT, unit)
}

fn encode_limit(limit: &Limit, out: &mut Vec<u8>) {
    let (name, requests, unit) = limit_fields(limit);
    varint_field(LIMIT_REQUESTS_PER_UNIT, requests, out);
    varint_field(LIMIT_UNIT, unit, out);
    string_field(LIMIT_NAME, name, out);
}

fn duration_fields(d: Duration) -> (u64, u64) {
    // `int64` and `int32` varints; both are never negative here.
    let seconds = i64::try_from(d.as_secs()).unwrap_or(i64::MAX) as u64;
    (seconds, u64::from(d.subsec_nanos()))
}

fn duration_len(d: Duration) -> usize {
    let (seconds, nanos) = duration_fields(d);
    varint_field_len(DURATION_SECONDS, seconds) + varint_field_len(DURATION_NANOS, nanos)
}

fn encode_duration(d: Duration, out: &mut Vec<u8>) {
    let (seconds, nanos) = duration_fields(d);
    varint_field(DURATION_SECONDS, seconds, out);
    varint_field(DURATION_NANOS, nanos, out);
}

/// `{"quotaModeEnabled": true, "quotaModeViolations": [indices]}`, as
/// [`to_proto`](super::proto::to_proto) reports soft quotas.
fn encode_quota_metadata(violations: &[usize], out: &mut Vec<u8>) {
    let (enabled_len, violations_len) = quota_values_len(violations);
    map_entry_head(QUOTA_ENABLED, enabled_len, out);
    encode_key(VALUE_BOOL, WireType::Varint, out);
    encode_varint(1, out);
    map_entry_head(QUOTA_VIOLATIONS, violations_len, out);
    encode_key(VALUE_LIST, WireType::LengthDelimited, out);
    encode_varint(list_len(violations) as u64, out);
    for &index in violations {
        encode_key(LIST_VALUES, WireType::LengthDelimited, out);
        encode_varint(NUMBER_VALUE_LEN as u64, out);
        encode_key(VALUE_NUMBER, WireType::SixtyFourBit, out);
        out.extend_from_slice(&(index as f64).to_le_bytes());
    }
}

/// A `Value` holding a number: its key and the 8 bytes of a double.
const NUMBER_VALUE_LEN: usize = key_len(VALUE_NUMBER) + 8;

fn list_len(violations: &[usize]) -> usize {
    violations.len() * message_field_len(LIST_VALUES, NUMBER_VALUE_LEN)
}

/// The lengths of the two `Value`s: `true` and the list.
fn quota_values_len(violations: &[usize]) -> (usize, usize) {
    let enabled = key_len(VALUE_BOOL) + 1;
    let list = message_field_len(VALUE_LIST, list_len(violations));
    (enabled, list)
}

fn map_entry_len(key: &str, value_len: usize) -> usize {
    string_field_len(ENTRY_KEY, key) + message_field_len(ENTRY_VALUE, value_len)
}

fn quota_metadata_len(violations: &[usize]) -> usize {
    let (enabled, list) = quota_values_len(violations);
    message_field_len(STRUCT_FIELDS, map_entry_len(QUOTA_ENABLED, enabled))
        + message_field_len(STRUCT_FIELDS, map_entry_len(QUOTA_VIOLATIONS, list))
}

/// One entry of the `Struct`'s map up to its value's bytes: the entry's
/// key and length, its key string, its value's key and length.
fn map_entry_head(key: &str, value_len: usize, out: &mut Vec<u8>) {
    encode_key(STRUCT_FIELDS, WireType::LengthDelimited, out);
    encode_varint(map_entry_len(key, value_len) as u64, out);
    string_field(ENTRY_KEY, key, out);
    encode_key(ENTRY_VALUE, WireType::LengthDelimited, out);
    encode_varint(value_len as u64, out);
}

/// A varint field; proto3 leaves out a zero.
fn varint_field(tag: u32, value: u64, out: &mut Vec<u8>) {
    if value != 0 {
        encode_key(tag, WireType::Varint, out);
        encode_varint(value, out);
    }
}

fn varint_field_len(tag: u32, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(value)
    }
}

/// A string field; proto3 leaves out an empty one.
fn string_field(tag: u32, text: &str, out: &mut Vec<u8>) {
    if !text.is_empty() {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(text.len() as u64, out);
        out.extend_from_slice(text.as_bytes());
    }
}

fn string_field_len(tag: u32, text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        message_field_len(tag, text.len())
    }
}

/// A present message field of `len` bytes, with its key and length.
fn message_field_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
    use proptest::prelude::*;
    use prost::Message;
    use slidegate::{Decision, Rate, Rule};

    use super::*;
    use crate::api::envoy::proto::{headers_to_proto, to_proto};
    use crate::limiter::check::{AppliedLimit, Code, MetricName, Verdict};
    use crate::rules::{Enforcement, LimitId, Unit};

    /// What prost writes for the answer, as the service wrote it before.
    fn prost_bytes(response: &CheckResponse<'_>, headers: &[(&'static str, String)]) -> Vec<u8> {
        let mut proto = to_proto(response);
        proto.response_headers_to_add = headers_to_proto(headers.to_vec());
        proto.encode_to_vec()
    }

    fn ours(response: &CheckResponse<'_>, headers: &[(&'static str, String)]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_answer(response, headers, &mut out);
        out
    }

    fn unit() -> impl Strategy<Value = Unit> {
        prop_oneof![
            Just(Unit::Second),
            Just(Unit::Minute),
            Just(Unit::Hour),
            Just(Unit::Day),
            Just(Unit::Week),
            Just(Unit::Month),
            Just(Unit::Year),
            (1_u64..10_000_000).prop_map(|ms| Unit::Window(Duration::from_millis(ms))),
        ]
    }

    fn limit() -> impl Strategy<Value = Limit> {
        let enforcement = prop_oneof![
            Just(Enforcement::Unlimited),
            Just(Enforcement::Blocked),
            Just(Enforcement::Rule(Rule::new(
                Rate::new(1, Duration::from_secs(60)).expect("a rate")
            ))),
        ];
        let requests = prop_oneof![0_u64..300, any::<u64>()];
        let name = proptest::option::of(prop_oneof![
            Just(String::new()),
            "[a-z_é]{1,40}",
            ".{0,200}"
        ]);
        (
            enforcement,
            requests,
            unit(),
            name,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(enforcement, requests_per_unit, unit, name, shadow_mode, quota_mode)| Limit {
                    id: LimitId(0),
                    enforcement,
                    requests_per_unit,
                    unit,
                    name,
                    replaces: Vec::new(),
                    shadow_mode,
                    quota_mode,
                    detailed_metric: false,
                    full_key: "domain.key_value".to_owned(),
                },
            )
    }

    fn decision() -> impl Strategy<Value = Decision> {
        let micros = prop_oneof![0_u64..3_000_000, any::<u64>()];
        (
            any::<bool>(),
            any::<u64>(),
            prop_oneof![0_u64..1_000, any::<u64>()],
            micros.clone(),
            micros,
        )
            .prop_map(|(allowed, limit, remaining, retry, reset)| {
                Decision::from_parts(allowed, limit, remaining, retry, reset)
            })
    }

    fn status() -> impl Strategy<Value = DescriptorStatus<'static>> {
        let verdict = prop_oneof![
            Just(Verdict::Unlimited),
            Just(Verdict::Allowed),
            Just(Verdict::Denied),
            Just(Verdict::ShadowDenied),
            Just(Verdict::QuotaExceeded),
        ];
        (
            proptest::option::of(limit()),
            verdict,
            proptest::option::of(decision()),
        )
            .prop_map(|(limit, verdict, decision)| DescriptorStatus {
                limit: limit.map(|l| AppliedLimit::Override(Box::new(l))),
                verdict,
                decision,
                metric: MetricName::NoLimit,
            })
    }

    fn response() -> impl Strategy<Value = CheckResponse<'static>> {
        (
            any::<bool>(),
            proptest::collection::vec(status(), 0..5),
            any::<bool>(),
            proptest::collection::vec(prop_oneof![0_usize..8, any::<usize>()], 0..6),
        )
            .prop_map(
                |(over, statuses, quota_mode, quota_violations)| CheckResponse {
                    overall: if over { Code::OverLimit } else { Code::Ok },
                    statuses,
                    known_domain: true,
                    quota_violations,
                    quota_mode,
                    degraded: false,
                },
            )
    }

    fn headers() -> impl Strategy<Value = Vec<(&'static str, String)>> {
        let name = prop_oneof![
            Just("ratelimit-policy"),
            Just("ratelimit"),
            Just("retry-after"),
        ];
        proptest::collection::vec((name, prop_oneof![Just(String::new()), ".{0,300}"]), 0..4)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Every answer is the bytes prost writes for `to_proto` with the
        /// header fields; with quota metadata (a map, which prost writes in
        /// its `HashMap`'s order), the same message once decoded.
        #[test]
        fn the_answer_is_what_prost_writes(response in response(), headers in headers()) {
            let ours = ours(&response, &headers);
            let prost = prost_bytes(&response, &headers);
            if response.quota_mode {
                prop_assert_eq!(ours.len(), prost.len());
                let decoded = RateLimitResponse::decode(ours.as_slice()).expect("our answer decodes");
                prop_assert_eq!(
                    decoded,
                    RateLimitResponse::decode(prost.as_slice()).expect("prost's answer decodes")
                );
            } else {
                prop_assert_eq!(ours, prost);
            }
        }
    }

    /// The quota metadata byte for byte, in the order written (the map's
    /// keys sorted), against prost's encoding of the one-entry maps.
    #[test]
    fn quota_metadata_is_prosts_entry_by_entry() {
        let response = CheckResponse {
            overall: Code::Ok,
            statuses: Vec::new(),
            known_domain: true,
            quota_violations: vec![0, 3, 200],
            quota_mode: true,
            degraded: false,
        };
        let proto = to_proto(&response);
        let fields = &proto.dynamic_metadata.as_ref().expect("metadata").fields;
        let mut expected = proto.clone();
        expected.dynamic_metadata = None;
        let mut expected = expected.encode_to_vec();
        let mut metadata = Vec::new();
        for key in [QUOTA_ENABLED, QUOTA_VIOLATIONS] {
            let entry = envoy_types::pb::google::protobuf::Struct {
                fields: [(key.to_owned(), fields[key].clone())]
                    .into_iter()
                    .collect(),
            };
            metadata.extend(entry.encode_to_vec());
        }
        encode_key(
            RESPONSE_DYNAMIC_METADATA,
            WireType::LengthDelimited,
            &mut expected,
        );
        encode_varint(metadata.len() as u64, &mut expected);
        expected.extend(metadata);
        assert_eq!(ours(&response, &[]), expected);
    }
}
