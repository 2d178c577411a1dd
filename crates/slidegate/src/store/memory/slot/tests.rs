//! A slot's forms and the moves between them, with the bytes they count;
//! and batches over slots.

use super::*;
use crate::error::Error;
use crate::store::memory::batch::{Locked, LockedHit, decide_all};
use crate::store::memory::rules::MAX_RULES;

fn rule(text: &str) -> Rule {
    Rule::parse(text).unwrap()
}

/// Rules `1/1s`, `2/1s`, ... : distinct rules of one window.
fn nth_rule(n: u64) -> Rule {
    rule(&format!("{}/1s", n + 1))
}

/// A key of no bytes, its shard's rules, and bounds allowing `max_bytes`
/// and `max_rules` rules per key.
fn key(max_bytes: usize, max_rules: usize) -> (Slot, RuleTable, Bounds) {
    (
        Slot::empty(0),
        RuleTable::default(),
        Bounds::new(10, max_bytes, max_rules),
    )
}

fn batch(
    slot: &mut Slot,
    rules: &mut RuleTable,
    hits: &[(Rule, u64)],
    now: u64,
    bounds: &Bounds,
) -> Result<Vec<Decision>> {
    let hits: Vec<LockedHit> = hits
        .iter()
        .map(|&(rule, cost)| LockedHit::new(0, rule, cost))
        .collect();
    let mut keys = Locked {
        slots: std::slice::from_mut(slot),
        tables: &mut [rules],
        table_of: &[0],
    };
    decide_all(&mut keys, &hits, now, bounds)
}

#[test]
fn a_short_log_stays_in_the_slot_and_a_longer_one_moves_to_a_ring_and_back() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    let r = rule("100/1s");
    for t in 0..INLINE as u64 {
        assert!(
            slot.decide_one(r, t, 1, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
    }
    assert!(matches!(slot, Slot::Inline { len: 6, .. }));
    assert_eq!(bounds.bytes(), 0, "inline entries take no heap");
    slot.decide_one(r, 6, 1, &bounds, &mut rules).unwrap();
    assert!(matches!(slot, Slot::Spilled { usage: 7, .. }));
    assert_eq!(bounds.bytes(), slot.heap_bytes());
    assert_eq!(
        slot.admissions(r, &rules).unwrap(),
        (0..7).map(|t| (t, 1)).collect::<Vec<_>>()
    );
    // A second later only the new admission counts: back in the slot.
    slot.decide_one(r, 1_000_010, 1, &bounds, &mut rules)
        .unwrap();
    assert!(matches!(slot, Slot::Inline { len: 1, .. }));
    assert_eq!(bounds.bytes(), 0, "the ring was given back");
    assert_eq!(slot.admissions(r, &rules).unwrap(), [(1_000_010, 1)]);
}

#[test]
fn a_cost_too_large_for_an_inline_entry_moves_the_log_to_a_ring() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    // A minute's window leaves 6 bits for an inline cost: at most 63.
    let r = rule("1000/1m");
    slot.decide_one(r, 0, 63, &bounds, &mut rules).unwrap();
    assert!(matches!(slot, Slot::Inline { .. }));
    slot.decide_one(r, 0, 1, &bounds, &mut rules).unwrap();
    assert!(matches!(slot, Slot::Spilled { usage: 64, .. }));
    assert_eq!(slot.admissions(r, &rules).unwrap(), [(0, 64)]);
}

#[test]
fn windows_past_the_inline_width_use_a_ring_and_past_an_hour_a_box() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    slot.decide_one(rule("10/1h"), 0, 1, &bounds, &mut rules)
        .unwrap();
    assert!(matches!(slot, Slot::Spilled { usage: 1, .. }));
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    slot.decide_one(rule("10/1d"), 0, 1, &bounds, &mut rules)
        .unwrap();
    assert!(matches!(slot, Slot::Many(_)));
    assert_eq!(bounds.bytes(), slot.heap_bytes());
}

