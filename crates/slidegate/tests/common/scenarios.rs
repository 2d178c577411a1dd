//! The scenarios users of rules with options have, as the documentation
//! tells them, at their real scale, on a store reading `clock`: run on
//! every store.

use std::time::Duration;

use slidegate::clock::ManualClock;
use slidegate::{Rule, Store};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// Five login attempts per 15 minutes, then locked out for an hour: the
/// sixth attempt is denied until the hour has passed (even once the
/// window has), and the first attempt after it passes.
pub async fn login_lockout<S: Store>(store: &S, clock: &ManualClock) {
    let login = Rule::parse("5/15m")
        .and_then(|rule| rule.block_for(HOUR))
        .expect("a valid rule");
    let attempt = async |what: &str| {
        let decision = store
            .acquire("login:10.0.0.1", &[login], 1)
            .await
            .expect("decided");
        (decision, what.to_owned())
    };
    for i in 0..5 {
        let (decision, _) = attempt("an attempt").await;
        assert!(decision.allowed(), "attempt {}: {decision:?}", i + 1);
        clock.advance(Duration::from_secs(10));
    }
    let (sixth, _) = attempt("the sixth").await;
    assert!(!sixth.allowed());
    assert_eq!(
        sixth.retry_after(),
        HOUR,
        "locked out for an hour: {sixth:?}"
    );
    assert_eq!(sixth.remaining(), 0);

    clock.advance(16 * MINUTE);
    let (after_window, _) = attempt("after the window").await;
    assert!(!after_window.allowed(), "{after_window:?}");
    assert_eq!(
        after_window.retry_after(),
        HOUR - 16 * MINUTE,
        "the rest of the block, not extended by the denial"
    );
    // A check (cost 0) sees the block too.
    let peek = store
        .acquire("login:10.0.0.1", &[login], 0)
        .await
        .expect("decided");
    assert!(!peek.allowed());
    // Another address is not locked out.
    assert!(
        store
            .acquire("login:10.0.0.2", &[login], 1)
            .await
            .expect("decided")
            .allowed()
    );

    clock.advance(HOUR - 16 * MINUTE);
    let (after_block, _) = attempt("after the block").await;
    assert!(
        after_block.allowed(),
        "admitted after the block: {after_block:?}"
    );
    assert_eq!(after_block.remaining(), 4);
}

/// Tokens reported after the call: a check with cost 0 passes, a report of
/// 150 against 100 per minute is denied and recorded, and checks are
/// denied until the 150 leave the window, exactly then.
pub async fn reported_usage<S: Store>(store: &S, clock: &ManualClock) {
    let tokens = Rule::parse("100/1m").expect("a valid rule");
    let check = async || {
        store
            .acquire("user:7", &[tokens], 0)
            .await
            .expect("decided")
    };
    assert!(check().await.allowed());
    clock.advance(Duration::from_secs(1));
    let report = store
        .acquire("user:7", &[tokens.reporting()], 150)
        .await
        .expect("decided");
    assert!(!report.allowed(), "{report:?}");
    assert_eq!(report.remaining(), 0);
    assert_eq!(report.retry_after(), MINUTE + Duration::from_micros(1));
    assert!(
        store.acquire("user:7", &[tokens], 150).await.is_err(),
        "without report, a cost over the limit is an error"
    );
    clock.advance(Duration::from_secs(30));
    let denied = check().await;
    assert!(!denied.allowed());
    assert_eq!(
        denied.retry_after(),
        Duration::from_secs(30) + Duration::from_micros(1),
        "when the usage leaves the window"
    );
    clock.advance(Duration::from_secs(30));
    assert!(
        !check().await.allowed(),
        "exactly a window old still counts"
    );
    clock.advance(Duration::from_micros(1));
    let after = check().await;
    assert!(after.allowed(), "{after:?}");
    assert_eq!(after.remaining(), 100);
}
