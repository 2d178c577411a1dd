//! The reader against prost's decoder followed by `from_proto`: on
//! messages prost writes, on messages merged from several (fields sent
//! twice), on those bytes cut, changed or padded, and on hostile bytes.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use prost::Message;
use prost::encoding::{MAX_TAG, WireType, encode_key, encode_varint};

use super::*;
use crate::api::envoy::proto::from_proto;

/// What a reading makes of some bytes: the check, or the kind of refusal
/// (an invalid check with its message).
#[derive(Debug, PartialEq)]
enum Outcome {
    Check(CheckRequest),
    Malformed,
    Invalid(InvalidCheck),
}

fn prosts(bytes: &[u8], bounds: &RequestBounds) -> Outcome {
    match RateLimitRequest::decode(bytes) {
        Err(_) => Outcome::Malformed,
        Ok(request) => match from_proto(request, bounds) {
            Ok(check) => Outcome::Check(check),
            Err(invalid) => Outcome::Invalid(invalid),
        },
    }
}

/// Each check read is handed back (its copy kept), so that the next one
/// read on the thread, of whatever shape, is written over its buffers.
fn ours(bytes: &[u8], bounds: &RequestBounds) -> Outcome {
    match decode_check(bytes, bounds) {
        Ok(check) => {
            reuse::give(check.clone());
            Outcome::Check(check)
        }
        Err(Refused::Malformed(_)) => Outcome::Malformed,
        Err(Refused::Invalid(invalid)) => Outcome::Invalid(invalid),
    }
}

fn same_as_prost(bytes: &[u8], bounds: &RequestBounds) -> Outcome {
    let outcome = ours(bytes, bounds);
    assert_eq!(outcome, prosts(bytes, bounds), "bytes {bytes:02x?}");
    outcome
}

fn field(tag: u32, payload: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

fn varint_field(tag: u32, value: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(value, out);
}

fn one_entry(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

fn request_bytes(descriptors: &[RateLimitDescriptor]) -> Vec<u8> {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: descriptors.to_vec(),
        hits_addend: 2,
    }
    .encode_to_vec()
}

fn bounds_of(max_descriptors: usize, max_descriptor_entries: usize) -> RequestBounds {
    RequestBounds {
        max_descriptors,
        max_descriptor_entries,
        ..RequestBounds::default()
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z_]{1,6}", ".{0,8}"]
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    let entry = (text(), text()).prop_map(|(key, value)| Entry { key, value });
    let limit = (
        prop_oneof![0_u32..10, any::<u32>()],
        prop_oneof![-1_i32..9, any::<i32>()],
    )
        .prop_map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        });
    (
        proptest::collection::vec(entry, 0..5),
        proptest::option::of(limit),
        proptest::option::of(prop_oneof![0_u64..3, any::<u64>()]),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(entries, limit, hits_addend, is_negative_hits)| RateLimitDescriptor {
                entries,
                limit,
                hits_addend: hits_addend.map(|value| UInt64Value { value }),
                is_negative_hits,
            },
        )
}

/// One top-level field of a request, as a sender may put it.
#[derive(Clone, Debug)]
enum Piece {
    Domain(String),
    /// One descriptor field holding these descriptors' bytes one after
    /// the other, which protobuf merges into one descriptor.
    Descriptor(Vec<RateLimitDescriptor>),
    HitsAddend(u64),
    /// A field the request does not have, well formed.
    Unknown(u32, WireType, Vec<u8>),
}

fn piece() -> impl Strategy<Value = Piece> {
    let wire_type = prop_oneof![
        Just(WireType::Varint),
        Just(WireType::SixtyFourBit),
        Just(WireType::LengthDelimited),
        Just(WireType::StartGroup),
        Just(WireType::ThirtyTwoBit),
    ];
    prop_oneof![
        1 => text().prop_map(Piece::Domain),
        3 => proptest::collection::vec(descriptor(), 1..3).prop_map(Piece::Descriptor),
        1 => prop_oneof![0_u64..5, any::<u64>()].prop_map(Piece::HitsAddend),
        1 => (
            prop_oneof![4_u32..20, Just(MAX_TAG)],
            wire_type,
            proptest::collection::vec(any::<u8>(), 0..4)
        )
            .prop_map(|(tag, wire_type, bytes)| Piece::Unknown(tag, wire_type, bytes)),
    ]
}

fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Domain(domain) => field(1, domain.as_bytes(), &mut out),
            Piece::Descriptor(merged) => {
                let payload: Vec<u8> = merged.iter().flat_map(Message::encode_to_vec).collect();
                field(2, &payload, &mut out);
            }
            Piece::HitsAddend(n) => varint_field(3, *n, &mut out),
            Piece::Unknown(tag, wire_type, bytes) => {
                encode_key(*tag, *wire_type, &mut out);
                match wire_type {
                    WireType::Varint => encode_varint(u64::from(bytes.len() as u8), &mut out),
                    WireType::SixtyFourBit => out.extend_from_slice(&[7; 8]),
                    WireType::ThirtyTwoBit => out.extend_from_slice(&[7; 4]),
                    WireType::LengthDelimited => {
                        encode_varint(bytes.len() as u64, &mut out);
                        out.extend_from_slice(bytes);
                    }
                    // A group holding one varint field, then its end.
                    _ => {
                        varint_field(1, 5, &mut out);
                        encode_key(*tag, WireType::EndGroup, &mut out);
                    }
                }
            }
        }
    }
    out
}

/// A change a hostile or broken sender makes to well-formed bytes.
#[derive(Clone, Debug)]
enum Damage {
    None,
    Cut(prop::sample::Index),
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => Just(Damage::None),
        1 => any::<prop::sample::Index>().prop_map(Damage::Cut),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, byte)| Damage::Set(at, byte)),
        1 => (
            any::<prop::sample::Index>(),
            proptest::collection::vec(any::<u8>(), 1..4)
        )
            .prop_map(|(at, bytes)| Damage::Insert(at, bytes)),
    ]
}

fn damaged(mut bytes: Vec<u8>, damage: &Damage) -> Vec<u8> {
    let at = |index: &prop::sample::Index, len: usize| index.index(len + 1);
    match damage {
        Damage::None => {}
        Damage::Cut(index) => bytes.truncate(at(index, bytes.len())),
        Damage::Set(index, byte) if !bytes.is_empty() => {
            let i = index.index(bytes.len());
            bytes[i] = *byte;
        }
        Damage::Set(..) => {}
        Damage::Insert(index, inserted) => {
            let i = at(index, bytes.len());
            bytes.splice(i..i, inserted.iter().copied());
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// Whatever prost writes for a request, read the same way.
    #[test]
    fn a_request_prost_writes_is_read_as_prost_reads_it(
        domain in text(),
        descriptors in proptest::collection::vec(descriptor(), 0..6),
        hits_addend in prop_oneof![0_u32..3, any::<u32>()],
        max_descriptors in 1_usize..6,
        max_descriptor_entries in 1_usize..5,
    ) {
        let bytes = RateLimitRequest { domain, descriptors, hits_addend }.encode_to_vec();
        let bounds = bounds_of(max_descriptors, max_descriptor_entries);
        prop_assert_eq!(ours(&bytes, &bounds), prosts(&bytes, &bounds));
    }

    /// Fields sent twice, merged descriptors, unknown fields of every wire
    /// type, and the same bytes cut short, changed or padded: the same
    /// check, or a refusal of the same kind (an invalid check with the
    /// same message).
    #[test]
    fn merged_unknown_and_damaged_bytes_are_read_as_prost_reads_them(
        pieces in proptest::collection::vec(piece(), 0..8),
        damage in damage(),
        max_descriptors in 1_usize..6,
        max_descriptor_entries in 1_usize..5,
    ) {
        let bytes = damaged(encode(&pieces), &damage);
        let bounds = bounds_of(max_descriptors, max_descriptor_entries);
        prop_assert_eq!(ours(&bytes, &bounds), prosts(&bytes, &bounds));
    }
}

#[test]
fn a_request_is_read_into_its_check() {
    let mut descriptor = one_entry("remote_address", "10.0.0.1");
    descriptor.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 2,
    });
    descriptor.hits_addend = Some(UInt64Value { value: 3 });
    let bytes = request_bytes(&[descriptor]);
    let Outcome::Check(check) = same_as_prost(&bytes, &RequestBounds::default()) else {
        panic!("a check");
    };
    assert_eq!(check.domain, "api");
    assert_eq!(check.hits_addend, 2);
    assert_eq!(
        check.descriptors[0].entries,
        [("remote_address".to_owned(), "10.0.0.1".to_owned())]
    );
    assert_eq!(check.descriptors[0].hits_addend, Some(3));
    assert_eq!(
        check.descriptors[0].limit_override,
        Some((5, crate::rules::Unit::Minute))
    );
}

