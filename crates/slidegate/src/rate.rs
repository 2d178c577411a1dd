//! The vocabulary of a limit: rates (`100/1m`) and their parser, the
//! algorithms that may enforce one, and the rules that pair the two.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

const MICROS_PER_MS: u64 = 1_000;
const MICROS_PER_SECOND: u64 = 1_000_000;
const MICROS_PER_MINUTE: u64 = 60 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: u64 = 60 * MICROS_PER_MINUTE;
const MICROS_PER_DAY: u64 = 24 * MICROS_PER_HOUR;

/// At most `limit` units per `window`: `100/1m`, `10/s`, `3/250ms`.
///
/// ```
/// use slidegate::Rate;
/// let rate: Rate = "100/1m".parse()?;
/// assert_eq!(rate.limit(), 100);
/// assert_eq!(rate.window(), std::time::Duration::from_secs(60));
/// assert_eq!(rate.to_string(), "100/1m");
/// assert_eq!("10/minute".parse::<Rate>()?, Rate::new(10, std::time::Duration::from_secs(60))?);
/// # Ok::<(), slidegate::Error>(())
/// ```
///
/// Accepted windows: an optional whole number followed by a unit, `us`,
/// `ms`, `s`, `m`, `h`, `d` (or `w`), or a word such as `second`, `minutes`,
/// `hour`, `day`, `week`. Windows run from 1 ms to [`Rate::MAX_WINDOW`];
/// limits from 1 to [`Rate::MAX_LIMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rate {
    limit: u64,
    window_us: u64,
}

impl Rate {
    /// The largest limit: 10^12. Every store computes exactly below it
    /// (Redis' Lua numbers are doubles, exact up to 2^53).
    pub const MAX_LIMIT: u64 = 1_000_000_000_000;
    /// The longest window: 10 years of 365 days.
    pub const MAX_WINDOW: Duration = Duration::from_secs(10 * 365 * 86_400);
    /// The shortest window: 1 ms.
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);

    /// A rate of `limit` per `window`, checked against the bounds above.
    pub fn new(limit: u64, window: Duration) -> Result<Rate> {
        if limit == 0 || limit > Self::MAX_LIMIT {
            return Err(Error::InvalidLimit {
                got: limit,
                max: Self::MAX_LIMIT,
            });
        }
        if window < Self::MIN_WINDOW || window > Self::MAX_WINDOW {
            return Err(Error::InvalidWindow {
                got: window,
                max: Self::MAX_WINDOW,
            });
        }
        // Checked above: the window fits in u64 microseconds.
        let window_us = window.as_micros() as u64;
        Ok(Rate { limit, window_us })
    }

    /// The most units admitted in any window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The length of the window.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }

    /// The length of the window in microseconds, the unit every algorithm counts in.
    pub fn window_micros(&self) -> u64 {
        self.window_us
    }
}

impl fmt::Display for Rate {
    /// The shortest form that parses back to the same rate: `100/1m`, `3/250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 6] = [
            (MICROS_PER_DAY, "d"),
            (MICROS_PER_HOUR, "h"),
            (MICROS_PER_MINUTE, "m"),
            (MICROS_PER_SECOND, "s"),
            (MICROS_PER_MS, "ms"),
            (1, "us"),
        ];
        let w = self.window_us;
        let (size, unit) = UNITS
            .iter()
            .find(|(size, _)| w.is_multiple_of(*size))
            .copied()
            .unwrap_or((1, "us"));
        write!(f, "{}/{}{}", self.limit, w / size, unit)
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(input: &str) -> Result<Rate> {
        let invalid = |reason: &str| Error::InvalidRate {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let (limit, window) = input
            .trim()
            .split_once('/')
            .ok_or_else(|| invalid("expected LIMIT/WINDOW, e.g. 100/1m"))?;
        let limit: u64 = limit
            .trim()
            .parse()
            .map_err(|_| invalid("the limit is not a whole number"))?;
        let window_us = parse_window_micros(window.trim()).map_err(&invalid)?;
        if limit == 0 {
            return Err(invalid("the limit must be at least 1"));
        }
        if window_us == 0 {
            return Err(invalid("the window must be at least 1ms"));
        }
        Rate::new(limit, Duration::from_micros(window_us)).map_err(|e| invalid(&e.to_string()))
    }
}

