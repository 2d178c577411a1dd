//! The memory store against the reference models, decision by decision,
//! every field, on random sequences of clock advances (onto window
//! boundaries and 1 µs either side too), keys, costs,
//! multi-rule calls, batches (short, and long with many repeated keys),
//! sweeps and resets.

mod common;

use slidegate::store::memory::CompactString;
use std::time::Duration;

use common::boundary::next_boundary;
use common::burst::{burst, with_burst};
use common::cost::{Cost, cost};
use common::reference::Reference;
use proptest::prelude::*;
use slidegate::clock::ManualClock;
use slidegate::{Algorithm, Hit, MemoryStore, Rate, Rule};

const KEYS: [&str; 3] = ["alice", "bob", "{tag}:carol"];

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    /// Exactly one window of a rule, plus -1, 0 or +1 µs: lands on boundaries.
    AdvanceWindow(usize, i8),
    /// To the next boundary of a rule's window (a multiple of it), -1, 0
    /// or +1 µs.
    ToBoundary(usize, i8),
    Acquire {
        key: usize,
        rules: Vec<usize>,
        cost: Cost,
    },
    Batch(Vec<(usize, usize, Cost)>),
    /// A reservation: wait up to `max_wait` µs for a turn.
    Reserve {
        key: usize,
        rules: Vec<usize>,
        cost: Cost,
        max_wait: u64,
    },
    /// A reservation of several hits, possibly on different keys and
    /// rules, all-or-nothing, at one time for all of them.
    ReserveBatch {
        hits: Vec<(usize, usize, Cost)>,
        max_wait: u64,
    },
    Sweep,
    Reset(usize),
}

fn rule() -> impl Strategy<Value = Rule> {
    let limit = prop_oneof![4 => 1u64..=8, 1 => Just(100u64), 1 => Just(1_000_000_000u64)];
    let window_us = prop_oneof![1_000u64..=5_000, 1_000u64..=3_000_000, Just(1_000_000u64)];
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (limit, window_us, algorithm, burst()).prop_map(|(l, w, a, b)| {
        let rule = Rule::new(Rate::new(l, Duration::from_micros(w)).expect("valid rate"))
            .with_algorithm(a);
        with_burst(rule, b)
    })
}

fn op(rules: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![Just(0u64), 0u64..2_000, 0u64..4_000_000].prop_map(Op::Advance),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::AdvanceWindow(r, d)),
        2 => (0..rules, -1i8..=1).prop_map(|(r, d)| Op::ToBoundary(r, d)),
        6 => (0..KEYS.len(), prop::collection::vec(0..rules, 1..=3), cost())
            .prop_map(|(key, rules, cost)| Op::Acquire { key, rules, cost }),
        2 => prop::collection::vec((0..KEYS.len(), 0..rules, cost()), 1..=4).prop_map(Op::Batch),
        // Long batches, mostly longer than the store scans (16 hits): their
        // keys and (key, rule) pairs are then hashed. Small costs, so that
        // many repeats of one key and rule still fit its limit now and then.
        1 => prop::collection::vec((0..KEYS.len(), 0..rules, small_cost()), 12..=40).prop_map(Op::Batch),
        3 => (0..KEYS.len(), prop::collection::vec(0..rules, 1..=3), cost(), prop_oneof![Just(0u64), 0u64..5_000, 0u64..4_000_000])
            .prop_map(|(key, rules, cost, max_wait)| Op::Reserve { key, rules, cost, max_wait }),
        3 => (prop::collection::vec((0..KEYS.len(), 0..rules, cost()), 1..=4), max_wait())
            .prop_map(|(hits, max_wait)| Op::ReserveBatch { hits, max_wait }),
        // Long ones too, hashed by the store as long batches are.
        1 => (prop::collection::vec((0..KEYS.len(), 0..rules, small_cost()), 12..=40), max_wait())
            .prop_map(|(hits, max_wait)| Op::ReserveBatch { hits, max_wait }),
        1 => Just(Op::Sweep),
        1 => (0..KEYS.len()).prop_map(Op::Reset),
    ]
}

