//! Malformed requests of every kind: each gets a 4xx with the JSON error
//! body and the expected code, never a 5xx, and the server keeps serving.

mod common;

use common::{Reply, TestServer};
use http::{Method, StatusCode};

/// A request, the status it must get, and the error code.
struct Case {
    name: &'static str,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: StatusCode,
    code: &'static str,
}

fn acquire(name: &'static str, body: impl Into<Vec<u8>>, code: &'static str) -> Case {
    Case {
        name,
        method: Method::POST,
        path: "/v1/acquire".into(),
        content_type: Some("application/json"),
        body: body.into(),
        status: StatusCode::BAD_REQUEST,
        code,
    }
}

fn peek(name: &'static str, path_and_query: &str, code: &'static str) -> Case {
    Case {
        name,
        method: Method::GET,
        path: path_and_query.into(),
        content_type: None,
        body: Vec::new(),
        status: StatusCode::BAD_REQUEST,
        code,
    }
}

/// `{"key":"k","limit":10,"window_ms":60000}` with one field replaced by
/// raw JSON text (or added, when absent).
fn with(field: &str, raw: &str) -> String {
    let mut fields = vec![
        ("key", "\"k\"".to_owned()),
        ("limit", "10".to_owned()),
        ("window_ms", "60000".to_owned()),
    ];
    match fields.iter_mut().find(|(name, _)| *name == field) {
        Some(entry) => entry.1 = raw.to_owned(),
        None => fields.push((Box::leak(field.to_owned().into_boxed_str()), raw.to_owned())),
    }
    let members: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("\"{name}\":{value}"))
        .collect();
    format!("{{{}}}", members.join(","))
}

