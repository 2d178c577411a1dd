use std::path::PathBuf;

use slidegate::{MemoryStore, Rate};

use super::plan::SCAN_UP_TO;
use super::*;
use crate::rules::{LoadOptions, Unit};

fn example() -> RateLimitConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy-ratelimit/valid/example.yaml");
    RateLimitConfig::load(&[path], LoadOptions::default()).unwrap()
}

fn config(yaml: &str) -> RateLimitConfig {
    RateLimitConfig::from_sources(&[("t.yaml".into(), yaml.into())], LoadOptions::default())
        .unwrap()
}

fn descriptor(entries: &[(&str, &str)]) -> DescriptorRequest {
    DescriptorRequest {
        entries: entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..DescriptorRequest::default()
    }
}

fn request(domain: &str, descriptors: Vec<DescriptorRequest>) -> CheckRequest {
    CheckRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

fn codes(r: &CheckResponse) -> Vec<Code> {
    r.statuses.iter().map(|s| s.code()).collect()
}

#[tokio::test]
async fn counts_per_value_and_reports_the_limit() {
    let (c, s) = (example(), MemoryStore::new());
    let req = request("rl", vec![descriptor(&[("foo", "x")])]);
    for left in [1, 0] {
        let r = check(&c, &s, &req).await.unwrap();
        assert_eq!(r.overall, Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining(), left);
        let limit = r.statuses[0].current_limit().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (2, Unit::Minute));
    }
    let r = check(&c, &s, &req).await.unwrap();
    assert_eq!(r.overall, Code::OverLimit);
    assert!(r.statuses[0].duration_until_reset() > Duration::from_secs(59));
    // Another value of the key-only default has its own counter.
    let other = check(&c, &s, &request("rl", vec![descriptor(&[("foo", "y")])]))
        .await
        .unwrap();
    assert_eq!(other.overall, Code::Ok);
}

#[tokio::test]
async fn descriptors_pass_or_fail_together() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    let s = MemoryStore::new();
    let both = request(
        "d",
        vec![descriptor(&[("a", "1")]), descriptor(&[("b", "1")])],
    );
    assert_eq!(check(&c, &s, &both).await.unwrap().overall, Code::Ok);
    let r = check(&c, &s, &both).await.unwrap();
    assert_eq!(codes(&r), [Code::Ok, Code::OverLimit]);
    // `a` was not charged by the denied request.
    assert_eq!(r.statuses[0].limit_remaining(), 4);
    let a = check(&c, &s, &request("d", vec![descriptor(&[("a", "1")])]))
        .await
        .unwrap();
    assert_eq!(a.statuses[0].limit_remaining(), 3);
}

#[tokio::test]
async fn hits_addend_at_request_and_descriptor_level() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
    );
    let s = MemoryStore::new();
    let mut req = request("d", vec![descriptor(&[("a", "1")])]);
    req.hits_addend = 4;
    assert_eq!(
        check(&c, &s, &req).await.unwrap().statuses[0].limit_remaining(),
        6
    );
    // Per descriptor: 0 checks without consuming, and overrides the request's.
    req.descriptors[0].hits_addend = Some(0);
    assert_eq!(
        check(&c, &s, &req).await.unwrap().statuses[0].limit_remaining(),
        6
    );
    req.descriptors[0].hits_addend = Some(6);
    assert_eq!(
        check(&c, &s, &req).await.unwrap().statuses[0].limit_remaining(),
        0
    );
    // More than the limit can never pass: over the limit, not an error.
    req.descriptors[0].hits_addend = Some(11);
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::OverLimit);
}

#[tokio::test]
async fn shadow_mode_counts_but_never_denies() {
    let (c, s) = (example(), MemoryStore::new());
    let req = request("rl", vec![descriptor(&[("foo", "x"), ("baz", "shady")])]);
    for _ in 0..3 {
        assert_eq!(
            check(&c, &s, &req).await.unwrap().statuses[0].verdict,
            Verdict::Allowed
        );
    }
    let r = check(&c, &s, &req).await.unwrap();
    assert_eq!(r.overall, Code::Ok);
    assert_eq!(r.statuses[0].verdict, Verdict::ShadowDenied);
}

#[tokio::test]
async fn quota_mode_reports_violations_in_the_metadata() {
    let (c, s) = (example(), MemoryStore::new());
    let req = request(
        "rl",
        vec![
            descriptor(&[("service", "service_1")]),
            descriptor(&[("foo", "q")]),
        ],
    );
    let first = check(&c, &s, &req).await.unwrap();
    assert!(first.quota_mode && first.quota_violations.is_empty());
    let second = check(&c, &s, &req).await.unwrap();
    assert_eq!(second.overall, Code::Ok);
    assert_eq!(second.quota_violations, [0]);
}

