//! The numbers the Lua script and this side agree on, named once for
//! Rust: a hit's algorithm and options, a call's mode, the integer form of
//! a denial. `codes.lua` names the same numbers once for the script, and
//! a test checks that both tables say the same.

use crate::rate::{Algorithm, Rule};

/// A hit's algorithm, as the script numbers it.
pub(super) const fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::SlidingLog => 0,
        Algorithm::SlidingCounter => 1,
        Algorithm::FixedWindow => 2,
        Algorithm::Gcra => 3,
        Algorithm::Concurrency => 4,
    }
}

/// A hit's options ride in its code: `algorithm + REPORT * report +
/// LOCKOUT * lockout (µs)`.
pub(super) const REPORT: f64 = 8.0;
/// See [`REPORT`].
pub(super) const LOCKOUT: f64 = 16.0;

/// A hit's code: its algorithm with its rule's options (see [`REPORT`]),
/// below 2^53 (a lockout is below 2^49 µs), so exact.
pub(super) fn options_code(rule: Rule) -> f64 {
    let report = if rule.reports() { REPORT } else { 0.0 };
    f64::from(algorithm_code(rule.algorithm())) + report + LOCKOUT * rule.block_micros() as f64
}

/// A call's mode rides in its first number, the hit count:
/// `-(mode * MODE_SCALE + hits)`; a plain call sends the count alone.
pub(super) const MODE_SCALE: f64 = 1_048_576.0;

/// What a call asks of the script (see `main.lua` and `batch.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Decide, and record when allowed.
    Plain = 0,
    /// A step of a cross-slot decision: decide and record, writing the
    /// journal, unless already undone.
    Record = 1,
    /// A step of a cross-slot decision: decide without recording.
    Check = 2,
    /// A step of a cross-slot decision: take back what the journal says,
    /// once; then decide as a check.
    Undo = 3,
    /// The decisions of several callers, one after the other.
    Coalesced = 4,
    /// Reserve the earliest time every hit fits, within a longest wait.
    Reserve = 5,
    /// A plain decision in the batch layout (a hit that reports, alone).
    WithOptions = 6,
    /// A budget lease: a plain decision, filed when granted (`lease.lua`).
    Lease = 7,
    /// A lease of places under concurrency rules.
    Places = 8,
    /// A commit or a release of a lease.
    Settle = 9,
}

/// What a lease's record says it holds (`lease.lua`): a budget.
pub(super) const BUDGET_LEASE: f64 = 0.0;
/// See [`BUDGET_LEASE`]: places.
pub(super) const PLACES_LEASE: f64 = 1.0;

impl Mode {
    /// Every mode, for the test that the two tables agree.
    #[cfg(test)]
    pub(super) const ALL: [Mode; 10] = [
        Mode::Plain,
        Mode::Record,
        Mode::Check,
        Mode::Undo,
        Mode::Coalesced,
        Mode::Reserve,
        Mode::WithOptions,
        Mode::Lease,
        Mode::Places,
        Mode::Settle,
    ];

    /// The first number of a call of `hits` hits (or decisions) in this
    /// mode.
    #[inline]
    pub(super) fn hit_count(self, hits: usize) -> f64 {
        // Counts are far below 2^53: exact.
        let hits = hits as f64;
        match self {
            Mode::Plain => hits,
            mode => -(f64::from(mode as u8) * MODE_SCALE + hits),
        }
    }
}

/// Numbers per hit in the batch layout: key index, code, limit, window,
/// cost, checked cost, burst (see `main.lua`).
pub(super) const HIT_NUMBERS: usize = 7;