/// Parses a window such as `1m`, `250ms`, `s` or `minute` into microseconds.
///
/// ```
/// assert_eq!(slidegate::rate::parse_window("250ms")?, std::time::Duration::from_millis(250));
/// assert_eq!(slidegate::rate::parse_window("hour")?, std::time::Duration::from_secs(3600));
/// # Ok::<(), slidegate::Error>(())
/// ```
pub fn parse_window(input: &str) -> Result<Duration> {
    let us = parse_window_micros(input.trim()).map_err(|reason| Error::InvalidRate {
        input: input.to_owned(),
        reason: reason.to_owned(),
    })?;
    Ok(Duration::from_micros(us))
}

fn parse_window_micros(window: &str) -> std::result::Result<u64, &'static str> {
    let digits = window
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(window.len());
    let (count, unit) = window.split_at(digits);
    let count: u64 = if count.is_empty() {
        1
    } else {
        count.parse().map_err(|_| "the window count is too large")?
    };
    let unit_us = match unit.trim() {
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1,
        "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => MICROS_PER_MS,
        "s" | "sec" | "secs" | "second" | "seconds" => MICROS_PER_SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => MICROS_PER_MINUTE,
        "h" | "hr" | "hrs" | "hour" | "hours" => MICROS_PER_HOUR,
        "d" | "day" | "days" => MICROS_PER_DAY,
        "w" | "week" | "weeks" => 7 * MICROS_PER_DAY,
        "" => return Err("the window needs a unit (ms, s, m, h, d)"),
        _ => return Err("unknown window unit (expected us, ms, s, m, h, d, w)"),
    };
    count.checked_mul(unit_us).ok_or("the window is too long")
}

/// Which algorithm enforces a rule.
///
/// | algorithm | exact | memory per key |
/// |---|---|---|
/// | `sliding_log` (default) | yes: no interval of length W ever holds more than L | one entry per admission inside the window |
/// | `sliding_counter` | approximate: weights the previous fixed window | O(1) |
/// | `fixed_window` | per clock-aligned window only (up to 2L across a boundary) | O(1) |
/// | `gcra` | a meter: bursts of L (or of its [burst](Rule::with_burst)), then one per W/L | O(1) |
/// | `concurrency` | at most L places held at once, each by a lease | one entry per lease held |
///
/// The first four meter a rate. [`Concurrency`](Algorithm::Concurrency)
/// counts places held instead: a place is taken by a
/// [lease](crate::store::Lease) and held until the lease is released or
/// its time runs out, whatever the window (which is the longest lease the
/// rule grants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Algorithm {
    /// Exact sliding log (the default).
    #[default]
    SlidingLog,
    /// Sliding window counter: two fixed windows, the previous one weighted.
    SlidingCounter,
    /// Fixed window aligned to multiples of the window length.
    FixedWindow,
    /// Generic cell rate algorithm (token/leaky bucket as a meter).
    Gcra,
    /// At most `L` places held at once per key: the requests in flight.
    /// Places are taken by leases only ([`Store::reserve_lease`](crate::Store::reserve_lease));
    /// a plain decision of a cost above 0 under such a rule is
    /// [`Error::LeaseRequired`], a probe (cost 0) shows what is held.
    Concurrency,
}

impl Algorithm {
    /// The four that meter a rate, in a fixed order (not
    /// [`Concurrency`](Algorithm::Concurrency), which counts places held).
    pub const ALL: [Algorithm; 4] = [
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::FixedWindow,
        Algorithm::Gcra,
    ];

    /// The name used in configs and APIs: `sliding_log`, `sliding_counter`,
    /// `fixed_window`, `gcra`, `concurrency`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingCounter => "sliding_counter",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::Gcra => "gcra",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Its index in a rule's packed form.
    const fn index(self) -> u64 {
        match self {
            Algorithm::SlidingLog => 0,
            Algorithm::SlidingCounter => 1,
            Algorithm::FixedWindow => 2,
            Algorithm::Gcra => 3,
            Algorithm::Concurrency => 4,
        }
    }

