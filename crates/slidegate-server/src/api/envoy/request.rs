//! An Envoy check as the limiter takes it, from either wire: the shape
//! checked against the request bounds before anything else is read, then
//! each descriptor validated, once, whichever wire it came by (protobuf
//! over gRPC, proto3 JSON over HTTP).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;

use super::units::unit_from_proto;
use crate::bounds::RequestBounds;
use crate::limiter::check::{CheckRequest, DescriptorRequest};

/// A request that is well-formed on its wire but not a valid check:
/// `INVALID_ARGUMENT` over gRPC, 400 `invalid_request` over HTTP.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidCheck(pub String);

/// One descriptor as a wire gives it, before it is validated.
#[derive(Debug, Default)]
pub struct DescriptorParts {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// A limit override: requests per unit, and the unit's proto number.
    pub limit: Option<(u64, i32)>,
    /// The descriptor's own `hits_addend`.
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`, which slidegate refuses.
    pub is_negative_hits: bool,
}

/// A descriptor of either wire.
pub trait WireDescriptor {
    /// How many entries it has, counted before anything else is read.
    fn entry_count(&self) -> usize;
    /// Its parts, moved out.
    fn into_parts(self) -> DescriptorParts;
}

/// The check of `domain` with `descriptors`, once their number and their
/// entries are within `bounds` (counted first) and each is valid.
pub fn check_request<D: WireDescriptor>(
    domain: String,
    descriptors: Vec<D>,
    hits_addend: u64,
    bounds: &RequestBounds,
) -> Result<CheckRequest, InvalidCheck> {
    bounds
        .check_descriptors(
            descriptors.len(),
            descriptors.iter().map(WireDescriptor::entry_count),
        )
        .map_err(|e| InvalidCheck(e.to_string()))?;
    let descriptors = descriptors
        .into_iter()
        .enumerate()
        .map(|(i, d)| descriptor(i, d.into_parts()))
        .collect::<Result<_, _>>()?;
    Ok(CheckRequest {
        domain,
        descriptors,
        hits_addend,
    })
}

/// Descriptor `index` of a check, once its parts are valid: its
/// `is_negative_hits` unset, its limit override's rate a uint32 and its
/// unit a known one.
pub fn descriptor(index: usize, parts: DescriptorParts) -> Result<DescriptorRequest, InvalidCheck> {
    if parts.is_negative_hits {
        return Err(InvalidCheck(format!(
            "descriptor {index}: negative hits are not supported (an exact log cannot give admissions back)"
        )));
    }
    let limit_override = parts
        .limit
        .map(|(requests_per_unit, unit)| {
            if u32::try_from(requests_per_unit).is_err() {
                return Err(InvalidCheck(format!(
                    "descriptor {index}: the limit override's requests_per_unit is a uint32, at most {}",
                    u32::MAX
                )));
            }
            let unit = ProtoUnit::try_from(unit)
                .ok()
                .and_then(unit_from_proto)
                .ok_or_else(|| {
                    InvalidCheck(format!(
                        "descriptor {index}: unknown limit override unit {unit}"
                    ))
                })?;
            Ok((requests_per_unit, unit))
        })
        .transpose()?;
    Ok(DescriptorRequest {
        entries: parts.entries,
        hits_addend: parts.hits_addend,
        limit_override,
    })
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    use super::*;
    use crate::api::envoy::json::RateLimitRequestJson;
    use crate::api::envoy::proto::from_proto;

    fn over_grpc(
        limit: Option<(u32, i32)>,
        is_negative_hits: bool,
    ) -> Result<CheckRequest, InvalidCheck> {
        let descriptor = RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            is_negative_hits,
            ..RateLimitDescriptor::default()
        };
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor],
            hits_addend: 0,
        };
        from_proto(request, &RequestBounds::default())
    }

    fn over_json(descriptor: &str) -> Result<CheckRequest, InvalidCheck> {
        let body = format!(r#"{{"domain":"d","descriptors":[{descriptor}]}}"#);
        RateLimitRequestJson::from_slice(body.as_bytes())
            .expect("a RateLimitRequest")
            .into_request(&RequestBounds::default())
    }

    #[test]
    fn both_wires_are_read_into_the_same_check_and_refused_alike() {
        let entry = r#""entries":[{"key":"k","value":"v"}]"#;
        assert_eq!(
            over_grpc(Some((5, 2)), false),
            over_json(&format!(
                r#"{{{entry},"limit":{{"requestsPerUnit":5,"unit":"MINUTE"}}}}"#
            ))
        );
        let unknown_unit = over_grpc(Some((5, 0)), false).unwrap_err();
        assert_eq!(
            unknown_unit,
            over_json(&format!(
                r#"{{{entry},"limit":{{"requestsPerUnit":5,"unit":0}}}}"#
            ))
            .unwrap_err()
        );
        assert!(
            unknown_unit.0.contains("unknown limit override unit 0"),
            "{unknown_unit}"
        );
        let negative = over_grpc(None, true).unwrap_err();
        assert_eq!(
            negative,
            over_json(&format!(r#"{{{entry},"isNegativeHits":true}}"#)).unwrap_err()
        );
        assert!(negative.0.contains("negative hits"), "{negative}");
    }
}