/// No wait, a few ms, or seconds: from none to several windows.
fn max_wait() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..5_000, 0u64..4_000_000]
}

/// Mostly 0 or 1, sometimes any cost.
fn small_cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        3 => Just(Cost::Fixed(0)),
        6 => Just(Cost::Fixed(1)),
        1 => cost(),
    ]
}

fn scenario() -> impl Strategy<Value = (u64, Vec<Rule>, Vec<Op>)> {
    let start = prop_oneof![Just(0u64), 0u64..10_000_000, Just(1_763_800_000_000_000u64)];
    (start, prop::collection::vec(rule(), 1..=4)).prop_flat_map(|(start, rules)| {
        let n = rules.len();
        (
            Just(start),
            Just(rules),
            prop::collection::vec(op(n), 1..150),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_decides_like_the_reference((start, rules, ops) in scenario()) {
        let clock = ManualClock::at(start);
        let store: MemoryStore<CompactString, ManualClock> =
            MemoryStore::builder().clock(clock.clone()).sweep_interval(None).build();
        let mut reference = Reference::default();
        for (step, op) in ops.iter().enumerate() {
            match op {
                Op::Advance(us) => clock.advance(Duration::from_micros(*us)),
                Op::AdvanceWindow(r, delta) => {
                    let us = rules[*r].window_micros().saturating_add_signed(*delta as i64);
                    clock.advance(Duration::from_micros(us));
                }
                Op::ToBoundary(r, delta) => {
                    clock.set(next_boundary(clock_now(&clock), rules[*r].window_micros(), *delta));
                }
                Op::Acquire { key, rules: chosen, cost } => {
                    let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    let c = cost.resolve(limit);
                    let got = store.acquire(KEYS[*key], &rs, c);
                    let want = reference.acquire(clock_now(&clock), KEYS[*key], &rs, c);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::Batch(hits) => {
                    let resolved: Vec<(String, Rule, u64)> = hits
                        .iter()
                        .map(|&(k, r, c)| (KEYS[k].to_owned(), rules[r], c.resolve(rules[r].burst())))
                        .collect();
                    let batch: Vec<Hit<'_>> =
                        resolved.iter().map(|(k, r, c)| Hit::new(k.as_str(), *r, *c)).collect();
                    let got = store.acquire_batch(&batch);
                    let want = reference.acquire_batch(clock_now(&clock), &resolved);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::Reserve { key, rules: chosen, cost, max_wait } => {
                    let rs: Vec<Rule> = chosen.iter().map(|&i| rules[i]).collect();
                    let limit = rs.iter().map(|r| r.burst()).min().unwrap_or(1);
                    let c = cost.resolve(limit);
                    let got = store
                        .reserve(KEYS[*key], &rs, c, Duration::from_micros(*max_wait))
                        .map(|r| (r.decision(), r.granted().then_some(r.wait().as_micros() as u64)));
                    let want = reference.reserve(clock_now(&clock), KEYS[*key], &rs, c, *max_wait);
                    prop_assert_eq!(got, want, "step {} {:?}", step, op);
                }
                Op::ReserveBatch { hits, max_wait } => {
                    let resolved: Vec<(String, Rule, u64)> = hits
                        .iter()
                        .map(|&(k, r, c)| (KEYS[k].to_owned(), rules[r], c.resolve(rules[r].burst())))
                        .collect();
                    let batch: Vec<Hit<'_>> =
                        resolved.iter().map(|(k, r, c)| Hit::new(k.as_str(), *r, *c)).collect();
                    let got = store
                        .reserve_batch(&batch, Duration::from_micros(*max_wait))
                        .map(|r| {
                            let wait = r.granted().then_some(r.wait().as_micros() as u64);
                            (r.into_decisions(), wait)
                        });
                    let want = reference.reserve_batch(clock_now(&clock), &resolved, *max_wait);
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

/// What a key of `len` bytes holds besides its map entry: nothing up to
/// 24 bytes (inline in the entry), at least 32 bytes of heap beyond.
fn held_bytes(len: usize) -> usize {
    if len <= 24 { 0 } else { len.max(32) }
}

/// A store on `clock`, with no sweeper to move its state between steps.
fn store_on(clock: &ManualClock) -> MemoryStore<CompactString, ManualClock> {
    MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build()
}

/// One xorshift step: the deterministic sequence a test's steps are drawn from.
fn step_xorshift(x: &mut u64) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
}

/// String keys inline in their entry (0, 23 and 24 bytes) and on the heap
/// (25 and 1,000 bytes), each beside one differing only in its last byte
/// (or its length), decide as the reference model does whether looked up
/// by `&str` or by `&String`, and are counted in `bytes()` exactly: a map
/// entry each, plus their heap text.
#[test]
fn string_keys_inline_and_spilled_decide_like_the_reference_and_are_counted_exactly() {
    const ENTRY: usize = 64 + 1;
    let rules = [
        Rule::parse("3/1s").expect("a valid rule"),
        Rule::parse("5/10s").expect("a valid rule"),
    ];
    for len in [0usize, 23, 24, 25, 1_000] {
        let base = "k".repeat(len);
        let keys = [base.clone(), format!("{}x", &base[..len.saturating_sub(1)])];
        let clock = ManualClock::at(1 << 40);
        let store = store_on(&clock);
        let mut reference = Reference::default();
        let mut x = 11u64;
        for step in 0..400 {
            step_xorshift(&mut x);
            clock.advance(Duration::from_micros(
                [0, 1, 97_000, 400_000][(x % 4) as usize],
            ));
            let key = &keys[(x >> 8) as usize % 2];
            let chosen = &rules[..1 + (x >> 16) as usize % 2];
            let cost = (x >> 24) % 3;
            let now = clock_now(&clock);
            let want = reference.acquire(now, key, chosen, cost);
            let got = if x >> 32 & 1 == 0 {
                store.acquire(key.as_str(), chosen, cost)
            } else {
                store.acquire(key, chosen, cost)
            };
            assert_eq!(got, want, "{len} bytes, step {step}");
        }
        let held: usize = keys.iter().map(|key| ENTRY + held_bytes(key.len())).sum();
        let stats = store.stats();
        assert_eq!(stats.keys, 2, "{len} bytes");
        assert_eq!(stats.key_bytes, held, "{len} bytes");
        assert_eq!(store.bytes(), held + stats.heap_bytes, "{len} bytes");
        // Found by `&String` and by `&str` alike: one entry per key.
        assert!(store.reset(&keys[0]));
        assert!(!store.reset(keys[0].as_str()));
        assert_eq!(store.len(), 1, "{len} bytes");
        assert_eq!(
            store.bytes(),
            ENTRY + held_bytes(keys[1].len()) + store.stats().heap_bytes,
            "{len} bytes"
        );
    }
}

/// Windows past what a memory slot keeps inline (a ring from the first
/// admission, whose base moves every 9 minutes or so) and past an hour (a
/// box) decide as the reference model does, across many windows, and hold
/// the admissions that still count.
#[test]
fn long_windows_decide_like_the_reference() {
    for text in ["40/5m", "40/1h", "40/1d"] {
        let rule = Rule::parse(text).expect("a valid rule");
        let clock = ManualClock::at(1 << 40);
        let store = store_on(&clock);
        let mut reference = Reference::default();
        let window = rule.window_micros();
        let mut x = 7u64;
        for step in 0..1_000 {
            step_xorshift(&mut x);
            clock.advance(Duration::from_micros(
                [0, 1, 997, window / 7, window / 3][(x % 5) as usize],
            ));
            let cost = 1 + x % 4;
            let now = clock_now(&clock);
            assert_eq!(
                store.acquire("k", &[rule], cost),
                reference.acquire(now, "k", &[rule], cost),
                "{text} step {step}"
            );
            assert_eq!(
                store.admissions("k", rule).unwrap_or_default(),
                reference.admissions("k", rule, now),
                "{text} step {step}"
            );
        }
        let stats = store.stats();
        assert_eq!(stats.key_bytes + stats.heap_bytes, store.bytes(), "{text}");
    }
}