#[test]
fn sliding_logs_of_limits_over_u32_max_keep_their_states_in_a_box() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    let r = rule("5000000000/1s");
    for _ in 0..2 {
        assert!(
            slot.decide_one(r, 0, 2_500_000_000, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
    }
    assert!(matches!(slot, Slot::Many(_)));
    assert_eq!(
        slot.decide_one(r, 0, 1, &bounds, &mut rules)
            .map(|d| d.allowed()),
        Ok(false)
    );
    assert_eq!(bounds.bytes(), slot.heap_bytes());
}

#[test]
fn other_algorithms_keep_their_state_in_the_slot() {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingCounter,
    ] {
        let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
        let r = rule("5/1s").with_algorithm(algorithm);
        assert!(
            slot.decide_one(r, 0, 1, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
        assert!(
            !matches!(slot, Slot::Many(_) | Slot::Empty { .. }),
            "{algorithm}"
        );
        assert_eq!(
            slot.decide_one(r, 0, 1, &bounds, &mut rules)
                .map(|d| d.remaining()),
            Ok(3)
        );
        assert_eq!(bounds.bytes(), 0);
    }
}

#[test]
fn a_second_rule_boxes_the_states_and_keeps_the_first() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    let (a, b) = (rule("3/1s"), rule("5/1s").with_algorithm(Algorithm::Gcra));
    slot.decide_one(a, 0, 2, &bounds, &mut rules).unwrap();
    slot.decide_one(b, 10, 1, &bounds, &mut rules).unwrap();
    assert!(matches!(slot, Slot::Many(_)));
    assert_eq!(slot.check(a, 20, 0, &bounds, &rules).remaining(), 1);
    assert_eq!(slot.check(b, 20, 0, &bounds, &rules).remaining(), 4);
    assert_eq!(bounds.bytes(), slot.heap_bytes(), "the count follows");
}

#[test]
fn a_rule_that_finds_the_table_full_is_kept_in_full() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    for n in 0..MAX_RULES as u64 {
        rules.intern(nth_rule(n + 100));
    }
    slot.decide_one(nth_rule(0), 0, 1, &bounds, &mut rules)
        .unwrap();
    assert!(matches!(slot, Slot::Many(_)));
    assert_eq!(
        slot.check(nth_rule(0), 0, 0, &bounds, &rules).remaining(),
        0
    );
}

#[test]
fn a_new_rule_at_the_cap_replaces_an_idle_state() {
    for max_rules in [1, 2] {
        let (mut slot, mut rules, bounds) = key(usize::MAX, max_rules);
        slot.decide_one(nth_rule(0), 0, 1, &bounds, &mut rules)
            .unwrap();
        if max_rules == 2 {
            slot.decide_one(nth_rule(1), 500_000, 1, &bounds, &mut rules)
                .unwrap();
        }
        // At 1.2 s rule 0's admission (at 0) is more than a window old.
        let third = slot
            .decide_one(nth_rule(2), 1_200_000, 1, &bounds, &mut rules)
            .unwrap();
        assert!(third.allowed());
        assert!(!slot.holds(nth_rule(0), &rules), "max {max_rules}");
        assert!(slot.holds(nth_rule(2), &rules), "max {max_rules}");
        assert_eq!(slot.count().0, max_rules);
        assert_eq!(slot.heap_bytes(), bounds.bytes(), "the count follows");
    }
}

#[test]
fn a_new_rule_at_the_cap_is_refused_when_none_is_idle() {
    for max_rules in [1, 2] {
        let (mut slot, mut rules, bounds) = key(usize::MAX, max_rules);
        for n in 0..max_rules as u64 {
            slot.decide_one(nth_rule(n), 0, 1, &bounds, &mut rules)
                .unwrap();
        }
        let third = nth_rule(2);
        assert_eq!(
            slot.decide_one(third, 1_000, 1, &bounds, &mut rules),
            Err(Error::TooManyRules { max: max_rules })
        );
        // Probes of a new rule need no state and are answered.
        assert!(
            slot.decide_one(third, 1_000, 0, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
        // The held rules are served as before.
        assert_eq!(
            slot.decide_one(nth_rule(0), 1_000, 1, &bounds, &mut rules)
                .map(|d| d.allowed()),
            Ok(false)
        );
        assert_eq!(slot.count().0, max_rules);
    }
}

#[test]
fn a_batch_never_replaces_a_state_it_uses() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 2);
    // Both idle by 2 s.
    slot.decide_one(nth_rule(0), 0, 1, &bounds, &mut rules)
        .unwrap();
    slot.decide_one(nth_rule(1), 0, 1, &bounds, &mut rules)
        .unwrap();
    let three = [(nth_rule(2), 1), (nth_rule(0), 1), (nth_rule(1), 1)];
    // Three distinct rules cannot fit two places, even though both held
    // states are idle.
    assert_eq!(
        batch(&mut slot, &mut rules, &three, 2_000_000, &bounds),
        Err(Error::TooManyRules { max: 2 })
    );
    // Two fit: rule 5 replaces the idle rule 1, rule 0 keeps its place.
    let two = [(nth_rule(5), 1), (nth_rule(0), 1)];
    let ds = batch(&mut slot, &mut rules, &two, 2_000_000, &bounds).unwrap();
    assert!(ds.iter().all(Decision::allowed));
    assert!(slot.holds(nth_rule(0), &rules) && slot.holds(nth_rule(5), &rules));
    assert!(!slot.holds(nth_rule(1), &rules));
}

