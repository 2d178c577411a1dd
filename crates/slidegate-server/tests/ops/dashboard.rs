//! The Grafana dashboard (`docs/grafana/slidegate.json`) against a running
//! server: every query parses as PromQL, and every metric, label and label
//! value it selects on is in `/metrics` once the server has allowed,
//! denied, let a request wait, answered from its deny cache, reloaded its
//! rules, timed out and refused a connection and lost its store; every
//! metric the server exports has a `# HELP` line and a panel, and so has
//! every family of `telemetry::families`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use http::Method;
use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::Value;
use tokio::net::TcpStream;

use crate::common::redis::Redis;
use crate::common::request_to;
use crate::process::Slidegate;
use crate::support::{self, Exposition};
use slidegate_server::telemetry::families::FAMILIES;

const DASHBOARD: &str = "docs/grafana/slidegate.json";

/// Enough for the test's HTTP requests (one at a time, beside one silent
/// connection), so that only the gRPC connections it holds meet the cap.
const MAX_CONNECTIONS_PER_IP: usize = 4;

/// Labels Prometheus gives every series it scrapes: not the server's.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// One query of the dashboard, and where it is.
struct Query {
    place: String,
    promql: String,
}

/// Every PromQL query of the dashboard: panel targets (rows included),
/// annotations, and the selectors of its `label_values` variables.
fn queries(dashboard: &Value) -> Vec<Query> {
    let mut found = Vec::new();
    let mut panels: Vec<&Value> = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            found.push(Query {
                place: format!("panel {:?}", panel["title"]),
                promql: target["expr"].as_str().expect("a target expr").to_owned(),
            });
        }
    }
    for annotation in dashboard["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = annotation["expr"].as_str() {
            found.push(Query {
                place: format!("annotation {:?}", annotation["name"]),
                promql: expr.to_owned(),
            });
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let definition = variable["definition"].as_str().expect("a definition");
        let (selector, label) = label_values(definition);
        // `label_values(selector, label)` is Grafana's; the selector with
        // the label in a `by` clause is the PromQL that needs the same.
        found.push(Query {
            place: format!("variable {:?}", variable["name"]),
            promql: format!("count by ({label}) ({selector})"),
        });
    }
    found
}

/// `label_values(SELECTOR, LABEL)` → `(SELECTOR, LABEL)`.
fn label_values(definition: &str) -> (&str, &str) {
    let inner = definition
        .strip_prefix("label_values(")
        .and_then(|d| d.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not label_values(…): {definition}"));
    let (selector, label) = inner
        .rsplit_once(',')
        .expect("label_values(selector, label)");
    (selector.trim(), label.trim())
}

/// The query as Prometheus receives it: Grafana's variables replaced.
fn substitute(promql: &str) -> String {
    promql
        .replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$__interval", "15s")
        .replace("$job", ".*")
        .replace("$instance", ".*")
        .replace("$domain", ".*")
}

/// A label matcher: the label, how it matches, the value or pattern.
type Matcher = (String, MatchOp, String);

/// A selector of the query, and the labels its aggregations group by.
#[derive(Debug, Default)]
struct Selections {
    selectors: Vec<(String, Vec<Matcher>)>,
    grouping: BTreeSet<String>,
}

fn walk(expr: &Expr, out: &mut Selections) {
    match expr {
        Expr::Aggregate(a) => {
            if let Some(modifier) = &a.modifier {
                let labels = match modifier {
                    LabelModifier::Include(l) | LabelModifier::Exclude(l) => l,
                };
                out.grouping.extend(labels.labels.iter().cloned());
            }
            walk(&a.expr, out);
            if let Some(param) = &a.param {
                walk(param, out);
            }
        }
        Expr::Unary(u) => walk(&u.expr, out),
        Expr::Binary(b) => {
            walk(&b.lhs, out);
            walk(&b.rhs, out);
        }
        Expr::Paren(p) => walk(&p.expr, out),
        Expr::Subquery(s) => walk(&s.expr, out),
        Expr::VectorSelector(vs) => select(vs, out),
        Expr::MatrixSelector(ms) => select(&ms.vs, out),
        Expr::Call(call) => call.args.args.iter().for_each(|a| walk(a, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

fn select(vs: &parser::VectorSelector, out: &mut Selections) {
    let name = vs.name.clone().expect("every selector names its metric");
    let matchers = vs
        .matchers
        .matchers
        .iter()
        .filter(|m| m.name != "__name__")
        .map(|m| (m.name.clone(), m.op.clone(), m.value.clone()))
        .collect();
    out.selectors.push((name, matchers));
}

/// The values a regular expression spells out (`a|b|c`), or none when it
/// is a pattern (`.*`).
fn alternatives(regex: &str) -> Vec<&str> {
    if regex
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
    {
        regex.split('|').collect()
    } else {
        Vec::new()
    }
}

/// What is wrong with `query` against `metrics`, if anything.
/// Families this test's server cannot export: they need an xDS control
/// plane, which this test does not run. Their panels
/// are still parsed, and still required by the families check below.
const NOT_EXPORTED_HERE: [&str; 2] = ["slidegate_xds_connected", "slidegate_xds_updates_total"];

fn problems(query: &Query, metrics: &Exposition) -> Vec<String> {
    let promql = substitute(&query.promql);
    let expr = match parser::parse(&promql) {
        Ok(expr) => expr,
        Err(e) => return vec![format!("{}: not PromQL ({e}): {promql}", query.place)],
    };
    let mut selections = Selections::default();
    walk(&expr, &mut selections);
    let mut problems = Vec::new();
    let mut label_names: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    // A query over a family not exported here: its labels cannot be checked.
    let mut unseen = false;
    for (metric, matchers) in &selections.selectors {
        let series = metrics.series(metric);
        if series.is_empty() && NOT_EXPORTED_HERE.contains(&metric.as_str()) {
            unseen = true;
            continue;
        }
        if series.is_empty() {
            problems.push(format!("{}: {metric} is not exported", query.place));
            continue;
        }
        label_names.extend(series.iter().flat_map(|s| s.keys().map(String::as_str)));
        for (label, op, value) in matchers {
            if TARGET_LABELS.contains(&label.as_str()) {
                continue;
            }
            let values: BTreeSet<&str> = series
                .iter()
                .filter_map(|s| s.get(label).map(String::as_str))
                .collect();
            if values.is_empty() {
                problems.push(format!("{}: {metric} has no label {label}", query.place));
                continue;
            }
            let wanted = match op {
                MatchOp::Equal => vec![value.as_str()],
                MatchOp::Re(_) => alternatives(value),
                MatchOp::NotEqual | MatchOp::NotRe(_) => Vec::new(),
            };
            for want in wanted {
                if !values.contains(want) {
                    problems.push(format!(
                        "{}: {metric} has no series with {label}={want:?} (it has {values:?})",
                        query.place
                    ));
                }
            }
        }
    }
    for label in &selections.grouping {
        if !unseen && !label_names.contains(label.as_str()) {
            problems.push(format!(
                "{}: grouped by {label}, which its metrics lack",
                query.place
            ));
        }
    }
    problems
}

fn rules(limit: u64) -> String {
    format!(
        "domain: api
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: {limit}}}
  - key: trial
    shadow_mode: true
    rate_limit: {{unit: minute, requests_per_unit: 1}}
  - key: plan
    quota_mode: true
    rate_limit: {{unit: minute, requests_per_unit: 1}}
"
    )
}

async fn post(server: &Slidegate, path: &str, body: &str) -> http::StatusCode {
    request_to(
        server.http,
        Method::POST,
        path,
        &[("content-type", "application/json")],
        body.as_bytes().to_vec(),
    )
    .await
    .status
}

async fn check(server: &Slidegate, key: &str) -> http::StatusCode {
    let body = format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"{key}","value":"v"}}]}}]}}"#
    );
    post(server, "/v1/check", &body).await
}

