//! Envoy's `RateLimitRequest` read from its protobuf bytes straight into
//! the limiter's [`CheckRequest`], in one pass: no prost message tree in
//! between, and descriptors and entries counted against the
//! [`RequestBounds`] before any is kept, so that a message of many empty
//! descriptors costs a scan, never an allocation each.
//!
//! It takes and refuses what prost's decoder followed by
//! [`from_proto`](super::proto::from_proto) takes and refuses (tested
//! against them, which stay as the reference): unknown fields skipped by
//! their wire type, a singular field sent twice merged as protobuf merges
//! it (the last scalar wins, messages merge field by field), every string
//! checked as UTF-8 even when a later one replaces it, groups inside
//! unknown fields nested no deeper than prost's recursion limit. The
//! refusals keep their precedence there too: bytes that are no
//! `RateLimitRequest` first, then too many descriptors, then the first
//! descriptor with too many entries, then the first invalid descriptor.
//!
//! Strings are copied out of the message, one `String` each (the check
//! owns its domain, keys and values), into the buffers of a check answered
//! before on the same thread when one was handed back (see [`reuse`]):
//! then reading the usual check allocates nothing.

use prost::encoding::{
    DecodeContext, WireType, check_wire_type, decode_key, decode_varint, skip_field,
};

use super::request::{DescriptorParts, InvalidCheck, descriptor};
use super::reuse;
use crate::bounds::{OutOfBounds, RequestBounds};
use crate::limiter::check::CheckRequest;

