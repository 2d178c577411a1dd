//! Redis key names: `prefix:v2:{key}:rule` (or `prefix:v2:t:key:rule` for a
//! key with its own hash tag), so that every rule of one key, and every key
//! that shares a hash tag, lands in one Redis Cluster slot ([`slot_of`]),
//! and no two keys share a name.
//!
//! The `v2` is the version of the stored format (see `sliding_log.lua`):
//! a release that changes the format changes it, so old and new values
//! never meet, not even during a rolling upgrade. The price is that
//! counters start fresh once when the version changes; the old keys
//! expire on their own.

use crate::rate::Algorithm;
use crate::rate::{Rate, Rule};
use crate::store::key::{hash_tag, slot_key};

/// The version of the stored format, part of every key name.
pub(crate) const FORMAT: &str = "v2";

/// Slots in a Redis Cluster.
const SLOTS: u16 = 16_384;

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, or of
/// the whole key, modulo 16384. A Redis key named by `keys.rs` has the
/// slot of the caller's key.
pub(crate) fn slot_of(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(slot_key(key).as_bytes()) % SLOTS
}

/// The Redis key holding `rule`'s state for `key`.
pub(crate) fn state_key(prefix: &str, key: &str, rule: Rule) -> String {
    let mut out = Vec::with_capacity(prefix.len() + key.len() + 40);
    write_state_key(&mut out, prefix, key, rule);
    // Written from `&str`s and ASCII only.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends [`state_key`] to `out`, without a `String` of its own (a
/// decision writes its keys straight into the buffer that travels to Redis).
pub(crate) fn write_state_key(out: &mut Vec<u8>, prefix: &str, key: &str, rule: Rule) {
    write_stem(out, prefix, key);
    write_rule_name(out, rule);
}

/// What a state key appends to its stem: the rule as `100/1m`,
/// `10/1s:gcra`, `10/1s:gcra:burst50`.
fn write_rule_name(out: &mut Vec<u8>, rule: Rule) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}", rule.rate());
    if rule.algorithm() != Algorithm::SlidingLog {
        out.push(b':');
        out.extend_from_slice(rule.algorithm().name().as_bytes());
    }
    // A burst is part of the state (`Rule::same_state`): `10/1s:gcra:burst50`.
    if rule.has_burst() {
        let _ = write!(out, ":burst{}", rule.burst());
    }
}

/// Everything before the rule: `prefix:v2:{key}:` for a key without a hash
/// tag (the whole key becomes its tag), `prefix:v2:t:key:` for one with a
/// tag (kept as it is). The prefix has no braces (checked by the builder),
/// so the first `{` is always the key's, and the stem names the key's
/// slot. A key without a tag has no braces at all (see `validate_key`), so
/// `{` right after the version is only ever an untagged key: `X` and `{X}`
/// get different names (`p:v2:{X}:` and `p:v2:t:{X}:`).
pub(crate) fn key_stem(prefix: &str, key: &str) -> String {
    let mut out = Vec::with_capacity(prefix.len() + key.len() + 28);
    write_stem(&mut out, prefix, key);
    // Written from `&str`s and ASCII only.
    String::from_utf8(out).unwrap_or_default()
}

pub(super) fn write_stem(out: &mut Vec<u8>, prefix: &str, key: &str) {
    out.extend_from_slice(prefix.as_bytes());
    out.push(b':');
    out.extend_from_slice(FORMAT.as_bytes());
    if hash_tag(key).is_some() {
        out.extend_from_slice(b":t:");
        out.extend_from_slice(key.as_bytes());
    } else {
        out.extend_from_slice(b":{");
        out.extend_from_slice(key.as_bytes());
        out.push(b'}');
    }
    out.push(b':');
}

/// What the Redis key of a rule's lockout appends to its state's key:
/// the time (µs) the block ends, expiring then (written by `main.lua`).
pub(crate) const BLOCK_SUFFIX: &str = ":block";

