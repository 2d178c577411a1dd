//! Request costs for the property tests, relative to the rule's limit.

use proptest::prelude::*;

/// A cost relative to the rule's limit, so every rule sees probes, small
/// costs, its whole limit and too much.
#[derive(Clone, Copy, Debug)]
pub enum Cost {
    Fixed(u64),
    Limit,
    AboveLimit,
    Fraction(u8),
    /// A multiple of the limit: more than any request may ask, what a
    /// report of usage may record.
    Multiple(u8),
}

impl Cost {
    pub fn resolve(self, limit: u64) -> u64 {
        match self {
            Cost::Fixed(c) => c,
            Cost::Limit => limit,
            Cost::AboveLimit => limit + 1,
            Cost::Fraction(f) => (limit * f as u64 / 255).max(1),
            Cost::Multiple(m) => limit * m as u64,
        }
    }
}

/// Mostly small costs, sometimes the whole limit, more, or a fraction of it.
pub fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        6 => (0u64..=3).prop_map(Cost::Fixed),
        1 => Just(Cost::Limit),
        1 => Just(Cost::AboveLimit),
        2 => any::<u8>().prop_map(Cost::Fraction),
    ]
}