#[tokio::test]
async fn replaces_drops_the_named_limit() {
    let (c, s) = (example(), MemoryStore::new());
    // bar=bkthomps (1/min, named bkthomps) is replaced by the category=account limit.
    let req = request(
        "rl",
        vec![
            descriptor(&[("foo", "f"), ("bar", "bkthomps")]),
            descriptor(&[("category", "account")]),
        ],
    );
    for _ in 0..4 {
        let r = check(&c, &s, &req).await.unwrap();
        assert_eq!(r.overall, Code::Ok);
        assert_eq!(r.statuses[0].current_limit(), None, "replaced");
    }
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::OverLimit);
}

#[tokio::test]
async fn blocked_unlimited_and_unknown() {
    let (c, s) = (example(), MemoryStore::new());
    let banned = check(
        &c,
        &s,
        &request("rl", vec![descriptor(&[("foo", "x"), ("bar", "banned")])]),
    )
    .await
    .unwrap();
    assert_eq!(banned.overall, Code::OverLimit);
    let free = check(&c, &s, &request("rl", vec![descriptor(&[("qux", "x")])]))
        .await
        .unwrap();
    assert_eq!(
        (free.overall, free.statuses[0].verdict),
        (Code::Ok, Verdict::Unlimited)
    );
    let unknown = check(&c, &s, &request("nope", vec![descriptor(&[("foo", "x")])]))
        .await
        .unwrap();
    assert_eq!(unknown.overall, Code::Ok);
    // A blocked descriptor vetoes the request: the other one is not charged.
    let both = request(
        "rl",
        vec![
            descriptor(&[("foo", "z")]),
            descriptor(&[("foo", "x"), ("bar", "banned")]),
        ],
    );
    check(&c, &s, &both).await.unwrap();
    let alone = check(&c, &s, &request("rl", vec![descriptor(&[("foo", "z")])]))
        .await
        .unwrap();
    assert_eq!(alone.statuses[0].limit_remaining(), 1);
}

#[tokio::test]
async fn limit_override_from_envoy_replaces_the_config() {
    let (c, s) = (example(), MemoryStore::new());
    let mut d = descriptor(&[("anything", "x")]);
    d.limit_override = Some((1, Unit::Hour));
    let req = request("rl", vec![d]);
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::Ok);
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::OverLimit);
}

#[tokio::test]
async fn an_override_of_zero_requests_lets_nothing_pass() {
    let (c, s) = (example(), MemoryStore::new());
    let mut zero = descriptor(&[("anything", "x")]);
    zero.limit_override = Some((0, Unit::Hour));
    let r = check(&c, &s, &request("rl", vec![zero])).await.unwrap();
    assert_eq!(r.overall, Code::OverLimit);
    assert_eq!(r.statuses[0].metric, MetricName::Override);
}

#[tokio::test]
async fn empty_requests_are_client_errors() {
    let (c, s) = (example(), MemoryStore::new());
    assert_eq!(
        check(&c, &s, &request("", vec![descriptor(&[("a", "b")])])).await,
        Err(CheckError::EmptyDomain)
    );
    assert_eq!(
        check(&c, &s, &request("rl", vec![])).await,
        Err(CheckError::NoDescriptors)
    );
    assert_eq!(
        check(&c, &s, &request("rl", vec![descriptor(&[])])).await,
        Err(CheckError::EmptyDescriptor(0))
    );
}

/// The motivating config: a per-IP limit and a per-path limit in one request.
fn ip_and_path() -> RateLimitConfig {
    config(
        "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
    )
}

#[tokio::test]
async fn a_long_value_is_counted_under_its_digest_and_every_limit_still_applies() {
    let (c, s) = (ip_and_path(), MemoryStore::new());
    let path = "/".repeat(1_100);
    let req = request(
        "api",
        vec![
            descriptor(&[("remote_address", "10.9.9.9")]),
            descriptor(&[("path", &path)]),
        ],
    );
    for left in (0..5).rev() {
        let r = check(&c, &s, &req).await.unwrap();
        assert_eq!(r.overall, Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining(), left);
    }
    let sixth = check(&c, &s, &req).await.unwrap();
    assert_eq!(codes(&sixth), [Code::OverLimit, Code::Ok]);
    // Another long value has a counter of its own.
    let other = "/".repeat(1_101);
    let r = check(
        &c,
        &s,
        &request("api", vec![descriptor(&[("path", &other)])]),
    )
    .await
    .unwrap();
    assert_eq!(r.statuses[0].limit_remaining(), 99);
}

#[tokio::test]
async fn a_long_value_in_an_override_is_counted_too() {
    let (c, s) = (ip_and_path(), MemoryStore::new());
    let mut d = descriptor(&[("path", &"p".repeat(100_000))]);
    d.limit_override = Some((1, Unit::Minute));
    let req = request("api", vec![d]);
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::Ok);
    assert_eq!(check(&c, &s, &req).await.unwrap().overall, Code::OverLimit);
}

