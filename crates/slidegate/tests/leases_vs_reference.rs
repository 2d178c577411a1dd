//! Leases against a reference model, on the memory store and on a real
//! redis-server (the caller's clock, moved by the test): random
//! reservations, commits, releases, plain decisions and steps of time on a
//! sliding-log budget, and on a concurrency limit. After every step both
//! stores answer what the model says.

mod common;

use std::time::Duration;

use common::redis_server::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use slidegate::clock::{Clock, ManualClock};
use slidegate::{Error, MemoryStore, RedisStore, Rule, Store};

const LIMIT: u64 = 10;
const WINDOW_US: u64 = 1_000_000;
const PLACES: u64 = 3;

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Reserve { cost: u64, time_ms: u64 },
    Commit { lease: usize, cost: u64 },
    Release { lease: usize },
    Acquire { cost: u64 },
    Hold { time_ms: u64 },
    Free { lease: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..400_000).prop_map(Op::Advance),
        1 => prop_oneof![Just(1), Just(WINDOW_US), Just(WINDOW_US + 1)].prop_map(Op::Advance),
        3 => (1u64..=LIMIT, 1u64..=1000).prop_map(|(cost, time_ms)| Op::Reserve { cost, time_ms }),
        2 => (0usize..8, 0u64..=2 * LIMIT).prop_map(|(lease, cost)| Op::Commit { lease, cost }),
        1 => (0usize..8).prop_map(|lease| Op::Release { lease }),
        1 => (1u64..=LIMIT).prop_map(|cost| Op::Acquire { cost }),
        2 => (1u64..=800).prop_map(|time_ms| Op::Hold { time_ms }),
        2 => (0usize..8).prop_map(|lease| Op::Free { lease }),
    ]
}

/// The model: a sliding log of admissions by time (admissions of one
/// microsecond add up in one entry, as the stores keep them), budget
/// leases naming the time of the admission they made, and places held
/// until their expiry. Usage a report takes past the limit keeps only the
/// newest `LIMIT` units (SEMANTICS.md, "Bounded"); a give-back takes its
/// cost from the entry of its time when that entry still holds it, and
/// otherwise changes nothing (SEMANTICS.md, leases).
#[derive(Default)]
struct Model {
    log: Vec<(u64, u64)>,
    /// Budget leases: (admission time, reserved, expiry, open).
    budgets: Vec<(u64, u64, u64, bool)>,
    /// Places: (expiry, open).
    places: Vec<(u64, bool)>,
}

impl Model {
    fn used(&self, now: u64) -> u64 {
        self.log
            .iter()
            // An admission at `t` counts through `t + W` (it leaves one
            // microsecond later, as `reset_after` says).
            .filter(|(t, _)| now <= t + WINDOW_US)
            .map(|(_, c)| c)
            .sum()
    }

    fn admit(&mut self, now: u64, cost: u64) {
        match self.log.last_mut() {
            Some((t, c)) if *t == now => *c += cost,
            _ => self.log.push((now, cost)),
        }
    }

    /// After a report: only the newest `LIMIT` units in the window stay.
    fn trim(&mut self, now: u64) {
        let mut excess = self.used(now).saturating_sub(LIMIT);
        for (t, c) in &mut self.log {
            if excess == 0 {
                break;
            }
            if now <= *t + WINDOW_US {
                let cut = excess.min(*c);
                *c -= cut;
                excess -= cut;
            }
        }
    }

    fn give_back(&mut self, at: u64, cost: u64) {
        if let Some((_, c)) = self.log.iter_mut().find(|(t, _)| *t == at)
            && *c >= cost
        {
            *c -= cost;
        }
    }

    fn held(&self, now: u64) -> u64 {
        self.places
            .iter()
            .filter(|(e, open)| *open && now < *e)
            .count() as u64
    }
}

/// What a store did, to compare with the model: granted or not, or the
/// error, and the remaining budget and places after the step.
type Seen = (Option<bool>, Option<Error>, u64, u64);

