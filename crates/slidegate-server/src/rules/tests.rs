use std::path::PathBuf;
use std::time::Duration;

use slidegate::{Algorithm, Rule};

use super::*;

fn data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/envoy-ratelimit")
        .join(path)
}

fn load(paths: &[&str], merge_domains: bool) -> Result<RateLimitConfig, ConfigError> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| data(p)).collect();
    RateLimitConfig::load(&paths, LoadOptions { merge_domains })
}

fn yaml(text: &str) -> Result<RateLimitConfig, ConfigError> {
    RateLimitConfig::from_sources(&[("test.yaml".into(), text.into())], LoadOptions::default())
}

fn rule_of(
    config: &RateLimitConfig,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<Enforcement> {
    config.lookup(domain, entries).map(|m| m.limit.enforcement)
}

fn per(limit: u64, unit: Unit) -> Enforcement {
    Enforcement::Rule(Rule::new(
        slidegate::Rate::new(limit, unit.duration()).unwrap(),
    ))
}

#[test]
fn every_valid_upstream_file_loads_on_its_own() {
    let mut loaded = 0;
    for entry in std::fs::read_dir(data("valid")).unwrap() {
        let path = entry.unwrap().path();
        let config = RateLimitConfig::load(std::slice::from_ref(&path), LoadOptions::default());
        assert!(
            config.is_ok(),
            "{}: {}",
            path.display(),
            config.unwrap_err()
        );
        loaded += 1;
    }
    assert_eq!(loaded, 9);
}

#[test]
fn a_split_domain_loads_only_with_merging() {
    let both = [
        "valid/merge_domain_key1.yaml",
        "valid/merge_domain_key2.yaml",
    ];
    let err = load(&both, false).unwrap_err();
    assert!(
        err.message
            .contains("duplicate domain 'test-domain' in config file"),
        "{err}"
    );
    let merged = load(&both, true).unwrap();
    assert_eq!(
        rule_of(&merged, "test-domain", &[("key1", "value1")]),
        Some(per(10, Unit::Minute))
    );
    assert_eq!(
        rule_of(&merged, "test-domain", &[("key2", "value2")]),
        Some(per(20, Unit::Minute))
    );
}

#[test]
fn every_invalid_upstream_file_is_refused_with_its_message() {
    let cases = [
        ("empty_domain.yaml", "config file cannot have empty domain"),
        ("empty_key.yaml", "descriptor has empty key"),
        (
            "duplicate_key.yaml",
            "duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        ("bad_limit_unit.yaml", "invalid rate limit unit 'foo'"),
        (
            "replaces_self.yaml",
            "replaces should not contain name of same descriptor",
        ),
        (
            "replaces_empty.yaml",
            "should not have an empty replaces entry",
        ),
        ("bad_yaml.yaml", "error loading config file"),
        ("misspelled_key.yaml", "unknown key 'ratelimit'"),
        ("misspelled_key2.yaml", "unknown key 'requestsperunit'"),
        ("non_string_key.yaml", "key is not of type string: 0.25"),
        (
            "non_map_list.yaml",
            "yaml file contains list of type other than map: a",
        ),
        (
            "unlimited_with_unit.yaml",
            "should not specify rate limit unit when unlimited",
        ),
    ];
    for (file, message) in cases {
        let err = load(&[&format!("invalid/{file}")], false).unwrap_err();
        assert!(err.message.contains(message), "{file}: got {err}");
        assert!(
            err.to_string().contains(file),
            "{file}: the error names the file: {err}"
        );
    }
    let err = load(
        &["valid/basic_config.yaml", "invalid/duplicate_domain.yaml"],
        false,
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("duplicate domain 'test-domain' in config file"),
        "{err}"
    );
}

#[test]
fn errors_carry_line_and_column() {
    let err = yaml("domain: d\ndescriptors:\n  - key: a\n    ratelimit: {}\n").unwrap_err();
    assert_eq!((err.line, err.column), (Some(4), Some(5)), "{err}");
    assert_eq!(
        err.to_string(),
        "test.yaml:4:5: config error, unknown key 'ratelimit'"
    );
    let err = yaml("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").unwrap_err();
    assert_eq!(err.line, Some(4), "{err}");
}

#[test]
fn basic_config_matches_as_envoyproxy_ratelimit_does() {
    let c = load(&["valid/basic_config.yaml"], false).unwrap();
    let d = "test-domain";
    // Key-only default at the second level, and its value override.
    assert_eq!(
        rule_of(&c, d, &[("key1", "value1"), ("subkey1", "x")]),
        Some(per(5, Unit::Second))
    );
    assert_eq!(
        rule_of(&c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some(per(10, Unit::Second))
    );
    // No limit at the first level; depth must match.
    assert_eq!(rule_of(&c, d, &[("key1", "value1")]), None);
    assert_eq!(rule_of(&c, d, &[("key2", "x"), ("extra", "y")]), None);
    assert_eq!(
        rule_of(&c, d, &[("key2", "anything")]),
        Some(per(20, Unit::Minute))
    );
    assert_eq!(
        rule_of(&c, d, &[("key2", "value2")]),
        Some(per(30, Unit::Minute))
    );
    // A value with no rate_limit whitelists it.
    assert_eq!(rule_of(&c, d, &[("key2", "value3")]), None);
    assert_eq!(
        rule_of(&c, d, &[("key6", "x")]),
        Some(Enforcement::Unlimited)
    );
    assert_eq!(
        rule_of(&c, d, &[("key5", "value5"), ("subkey5", "subvalue5")]),
        Some(per(25, Unit::Day))
    );
    assert_eq!(rule_of(&c, "other-domain", &[("key2", "x")]), None);
    let named = c.lookup(d, &[("key4", "v")]).unwrap();
    assert_eq!(named.limit.name.as_deref(), Some("key4_rate_limit"));
    assert_eq!(named.limit.full_key, "test-domain.key4");
}

#[test]
fn wildcards_match_anywhere_in_the_value() {
    let c = load(&["valid/wildcard.yaml"], false).unwrap();
    let d = "test-domain";
    for (key, value, hit) in [
        ("wild", "foo", true),
        ("wild", "foobar", true),
        ("wild", "fo", false),
        ("midWild", "barb", true),
        ("midWild", "bar-anything-b", true),
        ("midWild", "bar-anything-c", false),
        ("multiWild", "foobarbaz", true),
        ("multiWild", "foo-1-bar-2-baz", true),
        ("multiWild", "foo-1-baz-2-bar", false),
        ("noWild", "foo", true),
        ("noWild", "foobar", false),
    ] {
        assert_eq!(c.lookup(d, &[(key, value)]).is_some(), hit, "{key}={value}");
    }
    assert!(
        c.lookup(d, &[("nestedWild", "val1"), ("wild", "goose")])
            .is_some()
    );
}

#[test]
fn share_threshold_makes_matching_values_share_one_counter() {
    let c = load(&["valid/share_threshold.yaml"], false).unwrap();
    let d = "test-domain";
    let a = c.lookup(d, &[("files", "files/a.txt")]).unwrap();
    let b = c.lookup(d, &[("files", "files/b.txt")]).unwrap();
    assert_eq!(a.counter_key, b.counter_key);
    // Without share_threshold each value has its own counter.
    let w = load(&["valid/wildcard.yaml"], false).unwrap();
    let x = w.lookup(d, &[("wild", "foo1")]).unwrap();
    let y = w.lookup(d, &[("wild", "foo2")]).unwrap();
    assert_ne!(x.counter_key, y.counter_key);
    // Mixed nesting: the shared level uses the pattern, the other the value.
    let p1 = c
        .lookup(d, &[("path", "path/1"), ("file", "file/x"), ("type", "t")])
        .unwrap();
    let p2 = c
        .lookup(d, &[("path", "path/2"), ("file", "file/x"), ("type", "t")])
        .unwrap();
    let p3 = c
        .lookup(d, &[("path", "path/2"), ("file", "file/y"), ("type", "t")])
        .unwrap();
    assert_eq!(p1.counter_key, p2.counter_key);
    assert_ne!(p2.counter_key, p3.counter_key);
    // An explicit value wins over a wildcard.
    assert_eq!(
        rule_of(&c, d, &[("file", "test1")]),
        Some(per(50, Unit::Minute))
    );
    assert_eq!(
        rule_of(&c, d, &[("file", "test2")]),
        Some(per(100, Unit::Minute))
    );
}

#[test]
fn counter_keys_escape_separators_and_braces() {
    let c = yaml("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    let a = c.lookup("d", &[("k", "a|k=b")]).unwrap();
    let b = c.lookup("d", &[("k", "a")]).unwrap();
    assert_ne!(a.counter_key, b.counter_key);
    assert!(!a.counter_key.contains(['{', '}']));
    let braces = c.lookup("d", &[("k", "{x}")]).unwrap();
    assert!(slidegate::store::validate_key(&braces.counter_key).is_ok());
}

#[test]
fn window_and_algorithm_extend_the_format() {
    let c = yaml(
        "domain: api\ndescriptors:\n  - key: path\n    value: /login\n    rate_limit: {requests_per_unit: 5, window: 250ms, algorithm: gcra}\n",
    )
    .unwrap();
    let m = c.lookup("api", &[("path", "/login")]).unwrap();
    let rule = Rule::new(slidegate::Rate::new(5, Duration::from_millis(250)).unwrap())
        .with_algorithm(Algorithm::Gcra);
    assert_eq!(m.limit.enforcement, Enforcement::Rule(rule));
    assert_eq!(m.limit.unit, Unit::Window(Duration::from_millis(250)));
    for (bad, message) in [
        (
            "{requests_per_unit: 5, window: 1s, unit: second}",
            "either 'unit' or 'window'",
        ),
        (
            "{requests_per_unit: 5, window: soon}",
            "invalid window 'soon'",
        ),
        (
            "{requests_per_unit: 5, unit: second, algorithm: leaky}",
            "unknown algorithm",
        ),
        ("{requests_per_unit: -5, unit: second}", "whole number"),
        (
            "{unlimited: true, window: 1s}",
            "should not specify rate limit unit when unlimited",
        ),
    ] {
        let err = yaml(&format!(
            "domain: api\ndescriptors:\n  - key: path\n    rate_limit: {bad}\n"
        ))
        .unwrap_err();
        assert!(err.message.contains(message), "{bad}: {err}");
    }
}

#[test]
fn report_and_block_for_extend_the_format() {
    let c = yaml(
        "domain: api\ndescriptors:\n  - key: path\n    value: /login\n    rate_limit: {requests_per_unit: 5, window: 15m, block_for: 1h}\n  - key: tokens\n    rate_limit: {requests_per_unit: 100, unit: minute, report: true}\n",
    )
    .unwrap();
    let login = c.lookup("api", &[("path", "/login")]).unwrap();
    let rule = Rule::parse("5/15m")
        .and_then(|r| r.block_for(Duration::from_secs(3600)))
        .unwrap();
    assert_eq!(login.limit.enforcement, Enforcement::Rule(rule));
    let tokens = c.lookup("api", &[("tokens", "u1")]).unwrap();
    assert_eq!(
        tokens.limit.enforcement,
        Enforcement::Rule(Rule::parse("100/1m").unwrap().reporting())
    );
    for (bad, message) in [
        (
            "{requests_per_unit: 5, unit: second, block_for: soon}",
            "invalid block_for 'soon'",
        ),
        (
            "{requests_per_unit: 5, unit: second, block_for: 11000d}",
            "invalid block_for",
        ),
        (
            "{requests_per_unit: 5, unit: second, report: maybe}",
            "report",
        ),
        ("{unlimited: true, report: true}", "need a rate limit"),
        (
            "{requests_per_unit: 0, unit: second, block_for: 1m}",
            "need a rate limit",
        ),
    ] {
        let err = yaml(&format!(
            "domain: api\ndescriptors:\n  - key: path\n    rate_limit: {bad}\n"
        ))
        .unwrap_err();
        assert!(err.message.contains(message), "{bad}: {err}");
    }
}

#[test]
fn a_burst_extends_the_format_for_gcra() {
    let c = yaml(
        "domain: api\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 10, unit: second, burst: 50}\n  - key: b\n    rate_limit: {requests_per_unit: 10, window: 1s, algorithm: gcra, burst: 3, block_for: 1m}\n",
    )
    .unwrap();
    let a = c.lookup("api", &[("a", "x")]).unwrap();
    assert_eq!(
        a.limit.enforcement,
        Enforcement::Rule(Rule::parse("10/1s gcra burst 50").unwrap()),
        "a burst alone is a gcra rule"
    );
    let b = c.lookup("api", &[("b", "x")]).unwrap();
    assert_eq!(
        b.limit.enforcement,
        Enforcement::Rule(Rule::parse("10/1s gcra burst 3 block_for 1m").unwrap())
    );
    for (bad, message) in [
        (
            "{requests_per_unit: 10, unit: second, algorithm: sliding_log, burst: 50}",
            "a burst applies to the gcra algorithm only",
        ),
        (
            "{requests_per_unit: 10, unit: second, burst: 0}",
            "invalid burst 0",
        ),
        (
            "{requests_per_unit: 10, unit: second, burst: many}",
            "'burst' must be a whole number",
        ),
        (
            "{requests_per_unit: 10, unit: second, burst: -5}",
            "'burst' must be a whole number",
        ),
        (
            "{requests_per_unit: 1, unit: day, burst: 100000}",
            "more than 10 years",
        ),
        ("{unlimited: true, burst: 5}", "need a rate limit"),
    ] {
        let err = yaml(&format!(
            "domain: api\ndescriptors:\n  - key: path\n    rate_limit: {bad}\n"
        ))
        .unwrap_err();
        assert!(err.message.contains(message), "{bad}: {err}");
    }
}

#[test]
fn zero_requests_per_unit_blocks() {
    let c = load(&["valid/example.yaml"], false).unwrap();
    let m = c.lookup("rl", &[("foo", "x"), ("bar", "banned")]).unwrap();
    assert_eq!(m.limit.enforcement, Enforcement::Blocked);
    assert_eq!(m.limit.name.as_deref(), Some("banned_limit"));
    let quota = c.lookup("rl", &[("service", "service_1")]).unwrap();
    assert!(quota.limit.quota_mode);
    let shadow = c.lookup("rl", &[("foo", "x"), ("baz", "shady")]).unwrap();
    assert!(shadow.limit.shadow_mode);
}

#[test]
fn a_directory_loads_its_yaml_files_and_skips_hidden_ones() {
    let dir = std::env::temp_dir().join(format!("slidegate-config-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("..data")).unwrap();
    std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors: []\n").unwrap();
    std::fs::write(dir.join("b.yml"), "domain: b\n").unwrap();
    std::fs::write(dir.join(".hidden.yaml"), "not: [valid").unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    let c = RateLimitConfig::load(std::slice::from_ref(&dir), LoadOptions::default()).unwrap();
    let mut domains: Vec<&str> = c.domains().collect();
    domains.sort();
    assert_eq!(domains, ["a", "b"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn glob_matches_like_a_shell_star() {
    use super::matcher::glob;
    assert!(glob("*", ""));
    assert!(glob("a*", "a"));
    assert!(glob("a*b*c", "aXbYc"));
    assert!(glob("a*b*c", "abbc"));
    assert!(!glob("a*b*c", "acb"));
    assert!(glob("*x", "xxx"));
    assert!(!glob("abc", "ab"));
}

#[test]
fn the_documented_example_rules_load_and_match() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/rules.yaml");
    let c = RateLimitConfig::load(&[path], LoadOptions::default()).unwrap();
    assert_eq!(
        rule_of(&c, "api", &[("remote_address", "10.0.0.1")]),
        Some(per(100, Unit::Minute))
    );
    let login = c.lookup("api", &[("path", "/login")]).unwrap();
    assert_eq!(login.limit.unit, Unit::Window(Duration::from_millis(250)));
    let failures = c.lookup("api", &[("login_failure", "alice")]).unwrap();
    assert_eq!(
        failures.limit.enforcement,
        Enforcement::Rule(
            Rule::parse("5/15m")
                .and_then(|r| r.block_for(Duration::from_secs(3600)))
                .unwrap()
        )
    );
    let tokens = c.lookup("api", &[("tokens", "alice")]).unwrap();
    assert!(matches!(tokens.limit.enforcement, Enforcement::Rule(r) if r.reports()));
    assert!(
        c.lookup("api", &[("path", "/login"), ("user", "alice")])
            .is_some()
    );
    let a = c.lookup("api", &[("path", "/api/v1/users")]).unwrap();
    let b = c.lookup("api", &[("path", "/api/v1/orders")]).unwrap();
    assert_eq!(a.counter_key, b.counter_key);
    assert!(
        c.lookup("api", &[("tenant", "acme")])
            .unwrap()
            .limit
            .shadow_mode
    );
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("slidegate-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[cfg(unix)]
#[test]
fn a_config_name_for_a_device_is_refused_without_reading_it() {
    let dir = temp_dir("device");
    std::os::unix::fs::symlink("/dev/zero", dir.join("rl.yaml")).unwrap();
    let err =
        RateLimitConfig::load(std::slice::from_ref(&dir), LoadOptions::default()).unwrap_err();
    assert!(err.message.contains("not a regular file"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_file_over_the_size_bound_is_refused_before_it_is_read() {
    let dir = temp_dir("large");
    let file = dir.join("rl.yaml");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(MAX_FILE_BYTES + 1)
        .unwrap();
    let err = RateLimitConfig::load(&[file], LoadOptions::default()).unwrap_err();
    assert!(err.message.contains("larger than 4 MiB"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(unix)]
#[test]
fn a_dangling_config_link_in_a_directory_is_an_error_not_skipped() {
    let dir = temp_dir("dangling");
    std::os::unix::fs::symlink(dir.join("gone.yaml"), dir.join("rl.yaml")).unwrap();
    let err =
        RateLimitConfig::load(std::slice::from_ref(&dir), LoadOptions::default()).unwrap_err();
    assert!(err.to_string().contains("rl.yaml"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn errors_about_a_file_that_is_no_config_never_echo_its_content() {
    const SECRET: &str = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY";
    let cases = [
        format!("aws_secret_access_key={SECRET}\n"),
        format!("-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n"),
        format!("token: [{SECRET}\n"),
        format!("{{\"{SECRET}\n"),
        format!("a: 1\n\t{SECRET}: x\n"),
        format!("{SECRET}: 1\n{SECRET}: 2\n"),
        format!("{SECRET} with spaces: 1\n"),
        format!("- {SECRET}\n"),
        format!("domain: d\ndescriptors: {SECRET}\n"),
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {SECRET}\n"),
        format!("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: {SECRET}\n"),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: {SECRET}x, requests_per_unit: 1}}\n"
        ),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{requests_per_unit: {SECRET}, unit: second}}\n"
        ),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{requests_per_unit: 1, window: {SECRET}}}\n"
        ),
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{requests_per_unit: 1, unit: second, algorithm: {SECRET}}}\n"
        ),
    ];
    for text in cases {
        let err = yaml(&text).unwrap_err();
        assert!(
            !err.to_string().contains(&SECRET[..12]),
            "{text:?} echoed: {err}"
        );
    }
}

#[test]
fn a_file_that_is_not_a_map_is_reported_by_kind_and_position() {
    let err = yaml("just some text\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "test.yaml:1:1: error loading config file: expected a map at the top, found a string"
    );
    let err = yaml("a: [1\n").unwrap_err();
    assert_eq!(err.line, Some(1), "{err}");
    assert!(
        err.message.contains("not valid YAML (unclosed bracket"),
        "{err}"
    );
}

/// A reload (of files, or of a control plane's rules: both put the new
/// config in force through [`CurrentConfig::store`]) carries the counters
/// of a limit whose rule kept its window and algorithm.
#[test]
fn a_reload_that_changes_a_limit_carries_its_counters() {
    let text = |limit: u64, unit: &str| {
        format!(
            "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {{unit: {unit}, requests_per_unit: {limit}}}\n  - key: ip\n    rate_limit: {{unit: minute, requests_per_unit: 7}}\n"
        )
    };
    let current = CurrentConfig::new(yaml(&text(3, "hour")).unwrap());
    assert!(!current.load().has_carries());
    current.store(yaml(&text(5, "hour")).unwrap());
    let config = current.load();
    let user = config.lookup("api", &[("user", "1")]).unwrap().limit.id;
    let ip = config.lookup("api", &[("ip", "1")]).unwrap().limit.id;
    let carry = config.carry(user).expect("the user limit carries");
    assert_eq!(carry.old, [Rule::parse("3/1h").unwrap()]);
    assert_eq!(carry.new, Rule::parse("5/1h").unwrap());
    assert!(
        config.carry(ip).is_none(),
        "an unchanged limit carries nothing"
    );
    // Another unit is another quota.
    current.store(yaml(&text(5, "day")).unwrap());
    assert!(!current.load().has_carries());
}
