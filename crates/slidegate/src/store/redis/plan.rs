//! The plan of a decision: its states and hits, resolved once; the part
//! of a script call it encodes ([`Part`]); and how it reads the script's
//! answer.
//!
//! A decision is planned once ([`Plan`]) and encoded once, by its caller,
//! into a [`Part`]: its Redis keys and its numbers in one buffer. Whoever
//! sends it copies the part into the command, alone or coalesced (see
//! `script.rs`). Either way the answer for it is the same value, decoded
//! by the caller with its plan.

use std::collections::HashMap;
use std::time::Duration;

use smallvec::SmallVec;

use super::codes::{COMPACT_SHIFT, HIT_NUMBERS, Mode, options_code};
use super::keys::{slot_of, state_key, write_state_key};
use super::script::{NUMBER, Part, push_key};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rule};

/// Numbers per hit in the reply: allowed, remaining, retry_after, reset_after.
const REPLY_NUMBERS: usize = 4;
/// Distinct states a plan finds by a linear search; beyond, by a map.
const LINEAR_STATES: usize = 16;
/// How long the journal of a cross-slot step (and the tombstone an undo
/// leaves) lives in Redis: the undo of a step is tried within it.
pub(crate) const JOURNAL_LIFETIME: Duration = Duration::from_secs(2);

/// A step of a decision over several slots (see `cross_slot.rs` and
/// `main.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Decide and record, writing the journal, unless already undone.
    Record,
    /// Decide without recording.
    Check,
    /// Take back what the journal says, once; then decide as a check.
    Undo,
}

impl Step {
    /// The script's mode for this step.
    fn mode(self) -> Mode {
        match self {
            Step::Record => Mode::Record,
            Step::Check => Mode::Check,
            Step::Undo => Mode::Undo,
        }
    }
}

/// One hit, resolved: which state (KEYS entry) it counts on, what it costs
/// and what is checked for it.
#[derive(Clone, Copy, Debug)]
struct PlannedHit {
    state: usize,
    rule: Rule,
    cost: u64,
    asked: u64,
}

