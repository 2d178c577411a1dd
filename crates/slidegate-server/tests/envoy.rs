//! Envoy's rate limit service end to end: the same cases over gRPC
//! (`ShouldRateLimit`, with a tonic client) and over `POST /v1/check`, on a
//! real server with envoyproxy/ratelimit's own example rules; rule reloads
//! through the server; metrics; the admin route; gRPC health. Each runs on
//! the memory store and on a real Redis (`NAME::memory`, `NAME::redis`);
//! the multi-descriptor case also runs on a 3-master Redis Cluster.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::redis::Cluster;
use common::{StoreKind, TestServer};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use slidegate::store::resilient::FailurePolicy;
use slidegate_server::api::envoy::headers::ResponseHeaders;
use slidegate_server::api::grpc::DEGRADED_METADATA;
use slidegate_server::commands::parts::Parts;
use slidegate_server::rules::{LiveConfig, LoadOptions};
use slidegate_server::store::{Backend, StoreUrl};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

fn example_rules() -> Arc<LiveConfig> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy-ratelimit/valid/example.yaml");
    Arc::new(LiveConfig::load(vec![path], LoadOptions::default()).unwrap())
}

on_every_store!(
    grpc_and_json_give_the_same_answers_on_the_upstream_example,
    wildcards_anywhere_in_a_value_over_grpc,
    bad_requests_are_invalid_argument_and_400,
    a_rule_change_on_disk_reaches_grpc_without_a_restart,
    metrics_move_with_traffic,
    the_admin_route_needs_the_token,
    grpc_health_reports_serving,
    draft10_header_fields_reach_envoy_and_json_clients,
);

/// Both protocols on a fresh store of `kind`, with `rules`.
async fn server_with(kind: StoreKind, rules: &LiveConfig) -> TestServer {
    let store = kind.open().await;
    serve(store.backend, rules).await.keeping(store.redis)
}

async fn serve(backend: Backend, rules: &LiveConfig) -> TestServer {
    let parts = Parts::new(backend)
        .with_config(rules.current())
        .with_admin_token(Some("s3cret".into()))
        .with_metrics(slidegate_server::telemetry::metrics::install());
    TestServer::full(parts).await
}

/// One descriptor: entries, and an optional per-descriptor hits_addend.
type Descriptor<'a> = (Vec<(&'a str, &'a str)>, Option<u64>);

/// An Envoy check, asked over either protocol; the answer reduced to the
/// overall code and each descriptor's code and remaining units.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    Grpc,
    Json,
}

#[derive(Debug, PartialEq)]
struct Answer {
    over_limit: bool,
    statuses: Vec<(bool, u64)>,
}

