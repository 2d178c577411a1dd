//! The one Lua script every decision runs, and the plan it is given.
//!
//! The text is constant (built at compile time from one file per
//! algorithm plus the driver), so Redis caches it once and every decision
//! is an EVALSHA with its parameters in KEYS and ARGV only.
//!
//! Parameters and reply are little-endian doubles (every value is an
//! integer below 2^53, so exact): Lua reads them with one `struct.unpack`
//! and answers with one `struct.pack`, where text would cost a `tonumber`
//! per parameter and a table per reply, a large part of the Redis CPU of a
//! decision.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

use super::keys::state_key;

/// The script. The chunk runs in full on every EVALSHA, so it starts with
/// what every call needs and the common call (one sliding-log hit), which
/// returns before any function of the other paths is created: the exact
/// integer helpers, the algorithms and the driver of batches.
pub(crate) const SCRIPT_TEXT: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("sliding_log_one.lua"),
    include_str!("arith.lua"),
    include_str!("sliding_log.lua"),
    include_str!("sliding_counter.lua"),
    include_str!("fixed_window.lua"),
    include_str!("gcra.lua"),
    include_str!("main.lua"),
);

/// Bytes of one number in the parameters and the reply.
const NUMBER: usize = 8;
/// Numbers per hit in the reply: allowed, remaining, retry_after, reset_after.
const REPLY_NUMBERS: usize = 4;
/// Bits of reset_after in an integer denial (see [`Plan::decisions`]).
const COMPACT_SHIFT: u32 = 26;
/// The largest expiry margin sent, in ms (about 35 years): keeps the
/// script's TTL arithmetic exact and within what PEXPIRE accepts.
const MAX_MARGIN_MS: u64 = 1 << 40;

/// How a step of a cross-slot decision is told apart from a plain call.
const STEP_SCALE: f64 = 1_048_576.0;
/// How long the journal of a cross-slot step (and the tombstone an undo
/// leaves) lives in Redis: the undo of a step is tried within it.
pub(crate) const JOURNAL_LIFETIME: Duration = Duration::from_secs(2);

/// A step of a decision over several slots (see `cross_slot.rs` and
/// `main.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Decide and record, writing the journal, unless already undone.
    Record = 1,
    /// Decide without recording.
    Check = 2,
    /// Take back what the journal says, once; then decide as a check.
    Undo = 3,
}

pub(crate) static SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(SCRIPT_TEXT));

/// One hit, resolved: which KEYS entry holds its state, what it costs and
/// what is checked for it.
#[derive(Clone, Copy, Debug)]
struct PlannedHit {
    key_index: usize,
    rule: Rule,
    cost: u64,
    asked: u64,
}

/// What one script call decides: its keys and hits, in the caller's order.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The Redis keys (KEYS), one per distinct state.
    pub(crate) keys: Vec<String>,
    /// The caller's key of each entry of `keys`, for errors.
    owners: Vec<String>,
    hits: Vec<PlannedHit>,
}

impl Plan {
    /// Resolves `hits` (already validated one by one) the way the memory
    /// store does: hits on the same Redis key (the same key and rule)
    /// share one state and add up, and a sum above the limit is
    /// [`Error::CostExceedsLimit`].
    pub(crate) fn new(prefix: &str, hits: &[(&str, Rule, u64)]) -> Result<Plan> {
        let mut keys: Vec<String> = Vec::with_capacity(hits.len());
        let mut owners: Vec<String> = Vec::with_capacity(hits.len());
        let mut totals: Vec<u64> = Vec::with_capacity(hits.len());
        let mut index: HashMap<String, usize> = HashMap::with_capacity(hits.len());
        let mut planned = Vec::with_capacity(hits.len());
        for &(key, rule, cost) in hits {
            let state = state_key(prefix, key, rule);
            let key_index = match index.get(&state) {
                Some(&i) => i,
                None => {
                    index.insert(state.clone(), keys.len());
                    keys.push(state);
                    owners.push(key.to_owned());
                    totals.push(0);
                    keys.len() - 1
                }
            };
            let total = totals[key_index].saturating_add(cost);
            if total > rule.limit() {
                return Err(Error::CostExceedsLimit {
                    cost: total,
                    limit: rule.limit(),
                });
            }
            totals[key_index] = total;
            planned.push(PlannedHit {
                key_index,
                rule,
                cost,
                asked: if cost == 0 { 0 } else { total },
            });
        }
        Ok(Plan {
            keys,
            owners,
            hits: planned,
        })
    }

