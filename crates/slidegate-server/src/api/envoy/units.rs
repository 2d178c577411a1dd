//! Envoy's units of time, as the proto numbers them, and the rules' own.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;

use crate::rules::Unit;

/// The rules' unit of a proto unit; `None` for `UNKNOWN`.
pub fn unit_from_proto(unit: ProtoUnit) -> Option<Unit> {
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

/// The proto unit of a rules' unit; `UNKNOWN` for a window that is no
/// unit (the proto has no field for it).
pub fn unit_to_proto(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
        Unit::Window(_) => ProtoUnit::Unknown,
    }
}
