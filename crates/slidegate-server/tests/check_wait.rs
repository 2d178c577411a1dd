//! `slidegate check --wait`: the binary waits for its turn on a shared
//! Redis instead of being refused.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

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
            // The default 50 ms is not always enough for a new process's
            // first call (connect, load the script) on a loaded machine.
            "--store-timeout-ms",
            "5000",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The second check on 1/1s is admitted one window after the first, no
/// sooner: the first's admission came after it was started, so the second
/// cannot end before a window has passed since then, and the time it says
/// it waited is time its process really took.
#[test]
fn check_wait_waits_for_the_turn_and_says_how_long() {
    let redis = Redis::start();
    let first_started = Instant::now();
    assert_eq!(check(&redis, &[])["allowed"], true);
    let second_started = Instant::now();
    let waited = check(&redis, &["--wait", "5s"]);
    let (since_first, second_took) = (first_started.elapsed(), second_started.elapsed());
    assert_eq!(waited["allowed"], true, "{waited}");
    let ms = waited["waited_ms"].as_u64().expect("waited_ms");
    assert!(
        since_first >= Duration::from_secs(1),
        "admitted {since_first:?} after the first check started, within its window: {waited}"
    );
    assert!(
        Duration::from_millis(ms) <= second_took,
        "says it waited {ms} ms, in a run of {second_took:?}"
    );
    assert!(
        ms > 0 && ms <= 1001,
        "waited {ms} ms for a turn at most a window away"
    );
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
