//! Redis key names: `prefix:{key}:rule`, so that every rule of one key, and
//! every key that shares a hash tag, lands in one Redis Cluster slot.

use crate::algorithm::Algorithm;
use crate::rate::{Rate, Rule};
use crate::store::hash_tag;

/// The Redis key holding `rule`'s state for `key`.
///
/// A key that already carries a hash tag (`user:{42}:login`) is used as is;
/// any other is wrapped in braces so the whole key is its tag. The prefix
/// has no braces (checked by the builder), so the tag is always the key's.
pub(crate) fn state_key(prefix: &str, key: &str, rule: Rule) -> String {
    let mut out = key_stem(prefix, key);
    out.push_str(&rule.rate().to_string());
    if rule.algorithm() != Algorithm::SlidingLog {
        out.push(':');
        out.push_str(rule.algorithm().name());
    }
    out
}

/// Everything before the rule: `prefix:{key}:` or `prefix:key:`. It
/// carries the key's hash tag, so it names the key's slot.
pub(crate) fn key_stem(prefix: &str, key: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + key.len() + 24);
    out.push_str(prefix);
    out.push(':');
    if hash_tag(key).is_some() {
        out.push_str(key);
    } else {
        out.push('{');
        out.push_str(key);
        out.push('}');
    }
    out.push(':');
    out
}

/// A SCAN MATCH pattern for every state of `key` (and possibly of other
/// keys that extend it: filter the results with [`is_state_of`]).
pub(crate) fn scan_pattern(prefix: &str, key: &str) -> String {
    let stem = key_stem(prefix, key);
    let mut out = String::with_capacity(stem.len() + 8);
    for c in stem.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

/// True when `redis_key` is the state of some rule of `key`: the stem
/// followed by exactly what [`state_key`] appends. `user:{42}:a` and
/// `user:{42}:a:b` share a prefix, but `5/1s:100/1m` is not a rule.
pub(crate) fn is_state_of(prefix: &str, key: &str, redis_key: &[u8]) -> bool {
    let stem = key_stem(prefix, key);
    let Some(rest) = redis_key.strip_prefix(stem.as_bytes()) else {
        return false;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return false;
    };
    let rate = match rest.split_once(':') {
        Some((rate, name)) => match name.parse::<Algorithm>() {
            Ok(a) if a != Algorithm::SlidingLog => rate,
            _ => return false,
        },
        None => rest,
    };
    rate.parse::<Rate>().is_ok_and(|r| r.to_string() == rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Rule {
        Rule::parse(s).unwrap()
    }

    #[test]
    fn untagged_keys_are_wrapped_and_tagged_keys_kept() {
        assert_eq!(
            state_key("slidegate", "login:10.0.0.1", rule("100/1m")),
            "slidegate:{login:10.0.0.1}:100/1m"
        );
        assert_eq!(
            state_key(
                "p",
                "user:{42}:login",
                rule("10/s").with_algorithm(Algorithm::Gcra)
            ),
            "p:user:{42}:login:10/1s:gcra"
        );
    }

    #[test]
    fn reset_matches_only_the_keys_own_states() {
        let r = rule("100/1m");
        let own = state_key("p", "user:{42}:a", r);
        let longer = state_key("p", "user:{42}:a:5/1s", r);
        let gcra = state_key("p", "user:{42}:a", r.with_algorithm(Algorithm::Gcra));
        assert!(is_state_of("p", "user:{42}:a", own.as_bytes()));
        assert!(is_state_of("p", "user:{42}:a", gcra.as_bytes()));
        assert!(!is_state_of("p", "user:{42}:a", longer.as_bytes()));
        assert!(!is_state_of("p", "user:{42}:a", b"p:user:{42}:a:100/60s"));
        assert!(!is_state_of(
            "p",
            "user:{42}:a",
            b"p:user:{42}:a:100/1m:sliding_log"
        ));
        assert_eq!(scan_pattern("p", "a*b?[c]"), "p:{a\\*b\\?\\[c\\]}:*");
    }
}
