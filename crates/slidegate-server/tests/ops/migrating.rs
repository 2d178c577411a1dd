//! The migration guide (`docs/MIGRATING.md`) keeps its word: its example
//! rules pass `slidegate validate-config`, the translated Limitador limit
//! decides as the Limitador one did, and every flag and `SLIDEGATE_*`
//! variable it names is one the binary has.

use std::collections::BTreeSet;
use std::path::PathBuf;

use http::Method;

use crate::common::request_to;
use crate::process::Slidegate;
use crate::support::{self, assert_valid, flags_of, serve_env_vars};

const GUIDE: &str = "docs/MIGRATING.md";

/// A YAML block of the guide marked `<!-- test: KIND NAME -->`.
struct Example {
    kind: String,
    name: String,
    text: String,
}

fn examples() -> Vec<Example> {
    let guide = support::read(GUIDE);
    let mut examples = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line
            .strip_prefix("<!-- test: ")
            .and_then(|m| m.strip_suffix(" -->"))
        else {
            continue;
        };
        let (kind, name) = marker.split_once(' ').expect("<!-- test: KIND NAME -->");
        assert_eq!(
            lines.next(),
            Some("```yaml"),
            "{name}: a yaml block follows"
        );
        let text: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        examples.push(Example {
            kind: kind.to_owned(),
            name: name.to_owned(),
            text: text.join("\n") + "\n",
        });
    }
    examples
}

/// The guide's rules examples, written to files of their own.
fn rules_files(dir: &tempfile::TempDir) -> Vec<(String, PathBuf)> {
    examples()
        .into_iter()
        .filter(|e| e.kind == "rules")
        .map(|e| {
            let path = dir.path().join(&e.name);
            std::fs::write(&path, &e.text).expect("the example is written");
            (e.name, path)
        })
        .collect()
}

#[test]
fn the_guides_example_rules_pass_validate_config() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files = rules_files(&dir);
    let names: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["envoyproxy-ratelimit.yaml", "limitador-translated.yaml"])
    );
    for (name, path) in &files {
        let domain = if name.starts_with("envoyproxy") {
            "edge"
        } else {
            "shop"
        };
        assert_valid(&[path], &[domain]);
    }
}

#[test]
fn the_guides_limitador_example_is_a_limits_file() {
    let limits = examples()
        .into_iter()
        .find(|e| e.kind == "limitador")
        .expect("a Limitador example");
    let parsed: serde_json::Value = serde_saphyr::from_str(&limits.text).expect("YAML");
    let limits = parsed.as_array().expect("a list of limits");
    assert_eq!(limits.len(), 2);
    for limit in limits {
        for field in [
            "namespace",
            "max_value",
            "seconds",
            "conditions",
            "variables",
        ] {
            assert!(!limit[field].is_null(), "no {field} in {limit}");
        }
    }
}

async fn checkout(server: &Slidegate, method: &str, user: &str) -> http::StatusCode {
    // The descriptor the guide's Envoy actions send for the checkout limit.
    let body = format!(
        r#"{{"domain":"shop","descriptors":[{{"entries":[
            {{"key":"req.method","value":"{method}"}},
            {{"key":"req.path","value":"/checkout"}},
            {{"key":"user_id","value":"{user}"}}]}}]}}"#
    );
    request_to(
        server.http,
        Method::POST,
        "/v1/check",
        &[("content-type", "application/json")],
        body.into_bytes(),
    )
    .await
    .status
}

/// Limitador's `max_value: 5, seconds: 60` on `POST /checkout` per user:
/// five pass, the sixth is denied, another user and a `GET` are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_translated_limitador_checkout_limit_denies_the_sixth_post_of_a_user() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_, translated) = rules_files(&dir)
        .into_iter()
        .find(|(name, _)| name == "limitador-translated.yaml")
        .expect("the translated rules");
    let server = Slidegate::start(&["--config", translated.to_str().expect("UTF-8")]);
    for attempt in 1..=5 {
        assert_eq!(
            checkout(&server, "POST", "alice").await,
            200,
            "attempt {attempt}"
        );
    }
    assert_eq!(checkout(&server, "POST", "alice").await, 429);
    assert_eq!(checkout(&server, "POST", "bob").await, 200);
    assert_eq!(checkout(&server, "GET", "alice").await, 200);
}

/// Every `--flag` in the guide that reads as slidegate's (not a Limitador
/// flag, named in the Limitador column) is a flag of `serve` or
/// `validate-config`.
#[test]
fn every_slidegate_flag_and_variable_the_guide_names_exists() {
    let guide = support::read(GUIDE);
    let mut known = flags_of("serve");
    known.extend(flags_of("validate-config"));
    // Limitador's own flags, named as what they were.
    let limitador: BTreeSet<&str> = [
        "rls-ip",
        "rls-port",
        "http-ip",
        "http-port",
        "validate",
        "limit-name-in-labels",
        "custom-metric-labels",
        "metric-labels-default",
        "rate-limit-headers",
        "tracing-endpoint",
        "batch-size",
        "flush-period",
        "max-cached",
        "response-timeout",
    ]
    .into();
    let mut named = BTreeSet::new();
    for (i, _) in guide.match_indices("--") {
        let flag: String = guide[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if flag.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            named.insert(flag);
        }
    }
    assert!(named.contains("store"), "the parser found no flags");
    let unknown: Vec<&String> = named
        .iter()
        .filter(|f| !known.contains(*f) && !limitador.contains(f.as_str()))
        .collect();
    assert!(unknown.is_empty(), "not slidegate flags: {unknown:?}");

    let variables = serve_env_vars();
    let mut named = BTreeSet::new();
    for (i, _) in guide.match_indices("SLIDEGATE_") {
        let name: String = guide[i..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
            .collect();
        named.insert(name);
    }
    let unknown: Vec<&String> = named
        .iter()
        .filter(|n| !variables.contains(*n) && *n != "SLIDEGATE_")
        .collect();
    assert!(unknown.is_empty(), "not slidegate variables: {unknown:?}");
}