#[test]
fn a_log_that_cannot_grow_refuses_and_records_nothing() {
    // An hour's window: a ring from the first admission. Room for the
    // ring's header and 4 entries (64 bytes), not for 8.
    let r = rule("1000/1h");
    let (mut slot, mut rules, bounds) = key(64, 16);
    for t in 0..4 {
        assert!(
            slot.decide_one(r, t, 1, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
    }
    assert_eq!(bounds.bytes(), 64);
    assert_eq!(
        slot.decide_one(r, 4, 1, &bounds, &mut rules),
        Err(bounds.bytes_error())
    );
    // Same microsecond as the newest entry: merged, no growth needed.
    assert!(
        slot.decide_one(r, 3, 1, &bounds, &mut rules)
            .unwrap()
            .allowed()
    );
    assert_eq!(slot.check(r, 5, 0, &bounds, &rules).remaining(), 1000 - 5);
    assert_eq!(slot.heap_bytes(), 64);
}

#[test]
fn a_log_that_cannot_leave_its_slot_refuses_and_records_nothing() {
    let r = rule("100/1s");
    let (mut slot, mut rules, bounds) = key(0, 16);
    for t in 0..INLINE as u64 {
        assert!(
            slot.decide_one(r, t, 1, &bounds, &mut rules)
                .unwrap()
                .allowed()
        );
    }
    assert_eq!(
        slot.decide_one(r, 10, 1, &bounds, &mut rules),
        Err(bounds.bytes_error())
    );
    assert!(matches!(slot, Slot::Inline { len: 6, .. }));
    assert_eq!(slot.check(r, 10, 0, &bounds, &rules).remaining(), 94);
}

#[test]
fn a_batch_refused_for_room_records_nothing() {
    let (a, b) = (rule("100/1h"), rule("200/1h"));
    // Both states fit (boxed together), and one log of 4 entries (64
    // bytes), not two.
    let boxed = KeyStates::bytes_for(4);
    let (mut slot, mut rules, bounds) = key(boxed + 64 + 32, 16);
    assert_eq!(
        batch(&mut slot, &mut rules, &[(a, 1), (b, 1)], 0, &bounds),
        Err(bounds.bytes_error())
    );
    assert_eq!(slot.count().0, 2, "refused at the logs, not the states");
    assert_eq!(slot.check(a, 0, 0, &bounds, &rules).remaining(), 100);
    assert_eq!(slot.check(b, 0, 0, &bounds, &rules).remaining(), 200);
    assert_eq!(slot.heap_bytes(), bounds.bytes());
}

#[test]
fn a_batch_makes_room_in_the_slot_for_what_its_hits_add_up_to() {
    // 6 cost bits: two hits of 40 on one key and rule cannot merge inline.
    let r = rule("100/1m");
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    let ds = batch(&mut slot, &mut rules, &[(r, 40), (r, 40)], 0, &bounds).unwrap();
    assert_eq!(ds[1].remaining(), 20);
    assert!(matches!(slot, Slot::Spilled { usage: 80, .. }));
    assert_eq!(slot.admissions(r, &rules).unwrap(), [(0, 80)]);
    assert_eq!(slot.heap_bytes(), bounds.bytes());
}

#[test]
fn long_batches_add_up_costs_per_key_and_rule() {
    let bounds = Bounds::new(10, usize::MAX, 16);
    let (mut x, mut y) = (Slot::empty(0), Slot::empty(0));
    let (mut rx, mut ry) = (RuleTable::default(), RuleTable::default());
    let r = rule("30/1s");
    // 40 hits over two keys (in two shards), alternating: 20 units each.
    let hits: Vec<LockedHit> = (0..40).map(|i| LockedHit::new(i % 2, r, 1)).collect();
    let mut slots = [
        std::mem::replace(&mut x, Slot::empty(0)),
        std::mem::replace(&mut y, Slot::empty(0)),
    ];
    let mut keys = Locked {
        slots: &mut slots,
        tables: &mut [&mut rx, &mut ry],
        table_of: &[0, 1],
    };
    let ds = decide_all(&mut keys, &hits, 0, &bounds).unwrap();
    assert_eq!(ds[38].remaining(), 10);
    assert_eq!(ds[39].remaining(), 10);
    // 11 more on one key: 20 + 11 > 30.
    let over: Vec<LockedHit> = (0..11).map(|_| LockedHit::new(1, r, 1)).collect();
    assert_eq!(
        decide_all(&mut keys, &over, 0, &bounds).map(|ds| ds[10].allowed()),
        Ok(false)
    );
}

#[test]
fn the_sweep_may_renumber_a_slots_rule() {
    let (mut slot, mut rules, bounds) = key(usize::MAX, 16);
    rules.intern(nth_rule(7));
    slot.decide_one(nth_rule(0), 0, 1, &bounds, &mut rules)
        .unwrap();
    let renumbered = rules.compact(&[false, true]);
    slot.renumber(&renumbered);
    assert_eq!(slot.rule_id(), Some(0));
    assert_eq!(
        slot.check(nth_rule(0), 0, 0, &bounds, &rules).remaining(),
        0
    );
}
