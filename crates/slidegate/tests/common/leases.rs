//! Lease scenarios every store must pass (the memory store, Redis, Redis
//! Cluster), on a clock the test moves.

use std::sync::Arc;
use std::time::Duration;

use slidegate::clock::ManualClock;
use slidegate::{Error, Rule, Store};

pub const MINUTE: Duration = Duration::from_secs(60);

fn tokens() -> Rule {
    Rule::parse("5000/1m").unwrap()
}

/// Ten concurrent reservations of 1,000 on 5,000 per minute: exactly
/// five leases. Committing 200 each gives 4,000 back: four more of 1,000
/// pass, a fifth does not.
pub async fn ten_reservations_on_five_thousand<S: Store + 'static>(store: Arc<S>, key: &str) {
    let rule = tokens();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (store, key) = (Arc::clone(&store), key.to_owned());
            tokio::spawn(async move { store.reserve_lease(&key, &[rule], 1_000, MINUTE).await })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        let lease = task.await.unwrap().unwrap();
        if let Some(id) = lease.id() {
            ids.push(id.to_owned());
        } else {
            assert!(!lease.decision().allowed());
            assert!(lease.decision().retry_after() > Duration::ZERO);
        }
    }
    assert_eq!(ids.len(), 5, "exactly five leases of 1,000 fit 5,000");
    let peek = store.peek(key, &[rule]).await.unwrap();
    assert_eq!(peek.remaining(), 0);
    for (i, id) in ids.iter().enumerate() {
        let settled = store.commit(id, Some(key), 200).await.unwrap();
        assert!(!settled.over_limit());
        assert_eq!(settled.decision().remaining(), 800 * (i as u64 + 1));
    }
    for _ in 0..4 {
        let lease = store
            .reserve_lease(key, &[rule], 1_000, MINUTE)
            .await
            .unwrap();
        assert!(lease.granted(), "the 4,000 given back are taken again");
    }
    let fifth = store
        .reserve_lease(key, &[rule], 1_000, MINUTE)
        .await
        .unwrap();
    assert!(
        !fifth.granted(),
        "1,000 committed and 4,000 reserved fill 5,000"
    );
}

/// A commit above the reservation is taken as a report: usage passes the
/// limit and the commit says so; later requests wait until it is back
/// under.
pub async fn a_commit_above_the_reservation_goes_over_the_limit<S: Store>(store: &S, key: &str) {
    let rule = Rule::parse("100/1m").unwrap();
    let lease = store.reserve_lease(key, &[rule], 60, MINUTE).await.unwrap();
    let within = store.reserve_lease(key, &[rule], 30, MINUTE).await.unwrap();
    let settled = store.commit(within.id().unwrap(), None, 40).await.unwrap();
    assert!(!settled.over_limit(), "100 used of 100");
    assert_eq!(settled.decision().remaining(), 0);
    let settled = store
        .commit(lease.id().unwrap(), Some(key), 90)
        .await
        .unwrap();
    assert!(settled.over_limit(), "130 used of 100");
    assert!(!settled.decision().allowed());
    assert!(!store.acquire(key, &[rule], 1).await.unwrap().allowed());
}

/// A lease nobody settles is charged in full once its time runs out; a
/// commit or release after that is refused and changes nothing.
pub async fn an_expired_lease_is_charged_in_full<S: Store>(
    store: &S,
    clock: &ManualClock,
    key: &str,
) {
    let rule = Rule::parse("10/1m").unwrap();
    let lease = store
        .reserve_lease(key, &[rule], 4, Duration::from_secs(5))
        .await
        .unwrap();
    let id = lease.id().unwrap().to_owned();
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        store.commit(&id, Some(key), 1).await.err(),
        Some(Error::LeaseExpired)
    );
    assert_eq!(
        store.release(&id, Some(key)).await.err(),
        Some(Error::LeaseExpired)
    );
    assert_eq!(
        store.peek(key, &[rule]).await.unwrap().remaining(),
        6,
        "charged in full"
    );
    // The id is kept at least the lease time plus the window.
    clock.advance(MINUTE - Duration::from_millis(1));
    assert_eq!(
        store.release(&id, None).await.err(),
        Some(Error::LeaseExpired)
    );
}

/// An id that was never given out, one of another key and one mangled are
/// all refused alike, and change nothing.
pub async fn unknown_ids_and_other_keys_are_not_found<S: Store>(store: &S, key: &str, other: &str) {
    let rule = Rule::parse("10/1m").unwrap();
    let lease = store.reserve_lease(key, &[rule], 3, MINUTE).await.unwrap();
    let id = lease.id().unwrap().to_owned();
    let mut unknown = id.clone();
    let last = unknown.pop().unwrap();
    unknown.push(if last == '0' { '1' } else { '0' });
    for (id, key) in [
        (unknown.as_str(), Some(key)),
        (unknown.as_str(), None),
        (id.as_str(), Some(other)),
        ("not a lease", Some(key)),
        ("", None),
    ] {
        assert_eq!(
            store.commit(id, key, 1).await.err(),
            Some(Error::LeaseNotFound)
        );
        assert_eq!(
            store.release(id, key).await.err(),
            Some(Error::LeaseNotFound)
        );
    }
    assert_eq!(
        store.peek(key, &[rule]).await.unwrap().remaining(),
        7,
        "nothing changed"
    );
    store.release(&id, Some(key)).await.unwrap();
    assert_eq!(store.peek(key, &[rule]).await.unwrap().remaining(), 10);
}