/// A descriptor's `hits_addend` is a wrapper message: its value is read
/// from the wrapper's field 1, and a wrapper with no value is 0, not
/// absent.
#[test]
fn the_descriptor_hits_addend_is_read_through_its_wrapper() {
    let mut with_value = one_entry("k", "v");
    with_value.hits_addend = Some(UInt64Value { value: 300 });
    let mut empty = one_entry("k", "v");
    empty.hits_addend = Some(UInt64Value { value: 0 });
    for (descriptor, expected) in [(with_value, Some(300)), (empty, Some(0))] {
        let bytes = request_bytes(&[descriptor]);
        let Outcome::Check(check) = same_as_prost(&bytes, &RequestBounds::default()) else {
            panic!("a check");
        };
        assert_eq!(check.descriptors[0].hits_addend, expected);
    }
}

#[test]
fn truncation_anywhere_is_malformed() {
    let bytes = request_bytes(&[one_entry("remote_address", "10.0.0.1")]);
    for len in 0..bytes.len() {
        let outcome = same_as_prost(&bytes[..len], &RequestBounds::default());
        // A cut between two top-level fields leaves a shorter request.
        if !matches!(outcome, Outcome::Check(_) | Outcome::Invalid(_)) {
            assert_eq!(outcome, Outcome::Malformed, "cut at {len}");
        }
    }
    // A varint whose last byte still says "more".
    assert_eq!(
        same_as_prost(&[0x18, 0x80], &RequestBounds::default()),
        Outcome::Malformed
    );
    // A key cut in its varint.
    assert_eq!(
        same_as_prost(&[0x80], &RequestBounds::default()),
        Outcome::Malformed
    );
    // A varint of eleven bytes.
    let mut long = vec![0x18];
    long.extend([0xff; 10]);
    long.push(0x01);
    assert_eq!(
        same_as_prost(&long, &RequestBounds::default()),
        Outcome::Malformed
    );
}

#[test]
fn lengths_past_their_end_are_malformed() {
    let bounds = RequestBounds::default();
    // The domain claims five bytes and has one.
    assert_eq!(
        same_as_prost(&[0x0a, 0x05, b'a'], &bounds),
        Outcome::Malformed
    );
    // A length of 2^64 - 1.
    let mut huge = vec![0x0a];
    encode_varint(u64::MAX, &mut huge);
    assert_eq!(same_as_prost(&huge, &bounds), Outcome::Malformed);
    // A descriptor of three bytes whose entry claims ten: within the
    // message, past the descriptor.
    let mut nested = Vec::new();
    field(2, &[0x0a, 0x0a, 0x0a], &mut nested);
    nested.extend([b'x'; 12]);
    assert_eq!(same_as_prost(&nested, &bounds), Outcome::Malformed);
    // An entry whose key runs past the entry into the next entry.
    let mut entries = Vec::new();
    field(1, &[0x0a, 0x04, b'k'], &mut entries);
    field(1, &[0x0a, 0x01, b'k'], &mut entries);
    let mut lie = Vec::new();
    field(2, &entries, &mut lie);
    assert_eq!(same_as_prost(&lie, &bounds), Outcome::Malformed);
    // An override whose varint runs past the override.
    let mut descriptor = Vec::new();
    field(1, &[0x0a, 0x01, b'k'], &mut descriptor);
    field(2, &[0x08, 0x80], &mut descriptor);
    descriptor.push(0x01);
    let mut request = Vec::new();
    field(2, &descriptor, &mut request);
    assert_eq!(same_as_prost(&request, &bounds), Outcome::Malformed);
}

