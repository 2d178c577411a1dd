//! The rate limit headers of draft-ietf-httpapi-ratelimit-headers-10, as
//! Structured Field lists, one item per rule:
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=60
//! RateLimit: "default";r=99;t=60
//! Retry-After: 60            (429 only)
//! ```
//!
//! A single rule is named `"default"`; several are named by their position
//! in the request, `"r0"`, `"r1"`, ... All durations are whole seconds,
//! rounded up, so a client that waits what it is told is never early.

use crate::limiter::adhoc::Outcome;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// `RateLimit-Policy`: the quota (`q`) and window (`w`, seconds) of each rule.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: the remaining quota (`r`) and seconds until more (`t`) per rule.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Adds `RateLimit-Policy` and `RateLimit`, and `Retry-After` when `denied`
/// is answered with a 429.
///
/// Written straight into each value, digit by digit: this runs on every
/// `/v1/acquire`, and formatting machinery and a string per item cost more
/// than the decision itself.
pub fn insert(headers: &mut HeaderMap, outcome: &Outcome, with_retry_after: bool) {
    let count = outcome.rules.len();
    let mut policy = String::with_capacity(32 * count);
    let mut state = String::with_capacity(32 * count);
    for (i, (rule, decision)) in outcome.rules.iter().enumerate() {
        if i > 0 {
            policy.push_str(", ");
            state.push_str(", ");
        }
        push_name(&mut policy, i, count);
        policy.push_str(";q=");
        push_decimal(&mut policy, rule.limit());
        policy.push_str(";w=");
        push_decimal(&mut policy, rule.window_micros().div_ceil(1_000_000));
        // `t` is the time until more quota: the retry delay when denied,
        // the time until the window is empty when allowed.
        let t = if decision.allowed() {
            decision.reset_after_secs()
        } else {
            decision.retry_after_secs()
        };
        push_name(&mut state, i, count);
        state.push_str(";r=");
        push_decimal(&mut state, decision.remaining());
        state.push_str(";t=");
        push_decimal(&mut state, t);
    }
    headers.insert(RATELIMIT_POLICY.clone(), value(policy));
    headers.insert(RATELIMIT.clone(), value(state));
    if with_retry_after {
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(retry_after_secs(outcome)),
        );
    }
}

/// `Retry-After` in whole seconds: the longest wait among the rules that
/// denied, so never earlier than any of their `t`.
pub fn retry_after_secs(outcome: &Outcome) -> u64 {
    outcome
        .rules
        .iter()
        .filter(|(_, d)| !d.allowed())
        .map(|(_, d)| d.retry_after_secs())
        .max()
        .unwrap_or(0)
        .max(outcome.decision.retry_after_secs())
}

/// The sf-string naming rule `index` of `count`: `"default"` for a single
/// rule, `"r0"`, `"r1"`, ... for several.
fn push_name(out: &mut String, index: usize, count: usize) {
    if count == 1 {
        out.push_str("\"default\"");
    } else {
        out.push_str("\"r");
        push_decimal(out, index as u64);
        out.push('"');
    }
}

/// Appends `value` in decimal.
pub(crate) fn push_decimal(out: &mut String, value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // ASCII digits: always UTF-8.
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

fn value(text: String) -> HeaderValue {
    // Built only from ASCII digits, names and punctuation.
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use slidegate::{Decision, Rule};

    use super::*;

    fn outcome(rules: &[(&str, Decision)]) -> Outcome {
        let rules: Vec<(Rule, Decision)> = rules
            .iter()
            .map(|(rate, d)| (Rule::parse(rate).unwrap(), *d))
            .collect();
        let decisions: Vec<Decision> = rules.iter().map(|(_, d)| *d).collect();
        Outcome {
            decision: Decision::combine(&decisions).unwrap(),
            rules,
        }
    }

    fn header(headers: &HeaderMap, name: &str) -> String {
        headers.get(name).unwrap().to_str().unwrap().to_owned()
    }

    #[test]
    fn one_rule_is_the_default_policy() {
        let mut headers = HeaderMap::new();
        let allowed = Decision::from_parts(true, 100, 99, 0, 60_000_000);
        insert(&mut headers, &outcome(&[("100/1m", allowed)]), false);
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            r#""default";q=100;w=60"#
        );
        assert_eq!(header(&headers, "ratelimit"), r#""default";r=99;t=60"#);
        assert!(headers.get("retry-after").is_none());
    }

    #[test]
    fn windows_and_waits_round_up_to_whole_seconds() {
        let mut headers = HeaderMap::new();
        let denied = Decision::from_parts(false, 3, 0, 1_000_001, 1_500_000);
        insert(&mut headers, &outcome(&[("3/250ms", denied)]), true);
        assert_eq!(header(&headers, "ratelimit-policy"), r#""default";q=3;w=1"#);
        assert_eq!(header(&headers, "ratelimit"), r#""default";r=0;t=2"#);
        assert_eq!(header(&headers, "retry-after"), "2");
    }

    #[test]
    fn several_rules_are_listed_in_order() {
        let mut headers = HeaderMap::new();
        let fine = Decision::from_parts(true, 1000, 500, 0, 3_000_000_000);
        let denied = Decision::from_parts(false, 10, 0, 400_000, 900_000);
        insert(
            &mut headers,
            &outcome(&[("1000/1h", fine), ("10/s", denied)]),
            true,
        );
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            r#""r0";q=1000;w=3600, "r1";q=10;w=1"#
        );
        assert_eq!(
            header(&headers, "ratelimit"),
            r#""r0";r=500;t=3000, "r1";r=0;t=1"#
        );
        assert_eq!(header(&headers, "retry-after"), "1");
    }

    #[test]
    fn decimals_are_written_whole() {
        for value in [0, 7, 10, 99, 100, 65_535, u64::MAX] {
            let mut out = String::new();
            push_decimal(&mut out, value);
            assert_eq!(out, value.to_string());
        }
    }
}
