//! The runtime limits API on real `slidegate serve` processes with the
//! memory store: per-key limits and Envoy domains set, read and removed
//! over HTTP; the admin token, the bounds, the body's type and size, the
//! checks a file gets, `If-Match`; a raised limit that keeps what was used;
//! and the file that keeps them across a restart.

mod common;
#[path = "common/process.rs"]
mod process;

use std::net::SocketAddr;

use http::{Method, StatusCode};
use process::Slidegate;

const TOKEN: &str = "runtime-limits-test-token";

async fn call(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> common::Reply {
    common::request_to(addr, method, path, headers, body.as_bytes().to_vec()).await
}

/// A write or read with the admin token, a JSON body, and more headers.
async fn admin(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: &str,
    more: &[(&str, &str)],
) -> common::Reply {
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = vec![("authorization", bearer.as_str())];
    if !more.iter().any(|(name, _)| *name == "content-type") {
        headers.push(("content-type", "application/json"));
    }
    headers.extend_from_slice(more);
    call(addr, method, path, &headers, body).await
}

async fn acquire(addr: SocketAddr, body: &str) -> common::Reply {
    call(
        addr,
        Method::POST,
        "/v1/acquire",
        &[("content-type", "application/json")],
        body,
    )
    .await
}

/// How many of `n` requests `{"key": key}` are admitted.
async fn admitted(addr: SocketAddr, key: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let reply = acquire(addr, &format!(r#"{{"key":"{key}"}}"#)).await;
        match reply.status {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}: {reply:?}"),
        }
    }
    admitted
}

fn limit_body(limit: u64, window_ms: u64) -> String {
    format!(r#"{{"rules":[{{"limit":{limit},"window_ms":{window_ms}}}]}}"#)
}

fn domain_yaml(domain: &str, limit: u64) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: hour, requests_per_unit: {limit}}}\n"
    )
}

fn rules_file(dir: &std::path::Path) -> String {
    let path = dir.join("files.yaml");
    std::fs::write(&path, domain_yaml("files", 100)).expect("write the rules file");
    path.display().to_string()
}

/// An Envoy check of `tenant=VALUE` in `domain` over `/v1/check`.
async fn check(addr: SocketAddr, domain: &str, value: &str) -> common::Reply {
    let body = format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"tenant","value":"{value}"}}]}}]}}"#
    );
    acquire_like(addr, "/v1/check", &body).await
}