/// A store of at most `max` open leases (built so) refuses one more with
/// nothing recorded, and counts a lease no more once it is settled or its
/// time ran out.
pub async fn open_leases_are_bounded<S: Store>(
    store: &S,
    clock: &ManualClock,
    max: usize,
    key: &str,
) {
    let rule = Rule::parse("1000/1m").unwrap();
    let mut ids = Vec::new();
    for i in 0..max {
        let time = if i == 0 {
            Duration::from_secs(1)
        } else {
            MINUTE
        };
        let lease = store.reserve_lease(key, &[rule], 1, time).await.unwrap();
        ids.push(lease.into_id().unwrap());
    }
    assert_eq!(
        store.reserve_lease(key, &[rule], 1, MINUTE).await.err(),
        Some(Error::TooManyLeases { max })
    );
    let used = 1000 - store.peek(key, &[rule]).await.unwrap().remaining();
    assert_eq!(used, max as u64, "the refused lease recorded nothing");
    store.release(&ids[1], None).await.unwrap();
    assert!(
        store
            .reserve_lease(key, &[rule], 1, MINUTE)
            .await
            .unwrap()
            .granted()
    );
    assert!(store.reserve_lease(key, &[rule], 1, MINUTE).await.is_err());
    clock.advance(Duration::from_secs(1));
    assert!(
        store
            .reserve_lease(key, &[rule], 1, MINUTE)
            .await
            .unwrap()
            .granted(),
        "the first lease expired: it no longer counts"
    );
}

/// Places: at most L held, freed by a release (once) or by their time;
/// a commit of places is refused and frees nothing.
pub async fn places_are_held_released_and_expire<S: Store>(
    store: &S,
    clock: &ManualClock,
    key: &str,
) {
    let places = Rule::concurrency(2).unwrap();
    let a = store
        .reserve_lease(key, &[places], 1, Duration::from_secs(10))
        .await
        .unwrap();
    let b = store
        .reserve_lease(key, &[places], 1, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(b.decision().remaining(), 0);
    let c = store
        .reserve_lease(key, &[places], 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!c.granted());
    assert_eq!(
        c.decision().retry_after(),
        Duration::from_secs(10),
        "until the earliest expiry"
    );
    assert_eq!(
        store.commit(a.id().unwrap(), None, 1).await.err(),
        Some(Error::NotCommittable)
    );
    assert!(
        !store
            .reserve_lease(key, &[places], 1, Duration::from_secs(10))
            .await
            .unwrap()
            .granted()
    );
    let released = store.release(a.id().unwrap(), Some(key)).await.unwrap();
    assert_eq!(released.decision().remaining(), 1);
    assert_eq!(
        store.release(a.id().unwrap(), None).await.err(),
        Some(Error::LeaseExpired),
        "a second release frees nothing"
    );
    let d = store
        .reserve_lease(key, &[places], 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(d.granted());
    assert_eq!(store.peek(key, &[places]).await.unwrap().remaining(), 0);
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        store.peek(key, &[places]).await.unwrap().remaining(),
        1,
        "d's time ran out"
    );
    assert_eq!(
        store.release(d.id().unwrap(), None).await.err(),
        Some(Error::LeaseExpired)
    );
    assert_eq!(
        store.peek(key, &[places]).await.unwrap().remaining(),
        1,
        "freeing nothing"
    );
    assert_eq!(
        store.acquire(key, &[places], 1).await.err(),
        Some(Error::LeaseRequired)
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(store.peek(key, &[places]).await.unwrap().remaining(), 2);
}

/// A waiter for places is served once one is released, before a request
/// that came later; one that waits too long is denied and leaves the
/// queue.
pub async fn waiters_for_places_are_served_in_order<S: Store + 'static>(store: Arc<S>, key: &str) {
    let places = Rule::concurrency(1).unwrap();
    let held = store
        .reserve_lease(key, &[places], 1, MINUTE)
        .await
        .unwrap();
    let first = {
        let (store, key) = (Arc::clone(&store), key.to_owned());
        tokio::spawn(async move {
            store
                .reserve_lease_wait(&key, &[places], 1, MINUTE, Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = store
        .reserve_lease(key, &[places], 1, MINUTE)
        .await
        .unwrap();
    assert!(!late.granted(), "nothing is free yet");
    store.release(held.id().unwrap(), Some(key)).await.unwrap();
    let late = store
        .reserve_lease(key, &[places], 1, MINUTE)
        .await
        .unwrap();
    let first = first.await.unwrap().unwrap();
    assert!(first.granted(), "the waiter takes the place released");
    assert!(first.waited() >= Duration::from_millis(100));
    assert!(
        !late.granted(),
        "a later request never passes ahead of a waiter"
    );
    let gives_up = store
        .reserve_lease_wait(key, &[places], 1, MINUTE, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(!gives_up.granted());
    store.release(first.id().unwrap(), None).await.unwrap();
    assert!(
        store
            .reserve_lease(key, &[places], 1, MINUTE)
            .await
            .unwrap()
            .granted(),
        "the waiter that gave up left the queue"
    );
}