async fn step<S: Store>(
    store: &S,
    clock: &ManualClock,
    ids: &mut Vec<String>,
    places_ids: &mut Vec<String>,
    op: &Op,
) -> Seen {
    let budget = Rule::parse("10/1s").unwrap();
    let places = Rule::concurrency(PLACES).unwrap();
    let mut granted = None;
    let mut error = None;
    match *op {
        Op::Advance(us) => clock.advance(Duration::from_micros(us)),
        Op::Reserve { cost, time_ms } => {
            match store
                .reserve_lease("k", &[budget], cost, Duration::from_millis(time_ms))
                .await
            {
                Ok(lease) => {
                    granted = Some(lease.granted());
                    if let Some(id) = lease.into_id() {
                        ids.push(id);
                    }
                }
                Err(e) => error = Some(e),
            }
        }
        Op::Commit { lease, cost } => {
            if let Some(id) = ids.get(lease) {
                match store.commit(id, Some("k"), cost).await {
                    Ok(settled) => granted = Some(!settled.over_limit()),
                    Err(e) => error = Some(e),
                }
            }
        }
        Op::Release { lease } => {
            if let Some(id) = ids.get(lease) {
                error = store.release(id, None).await.err();
            }
        }
        Op::Acquire { cost } => {
            granted = Some(store.acquire("k", &[budget], cost).await.unwrap().allowed());
        }
        Op::Hold { time_ms } => {
            let lease = store
                .reserve_lease("p", &[places], 1, Duration::from_millis(time_ms))
                .await
                .unwrap();
            granted = Some(lease.granted());
            if let Some(id) = lease.into_id() {
                places_ids.push(id);
            }
        }
        Op::Free { lease } => {
            if let Some(id) = places_ids.get(lease) {
                error = store.release(id, Some("p")).await.err();
            }
        }
    }
    // Past its retention an id is forgotten (not found) in the memory
    // store, while Redis, whose records expire on its own clock, still
    // knows it expired: the same answer for this model, "not open".
    if error == Some(Error::LeaseNotFound) {
        error = Some(Error::LeaseExpired);
    }
    let remaining = store.peek("k", &[budget]).await.unwrap().remaining();
    let free = store.peek("p", &[places]).await.unwrap().remaining();
    (granted, error, remaining, free)
}

fn model_step(model: &mut Model, now: &mut u64, op: &Op, n_ids: usize, n_places: usize) -> Seen {
    let mut granted = None;
    let mut error = None;
    match *op {
        Op::Advance(us) => *now += us,
        Op::Reserve { cost, time_ms } => {
            let fits = model.used(*now) + cost <= LIMIT;
            granted = Some(fits);
            if fits {
                model.admit(*now, cost);
                model
                    .budgets
                    .push((*now, cost, *now + time_ms * 1000, true));
            }
        }
        Op::Commit { lease, cost } if lease < n_ids => {
            let (at, reserved, expires, open) = model.budgets[lease];
            if !open || *now >= expires {
                error = Some(Error::LeaseExpired);
            } else {
                model.budgets[lease].3 = false;
                if cost <= reserved {
                    model.give_back(at, reserved - cost);
                    granted = Some(true);
                } else {
                    let extra = cost - reserved;
                    let over = model.used(*now) + extra > LIMIT;
                    model.admit(*now, extra);
                    model.trim(*now);
                    granted = Some(!over);
                }
            }
        }
        Op::Release { lease } if lease < n_ids => {
            let (at, reserved, expires, open) = model.budgets[lease];
            if !open || *now >= expires {
                error = Some(Error::LeaseExpired);
            } else {
                model.budgets[lease].3 = false;
                model.give_back(at, reserved);
            }
        }
        Op::Acquire { cost } => {
            let fits = model.used(*now) + cost <= LIMIT;
            granted = Some(fits);
            if fits {
                model.admit(*now, cost);
            }
        }
        Op::Hold { time_ms } => {
            let fits = model.held(*now) < PLACES;
            granted = Some(fits);
            if fits {
                model.places.push((*now + time_ms * 1000, true));
            }
        }
        Op::Free { lease } if lease < n_places => {
            let (expires, open) = model.places[lease];
            if !open || *now >= expires {
                error = Some(Error::LeaseExpired);
            } else {
                model.places[lease].1 = false;
            }
        }
        _ => {}
    }
    let remaining = LIMIT.saturating_sub(model.used(*now));
    let free = PLACES - model.held(*now);
    (granted, error, remaining, free)
}

async fn run<S: Store>(store: &S, clock: &ManualClock, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut now = clock.now_micros();
    let (mut ids, mut places_ids) = (Vec::new(), Vec::new());
    for (i, op) in ops.iter().enumerate() {
        let (n_ids, n_places) = (ids.len(), places_ids.len());
        let seen = step(store, clock, &mut ids, &mut places_ids, op).await;
        let want = model_step(&mut model, &mut now, op, n_ids, n_places);
        prop_assert_eq!(&seen, &want, "step {} {:?}", i, op);
    }
    Ok(())
}

fn cases() -> Config {
    Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    }
}

#[test]
fn the_memory_store_leases_like_the_model() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    TestRunner::new(cases())
        .run(&proptest::collection::vec(op(), 1..60), |ops| {
            let clock = ManualClock::at(10 * WINDOW_US);
            let store = MemoryStore::builder()
                .clock(clock.clone())
                .sweep_interval(None)
                .build();
            runtime.block_on(run(&store, &clock, &ops))
        })
        .unwrap();
}

#[test]
fn redis_leases_like_the_model() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    TestRunner::new(cases())
        .run(&proptest::collection::vec(op(), 1..60), |ops| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let clock = ManualClock::at(10 * WINDOW_US);
            runtime.block_on(async {
                let store = RedisStore::builder(server.url())
                    .prefix(format!("case{case}"))
                    .client_clock(clock.clone())
                    .timeout(Duration::from_secs(2))
                    .build()
                    .await
                    .unwrap();
                run(&store, &clock, &ops).await
            })
        })
        .unwrap();
}
