//! Leases: a cost or places taken before the work, settled after.
//!
//! - **A budget lease** reserves an estimated cost under rules of a rate,
//!   all or nothing, like a decision. Its [commit](crate::Store::commit)
//!   says what the work really cost: the difference is given back (on the
//!   sliding log, in place: the admission recorded at the reservation's
//!   time costs what was committed), or, when the work cost more, the
//!   excess is taken as a [report](crate::Rule::reporting) takes it, and
//!   usage may pass the limit. A [release](crate::Store::release) gives
//!   the whole reservation back.
//! - **A concurrency lease** holds places under
//!   [concurrency](crate::Algorithm::Concurrency) rules until released.
//!
//! A lease neither committed nor released within its time expires: a
//! budget is charged in full, places are freed. Its id is kept a while
//! longer (a window beyond its end), so that a late commit or release is told
//! [`Error::LeaseExpired`] rather than [`Error::LeaseNotFound`].

use std::time::Duration;

use crate::decision::{Decision, micros};
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rate, Rule};

/// The shortest lease: 1 ms.
pub const MIN_LEASE: Duration = Duration::from_millis(1);

/// The default bound of open leases in a store (`max_leases`).
pub const DEFAULT_MAX_LEASES: usize = 100_000;

/// What a lease reservation got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    id: Option<String>,
    decision: Decision,
    time: Duration,
    waited: Duration,
}

impl Lease {
    /// A lease of `decision`, named `id` when granted, for `time` (stores
    /// build it).
    pub fn new(id: Option<String>, decision: Decision, time: Duration) -> Lease {
        Lease {
            id,
            decision,
            time,
            waited: Duration::ZERO,
        }
    }

    /// The lease's id when granted: what [`commit`](crate::Store::commit)
    /// and [`release`](crate::Store::release) are given. An opaque string
    /// that cannot be guessed.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The id, taken.
    pub fn into_id(self) -> Option<String> {
        self.id
    }

    /// True when the lease was granted.
    pub fn granted(&self) -> bool {
        self.id.is_some()
    }

    /// The decision: allowed when granted (what remains counts the lease),
    /// otherwise the denial, with the usual `retry_after`.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The time granted: the lease expires this long after it was taken.
    pub fn time(&self) -> Duration {
        self.time
    }

    /// How long the reservation waited for its places
    /// ([`Store::reserve_lease_wait`](crate::Store::reserve_lease_wait)).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The same lease, having waited `waited`.
    pub(crate) fn after_waiting(self, waited: Duration) -> Lease {
        Lease { waited, ..self }
    }
}

/// What a commit or a release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    over_limit: bool,
    decision: Decision,
    rules: Vec<(Rule, Decision)>,
}

impl Settled {
    /// A settlement: `over_limit` when the committed cost took usage past
    /// a limit, and the state afterwards (stores build it).
    pub fn new(over_limit: bool, decision: Decision) -> Settled {
        Settled {
            over_limit,
            decision,
            rules: Vec::new(),
        }
    }

    /// The same settlement, with each of the lease's rules and its state
    /// afterwards (what the `RateLimit` fields of an answer list).
    pub fn with_rules(self, rules: Vec<(Rule, Decision)>) -> Settled {
        Settled { rules, ..self }
    }

    /// Each of the lease's rules, in its order, with its state afterwards
    /// as a probe sees it; empty when the store did not say.
    pub fn rules(&self) -> &[(Rule, Decision)] {
        &self.rules
    }

    /// True when the cost committed was more than reserved and took the
    /// usage of some rule past its limit: later requests are denied until
    /// it is back under.
    pub fn over_limit(&self) -> bool {
        self.over_limit
    }

    /// The state of the lease's key and rules once settled, as a probe
    /// (cost 0) sees it.
    pub fn decision(&self) -> Decision {
        self.decision
    }
}

/// What a lease holds: a budget under rules of a rate, or places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    Budget,
    Places,
}

