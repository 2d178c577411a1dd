//! Store keys: what every store accepts, where a key lives on Redis
//! Cluster, and how a value of any length becomes a valid key.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// The longest key a store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The longest hash tag [`fit_key`] keeps when it shortens a key.
const MAX_KEPT_TAG_LEN: usize = 256;

/// Checks a key as every store does: not empty, at most [`MAX_KEY_LEN`]
/// bytes, and braces only as a Redis Cluster hash tag (`user:{42}:login`),
/// so a key means the same thing on every store.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidKey("the key is empty".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey(format!(
            "the key is {} bytes long; at most {MAX_KEY_LEN} are allowed",
            key.len()
        )));
    }
    if has_brace(key) && hash_tag(key).is_none() {
        return Err(Error::InvalidKey(format!(
            "{:?} has braces that do not form a hash tag: use {{tag}} with a non-empty tag, or no braces",
            shorten(key)
        )));
    }
    Ok(())
}

/// Whether `key` has a `{` or a `}`: compared as bytes, since both are
/// ASCII and no byte of a multi-byte character equals one: cheaper than
/// a char pattern, which decodes every character (every decision checks
/// its key).
fn has_brace(key: &str) -> bool {
    key.bytes().any(|b| b == b'{' || b == b'}')
}

/// The Redis Cluster hash tag of a key: the text between the first `{` and
/// the first `}` after it, when not empty. Keys without one are placed by
/// the whole key.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The part of a key that decides its Redis Cluster slot: its hash tag, or
/// the whole key. Hits whose keys share a slot key can be decided
/// atomically on any store.
pub fn slot_key(key: &str) -> &str {
    hash_tag(key).unwrap_or(key)
}

/// A collision-resistant digest of `bytes`: the first 128 bits of their
/// SHA-256, the same in every process and on every machine (a limit shared
/// through Redis needs that). Finding two values with the same digest is
/// as hard as finding a SHA-256 collision on 128 bits, so a client cannot
/// craft a value that shares another client's counter.
pub fn key_digest(bytes: &[u8]) -> u128 {
    let hash = Sha256::digest(bytes);
    let mut first = [0u8; 16];
    first.copy_from_slice(&hash[..16]);
    u128::from_be_bytes(first)
}

/// `key` itself when it is at most `max_len` bytes long; otherwise `#`
/// followed by the 32 hex digits of its [`key_digest`], preceded by its
/// hash tag (`{tag}#…`) when it has a tag of at most 256 bytes, so the
/// shortened key stays in the same Redis Cluster slot.
///
/// A client-supplied value (a long descriptor value, a JWT) is then
/// counted under a short key of its own instead of failing the request.
/// A shortened key cannot equal a key that was not shortened unless that
/// key was written to look like one; callers that mix client text with
/// shortened keys escape `#` in the client text (see the middleware's key
/// writer and the server's counter keys).
///
/// ```
/// use slidegate::store::{fit_key, validate_key, MAX_KEY_LEN};
/// let long = format!("user:{{42}}:{}", "x".repeat(5000));
/// let key = fit_key(&long, MAX_KEY_LEN);
/// assert!(key.starts_with("{42}#") && key.len() == 5 + 32);
/// assert!(validate_key(&key).is_ok());
/// assert_eq!(fit_key("short", MAX_KEY_LEN), "short");
/// ```
pub fn fit_key(key: &str, max_len: usize) -> Cow<'_, str> {
    if key.len() <= max_len {
        return Cow::Borrowed(key);
    }
    let digest = key_digest(key.as_bytes());
    let mut short = String::with_capacity(MAX_KEPT_TAG_LEN + 35);
    if let Some(tag) = hash_tag(key).filter(|t| t.len() <= MAX_KEPT_TAG_LEN) {
        short.push('{');
        short.push_str(tag);
        short.push('}');
    }
    let _ = write!(short, "#{digest:032x}");
    Cow::Owned(short)
}

/// At most 64 characters of a key, for messages.
fn shorten(key: &str) -> Cow<'_, str> {
    match key.char_indices().nth(64) {
        Some((end, _)) => Cow::Owned(format!("{}...", &key[..end])),
        None => Cow::Borrowed(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_braces_must_carry_a_tag() {
        assert!(validate_key("login:10.0.0.1").is_ok());
        assert!(validate_key("user:{42}:login").is_ok());
        assert!(validate_key("{a}}{").is_ok());
        assert!(validate_key("ключ:{42}:é").is_ok());
        for bad in ["", "a}b", "{}x", "x{y", "}{", "ключ}", "é{"] {
            assert!(
                matches!(validate_key(bad), Err(Error::InvalidKey(_))),
                "{bad:?}"
            );
        }
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
    }

    #[test]
    fn slot_key_is_the_tag_or_the_whole_key() {
        assert_eq!(slot_key("user:{42}:login"), "42");
        assert_eq!(slot_key("{42}"), "42");
        assert_eq!(slot_key("plain"), "plain");
    }

    #[test]
    fn the_digest_is_sha256_truncated() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223 b00361a3...
        assert_eq!(key_digest(b"abc"), 0xba7816bf8f01cfea414140de5dae2223);
    }

    #[test]
    fn long_keys_fit_and_keep_their_slot() {
        let long = "k".repeat(MAX_KEY_LEN + 1);
        let fitted = fit_key(&long, MAX_KEY_LEN);
        assert_eq!(fitted.len(), 33);
        assert!(validate_key(&fitted).is_ok());
        assert_ne!(fitted, fit_key(&"k".repeat(MAX_KEY_LEN + 2), MAX_KEY_LEN));
        let tagged = format!("{{t}}{long}");
        assert_eq!(slot_key(&fit_key(&tagged, MAX_KEY_LEN)), "t");
        let huge_tag = format!("{{{}}}", "t".repeat(MAX_KEPT_TAG_LEN + 1));
        let fitted = fit_key(&huge_tag, 100);
        assert!(fitted.starts_with('#'), "{fitted}");
    }

    #[test]
    fn messages_do_not_echo_a_whole_key() {
        let key = format!("{}}}", "a".repeat(1000));
        let Err(Error::InvalidKey(message)) = validate_key(&key) else {
            panic!("accepted");
        };
        assert!(message.len() < 200, "{message}");
    }
}