async fn ask(
    server: &TestServer,
    protocol: Protocol,
    domain: &str,
    descriptors: &[Descriptor<'_>],
    hits: u32,
) -> Answer {
    match protocol {
        Protocol::Grpc => {
            let addr = server.grpc_addr.expect("a gRPC listener");
            let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            let request = RateLimitRequest {
                domain: domain.into(),
                descriptors: descriptors
                    .iter()
                    .map(|(entries, hits)| RateLimitDescriptor {
                        entries: entries
                            .iter()
                            .map(|(k, v)| Entry {
                                key: (*k).into(),
                                value: (*v).into(),
                            })
                            .collect(),
                        hits_addend: hits.map(|value| UInt64Value { value }),
                        ..RateLimitDescriptor::default()
                    })
                    .collect(),
                hits_addend: hits,
            };
            let response = client.should_rate_limit(request).await.unwrap();
            assert!(
                response.metadata().get(DEGRADED_METADATA).is_none(),
                "decided by the failure policy, not the store"
            );
            let response = response.into_inner();
            Answer {
                over_limit: response.overall_code == 2,
                statuses: response
                    .statuses
                    .iter()
                    .map(|s| (s.code == 2, u64::from(s.limit_remaining)))
                    .collect(),
            }
        }
        Protocol::Json => {
            let body = json!({
                "domain": domain,
                "hitsAddend": hits,
                "descriptors": descriptors.iter().map(|(entries, hits)| {
                    let mut d = json!({"entries": entries.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()});
                    if let Some(h) = hits { d["hitsAddend"] = json!(h.to_string()); }
                    d
                }).collect::<Vec<_>>(),
            });
            let reply = server.post_json("/v1/check", &body.to_string()).await;
            let json = reply.json();
            assert!(json.get("degraded").is_none(), "{json}");
            let over_limit = json["overallCode"] == "OVER_LIMIT";
            assert_eq!(
                reply.status,
                if over_limit {
                    StatusCode::TOO_MANY_REQUESTS
                } else {
                    StatusCode::OK
                },
                "{json}"
            );
            Answer {
                over_limit,
                statuses: json["statuses"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        (
                            s["code"] == "OVER_LIMIT",
                            s["limitRemaining"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect(),
            }
        }
    }
}

/// One check: descriptors, request hits_addend, whether the request is
/// over the limit, and each descriptor's (over, remaining).
type Step = (Vec<Descriptor<'static>>, u32, bool, Vec<(bool, u64)>);

/// A sequence of checks and the answers expected, one per step.
struct Case {
    name: &'static str,
    steps: Vec<Step>,
}

fn d(entries: &[(&'static str, &'static str)]) -> Descriptor<'static> {
    (entries.to_vec(), None)
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a key-only default counts per value",
            steps: vec![
                (vec![d(&[("foo", "a")])], 1, false, vec![(false, 1)]),
                (vec![d(&[("foo", "a")])], 1, false, vec![(false, 0)]),
                (vec![d(&[("foo", "a")])], 1, true, vec![(true, 0)]),
                (vec![d(&[("foo", "b")])], 1, false, vec![(false, 1)]),
            ],
        },
        Case {
            name: "several descriptors pass or fail together",
            steps: vec![
                (
                    vec![d(&[("foo", "m")]), d(&[("unspec", "x")])],
                    1,
                    false,
                    vec![(false, 1), (false, 1)],
                ),
                (vec![d(&[("unspec", "x")])], 1, false, vec![(false, 0)]),
                // unspec is full: foo=m is not charged.
                (
                    vec![d(&[("foo", "m")]), d(&[("unspec", "x")])],
                    1,
                    true,
                    vec![(false, 1), (true, 0)],
                ),
                (vec![d(&[("foo", "m")])], 1, false, vec![(false, 0)]),
            ],
        },
        Case {
            name: "hits_addend at request and descriptor level",
            steps: vec![
                (
                    vec![d(&[("foo", "h"), ("bar", "x")])],
                    2,
                    false,
                    vec![(false, 1)],
                ),
                (
                    vec![(vec![("foo", "h"), ("bar", "x")], Some(0))],
                    1,
                    false,
                    vec![(false, 1)],
                ),
                (
                    vec![(vec![("foo", "h"), ("bar", "x")], Some(2))],
                    1,
                    true,
                    vec![(true, 1)],
                ),
            ],
        },
        Case {
            name: "nested descriptors and shadow mode",
            steps: (0..4)
                .map(|i| {
                    (
                        vec![d(&[("foo", "n"), ("baz", "shady")])],
                        1,
                        false,
                        vec![(false, 2u64.saturating_sub(i))],
                    )
                })
                .collect(),
        },
        Case {
            name: "replaces drops the named limit",
            steps: (0..5)
                .map(|i| {
                    let over = i == 4;
                    (
                        vec![
                            d(&[("foo", "r"), ("bar", "bkthomps")]),
                            d(&[("category", "account")]),
                        ],
                        1,
                        over,
                        vec![(false, 0), (over, 3u64.saturating_sub(i))],
                    )
                })
                .collect(),
        },
        Case {
            name: "unlimited and blocked",
            steps: vec![
                // As envoyproxy/ratelimit answers: the largest uint32.
                (
                    vec![d(&[("qux", "anything")])],
                    1,
                    false,
                    vec![(false, 4_294_967_295)],
                ),
                (
                    vec![d(&[("foo", "z"), ("bar", "banned")])],
                    1,
                    true,
                    vec![(true, 0)],
                ),
            ],
        },
        Case {
            name: "an unknown domain limits nothing",
            steps: vec![(vec![d(&[("foo", "a")])], 1, false, vec![(false, 0)])],
        },
    ]
}

async fn grpc_and_json_give_the_same_answers_on_the_upstream_example(kind: StoreKind) {
    let store = kind.open().await;
    for protocol in [Protocol::Grpc, Protocol::Json] {
        for case in cases() {
            // A fresh server and store per case: cases do not share counters.
            let rules = example_rules();
            let server = serve(store.fresh().await, &rules).await;
            let domain = if case.name.starts_with("an unknown") {
                "nope"
            } else {
                "rl"
            };
            for (i, (descriptors, hits, over, statuses)) in case.steps.iter().enumerate() {
                let answer = ask(&server, protocol, domain, descriptors, *hits).await;
                let expected = Answer {
                    over_limit: *over,
                    statuses: statuses.clone(),
                };
                assert_eq!(answer, expected, "{}: step {i}", case.name);
            }
        }
    }
}

async fn wildcards_anywhere_in_a_value_over_grpc(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy-ratelimit/valid/wildcard.yaml");
    std::fs::copy(source, dir.path().join("wildcard.yaml")).unwrap();
    let rules =
        Arc::new(LiveConfig::load(vec![dir.path().to_owned()], LoadOptions::default()).unwrap());
    let server = server_with(kind, &rules).await;
    let limited = ask(
        &server,
        Protocol::Grpc,
        "test-domain",
        &[d(&[("multiWild", "foo-1-bar-2-baz")])],
        1,
    )
    .await;
    assert_eq!(limited.statuses, [(false, 9)]);
    let unmatched = ask(
        &server,
        Protocol::Grpc,
        "test-domain",
        &[d(&[("multiWild", "foo-1-baz")])],
        1,
    )
    .await;
    assert_eq!(unmatched.statuses, [(false, 0)]);
}

async fn bad_requests_are_invalid_argument_and_400(kind: StoreKind) {
    let rules = example_rules();
    let server = server_with(kind, &rules).await;
    let addr = server.grpc_addr.unwrap();
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let empty_domain = RateLimitRequest {
        domain: String::new(),
        ..RateLimitRequest::default()
    };
    let status = client.should_rate_limit(empty_domain).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let no_descriptors = RateLimitRequest {
        domain: "rl".into(),
        ..RateLimitRequest::default()
    };
    assert_eq!(
        client
            .should_rate_limit(no_descriptors)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    for body in [
        r#"{"domain":""}"#,
        r#"{"domain":"rl","descriptors":[]}"#,
        r#"{"domain":"rl","descriptors":[{"entries":[]}]}"#,
        r#"{"domain":"rl","unknown":1}"#,
        "{",
    ] {
        let reply = server.post_json("/v1/check", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(reply.json()["error"]["code"].is_string(), "{body}");
    }
    // The envoyproxy/ratelimit alias.
    let reply = server
        .post_json(
            "/json",
            r#"{"domain":"rl","descriptors":[{"entries":[{"key":"qux","value":"1"}]}]}"#,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

async fn a_rule_change_on_disk_reaches_grpc_without_a_restart(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let rules_of = |limit: u32| {
        format!(
            "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
        )
    };
    std::fs::write(dir.path().join("rules.yaml"), rules_of(1)).unwrap();
    let live =
        Arc::new(LiveConfig::load(vec![dir.path().to_owned()], LoadOptions::default()).unwrap());
    let _watch = live.watch(Duration::from_millis(50)).unwrap();
    let server = server_with(kind, &live).await;
    let first = ask(&server, Protocol::Grpc, "live", &[d(&[("k", "v")])], 1).await;
    assert_eq!(first.statuses, [(false, 0)]);
    std::fs::write(dir.path().join("rules.yaml"), rules_of(100)).unwrap();
    let start = std::time::Instant::now();
    // A fresh counter each time: a counter used under the old rule would
    // carry its use to the new one.
    for poll in 0.. {
        let value: &'static str = format!("w{poll}").leak();
        let answer = ask(&server, Protocol::Grpc, "live", &[d(&[("k", value)])], 1).await;
        if answer.statuses == [(false, 99)] {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the new rules never arrived: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn counter(metrics: &str, needle: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && needle.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn metrics_move_with_traffic(kind: StoreKind) {
    let rules = example_rules();
    let server = server_with(kind, &rules).await;
    let scrape =
        || async { String::from_utf8(server.get("/metrics").await.body.to_vec()).unwrap() };
    // The recorder is shared by every test of this process: `unspec` has a
    // detailed metric, so a value of this test's own gets counters of its own.
    let value = format!("metrics-{kind:?}");
    let rule = format!("rule=\"rl.unspec_{value}\"");
    let before = scrape().await;
    let denied = [
        "slidegate_decisions_total",
        "source=\"check\"",
        "domain=\"rl\"",
        &rule,
        "outcome=\"denied\"",
    ];
    let allowed = [
        "slidegate_decisions_total",
        "source=\"check\"",
        "domain=\"rl\"",
        &rule,
        "outcome=\"allowed\"",
    ];
    for _ in 0..3 {
        let descriptor = (vec![("unspec", value.as_str())], None);
        ask(&server, Protocol::Grpc, "rl", &[descriptor], 1).await;
    }
    server
        .post_json("/v1/acquire", r#"{"key":"m","limit":1,"window_ms":60000}"#)
        .await;
    let after = scrape().await;
    assert_eq!(
        counter(&after, &allowed) - counter(&before, &allowed),
        2.0,
        "{after}"
    );
    assert_eq!(counter(&after, &denied) - counter(&before, &denied), 1.0);
    let acquire = [
        "slidegate_decisions_total",
        "source=\"acquire\"",
        "rule=\"adhoc\"",
    ];
    assert!(counter(&after, &acquire) - counter(&before, &acquire) >= 1.0);
    assert!(
        after.contains("slidegate_store_call_duration_seconds")
            || after.contains("slidegate_requests_in_flight")
    );
}

async fn the_admin_route_needs_the_token(kind: StoreKind) {
    let rules = example_rules();
    let server = server_with(kind, &rules).await;
    let body = r#"{"key":"admin:k","limit":1,"window_ms":60000}"#;
    assert_eq!(
        server.post_json("/v1/acquire", body).await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.post_json("/v1/acquire", body).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let none = server
        .request(Method::DELETE, "/v1/keys/admin:k", &[], Vec::new())
        .await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    let wrong = server
        .request(
            Method::DELETE,
            "/v1/keys/admin:k",
            &[("authorization", "Bearer nope")],
            Vec::new(),
        )
        .await;
    assert_eq!(
        (wrong.status, wrong.error_code().as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    let right = server
        .request(
            Method::DELETE,
            "/v1/keys/admin:k",
            &[("authorization", "Bearer s3cret")],
            Vec::new(),
        )
        .await;
    assert_eq!(right.status, StatusCode::OK);
    assert_eq!(
        server.post_json("/v1/acquire", body).await.status,
        StatusCode::OK,
        "the key was reset"
    );
    // Without --admin-token the route is refused.
    let plain = TestServer::memory().await;
    let disabled = plain
        .request(
            Method::DELETE,
            "/v1/keys/k",
            &[("authorization", "Bearer s3cret")],
            Vec::new(),
        )
        .await;
    assert_eq!(disabled.status, StatusCode::FORBIDDEN);
    assert_eq!(disabled.json()["error"]["code"], Value::from("forbidden"));
}

async fn grpc_health_reports_serving(kind: StoreKind) {
    let rules = example_rules();
    let server = server_with(kind, &rules).await;
    let addr = server.grpc_addr.unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let start = std::time::Instant::now();
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        if status == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not SERVING: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// On Redis Cluster a request's descriptors are all or nothing too, when
/// their counters live in different slots: a descriptor is not charged
/// when another one is over its limit (the store undoes the slot it
/// recorded), and hits on one counter pass or fail together.
#[tokio::test]
async fn descriptors_are_all_or_nothing_across_slots_on_a_redis_cluster() {
    let cluster = Cluster::start(3, 0, 5_000);
    let url = StoreUrl::Redis(cluster.url());
    let backend = common::backend(url, FailurePolicy::Deny, 5_000).await;
    assert_eq!(backend.kind(), "redis_cluster");
    let rules = example_rules();
    let server = serve(backend, &rules).await;
    for protocol in [Protocol::Grpc, Protocol::Json] {
        // The counters are `c:rl|KEY=VALUE`, kept by Redis under
        // `slidegate:v2:{c:rl|KEY=VALUE}:RATE`, in the slot of the braced part.
        let (foo, other) = (format!("{protocol:?}"), format!("{protocol:?}-other"));
        let slot = |counter: String| {
            cluster.nodes[0].text(&[
                "CLUSTER",
                "KEYSLOT",
                &format!("slidegate:v2:{{{counter}}}:2/1m"),
            ])
        };
        assert_ne!(
            slot(format!("c:rl|foo={foo}")),
            slot(format!("c:rl|unspec={other}"))
        );
        let foo = || (vec![("foo", foo.as_str())], None);
        let unspec = || (vec![("unspec", other.as_str())], None);
        let steps = [
            (vec![foo(), unspec()], false, vec![(false, 1), (false, 1)]),
            (vec![unspec()], false, vec![(false, 0)]),
            // `unspec` is full: `foo` is not charged, and says so.
            (vec![foo(), unspec()], true, vec![(false, 1), (true, 0)]),
            (vec![foo()], false, vec![(false, 0)]),
        ];
        for (i, (descriptors, over, statuses)) in steps.into_iter().enumerate() {
            let answer = ask(&server, protocol, "rl", &descriptors, 1).await;
            let expected = Answer {
                over_limit: over,
                statuses,
            };
            assert_eq!(answer, expected, "{protocol:?}, slots apart, step {i}");
        }
        // Two hits on one counter (one slot): all or nothing.
        let same = format!("{protocol:?}-same");
        let one = || (vec![("unspec", same.as_str())], None);
        let steps = [
            (vec![one()], false, vec![(false, 1)]),
            (vec![one(), one()], true, vec![(false, 1), (true, 1)]),
            (vec![one()], false, vec![(false, 0)]),
        ];
        for (i, (descriptors, over, statuses)) in steps.into_iter().enumerate() {
            let answer = ask(&server, protocol, "rl", &descriptors, 1).await;
            let expected = Answer {
                over_limit: over,
                statuses,
            };
            assert_eq!(answer, expected, "{protocol:?}, one slot, step {i}");
        }
    }
}

/// The rate limit header fields of `--response-headers draft10`, as one
/// list per field name.
fn header_fields(fields: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut fields: Vec<_> = fields.into_iter().collect();
    fields.sort();
    fields
}

/// `RateLimit-Policy`, `RateLimit` and, over the limit, `Retry-After`: in
/// `response_headers_to_add` over gRPC (Envoy adds them to its client's
/// response) and as headers of `/v1/check` answers; none without the flag.
async fn draft10_header_fields_reach_envoy_and_json_clients(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        "domain: hdr\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: watched\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    let live =
        Arc::new(LiveConfig::load(vec![dir.path().to_owned()], LoadOptions::default()).unwrap());
    let store = kind.open().await;
    let parts = Parts::new(store.backend)
        .with_config(live.current())
        .with_response_headers(ResponseHeaders::Draft10);
    let server = TestServer::full(parts).await.keeping(store.redis);
    let addr = server.grpc_addr.expect("a gRPC listener");
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let request = |user: &str| RateLimitRequest {
        domain: "hdr".into(),
        descriptors: [("user", user), ("watched", user)]
            .iter()
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    };
    let policy = r#""hdr.user";q=3;w=60"#;
    for remaining in (0..3).rev() {
        let answer = client
            .should_rate_limit(request("ana"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, 1, "{answer:?}");
        let fields = header_fields(
            answer
                .response_headers_to_add
                .into_iter()
                .map(|h| (h.key, h.value)),
        );
        // The shadow limit (over its 1/s after the first) never shows; the
        // window is empty 60 s and 1 µs after the newest admission, and `t`
        // rounds up.
        assert_eq!(
            fields,
            [
                (
                    "ratelimit".to_owned(),
                    format!(r#""hdr.user";r={remaining};t=61"#)
                ),
                ("ratelimit-policy".to_owned(), policy.to_owned()),
            ]
        );
    }
    let denied = client
        .should_rate_limit(request("ana"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(denied.overall_code, 2, "{denied:?}");
    let fields = header_fields(
        denied
            .response_headers_to_add
            .into_iter()
            .map(|h| (h.key, h.value)),
    );
    assert_eq!(fields.len(), 3, "{fields:?}");
    assert_eq!(
        fields[0],
        ("ratelimit".to_owned(), r#""hdr.user";r=0;t=60"#.to_owned())
    );
    assert_eq!(
        fields[1],
        ("ratelimit-policy".to_owned(), policy.to_owned())
    );
    assert_eq!(fields[2], ("retry-after".to_owned(), "60".to_owned()));

    // The same fields on /v1/check, for another user.
    let body = r#"{"domain":"hdr","descriptors":[{"entries":[{"key":"user","value":"bo"}]}]}"#;
    let ok = server.post_json("/v1/check", body).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.headers["ratelimit-policy"], policy);
    assert_eq!(ok.headers["ratelimit"], r#""hdr.user";r=2;t=61"#);
    assert!(ok.headers.get("retry-after").is_none());
    for _ in 0..2 {
        server.post_json("/v1/check", body).await;
    }
    let over = server.post_json("/v1/check", body).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over.headers["ratelimit"], r#""hdr.user";r=0;t=60"#);
    assert_eq!(over.headers["retry-after"], "60");

    // Off by default: nothing added.
    let plain = serve(kind.open().await.backend, &live).await;
    let addr = plain.grpc_addr.expect("a gRPC listener");
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let answer = client
        .should_rate_limit(request("cy"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.response_headers_to_add.is_empty(), "{answer:?}");
    let reply = plain.post_json("/v1/check", body).await;
    assert!(reply.headers.get("ratelimit").is_none());
}
