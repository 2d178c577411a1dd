//! Usage reporting and lockouts on the memory store, at their real scale
//! (see `common/scenarios.rs`; the Redis store runs the same in
//! `redis_options.rs`).

mod common;

use slidegate::MemoryStore;
use slidegate::clock::ManualClock;
use slidegate::store::memory::CompactString;

fn store() -> (MemoryStore<CompactString, ManualClock>, ManualClock) {
    let clock = ManualClock::at(1_763_800_000_000_000);
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build();
    (store, clock)
}

#[tokio::test]
async fn a_login_is_locked_out_for_an_hour_after_five_attempts_in_15_minutes() {
    let (store, clock) = store();
    common::scenarios::login_lockout(&store, &clock).await;
}

#[tokio::test]
async fn reported_usage_over_the_limit_is_denied_until_it_leaves_the_window() {
    let (store, clock) = store();
    common::scenarios::reported_usage(&store, &clock).await;
}

#[test]
fn a_blocked_key_is_not_swept_until_its_block_ends() {
    let (store, clock) = store();
    let rule = slidegate::Rule::parse("1/1s")
        .and_then(|r| r.block_for(std::time::Duration::from_secs(60)))
        .expect("a valid rule");
    assert!(store.acquire("k", &[rule], 1).expect("decided").allowed());
    assert!(!store.acquire("k", &[rule], 1).expect("decided").allowed());
    clock.advance(std::time::Duration::from_secs(30));
    assert_eq!(store.sweep(), 0, "the window is empty, the block is not");
    assert!(!store.acquire("k", &[rule], 1).expect("decided").allowed());
    clock.advance(std::time::Duration::from_secs(31));
    assert_eq!(store.sweep(), 1);
    assert!(store.acquire("k", &[rule], 1).expect("decided").allowed());
}
