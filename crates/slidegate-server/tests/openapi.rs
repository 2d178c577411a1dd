//! The OpenAPI document (`GET /openapi.json`, `docs/openapi.json`) cannot
//! drift from the server:
//!
//! - its paths and methods are the router's, both ways: the routes the
//!   router is built from (`api::http::routes::ROUTES`), each method
//!   probed on a live `slidegate serve`;
//! - its `ErrorCode` enum is every variant of the server's `ErrorCode`, read
//!   from the source;
//! - `openapi-spec-validator` accepts it, and Schemathesis
//!   (`st run --checks all`) finds no server error and no answer that
//!   breaks it on a live server with an admin token (so the admin routes
//!   are exercised).
//!
//! The two Python tools come from PyPI in the virtualenv of
//! `$SLIDEGATE_TEST_CLIENTS` (by default `target/test-clients`), which
//! `scripts/test.sh` installs; without them their test is skipped and says
//! so, and under `CI=true` it fails.

mod common;
#[path = "common/process.rs"]
mod process;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use http::Method;
use process::Slidegate;
use slidegate_server::api::http::OPENAPI_JSON;
use slidegate_server::api::http::routes::{Methods, ROUTES};

const TOKEN: &str = "openapi-test-admin-token";

/// The methods a route is probed with. `HEAD` is left out: axum answers it
/// on every `GET` route, and a probe's reader would wait for a body.
const PROBED: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

