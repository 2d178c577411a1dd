//! The store through its public methods: bounds, sweeps, batches.

use std::hash::Hash;
use std::time::Duration;

use super::map::Map;
use super::slot::Slot;
use super::*;
use crate::clock::{Clock, ManualClock};
use crate::decision::Decision;
use crate::error::{Error, StoreBound};
use crate::rate::{Algorithm, Rate, Rule};
use crate::store::hit::Hit;

fn store(clock: &ManualClock) -> MemoryStore<CompactString, ManualClock> {
    MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .build()
}

#[test]
fn several_rules_pass_or_fail_together() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let small = Rule::parse("2/1s").unwrap();
    let big = Rule::parse("3/1m").unwrap();
    assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
    assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
    let denied = s.acquire("k", &[small, big], 1).unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.limit(), 2);
    // The minute rule was not charged by the denial.
    clock.advance(Duration::from_millis(1001));
    assert!(s.acquire("k", &[small, big], 1).unwrap().allowed());
    let d = s.acquire("k", &[small, big], 1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.limit(), 3);
    assert_eq!(s.peek("k", &[big]).unwrap().remaining(), 0);
}

#[test]
fn batch_over_keys_is_all_or_nothing() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let rule = Rule::parse("1/1s").unwrap();
    s.acquire("b", &[rule], 1).unwrap();
    let ds = s
        .acquire_batch(&[Hit::new("a", rule, 1), Hit::new("b", rule, 1)])
        .unwrap();
    assert!(ds[0].allowed() && !ds[1].allowed());
    assert_eq!(ds[0].remaining(), 1, "a was not charged");
    assert!(s.acquire("a", &[rule], 1).unwrap().allowed());
}

#[test]
fn duplicate_hits_add_up() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let rule = Rule::parse("3/1s").unwrap();
    let ds = s
        .acquire_batch(&[Hit::new("a", rule, 2), Hit::new("a", rule, 1)])
        .unwrap();
    assert!(ds.iter().all(Decision::allowed));
    assert_eq!(ds[1].remaining(), 0);
    assert!(matches!(
        s.acquire_batch(&[Hit::new("b", rule, 2), Hit::new("b", rule, 2)]),
        Err(Error::CostExceedsLimit { cost: 4, limit: 3 })
    ));
}

#[test]
fn probes_do_not_create_keys() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let rule = Rule::parse("3/1s").unwrap();
    let p = s.peek("nobody", &[rule]).unwrap();
    assert!(p.allowed());
    assert_eq!(p.remaining(), 3);
    assert!(s.is_empty());
    s.acquire_batch(&[Hit::new("x", rule, 0)]).unwrap();
    assert!(s.is_empty());
}

#[test]
fn sweep_drops_only_idle_keys() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let rule = Rule::parse("3/1s").unwrap();
    s.acquire("old", &[rule], 1).unwrap();
    clock.advance(Duration::from_millis(500));
    s.acquire("new", &[rule], 1).unwrap();
    clock.advance(Duration::from_millis(501));
    assert_eq!(s.sweep(), 1);
    assert_eq!(s.len(), 1);
    assert_eq!(s.peek("new", &[rule]).unwrap().remaining(), 2);
}

#[test]
fn a_full_store_refuses_new_keys_but_serves_held_ones() {
    let clock = ManualClock::new();
    let s: MemoryStore<u64, _> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .max_keys(2)
        .build();
    let rule = Rule::parse("5/1s").unwrap();
    s.acquire(&1, &[rule], 1).unwrap();
    s.acquire(&2, &[rule], 1).unwrap();
    assert_eq!(
        s.acquire(&3, &[rule], 1),
        Err(Error::StoreFull {
            bound: StoreBound::Keys(2)
        })
    );
    assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
    // Once key 2 is idle, the full store sweeps it to make room.
    clock.advance(Duration::from_millis(2000));
    assert!(s.acquire(&1, &[rule], 1).unwrap().allowed());
    assert!(s.acquire(&3, &[rule], 1).unwrap().allowed());
    assert_eq!(s.len(), 2);
}

/// What the store counts is what it holds, and within the bound.
fn assert_within<K, C>(s: &MemoryStore<K, C>, max_bytes: usize)
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    let stats = s.stats();
    assert_eq!(stats.key_bytes + stats.heap_bytes, s.bytes(), "{stats:?}");
    assert!(s.bytes() <= max_bytes, "{} > {max_bytes}", s.bytes());
}

fn bytes_full(max_bytes: usize) -> Error {
    Error::StoreFull {
        bound: StoreBound::Bytes(max_bytes),
    }
}