    /// The algorithm of index `index` in a rule's packed form.
    const fn of_index(index: u64) -> Algorithm {
        match index {
            1 => Algorithm::SlidingCounter,
            2 => Algorithm::FixedWindow,
            3 => Algorithm::Gcra,
            4 => Algorithm::Concurrency,
            _ => Algorithm::SlidingLog,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Algorithm, Error> {
        Algorithm::ALL
            .into_iter()
            .chain([Algorithm::Concurrency])
            .find(|a| a.name() == s)
            .ok_or_else(|| Error::UnknownAlgorithm(s.to_owned()))
    }
}

/// The low bits of a rule's packed window that name its algorithm.
const ALGORITHM_BITS: u32 = 3;
const ALGORITHM_MASK: u64 = (1 << ALGORITHM_BITS) - 1;
const _: () = assert!(Algorithm::Concurrency.index() <= ALGORITHM_MASK);

/// A rate together with the algorithm that enforces it: the unit a store
/// keeps state for. Two rules are the same state if their limit, window,
/// algorithm and burst are equal ([`same_state`](Rule::same_state)); their
/// options ([`reporting`](Rule::reporting), [`block_for`](Rule::block_for))
/// say how a hit is counted and what a denial does, not which state it
/// counts on.
///
/// ```
/// use slidegate::{Algorithm, Rule};
/// use std::time::Duration;
/// let rule = Rule::parse("10/s")?;
/// assert_eq!(rule.algorithm(), Algorithm::SlidingLog);
/// let gcra = Rule::parse("10/s")?.with_algorithm(Algorithm::Gcra);
/// assert_ne!(rule, gcra);
/// // A login: 5 attempts per 15 minutes, then locked out for an hour.
/// let login = Rule::parse("5/15m")?.block_for(Duration::from_secs(3600))?;
/// assert!(login.same_state(&Rule::parse("5/15m")?));
/// // A token bucket of 50 refilled at 10 per second.
/// let bucket = Rule::parse("10/1s")?.with_algorithm(Algorithm::Gcra).with_burst(50)?;
/// assert_eq!(bucket, Rule::parse("10/1s burst 50")?);
/// assert_eq!(bucket.to_string(), "10/1s gcra burst 50");
/// # Ok::<(), slidegate::Error>(())
/// ```
///
/// # The rule grammar
///
/// [`Rule::parse`] and `str::parse` read what `Display` writes: a rate,
/// then in any order an algorithm name, `burst N`, `report`, `block_for
/// DURATION`, each at most once (`"5/15m block_for 1h"`, `"10/1s gcra
/// burst 50"`). A burst without an algorithm named is a `gcra` rule, the
/// one algorithm with a burst.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Never 0 (a rate's limit): `Option<Rule>` takes no more room than a
    /// rule, which keeps the memory store's first rules in its shard's
    /// cache lines.
    limit: NonZeroU64,
    /// The window in µs (below 2^49) shifted left by [`ALGORITHM_BITS`],
    /// the algorithm's index in the low bits.
    window_and_algorithm: u64,
    /// The block (µs) shifted left by 1, the report flag in the low bit.
    options: u64,
    /// A GCRA rule's bucket size when it is not the limit; 0 otherwise
    /// (so a burst equal to the limit is the same rule as none).
    burst: u64,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Rule");
        out.field("rate", &self.rate())
            .field("algorithm", &self.algorithm());
        if self.burst != 0 {
            out.field("burst", &self.burst);
        }
        if self.reports() {
            out.field("report", &true);
        }
        if let Some(block) = self.block() {
            out.field("block_for", &block);
        }
        out.finish()
    }
}

impl Rule {
    /// A rule enforcing `rate` with the exact sliding log.
    pub fn new(rate: Rate) -> Rule {
        Rule {
            limit: NonZeroU64::new(rate.limit).unwrap_or(NonZeroU64::MIN),
            window_and_algorithm: rate.window_us << ALGORITHM_BITS,
            options: 0,
            burst: 0,
        }
    }