#[tokio::test]
async fn unlimited_reports_the_largest_uint32_remaining_and_no_limit() {
    let (c, s) = (example(), MemoryStore::new());
    let r = check(&c, &s, &request("rl", vec![descriptor(&[("qux", "x")])]))
        .await
        .unwrap();
    assert_eq!(r.statuses[0].limit_remaining(), 4_294_967_295);
    assert_eq!(r.statuses[0].current_limit(), None);
    // A descriptor that matches nothing reports 0, as envoyproxy/ratelimit does.
    let r = check(
        &c,
        &s,
        &request("rl", vec![descriptor(&[("nothing", "x")])]),
    )
    .await
    .unwrap();
    assert_eq!(r.statuses[0].limit_remaining(), 0);
}

#[tokio::test]
async fn descriptors_on_one_counter_add_up_against_its_limit() {
    let (c, s) = (example(), MemoryStore::new());
    let foo = || descriptor(&[("foo", "same")]);
    let r = check(&c, &s, &request("rl", vec![foo(), foo(), foo()]))
        .await
        .unwrap();
    // foo is 2/min: the third hit can never pass, so nothing is counted.
    assert_eq!(codes(&r), [Code::Ok, Code::Ok, Code::OverLimit]);
    let alone = check(&c, &s, &request("rl", vec![foo()])).await.unwrap();
    assert_eq!(alone.statuses[0].limit_remaining(), 1);
}

#[tokio::test]
async fn metric_names_come_from_the_config_or_a_fixed_set() {
    let (c, s) = (example(), MemoryStore::new());
    let r = check(
        &c,
        &s,
        &request(
            "rl",
            vec![
                descriptor(&[("foo", "x")]),
                descriptor(&[("unspec", "v")]),
                descriptor(&[("nothing", "x")]),
            ],
        ),
    )
    .await
    .unwrap();
    assert!(r.known_domain);
    assert_eq!(r.statuses[0].metric, MetricName::Configured);
    assert_eq!(r.statuses[0].limit.as_ref().unwrap().full_key, "rl.foo");
    assert!(matches!(&r.statuses[1].metric, MetricName::Detailed(key) if key == "rl.unspec_v"));
    assert_eq!(r.statuses[2].metric, MetricName::NoLimit);
    let unknown = check(&c, &s, &request("nope", vec![descriptor(&[("foo", "x")])]))
        .await
        .unwrap();
    assert!(!unknown.known_domain);
}

#[tokio::test]
async fn an_override_in_a_domain_not_configured_applies_no_limit() {
    let (c, s) = (example(), MemoryStore::new());
    let mut d = descriptor(&[("anything", "x")]);
    d.limit_override = Some((1, Unit::Hour));
    let req = request("invented", vec![d]);
    for _ in 0..3 {
        let r = check(&c, &s, &req).await.unwrap();
        assert_eq!(r.overall, Code::Ok);
        assert_eq!(r.statuses[0].current_limit(), None);
    }
    assert!(s.is_empty(), "no counter was created");
}

/// Reports on one counter, together far above the ceiling, are recorded up
/// to it in one decision, whether the request's descriptors are compared by
/// scanning (few) or by hashing (many): no error, and the counter used up.
#[tokio::test]
async fn reports_of_one_request_are_cut_to_the_ceiling_together() {
    let c = config(
        "domain: d\ndescriptors:\n  - key: tokens\n    rate_limit: {unit: minute, requests_per_unit: 100, report: true}\n",
    );
    for count in [3, SCAN_UP_TO + 4] {
        let s = MemoryStore::new();
        let mut report = descriptor(&[("tokens", "ana")]);
        report.hits_addend = Some(Rate::MAX_LIMIT / 2 + 1);
        let r = check(&c, &s, &request("d", vec![report; count]))
            .await
            .expect("reports past the ceiling are recorded, not refused");
        assert_eq!(r.overall, Code::OverLimit, "{count} reports");
        let after = check(
            &c,
            &s,
            &request("d", vec![descriptor(&[("tokens", "ana")])]),
        )
        .await
        .unwrap();
        assert_eq!(
            (after.overall, after.statuses[0].limit_remaining()),
            (Code::OverLimit, 0),
            "{count} reports"
        );
    }
}

#[tokio::test]
async fn a_configured_domain_is_known_when_no_limit_matched_too() {
    // The check learns the domain is configured from a matched limit, and
    // asks the config only when none matched: both must say known.
    let (c, s) = (example(), MemoryStore::new());
    let unmatched = check(
        &c,
        &s,
        &request("rl", vec![descriptor(&[("nothing", "x")])]),
    )
    .await
    .unwrap();
    assert_eq!(unmatched.statuses[0].metric, MetricName::NoLimit);
    assert!(unmatched.known_domain);
    let matched = check(&c, &s, &request("rl", vec![descriptor(&[("foo", "x")])]))
        .await
        .unwrap();
    assert_eq!(matched.statuses[0].metric, MetricName::Configured);
    assert!(matched.known_domain);
}
