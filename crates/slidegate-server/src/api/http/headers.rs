//! The rate limit header fields of `POST /v1/acquire` and `GET
//! /v1/keys/{key}` answers (draft-ietf-httpapi-ratelimit-headers-10), one
//! list item per rule, written by the library's [`slidegate::headers`] as
//! the middleware writes them:
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=60
//! RateLimit: "default";r=99;t=60
//! Retry-After: 60            (429 only)
//! ```
//!
//! A single rule is named `"default"`; several are named by their position
//! in the request, `"p0"`, `"p1"`, ... All durations are whole seconds,
//! rounded up, so a client that waits what it is told is never early.

use std::cell::RefCell;

use axum::http::{HeaderMap, HeaderValue};
use slidegate::{Rule, headers};

use crate::limiter::AdhocDecision;

/// Adds `RateLimit-Policy` and `RateLimit`, and `Retry-After` when the
/// answer is a 429.
pub fn insert(fields: &mut HeaderMap, answer: &AdhocDecision, with_retry_after: bool) {
    let count = answer.rules.len();
    let name = |index| headers::default_policy_name(index, count);
    let policy = match answer.rules.as_slice() {
        [(rule, _)] => single_policy(*rule),
        rules => value(headers::ratelimit_policy(
            rules
                .iter()
                .enumerate()
                .map(|(index, (rule, _))| (name(index), *rule)),
        )),
    };
    let state = headers::ratelimit_list(
        answer
            .rules
            .iter()
            .enumerate()
            .map(|(index, (_, decision))| (name(index), decision)),
    );
    fields.insert(headers::RATELIMIT_POLICY, policy);
    fields.insert(headers::RATELIMIT, value(state));
    if with_retry_after {
        fields.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs(answer)),
        );
    }
}

/// `Retry-After` in whole seconds: the longest wait among the rules that
/// denied, so never earlier than any of their `t`.
pub fn retry_after_secs(answer: &AdhocDecision) -> u64 {
    answer
        .rules
        .iter()
        .filter(|(_, d)| !d.allowed())
        .map(|(_, d)| headers::retry_after(d))
        .max()
        .unwrap_or_else(|| headers::retry_after(&answer.decision))
}

thread_local! {
    /// The last single rule this thread answered for, and its
    /// `RateLimit-Policy` value: one rule, the same for every request of
    /// a client, and a value that depends on it alone.
    static LAST_POLICY: RefCell<Option<(Rule, HeaderValue)>> = const { RefCell::new(None) };
}

/// The `RateLimit-Policy` value of a request with the one rule `rule`,
/// written once for a run of requests with the same rule: a clone of the
/// value is a reference count, writing it a string, its check and two
/// allocations.
fn single_policy(rule: Rule) -> HeaderValue {
    LAST_POLICY.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((known, policy)) if *known == rule => policy.clone(),
            _ => {
                let policy = value(headers::ratelimit_policy([(
                    headers::default_policy_name(0, 1),
                    rule,
                )]));
                *last = Some((rule, policy.clone()));
                policy
            }
        }
    })
}

fn value(text: String) -> HeaderValue {
    // Built only from ASCII digits, names and punctuation.
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slidegate::Decision;

    fn answer(rules: &[(&str, Decision)]) -> AdhocDecision {
        let rules: Vec<(Rule, Decision)> = rules
            .iter()
            .map(|(rate, d)| (Rule::parse(rate).unwrap(), *d))
            .collect();
        let decisions: Vec<Decision> = rules.iter().map(|(_, d)| *d).collect();
        AdhocDecision {
            decision: Decision::combine(&decisions).unwrap(),
            rules,
        }
    }

    fn header(fields: &HeaderMap, name: &str) -> String {
        fields.get(name).unwrap().to_str().unwrap().to_owned()
    }

    #[test]
    fn each_single_rule_gets_its_own_policy_one_after_the_other() {
        let allowed = Decision::from_parts(true, 100, 99, 0, 60_000_000);
        for (rate, expected) in [
            ("100/1m", r#""default";q=100;w=60"#),
            ("100/1m", r#""default";q=100;w=60"#),
            ("100/1s", r#""default";q=100;w=1"#),
            ("7/1s", r#""default";q=7;w=1"#),
            ("100/1m", r#""default";q=100;w=60"#),
        ] {
            let mut fields = HeaderMap::new();
            insert(&mut fields, &answer(&[(rate, allowed)]), false);
            assert_eq!(header(&fields, "ratelimit-policy"), expected, "{rate}");
        }
    }

    #[test]
    fn one_rule_is_the_default_policy() {
        let mut fields = HeaderMap::new();
        let allowed = Decision::from_parts(true, 100, 99, 0, 60_000_000);
        insert(&mut fields, &answer(&[("100/1m", allowed)]), false);
        assert_eq!(
            header(&fields, "ratelimit-policy"),
            r#""default";q=100;w=60"#
        );
        assert_eq!(header(&fields, "ratelimit"), r#""default";r=99;t=60"#);
        assert!(fields.get("retry-after").is_none());
    }

    #[test]
    fn windows_and_waits_round_up_to_whole_seconds() {
        let mut fields = HeaderMap::new();
        let denied = Decision::from_parts(false, 3, 0, 1_000_001, 1_500_000);
        insert(&mut fields, &answer(&[("3/250ms", denied)]), true);
        assert_eq!(header(&fields, "ratelimit-policy"), r#""default";q=3;w=1"#);
        assert_eq!(header(&fields, "ratelimit"), r#""default";r=0;t=2"#);
        assert_eq!(header(&fields, "retry-after"), "2");
    }

    #[test]
    fn several_rules_are_listed_in_order() {
        let mut fields = HeaderMap::new();
        let fine = Decision::from_parts(true, 1000, 500, 0, 3_000_000_000);
        let denied = Decision::from_parts(false, 10, 0, 400_000, 900_000);
        insert(
            &mut fields,
            &answer(&[("1000/1h", fine), ("10/s", denied)]),
            true,
        );
        assert_eq!(
            header(&fields, "ratelimit-policy"),
            r#""p0";q=1000;w=3600, "p1";q=10;w=1"#
        );
        assert_eq!(
            header(&fields, "ratelimit"),
            r#""p0";r=500;t=3000, "p1";r=0;t=1"#
        );
        assert_eq!(header(&fields, "retry-after"), "1");
    }
}
