//! [`KeyWriter`]: store keys from labelled parts, escaped and bounded.

use std::cell::Cell;
use std::fmt::{Display, Write as _};
use std::net::IpAddr;
use std::ops::{Deref, DerefMut};

use crate::store::key::key_digest;

/// Builds a store key from labelled parts, so every key is a valid one
/// ([`validate_key`](crate::store::validate_key)) and two different
/// requests never share a key by accident.
///
/// Parts are written `label=value` and joined by `|`. In labels and values,
/// `%`, `{`, `}`, `|`, `#` and control characters are percent-escaped
/// (`/users/{id}` becomes `/users/%7Bid%7D`), so nothing in a value can
/// forge a separator or a Redis Cluster hash tag. A value longer than 256
/// bytes once escaped (a JWT, say) is replaced by `#` and its 128-bit
/// [`key_digest`] (SHA-256), the same in every process, so keys stay short.
#[derive(Debug, Default, Clone)]
pub struct KeyWriter {
    buf: String,
}

/// Values longer than this, escaped, are replaced by their digest.
const MAX_VALUE_LEN: usize = 256;

impl KeyWriter {
    /// An empty key.
    pub fn new() -> KeyWriter {
        KeyWriter::default()
    }

    /// Appends the part `label=value`.
    pub fn part(&mut self, label: &str, value: &str) {
        let start = self.begin(label);
        escape_into(&mut self.buf, value);
        self.finish(start);
    }

    /// Appends the part `label=value`, formatting `value` with [`Display`].
    pub fn part_display(&mut self, label: &str, value: impl Display) {
        let start = self.begin(label);
        // Formatted straight into the key, escaped afterwards if need be:
        // most values need no escaping, and one pass over them is cheap.
        let _ = write!(self.buf, "{value}");
        if self.buf.as_bytes()[start..]
            .iter()
            .any(|&b| needs_escape(b))
        {
            let raw = self.buf.split_off(start);
            escape_into(&mut self.buf, &raw);
        }
        self.finish(start);
    }

    /// Appends the part `label=address` (`ip=203.0.113.7`, `ip=2001:db8::1`).
    pub fn part_ip(&mut self, label: &str, ip: IpAddr) {
        let start = self.begin(label);
        match ip {
            IpAddr::V4(v4) => {
                // Much cheaper than Display, which this path calls on every request.
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buf.push('.');
                    }
                    push_decimal(&mut self.buf, octet);
                }
            }
            // IPv6 text is hex digits, colons and dots: nothing to escape.
            IpAddr::V6(v6) => {
                let _ = write!(self.buf, "{v6}");
            }
        }
        self.finish(start);
    }

    /// Appends the part `label=value` for raw bytes, such as a header value
    /// that need not be UTF-8: bytes outside UTF-8 are percent-escaped.
    pub fn part_bytes(&mut self, label: &str, value: &[u8]) {
        let start = self.begin(label);
        match std::str::from_utf8(value) {
            Ok(text) => escape_into(&mut self.buf, text),
            Err(_) => {
                for &byte in value {
                    if byte.is_ascii() && !needs_escape(byte) {
                        self.buf.push(char::from(byte));
                    } else {
                        push_percent(&mut self.buf, byte);
                    }
                }
            }
        }
        self.finish(start);
    }

    /// A writer that writes into `buf`, emptied first: the layer reuses
    /// one buffer per thread rather than allocating a key per request.
    pub(crate) fn from_buffer(mut buf: String) -> KeyWriter {
        buf.clear();
        KeyWriter { buf }
    }

    /// The buffer, to be reused.
    pub(crate) fn into_buffer(self) -> String {
        self.buf
    }

    /// Forgets what was written.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    /// The key written so far.
    pub fn as_str(&self) -> &str {
        &self.buf
    }

    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Starts a new part, returning where its value starts.
    fn begin(&mut self, label: &str) -> usize {
        if !self.buf.is_empty() {
            self.buf.push('|');
        }
        escape_into(&mut self.buf, label);
        self.buf.push('=');
        self.buf.len()
    }

    /// Replaces an over-long value by its digest.
    fn finish(&mut self, value_start: usize) {
        if self.buf.len() - value_start <= MAX_VALUE_LEN {
            return;
        }
        let digest = key_digest(&self.buf.as_bytes()[value_start..]);
        self.buf.truncate(value_start);
        let _ = write!(self.buf, "#{digest:032x}");
    }

    /// Writes the bare word `text` (a prefix, or the shared bucket's name).
    pub(crate) fn push_word(&mut self, text: &str) {
        if !self.buf.is_empty() {
            self.buf.push('|');
        }
        escape_into(&mut self.buf, text);
    }

    #[cfg(test)]
    pub(crate) fn into_string(self) -> String {
        self.buf
    }

    /// Makes the key a store key: replaced by `#` and its digest when it
    /// is longer than `max_len` (only keys combining many long parts get
    /// there).
    pub(crate) fn finish_store_key(&mut self, max_len: usize) {
        if self.buf.len() > max_len {
            let digest = key_digest(self.buf.as_bytes());
            self.buf.clear();
            let _ = write!(self.buf, "#{digest:032x}");
        }
    }
}

