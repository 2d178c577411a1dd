//! The service's store keys: one key space per kind of counter, so that no
//! text a client sends can address a counter of another kind, and no value
//! fails a request by its length.
//!
//! | kind | store key | used by |
//! |---|---|---|
//! | ad-hoc | `a:KEY`, or `ad:{TAG}#DIGEST` when `KEY` is too long | `POST /v1/acquire`, `GET`/`DELETE /v1/keys/{key}`, `slidegate check` |
//! | throttle (redis-cell's `CL.THROTTLE`) | `t:KEY`, or `td:{TAG}#DIGEST` when `KEY` is too long | the RESP port's `CL.THROTTLE` |
//! | configured counter | `c:DOMAIN\|KEY=VALUE\|…` | gRPC `ShouldRateLimit`, `POST /v1/check` |
//! | limit override | `o:DOMAIN\|KEY=VALUE\|…\|LIMIT/WINDOW_MS` | the same, for descriptors with a `limit` |
//! | carry marker | `x:#DIGEST` of a counter key and its new rule | the first decision of a counter after its limit changed |
//!
//! The server writes the prefix, never the client, and the prefixes differ
//! from their first two bytes on: an ad-hoc key such as
//! `api|remote_address=10.2.2.2` is stored as `a:api|…` and can never reach
//! the Envoy counter `c:api|remote_address=10.2.2.2`.
//!
//! An ad-hoc key is kept as written (a `{hash tag}` keeps its Redis Cluster
//! slot: `user:{42}:x` becomes `a:user:{42}:x`), unless it is longer than
//! [`MAX_KEY_LEN`] allows: it is then counted under its digest
//! ([`fit_key`]: `{42}#` and 32 hex digits, the tag kept) in a space of its
//! own (`ad:`), so no short key can be written to equal it.
//!
//! In counter keys, descriptor text (domain, entry keys and values) is
//! escaped: `%`, `|`, `=`, `{`, `}` and `#` become `%25`, `%7C`, `%3D`,
//! `%7B`, `%7D` and `%23`, so a value can forge neither a separator, nor a
//! hash tag, nor a digest. A part longer than [`MAX_PART_LEN`] bytes is
//! replaced by `#` and its [`key_digest`], and a whole key still longer than
//! [`MAX_KEY_LEN`] by its prefix, `#` and the digest of the rest.

use std::fmt::Write as _;

use slidegate::store::{MAX_KEY_LEN, fit_key, hash_tag, key_digest, validate_key};

/// The prefix of ad-hoc keys kept as written.
const ADHOC: &str = "a:";
/// The prefix of ad-hoc keys too long to keep, counted under their digest.
const ADHOC_DIGEST: &str = "ad:";
/// The prefix of `CL.THROTTLE` keys kept as written.
const THROTTLE: &str = "t:";
/// The prefix of `CL.THROTTLE` keys too long to keep.
const THROTTLE_DIGEST: &str = "td:";
/// The prefix of the counters of configured limits.
const COUNTER: &str = "c:";
/// The prefix of the counters of limit overrides.
const OVERRIDE: &str = "o:";
/// The prefix of the markers of counters carried to a changed limit.
const CARRY: &str = "x:";

/// Descriptor parts (domain, entry key or value) longer than this, in
/// bytes, are counted under their digest.
pub const MAX_PART_LEN: usize = 256;

/// The store key of the ad-hoc key `key`.
///
/// Fails only for a key that is malformed whatever its length: empty, or
/// with braces that do not form a `{hash tag}`.
pub fn adhoc_key(key: &str) -> slidegate::Result<String> {
    spaced_key(ADHOC, ADHOC_DIGEST, key)
}

/// The store key of a `CL.THROTTLE` key: as [`adhoc_key`], in a space of
/// its own, so that redis-cell's GCRA state and a client's own rules on
/// the same name never share a counter.
pub fn throttle_key(key: &str) -> slidegate::Result<String> {
    spaced_key(THROTTLE, THROTTLE_DIGEST, key)
}

/// `key` under `prefix`, or its digest under `digest_prefix` when too long.
fn spaced_key(prefix: &str, digest_prefix: &str, key: &str) -> slidegate::Result<String> {
    if key.len() + prefix.len() <= MAX_KEY_LEN {
        validate_key(key)?;
        let mut out = String::with_capacity(prefix.len() + key.len());
        out.push_str(prefix);
        out.push_str(key);
        return Ok(out);
    }
    if key.contains(['{', '}']) && hash_tag(key).is_none() {
        return Err(slidegate::Error::InvalidKey(
            "the key has braces that do not form a hash tag: use {tag} with a non-empty tag, or no braces"
                .into(),
        ));
    }
    let digest = fit_key(key, MAX_KEY_LEN - digest_prefix.len());
    Ok(format!("{digest_prefix}{digest}"))
}

