//! The deployment recipes, as far as this machine can run them without a
//! container engine: the compose example's files parse and agree with each
//! other and with the binary's flags, its rules pass `validate-config`,
//! Envoy's descriptors match the rules, the Dockerfile's health check
//! passes against a running server (and fails without one), and the
//! systemd unit passes `systemd-analyze verify`.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use slidegate_server::rules::{LoadOptions, RateLimitConfig};

use crate::process::Slidegate;
use crate::support::{self, assert_parses, assert_valid, serve_env_vars, yaml};

const COMPOSE_DIR: &str = "docs/examples/compose";

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

/// The value of `--flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[at + 1]
}

/// `host:port` of a `SLIDEGATE_*_ADDR` value.
fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

/// The Dockerfile's instructions, continuation lines joined, comments out.
fn dockerfile() -> Vec<String> {
    let text = support::read("Dockerfile");
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() && current.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    instructions
}

/// The Dockerfile's `ENV` settings.
fn dockerfile_env() -> Vec<(String, String)> {
    dockerfile()
        .iter()
        .filter_map(|i| i.strip_prefix("ENV "))
        .flat_map(|settings| {
            settings
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("ENV KEY=VALUE");
                    (k.to_owned(), v.to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn dockerfile_env_var(name: &str) -> String {
    dockerfile_env()
        .into_iter()
        .find_map(|(k, v)| (k == name).then_some(v))
        .unwrap_or_else(|| panic!("the Dockerfile sets no {name}"))
}

#[test]
fn the_compose_rules_pass_validate_config() {
    let rules = support::repo().join(COMPOSE_DIR).join("rules");
    assert_valid(&[&rules], &["api"]);
}

#[test]
fn the_compose_file_wires_envoy_slidegate_and_redis_with_real_flags() {
    let compose = yaml(&format!("{COMPOSE_DIR}/docker-compose.yml"));
    let services = &compose["services"];
    for name in ["redis", "slidegate", "envoy"] {
        assert!(services[name].is_object(), "no service {name}");
    }
    let slidegate = &services["slidegate"];
    assert_eq!(
        slidegate["build"]["context"], "../../..",
        "slidegate is built from the repository's Dockerfile"
    );
    let command = strings(&slidegate["command"]);
    assert_parses(&command);

    let known = serve_env_vars();
    let environment = slidegate["environment"].as_object().expect("a map");
    for name in environment.keys() {
        assert!(known.contains(name), "slidegate reads no {name}");
    }
    let store = environment["SLIDEGATE_STORE"]
        .as_str()
        .expect("a store URL");
    let host = store
        .strip_prefix("redis://")
        .and_then(|rest| rest.split(':').next())
        .expect("redis://HOST:PORT");
    assert!(
        services[host].is_object(),
        "the store {store} is no service"
    );

    // The rules directory mounted where --config reads it.
    let config = flag(&command, "--config");
    let volumes = strings(&slidegate["volumes"]);
    assert!(
        volumes
            .iter()
            .any(|v| v.starts_with("./rules:") && v.contains(config)),
        "{config} is not mounted from ./rules: {volumes:?}"
    );
    // The HTTP port published is the image's.
    let http_port = port_of(&dockerfile_env_var("SLIDEGATE_HTTP_ADDR"));
    assert!(
        strings(&slidegate["ports"])
            .iter()
            .any(|p| p.ends_with(&format!(":{http_port}"))),
        "port {http_port} not published"
    );

    // Envoy reads the config file the example mounts.
    let envoy = &services["envoy"];
    let envoy_command = strings(&envoy["command"]);
    let config_path = flag(&envoy_command, "--config-path");
    assert!(
        strings(&envoy["volumes"])
            .iter()
            .any(|v| v.starts_with("./envoy.yaml:") && v.contains(config_path)),
        "envoy.yaml is not mounted at {config_path}"
    );
    assert_eq!(
        envoy["depends_on"]["slidegate"]["condition"], "service_healthy",
        "Envoy waits for the image's health check"
    );
}

/// The rate limit filters of an Envoy config, with their descriptors'
/// first keys, and the address of the cluster each asks.
struct RateLimitUse {
    domain: String,
    address: String,
    port: u64,
    http2: bool,
    descriptor_keys: BTreeSet<String>,
}

fn rate_limit_use(envoy: &Value) -> RateLimitUse {
    let resources = &envoy["static_resources"];
    let hcm = resources["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .flat_map(|l| l["filter_chains"].as_array().into_iter().flatten())
        .flat_map(|c| c["filters"].as_array().into_iter().flatten())
        .map(|f| &f["typed_config"])
        .find(|hcm| {
            hcm["http_filters"].as_array().is_some_and(|fs| {
                fs.iter()
                    .any(|f| f["name"] == "envoy.filters.http.ratelimit")
            })
        })
        .expect("a connection manager with the rate limit filter");
    let filter = &hcm["http_filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["name"] == "envoy.filters.http.ratelimit")
        .expect("the rate limit filter")["typed_config"];
    let service = &filter["rate_limit_service"];
    assert_eq!(service["transport_api_version"], "V3");
    let cluster_name = service["grpc_service"]["envoy_grpc"]["cluster_name"]
        .as_str()
        .expect("an envoy_grpc cluster");
    let cluster = resources["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == cluster_name)
        .unwrap_or_else(|| panic!("no cluster {cluster_name}"));
    let socket = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
        ["socket_address"];
    let options = &cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    let mut descriptor_keys = BTreeSet::new();
    let routes = hcm["route_config"]["virtual_hosts"]
        .as_array()
        .expect("virtual hosts")
        .iter()
        .flat_map(|vh| vh["routes"].as_array().into_iter().flatten());
    for route in routes {
        for limit in route["route"]["rate_limits"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let action = &limit["actions"][0];
            let key = if action["remote_address"].is_object() {
                "remote_address".to_owned()
            } else if let Some(key) = action["request_headers"]["descriptor_key"].as_str() {
                key.to_owned()
            } else {
                panic!("an action this test does not know: {action}")
            };
            descriptor_keys.insert(key);
        }
    }
    RateLimitUse {
        domain: filter["domain"].as_str().expect("a domain").to_owned(),
        address: socket["address"].as_str().expect("an address").to_owned(),
        port: socket["port_value"].as_u64().expect("a port"),
        http2: options["explicit_http_config"]["http2_protocol_options"].is_object(),
        descriptor_keys,
    }
}

/// Asserts that `rules` limit what the Envoy config at `envoy` sends.
fn assert_rules_know_envoys_descriptors(envoy: &str, rules: &str, sample: &[(&str, &str)]) {
    let used = rate_limit_use(&yaml(envoy));
    assert!(used.http2, "{envoy}: the gRPC cluster must speak HTTP/2");
    let config = RateLimitConfig::load(&[support::repo().join(rules)], LoadOptions::default())
        .unwrap_or_else(|e| panic!("{rules}: {e}"));
    assert!(
        config.has_domain(&used.domain),
        "{envoy} asks about domain {} which {rules} lacks",
        used.domain
    );
    assert!(
        !used.descriptor_keys.is_empty(),
        "{envoy} sends no descriptor"
    );
    for key in &used.descriptor_keys {
        let value = sample
            .iter()
            .find_map(|(k, v)| (k == key).then_some(*v))
            .unwrap_or_else(|| panic!("no sample value for {key}"));
        assert!(
            config
                .lookup(&used.domain, &[(key.as_str(), value)])
                .is_some(),
            "{rules} has no limit for the descriptor [{key}={value}] that {envoy} sends"
        );
    }
}

#[test]
fn the_compose_envoy_asks_slidegates_grpc_port_with_descriptors_the_rules_limit() {
    assert_rules_know_envoys_descriptors(
        &format!("{COMPOSE_DIR}/envoy.yaml"),
        &format!("{COMPOSE_DIR}/rules"),
        &[("remote_address", "172.18.0.1"), ("path", "/login")],
    );
    let used = rate_limit_use(&yaml(&format!("{COMPOSE_DIR}/envoy.yaml")));
    let compose = yaml(&format!("{COMPOSE_DIR}/docker-compose.yml"));
    assert!(
        compose["services"][&used.address].is_object(),
        "Envoy asks {}, which is no compose service",
        used.address
    );
    let grpc_port = port_of(&dockerfile_env_var("SLIDEGATE_GRPC_ADDR"));
    assert_eq!(used.port, u64::from(grpc_port), "Envoy asks another port");
}

#[test]
fn the_standalone_envoy_example_asks_with_descriptors_the_example_rules_limit() {
    assert_rules_know_envoys_descriptors(
        "docs/examples/envoy.yaml",
        "docs/examples/rules.yaml",
        &[("remote_address", "10.0.0.1")],
    );
}

#[test]
fn the_dockerfile_builds_in_its_own_stage_and_runs_unprivileged() {
    let instructions = dockerfile();
    let stages = instructions
        .iter()
        .filter(|i| i.starts_with("FROM "))
        .count();
    assert!(stages >= 2, "not multi-stage: {instructions:#?}");
    let builds: Vec<&String> = instructions
        .iter()
        .filter(|i| i.starts_with("RUN cargo build"))
        .collect();
    assert_eq!(builds.len(), 1, "one build command: {builds:?}");
    for part in ["--release", "--locked", "--bin slidegate"] {
        assert!(builds[0].contains(part), "{} lacks {part}", builds[0]);
    }
    assert!(
        instructions
            .iter()
            .any(|i| i.starts_with("COPY --from=build") && i.contains("target/release/slidegate")),
        "the run stage does not take the built binary"
    );
    let user = instructions
        .iter()
        .rev()
        .find_map(|i| i.strip_prefix("USER "))
        .expect("a USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user} is not numeric"));
    assert_ne!(uid, 0, "runs as root");
    assert!(instructions.iter().any(|i| i.starts_with("HEALTHCHECK ")));
    let known = serve_env_vars();
    for (name, _) in dockerfile_env() {
        assert!(known.contains(&name), "slidegate reads no {name}");
    }
    assert!(
        instructions
            .iter()
            .any(|i| i == r#"ENTRYPOINT ["slidegate"]"#)
    );
}

/// The health check's command (exec form), as `docker` runs it.
fn health_check() -> Vec<String> {
    let instruction = dockerfile()
        .into_iter()
        .find(|i| i.starts_with("HEALTHCHECK "))
        .expect("a HEALTHCHECK");
    let (_, command) = instruction
        .split_once(" CMD ")
        .expect("HEALTHCHECK … CMD […]");
    serde_json::from_str(command.trim()).expect("CMD in exec form (a JSON list)")
}

fn run_health_check(http_addr: &str) -> bool {
    let command = health_check();
    Command::new(&command[0])
        .args(&command[1..])
        .env("SLIDEGATE_HTTP_ADDR", http_addr)
        .output()
        .expect("the health check runs")
        .status
        .success()
}

#[test]
fn the_dockerfile_health_check_passes_on_a_serving_server_and_fails_without_one() {
    if !support::tool("bash", &["--version"], "bash") {
        return;
    }
    let server = Slidegate::start(&[]);
    assert!(
        run_health_check(&server.http.to_string()),
        "unhealthy while serving"
    );
    drop(server);
    // A port nothing listens on.
    let free = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = free.local_addr().expect("its address");
    drop(free);
    assert!(
        !run_health_check(&addr.to_string()),
        "healthy without a server"
    );
}

const UNIT: &str = "docs/examples/slidegate.service";

/// `ExecStart=` of the unit, split on whitespace.
fn exec_start(unit: &str) -> Vec<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_systemd_unit_starts_slidegate_with_flags_it_knows() {
    let unit = support::read(UNIT);
    let exec = exec_start(&unit);
    assert!(Path::new(&exec[0]).is_absolute(), "{exec:?}");
    assert!(exec[0].ends_with("/slidegate"), "{exec:?}");
    assert_parses(&exec[1..]);
    let known = serve_env_vars();
    for line in unit.lines().filter_map(|l| l.strip_prefix("Environment=")) {
        for setting in line.split_whitespace() {
            let (name, _) = setting.split_once('=').expect("NAME=VALUE");
            assert!(known.contains(name), "slidegate reads no {name}");
        }
    }
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if !support::tool("systemd-analyze", &["--version"], "systemd") {
        return;
    }
    // verify checks that ExecStart's program exists: point it at the
    // binary under test, and change nothing else.
    let unit = support::read(UNIT);
    let program = exec_start(&unit).remove(0);
    let binary = std::fs::canonicalize(support::binary()).expect("the binary exists");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let copy = dir.path().join("slidegate.service");
    let rewritten = unit.replace(&program, binary.to_str().expect("a UTF-8 path"));
    std::fs::write(&copy, rewritten).expect("the unit is copied");
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    // Unknown directives and bad values are only warnings: none allowed.
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify says: {said}"
    );
}
