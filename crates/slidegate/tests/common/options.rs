//! Rules asked with options (usage reporting, a lockout) in the property
//! tests: which options, and the costs a report may ask.

use std::time::Duration;

use proptest::prelude::*;
use slidegate::{Rate, Rule};

use super::cost::{Cost, cost};

/// Which options a rule is asked with: bit 0 report, bit 1 lockout.
pub type Options = u8;

/// None most often, then each alone and both.
pub fn options() -> impl Strategy<Value = Options> + Clone {
    prop_oneof![2 => Just(0u8), 1 => Just(1u8), 2 => Just(2u8), 1 => Just(3u8)]
}

/// The lockout a base rule is asked with when bit 1 is set: a few
/// windows of the short rules, or seconds.
pub fn block() -> impl Strategy<Value = Duration> {
    prop_oneof![1_000u64..=10_000, 1_000u64..=8_000_000].prop_map(Duration::from_micros)
}

/// The base rule with `options`.
pub fn with_options((rule, block): (Rule, Duration), options: Options) -> Rule {
    let rule = if options & 1 == 1 {
        rule.reporting()
    } else {
        rule
    };
    if options & 2 == 2 {
        rule.block_for(block).expect("a valid block")
    } else {
        rule
    }
}

/// Costs as in the other property tests, and for reports often more than
/// the limit.
pub fn report_cost() -> impl Strategy<Value = Cost> {
    prop_oneof![3 => cost(), 1 => (2u8..=5).prop_map(Cost::Multiple)]
}

/// The cost of a hit of `rule`: relative to its limit (its burst); a multiple of the
/// limit as it is for a report (at most the largest limit), the limit
/// itself otherwise.
pub fn resolve(cost: Cost, rule: Rule) -> u64 {
    // Relative to what may pass at once: a GCRA rule's burst, if it has one.
    match cost {
        Cost::Multiple(_) if !rule.reports() => rule.burst(),
        Cost::Multiple(m) => rule
            .burst()
            .saturating_mul(u64::from(m))
            .min(Rate::MAX_LIMIT),
        other => other.resolve(rule.burst()),
    }
}
