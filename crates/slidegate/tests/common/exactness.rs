//! Each algorithm's promise, checked from outside the store: from the
//! decisions its clients got and the exact time of each (see
//! `contention.rs`), never from what the store holds.
//!
//! Decisions of one instant may have been decided in any order, so at an
//! instant only what was recorded strictly before it is known to have been
//! seen by all of them; its own admissions were seen by the last of them
//! (each one admitted saw those admitted before it). What the instant's
//! denied reports added may come after, and is left out.

use slidegate::{Algorithm, Rule};

use super::contention::Case;

/// One decision as its client saw it: when, the cost it asked in all (0: a
/// check), and whether it passed.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub at: u64,
    pub cost: u64,
    pub allowed: bool,
}

/// What a run that kept its promise shows.
#[derive(Debug)]
pub struct Summary {
    /// Units admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: usize,
    /// Lockouts the denials started.
    pub lockouts: usize,
    /// The least room the promise left after an instant's admissions, in
    /// units of cost (fractions for GCRA): below 1, an admission of one
    /// more unit there would have broken it.
    pub tightest: f64,
}

/// The decisions of one instant.
#[derive(Debug, Default)]
struct Instant {
    at: u64,
    /// Units admitted.
    admitted: u64,
    /// A check (cost 0) passed.
    checked: bool,
    /// Units recorded: admitted, and for a rule that reports, denied too.
    recorded: u64,
    /// A request with a cost was denied (it starts a lockout).
    consuming_denied: bool,
    /// Any request passed.
    any_allowed: bool,
}

fn instants(rule: Rule, seen: &[Seen]) -> Vec<Instant> {
    let mut seen = seen.to_vec();
    seen.sort_by_key(|s| s.at);
    let mut instants: Vec<Instant> = Vec::new();
    for s in seen {
        if instants.last().is_none_or(|i| i.at != s.at) {
            instants.push(Instant {
                at: s.at,
                ..Instant::default()
            });
        }
        let now = instants.last_mut().expect("an instant");
        now.any_allowed |= s.allowed;
        if s.cost == 0 {
            now.checked |= s.allowed;
        } else if s.allowed {
            now.admitted += s.cost;
            now.recorded += s.cost;
        } else {
            now.consuming_denied = true;
            if rule.reports() {
                now.recorded += s.cost;
            }
        }
    }
    instants
}

/// The room `rule`'s promise leaves for `asked` more units at `at`, in
/// units of cost times the window (exact for every algorithm), given what
/// was recorded at the instants `before` (all earlier than `at`).
/// Negative: `asked` more units at `at` break it.
fn room(rule: Rule, before: &[Instant], at: u64, asked: u64) -> i128 {
    let (limit, window) = (i128::from(rule.limit()), rule.window_micros());
    let w = i128::from(window);
    let recorded_from = |from: u64| -> i128 {
        before
            .iter()
            .filter(|i| i.at >= from)
            .map(|i| i128::from(i.recorded))
            .sum()
    };
    let asked = i128::from(asked);
    let start = at - at % window;
    match rule.algorithm() {
        // Every admission at most a window old counts.
        Algorithm::SlidingLog => (limit - recorded_from(at - window) - asked) * w,
        // At most L per window aligned to the clock.
        Algorithm::FixedWindow => (limit - recorded_from(start) - asked) * w,
        // The current window's count plus the previous one's weighted by
        // its overlap with the sliding window, rounded up.
        Algorithm::SlidingCounter => {
            let current = recorded_from(start);
            let previous = recorded_from(start - window) - current;
            let elapsed = i128::from(at - start);
            let weighted = (previous * (w - elapsed) + w - 1) / w;
            (limit - current - weighted - asked) * w
        }
        // A bucket of B (the burst, L unless the rule has one) refilled
        // at L per W: no interval [s, at] holds more than B + L·(at − s)/W
        // units.
        Algorithm::Gcra => {
            let burst = i128::from(rule.burst());
            let mut least = (burst - asked) * w;
            let mut since = asked;
            for earlier in before.iter().rev() {
                since += i128::from(earlier.recorded);
                let span = i128::from(at - earlier.at);
                least = least.min(burst * w + limit * span - since * w);
            }
            least
        }
        // Places are held by leases, which these checks never take.
        Algorithm::Concurrency => unreachable!("places are checked in tests/common/leases.rs"),
    }
}

/// Checks `rule`'s promise on the decisions `seen`: at every instant, the
/// units admitted fit; a check that passed had room for one unit; while a
/// lockout runs, nothing passes.
pub fn check(rule: Rule, seen: &[Seen]) -> Result<Summary, String> {
    let instants = instants(rule, seen);
    let w = rule.window_micros() as f64;
    let mut tightest = f64::INFINITY;
    for (j, now) in instants.iter().enumerate() {
        let before = &instants[..j];
        if now.admitted > 0 {
            let room = room(rule, before, now.at, now.admitted);
            if room < 0 {
                return Err(format!(
                    "{} units admitted at {} overrun the promise by {} units",
                    now.admitted,
                    now.at,
                    -room as f64 / w
                ));
            }
            tightest = tightest.min(room as f64 / w);
        }
        if now.checked && room(rule, before, now.at, 1) < 0 {
            return Err(format!("a check passed at {} with no room left", now.at));
        }
    }
    let lockouts = check_lockouts(rule, &instants)?;
    Ok(Summary {
        admitted: instants.iter().map(|i| i.admitted).sum(),
        denied: seen.iter().filter(|s| !s.allowed).count(),
        lockouts,
        tightest,
    })
}

/// A consuming request denied while no lockout runs starts one, for the
/// rule's block; while it runs, nothing passes. How many started.
fn check_lockouts(rule: Rule, instants: &[Instant]) -> Result<usize, String> {
    let Some(block) = rule.block() else {
        return Ok(0);
    };
    let block = block.as_micros() as u64;
    let (mut until, mut started) = (0, 0);
    for now in instants {
        if now.at < until {
            if now.any_allowed {
                return Err(format!(
                    "a request passed at {} during a lockout that ends at {until}",
                    now.at
                ));
            }
        } else if now.consuming_denied {
            until = now.at + block;
            started += 1;
        }
    }
    Ok(started)
}

/// Checks every case on what its clients saw (`seen[i]` for `cases[i]`),
/// and that each run tested its promise: requests passed and were
/// denied, an admission came within one unit of the bound (one more
/// would have been caught), and lockouts started. Names every case that
/// failed.
pub fn assert_kept(cases: &[Case], seen: &[Vec<Seen>]) {
    let mut failed = Vec::new();
    for (case, seen) in cases.iter().zip(seen) {
        let summary = match check(case.rule, seen) {
            Ok(summary) => summary,
            Err(e) => {
                failed.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        eprintln!("{}: {summary:?}", case.name);
        let tested = summary.admitted > 0
            && summary.denied > 0
            && summary.tightest < 1.0
            && (case.rule.block().is_none() || summary.lockouts >= 2);
        if !tested {
            failed.push(format!(
                "{}: the run did not reach the bound: {summary:?}",
                case.name
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
