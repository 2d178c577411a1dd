//! `slidegate check --wait`: the binary waits for its turn on a shared
//! Redis instead of being refused.

mod common;

use std::process::Command;

use common::redis::Redis;

const BINARY: &str = env!("CARGO_BIN_EXE_slidegate");

fn check(redis: &Redis, extra: &[&str]) -> serde_json::Value {
    let output = Command::new(BINARY)
        .args([
            "check",
            "--key",
            "k",
            "--rate",
            "1/1s",
            "--store",
            &redis.url(),
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn check_wait_waits_for_the_turn_and_says_how_long() {
    let redis = Redis::start();
    assert_eq!(check(&redis, &[])["allowed"], true);
    let waited = check(&redis, &["--wait", "5s"]);
    assert_eq!(waited["allowed"], true, "{waited}");
    let ms = waited["waited_ms"].as_u64().expect("waited_ms");
    assert!(ms > 0 && ms <= 1001, "{waited}");
}

#[test]
fn check_wait_refuses_at_once_when_the_turn_is_too_far() {
    let redis = Redis::start();
    assert_eq!(check(&redis, &[])["allowed"], true);
    let refused = check(&redis, &["--wait", "10ms"]);
    assert_eq!(refused["allowed"], false, "{refused}");
    assert_eq!(refused.get("waited_ms"), None);
}

#[test]
fn check_wait_is_bounded() {
    let output = Command::new(BINARY)
        .args(["check", "--key", "k", "--rate", "1/1s", "--wait", "1h"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("at most 240s"));
}
