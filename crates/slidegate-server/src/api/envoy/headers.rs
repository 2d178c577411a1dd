//! Rate limit header fields for Envoy's clients (`--response-headers`).
//!
//! With `draft10`, every `ShouldRateLimit` answer carries
//! `response_headers_to_add` (Envoy's HTTP rate limit filter adds them to
//! the response its client gets), and every `/v1/check` answer carries the
//! same fields as its own HTTP headers:
//!
//! - `RateLimit-Policy`: one list member per enforced descriptor, named
//!   after its limit's stats key (`domain.key_value.subkey`), with the
//!   quota `q` and the window `w` in seconds;
//! - `RateLimit`: the same members with what remains `r` and the seconds
//!   until more quota is available `t`;
//! - `Retry-After`, in seconds, on OVER_LIMIT.
//!
//! Descriptors with no limit, `unlimited: true`, or a shadow or quota mode
//! limit (never enforced) have no member. The field values follow
//! draft-ietf-httpapi-ratelimit-headers-10 and are formatted by
//! [`slidegate::headers`].

use slidegate::headers;
use slidegate::{Decision, Rule};

use crate::limiter::check::{CheckResponse, Code, MetricName, Verdict};
use crate::rules::Enforcement;

/// Which rate limit header fields answers carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// None (the default, as in envoyproxy/ratelimit).
    #[default]
    Off,
    /// `RateLimit-Policy`, `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10)
    /// and `Retry-After` on OVER_LIMIT.
    Draft10,
}

/// Longest policy name written, in bytes: stats keys come from the config,
/// which may nest descriptors deeply.
const MAX_NAME_BYTES: usize = 128;

/// The header fields of `response` (a check in `domain`), as
/// `(lowercase name, value)` pairs; empty when `mode` is off or no
/// descriptor was enforced.
pub fn fields(
    mode: ResponseHeaders,
    domain: &str,
    response: &CheckResponse<'_>,
) -> Vec<(&'static str, String)> {
    if mode == ResponseHeaders::Off {
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    let mut policies: Vec<Rule> = Vec::new();
    let mut decisions: Vec<Decision> = Vec::new();
    for status in &response.statuses {
        if !matches!(status.verdict, Verdict::Allowed | Verdict::Denied) {
            continue;
        }
        let (Some(limit), Some(decision)) = (status.limit.as_deref(), status.decision) else {
            continue;
        };
        // A limit that never refuses (shadow, quota) or never lets
        // anything pass (`requests_per_unit: 0`) is no quota policy.
        let Enforcement::Rule(rule) = limit.enforcement else {
            continue;
        };
        if limit.shadow_mode || limit.quota_mode {
            continue;
        }
        let name = match status.metric {
            MetricName::Configured | MetricName::Detailed(_) => policy_name(&limit.full_key),
            MetricName::Override => policy_name(&format!("{domain}.override")),
            MetricName::NoLimit => continue,
        };
        names.push(unique(name, &names));
        policies.push(rule);
        decisions.push(decision);
    }
    if names.is_empty() {
        return Vec::new();
    }
    let mut out = vec![
        (
            "ratelimit-policy",
            headers::ratelimit_policy(names.iter().map(String::as_str).zip(policies)),
        ),
        (
            "ratelimit",
            headers::ratelimit_list(names.iter().map(String::as_str).zip(&decisions)),
        ),
    ];
    if response.overall == Code::OverLimit {
        let retry_after = decisions
            .iter()
            .filter(|d| !d.allowed())
            .map(headers::retry_after)
            .max()
            .unwrap_or(1);
        out.push(("retry-after", retry_after.to_string()));
    }
    out
}

/// `text` as a policy name: printable ASCII only (other bytes become `_`),
/// at most [`MAX_NAME_BYTES`].
fn policy_name(text: &str) -> String {
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '_' })
        .take(MAX_NAME_BYTES)
        .collect()
}