fn bounded(clock: &ManualClock, max_bytes: usize) -> MemoryStore<CompactString, ManualClock> {
    MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .max_bytes(max_bytes)
        .build()
}

/// The byte bound counts a string key's map entry and its heap text, and
/// no text for a key short enough to be inline in its entry: a bound of
/// three entries holds three keys of 24 bytes, but two of 25.
#[test]
fn the_byte_bound_counts_heap_text_and_no_inline_text() {
    const ENTRY: usize = size_of::<super::map::Entry<CompactString>>() + 1;
    let rule = Rule::parse("5/1m").unwrap();
    for (len, fits) in [(24, 3), (25, 2)] {
        let clock = ManualClock::new();
        let s = bounded(&clock, 3 * ENTRY);
        for k in 0..4 {
            let key = format!("{k}{}", "k".repeat(len - 1));
            let answer = s.acquire(key.as_str(), &[rule], 1);
            if k < fits {
                assert!(answer.unwrap().allowed(), "{len} bytes, key {k}");
            } else {
                assert_eq!(answer, Err(bytes_full(3 * ENTRY)), "{len} bytes, key {k}");
            }
        }
        assert_within(&s, 3 * ENTRY);
    }
}

/// Key types other than the default keep working, looked up by what
/// `StoredKey` pairs them with: one entry per key whichever way it is
/// asked for, and a `String` key still counted with its text.
#[test]
fn other_key_types_find_their_entry_by_each_lookup_type() {
    fn decides_and_resets<K, Q>(a: &Q, b: &Q, counted: usize)
    where
        K: StoredKey<Q> + Hash + Eq + Clone + Send + Sync + 'static,
        Q: Hash + Eq + ?Sized,
    {
        let clock = ManualClock::new();
        let s: MemoryStore<K, ManualClock> = MemoryStore::builder()
            .clock(clock.clone())
            .sweep_interval(None)
            .build();
        let rule = Rule::parse("2/1s").unwrap();
        assert!(s.acquire(a, &[rule], 1).unwrap().allowed());
        assert!(s.acquire(a, &[rule], 1).unwrap().allowed());
        assert!(!s.acquire(a, &[rule], 1).unwrap().allowed());
        assert!(s.acquire(b, &[rule], 1).unwrap().allowed());
        assert_eq!(s.len(), 2);
        assert_eq!(s.stats().key_bytes, counted);
        assert!(s.reset(a));
        assert!(!s.reset(a));
        assert_eq!(s.len(), 1);
    }
    const ENTRY: usize = 64 + 1;
    let (a, b) = ("user:1".to_owned(), "user:2".to_owned());
    decides_and_resets::<String, str>(&a, &b, 2 * (ENTRY + 6));
    decides_and_resets::<Box<str>, str>(&a, &b, 2 * (ENTRY + 6));
    // The counts and the text, 22 bytes, padded to 24.
    decides_and_resets::<std::sync::Arc<str>, str>(&a, &b, 2 * (ENTRY + 24));
    decides_and_resets::<CompactString, String>(&a, &b, 2 * ENTRY);
    decides_and_resets::<Vec<u8>, [u8]>(a.as_bytes(), b.as_bytes(), 2 * (ENTRY + 6));
    decides_and_resets::<u64, u64>(&1, &2, 2 * (ENTRY + 8));
}

#[test]
fn a_flood_of_keys_stays_within_the_byte_bound() {
    const MAX: usize = 64 * 1024;
    let clock = ManualClock::new();
    let s = bounded(&clock, MAX);
    let rule = Rule::parse("5/1m").unwrap();
    let mut refused = 0;
    for k in 0..10_000 {
        match s.acquire(&format!("client:{k}"), &[rule], 1) {
            Ok(d) => assert!(d.allowed()),
            Err(e) => {
                assert_eq!(e, bytes_full(MAX));
                refused += 1;
            }
        }
        clock.advance(Duration::from_micros(1));
    }
    // Keys of up to 12 bytes, inline: a 64-byte entry and a control byte
    // each, so 64 KiB holds 1,008 of them.
    assert!(refused > 8_900, "{refused} refused");
    assert!(s.len() > 100, "{} keys held", s.len());
    assert_within(&s, MAX);
}

#[test]
fn a_flood_of_rules_on_one_key_stays_within_the_byte_bound() {
    const MAX: usize = 16 * 1024;
    let clock = ManualClock::new();
    let s: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .max_bytes(MAX)
        .max_rules_per_key(MAX_RULES_PER_KEY)
        .build();
    let mut refused = 0;
    for limit in 1..=MAX_RULES_PER_KEY as u64 {
        let rule = Rule::parse(&format!("{limit}/1h")).unwrap();
        match s.acquire("victim", &[rule], 1) {
            Ok(d) => assert!(d.allowed()),
            Err(e) => {
                assert_eq!(e, bytes_full(MAX));
                refused += 1;
            }
        }
        assert_within(&s, MAX);
    }
    assert!(refused > 0);
    assert!(s.stats().states < MAX_RULES_PER_KEY);
}

