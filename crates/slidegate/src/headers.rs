//! The IETF RateLimit header fields, formatted from [`Rule`]s and
//! [`Decision`]s.
//!
//! This follows draft-ietf-httpapi-ratelimit-headers-10: two Structured
//! Field Lists (RFC 9651) whose items are quota policies named by
//! sf-strings.
//!
//! - `RateLimit-Policy: "p0";q=10;w=1, "p1";q=300;w=60`: every policy's
//!   quota `q` and window `w` in whole seconds, rounded up (a 250 ms window
//!   is `w=1`). It does not change from one response to the next.
//! - `RateLimit: "p0";r=9;t=1, "p1";r=299;t=60`: each policy's own state
//!   for this request: what remains `r`, and `t`, the seconds until more
//!   quota is available: `retry_after` rounded up when the policy denied,
//!   `reset_after` rounded up when it allowed.
//! - `Retry-After` (RFC 9110), on denials: whole seconds rounded up, never
//!   earlier than the `t` of any policy that denied.
//!
//! Functions here are pure: they know nothing about requests, so the
//! middleware and the server share them.
//!
//! ```
//! use slidegate::headers;
//! use slidegate::{Decision, Rule};
//!
//! let rules = [Rule::parse("10/s")?, Rule::parse("300/m")?];
//! let names = headers::default_policy_names(rules.len());
//! let policies = names.iter().map(String::as_str).zip(rules);
//! assert_eq!(headers::ratelimit_policy(policies), r#""p0";q=10;w=1, "p1";q=300;w=60"#);
//!
//! let allowed = Decision::from_parts(true, 10, 9, 0, 400_000); // reset in 0.4 s
//! assert_eq!(headers::ratelimit("p0", &allowed), r#""p0";r=9;t=1"#);
//!
//! let denied = Decision::from_parts(false, 300, 0, 41_200_000, 59_000_000);
//! assert_eq!(headers::ratelimit("p1", &denied), r#""p1";r=0;t=42"#);
//! assert_eq!(headers::retry_after(&denied), 42);
//!
//! // Both policies, each with its own decision.
//! let room = Decision::from_parts(true, 10, 10, 0, 0);
//! let both = headers::ratelimit_list([("p0", &room), ("p1", &denied)]);
//! assert_eq!(both, r#""p0";r=10;t=0, "p1";r=0;t=42"#);
//! # Ok::<(), slidegate::Error>(())
//! ```

use std::borrow::Cow;

use crate::decision::Decision;
use crate::rate::Rule;

/// `RateLimit-Policy`: the quota policies that apply to a request.
pub const RATELIMIT_POLICY: http::HeaderName = http::HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: the current state of the policies that decided a request.
pub const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");

/// The policy name used when a limiter has a single rule.
pub const DEFAULT_POLICY_NAME: &str = "default";

/// A policy name that cannot be written as a Structured Field string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid policy name {0:?}: policy names are sf-strings, printable ASCII (0x20 to 0x7E) only"
)]
pub struct InvalidPolicyName(pub String);

/// Checks that `name` can be sent as an sf-string: printable ASCII only
/// (`"` and `\` are escaped when written).
///
/// ```
/// use slidegate::headers::check_policy_name;
/// assert!(check_policy_name("per-minute").is_ok());
/// assert!(check_policy_name("say \"hi\"").is_ok());
/// assert!(check_policy_name("minüte").is_err());
/// assert!(check_policy_name("tab\there").is_err());
/// ```
pub fn check_policy_name(name: &str) -> Result<(), InvalidPolicyName> {
    if name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        Ok(())
    } else {
        Err(InvalidPolicyName(name.to_owned()))
    }
}

/// The names given to `count` unnamed rules: `"default"` for one rule,
/// `"p0"`, `"p1"`, ... for several.
///
/// ```
/// assert_eq!(slidegate::headers::default_policy_names(1), ["default"]);
/// assert_eq!(slidegate::headers::default_policy_names(2), ["p0", "p1"]);
/// ```
pub fn default_policy_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|index| default_policy_name(index, count).into_owned())
        .collect()
}

/// The name of the unnamed rule `index` of `count` (see
/// [`default_policy_names`]), without allocating for the first 16.
///
/// ```
/// use slidegate::headers::default_policy_name;
/// assert_eq!(default_policy_name(0, 1), "default");
/// assert_eq!(default_policy_name(1, 3), "p1");
/// assert_eq!(default_policy_name(20, 21), "p20");
/// ```
pub fn default_policy_name(index: usize, count: usize) -> Cow<'static, str> {
    const NAMES: [&str; 16] = [
        "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "p13",
        "p14", "p15",
    ];
    if count == 1 {
        return Cow::Borrowed(DEFAULT_POLICY_NAME);
    }
    match NAMES.get(index) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("p{index}")),
    }
}

/// A rule's window in whole seconds, rounded up: the `w` parameter.
/// A 250 ms window is `1`, a 90 s window `90`.
pub fn window_secs(rule: &Rule) -> u64 {
    rule.window_micros().div_ceil(1_000_000)
}

/// The `t` parameter: seconds until more quota is available, rounded up.
/// `retry_after` when denied, `reset_after` when allowed.
pub fn reset_secs(decision: &Decision) -> u64 {
    if decision.allowed() {
        decision.reset_after_secs()
    } else {
        decision.retry_after_secs()
    }
}

