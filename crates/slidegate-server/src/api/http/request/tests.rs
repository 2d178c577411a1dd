use std::time::Duration;

use slidegate::{Algorithm, Rule};

use super::acquire::parse_acquire_tree;
use super::fast;
use super::*;
use crate::api::http::error::ErrorCode;
use crate::bounds::RequestBounds;

fn code(body: &str) -> ErrorCode {
    match parse_acquire(body.as_bytes(), &RequestBounds::default()) {
        Ok(request) => panic!("{body} was accepted: {request:?}"),
        Err(error) => error.code(),
    }
}

#[test]
fn report_and_block_ms_apply_to_every_rule_unless_a_rule_says_otherwise() {
    let request = parse_acquire(
        br#"{"key":"k","report":true,"block_ms":60000,"rules":[
            {"limit":100,"window_ms":60000},
            {"limit":5,"window_ms":1000,"report":false,"block_ms":0}]}"#,
        &RequestBounds::default(),
    )
    .unwrap();
    assert!(request.rules[0].reports());
    assert_eq!(request.rules[0].block(), Some(Duration::from_secs(60)));
    assert!(!request.rules[1].reports());
    assert_eq!(request.rules[1].block(), None);
    let one = parse_acquire(
        br#"{"key":"k","limit":5,"window_ms":1000,"cost":150,"report":true}"#,
        &RequestBounds::default(),
    )
    .unwrap();
    assert!(one.rules[0].reports());
    assert_eq!(one.cost, 150);
    for (body, want) in [
        (
            r#"{"key":"k","limit":1,"window_ms":1,"report":"yes"}"#,
            ErrorCode::InvalidReport,
        ),
        (
            r#"{"key":"k","limit":1,"window_ms":1,"block_ms":-1}"#,
            ErrorCode::InvalidBlock,
        ),
        (
            r#"{"key":"k","limit":1,"window_ms":1,"block_ms":86400001}"#,
            ErrorCode::InvalidBlock,
        ),
        (
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1,"block_ms":1.5}]}"#,
            ErrorCode::InvalidBlock,
        ),
        (
            r#"{"key":"k","limit":1,"window_ms":1,"report":true,"max_wait_ms":10}"#,
            ErrorCode::ConflictingFields,
        ),
    ] {
        assert_eq!(code(body), want, "{body}");
    }
}

#[test]
fn a_single_rule_request_parses_with_defaults() {
    let request = parse_acquire(
        br#"{"key":"login:1","limit":100,"window_ms":60000}"#,
        &RequestBounds::default(),
    )
    .unwrap();
    assert_eq!(request.key, "login:1");
    assert_eq!(request.cost, 1);
    assert_eq!(request.rules[..], [Rule::parse("100/1m").unwrap()]);
    assert_eq!(request.max_wait, Duration::ZERO);
}

#[test]
fn max_wait_is_read_and_bounded() {
    let bounds = RequestBounds::default();
    let waits = parse_acquire(
        br#"{"key":"k","limit":3,"window_ms":1000,"max_wait_ms":3000}"#,
        &bounds,
    )
    .unwrap();
    assert_eq!(waits.max_wait, Duration::from_secs(3));
    for bad in [r#"5001"#, r#"-1"#, r#""1s""#, r#"1.5"#] {
        let body = format!(r#"{{"key":"k","limit":3,"window_ms":1000,"max_wait_ms":{bad}}}"#);
        assert_eq!(code(&body), ErrorCode::InvalidMaxWait, "max_wait_ms {bad}");
    }
}

#[test]
fn rules_take_the_top_level_algorithm_unless_they_name_one() {
    let request = parse_acquire(
        br#"{"key":"k","algorithm":"gcra","cost":0,"rules":[
            {"limit":10,"window_ms":1000},
            {"limit":1000,"window_ms":3600000,"algorithm":"sliding_log"}]}"#,
        &RequestBounds::default(),
    )
    .unwrap();
    assert_eq!(request.cost, 0);
    assert_eq!(request.rules[0].algorithm(), Algorithm::Gcra);
    assert_eq!(request.rules[1].algorithm(), Algorithm::SlidingLog);
}

