//! The deployment recipes, as far as this machine can run them without a
//! container engine: the compose example's files parse and agree with each
//! other and with the binary's flags, its rules pass `validate-config`,
//! Envoy's descriptors match the rules, the Dockerfile's health check
//! passes against a running server (and fails without one), and the
//! systemd unit passes `systemd-analyze verify` (with its admin token lines
//! too). And what a newcomer runs first: the Envoy examples (complete, and
//! safe), the example rules directory, the image tag, the docs' `--config`
//! paths.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use clap::CommandFactory;
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
fn the_example_rules_directory_passes_validate_config() {
    let rules = support::repo().join("examples/rules");
    assert_valid(&[&rules], &["api", "web"]);
}

/// The `--config PATH` arguments of the commands the docs and `--help`
/// show: each relative path is one of the repository's, so the commands run
/// as written from a clone (absolute ones are a deployment's own).
#[test]
fn every_config_path_the_docs_run_is_in_the_repository() {
    let mut texts: Vec<(String, String)> = [
        "README.md",
        "docs/DEPLOYING.md",
        "crates/slidegate-server/README.md",
    ]
    .into_iter()
    .map(|p| (p.to_owned(), support::read(p)))
    .collect();
    let help = slidegate_server::cli::Cli::command()
        .get_after_help()
        .map(ToString::to_string)
        .unwrap_or_default();
    texts.push(("slidegate --help".to_owned(), help));
    let mut seen = 0;
    for (place, text) in &texts {
        let words: Vec<&str> = text.split_whitespace().collect();
        for pair in words.windows(2) {
            if pair[0] != "--config" {
                continue;
            }
            let path = pair[1].trim_end_matches(['`', ')', ',', '\\']);
            if path.starts_with('/') || path.starts_with('$') {
                continue;
            }
            seen += 1;
            assert!(
                support::repo().join(path).exists(),
                "{place}: --config {path} is not in the repository"
            );
        }
    }
    assert!(seen >= 4, "only {seen} --config paths found");
}

/// The HTTP connection manager that calls the rate limit filter.
fn rate_limit_hcm(envoy: &Value) -> &Value {
    envoy["static_resources"]["listeners"]
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
        .expect("a connection manager with the rate limit filter")
}

/// The rate limit filter's `timeout`, from a config holding it.
fn filter_timeout(filter: &Value) -> std::time::Duration {
    let text = filter["timeout"].as_str().expect("a timeout");
    let secs: f64 = text
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("timeout {text:?} is not N.Ns"));
    std::time::Duration::from_secs_f64(secs)
}

/// Envoy's filter timeout must leave slidegate's store deadline room to
/// answer by its policy (docs/RELIABILITY.md): twice the default at least.
fn assert_well_above_the_store_deadline(place: &str, timeout: std::time::Duration) {
    let store = std::time::Duration::from_millis(slidegate_server::store::DEFAULT_TIMEOUT_MS);
    assert!(
        timeout >= 2 * store,
        "{place}: Envoy's timeout {timeout:?} is not well above --store-timeout-ms {store:?}"
    );
}