/// The `Retry-After` value of a denial, in whole seconds: the wait rounded
/// up, at least 1, and never earlier than the `t` of the `RateLimit` field.
pub fn retry_after(decision: &Decision) -> u64 {
    decision.retry_after_secs().max(reset_secs(decision)).max(1)
}

/// The `RateLimit-Policy` field value for `(name, rule)` pairs, in order:
/// `"p0";q=10;w=1, "p1";q=300;w=60`.
///
/// Names should have passed [`check_policy_name`]; bytes outside printable
/// ASCII are dropped here rather than producing an invalid field.
pub fn ratelimit_policy<N: AsRef<str>>(policies: impl IntoIterator<Item = (N, Rule)>) -> String {
    let policies = policies.into_iter();
    let mut out = String::with_capacity(ITEM_BYTES * policies.size_hint().0.max(1));
    for (i, (name, rule)) in policies.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, name.as_ref());
        out.push_str(";q=");
        push_u64(&mut out, rule.limit());
        out.push_str(";w=");
        push_u64(&mut out, window_secs(&rule));
    }
    out
}

/// Room for one list item and its separator: the fields are written on
/// every response, in one allocation when the names are short.
const ITEM_BYTES: usize = 32;

/// The `RateLimit` field value for the policy `name` that decided
/// `decision`: `"p0";r=9;t=1`.
pub fn ratelimit(name: &str, decision: &Decision) -> String {
    ratelimit_list([(name, decision)])
}

/// The `RateLimit` field value for several policies, each with its own
/// decision, in order: `"p0";r=1;t=1, "p1";r=2;t=60`.
pub fn ratelimit_list<'a, N: AsRef<str>>(
    policies: impl IntoIterator<Item = (N, &'a Decision)>,
) -> String {
    let policies = policies.into_iter();
    let mut out = String::with_capacity(ITEM_BYTES * policies.size_hint().0.max(1));
    for (i, (name, decision)) in policies.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, name.as_ref());
        out.push_str(";r=");
        push_state(&mut out, decision);
    }
    out
}

/// The `"name";r=` that starts a policy's item in the `RateLimit` field,
/// so a caller that sends the field often can prepare it once.
#[cfg(feature = "tower")]
pub(crate) fn ratelimit_item_start(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 5);
    push_sf_string(&mut out, name);
    out.push_str(";r=");
    out
}

/// Appends what follows `;r=` in a policy's item: `9;t=1`.
pub(crate) fn push_state(out: &mut String, decision: &Decision) {
    push_u64(out, decision.remaining());
    out.push_str(";t=");
    push_u64(out, reset_secs(decision));
}

/// Appends `value` in decimal: `write!` costs more than the whole item.
fn push_u64(out: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

/// Appends `value` as an sf-string: quoted, with `"` and `\` escaped.
fn push_sf_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Rule {
        Rule::parse(s).unwrap()
    }

    #[test]
    fn one_rule_is_the_default_policy() {
        let names = default_policy_names(1);
        let value = ratelimit_policy(names.iter().map(String::as_str).zip([rule("100/1m")]));
        assert_eq!(value, r#""default";q=100;w=60"#);
    }

    #[test]
    fn sub_second_windows_round_up_to_one_second() {
        assert_eq!(window_secs(&rule("3/250ms")), 1);
        assert_eq!(window_secs(&rule("3/1500ms")), 2);
        assert_eq!(window_secs(&rule("3/1s")), 1);
        assert_eq!(window_secs(&rule("3/1h")), 3600);
    }

    #[test]
    fn names_are_escaped_as_sf_strings() {
        let value = ratelimit_policy([(r#"a"b\c"#, rule("1/s"))]);
        assert_eq!(value, r#""a\"b\\c";q=1;w=1"#);
        assert_eq!(
            ratelimit("é", &Decision::from_parts(true, 1, 0, 0, 1)),
            r#""";r=0;t=1"#
        );
    }

    #[test]
    fn t_is_the_wait_when_denied_and_the_reset_when_allowed() {
        let allowed = Decision::from_parts(true, 10, 3, 0, 2_000_001);
        assert_eq!(reset_secs(&allowed), 3);
        let denied = Decision::from_parts(false, 10, 0, 1, 9_000_000);
        assert_eq!(reset_secs(&denied), 1);
        assert_eq!(retry_after(&denied), 1);
    }

    #[test]
    fn every_policy_gets_its_own_item() {
        let a = Decision::from_parts(true, 10, 0, 0, 999_999);
        let b = Decision::from_parts(false, 3, 0, 58_000_000, 60_000_000);
        let c = Decision::from_parts(true, u64::MAX, u64::MAX - 1, 0, 0);
        assert_eq!(
            ratelimit_list([("a", &a), ("b", &b), ("c", &c)]),
            r#""a";r=0;t=1, "b";r=0;t=58, "c";r=18446744073709551614;t=0"#
        );
        let mut out = ratelimit_item_start("b");
        push_state(&mut out, &b);
        assert_eq!(out, ratelimit("b", &b));
    }

    #[test]
    fn retry_after_is_never_zero_nor_before_t() {
        let denied = Decision::from_parts(false, 10, 0, 59_000_001, 60_000_000);
        assert_eq!(reset_secs(&denied), 60);
        assert_eq!(retry_after(&denied), 60);
        let odd = Decision::from_parts(false, 10, 0, 0, 0);
        assert_eq!(retry_after(&odd), 1);
    }
}