fn document() -> serde_json::Value {
    serde_json::from_str(OPENAPI_JSON).expect("the OpenAPI document is JSON")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The methods the document gives `path`, upper-case.
fn documented_methods(doc: &serde_json::Value, path: &str) -> BTreeSet<String> {
    doc["paths"][path]
        .as_object()
        .map(|item| {
            item.keys()
                .filter(|k| {
                    [
                        "get", "head", "post", "put", "patch", "delete", "options", "trace",
                    ]
                    .contains(&k.as_str())
                })
                .map(|k| k.to_uppercase())
                .collect()
        })
        .unwrap_or_default()
}

/// A server with the example rules, the memory store and an admin token.
fn server() -> Slidegate {
    let rules = repo().join("examples/rules");
    Slidegate::start(&[
        "--config",
        rules.to_str().expect("a UTF-8 path"),
        "--admin-token",
        TOKEN,
    ])
}

#[test]
fn the_document_has_the_routes_of_the_router_and_no_other() {
    let doc = document();
    let in_doc: BTreeSet<&str> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    let in_router: BTreeSet<&str> = ROUTES.iter().map(|r| r.path).collect();
    assert_eq!(
        in_doc.difference(&in_router).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "paths in the document that the router does not have"
    );
    assert_eq!(
        in_router.difference(&in_doc).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "routes the document does not describe"
    );
    for route in ROUTES {
        let methods = documented_methods(&doc, route.path);
        match route.methods {
            Methods::Only(names) => {
                let listed: BTreeSet<String> = names.iter().map(|m| (*m).to_owned()).collect();
                assert_eq!(methods, listed, "the methods of {}", route.path);
            }
            // Every method OpenAPI can name but TRACE (which no proxy
            // forwards to an auth check).
            Methods::Any => {
                for method in PROBED.iter().chain(&["HEAD"]) {
                    assert!(
                        methods.contains(*method),
                        "{} answers any method; the document lacks {method}",
                        route.path
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn every_documented_method_is_routed_and_every_other_is_405() {
    let doc = document();
    let server = server();
    for route in ROUTES {
        // Any value fits a path segment here: the probe asks whether the
        // route exists, not what the handler answers.
        let path = route
            .path
            .replace("{id}", "abc")
            .replace("{key}", "probe")
            .replace("{domain}", "api")
            .replace("{asset}", "app.js");
        let documented = documented_methods(&doc, route.path);
        for method in PROBED {
            let reply = common::request_to(
                server.http,
                Method::from_bytes(method.as_bytes()).expect("a method"),
                &path,
                &[("authorization", &format!("Bearer {TOKEN}"))],
                Vec::new(),
            )
            .await;
            let unrouted = reply.status == 404
                && String::from_utf8_lossy(&reply.body).contains("no such route");
            if documented.contains(method) {
                assert!(
                    reply.status != 405 && !unrouted,
                    "{method} {path} is documented, and the server answers {reply:?}"
                );
            } else {
                assert_eq!(
                    reply.status, 405,
                    "{method} {path} is not documented, and the server answers {reply:?}"
                );
            }
        }
    }
}

#[test]
fn the_error_code_enum_is_every_error_code_of_the_server() {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api/http/error.rs"),
    )
    .expect("error.rs");
    let file = syn::parse_file(&source).expect("error.rs parses");
    let variants: BTreeSet<String> = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Enum(e) if e.ident == "ErrorCode" => Some(e),
            _ => None,
        })
        .expect("enum ErrorCode")
        .variants
        .iter()
        .map(|v| snake_case(&v.ident.to_string()))
        .collect();
    let documented: BTreeSet<String> = document()["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("the ErrorCode enum")
        .iter()
        .map(|code| code.as_str().expect("a code").to_owned())
        .collect();
    assert_eq!(
        documented.difference(&variants).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "codes in the document the server does not have"
    );
    assert_eq!(
        variants.difference(&documented).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "codes of the server the document does not list"
    );
    // The conversion is serde's `rename_all = "snake_case"`.
    assert_eq!(
        serde_json::to_value(slidegate_server::api::http::ErrorCode::AdminTokenNotConfigured)
            .expect("a code"),
        snake_case("AdminTokenNotConfigured")
    );
}

/// `TooManyRuntimeKeys` → `too_many_runtime_keys`, as serde writes it.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[tokio::test]
async fn the_served_document_is_the_file_in_the_repository() {
    let server = server();
    let reply = common::get(server.http, "/openapi.json").await;
    assert_eq!(reply.status, 200, "public: no token needed");
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let on_disk = std::fs::read_to_string(repo().join("docs/openapi.json")).expect("the doc");
    assert_eq!(reply.body, on_disk.as_bytes());
}

/// The virtualenv's `bin/NAME`, when installed; otherwise `None` (the test
/// is skipped), or a failure under `CI=true`.
fn python_tool(name: &str) -> Option<PathBuf> {
    let clients = std::env::var_os("SLIDEGATE_TEST_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/test-clients"));
    let path = clients.join("venv/bin").join(name);
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{name} is missing at {}: scripts/test.sh installs it",
        path.display()
    );
    eprintln!(
        "skipped: {name} is not installed ({}); run scripts/test.sh",
        path.display()
    );
    None
}

#[test]
fn openapi_spec_validator_accepts_the_document() {
    let Some(validator) = python_tool("openapi-spec-validator") else {
        return;
    };
    let output = Command::new(validator)
        .arg(repo().join("docs/openapi.json"))
        .output()
        .expect("openapi-spec-validator runs");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What Schemathesis may find and the test lets pass, each for a reason:
/// `ST202` (a request valid by the document refused with a 4xx) comes from
/// rules JSON Schema cannot state: one header of two (`X-Forwarded-Uri` or
/// `X-Original-URI`), a field that depends on another (`burst` under
/// `gcra` only, as a query parameter; the domain in the body and in the
/// path), on the server's state (`If-Match` naming another version, a key
/// alone without a limit set), and `1.0` read as a number that is not
/// whole (JSON Schema counts it an integer). Everything else (a 5xx, an
/// answer whose status, type, header or body the document does not give,
/// a bad request accepted) fails the test.
const EXPLAINED: [&str; 1] = ["ST202"];

#[test]
fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let Some(st) = python_tool("st") else {
        return;
    };
    let server = server();
    let report = tempfile::tempdir().expect("a temporary directory");
    let report_path = report.path().join("report.json");
    let output = Command::new(st)
        .args(["run", &format!("http://{}/openapi.json", server.http)])
        .args(["--checks", "all"])
        // Every case of an operation, not only up to its first finding: an
        // explained one must not hide a server error behind it.
        .arg("--continue-on-failure")
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        // Bounded and reproducible: about 30 s on a loaded 2-core machine.
        .args(["--max-examples", "30", "--seed", "1", "--workers", "2"])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report_path)
        .current_dir(report.path())
        .output()
        .expect("schemathesis runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&report_path).unwrap_or_else(|e| panic!("no report ({e}):\n{log}")),
    )
    .expect("the report is JSON");
    assert_eq!(report["complete"], true, "{log}");
    let operations = &report["operations"];
    assert_eq!(operations["tested"], operations["total"], "{log}");
    assert!(
        operations["total"].as_u64().is_some_and(|n| n >= 28),
        "{log}"
    );
    assert_eq!(report["errors"], serde_json::json!([]), "{log}");
    let unexplained: Vec<&serde_json::Value> = report["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter(|f| !EXPLAINED.contains(&f["code"].as_str().unwrap_or_default()))
        .collect();
    assert!(unexplained.is_empty(), "{unexplained:#?}\n{log}");
    assert!(
        server.panics().is_empty(),
        "the server panicked: {:?}",
        server.panics()
    );
}