thread_local! {
    /// Every thread's key buffer: see [`ThreadKey`].
    static KEY_BUFFER: Cell<String> = const { Cell::new(String::new()) };
}

/// A key buffer this big is not kept for the next request.
const MAX_KEPT_BUFFER: usize = 4096;

/// A [`KeyWriter`] over this thread's key buffer, given back when dropped:
/// the layer writes every request's key without allocating. (Were the
/// buffer taken already, by a layer whose key extractor runs another one,
/// this one starts empty and allocates.)
pub(crate) struct ThreadKey {
    writer: KeyWriter,
}

impl ThreadKey {
    /// This thread's buffer, empty.
    pub(crate) fn take() -> ThreadKey {
        let buf = KEY_BUFFER.try_with(Cell::take).unwrap_or_default();
        ThreadKey {
            writer: KeyWriter::from_buffer(buf),
        }
    }
}

impl Deref for ThreadKey {
    type Target = KeyWriter;

    fn deref(&self) -> &KeyWriter {
        &self.writer
    }
}

impl DerefMut for ThreadKey {
    fn deref_mut(&mut self) -> &mut KeyWriter {
        &mut self.writer
    }
}

impl Drop for ThreadKey {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.writer).into_buffer();
        if buf.capacity() <= MAX_KEPT_BUFFER {
            // Fails only while the thread exits: the buffer is dropped.
            let _ = KEY_BUFFER.try_with(|cell| cell.set(buf));
        }
    }
}

fn push_decimal(out: &mut String, value: u8) {
    if value >= 100 {
        out.push(char::from(b'0' + value / 100));
    }
    if value >= 10 {
        out.push(char::from(b'0' + value / 10 % 10));
    }
    out.push(char::from(b'0' + value % 10));
}

fn needs_escape(byte: u8) -> bool {
    matches!(byte, b'%' | b'{' | b'}' | b'|' | b'#') || byte.is_ascii_control()
}

fn push_percent(out: &mut String, byte: u8) {
    let _ = write!(out, "%{byte:02X}");
}

#[inline]
fn escape_into(out: &mut String, text: &str) {
    if text.bytes().any(needs_escape) {
        escape_each(out, text);
    } else {
        out.push_str(text);
    }
}