#[test]
fn admissions_under_a_huge_limit_and_a_long_window_stay_within_the_byte_bound() {
    const MAX: usize = 64 * 1024;
    let clock = ManualClock::new();
    let s = bounded(&clock, MAX);
    let huge = Rule::parse("1000000000000/3650d").unwrap();
    let small = Rule::parse("3/1h").unwrap();
    s.acquire("held", &[small], 1).unwrap();
    let mut admitted = 0;
    let full = loop {
        match s.acquire("greedy", &[huge], 1) {
            Ok(d) => assert!(d.allowed()),
            Err(e) => break e,
        }
        admitted += 1;
        clock.advance(Duration::from_micros(1));
    };
    assert_eq!(full, bytes_full(MAX));
    assert!(admitted >= 1024, "{admitted} admitted");
    assert_within(&s, MAX);
    let entries = s.stats().log_entries;
    // The full store still decides what fits what it holds (the held
    // key's admissions and denials), and refuses what would grow it.
    assert!(s.acquire("held", &[small], 2).unwrap().allowed());
    assert!(!s.acquire("held", &[small], 1).unwrap().allowed());
    assert_eq!(s.acquire("greedy", &[huge], 1), Err(bytes_full(MAX)));
    clock.advance(Duration::from_micros(1));
    assert_eq!(s.acquire("greedy", &[huge], 1), Err(bytes_full(MAX)));
    assert_eq!(s.stats().log_entries, entries + 1, "only held's entry");
    assert_within(&s, MAX);
}

#[test]
fn denials_and_probes_on_a_full_store_take_no_bytes() {
    const MAX: usize = 4096;
    let clock = ManualClock::new();
    let s = bounded(&clock, MAX);
    let rule = Rule::parse("1/1h").unwrap();
    let mut k = 0;
    while s.acquire(&format!("k{k}"), &[rule], 1).is_ok() {
        k += 1;
    }
    let held = s.bytes();
    for _ in 0..100 {
        assert!(!s.acquire("k0", &[rule], 1).unwrap().allowed());
        assert!(s.peek("new", &[rule]).unwrap().allowed());
        assert!(s.dry_run("k1", &[rule], 1).map(|d| !d.allowed()).unwrap());
    }
    assert_eq!(s.bytes(), held);
    assert_within(&s, MAX);
}

#[test]
fn the_bytes_come_back_when_keys_are_swept_or_reset() {
    let clock = ManualClock::new();
    let s = bounded(&clock, 1 << 20);
    let rules = [
        Rule::parse("500/1s").unwrap(),
        Rule::parse("900/2s").unwrap(),
    ];
    for k in 0..100 {
        for _ in 0..20 {
            s.acquire(&format!("k{k}"), &rules, 1).unwrap();
            clock.advance(Duration::from_micros(3));
        }
    }
    assert_within(&s, 1 << 20);
    assert!(s.bytes() > 100 * 20 * 16);
    assert!(s.reset("k0"));
    assert_within(&s, 1 << 20);
    clock.advance(Duration::from_secs(3));
    assert_eq!(s.sweep(), 99);
    assert_eq!((s.bytes(), s.stats()), (0, MemoryStats::default()));
}

#[test]
fn a_full_byte_bound_sweeps_idle_keys_to_make_room() {
    const MAX: usize = 4096;
    let clock = ManualClock::new();
    let s = bounded(&clock, MAX);
    let rule = Rule::parse("1/1s").unwrap();
    let mut k = 0;
    while s.acquire(&format!("k{k}"), &[rule], 1).is_ok() {
        k += 1;
    }
    clock.advance(Duration::from_millis(1001));
    assert!(s.acquire("newcomer", &[rule], 1).unwrap().allowed());
    assert_eq!(s.len(), 1);
    assert_within(&s, MAX);
}

#[test]
fn the_rules_cap_replaces_idle_states_and_refuses_otherwise() {
    let clock = ManualClock::new();
    let s: MemoryStore<CompactString, ManualClock> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .max_rules_per_key(2)
        .build();
    let second = Rule::parse("5/1s").unwrap();
    let hour = Rule::parse("5/1h").unwrap();
    let third = Rule::parse("7/1s").unwrap();
    s.acquire("k", &[second], 1).unwrap();
    s.acquire("k", &[hour], 1).unwrap();
    assert_eq!(
        s.acquire("k", &[third], 1),
        Err(Error::TooManyRules { max: 2 })
    );
    assert!(!Error::TooManyRules { max: 2 }.is_store_failure());
    clock.advance(Duration::from_millis(1001));
    assert!(s.acquire("k", &[third], 1).unwrap().allowed());
    assert_eq!(s.peek("k", &[hour]).unwrap().remaining(), 4);
    assert_eq!(s.stats().states, 2);
}