fn cases() -> Vec<Case> {
    let deep = format!("{{\"key\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
    let seventeen_rules = format!(
        "{{\"key\":\"k\",\"rules\":[{}]}}",
        (1..=17)
            .map(|i| format!("{{\"limit\":{i},\"window_ms\":1000}}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut invalid_utf8 = br#"{"key":""#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(br#"","limit":10,"window_ms":60000}"#);
    let mut with_bom = vec![0xef, 0xbb, 0xbf];
    with_bom.extend_from_slice(with("cost", "1").as_bytes());
    vec![
        // Not JSON, or not an object.
        acquire("empty body", "", "invalid_json"),
        acquire("plain text", "hello", "invalid_json"),
        acquire(
            "truncated object",
            r#"{"key":"k","limit":10"#,
            "invalid_json",
        ),
        acquire(
            "trailing garbage",
            format!("{} x", with("cost", "1")),
            "invalid_json",
        ),
        acquire(
            "two objects",
            format!("{0}{0}", with("cost", "1")),
            "invalid_json",
        ),
        acquire("null", "null", "invalid_json"),
        acquire("array", "[]", "invalid_json"),
        acquire("string", r#""key""#, "invalid_json"),
        acquire("number", "42", "invalid_json"),
        acquire("single quotes", "{'key':'k'}", "invalid_json"),
        acquire(
            "comment",
            format!("/* hi */{}", with("cost", "1")),
            "invalid_json",
        ),
        acquire("invalid UTF-8 in a string", invalid_utf8, "invalid_json"),
        acquire("byte order mark", with_bom, "invalid_json"),
        acquire("nesting 5000 deep", deep, "invalid_json"),
        acquire("number beyond f64", with("limit", "1e400"), "invalid_json"),
        // Missing, unknown or repeated fields.
        acquire("empty object", "{}", "missing_field"),
        acquire(
            "no key",
            r#"{"limit":10,"window_ms":60000}"#,
            "missing_field",
        ),
        acquire(
            "no limit",
            r#"{"key":"k","window_ms":60000}"#,
            "missing_field",
        ),
        acquire("no window", r#"{"key":"k","limit":10}"#, "missing_field"),
        acquire("misspelt field", with("windowms", "1000"), "unknown_field"),
        acquire(
            "field in another case",
            with("Key", "\"k\""),
            "unknown_field",
        ),
        acquire(
            "repeated key",
            with("key", r#""a","key":"b""#),
            "duplicate_field",
        ),
        acquire(
            "repeated limit",
            with("limit", "1,\"limit\":1000"),
            "duplicate_field",
        ),
        // The key.
        acquire("null key", with("key", "null"), "invalid_key"),
        acquire("numeric key", with("key", "42"), "invalid_key"),
        acquire("array key", with("key", r#"["k"]"#), "invalid_key"),
        acquire("empty key", with("key", r#""""#), "invalid_key"),
        acquire(
            "key with a lone brace",
            with("key", r#""a}b""#),
            "invalid_key",
        ),
        acquire(
            "key with an empty hash tag",
            with("key", r#""{}x""#),
            "invalid_key",
        ),
        // The limit.
        acquire("zero limit", with("limit", "0"), "invalid_limit"),
        acquire("negative limit", with("limit", "-10"), "invalid_limit"),
        acquire("fractional limit", with("limit", "10.5"), "invalid_limit"),
        acquire(
            "limit with a fraction of zero",
            with("limit", "10.0"),
            "invalid_limit",
        ),
        acquire(
            "limit with an exponent",
            with("limit", "1e3"),
            "invalid_limit",
        ),
        acquire(
            "limit as a string",
            with("limit", r#""10""#),
            "invalid_limit",
        ),
        acquire("limit as a boolean", with("limit", "true"), "invalid_limit"),
        acquire("null limit", with("limit", "null"), "invalid_limit"),
        acquire(
            "limit above 10^12",
            with("limit", "1000000000001"),
            "invalid_limit",
        ),
        acquire(
            "limit above u64",
            with("limit", "18446744073709551616"),
            "invalid_limit",
        ),
        // The window.
        acquire("zero window", with("window_ms", "0"), "invalid_window"),
        acquire(
            "negative window",
            with("window_ms", "-1000"),
            "invalid_window",
        ),
        acquire(
            "fractional window",
            with("window_ms", "0.5"),
            "invalid_window",
        ),
        acquire(
            "window over 10 years",
            with("window_ms", "315360000001"),
            "invalid_window",
        ),
        acquire(
            "window of u64::MAX ms",
            with("window_ms", "18446744073709551615"),
            "invalid_window",
        ),
        acquire(
            "window as an object",
            with("window_ms", "{}"),
            "invalid_window",
        ),
        // The cost.
        acquire("negative cost", with("cost", "-1"), "invalid_cost"),
        acquire("fractional cost", with("cost", "0.5"), "invalid_cost"),
        acquire("cost as a string", with("cost", r#""1""#), "invalid_cost"),
        acquire(
            "cost above u64",
            with("cost", "18446744073709551616"),
            "invalid_cost",
        ),
        acquire(
            "cost above the limit",
            with("cost", "11"),
            "cost_exceeds_limit",
        ),
        acquire(
            "cost of u64::MAX",
            with("cost", "18446744073709551615"),
            "cost_exceeds_limit",
        ),
        // The algorithm.
        acquire(
            "unknown algorithm",
            with("algorithm", r#""token_bucket""#),
            "unknown_algorithm",
        ),
        acquire(
            "algorithm in capitals",
            with("algorithm", r#""SLIDING_LOG""#),
            "unknown_algorithm",
        ),
        acquire(
            "empty algorithm",
            with("algorithm", r#""""#),
            "unknown_algorithm",
        ),
        acquire(
            "numeric algorithm",
            with("algorithm", "1"),
            "unknown_algorithm",
        ),
        // Several rules.
        acquire(
            "rules with a limit",
            with("rules", r#"[{"limit":1,"window_ms":1000}]"#),
            "conflicting_fields",
        ),
        acquire("empty rules", r#"{"key":"k","rules":[]}"#, "invalid_rules"),
        acquire(
            "rules as an object",
            r#"{"key":"k","rules":{"limit":1,"window_ms":1000}}"#,
            "invalid_rules",
        ),
        acquire(
            "rules of numbers",
            r#"{"key":"k","rules":[1,2]}"#,
            "invalid_rules",
        ),
        acquire("null rules", r#"{"key":"k","rules":null}"#, "invalid_rules"),
        acquire("17 rules", seventeen_rules, "invalid_rules"),
        acquire(
            "a repeated rule",
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1000},{"window_ms":1000,"limit":1}]}"#,
            "invalid_rules",
        ),
        acquire(
            "a rule without window",
            r#"{"key":"k","rules":[{"limit":1}]}"#,
            "missing_field",
        ),
        acquire(
            "a rule with a cost",
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1000,"cost":1}]}"#,
            "unknown_field",
        ),
        acquire(
            "a rule with a zero limit",
            r#"{"key":"k","rules":[{"limit":0,"window_ms":1000}]}"#,
            "invalid_limit",
        ),
        acquire(
            "a rule with a repeated field",
            r#"{"key":"k","rules":[{"limit":1,"limit":2,"window_ms":1000}]}"#,
            "duplicate_field",
        ),
        acquire(
            "a rule with an unknown algorithm",
            r#"{"key":"k","rules":[{"limit":1,"window_ms":1000,"algorithm":"x"}]}"#,
            "unknown_algorithm",
        ),
        acquire(
            "cost above the smallest rule",
            r#"{"key":"k","cost":3,"rules":[{"limit":5,"window_ms":1000},{"limit":2,"window_ms":9000}]}"#,
            "cost_exceeds_limit",
        ),
        // Peek.
        peek("peek without a query", "/v1/keys/k", "missing_field"),
        peek(
            "peek without a window",
            "/v1/keys/k?limit=10",
            "missing_field",
        ),
        peek(
            "peek with a non-numeric limit",
            "/v1/keys/k?limit=ten&window_ms=1000",
            "invalid_limit",
        ),
        peek(
            "peek with a signed limit",
            "/v1/keys/k?limit=%2B10&window_ms=1000",
            "invalid_limit",
        ),
        peek(
            "peek with an empty window",
            "/v1/keys/k?limit=10&window_ms=",
            "invalid_window",
        ),
        peek(
            "peek with a huge window",
            "/v1/keys/k?limit=10&window_ms=99999999999999999999",
            "invalid_window",
        ),
        peek(
            "peek with an unknown parameter",
            "/v1/keys/k?limit=10&window_ms=1000&cost=1",
            "unknown_field",
        ),
        peek(
            "peek with a repeated parameter",
            "/v1/keys/k?limit=10&limit=20&window_ms=1000",
            "duplicate_field",
        ),
        peek(
            "peek with an unknown algorithm",
            "/v1/keys/k?limit=10&window_ms=1000&algorithm=x",
            "unknown_algorithm",
        ),
        peek(
            "peek of a key that is not UTF-8",
            "/v1/keys/%FF%FE?limit=10&window_ms=1000",
            "invalid_key",
        ),
        peek(
            "peek of a key with a lone brace",
            "/v1/keys/a%7Db?limit=10&window_ms=1000",
            "invalid_key",
        ),
        // Media type and routing.
        Case {
            content_type: None,
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..acquire(
                "no content type",
                with("cost", "1"),
                "unsupported_media_type",
            )
        },
        Case {
            content_type: Some("text/json"),
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..acquire("text/json", with("cost", "1"), "unsupported_media_type")
        },
        Case {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..acquire(
                "a body of 64 KiB + 1",
                vec![b' '; 64 * 1024 + 1],
                "payload_too_large",
            )
        },
        Case {
            path: "/v1/acquire/".into(),
            status: StatusCode::NOT_FOUND,
            ..acquire("a trailing slash", with("cost", "1"), "not_found")
        },
        Case {
            method: Method::PATCH,
            status: StatusCode::METHOD_NOT_ALLOWED,
            ..acquire("PATCH", with("cost", "1"), "method_not_allowed")
        },
    ]
}

fn check(case: &Case, reply: &Reply) {
    assert!(
        !reply.status.is_server_error(),
        "{}: a 5xx for bad input: {reply:?}",
        case.name
    );
    assert_eq!(reply.status, case.status, "{}: {reply:?}", case.name);
    assert_eq!(reply.error_code(), case.code, "{}: {reply:?}", case.name);
}

#[tokio::test]
async fn every_malformed_request_gets_a_4xx_json_error_with_its_code() {
    let server = TestServer::memory().await;
    let cases = cases();
    assert!(cases.len() >= 30);
    for case in &cases {
        let headers: Vec<(&str, &str)> = case
            .content_type
            .map(|c| vec![("content-type", c)])
            .unwrap_or_default();
        let reply = server
            .request(case.method.clone(), &case.path, &headers, case.body.clone())
            .await;
        check(case, &reply);
    }
    // None of them was recorded, and the server still decides.
    let fresh = server
        .post_json("/v1/acquire", r#"{"key":"k","limit":10,"window_ms":60000}"#)
        .await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_eq!(fresh.json()["remaining"], 9);
}

#[tokio::test]
async fn optional_fields_may_be_null() {
    let server = TestServer::memory().await;
    let reply = server
        .post_json(
            "/v1/acquire",
            r#"{"key":"k","limit":10,"window_ms":60000,"cost":null,"algorithm":null}"#,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["remaining"], 9);
}
