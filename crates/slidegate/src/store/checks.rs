//! What every store checks of a request before deciding it: bad input is
//! a typed error, the same from every store.

use super::hit::Hit;
use super::key::validate_key;
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rule};

/// Checks that `cost` can ever pass every rule, and that there is a rule.
/// A rule that [reports](Rule::reporting) takes any cost up to
/// [`Rate::MAX_LIMIT`](crate::Rate::MAX_LIMIT): reported usage may exceed
/// the limit.
pub(crate) fn check_cost(rules: &[Rule], cost: u64) -> Result<()> {
    if rules.is_empty() {
        return Err(Error::NoRules);
    }
    for rule in rules {
        if cost > rule.max_cost() {
            return Err(cost_error(rule, cost));
        }
    }
    Ok(())
}

/// Why `cost` is more than `rule` takes ([`Rule::max_cost`]).
#[cold]
fn cost_error(rule: &Rule, cost: u64) -> Error {
    if rule.algorithm() == Algorithm::Concurrency {
        return Error::LeaseRequired;
    }
    Error::CostExceedsLimit {
        cost,
        limit: rule.max_cost(),
    }
}

/// Refuses a reservation of a rule that reports usage.
pub(crate) fn check_waits(rules: impl IntoIterator<Item = Rule>) -> Result<()> {
    if rules.into_iter().any(|rule| rule.reports()) {
        return Err(Error::ReportCannotWait);
    }
    Ok(())
}

/// Checks a batch: at least one hit, each hit's cost possible under its
/// rule (see [`check_cost`]).
pub(crate) fn check_batch<Q: ?Sized>(hits: &[Hit<'_, Q>]) -> Result<()> {
    if hits.is_empty() {
        return Err(Error::NoRules);
    }
    for hit in hits {
        check_cost(&[hit.rule], hit.cost)?;
    }
    Ok(())
}

/// Checks every key of a batch ([`validate_key`]).
pub(crate) fn validate_keys(hits: &[Hit<'_>]) -> Result<()> {
    for hit in hits {
        validate_key(hit.key)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_above_the_smallest_limit_is_an_error() {
        let rules = [Rule::parse("10/s").unwrap(), Rule::parse("3/s").unwrap()];
        assert!(check_cost(&rules, 3).is_ok());
        assert_eq!(
            check_cost(&rules, 4),
            Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
        );
        assert_eq!(check_cost(&[], 1), Err(Error::NoRules));
        let reporting = [Rule::parse("100/1m").unwrap().reporting()];
        assert!(
            check_cost(&reporting, 150).is_ok(),
            "usage may exceed the limit"
        );
        assert!(matches!(
            check_cost(&reporting, crate::rate::Rate::MAX_LIMIT + 1),
            Err(Error::CostExceedsLimit { .. })
        ));
    }

    #[test]
    fn a_concurrency_rule_takes_places_by_leases_only() {
        let places = [Rule::concurrency(3).unwrap()];
        assert_eq!(check_cost(&places, 1), Err(Error::LeaseRequired));
        assert!(check_cost(&places, 0).is_ok(), "a probe shows what is held");
    }
}