/// What the Redis key of a concurrency rule's waiters appends to its
/// state's key (written by `concurrency.lua`).
pub(crate) const QUEUE_SUFFIX: &str = ":q";

/// The Redis key of the undo journal of one cross-slot decision in the
/// slot of `key` (see `cross_slot.rs`): `prefix:v2:undo:{slot}:token`. No
/// state key starts that way (a stem has `{` or `t:` after the version).
pub(crate) fn journal_key(prefix: &str, key: &str, token: &str) -> String {
    format!("{prefix}:{FORMAT}:undo:{{{}}}:{token}", slot_key(key))
}

/// The Redis key of the record of the lease `id` (its text, whose first
/// four hex digits are its key's slot, see `leases.rs`):
/// `prefix:v2:lease:{tag}:id`, in that slot. The tag is the shortest
/// text of the slot ([`slot_tag`]): the id names the slot, not the key,
/// so that a lease is found from its id alone and says nothing of its
/// key. No state key starts that way (a stem has `{` or `t:` after the
/// version).
pub(crate) fn lease_key(prefix: &str, slot: u16, id: &str) -> String {
    format!("{prefix}:{FORMAT}:lease:{{{}}}:{id}", slot_tag(slot))
}

/// The Redis key of the set of open leases (see `lease.lua`).
pub(crate) fn open_leases_key(prefix: &str) -> String {
    format!("{prefix}:{FORMAT}:leases")
}