#[test]
fn unknown_fields_of_every_wire_type_at_every_level_are_skipped() {
    let unknown = |tag: u32| {
        let mut out = Vec::new();
        varint_field(tag, 300, &mut out);
        encode_key(tag, WireType::SixtyFourBit, &mut out);
        out.extend([1; 8]);
        field(tag, b"any bytes", &mut out);
        encode_key(tag, WireType::StartGroup, &mut out);
        varint_field(1, 1, &mut out);
        encode_key(2, WireType::StartGroup, &mut out);
        encode_key(2, WireType::EndGroup, &mut out);
        encode_key(tag, WireType::EndGroup, &mut out);
        encode_key(tag, WireType::ThirtyTwoBit, &mut out);
        out.extend([1; 4]);
        out
    };
    let mut entry = unknown(9);
    field(1, b"k", &mut entry);
    entry.extend(unknown(MAX_TAG));
    field(2, b"v", &mut entry);
    let mut limit = unknown(3);
    varint_field(1, 5, &mut limit);
    varint_field(2, 2, &mut limit);
    let mut wrapper = unknown(2);
    varint_field(1, 7, &mut wrapper);
    let mut descriptor = unknown(5);
    field(1, &entry, &mut descriptor);
    field(2, &limit, &mut descriptor);
    field(3, &wrapper, &mut descriptor);
    descriptor.extend(unknown(1000));
    let mut request = unknown(4);
    field(1, b"api", &mut request);
    field(2, &descriptor, &mut request);
    request.extend(unknown(MAX_TAG));
    let Outcome::Check(check) = same_as_prost(&request, &RequestBounds::default()) else {
        panic!("a check");
    };
    assert_eq!(check.domain, "api");
    assert_eq!(
        check.descriptors[0].entries,
        [("k".to_owned(), "v".to_owned())]
    );
    assert_eq!(check.descriptors[0].hits_addend, Some(7));
    assert_eq!(
        check.descriptors[0].limit_override,
        Some((5, crate::rules::Unit::Minute))
    );
}

#[test]
fn keys_prost_refuses_are_malformed() {
    let bounds = RequestBounds::default();
    // Field number 0, with each wire type.
    for key in 0..8_u8 {
        assert_eq!(same_as_prost(&[key, 0], &bounds), Outcome::Malformed);
    }
    // Wire types 6 and 7 do not exist.
    assert_eq!(same_as_prost(&[0x26, 0], &bounds), Outcome::Malformed);
    assert_eq!(same_as_prost(&[0x27, 0], &bounds), Outcome::Malformed);
    // A key past 32 bits.
    let mut huge = Vec::new();
    encode_varint(u64::from(u32::MAX) + 1, &mut huge);
    huge.push(0);
    assert_eq!(same_as_prost(&huge, &bounds), Outcome::Malformed);
    // A known field with another wire type: the domain as a varint, the
    // descriptors as a 32-bit value, hits_addend as bytes, an entry's key
    // as a varint.
    assert_eq!(same_as_prost(&[0x08, 0x01], &bounds), Outcome::Malformed);
    assert_eq!(
        same_as_prost(&[0x15, 1, 2, 3, 4], &bounds),
        Outcome::Malformed
    );
    assert_eq!(same_as_prost(&[0x1a, 0x00], &bounds), Outcome::Malformed);
    let mut request = Vec::new();
    field(2, &[0x0a, 0x02, 0x08, 0x01], &mut request);
    assert_eq!(same_as_prost(&request, &bounds), Outcome::Malformed);
}

#[test]
fn groups_are_skipped_as_deep_as_prost_skips_them_and_no_deeper() {
    let bounds = RequestBounds::default();
    // `depth` groups nested in one another, each of tag 7.
    let nested = |depth: usize| {
        let mut out = Vec::new();
        for _ in 0..depth {
            encode_key(7, WireType::StartGroup, &mut out);
        }
        for _ in 0..depth {
            encode_key(7, WireType::EndGroup, &mut out);
        }
        out
    };
    let mut depths_read = [Vec::new(), Vec::new()];
    for depth in [1, 97, 98, 99, 100, 101, 1000] {
        // At the top, and inside an entry (two messages down).
        let top = nested(depth);
        let mut entry = nested(depth);
        field(1, b"k", &mut entry);
        let mut descriptor = Vec::new();
        field(1, &entry, &mut descriptor);
        let mut inside = Vec::new();
        field(2, &descriptor, &mut inside);
        for (place, bytes) in [top, inside].iter().enumerate() {
            if same_as_prost(bytes, &bounds) != Outcome::Malformed {
                depths_read[place].push(depth);
            }
        }
    }
    assert_eq!(depths_read, [vec![1, 97, 98, 99, 100], vec![1, 97, 98]]);
    // An end without a start, an end of another group, a group never
    // closed.
    assert_eq!(same_as_prost(&[0x3c], &bounds), Outcome::Malformed);
    assert_eq!(same_as_prost(&[0x3b, 0x44], &bounds), Outcome::Malformed);
    assert_eq!(
        same_as_prost(&[0x3b, 0x08, 0x01], &bounds),
        Outcome::Malformed
    );
}

