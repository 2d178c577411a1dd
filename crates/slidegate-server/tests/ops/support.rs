//! What the ops tests share: the repository's files, the binary, the
//! command line's flags, and `/metrics` read as series.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::{CommandFactory, Parser};
use slidegate_server::cli::Cli;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the repository, as text.
pub fn read(path: &str) -> String {
    let full = repo().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// A YAML file of the repository, as JSON.
pub fn yaml(path: &str) -> serde_json::Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

/// The binary under test: `SLIDEGATE_BINARY` when set, otherwise the one
/// cargo built for the tests.
pub fn binary() -> String {
    std::env::var("SLIDEGATE_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_slidegate").into())
}

/// True when `program` runs (`program ARGS` starts). Where it does not,
/// the test that needs it says so and is skipped, but under `CI=true` it
/// fails instead: CI must run every test (`scripts/test.sh` installs
/// `package` as root with apt-get).
pub fn tool(program: &str, args: &[&str], package: &str) -> bool {
    let runs = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !runs {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} is not installed (Debian package {package}; scripts/test.sh installs it \
             when run as root), and CI=true runs every test"
        );
        eprintln!("skipped: {program} is not installed (Debian package {package})");
    }
    runs
}

/// `slidegate validate-config PATHS`.
pub fn validate_config(paths: &[&Path]) -> Output {
    Command::new(binary())
        .arg("validate-config")
        .args(paths)
        .output()
        .expect("the slidegate binary runs")
}

/// Asserts that `slidegate validate-config PATHS` accepts them and names
/// `domains` (sorted).
pub fn assert_valid(paths: &[&Path], domains: &[&str]) {
    let output = validate_config(paths);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "validate-config {paths:?} refused them: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = format!("ok: {} domain(s): {}", domains.len(), domains.join(", "));
    assert_eq!(stdout.trim(), expected, "{paths:?}");
}

/// The long flags of a subcommand (`serve`, `validate-config`), without
/// their dashes, `--help` and `--version` included.
pub fn flags_of(subcommand: &str) -> BTreeSet<String> {
    let mut cli = Cli::command();
    cli.build();
    let mut flags: BTreeSet<String> = cli
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect();
    let sub = cli
        .find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
    flags.extend(
        sub.get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned)),
    );
    flags
}

/// The environment variables `slidegate serve` reads (`SLIDEGATE_*`).
pub fn serve_env_vars() -> BTreeSet<String> {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").expect("a serve subcommand");
    cli.get_arguments()
        .chain(serve.get_arguments())
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect()
}

/// `args` (after the binary's name) parse as a `slidegate` command line.
pub fn assert_parses(args: &[String]) {
    let mut argv = vec!["slidegate".to_owned()];
    argv.extend_from_slice(args);
    if let Err(error) = Cli::try_parse_from(&argv) {
        panic!("slidegate {args:?} does not parse: {error}");
    }
}

/// The series of a Prometheus text exposition: metric name → the label
/// sets of its series.
#[derive(Debug, Default)]
pub struct Exposition(HashMap<String, Vec<BTreeMap<String, String>>>);

impl Exposition {
    /// Parses the text format (`name{label="value",…} number`).
    pub fn parse(text: &str) -> Exposition {
        let mut series: HashMap<String, Vec<BTreeMap<String, String>>> = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, labels) = match line.split_once('{') {
                Some((name, rest)) => {
                    let (labels, _) = rest.rsplit_once('}').expect("a closing brace");
                    (name, parse_labels(labels))
                }
                None => (
                    line.split_whitespace().next().expect("a name"),
                    BTreeMap::new(),
                ),
            };
            series.entry(name.to_owned()).or_default().push(labels);
        }
        Exposition(series)
    }

    /// The label sets of `name`'s series (none when it is not exported).
    pub fn series(&self, name: &str) -> &[BTreeMap<String, String>] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// Every metric name.
    pub fn names(&self) -> BTreeSet<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// `a="x",b="y"` (values are Prometheus-escaped: `\"`, `\\`, `\n`).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim().trim_start_matches(',').to_owned(), value);
        rest = &after[end..];
    }
    labels
}

/// `GET /metrics` from a running server, parsed.
pub async fn metrics(addr: SocketAddr) -> Exposition {
    let reply = crate::common::get(addr, "/metrics").await;
    assert_eq!(reply.status, http::StatusCode::OK);
    Exposition::parse(&String::from_utf8_lossy(&reply.body))
}

#[test]
fn the_exposition_parser_reads_names_labels_and_escapes() {
    let text = "# TYPE x counter\nx{a=\"1\",b=\"q\\\"uote\"} 3\ny 1\nz_bucket{le=\"+Inf\"} 2\n";
    let e = Exposition::parse(text);
    assert_eq!(e.names(), BTreeSet::from(["x", "y", "z_bucket"]));
    assert_eq!(e.series("x")[0]["b"], "q\"uote");
    assert_eq!(e.series("x")[0]["a"], "1");
    assert!(e.series("y")[0].is_empty());
    assert_eq!(e.series("z_bucket")[0]["le"], "+Inf");
}