/// Reads `/metrics` until `done` says every series the test needs is there.
async fn metrics_until(server: &Slidegate, what: &str, done: impl Fn(&Exposition) -> bool) {
    let start = Instant::now();
    loop {
        let metrics = support::metrics(server.http).await;
        if done(&metrics) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never saw {what} in /metrics: {:?}",
            metrics.names()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts every series the dashboard reads into the server's `/metrics`.
async fn exercise(server: &Slidegate, redis: &mut Redis, rules_file: &std::path::Path) {
    let acquire = r#"{"key":"dash","limit":1,"window_ms":60000}"#;
    assert_eq!(post(server, "/v1/acquire", acquire).await, 200);
    assert_eq!(post(server, "/v1/acquire", acquire).await, 429);
    // Denied by Redis with a retry_after: the deny cache answers the next
    // ones (once the server follows the store's change feed).
    let start = Instant::now();
    while support::metrics(server.http)
        .await
        .series("slidegate_deny_cache_hits_total")
        .is_empty()
    {
        assert_eq!(post(server, "/v1/acquire", acquire).await, 429);
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the deny cache never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A request that waits for its turn.
    let wait = r#"{"key":"dash-wait","limit":1,"window_ms":200,"max_wait_ms":2000}"#;
    assert_eq!(post(server, "/v1/acquire", wait).await, 200);
    assert_eq!(post(server, "/v1/acquire", wait).await, 200);
    for key in ["user", "trial", "plan"] {
        check(server, key).await;
        check(server, key).await;
    }
    // Two enforced descriptors in one check: the store decides them as one
    // batch (a single enforced descriptor is a plain acquire).
    let both = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"w"}]},{"entries":[{"key":"user","value":"x"}]}]}"#;
    assert_eq!(post(server, "/v1/check", both).await, 200);
    // A reload: the file's content changes.
    std::fs::write(rules_file, rules(2)).expect("the rules are rewritten");
    metrics_until(server, "a reload", |m| {
        !m.series("slidegate_config_reloads_total").is_empty()
    })
    .await;
    // A connection that never sends its request head.
    let silent = TcpStream::connect(server.http).await.expect("connects");
    metrics_until(server, "a header timeout", |m| {
        !m.series("slidegate_connection_timeouts_total").is_empty()
    })
    .await;
    drop(silent);
    // One gRPC connection more than --max-connections-per-ip: refused.
    let mut held = Vec::new();
    for _ in 0..=MAX_CONNECTIONS_PER_IP {
        held.push(TcpStream::connect(server.grpc).await.expect("connects"));
    }
    metrics_until(server, "a refused connection", |m| {
        !m.series("slidegate_connections_refused_total").is_empty()
    })
    .await;
    drop(held);
    // The store goes away: errors, an open circuit, degraded answers from
    // both /v1/acquire and /v1/check.
    redis.kill();
    let start = Instant::now();
    loop {
        post(
            server,
            "/v1/acquire",
            r#"{"key":"outage","limit":9,"window_ms":1000}"#,
        )
        .await;
        check(server, "user").await;
        let metrics = support::metrics(server.http).await;
        let degraded = metrics
            .series("slidegate_decisions_total")
            .iter()
            .filter(|s| s["outcome"] == "degraded")
            .count();
        if degraded >= 2 && !metrics.series("slidegate_store_errors_total").is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no outage in the metrics"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_label_and_value_the_dashboard_queries_is_exported() {
    let dashboard: Value = serde_json::from_str(&support::read(DASHBOARD)).expect("JSON");
    let queries = queries(&dashboard);
    assert!(queries.len() >= 15, "only {} queries", queries.len());

    let mut redis = Redis::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rules_file = dir.path().join("api.yaml");
    std::fs::write(&rules_file, rules(1)).expect("the rules are written");
    let url = redis.url();
    let server = Slidegate::start(&[
        "--store",
        &url,
        "--config",
        dir.path().to_str().expect("a UTF-8 path"),
        "--store-timeout-ms",
        "100",
        "--header-timeout",
        "300ms",
        "--max-connections-per-ip",
        &MAX_CONNECTIONS_PER_IP.to_string(),
    ]);
    exercise(&server, &mut redis, &rules_file).await;
    let text = crate::common::get(server.http, "/metrics").await;
    let text = String::from_utf8_lossy(&text.body).into_owned();
    let metrics = Exposition::parse(&text);

    // Every family exported says what it is.
    let helped: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let unhelped: BTreeSet<&str> = metrics
        .names()
        .into_iter()
        .map(family_of)
        .filter(|n| !helped.contains(n))
        .collect();
    assert!(unhelped.is_empty(), "no # HELP line: {unhelped:?}");

    let problems: Vec<String> = queries.iter().flat_map(|q| problems(q, &metrics)).collect();
    assert!(problems.is_empty(), "{problems:#?}");

    // And the other way round: every metric family has a panel.
    let queried: BTreeSet<String> = queries
        .iter()
        .flat_map(|q| {
            let mut s = Selections::default();
            walk(
                &parser::parse(&substitute(&q.promql)).expect("PromQL"),
                &mut s,
            );
            s.selectors.into_iter().map(|(name, _)| name)
        })
        .collect();
    let unqueried: Vec<&str> = metrics
        .names()
        .into_iter()
        .filter(|n| n.starts_with("slidegate_"))
        .filter(|n| !n.ends_with("_sum") && !n.ends_with("_count"))
        .filter(|n| !queried.contains(*n))
        .collect();
    assert!(unqueried.is_empty(), "on no panel: {unqueried:?}");
    // Every family the server can export, seen in this run or not.
    let missing: Vec<&str> = FAMILIES
        .iter()
        .filter(|f| !queried.contains(f.name) && !queried.contains(&format!("{}_bucket", f.name)))
        .map(|f| f.name)
        .collect();
    assert!(missing.is_empty(), "families on no panel: {missing:?}");
    // And every family exported is one of them.
    let unlisted: Vec<&str> = metrics
        .names()
        .into_iter()
        .map(family_of)
        .filter(|n| !FAMILIES.iter().any(|f| f.name == *n))
        .collect();
    assert!(
        unlisted.is_empty(),
        "not in telemetry::families: {unlisted:?}"
    );
}

/// The family of a series name: a histogram's `_bucket`, `_sum` and
/// `_count` series are its own.
fn family_of(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| {
            name.strip_suffix(suffix)
                .filter(|family| FAMILIES.iter().any(|f| f.name == *family))
        })
        .unwrap_or(name)
}

#[test]
fn a_query_on_a_metric_or_label_the_server_lacks_is_reported() {
    let metrics = Exposition::parse("slidegate_x{a=\"1\"} 1\n");
    let query = |promql: &str| Query {
        place: "test".into(),
        promql: promql.into(),
    };
    assert!(
        problems(
            &query("sum by (a) (rate(slidegate_x[$__rate_interval]))"),
            &metrics
        )
        .is_empty()
    );
    for bad in [
        "rate(slidegate_y[5m])",
        "sum by (b) (slidegate_x)",
        "slidegate_x{b=\"1\"}",
        "slidegate_x{a=\"2\"}",
        "slidegate_x{a=~\"1|3\"}",
        "sum by (a (slidegate_x)",
    ] {
        assert!(!problems(&query(bad), &metrics).is_empty(), "{bad} passed");
    }
}