#[test]
fn strings_that_are_not_utf8_are_malformed_even_when_replaced() {
    let bounds = RequestBounds::default();
    let invalid = [0xff, 0xfe];
    let mut domain = Vec::new();
    field(1, &invalid, &mut domain);
    assert_eq!(same_as_prost(&domain, &bounds), Outcome::Malformed);
    field(1, b"api", &mut domain);
    assert_eq!(same_as_prost(&domain, &bounds), Outcome::Malformed);
    for tag in [1, 2] {
        let mut entry = Vec::new();
        field(tag, &invalid, &mut entry);
        let mut descriptor = Vec::new();
        field(1, &entry, &mut descriptor);
        let mut request = Vec::new();
        field(1, b"api", &mut request);
        field(2, &descriptor, &mut request);
        assert_eq!(same_as_prost(&request, &bounds), Outcome::Malformed);
    }
    // In an entry past the bound on entries: read through all the same.
    let mut descriptor = Vec::new();
    for _ in 0..3 {
        field(1, &[0x0a, 0x01, b'k'], &mut descriptor);
    }
    field(1, &[0x0a, 0x01, 0xff], &mut descriptor);
    let mut request = Vec::new();
    field(2, &descriptor, &mut request);
    assert_eq!(
        same_as_prost(&request, &bounds_of(4, 2)),
        Outcome::Malformed
    );
}

/// 100k empty descriptors: refused for their number, as prost and
/// `from_proto` refuse them, with none kept past the bound (the memory
/// bound itself is counted in `tests/grpc_alloc.rs`); a malformed field
/// after them still makes the message malformed.
#[test]
fn a_flood_of_empty_descriptors_is_counted_not_kept() {
    let bounds = RequestBounds::default();
    let mut flood = [0x12, 0x00].repeat(100_000);
    assert_eq!(
        same_as_prost(&flood, &bounds),
        Outcome::Invalid(InvalidCheck(
            OutOfBounds::Descriptors {
                got: 100_000,
                max: bounds.max_descriptors
            }
            .to_string()
        ))
    );
    flood.extend([0x0a, 0x01, 0xff]);
    assert_eq!(same_as_prost(&flood, &bounds), Outcome::Malformed);
}

/// The refusals in `check_request`'s order: too many descriptors before
/// a wide descriptor, a wide one before an invalid one, whatever their
/// places.
#[test]
fn refusals_keep_their_precedence() {
    let bounds = bounds_of(3, 2);
    let mut negative = one_entry("k", "v");
    negative.is_negative_hits = true;
    let mut wide = one_entry("k", "v");
    wide.entries = vec![Entry::default(); 3];
    let plain = one_entry("k", "v");
    let cases = [
        vec![negative.clone(), wide.clone(), plain.clone(), plain.clone()],
        vec![negative.clone(), wide.clone()],
        vec![wide.clone(), negative.clone()],
        vec![plain.clone(), negative.clone(), negative.clone()],
    ];
    let messages: Vec<String> = cases
        .iter()
        .map(
            |descriptors| match same_as_prost(&request_bytes(descriptors), &bounds) {
                Outcome::Invalid(InvalidCheck(message)) => message,
                other => panic!("{other:?}"),
            },
        )
        .collect();
    assert!(messages[0].contains("4 descriptors"), "{messages:?}");
    assert!(
        messages[1].starts_with("descriptor 1 has more"),
        "{messages:?}"
    );
    assert!(
        messages[2].starts_with("descriptor 0 has more"),
        "{messages:?}"
    );
    assert!(
        messages[3].starts_with("descriptor 1: negative"),
        "{messages:?}"
    );
}