/// `name`, or `name#2`, `name#3`, ... when an earlier member has it (two
/// descriptors of one request can match the same limit).
fn unique(name: String, taken: &[String]) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (2..)
        .map(|n| format!("{name}#{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use slidegate::Rate;

    use super::*;
    use crate::limiter::check::{AppliedLimit, DescriptorStatus};
    use crate::rules::{Limit, LimitId, Unit};

    fn limit(full_key: &str, requests_per_unit: u64, shadow: bool) -> Limit {
        let rate = Rate::new(requests_per_unit, Duration::from_secs(60)).expect("a rate");
        Limit {
            id: LimitId(0),
            enforcement: Enforcement::Rule(Rule::new(rate)),
            requests_per_unit,
            unit: Unit::Minute,
            name: None,
            replaces: Vec::new(),
            shadow_mode: shadow,
            quota_mode: false,
            detailed_metric: false,
            full_key: full_key.to_owned(),
        }
    }

    /// A descriptor under `limit`, with what remains and the wait (the
    /// retry when denied, the reset when allowed).
    fn status(
        verdict: Verdict,
        limit: Limit,
        metric: MetricName,
        remaining: u64,
        wait: Duration,
    ) -> DescriptorStatus<'static> {
        let wait = u64::try_from(wait.as_micros()).unwrap();
        let allowed = verdict != Verdict::Denied;
        let decision =
            Decision::from_parts(allowed, limit.requests_per_unit, remaining, wait, wait);
        DescriptorStatus {
            limit: Some(AppliedLimit::Override(Box::new(limit))),
            verdict,
            decision: Some(decision),
            metric,
        }
    }

    fn response(overall: Code, statuses: Vec<DescriptorStatus<'static>>) -> CheckResponse<'static> {
        CheckResponse {
            overall,
            statuses,
            known_domain: true,
            quota_violations: Vec::new(),
            quota_mode: false,
            degraded: false,
        }
    }

    #[test]
    fn off_adds_nothing() {
        let r = response(
            Code::Ok,
            vec![status(
                Verdict::Allowed,
                limit("api.path_/a", 10, false),
                MetricName::Configured,
                9,
                Duration::from_secs(60),
            )],
        );
        assert!(fields(ResponseHeaders::Off, "api", &r).is_empty());
    }

    #[test]
    fn an_allowed_check_lists_each_enforced_descriptor() {
        let r = response(
            Code::Ok,
            vec![
                status(
                    Verdict::Allowed,
                    limit("api.path_/a", 10, false),
                    MetricName::Configured,
                    9,
                    Duration::from_millis(59_500),
                ),
                status(
                    Verdict::Allowed,
                    limit("api.user", 10, true),
                    MetricName::Configured,
                    3,
                    Duration::from_secs(2),
                ),
            ],
        );
        let fields = fields(ResponseHeaders::Draft10, "api", &r);
        assert_eq!(
            fields,
            [
                ("ratelimit-policy", r#""api.path_/a";q=10;w=60"#.to_owned()),
                ("ratelimit", r#""api.path_/a";r=9;t=60"#.to_owned()),
            ]
        );
    }

    #[test]
    fn over_limit_says_when_to_retry_and_names_repeat_apart() {
        let r = response(
            Code::OverLimit,
            vec![
                status(
                    Verdict::Allowed,
                    limit("api.ip", 10, false),
                    MetricName::Configured,
                    4,
                    Duration::from_secs(30),
                ),
                status(
                    Verdict::Denied,
                    limit("api.ip", 10, false),
                    MetricName::Configured,
                    0,
                    Duration::from_millis(41_200),
                ),
                status(
                    Verdict::Denied,
                    limit("", 5, false),
                    MetricName::Override,
                    0,
                    Duration::from_secs(7),
                ),
            ],
        );
        let fields = fields(ResponseHeaders::Draft10, "api", &r);
        assert_eq!(
            fields[0].1,
            r#""api.ip";q=10;w=60, "api.ip#2";q=10;w=60, "api.override";q=5;w=60"#
        );
        assert_eq!(
            fields[1].1,
            r#""api.ip";r=4;t=30, "api.ip#2";r=0;t=42, "api.override";r=0;t=7"#
        );
        assert_eq!(fields[2], ("retry-after", "42".to_owned()));
    }

    #[test]
    fn names_outside_printable_ascii_are_replaced_and_cut() {
        assert_eq!(policy_name("api.city_zürich"), "api.city_z_rich");
        assert_eq!(policy_name(&"k".repeat(1_000)).len(), MAX_NAME_BYTES);
    }
}