/// A short text whose Redis Cluster slot is `slot`: the first, counting
/// in base 36, of every slot's (found once per process, in a few
/// milliseconds).
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let mut tags = vec![String::new(); usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut n: u64 = 0;
        while missing > 0 {
            let tag = base36(n);
            let slot =
                usize::from(crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS);
            if tags[slot].is_empty() {
                tags[slot] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    TAGS.get(usize::from(slot)).map_or("", String::as_str)
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
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
    // A rule's lockout lives beside its state (see main.lua), and so do
    // the waiters of a concurrency rule (see concurrency.lua).
    let rest = rest.strip_suffix(BLOCK_SUFFIX).unwrap_or(rest);
    let rest = rest.strip_suffix(QUEUE_SUFFIX).unwrap_or(rest);
    // `rate`, `rate:algorithm` or `rate:gcra:burstN`, each as written.
    let mut parts = rest.split(':');
    let rate = parts.next().unwrap_or_default();
    let rule = match (parts.next(), parts.next(), parts.next()) {
        (None, ..) => rate.parse::<Rate>().map(Rule::new),
        (Some(name), burst, None) => match name.parse::<Algorithm>() {
            Ok(a) if a != Algorithm::SlidingLog => {
                let rule = rate.parse::<Rate>().map(|r| Rule::new(r).with_algorithm(a));
                match burst.map(|b| b.strip_prefix("burst").and_then(|n| n.parse::<u64>().ok())) {
                    None => rule,
                    Some(Some(n)) => rule.and_then(|r| r.with_burst(n)),
                    Some(None) => return false,
                }
            }
            _ => return false,
        },
        _ => return false,
    };
    rule.is_ok_and(|rule| {
        let mut written = Vec::new();
        write_rule_name(&mut written, rule);
        written == rest.as_bytes()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_of_redis_cluster() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 12_739);
        assert_eq!(slot_of("user:{42}:login"), slot_of("42"));
        assert_eq!(slot_of("foo"), 12_182);
    }

    fn rule(s: &str) -> Rule {
        Rule::parse(s).unwrap()
    }

    #[test]
    fn a_lockout_is_a_state_of_its_key() {
        let state = state_key("p", "login:1", rule("5/15m"));
        let block = format!("{state}{BLOCK_SUFFIX}");
        assert!(is_state_of("p", "login:1", block.as_bytes()));
        assert!(!is_state_of("p", "login:1", b"p:v2:{login:1}:block"));
    }

    #[test]
    fn untagged_keys_are_wrapped_and_tagged_keys_kept() {
        assert_eq!(
            state_key("slidegate", "login:10.0.0.1", rule("100/1m")),
            "slidegate:v2:{login:10.0.0.1}:100/1m"
        );
        assert_eq!(
            state_key(
                "p",
                "user:{42}:login",
                rule("10/s").with_algorithm(Algorithm::Gcra)
            ),
            "p:v2:t:user:{42}:login:10/1s:gcra"
        );
    }

    #[test]
    fn a_key_and_the_same_key_as_a_tag_get_different_names_in_one_slot() {
        let r = rule("2/1s");
        let (plain, tagged) = (state_key("p", "abc", r), state_key("p", "{abc}", r));
        assert_ne!(plain, tagged);
        assert_eq!(slot_key(&plain), "abc");
        assert_eq!(slot_key(&tagged), "abc");
    }

    #[test]
    fn journals_share_the_slot_of_their_key_and_no_state_name() {
        let journal = journal_key("p", "user:{42}:a", "t0k3n");
        assert_eq!(journal, "p:v2:undo:{42}:t0k3n");
        assert_eq!(slot_key(&journal), "42");
        assert_eq!(slot_key(&journal_key("p", "plain", "x")), "plain");
        assert!(!is_state_of("p", "undo", journal.as_bytes()));
    }

    #[test]
    fn a_lease_record_lives_in_the_slot_its_id_names() {
        for slot in [0, 1, 12_182, 16_383] {
            let record = lease_key("p", slot, "00ffabc");
            assert_eq!(slot_of(&record), slot, "{record}");
            assert!(record.starts_with("p:v2:lease:{"));
        }
        let record = lease_key("p", slot_of("user:{42}:a"), "x");
        assert_eq!(slot_of(&record), slot_of("42"));
        assert!(!is_state_of("p", "lease", record.as_bytes()));
    }

    #[test]
    fn the_waiters_of_a_concurrency_rule_are_a_state_of_their_key() {
        let rule = Rule::concurrency(3).unwrap();
        let queue = format!("{}{QUEUE_SUFFIX}", state_key("p", "k", rule));
        assert_eq!(queue, "p:v2:{k}:3/1d:concurrency:q");
        assert!(is_state_of("p", "k", queue.as_bytes()));
    }

    #[test]
    fn reset_matches_only_the_keys_own_states() {
        let r = rule("100/1m");
        let own = state_key("p", "user:{42}:a", r);
        let longer = state_key("p", "user:{42}:a:5/1s", r);
        let gcra = state_key("p", "user:{42}:a", r.with_algorithm(Algorithm::Gcra));
        assert!(is_state_of("p", "user:{42}:a", own.as_bytes()));
        assert!(is_state_of("p", "user:{42}:a", gcra.as_bytes()));
        let burst = r.with_algorithm(Algorithm::Gcra).with_burst(500).unwrap();
        let burst = state_key("p", "user:{42}:a", burst);
        assert!(burst.ends_with(":100/1m:gcra:burst500"), "{burst}");
        assert!(is_state_of("p", "user:{42}:a", burst.as_bytes()));
        for not_a_burst in [
            ":100/1m:gcra:burst",
            ":100/1m:gcra:burst100",
            ":100/1m:gcra:b5",
        ] {
            let name = format!("p:v2:t:user:{{42}}:a{not_a_burst}");
            assert!(!is_state_of("p", "user:{42}:a", name.as_bytes()), "{name}");
        }
        assert!(!is_state_of("p", "user:{42}:a", longer.as_bytes()));
        assert!(!is_state_of(
            "p",
            "user:{42}:a",
            b"p:v2:t:user:{42}:a:100/60s"
        ));
        assert!(!is_state_of(
            "p",
            "user:{42}:a",
            b"p:v2:t:user:{42}:a:100/1m:sliding_log"
        ));
        assert!(!is_state_of("p", "{a}", state_key("p", "a", r).as_bytes()));
        assert_eq!(scan_pattern("p", "a*b?[c]"), "p:v2:{a\\*b\\?\\[c\\]}:*");
    }
}