    /// At most `limit` places held at once per key, each by a lease of up
    /// to a day ([`Algorithm::Concurrency`]; the rule's window is the
    /// longest lease it grants). For other longest leases:
    /// `Rule::new(Rate::new(limit, longest)?).with_algorithm(Algorithm::Concurrency)`.
    ///
    /// ```
    /// use slidegate::{Algorithm, Rule};
    /// let exports = Rule::concurrency(3)?;
    /// assert_eq!(exports.algorithm(), Algorithm::Concurrency);
    /// assert_eq!(exports.to_string(), "3/1d concurrency");
    /// assert_eq!(Rule::parse("3/1d concurrency")?, exports);
    /// # Ok::<(), slidegate::Error>(())
    /// ```
    pub fn concurrency(limit: u64) -> Result<Rule> {
        let rate = Rate::new(limit, Self::CONCURRENCY_LONGEST_LEASE)?;
        Ok(Rule::new(rate).with_algorithm(Algorithm::Concurrency))
    }

    /// The window of [`Rule::concurrency`]: the longest lease it grants.
    pub const CONCURRENCY_LONGEST_LEASE: Duration = Duration::from_secs(86_400);

    /// Parses a rule in [the rule grammar](Rule#the-rule-grammar): a rate
    /// alone (`"100/1m"`) is a sliding-log rule.
    pub fn parse(text: &str) -> Result<Rule> {
        parse_rule(text)
    }

