//! `POST /v1/acquire` answered byte for byte: the status line, every
//! header field in order and the body, for the answers clients see most
//! (admitted, denied with `Retry-After`, several rules, the 400s and the
//! 415). The answer is written by hand on the hot path; any change to
//! its bytes shows here. The store's clock stands still, so the figures
//! in the answers are fixed; only `date` is taken out.

mod common;

use common::TestServer;
use slidegate::MemoryStore;
use slidegate::clock::ManualClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `body` posted to `/v1/acquire` on a fresh connection that the server
/// closes after its answer, which is returned whole, its `date` left out.
async fn exchange(server: &TestServer, content_type: Option<&str>, body: &str) -> String {
    let mut request = format!(
        "POST /v1/acquire HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(content_type) = content_type {
        request.push_str(&format!("content-type: {content_type}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(common::DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("the server did not answer in time")
        .unwrap();
    String::from_utf8(answer)
        .unwrap()
        .split_inclusive("\r\n")
        .filter(|line| !line.starts_with("date: "))
        .collect()
}

async fn post(server: &TestServer, body: &str) -> String {
    exchange(server, Some("application/json"), body).await
}

/// An answer as the server writes it on a closing connection: `status`,
/// the header `fields` in order, then `connection`, `content-length`
/// and `body`.
fn answer(status: &str, fields: &[&str], body: &str) -> String {
    let mut text = format!("HTTP/1.1 {status}\r\n");
    for field in fields {
        text.push_str(field);
        text.push_str("\r\n");
    }
    text.push_str(&format!(
        "connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    text
}

const JSON: &str = "content-type: application/json";
const NOSNIFF: &str = "x-content-type-options: nosniff";

#[tokio::test]
async fn acquire_answers_are_the_documented_bytes() {
    let server = TestServer::start(
        MemoryStore::builder()
            .clock(ManualClock::at(1_000_000_000))
            .build(),
    )
    .await;
    let one = r#"{"key":"k","limit":2,"window_ms":60000}"#;
    let policy = r#"ratelimit-policy: "default";q=2;w=60"#;
    for (body, expected) in [
        (
            one,
            answer(
                "200 OK",
                &[JSON, policy, r#"ratelimit: "default";r=1;t=61"#, NOSNIFF],
                r#"{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60001,"retry_after_ms":0}"#,
            ),
        ),
        (
            one,
            answer(
                "200 OK",
                &[JSON, policy, r#"ratelimit: "default";r=0;t=61"#, NOSNIFF],
                r#"{"allowed":true,"limit":2,"remaining":0,"reset_after_ms":60001,"retry_after_ms":0}"#,
            ),
        ),
        (
            one,
            answer(
                "429 Too Many Requests",
                &[
                    JSON,
                    policy,
                    r#"ratelimit: "default";r=0;t=61"#,
                    "retry-after: 61",
                    NOSNIFF,
                ],
                r#"{"allowed":false,"limit":2,"remaining":0,"reset_after_ms":60001,"retry_after_ms":60001}"#,
            ),
        ),
        (
            r#"{"key":"m","rules":[{"limit":5,"window_ms":1000},{"limit":100,"window_ms":3600000}]}"#,
            answer(
                "200 OK",
                &[
                    JSON,
                    r#"ratelimit-policy: "p0";q=5;w=1, "p1";q=100;w=3600"#,
                    r#"ratelimit: "p0";r=4;t=2, "p1";r=99;t=3601"#,
                    NOSNIFF,
                ],
                r#"{"allowed":true,"limit":5,"remaining":4,"reset_after_ms":3600001,"retry_after_ms":0}"#,
            ),
        ),
        (
            r#"{"key":"k"}"#,
            answer(
                "400 Bad Request",
                &[JSON, NOSNIFF],
                r#"{"error":{"code":"missing_field","message":"the field \"limit\" is required (or \"rules\"), unless a limit is set for the key with PUT /v1/keys/{key}/limit"}}"#,
            ),
        ),
        (
            r#"{"key":"k","limit":2,"window_ms":60000,"cost":-1}"#,
            answer(
                "400 Bad Request",
                &[JSON, NOSNIFF],
                r#"{"error":{"code":"invalid_cost","message":"\"cost\" must be a whole number from 0 to 18446744073709551615, got -1"}}"#,
            ),
        ),
        (
            r#"{"key":"k","limit":2,"#,
            answer(
                "400 Bad Request",
                &[JSON, NOSNIFF],
                r#"{"error":{"code":"invalid_json","message":"the body is not valid JSON: EOF while parsing a value at line 1 column 21"}}"#,
            ),
        ),
    ] {
        assert_eq!(post(&server, body).await, expected, "{body}");
    }
    assert_eq!(
        exchange(&server, None, one).await,
        answer(
            "415 Unsupported Media Type",
            &[JSON, NOSNIFF],
            r#"{"error":{"code":"unsupported_media_type","message":"send the body as JSON with the header Content-Type: application/json"}}"#,
        )
    );
}

/// A body whose `Content-Length` is known is read up to its last byte,
/// also when it comes in two parts: the reader ends on the length, so a
/// first part must not pass for the whole.
#[tokio::test]
async fn a_body_sent_in_two_parts_is_read_whole() {
    let server = TestServer::start(
        MemoryStore::builder()
            .clock(ManualClock::at(1_000_000_000))
            .build(),
    )
    .await;
    let body = r#"{"key":"k","limit":2,"window_ms":60000}"#;
    let (first, rest) = body.split_at(body.len() / 2);
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/acquire HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{first}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    // Long enough for the server to read the first part on its own.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stream.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(common::DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("the server did not answer in time")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.ends_with(
            r#"{"allowed":true,"limit":2,"remaining":1,"reset_after_ms":60001,"retry_after_ms":0}"#
        ),
        "{answer}"
    );
}
