//! Bursts for the property tests' GCRA rules: none, smaller than the
//! limit, or larger (a multiple of it, or a fixed size).

use proptest::prelude::*;
use slidegate::{Algorithm, Rule};

/// A burst relative to the rule's limit.
#[derive(Clone, Copy, Debug)]
pub enum Burst {
    None,
    /// 1 to the limit (a burst of the limit is none).
    Below(u8),
    /// The limit times 2 to 6.
    Times(u8),
    Fixed(u64),
}

/// Mostly none, so that the other properties keep their weight.
pub fn burst() -> impl Strategy<Value = Burst> {
    prop_oneof![
        3 => Just(Burst::None),
        1 => any::<u8>().prop_map(Burst::Below),
        1 => (2u8..=6).prop_map(Burst::Times),
        1 => prop_oneof![Just(1u64), Just(50), Just(1_000)].prop_map(Burst::Fixed),
    ]
}

/// `rule` with `burst` if it is a GCRA rule and the burst fits its bounds.
pub fn with_burst(rule: Rule, burst: Burst) -> Rule {
    if rule.algorithm() != Algorithm::Gcra {
        return rule;
    }
    let limit = rule.limit();
    let size = match burst {
        Burst::None => return rule,
        Burst::Below(f) => (limit * u64::from(f) / 255).max(1),
        Burst::Times(m) => limit.saturating_mul(u64::from(m)),
        Burst::Fixed(n) => n,
    };
    rule.with_burst(size).unwrap_or(rule)
}
