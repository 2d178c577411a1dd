//! Rules with options — usage reporting and lockouts — on the memory store
//! against the reference model, decision by decision, every field: random
//! sequences of clock advances, requests of one or several rules, batches,
//! reservations, over-limit reports, sweeps and resets, where each rule is
//! asked with or without its options (which share one state).

mod common;

use slidegate::store::memory::CompactString;
use std::time::Duration;

use common::boundary::next_boundary;
use common::burst::{burst, with_burst};
use common::cost::{Cost, cost};
use common::options::{Options, block, options, report_cost, resolve, with_options};
use common::reference::Reference;
use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{Algorithm, Hit, MemoryStore, Rate, Rule};

const KEYS: [&str; 2] = ["alice", "bob"];

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    AdvanceWindow(usize, i8),
    /// To the next boundary of a rule's window, -1, 0 or +1 µs.
    ToBoundary(usize, i8),
    Acquire {
        key: usize,
        rules: Vec<(usize, Options)>,
        cost: Cost,
    },
    Batch(Vec<(usize, usize, Options, Cost)>),
    Reserve {
        key: usize,
        rules: Vec<(usize, Options)>,
        cost: Cost,
        max_wait: u64,
    },
    Sweep,
    Reset(usize),
}

/// A base rule and the lockout it is asked with when bit 1 is set.
fn rule() -> impl Strategy<Value = (Rule, Duration)> {
    let limit = prop_oneof![4 => 1u64..=6, 1 => Just(100u64)];
    let window_us = prop_oneof![1_000u64..=5_000, 1_000u64..=3_000_000];
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (limit, window_us, algorithm, block(), burst()).prop_map(|(l, w, a, b, size)| {
        let rate = Rate::new(l, Duration::from_micros(w)).expect("valid rate");
        (with_burst(Rule::new(rate).with_algorithm(a), size), b)
    })
}

fn op(rules: usize) -> impl Strategy<Value = Op> {
    let options = options();
    let asked = (0..rules, options.clone());
    prop_oneof![
        3 => prop_oneof![Just(0u64), 0u64..3_000, 0u64..4_000_000].prop_map(Op::Advance),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::AdvanceWindow(r, d)),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::ToBoundary(r, d)),
        6 => (0..KEYS.len(), prop::collection::vec(asked.clone(), 1..=3), report_cost())
            .prop_map(|(key, rules, cost)| Op::Acquire { key, rules, cost }),
        2 => prop::collection::vec((0..KEYS.len(), 0..rules, options, report_cost()), 1..=4)
            .prop_map(Op::Batch),
        2 => (0..KEYS.len(), prop::collection::vec(asked, 1..=2), cost(), prop_oneof![Just(0u64), 0u64..5_000, 0u64..4_000_000])
            .prop_map(|(key, rules, cost, max_wait)| Op::Reserve { key, rules, cost, max_wait }),
        1 => Just(Op::Sweep),
        1 => (0..KEYS.len()).prop_map(Op::Reset),
    ]
}

fn scenario() -> impl Strategy<Value = (u64, Vec<(Rule, Duration)>, Vec<Op>)> {
    let start = prop_oneof![Just(0u64), 0u64..10_000_000, Just(1_763_800_000_000_000u64)];
    (start, prop::collection::vec(rule(), 1..=3)).prop_flat_map(|(start, rules)| {
        let n = rules.len();
        (
            Just(start),
            Just(rules),
            prop::collection::vec(op(n), 1..120),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn reports_and_lockouts_decide_like_the_reference((start, base, ops) in scenario()) {
        let clock = ManualClock::at(start);
        let store: MemoryStore<CompactString, ManualClock> =
            MemoryStore::builder().clock(clock.clone()).sweep_interval(None).build();
        let mut reference = Reference::default();
        let asked = |chosen: &[(usize, Options)]| -> Vec<Rule> {
            chosen.iter().map(|&(i, o)| with_options(base[i], o)).collect()
        };
        for (step, op) in ops.iter().enumerate() {
            match op {
                Op::Advance(us) => clock.advance(Duration::from_micros(*us)),
                Op::AdvanceWindow(r, delta) => {
                    let us = base[*r].0.window_micros().saturating_add_signed(*delta as i64);
                    clock.advance(Duration::from_micros(us));
                }
                Op::ToBoundary(r, delta) => {
                    let window = base[*r].0.window_micros();
                    clock.set(next_boundary(clock_now(&clock), window, *delta));
                }
                Op::Acquire { key, rules: chosen, cost } => {
                    let rs = asked(chosen);
                    let smallest = rs.iter().copied().min_by_key(|r| r.limit()).expect("a rule");
                    let c = resolve(*cost, smallest);
                    let got = store.acquire(KEYS[*key], &rs, c);
                    let want = reference.acquire(clock_now(&clock), KEYS[*key], &rs, c);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::Batch(hits) => {
                    let resolved: Vec<(String, Rule, u64)> = hits
                        .iter()
                        .map(|&(k, r, o, c)| {
                            let rule = with_options(base[r], o);
                            (KEYS[k].to_owned(), rule, resolve(c, rule))
                        })
                        .collect();
                    let batch: Vec<Hit<'_>> =
                        resolved.iter().map(|(k, r, c)| Hit::new(k.as_str(), *r, *c)).collect();
                    let got = store.acquire_batch(&batch);
                    let want = reference.acquire_batch(clock_now(&clock), &resolved);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::Reserve { key, rules: chosen, cost, max_wait } => {
                    let rs = asked(chosen);
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    let c = cost.resolve(limit);
                    let got = store
                        .reserve(KEYS[*key], &rs, c, Duration::from_micros(*max_wait))
                        .map(|r| (r.decision(), r.granted().then_some(r.wait().as_micros() as u64)));
                    let want = reference.reserve(clock_now(&clock), KEYS[*key], &rs, c, *max_wait);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::Sweep => {
                    store.sweep();
                }
                Op::Reset(key) => {
                    store.reset(KEYS[*key]);
                    reference.reset(KEYS[*key]);
                }
            }
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use slidegate::clock::Clock;
    clock.now_micros()
}