async fn acquire_like(addr: SocketAddr, path: &str, body: &str) -> common::Reply {
    call(
        addr,
        Method::POST,
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_writes_are_refused_naming_the_flags() {
    let server = Slidegate::start(&[]);
    let reply = call(
        server.http,
        Method::PUT,
        "/v1/keys/tenant:acme/limit",
        &[("content-type", "application/json")],
        &limit_body(5, 60_000),
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{reply:?}");
    assert_eq!(reply.error_code(), "admin_token_not_configured");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("--admin-token") && message.contains("--admin-token-file"),
        "{message}"
    );
    let domain = call(
        server.http,
        Method::PUT,
        "/v1/config/domains/api",
        &[("content-type", "application/yaml")],
        &domain_yaml("api", 5),
    )
    .await;
    assert_eq!(domain.error_code(), "admin_token_not_configured");
    assert!(
        server
            .logs()
            .iter()
            .any(|l| l.contains("kept in memory only")),
        "a WARN at start says the runtime limits live in memory only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_limits_are_set_read_enforced_and_removed() {
    let server = Slidegate::start(&["--admin-token", TOKEN]);
    let addr = server.http;
    let path = "/v1/keys/tenant:acme/limit";

    // The token: required for writes and, once set, for reads.
    let body = limit_body(2, 3_600_000);
    let anonymous = call(
        addr,
        Method::PUT,
        path,
        &[("content-type", "application/json")],
        &body,
    )
    .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let wrong = call(
        addr,
        Method::PUT,
        path,
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer nope"),
        ],
        &body,
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert_eq!(
        common::get(addr, path).await.status,
        StatusCode::UNAUTHORIZED
    );

    // Neither a limit of its own nor one set: 400 as before.
    let none = acquire(addr, r#"{"key":"tenant:acme"}"#).await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST, "{none:?}");
    assert_eq!(none.error_code(), "missing_field");

    let set = admin(addr, Method::PUT, path, &body, &[]).await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    let version = set.json()["version"].as_u64().unwrap();
    assert_eq!(set.header("etag"), Some(format!("\"{version}\"").as_str()));
    assert_eq!(admitted(addr, "tenant:acme", 4).await, 2);

    let read = admin(addr, Method::GET, path, "", &[]).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(
        read.json(),
        serde_json::json!({"key": "tenant:acme", "version": version,
            "rules": [{"limit": 2, "window_ms": 3_600_000, "algorithm": "sliding_log"}]})
    );

    // A request with a limit of its own on such a key is decided under
    // both, all or nothing: denied by its own 1/h, nothing is counted in
    // the key's 5/h.
    let both = "tenant:both";
    let set = admin(
        addr,
        Method::PUT,
        &format!("/v1/keys/{both}/limit"),
        &limit_body(5, 3_600_000),
        &[],
    )
    .await;
    assert_eq!(set.status, StatusCode::OK);
    let own = r#"{"key":"tenant:both","limit":1,"window_ms":3600000}"#;
    assert_eq!(acquire(addr, own).await.status, StatusCode::OK);
    let denied = acquire(addr, own).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        admitted(addr, both, 10).await,
        4,
        "5/h less the one request admitted"
    );

    // Removed: the key is back to "no limit named" (400), and a second
    // removal is a 404.
    let removed = admin(addr, Method::DELETE, path, "", &[]).await;
    assert_eq!(removed.status, StatusCode::OK, "{removed:?}");
    assert_eq!(
        acquire(addr, r#"{"key":"tenant:acme"}"#).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        admin(addr, Method::DELETE, path, "", &[]).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        admin(addr, Method::GET, path, "", &[]).await.status,
        StatusCode::NOT_FOUND
    );

    // Bad rules get the codes /v1/acquire gives them.
    let bad = admin(
        addr,
        Method::PUT,
        path,
        r#"{"rules":[{"limit":0,"window_ms":1000}]}"#,
        &[],
    )
    .await;
    assert_eq!(bad.error_code(), "invalid_limit");
    let bad = admin(addr, Method::PUT, path, r#"{"rules":[]}"#, &[]).await;
    assert_eq!(bad.error_code(), "invalid_rules");
    let bad = admin(
        addr,
        Method::PUT,
        path,
        r#"{"rules":[{"limit":1,"window_ms":1000}],"x":1}"#,
        &[],
    )
    .await;
    assert_eq!(bad.error_code(), "unknown_field");
    let yaml = call(
        addr,
        Method::PUT,
        path,
        &[
            ("authorization", &format!("Bearer {TOKEN}")),
            ("content-type", "application/yaml"),
        ],
        "rules: []",
    )
    .await;
    assert_eq!(yaml.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let log = server.logs().join("\n");
    assert!(
        log.contains("runtime limit changed") && log.contains("token:"),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "the token is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_limit_gives_no_fresh_quota() {
    let server = Slidegate::start(&["--admin-token", TOKEN]);
    let path = "/v1/keys/tenant:raise/limit";
    let set = admin(
        server.http,
        Method::PUT,
        path,
        &limit_body(3, 3_600_000),
        &[],
    )
    .await;
    assert_eq!(set.status, StatusCode::OK);
    assert_eq!(admitted(server.http, "tenant:raise", 5).await, 3);
    let raised = admin(
        server.http,
        Method::PUT,
        path,
        &limit_body(5, 3_600_000),
        &[],
    )
    .await;
    assert_eq!(raised.status, StatusCode::OK);
    assert_eq!(
        admitted(server.http, "tenant:raise", 5).await,
        2,
        "3 used under 3/h count under 5/h"
    );
}

/// How many of `n` checks of `tenant=VALUE` in `domain` are admitted.
async fn checks_admitted(addr: SocketAddr, domain: &str, value: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let reply = check(addr, domain, value).await;
        match reply.json()["overallCode"].as_str() {
            Some("OK") => admitted += 1,
            Some("OVER_LIMIT") => {}
            _ => panic!("{reply:?}"),
        }
    }
    admitted
}

/// A runtime domain's limit raised, lowered, raised twice within a window:
/// every counter keeps what it used, carried at its first check under the
/// new limit; a new window is a new quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_whose_limit_changes_keeps_what_its_counters_used() {
    let server = Slidegate::start(&["--admin-token", TOKEN]);
    let addr = server.http;
    let put = |yaml: String| async move {
        let reply = admin(
            addr,
            Method::PUT,
            "/v1/config/domains/tenants",
            &yaml,
            &[("content-type", "application/yaml")],
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    };
    put(domain_yaml("tenants", 3)).await;
    assert_eq!(checks_admitted(addr, "tenants", "a", 4).await, 3);
    assert_eq!(checks_admitted(addr, "tenants", "b", 1).await, 1);
    assert_eq!(checks_admitted(addr, "tenants", "c", 2).await, 2);

    put(domain_yaml("tenants", 5)).await;
    assert_eq!(
        checks_admitted(addr, "tenants", "a", 5).await,
        2,
        "3 used under 3/h count under 5/h"
    );
    assert_eq!(
        checks_admitted(addr, "tenants", "d", 6).await,
        5,
        "a new counter"
    );

    // Raised again before b and c were checked: they carry from the first
    // rule; a, carried already, keeps its 5.
    put(domain_yaml("tenants", 6)).await;
    assert_eq!(checks_admitted(addr, "tenants", "a", 3).await, 1);
    assert_eq!(checks_admitted(addr, "tenants", "b", 6).await, 5);

    // Lowered below what c used: nothing passes.
    put(domain_yaml("tenants", 2)).await;
    assert_eq!(checks_admitted(addr, "tenants", "c", 3).await, 0);

    // Another window is another quota.
    put(
        "domain: tenants\ndescriptors:\n  - key: tenant\n    rate_limit: {window: 2h, requests_per_unit: 2}\n"
            .to_owned(),
    )
    .await;
    assert_eq!(checks_admitted(addr, "tenants", "a", 3).await, 2);
    assert!(server.panics().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_match_guards_concurrent_writers_and_last_write_wins_without_it() {
    let server = Slidegate::start(&["--admin-token", TOKEN]);
    let addr = server.http;
    let path = "/v1/keys/tenant:race/limit";
    let created = admin(
        addr,
        Method::PUT,
        path,
        &limit_body(1, 1000),
        &[("if-match", "\"0\"")],
    )
    .await;
    assert_eq!(created.status, StatusCode::OK, "{created:?}");
    let v1 = created.json()["version"].as_u64().unwrap();
    let again = admin(
        addr,
        Method::PUT,
        path,
        &limit_body(1, 1000),
        &[("if-match", "\"0\"")],
    )
    .await;
    assert_eq!(
        again.status,
        StatusCode::PRECONDITION_FAILED,
        "only if absent"
    );

    // Two writers read v1; the first writes, the second is refused.
    let tag = format!("\"{v1}\"");
    let first = admin(
        addr,
        Method::PUT,
        path,
        &limit_body(2, 1000),
        &[("if-match", &tag)],
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    let second = admin(
        addr,
        Method::PUT,
        path,
        &limit_body(3, 1000),
        &[("if-match", &tag)],
    )
    .await;
    assert_eq!(second.status, StatusCode::PRECONDITION_FAILED, "{second:?}");
    assert_eq!(second.error_code(), "version_mismatch");
    let read = admin(addr, Method::GET, path, "", &[]).await;
    assert_eq!(
        read.json()["rules"][0]["limit"],
        2,
        "the first write stands"
    );

    // Without If-Match, the last write wins.
    let last = admin(addr, Method::PUT, path, &limit_body(4, 1000), &[]).await;
    assert_eq!(last.status, StatusCode::OK);
    assert_eq!(
        admin(addr, Method::GET, path, "", &[]).await.json()["rules"][0]["limit"],
        4
    );
    let stale_delete = admin(addr, Method::DELETE, path, "", &[("if-match", &tag)]).await;
    assert_eq!(stale_delete.status, StatusCode::PRECONDITION_FAILED);
    let bad = admin(
        addr,
        Method::PUT,
        path,
        &limit_body(4, 1000),
        &[("if-match", "*")],
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_are_checked_as_files_are_and_files_stay_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let server = Slidegate::start(&[
        "--admin-token",
        TOKEN,
        "--config",
        &rules_file(dir.path()),
        "--max-runtime-domains",
        "2",
        "--max-runtime-body-bytes",
        "400",
    ]);
    let addr = server.http;
    let yaml = [("content-type", "application/yaml")];

    let set = admin(
        addr,
        Method::PUT,
        "/v1/config/domains/api",
        &domain_yaml("api", 2),
        &yaml,
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    let version = set.json()["version"].as_u64().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let reply = check(addr, "api", "acme").await;
        statuses.push(
            reply.json()["overallCode"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(
        statuses,
        ["OK", "OK", "OVER_LIMIT"],
        "the runtime domain is enforced"
    );

    // JSON is accepted too, and read back as it was sent.
    let json = r#"{"domain":"web","descriptors":[{"key":"tenant","rate_limit":{"unit":"minute","requests_per_unit":9}}]}"#;
    let set = admin(addr, Method::PUT, "/v1/config/domains/web", json, &[]).await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    let read = admin(addr, Method::GET, "/v1/config/domains/web", "", &[]).await;
    assert_eq!(read.header("content-type"), Some("application/json"));
    assert_eq!(&read.body[..], json.as_bytes());

    // The same errors as a file, at the body's line and column.
    let bad = "domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n";
    let refused = admin(addr, Method::PUT, "/v1/config/domains/api", bad, &yaml).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.error_code(), "invalid_config");
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("request body:3:5: invalid rate limit unit"),
        "{message}"
    );
    let other = admin(
        addr,
        Method::PUT,
        "/v1/config/domains/api",
        &domain_yaml("web", 2),
        &yaml,
    )
    .await;
    assert_eq!(other.error_code(), "domain_mismatch");
    let bearer = format!("Bearer {TOKEN}");
    let text = call(
        addr,
        Method::PUT,
        "/v1/config/domains/api",
        &[("authorization", &bearer), ("content-type", "text/plain")],
        &domain_yaml("api", 2),
    )
    .await;
    assert_eq!(text.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = format!("{}# {}\n", domain_yaml("api", 2), "x".repeat(400));
    let large = admin(addr, Method::PUT, "/v1/config/domains/api", &big, &yaml).await;
    assert_eq!(large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        large.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-runtime-body-bytes")
    );

    // The bound, and the files' domain.
    let third = admin(
        addr,
        Method::PUT,
        "/v1/config/domains/third",
        &domain_yaml("third", 2),
        &yaml,
    )
    .await;
    assert_eq!(third.status, StatusCode::CONFLICT);
    assert_eq!(third.error_code(), "too_many_runtime_domains");
    assert!(
        third.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-runtime-domains")
    );
    let file = admin(
        addr,
        Method::PUT,
        "/v1/config/domains/files",
        &domain_yaml("files", 2),
        &yaml,
    )
    .await;
    assert_eq!(file.status, StatusCode::CONFLICT);
    assert_eq!(file.error_code(), "domain_defined_in_file");

    // /v1/config shows both layers, each domain with its origin.
    let config = admin(addr, Method::GET, "/v1/config", "", &[]).await.json();
    let origin = |d: &str| {
        config["domains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["domain"] == d)
            .map(|x| (x["origin"].clone(), x["version"].clone()))
    };
    assert_eq!(origin("api"), Some(("runtime".into(), version.into())));
    assert_eq!(origin("files").map(|o| o.0), Some("file".into()));
    assert_eq!(config["runtime"]["home"], "memory");
    let list = admin(addr, Method::GET, "/v1/config/domains", "", &[])
        .await
        .json();
    assert_eq!(list["domains"].as_array().unwrap().len(), 3, "{list}");

    // Removed: the domain is unknown again.
    let removed = admin(addr, Method::DELETE, "/v1/config/domains/api", "", &[]).await;
    assert_eq!(removed.status, StatusCode::OK);
    assert_eq!(
        admin(addr, Method::GET, "/v1/config/domains/api", "", &[])
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let removed_file = admin(addr, Method::DELETE, "/v1/config/domains/files", "", &[]).await;
    assert_eq!(removed_file.error_code(), "domain_defined_in_file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_bound_names_its_flag() {
    let server = Slidegate::start(&["--admin-token", TOKEN, "--max-runtime-keys", "2"]);
    for key in ["a", "b"] {
        let set = admin(
            server.http,
            Method::PUT,
            &format!("/v1/keys/{key}/limit"),
            &limit_body(1, 1000),
            &[],
        )
        .await;
        assert_eq!(set.status, StatusCode::OK);
    }
    let third = admin(
        server.http,
        Method::PUT,
        "/v1/keys/c/limit",
        &limit_body(1, 1000),
        &[],
    )
    .await;
    assert_eq!(third.status, StatusCode::CONFLICT);
    assert_eq!(third.error_code(), "too_many_runtime_keys");
    assert!(
        third.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-runtime-keys")
    );
    let replaced = admin(
        server.http,
        Method::PUT,
        "/v1/keys/a/limit",
        &limit_body(2, 1000),
        &[],
    )
    .await;
    assert_eq!(replaced.status, StatusCode::OK, "replacing is no new key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_keeps_every_runtime_limit_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runtime-limits.json");
    let args = [
        "--admin-token",
        TOKEN,
        "--runtime-limits-file",
        file.to_str().unwrap(),
    ];
    let mut first = Slidegate::start(&args);
    let key = admin(
        first.http,
        Method::PUT,
        "/v1/keys/tenant:kept/limit",
        &limit_body(7, 60_000),
        &[],
    )
    .await;
    assert_eq!(key.status, StatusCode::OK);
    let domain = admin(
        first.http,
        Method::PUT,
        "/v1/config/domains/kept",
        &domain_yaml("kept", 3),
        &[("content-type", "application/yaml")],
    )
    .await;
    assert_eq!(domain.status, StatusCode::OK);
    let gone = admin(
        first.http,
        Method::PUT,
        "/v1/keys/tenant:gone/limit",
        &limit_body(1, 1000),
        &[],
    )
    .await;
    assert_eq!(gone.status, StatusCode::OK);
    assert_eq!(
        admin(
            first.http,
            Method::DELETE,
            "/v1/keys/tenant:gone/limit",
            "",
            &[]
        )
        .await
        .status,
        StatusCode::OK
    );
    first.signal("TERM");
    first.wait();
    assert!(
        !first
            .logs()
            .iter()
            .any(|l| l.contains("kept in memory only")),
        "no WARN with a file"
    );

    let second = Slidegate::start(&args);
    let read = admin(
        second.http,
        Method::GET,
        "/v1/keys/tenant:kept/limit",
        "",
        &[],
    )
    .await;
    assert_eq!(read.status, StatusCode::OK, "{read:?}");
    assert_eq!(read.json(), key.json());
    let read = admin(second.http, Method::GET, "/v1/config/domains/kept", "", &[]).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("etag"), domain.header("etag"));
    assert_eq!(
        admin(
            second.http,
            Method::GET,
            "/v1/keys/tenant:gone/limit",
            "",
            &[]
        )
        .await
        .status,
        StatusCode::NOT_FOUND,
        "a removal is kept too"
    );
    assert_eq!(
        check(second.http, "kept", "x").await.json()["overallCode"],
        "OK"
    );
    // The version goes on from where it was.
    let next = admin(
        second.http,
        Method::PUT,
        "/v1/keys/tenant:next/limit",
        &limit_body(1, 1000),
        &[],
    )
    .await;
    assert!(next.json()["version"].as_u64().unwrap() > domain.json()["version"].as_u64().unwrap());

    // A file that is not one refuses the start (never "no limits").
    std::fs::write(&file, "not json").unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args([
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
}