#[test]
fn batches_with_many_repeated_keys_add_up_per_key() {
    let clock = ManualClock::new();
    let s = store(&clock);
    let rule = Rule::parse("50/1s").unwrap();
    let names: Vec<String> = (0..10).map(|k| format!("k{k}")).collect();
    let hits: Vec<Hit<'_>> = (0..400)
        .map(|i| Hit::new(names[i % 10].as_str(), rule, 1))
        .collect();
    let ds = s.acquire_batch(&hits).unwrap();
    assert!(ds.iter().all(Decision::allowed));
    assert_eq!(ds[399].remaining(), 10);
    assert_eq!(s.peek("k3", &[rule]).unwrap().remaining(), 10);
    // 11 more on k3 cannot pass together: nothing recorded anywhere.
    let more: Vec<Hit<'_>> = (0..11).map(|_| Hit::new("k3", rule, 1)).collect();
    let mut hits = hits[..20].to_vec();
    hits.extend(more);
    let ds = s.acquire_batch(&hits).unwrap();
    assert!(!ds.iter().all(Decision::allowed));
    assert_eq!(s.peek("k0", &[rule]).unwrap().remaining(), 10);
}

#[test]
fn a_denied_decision_leaves_no_new_state_as_redis_does() {
    let t0 = 1_763_800_000_000_000;
    let clock = ManualClock::at(t0);
    let s = store(&clock);
    let fixed = Rule::new(Rate::new(10, Duration::from_micros(968_420)).unwrap())
        .with_algorithm(Algorithm::FixedWindow);
    let w = 2_709_207;
    let counter = Rule::new(Rate::new(3, Duration::from_micros(w)).unwrap())
        .with_algorithm(Algorithm::SlidingCounter);
    s.acquire("k", &[fixed], 10).unwrap();
    // Denied by the fixed window: the counter's state, made by the check
    // (its window rolled to t0's), is not kept.
    assert!(!s.acquire("k", &[fixed, counter], 1).unwrap().allowed());
    let back = 3_676_405;
    clock.set(t0 - back);
    // So the counter starts in the window of the clock, as on Redis,
    // where the refusal wrote nothing.
    let d = s.acquire("k", &[counter], 3).unwrap();
    let now = t0 - back;
    let start = now - now % w;
    assert_eq!(d.reset_after(), Duration::from_micros(start + 2 * w - now));
}

#[test]
fn the_background_sweeper_empties_the_store() {
    let clock = ManualClock::new();
    let s: MemoryStore<u64, _> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(Some(Duration::from_millis(10)))
        .build();
    let rule = Rule::parse("5/1s").unwrap();
    for k in 0..1000 {
        s.acquire(&k, &[rule], 1).unwrap();
    }
    clock.advance(Duration::from_secs(2));
    let start = std::time::Instant::now();
    while !s.is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.stats(), MemoryStats::default());
}

/// A shard's rule table keeps the rules of its keys; rules of swept keys
/// make room for new ones, which then take the compact form again.
#[test]
fn rules_of_swept_keys_make_room_in_the_table() {
    let clock = ManualClock::new();
    let s: MemoryStore<u64, _> = MemoryStore::builder()
        .clock(clock.clone())
        .sweep_interval(None)
        .shards(2)
        .build();
    let compact = |key: u64| {
        let hash = s.inner.map.hash(&key);
        let mut shard = s.inner.map.lock(s.inner.map.shard_of(hash));
        let entry = Map::find(&mut shard.table, hash, &key).unwrap();
        !matches!(entry.slot, Slot::Many(_))
    };
    for key in 0..400u64 {
        let rule = Rule::parse(&format!("{}/1s", key + 1)).unwrap();
        assert!(s.acquire(&key, &[rule], 1).unwrap().allowed());
    }
    // Two shards of at most 128 rules each: some keys found theirs full.
    assert!((0..400).any(|key| !compact(key)));
    clock.advance(Duration::from_secs(2));
    assert_eq!(s.sweep(), 400);
    let rule = Rule::parse("1000/1s").unwrap();
    for key in 1_000..1_100u64 {
        assert!(s.acquire(&key, &[rule], 1).unwrap().allowed());
        assert!(compact(key), "key {key}");
    }
}