/// A single sliding-log hit's denial, answered as one integer
/// `-(retry_after * 2^COMPACT_SHIFT + reset_after)` (both below
/// 2^COMPACT_SHIFT µs).
pub(super) const COMPACT_SHIFT: u32 = 26;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// `local A, B = 1, 2` lines of `codes.lua`, by name.
    fn lua_table() -> BTreeMap<String, f64> {
        let mut named = BTreeMap::new();
        for line in include_str!("codes.lua").lines() {
            let Some(assignment) = line.strip_prefix("local ") else {
                continue;
            };
            let (names, values) = assignment.split_once('=').expect("local NAMES = VALUES");
            let names: Vec<&str> = names.split(',').map(str::trim).collect();
            let values: Vec<f64> = values
                .split(',')
                .map(|v| v.trim().parse().expect("a number"))
                .collect();
            assert_eq!(names.len(), values.len(), "{line}");
            for (name, value) in names.into_iter().zip(values) {
                assert!(
                    named.insert(name.to_owned(), value).is_none(),
                    "{name} twice"
                );
            }
        }
        named
    }

    #[test]
    fn the_lua_table_says_what_this_one_says() {
        let mut want = BTreeMap::new();
        for algorithm in Algorithm::ALL.into_iter().chain([Algorithm::Concurrency]) {
            let name = match algorithm {
                Algorithm::SlidingLog => "SLIDING_LOG",
                Algorithm::SlidingCounter => "SLIDING_COUNTER",
                Algorithm::FixedWindow => "FIXED_WINDOW",
                Algorithm::Gcra => "GCRA",
                Algorithm::Concurrency => "CONCURRENCY",
            };
            want.insert(name.to_owned(), f64::from(algorithm_code(algorithm)));
        }
        for mode in Mode::ALL {
            let name = match mode {
                Mode::Plain => "PLAIN",
                Mode::Record => "RECORD",
                Mode::Check => "CHECK",
                Mode::Undo => "UNDO",
                Mode::Coalesced => "COALESCED",
                Mode::Reserve => "RESERVE",
                Mode::WithOptions => "WITH_OPTIONS",
                Mode::Lease => "LEASE",
                Mode::Places => "PLACES",
                Mode::Settle => "SETTLE",
            };
            want.insert(name.to_owned(), f64::from(mode as u8));
        }
        want.insert("BUDGET_LEASE".to_owned(), BUDGET_LEASE);
        want.insert("PLACES_LEASE".to_owned(), PLACES_LEASE);
        want.insert("REPORT".to_owned(), REPORT);
        want.insert("LOCKOUT".to_owned(), LOCKOUT);
        want.insert("MODE_SCALE".to_owned(), MODE_SCALE);
        want.insert("COMPACT".to_owned(), (1u64 << COMPACT_SHIFT) as f64);
        want.insert("HIT_NUMBERS".to_owned(), HIT_NUMBERS as f64);
        assert_eq!(lua_table(), want);
    }

    #[test]
    fn codes_and_modes_stay_apart() {
        // An algorithm code never reaches the first option bit, a lockout
        // never overlaps the report bit, and a call's hits never reach the
        // mode's scale (a batch is far shorter than 2^20 hits).
        let every = Algorithm::ALL.into_iter().chain([Algorithm::Concurrency]);
        for algorithm in every.clone() {
            assert!(f64::from(algorithm_code(algorithm)) < REPORT);
        }
        // main.lua lists the builders of the algorithms after the sliding
        // log's in the order of their codes: 1, 2, 3, 4.
        for (i, algorithm) in every.enumerate() {
            assert_eq!(usize::from(algorithm_code(algorithm)), i, "{algorithm}");
        }
        assert_eq!(LOCKOUT, 2.0 * REPORT);
        let rule = crate::rate::Rule::parse("5/1s")
            .unwrap()
            .with_algorithm(Algorithm::Gcra)
            .reporting()
            .block_for(std::time::Duration::from_millis(3))
            .unwrap();
        assert_eq!(options_code(rule), 3.0 + 8.0 + 16.0 * 3_000.0);
        assert_eq!(Mode::Plain.hit_count(3), 3.0);
        assert_eq!(Mode::Reserve.hit_count(3), -(5.0 * 1_048_576.0 + 3.0));
    }
}