/// The key of the marker that says `counter` has carried its use to
/// `rule`: the first server to count under it there makes the carry, the
/// others find it taken. Its own key space, so no client text reaches it.
pub fn carry_marker(counter: &str, rule: slidegate::Rule) -> String {
    let digest = key_digest(format!("{counter}|{rule}").as_bytes());
    format!("{CARRY}#{digest:032x}")
}

/// A counter key being written, part by part.
#[derive(Debug)]
pub struct CounterKey {
    buf: String,
}

impl CounterKey {
    /// The counter of a configured limit in `domain`.
    pub fn configured(domain: &str) -> CounterKey {
        CounterKey::start(COUNTER, domain)
    }

    /// The counter of a limit override in `domain`.
    pub fn overridden(domain: &str) -> CounterKey {
        CounterKey::start(OVERRIDE, domain)
    }

    fn start(prefix: &str, domain: &str) -> CounterKey {
        let mut buf = String::with_capacity(64);
        buf.push_str(prefix);
        push_part(&mut buf, domain);
        CounterKey { buf }
    }

    /// Appends the entry `|key=value`.
    pub fn entry(&mut self, key: &str, value: &str) {
        self.buf.push('|');
        push_part(&mut self.buf, key);
        self.buf.push('=');
        push_part(&mut self.buf, value);
    }

    /// Appends `|LIMIT/WINDOW_MS`, the rate of an override (written by the
    /// server, so never escaped).
    pub fn rate(&mut self, limit: u64, window_ms: u128) {
        let _ = write!(self.buf, "|{limit}/{window_ms}");
    }

    /// The store key: as written, or its prefix, `#` and the digest of the
    /// rest when it is longer than [`MAX_KEY_LEN`].
    pub fn finish(mut self) -> String {
        if self.buf.len() > MAX_KEY_LEN {
            // Both prefixes are two bytes long.
            let digest = key_digest(&self.buf.as_bytes()[COUNTER.len()..]);
            self.buf.truncate(COUNTER.len());
            let _ = write!(self.buf, "#{digest:032x}");
        }
        self.buf
    }
}

