//! The status page: `GET /ui`, `GET /v1/stats`, `GET /v1/config`, and the
//! page itself in a real browser (headless Chromium, Debian package
//! `chromium`) against a running `slidegate serve` under load.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{TestServer, request_to};
use http::{Method, StatusCode};
use slidegate::MemoryStore;
use slidegate_server::commands::parts::Parts;
use slidegate_server::rules::{CurrentConfig, LiveConfig, LoadOptions};

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");

const RULES: &str = "\
domain: demo
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: login_failure
    rate_limit: {requests_per_unit: 5, window: 15m, block_for: 1h}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10000, report: true}
";

/// The key the load sends far over its limit.
const HOT_IP: &str = "203.0.113.7";

fn check_body(domain: &str, ip: &str) -> String {
    format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"remote_address","value":"{ip}"}}]}}]}}"#
    )
}

fn temp_rules(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

fn basic(user_and_password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_and_password)
    )
}

async fn token_server() -> TestServer {
    let parts = Parts::new(MemoryStore::new()).with_admin_token(Some("s3cret".into()));
    TestServer::full(parts).await
}

/// The routes that show client data or the server's files.
const ADMIN_READS: [&str; 3] = ["/ui", "/v1/stats", "/v1/config"];

#[tokio::test]
async fn with_an_admin_token_the_page_stats_and_config_refuse_a_request_without_it() {
    let server = token_server().await;
    for path in ADMIN_READS {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(reply.error_code(), "unauthorized");
        let challenges: Vec<&str> = reply
            .headers
            .get_all("www-authenticate")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert!(
            challenges.iter().any(|c| c.starts_with("Basic ")),
            "a browser is asked for the token: {challenges:?}"
        );
    }
}

#[tokio::test]
async fn with_an_admin_token_a_wrong_one_is_forbidden_as_bearer_or_basic() {
    let server = token_server().await;
    for path in ADMIN_READS {
        for auth in [
            "Bearer nope".to_owned(),
            basic("admin:nope"),
            basic("garbage"),
        ] {
            let reply = server
                .request(Method::GET, path, &[("authorization", &auth)], vec![])
                .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path} {auth}");
            assert_eq!(reply.error_code(), "forbidden");
        }
    }
}

#[tokio::test]
async fn with_an_admin_token_bearer_or_basic_password_opens_the_page_and_stats() {
    let server = token_server().await;
    for auth in [
        "Bearer s3cret".to_owned(),
        basic("anyone:s3cret"),
        // The scheme's name is case-insensitive (RFC 9110, 11.1).
        "bearer s3cret".to_owned(),
        "BEARER s3cret".to_owned(),
        basic("anyone:s3cret").replace("Basic", "basic"),
    ] {
        let page = server
            .request(Method::GET, "/ui", &[("authorization", &auth)], vec![])
            .await;
        assert_eq!(page.status, StatusCode::OK, "{auth}");
        let stats = server
            .request(
                Method::GET,
                "/v1/stats",
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!(stats.status, StatusCode::OK, "{auth}");
        assert!(stats.json()["top_denied"].is_array());
        let config = server
            .request(
                Method::GET,
                "/v1/config",
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!(config.status, StatusCode::OK, "{auth}");
        assert!(config.json()["domains"].is_array());
    }
}

#[tokio::test]
async fn with_an_admin_token_the_key_routes_take_the_scheme_in_any_case() {
    let server = token_server().await;
    let body = r#"{"key":"k","limit":1,"window_ms":60000}"#;
    assert_eq!(
        server.post_json("/v1/acquire", body).await.status,
        StatusCode::OK
    );
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let auth = format!("{scheme} s3cret");
        let peek = server
            .request(
                Method::GET,
                "/v1/keys/k?limit=1&window_ms=60000",
                &[("authorization", &auth)],
                vec![],
            )
            .await;
        assert_eq!(peek.status, StatusCode::OK, "{auth}");
        assert_eq!(peek.json()["remaining"], 0, "{auth}");
    }
    let reset = server
        .request(
            Method::DELETE,
            "/v1/keys/k",
            &[("authorization", "bearer s3cret")],
            vec![],
        )
        .await;
    assert_eq!(reset.status, StatusCode::OK);
    assert_eq!(
        server.post_json("/v1/acquire", body).await.status,
        StatusCode::OK,
        "the key was reset"
    );
}

#[tokio::test]
async fn the_page_is_self_contained_html_with_a_strict_content_security_policy() {
    let server = TestServer::memory().await;
    let page = server.get("/ui").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no CDN"
    );
    for asset in ["/ui/app.js", "/ui/style.css"] {
        assert!(html.contains(asset));
        let reply = server.get(asset).await;
        assert_eq!(reply.status, StatusCode::OK, "{asset}");
        let text = String::from_utf8_lossy(&reply.body);
        assert!(
            !text.contains("innerHTML"),
            "{asset} writes client data as HTML"
        );
        assert!(!text.contains("https://"), "{asset} loads something remote");
    }
    assert_eq!(server.get("/ui/nope.js").await.error_code(), "not_found");
}

