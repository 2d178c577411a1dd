use std::time::Duration;

use clap::{CommandFactory, Parser};
use slidegate::Algorithm;

use super::*;
use crate::bounds::RequestBounds;
use crate::commands::serve::ServeOptions;

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn check_takes_several_rates() {
    let cli = Cli::try_parse_from([
        "slidegate",
        "check",
        "--key",
        "k",
        "--rate",
        "10/s",
        "--rate",
        "1000/1h",
    ]);
    let Ok(Cli {
        command: Command::Check(args),
        ..
    }) = cli
    else {
        panic!("check did not parse: {cli:?}");
    };
    assert_eq!(args.rates.len(), 2);
    assert_eq!(args.cost, 1);
    assert_eq!(args.algorithm, Algorithm::SlidingLog);
}

fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
    let cli = Cli::try_parse_from(["slidegate", "serve"].iter().chain(args))?;
    match cli.command {
        Command::Serve(args) => Ok(*args),
        other => panic!("not serve: {other:?}"),
    }
}

#[test]
fn bounds_have_flags_and_defaults() {
    let args = serve(&[]).unwrap();
    assert_eq!(RequestBounds::from(&args.bounds), RequestBounds::default());
    let args = serve(&[
        "--max-descriptors",
        "8",
        "--max-descriptor-entries",
        "4",
        "--max-adhoc-limit",
        "100",
        "--max-adhoc-window",
        "1h",
    ])
    .unwrap();
    let bounds = RequestBounds::from(&args.bounds);
    assert_eq!(
        (bounds.max_descriptors, bounds.max_descriptor_entries),
        (8, 4)
    );
    assert_eq!(bounds.max_adhoc_limit, 100);
    assert_eq!(bounds.max_adhoc_window, Duration::from_secs(3600));
    for bad in [
        ["--max-descriptors", "0"],
        ["--max-adhoc-limit", "0"],
        ["--max-adhoc-window", "0ms"],
        ["--max-adhoc-window", "11y"],
    ] {
        assert!(serve(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_bad_store_url_is_refused_without_its_password() {
    let error = serve(&["--store", "redis:/user:hunter2@host"]).unwrap_err();
    let text = error.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("***@host"), "{text}");
}

#[test]
fn the_admin_token_comes_from_a_file_without_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    let args = serve(&["--admin-token-file", path.to_str().unwrap()]).unwrap();
    let options = ServeOptions::from(args);
    assert_eq!(options.admin_token().unwrap().as_deref(), Some("s3cret"));
    std::fs::write(&path, "\n").unwrap();
    assert!(options.admin_token().is_err(), "an empty file");
    assert!(
        serve(&[
            "--admin-token",
            "x",
            "--admin-token-file",
            path.to_str().unwrap()
        ])
        .is_err(),
        "both"
    );
}

#[test]
fn memory_bounds_have_defaults_and_refuse_out_of_range_values() {
    let Ok(Cli {
        command: Command::Serve(args),
        ..
    }) = Cli::try_parse_from(["slidegate", "serve"])
    else {
        panic!("serve did not parse");
    };
    assert_eq!(args.store.max_memory_bytes, 1 << 30);
    assert_eq!(args.store.max_rules_per_key, 16);
    for bad in ["0", "257", "x"] {
        let cli = Cli::try_parse_from(["slidegate", "serve", "--max-rules-per-key", bad]);
        assert!(cli.is_err(), "{bad}");
    }
}

#[test]
fn check_refuses_a_bad_rate() {
    let cli = Cli::try_parse_from(["slidegate", "check", "--key", "k", "--rate", "0/s"]);
    assert!(cli.is_err());
}

#[test]
fn every_default_is_its_owners() {
    use crate::api::envoy::headers::ResponseHeaders;
    use crate::api::http::waiting::DEFAULT_MAX_WAITING;
    use crate::commands::bench::{self, BenchOptions};
    use crate::commands::serve::{DEFAULT_GRPC_ADDR, DEFAULT_HTTP_ADDR, ServeLimits};
    use crate::store::StoreOptions;

    let options = ServeOptions::from(serve(&[]).unwrap());
    assert_eq!(options.store, StoreOptions::default());
    assert_eq!(options.limits, ServeLimits::default());
    assert_eq!(options.bounds, RequestBounds::default());
    assert_eq!(options.response_headers, ResponseHeaders::default());
    assert_eq!(options.max_waiting, DEFAULT_MAX_WAITING);
    assert_eq!(
        (options.http_addr.as_str(), options.grpc_addr.as_str()),
        (DEFAULT_HTTP_ADDR, DEFAULT_GRPC_ADDR)
    );
    let Ok(Cli {
        command: Command::Bench(args),
        ..
    }) = Cli::try_parse_from(["slidegate", "bench"])
    else {
        panic!("bench did not parse");
    };
    let options = BenchOptions::from(args);
    assert_eq!(
        (options.keys, options.concurrency, options.duration),
        (
            bench::DEFAULT_KEYS,
            bench::DEFAULT_CONCURRENCY,
            bench::DEFAULT_DURATION
        )
    );
    assert_eq!(options.rate, bench::default_rate());
    assert_eq!(options.algorithm, Algorithm::default());
    assert_eq!(options.store, StoreOptions::default());
}

#[test]
fn durations_are_read_by_one_parser() {
    let args = serve(&["--idle-timeout", "90s", "--shutdown-grace", "0s"]).unwrap();
    let limits = ServeOptions::from(args).limits;
    assert_eq!(limits.http.idle_timeout, Some(Duration::from_secs(90)));
    assert_eq!(limits.shutdown_grace, Duration::ZERO);
    let error = serve(&["--header-timeout", "soon"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("'soon' is not a duration"), "{error}");
    let error = Cli::try_parse_from(["slidegate", "bench", "--duration", "soon"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("'soon' is not a duration"), "{error}");
    // A unitless number is refused by every duration flag, `bench
    // --duration` included, with what it lacks: `--store-timeout-ms` and the
    // other `-ms` flags are the only bare numbers, and they say their unit.
    for args in [
        &["bench", "--duration", "1"][..],
        &["serve", "--header-timeout", "1"],
        &["check", "--key", "k", "--rate", "1/s", "--wait", "1"],
    ] {
        let error = Cli::try_parse_from(["slidegate"].iter().chain(args))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("'1' is not a duration: a number needs a unit"),
            "{args:?}: {error}"
        );
    }
}

/// `text` with every run of whitespace one space, and no backticks: help
/// is wrapped to the terminal, the README writes flags as code.
fn plain(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn max_store_calls_is_described_once_as_the_store_behaves() {
    let sentence = plain(crate::store::MAX_STORE_CALLS_HELP);
    for name in ["serve", "check", "bench"] {
        let mut cli = Cli::command();
        cli.build();
        let command = cli
            .find_subcommand_mut(name)
            .unwrap_or_else(|| panic!("no subcommand {name}"));
        let help = plain(&command.render_long_help().to_string());
        assert!(help.contains(&sentence), "{name} --help: {help}");
    }
    // The behaviour `tests/store_calls.rs` holds the store to: a decision
    // beyond the bound waits within its deadline, the policy comes after.
    let (what, _) = sentence.split_once(" (with").expect("a parenthesis");
    assert!(
        what.ends_with(
            "waits for one to end, within --store-timeout-ms, then is answered by --on-store-error"
        ),
        "{what}"
    );
    // And the README's table of flags says the same.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("the README");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `--max-store-calls` |"))
        .expect("a README row for --max-store-calls");
    let described = plain(row.split('|').nth(2).expect("a description cell"));
    assert!(
        what.eq_ignore_ascii_case(&described),
        "README: {described:?}\nhelp: {what:?}"
    );
}

#[test]
fn xds_is_asked_for_by_a_server_or_by_envoyproxy_ratelimits_config_type() {
    assert_eq!(serve(&[]).unwrap().xds.options(), None);
    let options = serve(&["--xds-server", "cp:18000"])
        .unwrap()
        .xds
        .options()
        .expect("--xds-server subscribes");
    assert_eq!(
        (
            options.server.as_str(),
            options.node_id.as_str(),
            options.tls
        ),
        ("cp:18000", "default", None)
    );
    let options = serve(&["--config-type", "GRPC_XDS_SOTW"])
        .unwrap()
        .xds
        .options()
        .expect("GRPC_XDS_SOTW subscribes");
    assert_eq!(options.server, "localhost:18000");
    let file = serve(&["--config-type", "FILE", "--xds-server", "cp:18000"]).unwrap();
    assert_eq!(file.xds.options(), None, "FILE never subscribes");
    let tls = serve(&[
        "--xds-server",
        "cp:1",
        "--xds-tls-ca",
        "ca.pem",
        "--xds-tls-san",
        "cp",
    ])
    .unwrap()
    .xds
    .options()
    .and_then(|o| o.tls)
    .expect("a CA asks for TLS");
    assert_eq!(
        (tls.ca, tls.server_name),
        (Some("ca.pem".into()), Some("cp".into()))
    );
    assert!(
        serve(&["--xds-server", "cp:1", "--xds-tls-cert", "c.pem"]).is_err(),
        "a certificate needs its key"
    );
    assert!(serve(&["--xds-node-metadata", "novalue"]).is_err());
}
