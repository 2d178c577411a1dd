//! The rate limit service's config as its control plane sends it: the
//! messages of envoyproxy/ratelimit's
//! `api/ratelimit/config/ratelimit/v3/rls_conf.proto`, written with
//! prost by hand (the schema is five small messages; generating them
//! would need `protoc` at build time). Field numbers are the schema's.

/// The resource type of a rate limit config, as ADS names it.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// One domain's rules (`ratelimit.config.ratelimit.v3.RateLimitConfig`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitConfig {
    /// The resource's name, unique per config.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The domain the rules are for.
    #[prost(string, tag = "2")]
    pub domain: String,
    /// The descriptors, as in a config file.
    #[prost(message, repeated, tag = "3")]
    pub descriptors: Vec<RateLimitDescriptor>,
}

/// One descriptor (`RateLimitDescriptor`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The descriptor's key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value; empty for any value.
    #[prost(string, tag = "2")]
    pub value: String,
    /// Its limit, if any.
    #[prost(message, optional, tag = "3")]
    pub rate_limit: Option<RateLimitPolicy>,
    /// The descriptors nested under it.
    #[prost(message, repeated, tag = "4")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Counted, never enforced.
    #[prost(bool, tag = "5")]
    pub shadow_mode: bool,
    /// Per-value statistics.
    #[prost(bool, tag = "6")]
    pub detailed_metric: bool,
    /// Refused only once every quota descriptor of the request is over.
    #[prost(bool, tag = "7")]
    pub quota_mode: bool,
}

/// A limit (`RateLimitPolicy`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitPolicy {
    /// A [`RateLimitUnit`] by number.
    #[prost(enumeration = "RateLimitUnit", tag = "1")]
    pub unit: i32,
    /// Requests per unit; 0 refuses every request.
    #[prost(uint32, tag = "2")]
    pub requests_per_unit: u32,
    /// Never refused.
    #[prost(bool, tag = "3")]
    pub unlimited: bool,
    /// The name other limits' `replaces` refer to.
    #[prost(string, tag = "4")]
    pub name: String,
    /// The limits this one replaces.
    #[prost(message, repeated, tag = "5")]
    pub replaces: Vec<RateLimitReplace>,
}

/// A limit replaced (`RateLimitReplace`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitReplace {
    /// The replaced limit's name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// The unit of a limit (`RateLimitUnit`): the numbers are the schema's,
/// `MONTH` and `YEAR` before `WEEK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RateLimitUnit {
    /// No unit given.
    Unknown = 0,
    /// A second.
    Second = 1,
    /// A minute.
    Minute = 2,
    /// An hour.
    Hour = 3,
    /// A day.
    Day = 4,
    /// A month (30 days).
    Month = 5,
    /// A year (365 days).
    Year = 6,
    /// A week.
    Week = 7,
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// The field numbers and wire types, written out by hand from the
    /// schema: a wrong tag here would silently drop a control plane's
    /// field.
    #[test]
    fn every_field_has_the_schemas_number() {
        let config = RateLimitConfig {
            name: "n".into(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                value: "v".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Week as i32,
                    requests_per_unit: 5,
                    unlimited: true,
                    name: "p".into(),
                    replaces: vec![RateLimitReplace { name: "r".into() }],
                }),
                descriptors: vec![RateLimitDescriptor {
                    key: "c".into(),
                    ..RateLimitDescriptor::default()
                }],
                shadow_mode: true,
                detailed_metric: true,
                quota_mode: true,
            }],
        };
        #[rustfmt::skip]
        let wire: &[u8] = &[
            0x0a, 1, b'n',                     // name = 1
            0x12, 1, b'd',                     // domain = 2
            0x1a, 33,                          // descriptors = 3
              0x0a, 1, b'k',                   //   key = 1
              0x12, 1, b'v',                   //   value = 2
              0x1a, 14,                        //   rate_limit = 3
                0x08, 7,                       //     unit = 1 (WEEK = 7)
                0x10, 5,                       //     requests_per_unit = 2
                0x18, 1,                       //     unlimited = 3
                0x22, 1, b'p',                 //     name = 4
                0x2a, 3, 0x0a, 1, b'r',        //     replaces = 5 { name = 1 }
              0x22, 3, 0x0a, 1, b'c',          //   descriptors = 4
              0x28, 1,                         //   shadow_mode = 5
              0x30, 1,                         //   detailed_metric = 6
              0x38, 1,                         //   quota_mode = 7
        ];
        assert_eq!(config.encode_to_vec(), wire);
        assert_eq!(RateLimitConfig::decode(wire).unwrap(), config);
        assert_eq!(
            [
                RateLimitUnit::Month,
                RateLimitUnit::Year,
                RateLimitUnit::Week
            ]
            .map(|u| u as i32),
            [5, 6, 7]
        );
    }
}
