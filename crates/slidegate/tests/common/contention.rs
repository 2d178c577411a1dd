//! The workload of the concurrency tests that every store runs: every
//! algorithm with every option (and GCRA with bursts), asked by many
//! clients at once, in rounds.
//!
//! In a round the clock stands still and every client sends its requests
//! at once; between rounds the clock moves, often exactly onto a window
//! boundary or one microsecond either side of it. So the time of every
//! decision is known exactly, whatever order the store decided them in,
//! and each algorithm's promise can be checked exactly from outside
//! (`exactness.rs`). Some rounds have one client per rule, so that what
//! an instant's decisions did among themselves shows in the next ones.

use std::time::Duration;

use slidegate::{Algorithm, Rule};

/// The limit of every rule.
pub const LIMIT: u64 = 10;
/// The window of every rule: long enough that a Redis key's expiry, on
/// the real clock, never matters while the rounds run.
pub const WINDOW: Duration = Duration::from_secs(10);
/// The lockout of the rules that have one: longer than a window, so a
/// window is empty again when it ends.
pub const BLOCK: Duration = Duration::from_secs(15);
/// Where the clock starts: an ordinary Unix time, off any boundary.
pub const START: u64 = 1_763_800_000_123_457;

/// One rule the clients ask, on a key of its own.
#[derive(Clone, Debug)]
pub struct Case {
    /// Its algorithm and options, for messages.
    pub name: String,
    pub rule: Rule,
    pub key: String,
}

/// Every algorithm with no option, a lockout, usage reports, and both.
pub fn cases() -> Vec<Case> {
    let base = Rule::parse(&format!("{LIMIT}/{}s", WINDOW.as_secs())).expect("a valid rule");
    let mut cases = Vec::new();
    for algorithm in Algorithm::ALL {
        let plain = base.with_algorithm(algorithm);
        let blocking = plain.block_for(BLOCK).expect("a valid lockout");
        for (option, rule) in [
            ("plain", plain),
            ("block_for", blocking),
            ("report", plain.reporting()),
            ("report+block_for", blocking.reporting()),
        ] {
            let name = format!("{algorithm} {option}");
            let key = format!("contention:{algorithm}:{option}");
            cases.push(Case { name, rule, key });
        }
    }
    // A GCRA bucket larger than the limit and one smaller.
    let gcra = base.with_algorithm(Algorithm::Gcra);
    for (option, rule) in [
        ("burst", gcra.with_burst(BURST)),
        ("small burst", gcra.with_burst(SMALL_BURST)),
        (
            "burst report+block_for",
            gcra.with_burst(BURST)
                .and_then(|r| r.block_for(BLOCK))
                .map(|r| r.reporting()),
        ),
    ] {
        let rule = rule.expect("a valid burst");
        let key = format!("contention:gcra:{}", option.replace(' ', "_"));
        let name = format!("gcra {option}");
        cases.push(Case { name, rule, key });
    }
    cases
}

/// The burst of the GCRA cases that have a large one: five limits.
pub const BURST: u64 = 5 * LIMIT;
/// The burst of the GCRA case whose bucket is smaller than its limit.
pub const SMALL_BURST: u64 = 4;

/// The clock's time in each of `rounds` rounds: from [`START`], moving
/// 0 µs, to the next window boundary, one µs before or after it, or a
/// short way into the window.
pub fn round_times(rounds: usize) -> Vec<u64> {
    let window = WINDOW.as_micros() as u64;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut at = START;
    (0..rounds)
        .map(|_| {
            let now = at;
            x = xorshift(x);
            let boundary = now - now % window + window;
            at = match x % 16 {
                0 => now,
                1..=4 => boundary,
                5 | 6 => boundary - 1,
                7 | 8 => boundary + 1,
                _ => now + 1 + (x >> 8) % (window / 5),
            };
            now
        })
        .collect()
}

/// Whether client `client` of `clients` sends requests on case `case` in
/// round `round`: every client in two rounds out of three, to contend;
/// one client per case in the third, whose decisions the next rounds see
/// in order (decisions of one instant are seen as a set).
pub fn takes_part(clients: usize, client: usize, case: usize, round: usize) -> bool {
    round % 3 != 2 || (case + round) % clients == client
}

/// What a client sends: one hit of `cost`, or a batch of two hits of
/// `cost` on the same key and rule (decided together: they add up).
#[derive(Clone, Copy, Debug)]
pub enum Request {
    One(u64),
    Twice(u64),
}

impl Request {
    /// The request of client `client` in round `round`, its `i`th of the
    /// round: a cost of 1 to 3; for a rule that reports, the report a
    /// client sends once a check (cost 0) passed, 1 to 4 units, now and
    /// then over the limit.
    pub fn of(rule: Rule, client: usize, round: usize, i: usize) -> Request {
        let x =
            xorshift(((client as u64) << 40) ^ ((round as u64) << 8) ^ (i as u64) ^ 0x9E37_79B9);
        let x = xorshift(x);
        let cost = if rule.reports() {
            match x % 8 {
                0 => LIMIT + 2,
                _ => 1 + (x >> 8) % 4,
            }
        } else {
            1 + (x >> 8) % 3
        };
        if (x >> 4).is_multiple_of(4) && cost <= rule.burst().min(LIMIT) / 2 {
            Request::Twice(cost)
        } else {
            Request::One(cost)
        }
    }

    /// What the request asks in all.
    pub fn cost(self) -> u64 {
        match self {
            Request::One(cost) => cost,
            Request::Twice(cost) => 2 * cost,
        }
    }
}

fn xorshift(mut x: u64) -> u64 {
    x |= 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