#[cold]
fn escape_each(out: &mut String, text: &str) {
    for c in text.chars() {
        match u8::try_from(c) {
            Ok(byte) if needs_escape(byte) => push_percent(out, byte),
            _ => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::key::validate_key;

    fn written(f: impl FnOnce(&mut KeyWriter)) -> String {
        let mut key = KeyWriter::new();
        f(&mut key);
        key.into_string()
    }

    #[test]
    fn parts_are_labelled_and_joined() {
        let key = written(|k| {
            k.part("user", "42");
            k.part_display("ip", IpAddr::from([10, 0, 0, 1]));
        });
        assert_eq!(key, "user=42|ip=10.0.0.1");
    }

    #[test]
    fn braces_separators_and_controls_are_escaped() {
        let key = written(|k| k.part("route", "GET /users/{id}|x#y%\n"));
        assert_eq!(key, "route=GET /users/%7Bid%7D%7Cx%23y%25%0A");
        assert!(validate_key(&key).is_ok());
        let label = written(|k| k.part("a|b", "c"));
        assert_eq!(label, "a%7Cb=c");
    }

    #[test]
    fn addresses_are_written_as_text() {
        for text in [
            "0.0.0.0",
            "10.0.100.9",
            "255.255.255.255",
            "192.168.1.20",
            "::1",
            "2001:db8::ff00:42:8329",
        ] {
            let key = written(|k| k.part_ip("ip", text.parse().unwrap()));
            assert_eq!(key, format!("ip={text}"));
        }
    }

    #[test]
    fn displayed_values_are_escaped_too() {
        let key = written(|k| k.part_display("route", format_args!("GET {}", "/a/{id}")));
        assert_eq!(key, "route=GET /a/%7Bid%7D");
        let key = written(|k| {
            k.part("a", "1");
            k.part_display("b", "x|y");
        });
        assert_eq!(key, "a=1|b=x%7Cy");
    }

    #[test]
    fn ipv6_and_unicode_pass_unchanged() {
        let key = written(|k| {
            k.part_display("ip", "2001:db8::1".parse::<IpAddr>().unwrap());
            k.part("user", "zoë");
        });
        assert_eq!(key, "ip=2001:db8::1|user=zoë");
    }

    #[test]
    fn invalid_utf8_bytes_are_percent_escaped() {
        let key = written(|k| k.part_bytes("h", b"a\xffb{"));
        assert_eq!(key, "h=a%FFb%7B");
    }

    #[test]
    fn long_values_become_a_stable_digest() {
        let long = "x".repeat(5_000);
        let a = written(|k| k.part("token", &long));
        let b = written(|k| k.part("token", &long));
        let other = written(|k| k.part("token", &"x".repeat(4_999)));
        assert_eq!(a, b);
        assert_ne!(a, other);
        assert!(a.starts_with("token=#"));
        assert_eq!(a.len(), "token=#".len() + 32);
        assert!(validate_key(&a).is_ok());
        // A value that looks like a digest cannot collide with one.
        let fake = written(|k| k.part("token", &a["token=".len()..]));
        assert_ne!(fake, a);
    }

    #[test]
    fn the_thread_key_buffer_is_reused_and_starts_empty() {
        let mut key = ThreadKey::take();
        key.part("user", "42");
        let address = key.as_str().as_ptr();
        drop(key);
        let mut again = ThreadKey::take();
        assert!(again.is_empty());
        again.part("user", "7");
        assert_eq!(again.as_str(), "user=7");
        assert_eq!(again.as_str().as_ptr(), address);
        // Taken twice at once, the second starts with a fresh buffer.
        let nested = ThreadKey::take();
        assert!(nested.is_empty());
    }

    #[test]
    fn over_long_keys_become_a_digest_in_place() {
        let mut key = KeyWriter::new();
        for i in 0..10 {
            key.part(&format!("label{i}"), &"v".repeat(200));
        }
        key.finish_store_key(1024);
        assert!(key.as_str().starts_with('#'));
        assert_eq!(key.as_str().len(), 33);
        let mut short = KeyWriter::new();
        short.part("a", "b");
        short.finish_store_key(1024);
        assert_eq!(short.as_str(), "a=b");
    }
}