/// What one decision asks of the script: its states and hits, in the
/// caller's order. Borrows the caller's keys: the Redis keys are written
/// into the [`Part`] directly, and named again only for an error.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    prefix: &'a str,
    /// The distinct states, in KEYS order: the caller's key and the rule.
    states: SmallVec<[(&'a str, Rule); 1]>,
    hits: SmallVec<[PlannedHit; 1]>,
    /// For a reservation: the longest wait (µs).
    reserve: Option<u64>,
}

impl<'a> Plan<'a> {
    /// Resolves `hits` (already validated one by one) the way the memory
    /// store does: hits on the same Redis key (the same key and rule)
    /// share one state and add up, and a sum above the limit is
    /// [`Error::CostExceedsLimit`].
    pub(crate) fn new(
        prefix: &'a str,
        hits: impl IntoIterator<Item = (&'a str, Rule, u64)>,
    ) -> Result<Plan<'a>> {
        let hits = hits.into_iter();
        let mut plan = Plan {
            prefix,
            states: SmallVec::new(),
            hits: SmallVec::with_capacity(hits.size_hint().0),
            reserve: None,
        };
        let mut totals: SmallVec<[u64; 1]> = SmallVec::new();
        // Only a long batch pays for a map.
        let mut index: Option<HashMap<(&'a str, Rule), usize>> = None;
        for (key, asked_rule, cost) in hits {
            // Options do not name the state: hits of one rule with and
            // without them count on one key.
            let rule = asked_rule.without_options();
            let found = match &index {
                Some(index) => index.get(&(key, rule)).copied(),
                None => plan.states.iter().position(|&s| s == (key, rule)),
            };
            let state = match found {
                Some(state) => state,
                None => {
                    plan.states.push((key, rule));
                    totals.push(0);
                    let state = plan.states.len() - 1;
                    match &mut index {
                        Some(index) => {
                            index.insert((key, rule), state);
                        }
                        None if plan.states.len() > LINEAR_STATES => {
                            index = Some(
                                plan.states
                                    .iter()
                                    .enumerate()
                                    .map(|(i, &s)| (s, i))
                                    .collect(),
                            );
                        }
                        None => {}
                    }
                    state
                }
            };
            let total = totals[state].saturating_add(cost);
            if total > asked_rule.max_cost() {
                return Err(Error::CostExceedsLimit {
                    cost: total,
                    limit: asked_rule.max_cost(),
                });
            }
            totals[state] = total;
            plan.hits.push(PlannedHit {
                state,
                rule: asked_rule,
                cost,
                asked: if cost == 0 { 0 } else { total },
            });
        }
        Ok(plan)
    }

    /// This plan as a reservation that waits at most `max_wait_us`
    /// ([`Mode::Reserve`]; never a step of a cross-slot decision).
    pub(crate) fn reserving(mut self, max_wait_us: u64) -> Plan<'a> {
        self.reserve = Some(max_wait_us);
        self
    }

    /// The caller's key of the first state: it names the slot of them all.
    pub(crate) fn route(&self) -> &'a str {
        self.states.first().map_or("", |&(key, _)| key)
    }

    /// The Redis key of the first state (for logs).
    pub(crate) fn first_redis_key(&self) -> String {
        self.states
            .first()
            .map_or_else(String::new, |&(key, rule)| {
                state_key(self.prefix, key, rule)
            })
    }

    /// This decision's part of a script call, for `step` of a cross-slot
    /// decision (with its journal's key) or for a plain decision.
    ///
    /// Its numbers are those of the decision's own call after `now` and
    /// the margin: the hit count (with its mode, see `codes.rs`), the
    /// number of keys (not sent in a plain call), then for one hit its
    /// algorithm code, limit, window (µs) and cost, and for several, per
    /// hit its state (KEYS index from 1), algorithm code, limit, window,
    /// cost, checked cost and burst, and a step's journal lifetime (ms). Keys:
    /// one per state, a step's journal last.
    pub(crate) fn part(&self, step: Option<(Step, &str)>) -> Part {
        let alone = matches!((self.hits.as_slice(), step), ([_], None)) && self.reserve.is_none();
        // A hit that reports, or has a burst, goes in the batch layout even
        // alone (Mode::WithOptions): the one-hit steps know lockouts, not
        // reports, and carry no burst.
        let reports = alone
            && self
                .hits
                .iter()
                .any(|hit| hit.rule.reports() || hit.rule.has_burst());
        let one = alone && !reports;
        let numbers = 2 + if one {
            4
        } else {
            HIT_NUMBERS * self.hits.len() + 1
        };
        let mut buf = Vec::with_capacity(
            self.states.len() * (self.prefix.len() + 48)
                + self.states.iter().map(|(key, _)| key.len()).sum::<usize>()
                + step.map_or(0, |(_, journal)| journal.len() + 4)
                + NUMBER * numbers,
        );
        for &(key, rule) in &self.states {
            push_key(&mut buf, |buf| write_state_key(buf, self.prefix, key, rule));
        }
        if let Some((_, journal)) = step {
            push_key(&mut buf, |buf| buf.extend_from_slice(journal.as_bytes()));
        }
        let keys_end = buf.len();
        let nkeys = self.states.len() + usize::from(step.is_some());
        let mut put = |x: f64| buf.extend_from_slice(&x.to_le_bytes());
        // Times, limits, windows and costs are all below 2^53 (times by
        // more than a century), so `as f64` is exact.
        let mode = match (step, self.reserve) {
            (Some((step, _)), _) => step.mode(),
            (None, Some(_)) => Mode::Reserve,
            (None, None) if reports => Mode::WithOptions,
            (None, None) => Mode::Plain,
        };
        put(mode.hit_count(self.hits.len()));
        put(nkeys as f64);
        match (self.hits.as_slice(), step) {
            ([hit], None) if one => {
                // One hit: its key is the first and it checks its own cost.
                put(options_code(hit.rule));
                put(hit.rule.limit() as f64);
                put(hit.rule.window_micros() as f64);
                put(hit.cost as f64);
            }
            _ => {
                for hit in &self.hits {
                    put((hit.state + 1) as f64);
                    put(options_code(hit.rule));
                    put(hit.rule.limit() as f64);
                    put(hit.rule.window_micros() as f64);
                    put(hit.cost as f64);
                    put(hit.asked as f64);
                    put(hit.rule.burst() as f64);
                }
            }
        }
        if step.is_some() {
            put(JOURNAL_LIFETIME.as_millis() as f64);
        } else if let Some(max_wait) = self.reserve {
            put(max_wait as f64);
        } else if reports {
            put(0.0);
        }
        Part::new(buf, keys_end, nkeys, slot_of(self.route()))
    }

    /// The typed error for a `KEYCONFLICT` reply (`KEYCONFLICT <index>
    /// <what the key holds>`, see `arith.lua`; the index counts KEYS of
    /// the whole call, this decision's from `base + 1`), naming the
    /// caller's key and the Redis key; `None` for any other error.
    /// A `WRONGTYPE` error of a decision with one key is that key's: the
    /// common call reads its one key without `pcall` (it costs Redis CPU).
    pub(crate) fn conflict(&self, error: &redis::RedisError, base: usize) -> Option<Error> {
        let named = |i: usize, what: &str| {
            let &(key, rule) = self.states.get(i)?;
            Some(Error::KeyConflict {
                key: key.to_owned(),
                detail: format!(
                    "the Redis key {:?} {what}",
                    state_key(self.prefix, key, rule)
                ),
            })
        };
        if error.code() == Some("WRONGTYPE") && self.states.len() == 1 {
            return named(0, "holds another type of value (WRONGTYPE)");
        }
        if error.code() != Some("KEYCONFLICT") {
            return None;
        }
        let detail = error.detail().unwrap_or_default();
        let (index, what) = detail.split_once(' ')?;
        let i = index.parse::<usize>().ok()?.checked_sub(base + 1)?;
        // Errors raised inside a function carry the script's place: not
        // the caller's business.
        let what = what.split(" script: ").next().unwrap_or(what).trim();
        named(i, what)
    }

    /// The script's answer for this decision, one decision per hit.
    ///
    /// Usually four little-endian doubles per hit: allowed, remaining,
    /// retry_after (µs), reset_after (µs). A single sliding-log hit answers
    /// its two common decisions with an integer instead (a reply table or
    /// string costs Redis measurable CPU): `r >= 0` is allowed with `r`
    /// remaining, retry 0 and reset one window + 1 µs away (decided at
    /// `now`); `r < 0` is denied with nothing remaining, and
    /// `-r = retry_after * 2^26 + reset_after` (both below 2^26 µs).
    pub(crate) fn decisions(&self, reply: &redis::Value) -> Result<SmallVec<[Decision; 1]>> {
        let bytes = match reply {
            redis::Value::BulkString(bytes) => bytes,
            &redis::Value::Int(r) => return self.compact_decision(r).map(|d| [d].into()),
            other => {
                return Err(Error::Store(format!(
                    "the script answered an unexpected {other:?}"
                )));
            }
        };
        if bytes.len() != NUMBER * REPLY_NUMBERS * self.hits.len() {
            return Err(Error::Store(format!(
                "the script answered {} bytes for {} hits",
                bytes.len(),
                self.hits.len()
            )));
        }
        self.parse_decisions(bytes)
    }

    /// The reply of a reservation: the decisions, and the wait (µs) when
    /// it was granted.
    pub(crate) fn reservation(
        &self,
        reply: &redis::Value,
    ) -> Result<(SmallVec<[Decision; 1]>, Option<u64>)> {
        let redis::Value::BulkString(bytes) = reply else {
            return Err(Error::Store(format!(
                "the script answered an unexpected {reply:?}"
            )));
        };
        let decisions_len = NUMBER * REPLY_NUMBERS * self.hits.len();
        if bytes.len() != decisions_len + NUMBER {
            return Err(Error::Store(format!(
                "the script answered {} bytes for a reservation of {} hits",
                bytes.len(),
                self.hits.len()
            )));
        }
        let mut number = [0u8; NUMBER];
        number.copy_from_slice(&bytes[decisions_len..]);
        let wait = f64::from_le_bytes(number);
        let wait = match wait {
            -1.0 => None,
            w if (0.0..9_007_199_254_740_992.0).contains(&w) && w.fract() == 0.0 => Some(w as u64),
            w => return Err(Error::Store(format!("the script answered a wait of {w}"))),
        };
        Ok((self.parse_decisions(&bytes[..decisions_len])?, wait))
    }

    /// Four numbers per hit: allowed, remaining, retry_after, reset_after.
    fn parse_decisions(&self, bytes: &[u8]) -> Result<SmallVec<[Decision; 1]>> {
        bytes
            .chunks_exact(NUMBER * REPLY_NUMBERS)
            .zip(&self.hits)
            .map(|(d, hit)| {
                let field = |i: usize| {
                    let mut number = [0u8; NUMBER];
                    number.copy_from_slice(&d[NUMBER * i..NUMBER * (i + 1)]);
                    let x = f64::from_le_bytes(number);
                    // Exact integers below 2^53 only: anything else is a bug.
                    if (0.0..9_007_199_254_740_992.0).contains(&x) && x.fract() == 0.0 {
                        Ok(x as u64)
                    } else {
                        Err(Error::Store(format!("the script answered {x}")))
                    }
                };
                Ok(Decision::from_parts(
                    field(0)? == 1,
                    hit.rule.limit(),
                    field(1)?,
                    field(2)?,
                    field(3)?,
                ))
            })
            .collect()
    }

    /// An integer reply: only for one sliding-log hit.
    fn compact_decision(&self, r: i64) -> Result<Decision> {
        let hit = match self.hits.as_slice() {
            [hit] if hit.rule.algorithm() == Algorithm::SlidingLog => hit,
            _ => {
                return Err(Error::Store(format!(
                    "the script answered {r} for {} hits",
                    self.hits.len()
                )));
            }
        };
        let (limit, window) = (hit.rule.limit(), hit.rule.window_micros());
        Ok(match u64::try_from(r) {
            Ok(remaining) => Decision::from_parts(true, limit, remaining, 0, window + 1),
            Err(_) => {
                let times = r.unsigned_abs();
                Decision::from_parts(
                    false,
                    limit,
                    0,
                    times >> COMPACT_SHIFT,
                    times & ((1 << COMPACT_SHIFT) - 1),
                )
            }
        })
    }
}
