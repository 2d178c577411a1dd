//! A control plane's configs as the typed specs a config file becomes, so
//! that both are checked by the same code (`set.rs`), with the same
//! errors.

use super::super::set::XDS_PREFIX;
use super::super::yaml::{DescriptorSpec, FileSpec, RateLimitSpec};
use super::proto::{RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit};

/// What a resource is called where a file's name would be (in errors,
/// and in `/v1/config`'s `files`): `xds:NAME`.
pub fn source_name(config: &RateLimitConfig) -> String {
    format!("{XDS_PREFIX}{}", config.name)
}

/// `config` as the spec of a file holding the same rules.
pub(crate) fn to_spec(config: &RateLimitConfig) -> FileSpec {
    FileSpec {
        domain: config.domain.clone(),
        descriptors: config.descriptors.iter().map(descriptor).collect(),
        // The xDS message has no forward-auth mapping: the built-in keys only.
        forward_auth: Vec::new(),
    }
}

fn descriptor(d: &RateLimitDescriptor) -> DescriptorSpec {
    DescriptorSpec {
        key: d.key.clone(),
        value: (!d.value.is_empty()).then(|| d.value.clone()),
        rate_limit: d.rate_limit.as_ref().map(policy),
        descriptors: d.descriptors.iter().map(descriptor).collect(),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        share_threshold: false,
        detailed_metric: d.detailed_metric,
        value_to_metric: false,
        // A resource has no lines: errors name the resource alone.
        line: 0,
        column: 0,
    }
}

fn policy(p: &RateLimitPolicy) -> RateLimitSpec {
    // An unknown number is named as it came, and refused as a file's
    // unknown unit is.
    let unit = match RateLimitUnit::try_from(p.unit) {
        Ok(RateLimitUnit::Unknown) => None,
        Ok(unit) => Some(unit_name(unit).to_owned()),
        Err(_) => Some(p.unit.to_string()),
    };
    RateLimitSpec {
        unit,
        window: None,
        requests_per_unit: u64::from(p.requests_per_unit),
        unlimited: p.unlimited,
        name: (!p.name.is_empty()).then(|| p.name.clone()),
        replaces: p.replaces.iter().map(|r| r.name.clone()).collect(),
        algorithm: None,
        report: false,
        block_for: None,
        burst: None,
    }
}

/// The unit's name as a config file spells it.
fn unit_name(unit: RateLimitUnit) -> &'static str {
    match unit {
        RateLimitUnit::Unknown => "UNKNOWN",
        RateLimitUnit::Second => "SECOND",
        RateLimitUnit::Minute => "MINUTE",
        RateLimitUnit::Hour => "HOUR",
        RateLimitUnit::Day => "DAY",
        RateLimitUnit::Month => "MONTH",
        RateLimitUnit::Year => "YEAR",
        RateLimitUnit::Week => "WEEK",
    }
}
