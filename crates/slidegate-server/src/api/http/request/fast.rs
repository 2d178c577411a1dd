//! The common `POST /v1/acquire`, read without building a JSON tree: one
//! object with `key`, `limit` and `window_ms`, and maybe `cost` and
//! `algorithm`, each once, of the right types and within bounds. Anything
//! else (rules, nulls, an unknown or repeated field, a bad value) is left
//! to the full parser, which says exactly what is wrong.
//!
//! The body is scanned by hand, not by serde_json: on this shape
//! serde_json's deserializer (its visitor, its UTF-8 check of each
//! string, its number parsing) cost about 2,400 instructions a request,
//! a tenth of the whole request. The scanner takes only the plainest
//! JSON: printable ASCII strings without escapes, whole numbers without
//! sign, fraction or exponent. Whatever else it meets, valid JSON or
//! not, goes to the full parser, so it never has to judge it.

use slidegate::{Algorithm, Rule};

use super::fields::parse_rule;
use super::parsed::AcquireRequest;
use crate::api::http::json::JsonNode;
use crate::bounds::RequestBounds;

pub(super) fn parse_acquire(body: &[u8], bounds: &RequestBounds) -> Option<AcquireRequest> {
    let fields = Fields::scan(body)?;
    let algorithm = match fields.algorithm {
        None => Algorithm::default(),
        // Matched as bytes, among the algorithms of a plain decision: a
        // concurrency rule needs a lease, which this shape has not (the
        // full parser refuses it).
        Some(name) => Algorithm::ALL
            .into_iter()
            .find(|a| a.name().as_bytes() == name)?,
    };
    let limit = Some(JsonNode::Unsigned(fields.limit?));
    let window_ms = Some(JsonNode::Unsigned(fields.window_ms?));
    let rule: Rule = parse_rule(limit, window_ms, algorithm, bounds).ok()?;
    Some(AcquireRequest {
        key: fields.key?.into(),
        rules: smallvec::smallvec![rule],
        cost: fields.cost.unwrap_or(1),
        max_wait: std::time::Duration::ZERO,
        lease: None,
    })
}

#[derive(Default)]
struct Fields<'a> {
    key: Option<&'a str>,
    limit: Option<u64>,
    window_ms: Option<u64>,
    cost: Option<u64>,
    algorithm: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    /// The members of `body`, an object of the common shape, or `None`.
    fn scan(body: &'a [u8]) -> Option<Fields<'a>> {
        let mut text = Scanner { body, at: 0 };
        let mut fields = Fields::default();
        text.expect(b'{')?;
        loop {
            let name = text.string()?;
            text.expect(b':')?;
            let fresh = match name {
                b"key" => fields.key.replace(text.text()?).is_none(),
                b"limit" => fields.limit.replace(text.number()?).is_none(),
                b"window_ms" => fields.window_ms.replace(text.number()?).is_none(),
                b"cost" => fields.cost.replace(text.number()?).is_none(),
                b"algorithm" => fields.algorithm.replace(text.string()?).is_none(),
                _ => false,
            };
            if !fresh {
                // Unknown or repeated: the full parser names it.
                return None;
            }
            match text.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        text.skip_space();
        (text.at == body.len()).then_some(fields)
    }
}

/// The bytes a plain string holds: printable ASCII but `"` and `\`. One
/// look-up a byte where three comparisons were (the string ends at the
/// first other byte, taken only if it is the closing `"`).
const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut byte = b' ';
    while byte <= b'~' {
        plain[byte as usize] = byte != b'"' && byte != b'\\';
        byte += 1;
    }
    plain
};

/// A position in a body.
struct Scanner<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    /// Past JSON's whitespace.
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, taken.
    fn next(&mut self) -> Option<u8> {
        self.skip_space();
        let byte = *self.body.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// A string of printable ASCII without escapes, as text.
    fn text(&mut self) -> Option<&'a str> {
        // Printable ASCII: always UTF-8.
        std::str::from_utf8(self.string()?).ok()
    }

    /// A string of printable ASCII without escapes, its bytes (a name is
    /// matched as they are, not checked as UTF-8 first).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let rest = self.body.get(self.at..)?;
        let len = rest.iter().position(|&b| !PLAIN[usize::from(b)])?;
        if rest[len] != b'"' {
            return None;
        }
        self.at += len + 1;
        Some(&rest[..len])
    }

    /// A whole number from 0 to 2^64-1, without sign, leading zero,
    /// fraction or exponent (what follows it is checked by the caller).
    fn number(&mut self) -> Option<u64> {
        self.skip_space();
        let rest = self.body.get(self.at..)?;
        let len = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        if len == 0 || (len > 1 && rest[0] == b'0') {
            return None;
        }
        let mut value: u64 = 0;
        for &digit in &rest[..len] {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += len;
        Some(value)
    }
}