    /// The same rate under another algorithm. A burst belongs to `gcra`:
    /// a rule moved to another algorithm loses it.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Rule {
        Rule {
            window_and_algorithm: (self.window_and_algorithm & !ALGORITHM_MASK) | algorithm.index(),
            burst: if algorithm == Algorithm::Gcra {
                self.burst
            } else {
                0
            },
            ..self
        }
    }

    /// The same `gcra` rule with a bucket of `burst` units, refilled at
    /// the rate (`limit / window`): `burst` pass at once from a full
    /// bucket, then one every `window / limit`, and no interval of length
    /// `t` ever admits more than `burst + limit · t / window`. Without a
    /// burst the bucket holds `limit`. A burst is part of the rule's state
    /// ([`same_state`](Rule::same_state)).
    ///
    /// Fails with [`Error::InvalidBurst`] for another algorithm, for 0 or
    /// more than [`Rate::MAX_LIMIT`], and for a bucket that would take
    /// more than [`Rate::MAX_WINDOW`] to refill (`burst · window / limit`).
    pub fn with_burst(self, burst: u64) -> Result<Rule> {
        let invalid = |reason: String| Err(Error::InvalidBurst { got: burst, reason });
        if self.algorithm() != Algorithm::Gcra {
            return invalid(format!(
                "a burst applies to the gcra algorithm only, and this rule uses {}",
                self.algorithm()
            ));
        }
        if burst == 0 || burst > Rate::MAX_LIMIT {
            return invalid(format!("it must be between 1 and {}", Rate::MAX_LIMIT));
        }
        let refill_us =
            u128::from(burst) * u128::from(self.window_micros()) / u128::from(self.limit.get());
        if refill_us > Rate::MAX_WINDOW.as_micros() {
            return invalid(
                "refilling it (burst × window / limit) would take more than 10 years".to_owned(),
            );
        }
        Ok(Rule {
            burst: if burst == self.limit.get() { 0 } else { burst },
            ..self
        })
    }

    /// The most units that may pass at once: the [burst](Rule::with_burst)
    /// of a `gcra` rule given one, else the limit. `remaining` runs from 0
    /// to this.
    #[inline]
    pub fn burst(&self) -> u64 {
        if self.burst == 0 {
            self.limit.get()
        } else {
            self.burst
        }
    }

    /// True when the rule has a [burst](Rule::with_burst) other than its limit.
    #[inline]
    pub fn has_burst(&self) -> bool {
        self.burst != 0
    }

    /// The rate.
    #[inline]
    pub fn rate(&self) -> Rate {
        Rate {
            limit: self.limit.get(),
            window_us: self.window_micros(),
        }
    }

    /// The algorithm.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        Algorithm::of_index(self.window_and_algorithm & ALGORITHM_MASK)
    }

    /// The rate's limit.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit.get()
    }

    /// The rate's window in microseconds.
    #[inline]
    pub fn window_micros(&self) -> u64 {
        self.window_and_algorithm >> ALGORITHM_BITS
    }

    /// The same rule that *reports* usage: every hit is recorded, whether
    /// or not it fits, and answered as usual (denied when the usage, the
    /// hit included, is over the limit). Later requests are then denied
    /// until the reported usage slides out of the window. This is how a
    /// cost known only after the response (tokens, bytes) is counted:
    /// check with cost 0 before, report the real cost after. A reported
    /// cost may exceed the limit (up to [`Rate::MAX_LIMIT`]).
    ///
    /// ```
    /// use slidegate::{MemoryStore, Rule};
    /// let store: MemoryStore = MemoryStore::new();
    /// let tokens = Rule::parse("100/1m")?;
    /// assert!(store.acquire("user", &[tokens], 0)?.allowed());            // before the call
    /// let after = store.acquire("user", &[tokens.reporting()], 150)?;      // its real cost
    /// assert!(!after.allowed());
    /// assert!(!store.acquire("user", &[tokens], 0)?.allowed());           // until it leaves the window
    /// # Ok::<(), slidegate::Error>(())
    /// ```
    pub fn reporting(self) -> Rule {
        Rule {
            options: self.options | 1,
            ..self
        }
    }

    /// The most one hit (or the hits of one decision on one state) may
    /// cost under this rule: its [burst](Rule::burst) (the limit, unless a
    /// `gcra` rule has a burst of its own), which a larger cost could never
    /// pass, or for a rule that [reports](Rule::reporting) usage, which
    /// may exceed the limit, [`Rate::MAX_LIMIT`]. A
    /// [concurrency](Algorithm::Concurrency) rule takes places by leases
    /// only: 0 outside of one.
    #[inline]
    pub fn max_cost(&self) -> u64 {
        if self.window_and_algorithm & ALGORITHM_MASK == Algorithm::Concurrency.index() {
            0
        } else if self.reports() {
            Rate::MAX_LIMIT
        } else {
            self.burst()
        }
    }

    /// True when the rule [reports](Rule::reporting) usage.
    #[inline]
    pub fn reports(&self) -> bool {
        self.options & 1 == 1
    }

    /// The same rule with a *lockout*: once a request of this key is
    /// denied by this rule, every request of the key under it is denied
    /// until `block` has passed (`retry_after` says when), however little
    /// it costs and whatever the window says meanwhile. Denials during the
    /// block do not extend it. `block` runs from 1 ms to
    /// [`Rate::MAX_WINDOW`]; [`Duration::ZERO`] takes the lockout away.
    ///
    /// The block is kept with the rule's state for the key (in Redis, for
    /// every process that shares it) and is seen by requests whose rule
    /// has a lockout; [`reset`](crate::Store::reset) lifts it.
    pub fn block_for(self, block: Duration) -> Result<Rule> {
        if block.is_zero() {
            return Ok(Rule {
                options: self.options & 1,
                ..self
            });
        }
        if block < Rate::MIN_WINDOW || block > Rate::MAX_WINDOW {
            return Err(Error::InvalidBlock {
                got: block,
                max: Rate::MAX_WINDOW,
            });
        }
        // Checked above: fits in u64 microseconds, below 2^49.
        let block_us = block.as_micros() as u64;
        Ok(Rule {
            options: (block_us << 1) | (self.options & 1),
            ..self
        })
    }

    /// The [lockout](Rule::block_for) that follows a denial, if any.
    #[inline]
    pub fn block(&self) -> Option<Duration> {
        let us = self.block_micros();
        (us > 0).then(|| Duration::from_micros(us))
    }

    /// The lockout in microseconds, 0 when none.
    #[inline]
    pub fn block_micros(&self) -> u64 {
        self.options >> 1
    }

    /// True when the rule reports or locks out.
    #[inline]
    pub fn has_options(&self) -> bool {
        self.options != 0
    }

    /// The rule without its options: limit, window, algorithm and burst,
    /// what names its state.
    #[inline]
    pub fn without_options(self) -> Rule {
        Rule { options: 0, ..self }
    }

    /// True when both rules count on the same state (the same limit,
    /// window, algorithm and burst, whatever their options).
    #[inline]
    pub fn same_state(&self, other: &Rule) -> bool {
        self.limit == other.limit
            && self.window_and_algorithm == other.window_and_algorithm
            && self.burst == other.burst
    }
}