#[test]
fn each_mistake_has_its_own_code() {
    assert_eq!(
        code(r#"{"limit":1,"window_ms":1}"#),
        ErrorCode::MissingField
    );
    assert_eq!(
        code(r#"{"key":"k","window_ms":1}"#),
        ErrorCode::MissingField
    );
    assert_eq!(code(r#"{"key":"k","limit":1}"#), ErrorCode::MissingField);
    assert_eq!(
        code(r#"{"key":1,"limit":1,"window_ms":1}"#),
        ErrorCode::InvalidKey
    );
    assert_eq!(
        code(r#"{"key":"k","limit":0,"window_ms":1}"#),
        ErrorCode::InvalidLimit
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1.5,"window_ms":1}"#),
        ErrorCode::InvalidLimit
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1,"window_ms":0}"#),
        ErrorCode::InvalidWindow
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1,"window_ms":1,"cost":-1}"#),
        ErrorCode::InvalidCost
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1,"window_ms":1,"algorithm":"x"}"#),
        ErrorCode::UnknownAlgorithm
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1,"window_ms":1,"extra":1}"#),
        ErrorCode::UnknownField
    );
    assert_eq!(
        code(r#"{"key":"k","key":"j","limit":1,"window_ms":1}"#),
        ErrorCode::DuplicateField
    );
    assert_eq!(
        code(r#"{"key":"k","limit":1,"rules":[]}"#),
        ErrorCode::ConflictingFields
    );
    assert_eq!(code(r#"{"key":"k","rules":[]}"#), ErrorCode::InvalidRules);
    assert_eq!(code(r#"{"key":"k","rules":[1]}"#), ErrorCode::InvalidRules);
    assert_eq!(
        code(r#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":1,"window_ms":1}]}"#),
        ErrorCode::InvalidRules
    );
    assert_eq!(
        code(r#"{"key":"k","rules":[{"limit":1,"window_ms":1,"limit":2}]}"#),
        ErrorCode::DuplicateField
    );
    assert_eq!(code("[1]"), ErrorCode::InvalidJson);
    assert_eq!(code("{"), ErrorCode::InvalidJson);
}

#[test]
fn messages_name_the_rule_at_fault() {
    let error = parse_acquire(
        br#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":0,"window_ms":1}]}"#,
        &RequestBounds::default(),
    )
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidLimit);
    assert!(
        error.message().starts_with("rules[1]: "),
        "{}",
        error.message()
    );
}

#[test]
fn the_common_shape_is_read_as_the_full_parser_reads_it() {
    let bounds = RequestBounds::default();
    for body in [
        r#"{"key":"login:1","limit":100,"window_ms":60000}"#,
        r#"{"window_ms":1000,"cost":0,"key":"k","limit":5,"algorithm":"gcra"}"#,
        " {\n\t\"key\" : \"a b\" ,\r\n\"limit\":1, \"window_ms\":1,\"cost\":3} ",
        r#"{"key":"k","limit":1000,"window_ms":1000,"cost":18446744073709551615}"#,
        r#"{"key":"","limit":1,"window_ms":1,"cost":0,"algorithm":"sliding_log"}"#,
    ] {
        let fast = fast::parse_acquire(body.as_bytes(), &bounds);
        assert_eq!(
            fast,
            parse_acquire_tree(body.as_bytes(), &bounds).ok(),
            "{body}"
        );
        assert!(fast.is_some(), "{body}");
    }
    for other in [
        r#"{"key":"k","limit":1,"window_ms":1,"cost":null}"#,
        r#"{"key":"k","limit":1,"window_ms":1,"key":"j"}"#,
        r#"{"key":"k","limit":1.0,"window_ms":1}"#,
        r#"{"key":"k","limit":0,"window_ms":1}"#,
        r#"{"key":"k","limit":1,"window_ms":1,"algorithm":"x"}"#,
        r#"{"key":"k","rules":[{"limit":1,"window_ms":1}]}"#,
        r#"{"key":"k","limit":1,"window_ms":1} x"#,
        r#"{"key":"k","limit":1}"#,
        "[1]",
        // Left to the full parser, which reads them (escapes, non-ASCII)
        // or names what is wrong (a sign, a leading zero, an exponent, a
        // number past 2^64-1, bytes after the number, a control byte).
        // A concurrency rule without a lease: refused by the full parser.
        r#"{"key":"k","limit":1,"window_ms":1,"algorithm":"concurrency"}"#,
        r#"{"key":"a\u0062c","limit":1,"window_ms":1}"#,
        r#"{"key":"a\"b","limit":1,"window_ms":1}"#,
        r#"{"key":"clé","limit":1,"window_ms":1}"#,
        r#"{"key":"k","limit":1,"window_ms":1,"cost":-1}"#,
        r#"{"key":"k","limit":01,"window_ms":1}"#,
        r#"{"key":"k","limit":1e2,"window_ms":1}"#,
        r#"{"key":"k","limit":18446744073709551616,"window_ms":1}"#,
        r#"{"key":"k","limit":1x,"window_ms":1}"#,
        "{\"key\":\"a\tb\",\"limit\":1,\"window_ms\":1}",
        r#"{"key":"k","limit":1,"window_ms":1,}"#,
        r#"{"key":"k","limit":1,"window_ms":1"#,
        r#"{"key":"k" "limit":1,"window_ms":1}"#,
        r#"{"key":"k","limit":"1","window_ms":1}"#,
        r#"{"key":1,"limit":1,"window_ms":1}"#,
        "{}",
        "",
    ] {
        assert_eq!(
            fast::parse_acquire(other.as_bytes(), &bounds),
            None,
            "{other}"
        );
    }
}

#[test]
fn keys_and_rules_are_read_whole_held_inline_or_not() {
    // Keys up to 24 bytes and one rule are held inline, longer keys and
    // more rules on the heap: both readers keep every byte and every rule.
    let bounds = RequestBounds::default();
    for len in 0..=64 {
        let key: String = ('a'..='z').cycle().take(len).collect();
        let body = format!(r#"{{"key":"{key}","limit":7,"window_ms":1000}}"#);
        for request in [
            fast::parse_acquire(body.as_bytes(), &bounds),
            parse_acquire_tree(body.as_bytes(), &bounds).ok(),
        ] {
            let request = request.unwrap_or_else(|| panic!("{body}"));
            assert_eq!(request.key, key.as_str(), "{len} bytes");
            assert_eq!(request.rules[..], [Rule::parse("7/1s").unwrap()]);
        }
    }
    for count in 1..=MAX_RULES_PER_REQUEST {
        let rules: Vec<String> = (1..=count)
            .map(|limit| format!(r#"{{"limit":{limit},"window_ms":1000}}"#))
            .collect();
        let body = format!(r#"{{"key":"k","rules":[{}]}}"#, rules.join(","));
        let request = parse_acquire(body.as_bytes(), &bounds).unwrap();
        let limits: Vec<u64> = request.rules.iter().map(Rule::limit).collect();
        assert_eq!(limits, (1..=count as u64).collect::<Vec<_>>(), "{body}");
    }
}

/// A JSON value of the forms a client may send, valid or not, in the
/// common shape's fields and elsewhere.
fn value() -> impl proptest::strategy::Strategy<Value = &'static str> {
    proptest::sample::select(vec![
        "\"k\"",
        "\"a\\\"b\"",
        "\"\u{e9}\"",
        "\"\t\"",
        "\"\"",
        "0",
        "1",
        "7",
        "00",
        "01",
        "-1",
        "-0",
        "1.5",
        "1e3",
        "18446744073709551615",
        "18446744073709551616",
        "null",
        "true",
        "[1]",
        "{}",
        "\"gcra\"",
        "\"concurrency\"",
        "\"sliding_log\"",
        "1x",
        "",
    ])
}

proptest::proptest! {
    // Cheap cases, and most of them must come near the common shape.
    #![proptest_config(proptest::test_runner::Config::with_cases(4096))]

    /// Objects of the acquire's fields and others, each value drawn from
    /// JSON's forms valid or not, in any order, with stray bytes around
    /// them: what the common-shape reader accepts, the full parser reads
    /// the same.
    #[test]
    fn the_common_shape_reader_never_reads_a_body_otherwise(
        key in proptest::prop_oneof![proptest::strategy::Just("\"k\""), value()],
        limit in proptest::prop_oneof![proptest::strategy::Just("100"), value()],
        window_ms in proptest::prop_oneof![proptest::strategy::Just("1000"), value()],
        extra in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "key", "limit", "window_ms", "cost", "algorithm", "rules", "lease_ms", "Key",
                ]),
                value(),
            ),
            0..2,
        ),
        turn in 0usize..6,
        before in proptest::sample::select(vec!["", " ", "[", "x"]),
        after in proptest::sample::select(vec!["", " \n", ",", "}", "x"]),
    ) {
        let mut members = vec![
            format!("\"key\":{key}"),
            format!("\"limit\":{limit}"),
            format!("\"window_ms\":{window_ms}"),
        ];
        members.extend(extra.iter().map(|(name, value)| format!("\"{name}\":{value}")));
        let turn = turn % members.len();
        members.rotate_left(turn);
        let body = format!("{before}{{{}}}{after}", members.join(","));
        let bounds = RequestBounds::default();
        if let Some(fast) = fast::parse_acquire(body.as_bytes(), &bounds) {
            proptest::prop_assert_eq!(
                Some(fast),
                parse_acquire_tree(body.as_bytes(), &bounds).ok(),
                "{}",
                body
            );
        }
    }

    /// The common shape itself, with any spacing, order and values: read
    /// by the scanner, as the full parser reads it.
    #[test]
    fn the_common_shape_is_read_whatever_its_spacing_and_order(
        key in "[ -!#-\\[\\]-~]{0,12}",
        limit in 1u64..1000,
        window_ms in 1u64..100_000,
        cost in proptest::option::of(proptest::num::u64::ANY),
        algorithm in proptest::option::of(proptest::sample::select(vec![
            "sliding_log", "sliding_counter", "fixed_window", "gcra",
        ])),
        order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just(vec![0usize, 1, 2, 3, 4])),
        space in proptest::sample::select(vec!["", " ", "\n\t", "\r\n  "]),
    ) {
        let mut members = vec![
            format!("\"key\"{space}:{space}\"{key}\""),
            format!("\"limit\":{space}{limit}"),
            format!("\"window_ms\"{space}:{window_ms}"),
        ];
        if let Some(cost) = cost {
            members.push(format!("\"cost\":{cost}{space}"));
        }
        if let Some(algorithm) = algorithm {
            members.push(format!("\"algorithm\":\"{algorithm}\""));
        }
        let members: Vec<String> = order
            .iter()
            .filter_map(|&i| members.get(i).cloned())
            .collect();
        let body = format!("{space}{{{space}{}{space}}}{space}", members.join(&format!("{space},{space}")));
        let bounds = RequestBounds::default();
        let fast = fast::parse_acquire(body.as_bytes(), &bounds);
        proptest::prop_assert!(fast.is_some(), "{}", body);
        proptest::prop_assert_eq!(fast, parse_acquire_tree(body.as_bytes(), &bounds).ok(), "{}", body);
    }
}

#[test]
fn peek_reads_its_query() {
    let query = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let request = parse_peek(
        "k".into(),
        query(&[("limit", "5"), ("window_ms", "250"), ("algorithm", "gcra")]),
        &RequestBounds::default(),
    )
    .unwrap();
    assert_eq!(
        request.rule,
        Rule::parse("5/250ms")
            .unwrap()
            .with_algorithm(Algorithm::Gcra)
    );
    let code = |pairs: &[(&str, &str)]| {
        parse_peek("k".into(), query(pairs), &RequestBounds::default())
            .unwrap_err()
            .code()
    };
    assert_eq!(code(&[("limit", "5")]), ErrorCode::MissingField);
    let locked = parse_peek(
        "k".into(),
        query(&[
            ("limit", "5"),
            ("window_ms", "900000"),
            ("block_ms", "3600000"),
        ]),
        &RequestBounds::default(),
    )
    .unwrap();
    assert_eq!(locked.rule.block(), Some(Duration::from_secs(3600)));
    assert_eq!(
        code(&[("limit", "5"), ("window_ms", "1"), ("block_ms", "soon")]),
        ErrorCode::InvalidBlock
    );
    assert_eq!(
        code(&[("limit", "+5"), ("window_ms", "1")]),
        ErrorCode::InvalidLimit
    );
    assert_eq!(
        code(&[("limit", "99999999999999999999"), ("window_ms", "1")]),
        ErrorCode::InvalidLimit
    );
    assert_eq!(
        code(&[("limit", "5"), ("window_ms", "")]),
        ErrorCode::InvalidWindow
    );
    assert_eq!(
        code(&[("limit", "5"), ("limit", "6"), ("window_ms", "1")]),
        ErrorCode::DuplicateField
    );
    assert_eq!(
        code(&[("limit", "5"), ("window_ms", "1"), ("cost", "1")]),
        ErrorCode::UnknownField
    );
}

#[test]
fn adhoc_limits_and_windows_are_bounded_by_their_flags() {
    let bounds = RequestBounds {
        max_adhoc_limit: 100,
        max_adhoc_window: Duration::from_secs(60),
        ..RequestBounds::default()
    };
    let parse = |body: &str| parse_acquire(body.as_bytes(), &bounds);
    assert!(parse(r#"{"key":"k","limit":100,"window_ms":60000}"#).is_ok());
    let limit = parse(r#"{"key":"k","limit":101,"window_ms":1000}"#).unwrap_err();
    assert_eq!(limit.code(), ErrorCode::InvalidLimit);
    assert!(limit.message().contains("--max-adhoc-limit"), "{limit}");
    let window = parse(r#"{"key":"k","limit":1,"window_ms":60001}"#).unwrap_err();
    assert_eq!(window.code(), ErrorCode::InvalidWindow);
    assert!(window.message().contains("--max-adhoc-window"), "{window}");
    let in_rules =
        parse(r#"{"key":"k","rules":[{"limit":1,"window_ms":1},{"limit":1000,"window_ms":1}]}"#)
            .unwrap_err();
    assert!(in_rules.message().starts_with("rules[1]: "), "{in_rules}");
    let peek = parse_peek(
        "k".into(),
        vec![
            ("limit".into(), "1".into()),
            ("window_ms".into(), "86400000".into()),
        ],
        &bounds,
    );
    assert_eq!(peek.unwrap_err().code(), ErrorCode::InvalidWindow);
}

#[test]
fn the_default_bounds_are_one_million_per_day() {
    let parse = |body: &str| parse_acquire(body.as_bytes(), &RequestBounds::default());
    assert!(parse(r#"{"key":"k","limit":1000000,"window_ms":86400000}"#).is_ok());
    assert!(parse(r#"{"key":"k","limit":1000000000000,"window_ms":1000}"#).is_err());
    assert!(parse(r#"{"key":"k","limit":1,"window_ms":315360000000}"#).is_err());
}

#[test]
fn a_burst_is_read_at_the_top_and_per_rule_and_names_gcra_when_alone() {
    let bounds = RequestBounds::default();
    let one = parse_acquire(
        br#"{"key":"k","limit":10,"window_ms":1000,"burst":50}"#,
        &bounds,
    )
    .unwrap();
    assert_eq!(one.rules[..], [Rule::parse("10/1s gcra burst 50").unwrap()]);
    let many = parse_acquire(
        br#"{"key":"k","burst":50,"rules":[
            {"limit":10,"window_ms":1000},
            {"limit":5,"window_ms":1000,"burst":2},
            {"limit":100,"window_ms":60000,"algorithm":"gcra"}]}"#,
        &bounds,
    )
    .unwrap();
    assert_eq!(
        many.rules[..],
        [
            Rule::parse("10/1s burst 50").unwrap(),
            Rule::parse("5/1s burst 2").unwrap(),
            Rule::parse("100/1m burst 50").unwrap(),
        ]
    );
    for body in [
        r#"{"key":"k","limit":10,"window_ms":1000,"algorithm":"sliding_counter","burst":50}"#,
        r#"{"key":"k","limit":10,"window_ms":1000,"burst":0}"#,
        r#"{"key":"k","limit":10,"window_ms":1000,"burst":-1}"#,
        r#"{"key":"k","limit":10,"window_ms":1000,"burst":true}"#,
        r#"{"key":"k","limit":1,"window_ms":86400000,"burst":1000000}"#,
        r#"{"key":"k","algorithm":"fixed_window","rules":[{"limit":1,"window_ms":1,"burst":2}]}"#,
    ] {
        assert_eq!(code(body), ErrorCode::InvalidBurst, "{body}");
    }
}
