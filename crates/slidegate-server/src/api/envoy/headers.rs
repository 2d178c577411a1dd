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
use slidegate::{Decision, Rate, Rule};

use crate::limiter::check::{CheckResponse, Code, MetricName, Outcome};

/// Which rate limit header fields answers carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ResponseHeaders {
    /// None (the default, as in envoyproxy/ratelimit).
    #[default]
    Off,
    /// `RateLimit-Policy`, `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10)
    /// and `Retry-After` on OVER_LIMIT.
    #[value(name = "draft10")]
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
    response: &CheckResponse,
) -> Vec<(&'static str, String)> {
    if mode == ResponseHeaders::Off {
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    let mut policies: Vec<Rule> = Vec::new();
    let mut decisions: Vec<Decision> = Vec::new();
    for (status, (outcome, metric)) in response.statuses.iter().zip(&response.outcomes) {
        let enforced = matches!(outcome, Outcome::Allowed | Outcome::Denied);
        let (Some(limit), true) = (&status.current_limit, enforced) else {
            continue;
        };
        let name = match metric {
            MetricName::Configured(l) | MetricName::Detailed(l, _) => {
                if l.shadow_mode || l.quota_mode {
                    continue;
                }
                policy_name(&l.full_key)
            }
            MetricName::Override => policy_name(&format!("{domain}.override")),
            MetricName::NoLimit => continue,
        };
        let Ok(rate) = Rate::new(limit.requests_per_unit, limit.unit.duration()) else {
            continue;
        };
        let name = unique(name, &names);
        let wait = u64::try_from(status.duration_until_reset.as_micros()).unwrap_or(u64::MAX);
        let denied = status.code == Code::OverLimit;
        decisions.push(Decision::from_parts(
            !denied,
            limit.requests_per_unit,
            status.limit_remaining,
            if denied { wait } else { 0 },
            wait,
        ));
        policies.push(Rule::new(rate));
        names.push(name);
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
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::limiter::check::{CurrentLimit, DescriptorStatus};
    use crate::rules::{Enforcement, Limit, Unit};

    fn status(code: Code, limit: u64, remaining: u64, wait: Duration) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: Some(CurrentLimit {
                name: None,
                requests_per_unit: limit,
                unit: Unit::Minute,
            }),
            limit_remaining: remaining,
            duration_until_reset: wait,
        }
    }

    fn configured(full_key: &str, shadow: bool) -> MetricName {
        let rule = Rule::new(Rate::new(10, Duration::from_secs(60)).expect("a rate"));
        MetricName::Configured(Arc::new(Limit {
            enforcement: Enforcement::Rule(rule),
            requests_per_unit: 10,
            unit: Unit::Minute,
            name: None,
            replaces: Vec::new(),
            shadow_mode: shadow,
            quota_mode: false,
            detailed_metric: false,
            full_key: full_key.to_owned(),
            counters: Default::default(),
            stats: Default::default(),
        }))
    }

    fn response(
        overall: Code,
        parts: Vec<(DescriptorStatus, Outcome, MetricName)>,
    ) -> CheckResponse {
        let mut response = CheckResponse {
            overall,
            statuses: Vec::new(),
            outcomes: Vec::new(),
            known_domain: true,
            quota_violations: Vec::new(),
            quota_mode: false,
            degraded: false,
        };
        for (status, outcome, metric) in parts {
            response.statuses.push(status);
            response.outcomes.push((outcome, metric));
        }
        response
    }

    #[test]
    fn off_adds_nothing() {
        let r = response(
            Code::Ok,
            vec![(
                status(Code::Ok, 10, 9, Duration::from_secs(60)),
                Outcome::Allowed,
                configured("api.path_/a", false),
            )],
        );
        assert!(fields(ResponseHeaders::Off, "api", &r).is_empty());
    }

    #[test]
    fn an_allowed_check_lists_each_enforced_descriptor() {
        let r = response(
            Code::Ok,
            vec![
                (
                    status(Code::Ok, 10, 9, Duration::from_millis(59_500)),
                    Outcome::Allowed,
                    configured("api.path_/a", false),
                ),
                (
                    status(Code::Ok, 10, 3, Duration::from_secs(2)),
                    Outcome::Allowed,
                    configured("api.user", true),
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
                (
                    status(Code::Ok, 10, 4, Duration::from_secs(30)),
                    Outcome::Allowed,
                    configured("api.ip", false),
                ),
                (
                    status(Code::OverLimit, 10, 0, Duration::from_millis(41_200)),
                    Outcome::Denied,
                    configured("api.ip", false),
                ),
                (
                    status(Code::OverLimit, 5, 0, Duration::from_secs(7)),
                    Outcome::Denied,
                    MetricName::Override,
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