#[tokio::test]
async fn a_denied_key_is_listed_in_stats_truncated_to_64_characters() {
    let server = TestServer::memory().await;
    let key = format!("long-{}", "k".repeat(500));
    let body = format!(r#"{{"key":"{key}","limit":1,"window_ms":60000}}"#);
    assert_eq!(
        server.post_json("/v1/acquire", &body).await.status,
        StatusCode::OK
    );
    assert_eq!(
        server.post_json("/v1/acquire", &body).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let stats = server.get("/v1/stats").await.json();
    let shown: String = key.chars().take(64).chain(['…']).collect();
    let top = stats["top_denied"].as_array().unwrap();
    assert!(
        top.iter().any(|e| e["key"] == shown.as_str()),
        "{shown} not in {top:?}"
    );
    assert!(
        top.iter()
            .all(|e| e["key"].as_str().unwrap().chars().count() <= 65)
    );
}

#[tokio::test]
async fn config_lists_the_rules_in_force_with_their_file_and_load_time() {
    let (_dir, file) = temp_rules("demo.yaml", RULES);
    let live = LiveConfig::load(vec![file.clone()], LoadOptions::default()).unwrap();
    let parts = Parts::new(MemoryStore::new()).with_config(live.current());
    let server = TestServer::full(parts).await;
    let config = server.get("/v1/config").await.json();
    assert!(config["loaded_at_ms"].as_u64().unwrap() > 0);
    let domain = &config["domains"][0];
    assert_eq!(domain["domain"], "demo");
    assert_eq!(domain["files"][0], file.display().to_string());
    let first = &domain["descriptors"][0];
    assert_eq!(first["key"], "remote_address");
    assert_eq!(first["rate_limit"]["requests_per_unit"], 5);
    assert_eq!(first["rate_limit"]["unit"], "SECOND");
    assert_eq!(first["rate_limit"]["stats_key"], "demo.remote_address");
    assert_eq!(domain["descriptors"][1]["value"], "/login");
}

#[tokio::test]
async fn a_refused_reload_is_shown_in_stats_with_its_error() {
    let (_dir, file) = temp_rules("demo.yaml", RULES);
    let live = LiveConfig::load(vec![file.clone()], LoadOptions::default()).unwrap();
    let parts = Parts::new(MemoryStore::new()).with_config(live.current());
    let server = TestServer::full(parts).await;
    std::fs::write(
        &file,
        "domain: demo\ndescriptors:\n  - key: a\n    ratelimit: {}\n",
    )
    .unwrap();
    assert!(live.reload().is_err());
    let stats = server.get("/v1/stats").await.json();
    let refused = &stats["config"]["last_refused"];
    assert_eq!(refused["result"], "error", "{stats}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains(&file.display().to_string()),
        "{refused}"
    );
    assert_eq!(stats["config"]["domains"][0], "demo", "the old rules stay");
}

#[tokio::test]
async fn stats_count_check_decisions_per_configured_limit_each_second() {
    // A domain of its own: the statistics are per server, the metrics
    // per process.
    let rules = "domain: counted\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let (_dir, file) = temp_rules("counted.yaml", rules);
    let live = LiveConfig::load(vec![file], LoadOptions::default()).unwrap();
    let config: CurrentConfig = live.current();
    let parts = Parts::new(MemoryStore::new()).with_config(config);
    let server = TestServer::full(parts).await;
    for _ in 0..8 {
        server
            .post_json("/v1/check", &check_body("counted", "198.51.100.1"))
            .await;
    }
    // The sampler takes a point each second.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = server.get("/v1/stats").await.json();
        let series = stats["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["rule"] == "counted.remote_address")
            .cloned()
            .unwrap_or_default();
        if series["total"]["denied"] == 3 {
            assert_eq!(series["total"]["allowed"], 5);
            assert_eq!(series["domain"], "counted");
            let denied: u64 = series["denied"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(denied, 3, "the points add up to the total");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no point with the denials: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// The browser test.

/// A running `slidegate serve`, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(rules: &Path) -> Server {
        let mut child = Command::new(BINARY)
            .arg("serve")
            .env("SLIDEGATE_HTTP_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_GRPC_ADDR", "127.0.0.1:0")
            .env("SLIDEGATE_LOG_FORMAT", "json")
            .env("SLIDEGATE_STORE", "memory")
            .env("SLIDEGATE_CONFIG", rules)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(addr) = json["fields"]["http_addr"].as_str()
                {
                    let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("no 'serving' log line");
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Chromium binary, or `None` (the test is skipped) when it is
/// missing outside CI; under `CI=true` a missing browser fails the test.
fn chromium() -> Option<&'static str> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            return Some(name);
        }
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it as root)"
    );
    eprintln!("skipped: chromium is not installed (Debian: apt-get install chromium)");
    None
}

fn run_browser(browser: &str, args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            // The page polls every second: let it run a few polls.
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The text of the element with `id`'s `tbody`, from a dumped DOM.
fn table_body<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {dom}"));
    let rest = &dom[start..];
    let end = rest.find("</table>").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn the_status_page_shows_live_numbers_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let (_dir, rules) = temp_rules("demo.yaml", RULES);
    let server = Server::start(&rules);
    let addr = server.addr;

    // Load: one client far over its limit, many others within theirs.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = Arc::clone(&stop);
        runtime.spawn(async move {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let ip = if i.is_multiple_of(2) {
                    HOT_IP.to_owned()
                } else {
                    format!("198.51.100.{}", i % 200)
                };
                let body = check_body("demo", &ip).into_bytes();
                request_to(
                    addr,
                    Method::POST,
                    "/v1/check",
                    &[("content-type", "application/json")],
                    body,
                )
                .await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    // A few points of history before the browser looks.
    std::thread::sleep(Duration::from_secs(3));

    let url = format!("http://{addr}/ui");
    let dom = run_browser(browser, &["--dump-dom".into(), url.clone()]);

    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_owned();
    let screenshot = target.join("ui.png");
    let _ = std::fs::remove_file(&screenshot);
    run_browser(
        browser,
        &[
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1280,1000".into(),
            url,
        ],
    );
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(load).unwrap();

    let top = table_body(&dom, "top-denied");
    assert!(
        top.contains(&format!("demo: remote_address={HOT_IP}")),
        "the denied key is not in the top list: {top}"
    );
    let chart_at = dom.find("id=\"chart\"").expect("no chart");
    let chart = &dom[chart_at..dom[chart_at..].find('>').unwrap() + chart_at];
    let points: usize = chart
        .split("data-points=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the chart has no points: {chart}"));
    assert!(points >= 3, "the chart has {points} points");
    assert!(dom.contains("<polyline"), "no line drawn");
    let series = table_body(&dom, "series");
    assert!(series.contains("demo.remote_address"), "{series}");
    let rules_table = table_body(&dom, "rules");
    assert!(
        rules_table.contains("remote_address") && rules_table.contains("5 / second"),
        "the rules are not listed: {rules_table}"
    );
    assert!(
        rules_table.contains(&rules.display().to_string()),
        "no source file: {rules_table}"
    );
    // A rule's options, as /v1/config has them.
    assert!(
        rules_table.contains("lockout 1h"),
        "the lockout is not shown: {rules_table}"
    );
    assert!(
        rules_table.contains("<td>report</td>"),
        "reporting is not shown: {rules_table}"
    );
    let meta = std::fs::metadata(&screenshot).expect("no screenshot");
    assert!(
        meta.len() > 10_000,
        "the screenshot is {} bytes",
        meta.len()
    );
    drop(server);
}