impl From<Rate> for Rule {
    fn from(rate: Rate) -> Rule {
        Rule::new(rate)
    }
}

impl fmt::Display for Rule {
    /// `100/1m` for the sliding log, `100/1m gcra` otherwise, then a
    /// burst (`10/1s gcra burst 50`), followed by its options: `5/15m
    /// block_for 1h`, `100/1m report`. [`Rule::parse`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.rate())?;
        if self.algorithm() != Algorithm::SlidingLog {
            write!(f, " {}", self.algorithm())?;
        }
        if self.burst != 0 {
            write!(f, " burst {}", self.burst)?;
        }
        if self.reports() {
            f.write_str(" report")?;
        }
        if self.block_micros() > 0 {
            // The window format writes a duration in its shortest unit.
            let block = Rate {
                limit: 1,
                window_us: self.block_micros(),
            }
            .to_string();
            write!(f, " block_for {}", block.trim_start_matches("1/"))?;
        }
        Ok(())
    }
}

impl FromStr for Rule {
    type Err = Error;

    fn from_str(text: &str) -> Result<Rule> {
        Rule::parse(text)
    }
}

/// [The rule grammar](Rule#the-rule-grammar): the rate is every word
/// before the first keyword (a window may hold a space: `100/2 minutes`).
fn parse_rule(text: &str) -> Result<Rule> {
    let invalid = |reason: String| Error::InvalidRule {
        input: text.to_owned(),
        reason,
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let is_keyword = |word: &str| {
        matches!(word, "burst" | "report" | "block_for") || word.parse::<Algorithm>().is_ok()
    };
    let rate_words = words
        .iter()
        .position(|w| is_keyword(w))
        .unwrap_or(words.len());
    if rate_words == words.len() {
        // A rate alone: its own error, as before the grammar had options.
        return Ok(Rule::new(text.parse()?));
    }
    let rate: Rate = words[..rate_words]
        .join(" ")
        .parse()
        .map_err(|e: Error| invalid(e.to_string()))?;
    let (mut algorithm, mut burst, mut report, mut block) = (None, None, false, None);
    let mut rest = words[rate_words..].iter();
    let twice = |word: &str| invalid(format!("{word} is given twice"));
    while let Some(&word) = rest.next() {
        let mut value = |what: &str| {
            rest.next()
                .copied()
                .ok_or_else(|| invalid(format!("{word} needs {what}")))
        };
        match word {
            "burst" => {
                let n = value("a whole number, e.g. burst 50")?;
                let n: u64 = n
                    .parse()
                    .map_err(|_| invalid(format!("burst {n:?} is not a whole number")))?;
                if burst.replace(n).is_some() {
                    return Err(twice(word));
                }
            }
            "report" => {
                if std::mem::replace(&mut report, true) {
                    return Err(twice(word));
                }
            }
            "block_for" => {
                let d = value("a duration, e.g. block_for 1h")?;
                let d = parse_window(d).map_err(|e| invalid(e.to_string()))?;
                if block.replace(d).is_some() {
                    return Err(twice(word));
                }
            }
            other => match other.parse::<Algorithm>() {
                Ok(named) if algorithm.replace(named).is_none() => {}
                Ok(_) => return Err(invalid("the algorithm is given twice".to_owned())),
                Err(_) => {
                    return Err(invalid(format!(
                        "unexpected {other:?} (expected an algorithm, burst N, report or block_for DURATION)"
                    )));
                }
            },
        }
    }
    // A burst alone names the one algorithm that has one.
    let algorithm = algorithm.unwrap_or(if burst.is_some() {
        Algorithm::Gcra
    } else {
        Algorithm::SlidingLog
    });
    let mut rule = Rule::new(rate).with_algorithm(algorithm);
    if let Some(burst) = burst {
        rule = rule.with_burst(burst)?;
    }
    if report {
        rule = rule.reporting();
    }
    match block {
        Some(block) if block.is_zero() => Err(invalid("block_for must be at least 1ms".to_owned())),
        Some(block) => rule.block_for(block),
        None => Ok(rule),
    }
}

#[cfg(test)]
mod tests;
