//! A layer's policies (named rules), what each said about a request, and
//! the `RateLimit` fields made from that.

use std::fmt;

use bytes::Bytes;
use http::HeaderValue;

use super::build_error::BuildError;
use crate::decision::Decision;
use crate::headers::{self, InvalidPolicyName};
use crate::rate::Rule;

/// The policies of a layer, with what every response about them needs
/// prepared once: the `RateLimit-Policy` value.
pub(crate) struct PolicySet {
    rules: Box<[Rule]>,
    names: Box<[Box<str>]>,
    min_limit: u64,
    /// `RateLimit-Policy`: the same on every response.
    policy_header: HeaderValue,
}

impl PolicySet {
    /// The policies `(name, rule)`, in order; names are valid and distinct.
    pub(crate) fn new(policies: Vec<(String, Rule)>) -> Result<PolicySet, BuildError> {
        let Some((first, _)) = policies.first() else {
            return Err(BuildError::NoRules);
        };
        let policy_header =
            headers::ratelimit_policy(policies.iter().map(|(name, rule)| (name.as_str(), *rule)));
        let policy_header =
            HeaderValue::try_from(policy_header).map_err(|_| InvalidPolicyName(first.clone()))?;
        let rules: Box<[Rule]> = policies.iter().map(|(_, rule)| *rule).collect();
        Ok(PolicySet {
            min_limit: rules.iter().map(Rule::limit).min().unwrap_or(1),
            rules,
            names: policies.into_iter().map(|(name, _)| name.into()).collect(),
            policy_header,
        })
    }

    /// The rules, in order.
    pub(crate) fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The policy names, in the order of the rules.
    pub(crate) fn names(&self) -> &[Box<str>] {
        &self.names
    }

    /// The number of policies.
    pub(crate) fn len(&self) -> usize {
        self.rules.len()
    }

    /// The smallest limit: a cost above it can never pass.
    pub(crate) fn min_limit(&self) -> u64 {
        self.min_limit
    }

    /// The `RateLimit-Policy` value.
    pub(crate) fn policy_header(&self) -> &HeaderValue {
        &self.policy_header
    }

    /// The `RateLimit` value for one decision per policy, in order.
    pub(crate) fn ratelimit(&self, decisions: &[Decision]) -> HeaderValue {
        // Printable ASCII by construction: the check cannot fail.
        HeaderValue::from_maybe_shared(Bytes::from(self.ratelimit_text(decisions)))
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The text of [`ratelimit`](Self::ratelimit): the library's list, in
    /// a string of exactly its size, which `Bytes` takes over without
    /// another allocation.
    fn ratelimit_text(&self, decisions: &[Decision]) -> String {
        headers::ratelimit_list(self.names.iter().map(|name| &**name).zip(decisions))
    }

    /// What each policy said, given one decision per policy.
    pub(crate) fn decisions<'a>(&'a self, decisions: &'a [Decision]) -> PolicyDecisions<'a> {
        PolicyDecisions {
            set: self,
            decisions,
        }
    }
}

impl fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.names.iter().zip(self.rules.iter()))
            .finish()
    }
}

/// What every policy of a layer said about one request, in the order of
/// the rules: see [`Rejection::RateLimited`](super::Rejection::RateLimited).
///
/// With several rules the store decides them together (all or nothing)
/// and answers for each, so every policy has its own remaining quota and
/// wait, and the ones that denied are known exactly.
#[derive(Clone, Copy)]
pub struct PolicyDecisions<'a> {
    set: &'a PolicySet,
    decisions: &'a [Decision],
}

impl<'a> PolicyDecisions<'a> {
    /// Every policy with its decision, in the order of the rules.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = PolicyDecision<'a>> + use<'a> {
        let set = self.set;
        set.names
            .iter()
            .zip(set.rules.iter())
            .zip(self.decisions)
            .map(|((name, &rule), &decision)| PolicyDecision {
                name,
                rule,
                decision,
            })
    }

    /// The policies that denied the request (the `violated-policies` of
    /// the problem).
    pub fn violated(&self) -> impl Iterator<Item = PolicyDecision<'a>> + use<'a> {
        self.iter().filter(|policy| !policy.decision.allowed())
    }

    /// The number of policies.
    pub fn len(&self) -> usize {
        self.decisions.len()
    }

    /// True when there are none (never, for a layer's decisions).
    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }

    /// The `RateLimit` field for these decisions.
    pub(crate) fn ratelimit_header(&self) -> HeaderValue {
        self.set.ratelimit(self.decisions)
    }

    /// The `RateLimit-Policy` field.
    pub(crate) fn policy_header(&self) -> &'a HeaderValue {
        &self.set.policy_header
    }
}

impl fmt::Debug for PolicyDecisions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One policy's decision on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyDecision<'a> {
    /// The policy's name.
    pub name: &'a str,
    /// Its rule.
    pub rule: Rule,
    /// What it said: allowed or not, what remains, how long to wait.
    pub decision: Decision,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> PolicySet {
        PolicySet::new(vec![
            ("second".into(), Rule::parse("2/s").unwrap()),
            ("minute".into(), Rule::parse("3/m").unwrap()),
        ])
        .unwrap()
    }

    #[test]
    fn the_ratelimit_field_has_an_item_per_policy() {
        let set = set();
        let decisions = [
            Decision::from_parts(false, 2, 0, 400_000, 900_000),
            Decision::from_parts(true, 3, 1, 0, 59_000_000),
        ];
        assert_eq!(
            set.ratelimit(&decisions),
            r#""second";r=0;t=1, "minute";r=1;t=59"#
        );
        assert_eq!(
            set.policy_header(),
            r#""second";q=2;w=1, "minute";q=3;w=60"#
        );
    }

    #[test]
    fn violated_policies_are_the_denying_ones() {
        let set = set();
        let decisions = [
            Decision::from_parts(true, 2, 1, 0, 900_000),
            Decision::from_parts(false, 3, 0, 7_000_000, 59_000_000),
        ];
        let policies = set.decisions(&decisions);
        let violated: Vec<&str> = policies.violated().map(|p| p.name).collect();
        assert_eq!(violated, ["minute"]);
        assert_eq!(policies.iter().len(), 2);
    }

    /// The value is the library's list, held in a string of exactly its
    /// size, whatever the digits' widths.
    #[test]
    fn the_ratelimit_text_is_written_at_its_exact_size() {
        let set = set();
        for (remaining, micros) in [(0, 0), (9, 999_999), (10, 1_000_001), (u64::MAX, u64::MAX)] {
            let decisions = [
                Decision::from_parts(true, 2, remaining, 0, micros),
                Decision::from_parts(false, 3, 0, micros, micros),
            ];
            let text = set.ratelimit_text(&decisions);
            let t = |d: &Decision| headers::reset_secs(d);
            let expected = format!(
                r#""second";r={remaining};t={}, "minute";r=0;t={}"#,
                t(&decisions[0]),
                t(&decisions[1]),
            );
            assert_eq!(text, expected);
            assert_eq!(text.capacity(), text.len(), "{text}");
        }
    }
}