/// Checks a lease request and says what it holds: at least one rule,
/// none with options, all concurrency or none, a cost from 1 to every
/// limit, a time from [`MIN_LEASE`] to the shortest window.
pub(crate) fn check_lease(rules: &[Rule], cost: u64, time: Duration) -> Result<LeaseKind> {
    let Some(first) = rules.first() else {
        return Err(Error::NoRules);
    };
    let places = first.algorithm() == Algorithm::Concurrency;
    let mut shortest = Rate::MAX_WINDOW;
    for (i, rule) in rules.iter().enumerate() {
        if rules[..i].iter().any(|earlier| earlier.same_state(rule)) {
            return Err(Error::InvalidLease(format!(
                "the rule {rule} is given twice"
            )));
        }
        if (rule.algorithm() == Algorithm::Concurrency) != places {
            return Err(Error::InvalidLease(
                "concurrency rules hold places, the others a budget: give each kind a lease of its own".into(),
            ));
        }
        if rule.has_options() {
            return Err(Error::InvalidLease(
                "a lease's rules take no report or lockout: a lease is a check before and a report after already".into(),
            ));
        }
        if cost > rule.limit() {
            return Err(Error::CostExceedsLimit {
                cost,
                limit: rule.limit(),
            });
        }
        shortest = shortest.min(rule.rate().window());
    }
    if cost == 0 {
        return Err(Error::InvalidLease(
            "a lease takes a cost (or places) of at least 1".into(),
        ));
    }
    if time < MIN_LEASE || time > shortest {
        return Err(Error::InvalidLease(format!(
            "the lease time must be from {} ms to the shortest window of its rules ({} ms), got {} ms",
            MIN_LEASE.as_millis(),
            shortest.as_millis(),
            time.as_millis()
        )));
    }
    Ok(if places {
        LeaseKind::Places
    } else {
        LeaseKind::Budget
    })
}

/// How long a lease's id is kept once it stops being open, beyond its
/// expiry: its rules' longest window (a budget's admission leaves every
/// window by then), or for places, the lease time itself. So a commit or
/// release comes to [`Error::LeaseExpired`] for at least the lease time
/// plus the window after the lease was taken.
pub(crate) fn retention(rules: &[Rule], time: Duration) -> u64 {
    rules
        .iter()
        .map(|rule| match rule.algorithm() {
            Algorithm::Concurrency => micros(time),
            _ => rule.window_micros(),
        })
        .max()
        .unwrap_or(0)
}

/// Random bytes naming a lease: 128 bits from the operating system, so
/// that an id cannot be guessed from another.
pub(crate) fn random_id() -> Result<[u8; 16]> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id)
        .map_err(|e| Error::Store(format!("no random bytes for a lease id: {e}")))?;
    Ok(id)
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// The bytes of lowercase `hex` of exactly `N` bytes, or `None`.
pub(crate) fn parse_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let digits = hex.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Rule {
        Rule::parse(s).unwrap()
    }

    #[test]
    fn a_lease_is_checked_before_anything_is_asked() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            check_lease(&[rule("5000/1m")], 1000, minute),
            Ok(LeaseKind::Budget)
        );
        assert_eq!(
            check_lease(&[Rule::concurrency(3).unwrap()], 1, minute),
            Ok(LeaseKind::Places)
        );
        assert!(matches!(
            check_lease(&[rule("5000/1m")], 1000, minute + Duration::from_millis(1)),
            Err(Error::InvalidLease(_))
        ));
        assert!(matches!(
            check_lease(&[rule("5000/1m"), Rule::concurrency(3).unwrap()], 1, minute),
            Err(Error::InvalidLease(_))
        ));
        assert!(matches!(
            check_lease(&[rule("5000/1m").reporting()], 1, minute),
            Err(Error::InvalidLease(_))
        ));
        assert!(matches!(
            check_lease(&[rule("5/1m")], 6, minute),
            Err(Error::CostExceedsLimit { .. })
        ));
        assert!(matches!(
            check_lease(&[rule("5/1m")], 0, minute),
            Err(Error::InvalidLease(_))
        ));
        assert!(matches!(
            check_lease(&[rule("5/1m")], 1, Duration::ZERO),
            Err(Error::InvalidLease(_))
        ));
        assert_eq!(check_lease(&[], 1, minute), Err(Error::NoRules));
    }

    #[test]
    fn ids_are_hex_both_ways() {
        let id = [0xab; 16];
        let text = hex(&id);
        assert_eq!(text.len(), 32);
        assert_eq!(parse_hex::<16>(&text), Some(id));
        assert_eq!(parse_hex::<16>(&text.to_uppercase()), None);
        assert_eq!(parse_hex::<16>(&text[1..]), None);
        assert_eq!(parse_hex::<16>("zz"), None);
        assert_ne!(random_id().unwrap(), random_id().unwrap());
    }
}