#[test]
fn the_envoy_examples_are_complete_and_safe() {
    for file in [
        "docs/examples/envoy.yaml",
        &format!("{COMPOSE_DIR}/envoy.yaml"),
    ] {
        let envoy = yaml(file);
        let hcm = rate_limit_hcm(&envoy);
        assert_eq!(
            hcm["use_remote_address"], true,
            "{file}: remote_address would follow a client's X-Forwarded-For"
        );
        let filter = hcm["http_filters"]
            .as_array()
            .expect("filters")
            .iter()
            .find(|f| f["name"] == "envoy.filters.http.ratelimit")
            .expect("the rate limit filter");
        assert_well_above_the_store_deadline(file, filter_timeout(&filter["typed_config"]));
        // The backend is served: by a listener of the same Envoy.
        let resources = &envoy["static_resources"];
        let listening: Vec<(String, u64)> = resources["listeners"]
            .as_array()
            .expect("listeners")
            .iter()
            .map(|l| socket(&l["address"]))
            .collect();
        let backend = resources["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .find(|c| c["name"] == "backend")
            .unwrap_or_else(|| panic!("{file}: no backend cluster"));
        let endpoint = socket(
            &backend["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"],
        );
        assert!(
            listening.contains(&endpoint),
            "{file}: the backend {endpoint:?} is served by nothing in it (listeners {listening:?})"
        );
    }
    // The README's snippet of the filter.
    let readme = support::read("README.md");
    let snippet = readme
        .split("```yaml")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .find(|block| block.contains("rate_limit_service"))
        .expect("the README's rate limit filter snippet");
    let snippet: Value = serde_saphyr::from_str(snippet).expect("the snippet is YAML");
    let filter = &snippet["http_filters"][0]["typed_config"];
    assert_well_above_the_store_deadline("README.md", filter_timeout(filter));
}

/// `(address, port)` of an Envoy `address: {socket_address: …}`.
fn socket(address: &Value) -> (String, u64) {
    let socket = &address["socket_address"];
    (
        socket["address"].as_str().expect("an address").to_owned(),
        socket["port_value"].as_u64().expect("a port"),
    )
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
    let hcm = rate_limit_hcm(envoy);
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
    // A port nothing listens on, held so that no other test's server
    // can take it meanwhile (a port let go can be).
    let closed = crate::common::redis::ReservedPort::new();
    assert!(
        !run_health_check(&format!("127.0.0.1:{}", closed.port())),
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

/// The unit with its admin token lines uncommented.
fn with_admin_token(unit: &str) -> String {
    let lines: Vec<&str> = unit
        .lines()
        .map(|l| {
            l.strip_prefix('#')
                .filter(|l| {
                    l.starts_with("LoadCredential=")
                        || l.starts_with("Environment=SLIDEGATE_ADMIN_TOKEN_FILE=")
                })
                .unwrap_or(l)
        })
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn the_systemd_unit_hands_the_admin_token_over_as_a_credential() {
    let unit = with_admin_token(&support::read(UNIT));
    assert!(unit.contains("\nDynamicUser=yes\n"), "{unit}");
    let credential = unit
        .lines()
        .find_map(|l| l.strip_prefix("LoadCredential="))
        .expect("a LoadCredential line to uncomment");
    let (name, source) = credential.split_once(':').expect("NAME:PATH");
    assert!(Path::new(source).is_absolute(), "{source}");
    let file = unit
        .lines()
        .find_map(|l| l.strip_prefix("Environment=SLIDEGATE_ADMIN_TOKEN_FILE="))
        .expect("an Environment line to uncomment");
    // %d: the credentials directory, which the dynamic user can read.
    assert_eq!(file, format!("%d/{name}"));
    assert!(serve_env_vars().contains("SLIDEGATE_ADMIN_TOKEN_FILE"));
}

#[test]
fn the_compose_file_gives_slidegate_its_shutdown_grace() {
    let compose = yaml(&format!("{COMPOSE_DIR}/docker-compose.yml"));
    let period = compose["services"]["slidegate"]["stop_grace_period"]
        .as_str()
        .expect("a stop_grace_period");
    let period: u64 = period
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .expect("N s");
    let grace = slidegate_server::net::http1::DEFAULT_SHUTDOWN_GRACE;
    assert!(
        std::time::Duration::from_secs(period) > grace,
        "stop_grace_period {period}s leaves no margin over --shutdown-grace {grace:?}"
    );
}

#[test]
fn the_image_the_docs_build_is_the_one_kubernetes_runs() {
    let deploying = support::read("docs/DEPLOYING.md");
    let tag = deploying
        .lines()
        .find_map(|l| l.strip_prefix("docker build -t "))
        .and_then(|rest| rest.strip_suffix(" ."))
        .expect("a docker build -t TAG . line");
    assert_eq!(
        tag,
        format!("slidegate:{}", env!("CARGO_PKG_VERSION")),
        "the build's tag"
    );
    let images: Vec<&str> = deploying
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert!(!images.is_empty(), "no image: in DEPLOYING.md");
    for image in images {
        assert_eq!(image, tag, "an image the docs' build does not make");
    }
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if !support::tool("systemd-analyze", &["--version"], "systemd") {
        return;
    }
    let shipped = support::read(UNIT);
    for unit in [shipped.clone(), with_admin_token(&shipped)] {
        verify_unit(&unit);
    }
}

/// Asserts that `systemd-analyze verify` finds nothing to say about `unit`.
fn verify_unit(unit: &str) {
    // verify checks that ExecStart's program exists: point it at the
    // binary under test, and change nothing else.
    let program = exec_start(unit).remove(0);
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