    /// The typed error for a `KEYCONFLICT` reply (`KEYCONFLICT <index>
    /// <what the key holds>`, see `arith.lua`), naming the caller's key and
    /// the Redis key; `None` for any other error.
    /// A `WRONGTYPE` error of a call with one key is that key's: the
    /// common call reads its one key without `pcall` (it costs Redis CPU).
    pub(crate) fn conflict(&self, error: &redis::RedisError) -> Option<Error> {
        if error.code() == Some("WRONGTYPE") && self.keys.len() == 1 {
            return Some(Error::KeyConflict {
                key: self.owners.first()?.clone(),
                detail: format!(
                    "the Redis key {:?} holds another type of value (WRONGTYPE)",
                    self.keys.first()?
                ),
            });
        }
        if error.code() != Some("KEYCONFLICT") {
            return None;
        }
        let detail = error.detail().unwrap_or_default();
        let (index, what) = detail.split_once(' ')?;
        let i = index.parse::<usize>().ok()?.checked_sub(1)?;
        // Errors raised inside a function carry the script's place: not
        // the caller's business.
        let what = what.split(" script: ").next().unwrap_or(what).trim();
        Some(Error::KeyConflict {
            key: self.owners.get(i)?.clone(),
            detail: format!("the Redis key {:?} {what}", self.keys.get(i)?),
        })
    }

    /// The script invocation: `now` is `None` for Redis' own clock.
    ///
    /// ARGV\[1\] holds, as little-endian doubles: now (µs, or -1 for
    /// Redis' clock), the expiry margin (ms) and the number of hits; then
    /// for one hit its algorithm code, limit, window (µs) and cost, and for
    /// several, per hit its KEYS index (from 1), algorithm code, limit,
    /// window, cost and checked cost. A cross-slot step (see [`Step`])
    /// always uses the second layout, says its step in the number of hits
    /// (`-(step * 2^20 + hits)`), ends with the journal's lifetime (ms), and
    /// adds the journal's key last to KEYS.
    pub(crate) fn invocation(
        &self,
        now: Option<u64>,
        margin_ms: u64,
        step: Option<(Step, &str)>,
    ) -> redis::ScriptInvocation<'static> {
        let mut call = SCRIPT.prepare_invoke();
        for key in &self.keys {
            call.key(key.as_str());
        }
        if let Some((_, journal)) = step {
            call.key(journal);
        }
        let mut spec = Vec::with_capacity(NUMBER * (4 + 6 * self.hits.len()));
        let mut put = |x: f64| spec.extend_from_slice(&x.to_le_bytes());
        // Times, limits, windows and costs are all below 2^53 (times by
        // more than a century), so `as f64` is exact.
        put(now.map_or(-1.0, |now| now as f64));
        put(margin_ms.min(MAX_MARGIN_MS) as f64);
        let n = self.hits.len() as f64;
        put(match step {
            Some((step, _)) => -(f64::from(step as u8) * STEP_SCALE + n),
            None => n,
        });
        match (self.hits.as_slice(), step) {
            ([hit], None) => {
                // One hit: its key is KEYS[1] and it checks its own cost.
                put(f64::from(algorithm_code(hit.rule.algorithm())));
                put(hit.rule.limit() as f64);
                put(hit.rule.window_micros() as f64);
                put(hit.cost as f64);
            }
            _ => {
                for hit in &self.hits {
                    put((hit.key_index + 1) as f64);
                    put(f64::from(algorithm_code(hit.rule.algorithm())));
                    put(hit.rule.limit() as f64);
                    put(hit.rule.window_micros() as f64);
                    put(hit.cost as f64);
                    put(hit.asked as f64);
                }
            }
        }
        if step.is_some() {
            put(JOURNAL_LIFETIME.as_millis() as f64);
        }
        call.arg(spec);
        call
    }

    /// True when some hit consumes (a cost above 0).
    pub(crate) fn consumes(&self) -> bool {
        self.hits.iter().any(|h| h.cost > 0)
    }

    /// The script's reply as one decision per hit.
    ///
    /// Usually four little-endian doubles per hit: allowed, remaining,
    /// retry_after (µs), reset_after (µs). A single sliding-log hit answers
    /// its two common decisions with an integer instead (a reply table or
    /// string costs Redis measurable CPU): `r >= 0` is allowed with `r`
    /// remaining, retry 0 and reset one window + 1 µs away (decided at
    /// `now`); `r < 0` is denied with nothing remaining, and
    /// `-r = retry_after * 2^26 + reset_after` (both below 2^26 µs).
    pub(crate) fn decisions(&self, reply: &redis::Value) -> Result<Vec<Decision>> {
        let bytes = match reply {
            redis::Value::BulkString(bytes) => bytes,
            &redis::Value::Int(r) => return self.compact_decision(r).map(|d| vec![d]),
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

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::SlidingLog => 0,
        Algorithm::SlidingCounter => 1,
        Algorithm::FixedWindow => 2,
        Algorithm::Gcra => 3,
    }
}
