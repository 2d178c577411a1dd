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
#[inline]
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
/// ASCII are dropped here rather than producing an invalid field. The
/// pairs are walked twice (their size, then their text), so the string's
/// capacity is its length.
pub fn ratelimit_policy<N, I>(policies: I) -> String
where
    N: AsRef<str>,
    I: IntoIterator<Item = (N, Rule)>,
    I::IntoIter: Clone,
{
    write_list(policies.into_iter(), &POLICY, |rule| {
        (rule.limit(), window_secs(rule))
    })
}

/// The `RateLimit` field value for the policy `name` that decided
/// `decision`: `"p0";r=9;t=1`.
pub fn ratelimit(name: &str, decision: &Decision) -> String {
    ratelimit_list([(name, decision)])
}

/// The `RateLimit` field value for several policies, each with its own
/// decision, in order: `"p0";r=1;t=1, "p1";r=2;t=60`.
///
/// As [`ratelimit_policy`], the string's capacity is its length: an
/// [`http::HeaderValue`] made from it takes the buffer as it is.
pub fn ratelimit_list<'a, N, I>(policies: I) -> String
where
    N: AsRef<str>,
    I: IntoIterator<Item = (N, &'a Decision)>,
    I::IntoIter: Clone,
{
    write_list(policies.into_iter(), &STATE, |decision| {
        (decision.remaining(), reset_secs(decision))
    })
}

/// The two parameters of a field's items: `;r=` and `;t=` for
/// `RateLimit`, `;q=` and `;w=` for `RateLimit-Policy`.
struct Params {
    first: &'static str,
    second: &'static str,
    /// `"default";` and `first`: an item of the default policy up to its
    /// first value.
    default_start: &'static str,
}

const STATE: Params = Params {
    first: ";r=",
    second: ";t=",
    default_start: "\"default\";r=",
};

const POLICY: Params = Params {
    first: ";q=",
    second: ";w=",
    default_start: "\"default\";q=",
};

/// A list of `"name";k0=v0;k1=v1` items, one per entry, separated by
/// `", "`, in one allocation of exactly its size. `params` are the two
/// parameters' `;k=`, `values` their values for an entry.
///
/// The usual list, the single rule named [`DEFAULT_POLICY_NAME`], is
/// written from a static start and inlined into the caller: it is on
/// every answer of a one-rule limiter.
#[inline]
fn write_list<N: AsRef<str>, T>(
    entries: impl Iterator<Item = (N, T)> + Clone,
    params: &Params,
    values: impl Fn(&T) -> (u64, u64),
) -> String {
    let mut rest = entries.clone();
    if let (Some((name, entry)), None) = (rest.next(), rest.next())
        && name.as_ref() == DEFAULT_POLICY_NAME
    {
        return write_default_item(params, values(&entry));
    }
    write_items(entries, params, values)
}

/// The default policy's item: its four pieces joined at once.
#[inline]
fn write_default_item(params: &Params, (first, second): (u64, u64)) -> String {
    let (mut first_digits, mut second_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
    [
        params.default_start,
        first_digits.format(first),
        params.second,
        second_digits.format(second),
    ]
    .concat()
}

/// Any list: the entries are walked twice, their size then their text.
fn write_items<N: AsRef<str>, T>(
    entries: impl Iterator<Item = (N, T)> + Clone,
    params: &Params,
    values: impl Fn(&T) -> (u64, u64),
) -> String {
    let len = entries
        .clone()
        .enumerate()
        .map(|(i, (name, entry))| {
            let (first, second) = values(&entry);
            let separator = if i == 0 { 0 } else { SEPARATOR.len() };
            separator
                + sf_string_len(name.as_ref())
                + params.first.len()
                + decimal_len(first)
                + params.second.len()
                + decimal_len(second)
        })
        .sum();
    let mut out = String::with_capacity(len);
    for (i, (name, entry)) in entries.enumerate() {
        if i > 0 {
            out.push_str(SEPARATOR);
        }
        let (first, second) = values(&entry);
        push_sf_string(&mut out, name.as_ref());
        out.push_str(params.first);
        push_u64(&mut out, first);
        out.push_str(params.second);
        push_u64(&mut out, second);
    }
    debug_assert_eq!(out.len(), len, "a list item's size was miscounted");
    out
}

const SEPARATOR: &str = ", ";

/// The number of decimal digits of `value`.
fn decimal_len(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

fn push_u64(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// The size of `value` written by [`push_sf_string`].
fn sf_string_len(value: &str) -> usize {
    let body: usize = value.bytes().map(sf_string_byte_len).sum();
    body + 2
}

/// What one byte of a name becomes in an sf-string: escaped (2 bytes),
/// kept (1) or dropped (0).
fn sf_string_byte_len(byte: u8) -> usize {
    usize::from(SF_STRING_BYTE_LENS[usize::from(byte)])
}

/// [`sf_string_byte_len`] of every byte: a load where a match costs a
/// few branches, for a check made on every response.
const SF_STRING_BYTE_LENS: [u8; 256] = {
    let mut lens = [0; 256];
    let mut byte = b' ';
    while byte <= b'~' {
        lens[byte as usize] = 1;
        byte += 1;
    }
    lens[b'"' as usize] = 2;
    lens[b'\\' as usize] = 2;
    lens
};

/// Whether `name` goes into an sf-string as it is: printable ASCII with
/// no `"` or `\\` to escape.
fn is_plain(name: &str) -> bool {
    name.bytes().all(|byte| sf_string_byte_len(byte) == 1)
}

/// Appends `value` as an sf-string: quoted, with `"` and `\` escaped and
/// bytes outside printable ASCII dropped. A checked name with nothing to
/// escape, as every default name, is copied whole.
fn push_sf_string(out: &mut String, value: &str) {
    out.push('"');
    if is_plain(value) {
        out.push_str(value);
    } else {
        for byte in value.bytes() {
            match sf_string_byte_len(byte) {
                2 => {
                    out.push('\\');
                    out.push(char::from(byte));
                }
                1 => out.push(char::from(byte)),
                _ => {}
            }
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
    }

    #[test]
    fn retry_after_is_never_zero_nor_before_t() {
        let denied = Decision::from_parts(false, 10, 0, 59_000_001, 60_000_000);
        assert_eq!(reset_secs(&denied), 60);
        assert_eq!(retry_after(&denied), 60);
        let odd = Decision::from_parts(false, 10, 0, 0, 0);
        assert_eq!(retry_after(&odd), 1);
    }

    /// The writer before sizes were counted first: the format the exact
    /// writer is held to, byte for byte.
    mod previous {
        /// `"name";k0=v0;k1=v1` items joined by `", "`: `RateLimit-Policy`
        /// with `q` and `w`, `RateLimit` with `r` and `t`.
        pub fn list<'a>(
            items: impl IntoIterator<Item = (&'a str, u64, u64)>,
            (k0, k1): (&str, &str),
        ) -> String {
            let mut out = String::new();
            for (i, (name, v0, v1)) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_sf_string(&mut out, name);
                out.push_str(&format!(";{k0}={v0};{k1}={v1}"));
            }
            out
        }

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
    }

    /// Both fields of `policies` as the exact writer and the previous one
    /// write them: the same bytes, in strings with no unused capacity.
    fn assert_written_as_before(policies: &[(&str, Rule, Decision)]) {
        let rules = || policies.iter().map(|(name, rule, _)| (*name, *rule));
        let states = || policies.iter().map(|(name, _, decision)| (*name, decision));
        let quotas = policies
            .iter()
            .map(|(name, rule, _)| (*name, rule.limit(), window_secs(rule)));
        let state_values = policies
            .iter()
            .map(|(name, _, decision)| (*name, decision.remaining(), reset_secs(decision)));
        for (now, before) in [
            (
                ratelimit_policy(rules()),
                previous::list(quotas, ("q", "w")),
            ),
            (
                ratelimit_list(states()),
                previous::list(state_values, ("r", "t")),
            ),
        ] {
            assert_eq!(now, before);
            assert_eq!(now.capacity(), now.len(), "{now}");
        }
    }

    #[test]
    fn one_rule_is_written_as_before_in_its_exact_size() {
        for decision in [
            Decision::from_parts(true, 100, 99, 0, 59_999_001),
            Decision::from_parts(true, 1, 0, 0, 1),
            Decision::from_parts(false, 5, 0, 1_500_000, 60_000_000),
            Decision::from_parts(true, 10, 9, 0, 0),
            Decision::from_parts(true, u64::MAX, u64::MAX - 1, 0, u64::MAX),
        ] {
            assert_written_as_before(&[(DEFAULT_POLICY_NAME, rule("100/1m"), decision)]);
        }
        for rate in ["1/1s", "9/250ms", "10/10s", "99999/1h", "100000/1d"] {
            let decision = Decision::from_parts(true, 1, 0, 0, 999_999);
            assert_written_as_before(&[(DEFAULT_POLICY_NAME, rule(rate), decision)]);
        }
    }

    #[test]
    fn several_rules_are_written_as_before_in_their_exact_size() {
        let fine = Decision::from_parts(true, 1000, 500, 0, 3_000_000_000);
        let denied = Decision::from_parts(false, 10, 0, 400_000, 900_000);
        assert_written_as_before(&[("p0", rule("1000/1h"), fine), ("p1", rule("10/s"), denied)]);
        let names = default_policy_names(17);
        let many: Vec<(&str, Rule, Decision)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let i = i as u64;
                let decision = Decision::from_parts(
                    i.is_multiple_of(2),
                    10 + i,
                    i,
                    i * 999_999,
                    i * 10_u64.pow(i as u32 % 12),
                );
                (name.as_str(), rule("10/s"), decision)
            })
            .collect();
        assert_written_as_before(&many);
    }

    #[test]
    fn names_that_need_escaping_are_written_as_before_in_their_exact_size() {
        let decision = Decision::from_parts(true, 7, 6, 0, 1_000_000);
        for name in [
            r#"a"b\c"#,
            r#"""#,
            "\\",
            "say \"hi\" \\o/",
            "é",
            "tab\there",
            "minüte\"",
            "",
            " ~",
        ] {
            assert_written_as_before(&[(name, rule("7/s"), decision)]);
            assert_written_as_before(&[
                ("p0", rule("7/s"), decision),
                (name, rule("1/m"), decision),
            ]);
        }
        assert_eq!(ratelimit(r#"a"b"#, &decision), r#""a\"b";r=6;t=1"#);
    }

    #[test]
    fn degraded_answers_are_written_as_before_in_their_exact_size() {
        // A failure policy's answers: fail-open with the whole limit left,
        // fail-closed with the longest wait there is.
        let open = Decision::from_parts(true, 100, 100, 0, 0).into_degraded();
        let closed = Decision::from_parts(false, u64::MAX, 0, u64::MAX, u64::MAX).into_degraded();
        assert_written_as_before(&[(DEFAULT_POLICY_NAME, rule("100/1m"), open)]);
        assert_written_as_before(&[(DEFAULT_POLICY_NAME, rule("100/1m"), closed)]);
        assert_written_as_before(&[("p0", rule("100/1m"), open), ("p1", rule("5/s"), closed)]);
        assert_eq!(ratelimit("p1", &closed), r#""p1";r=0;t=18446744073710"#);
    }

    #[test]
    fn zero_remaining_is_written_as_before_in_its_exact_size() {
        for decision in [
            Decision::from_parts(false, 3, 0, 1, 9_000_000),
            Decision::from_parts(true, 1, 0, 0, 0),
            Decision::from_parts(false, 10, 0, 0, 0),
        ] {
            assert_written_as_before(&[(DEFAULT_POLICY_NAME, rule("3/s"), decision)]);
            assert_written_as_before(&[
                ("p0", rule("3/s"), decision),
                ("p1", rule("3/s"), decision),
            ]);
        }
        assert_eq!(
            ratelimit("default", &Decision::from_parts(false, 3, 0, 1, 9_000_000)),
            r#""default";r=0;t=1"#
        );
    }

    #[test]
    fn decimal_lengths_match_the_digits_written() {
        let mut value = 1_u64;
        for digits in 1..=19 {
            for v in [value - 1, value, value * 9, value * 10 - 1] {
                assert_eq!(decimal_len(v), v.to_string().len(), "{v}");
            }
            assert_eq!(decimal_len(value), digits);
            value *= 10;
        }
        assert_eq!(decimal_len(u64::MAX), 20);
    }
}