/// Why a message is not a check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not the protobuf bytes of a `RateLimitRequest` (gRPC's `INTERNAL`,
    /// as tonic answers a message prost cannot decode).
    #[error("failed to decode Protobuf message: {0}")]
    Malformed(#[from] Malformed),
    /// A `RateLimitRequest`, but beyond the bounds or not a valid check
    /// (gRPC's `INVALID_ARGUMENT`).
    #[error(transparent)]
    Invalid(#[from] InvalidCheck),
}

/// What is wrong with bytes that are no `RateLimitRequest`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// A key, varint or wire type as prost's reader refuses it.
    #[error(transparent)]
    Wire(#[from] prost::DecodeError),
    /// A length past the end of the message or of the field around it.
    #[error("buffer underflow")]
    Truncated,
    /// A group closed by another field's end tag.
    #[error("unexpected end group tag")]
    UnexpectedEndGroup,
    /// Groups nested deeper than prost's recursion limit.
    #[error("recursion limit reached")]
    TooDeep,
    /// A string field that is not UTF-8.
    #[error("invalid string value: data is not UTF-8 encoded")]
    NotUtf8,
}

/// How deep prost lets unknown groups nest in a top-level field; each
/// message a field is inside takes one level off.
const RECURSION_LIMIT: u32 = 100;

/// `envoy.service.ratelimit.v3.RateLimitRequest`'s field numbers.
mod request_field {
    pub const DOMAIN: u32 = 1;
    pub const DESCRIPTORS: u32 = 2;
    pub const HITS_ADDEND: u32 = 3;
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`'s.
mod descriptor_field {
    pub const ENTRIES: u32 = 1;
    pub const LIMIT: u32 = 2;
    pub const HITS_ADDEND: u32 = 3;
    pub const IS_NEGATIVE_HITS: u32 = 4;
}

/// The field numbers of the messages inside a descriptor: `Entry`
/// (`key`, `value`), `RateLimitOverride` (`requests_per_unit`, `unit`)
/// and `google.protobuf.UInt64Value` (`value`), each 1 and 2.
const FIRST: u32 = 1;
const SECOND: u32 = 2;

/// The check in `message`, the bytes of one `RateLimitRequest`, once it
/// is within `bounds` and valid.
pub fn decode_check(mut message: &[u8], bounds: &RequestBounds) -> Result<CheckRequest, Refused> {
    let buf = &mut message;
    let mut domain = "";
    let mut hits_addend = 0_u32;
    // Its descriptors are overwritten in place, then cut to those kept.
    let mut check = reuse::take();
    let mut kept = 0;
    let mut tally = Tally::default();
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(buf).map_err(Malformed::from)?;
        match tag {
            request_field::DOMAIN => domain = string(wire_type, buf)?,
            request_field::DESCRIPTORS => {
                let fields = delimited(wire_type, buf)?;
                let index = tally.descriptors;
                tally.descriptors += 1;
                // Past a refusal nothing more is kept: the rest is only
                // read through, for a malformed field or a wider refusal.
                let keep = !tally.refuses(bounds);
                let room = if keep {
                    bounds.max_descriptor_entries
                } else {
                    0
                };
                let spare = match check.descriptors.get_mut(kept) {
                    Some(old) => std::mem::take(&mut old.entries),
                    None => Vec::new(),
                };
                let (parts, entries) = read_descriptor(fields, room, spare)?;
                if entries > bounds.max_descriptor_entries {
                    tally.first_wide.get_or_insert(index);
                } else if keep {
                    match descriptor(index, parts) {
                        Ok(descriptor) => {
                            match check.descriptors.get_mut(kept) {
                                Some(old) => *old = descriptor,
                                None => check.descriptors.push(descriptor),
                            }
                            kept += 1;
                        }
                        Err(invalid) => tally.first_invalid = Some(invalid),
                    }
                }
            }
            // A uint32: the varint's low 32 bits, as protobuf reads it.
            request_field::HITS_ADDEND => hits_addend = varint(wire_type, buf)? as u32,
            _ => skip(wire_type, tag, buf, RECURSION_LIMIT)?,
        }
    }
    tally.verdict(bounds)?;
    check.descriptors.truncate(kept);
    check.domain.clear();
    check.domain.push_str(domain);
    check.hits_addend = u64::from(hits_addend);
    Ok(check)
}

/// What the descriptors read so far say against the request, counted as
/// [`RequestBounds::check_descriptors`] counts them.
#[derive(Default)]
struct Tally {
    descriptors: usize,
    /// The first descriptor with more entries than the bound.
    first_wide: Option<usize>,
    /// The first descriptor refused by [`descriptor`].
    first_invalid: Option<InvalidCheck>,
}

impl Tally {
    fn refuses(&self, bounds: &RequestBounds) -> bool {
        self.descriptors > bounds.max_descriptors
            || self.first_wide.is_some()
            || self.first_invalid.is_some()
    }

    fn verdict(self, bounds: &RequestBounds) -> Result<(), InvalidCheck> {
        let out_of_bounds = if self.descriptors > bounds.max_descriptors {
            OutOfBounds::Descriptors {
                got: self.descriptors,
                max: bounds.max_descriptors,
            }
        } else if let Some(index) = self.first_wide {
            OutOfBounds::Entries {
                index,
                max: bounds.max_descriptor_entries,
            }
        } else {
            return self.first_invalid.map_or(Ok(()), Err);
        };
        Err(InvalidCheck(out_of_bounds.to_string()))
    }
}

/// One descriptor's parts, keeping at most `room` entries (written over
/// those of `kept`, a descriptor's handed back), and how many entries it
/// has.
fn read_descriptor(
    mut fields: &[u8],
    room: usize,
    mut kept: Vec<(String, String)>,
) -> Result<(DescriptorParts, usize), Malformed> {
    let buf = &mut fields;
    let mut parts = DescriptorParts::default();
    let mut entries = 0;
    let mut limit = None;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            descriptor_field::ENTRIES => {
                let (key, value) = entry(delimited(wire_type, buf)?)?;
                entries += 1;
                if entries <= room {
                    // The entry's strings overwrite those of the check
                    // handed back, where it had one there.
                    match kept.get_mut(entries - 1) {
                        Some((old_key, old_value)) => {
                            old_key.clear();
                            old_key.push_str(key);
                            old_value.clear();
                            old_value.push_str(value);
                        }
                        None => kept.push((key.to_owned(), value.to_owned())),
                    }
                }
            }
            descriptor_field::LIMIT => {
                let fields = delimited(wire_type, buf)?;
                limit_override(fields, limit.get_or_insert((0, 0)))?;
            }
            descriptor_field::HITS_ADDEND => {
                let fields = delimited(wire_type, buf)?;
                uint64_value(fields, parts.hits_addend.get_or_insert(0))?;
            }
            descriptor_field::IS_NEGATIVE_HITS => {
                parts.is_negative_hits = varint(wire_type, buf)? != 0;
            }
            _ => skip(wire_type, tag, buf, RECURSION_LIMIT - 1)?,
        }
    }
    parts.limit = limit.map(|(requests_per_unit, unit)| (u64::from(requests_per_unit), unit));
    kept.truncate(entries.min(room));
    parts.entries = kept;
    Ok((parts, entries))
}

/// An `Entry`'s key and value.
fn entry(mut fields: &[u8]) -> Result<(&str, &str), Malformed> {
    let buf = &mut fields;
    let (mut key, mut value) = ("", "");
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            FIRST => key = string(wire_type, buf)?,
            SECOND => value = string(wire_type, buf)?,
            _ => skip(wire_type, tag, buf, RECURSION_LIMIT - 2)?,
        }
    }
    Ok((key, value))
}

/// A `RateLimitOverride` merged into `limit` (`requests_per_unit`, the
/// unit's number).
fn limit_override(mut fields: &[u8], limit: &mut (u32, i32)) -> Result<(), Malformed> {
    let buf = &mut fields;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            // A uint32 and an enum (an int32): the varint's low 32 bits.
            FIRST => limit.0 = varint(wire_type, buf)? as u32,
            SECOND => limit.1 = varint(wire_type, buf)? as i32,
            _ => skip(wire_type, tag, buf, RECURSION_LIMIT - 2)?,
        }
    }
    Ok(())
}

/// A `google.protobuf.UInt64Value` merged into `value`.
fn uint64_value(mut fields: &[u8], value: &mut u64) -> Result<(), Malformed> {
    let buf = &mut fields;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            FIRST => *value = varint(wire_type, buf)?,
            _ => skip(wire_type, tag, buf, RECURSION_LIMIT - 2)?,
        }
    }
    Ok(())
}

fn varint(wire_type: WireType, buf: &mut &[u8]) -> Result<u64, Malformed> {
    check_wire_type(WireType::Varint, wire_type)?;
    Ok(decode_varint(buf)?)
}

/// A length-delimited field's bytes.
fn delimited<'m>(wire_type: WireType, buf: &mut &'m [u8]) -> Result<&'m [u8], Malformed> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let len = decode_varint(buf)?;
    let rest: &'m [u8] = buf;
    let (field, rest) = usize::try_from(len)
        .ok()
        .and_then(|len| rest.split_at_checked(len))
        .ok_or(Malformed::Truncated)?;
    *buf = rest;
    Ok(field)
}

fn string<'m>(wire_type: WireType, buf: &mut &'m [u8]) -> Result<&'m str, Malformed> {
    std::str::from_utf8(delimited(wire_type, buf)?).map_err(|_| Malformed::NotUtf8)
}

/// Skips an unknown field, `depth` the levels of groups prost would still
/// let it nest.
fn skip(wire_type: WireType, tag: u32, buf: &mut &[u8], depth: u32) -> Result<(), Malformed> {
    if depth == 0 {
        return Err(Malformed::TooDeep);
    }
    if wire_type != WireType::StartGroup {
        // prost's own skip, whose context is fresh: it only counts depth
        // inside groups, which are skipped here with the depth left.
        return Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?);
    }
    loop {
        let (inner_tag, inner_type) = decode_key(buf)?;
        if inner_type == WireType::EndGroup {
            return if inner_tag == tag {
                Ok(())
            } else {
                Err(Malformed::UnexpectedEndGroup)
            };
        }
        skip(inner_type, inner_tag, buf, depth - 1)?;
    }
}

#[cfg(test)]
mod tests;