/// Appends one descriptor part: escaped, or `#` and its digest when long.
fn push_part(out: &mut String, text: &str) {
    if text.len() > MAX_PART_LEN {
        let _ = write!(out, "#{:032x}", key_digest(text.as_bytes()));
        return;
    }
    if !text
        .bytes()
        .any(|b| matches!(b, b'%' | b'|' | b'=' | b'{' | b'}' | b'#'))
    {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '|' => out.push_str("%7C"),
            '=' => out.push_str("%3D"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use slidegate::store::slot_key;

    use super::*;

    fn counter(domain: &str, entries: &[(&str, &str)]) -> String {
        let mut key = CounterKey::configured(domain);
        for (k, v) in entries {
            key.entry(k, v);
        }
        key.finish()
    }

    #[test]
    fn adhoc_keys_keep_their_text_and_their_hash_tag() {
        assert_eq!(adhoc_key("login:10.0.0.1").unwrap(), "a:login:10.0.0.1");
        let tagged = adhoc_key("user:{42}:x").unwrap();
        assert_eq!(tagged, "a:user:{42}:x");
        assert_eq!(slot_key(&tagged), "42");
    }

    #[test]
    fn an_adhoc_key_never_equals_a_counter() {
        let envoy = counter("api", &[("remote_address", "10.2.2.2")]);
        assert_eq!(envoy, "c:api|remote_address=10.2.2.2");
        for text in ["api|remote_address=10.2.2.2", &envoy, "c:api", ":c:api"] {
            let adhoc = adhoc_key(text).unwrap();
            assert!(adhoc.starts_with("a:"), "{adhoc}");
            assert_ne!(adhoc, envoy);
        }
    }

    #[test]
    fn carry_markers_are_one_per_counter_and_rule_in_a_space_of_their_own() {
        let rule = |text| slidegate::Rule::parse(text).unwrap();
        let user1 = counter("api", &[("user", "1")]);
        let user2 = counter("api", &[("user", "2")]);
        let marker = carry_marker(&user1, rule("5/1h"));
        assert!(marker.starts_with("x:#") && marker.len() == 35, "{marker}");
        validate_key(&marker).unwrap();
        assert_ne!(marker, carry_marker(&user2, rule("5/1h")));
        assert_ne!(marker, carry_marker(&user1, rule("6/1h")));
        assert_eq!(marker, carry_marker(&user1, rule("5/1h")));
    }

    #[test]
    fn throttle_keys_have_a_space_of_their_own() {
        assert_eq!(throttle_key("user:1").unwrap(), "t:user:1");
        assert_ne!(
            throttle_key("user:1").unwrap(),
            adhoc_key("user:1").unwrap()
        );
        let long = "k".repeat(5000);
        assert!(throttle_key(&long).unwrap().starts_with("td:#"));
        assert_ne!(throttle_key(&long).unwrap(), adhoc_key(&long).unwrap());
    }

    #[test]
    fn long_adhoc_keys_are_counted_under_their_digest_in_their_slot() {
        let long = format!("user:{{42}}:{}", "x".repeat(5000));
        let key = adhoc_key(&long).unwrap();
        assert!(key.starts_with("ad:{42}#"), "{key}");
        assert!(validate_key(&key).is_ok());
        assert_eq!(slot_key(&key), "42");
        assert_eq!(key, adhoc_key(&long).unwrap(), "stable");
        assert_ne!(key, adhoc_key(&format!("{long}y")).unwrap());
        // The longest key kept as written, and the shortest digested one.
        let kept = "k".repeat(MAX_KEY_LEN - 2);
        assert_eq!(adhoc_key(&kept).unwrap().len(), MAX_KEY_LEN);
        assert!(adhoc_key(&format!("{kept}k")).unwrap().starts_with("ad:#"));
    }

    #[test]
    fn a_short_key_cannot_forge_a_digested_one() {
        let long = "k".repeat(2000);
        let digested = adhoc_key(&long).unwrap();
        let forged = adhoc_key(&digested["ad:".len()..]).unwrap();
        assert_ne!(forged, digested);
    }

    #[test]
    fn malformed_adhoc_keys_are_refused_at_any_length() {
        for bad in ["", "a}b", "{}x"] {
            assert!(adhoc_key(bad).is_err(), "{bad:?}");
        }
        assert!(adhoc_key(&format!("a}}{}", "b".repeat(5000))).is_err());
    }

    #[test]
    fn counter_parts_are_escaped_so_no_value_forges_a_separator_a_tag_or_a_digest() {
        assert_eq!(
            counter("d", &[("k", "a|b=c{d}#%")]),
            "c:d|k=a%7Cb%3Dc%7Bd%7D%23%25"
        );
        assert_ne!(
            counter("d", &[("k", "v|k2=v2")]),
            counter("d", &[("k", "v"), ("k2", "v2")])
        );
        let long = "v".repeat(MAX_PART_LEN + 1);
        let digested = counter("d", &[("k", &long)]);
        let forged = counter("d", &[("k", &digested["c:d|k=".len()..])]);
        assert_ne!(digested, forged);
        assert!(forged.contains("%23"), "{forged}");
    }

    #[test]
    fn long_values_are_counted_under_their_digest() {
        let a = counter("api", &[("path", &"/a".repeat(550))]);
        let b = counter("api", &[("path", &"/b".repeat(550))]);
        assert!(a.starts_with("c:api|path=#") && a.len() == "c:api|path=#".len() + 32);
        assert_ne!(a, b);
        assert_eq!(a, counter("api", &[("path", &"/a".repeat(550))]));
        // Exactly MAX_PART_LEN bytes are kept.
        let edge = "v".repeat(MAX_PART_LEN);
        assert_eq!(counter("d", &[("k", &edge)]), format!("c:d|k={edge}"));
    }

    #[test]
    fn many_long_parts_still_make_a_valid_key() {
        let value = "%".repeat(MAX_PART_LEN);
        let entries: Vec<(&str, &str)> = (0..16).map(|_| ("k", value.as_str())).collect();
        let key = counter("d", &entries);
        assert!(key.starts_with("c:#") && key.len() == 35, "{key}");
        assert!(validate_key(&key).is_ok());
        let mut other = CounterKey::overridden("d");
        for (k, v) in &entries {
            other.entry(k, v);
        }
        let other = other.finish();
        assert!(other.starts_with("o:#"));
        assert_ne!(key, other);
    }

    #[test]
    fn overrides_have_a_space_of_their_own() {
        let mut key = CounterKey::overridden("api");
        key.entry("path", "/");
        key.rate(5, 60_000);
        let key = key.finish();
        assert_eq!(key, "o:api|path=/|5/60000");
        assert_ne!(key, counter("api", &[("path", "/")]));
    }
}
