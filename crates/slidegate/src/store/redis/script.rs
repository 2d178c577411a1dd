//! The one Lua script every decision runs, and the plan it is given.
//!
//! The text is constant (built at compile time from one file per
//! algorithm plus the driver), so Redis caches it once and every decision
//! is an EVALSHA with its parameters in KEYS and ARGV only.

use std::sync::LazyLock;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;

use super::keys::state_key;

/// The script: exact integer helpers, the four algorithms, the driver.
pub(crate) const SCRIPT_TEXT: &str = concat!(
    include_str!("arith.lua"),
    include_str!("sliding_log.lua"),
    include_str!("sliding_counter.lua"),
    include_str!("fixed_window.lua"),
    include_str!("gcra.lua"),
    include_str!("main.lua"),
);

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
    pub(crate) keys: Vec<String>,
    hits: Vec<PlannedHit>,
}

impl Plan {
    /// Resolves `hits` (already validated one by one) the way the memory
    /// store does: hits on the same key and rule share one state and add
    /// up, and a sum above the limit is [`Error::CostExceedsLimit`].
    pub(crate) fn new(prefix: &str, hits: &[(&str, Rule, u64)]) -> Result<Plan> {
        let mut keys: Vec<String> = Vec::with_capacity(hits.len());
        let mut planned = Vec::with_capacity(hits.len());
        for (i, &(key, rule, cost)) in hits.iter().enumerate() {
            let before: u64 = hits[..i]
                .iter()
                .filter(|(k, r, _)| *k == key && *r == rule)
                .map(|(_, _, c)| c)
                .sum();
            let total = before + cost;
            if total > rule.limit() {
                return Err(Error::CostExceedsLimit {
                    cost: total,
                    limit: rule.limit(),
                });
            }
            let same = hits[..i]
                .iter()
                .position(|(k, r, _)| *k == key && *r == rule);
            let key_index = match same {
                Some(j) => planned.get(j).map_or(0, |p: &PlannedHit| p.key_index),
                None => {
                    keys.push(state_key(prefix, key, rule));
                    keys.len() - 1
                }
            };
            planned.push(PlannedHit {
                key_index,
                rule,
                cost,
                asked: if cost == 0 { 0 } else { total },
            });
        }
        Ok(Plan {
            keys,
            hits: planned,
        })
    }

    /// The script invocation: `now` is `None` for Redis' own clock.
    pub(crate) fn invocation(
        &self,
        now: Option<u64>,
        margin_ms: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut call = SCRIPT.prepare_invoke();
        for key in &self.keys {
            call.key(key.as_str());
        }
        match now {
            Some(now) => call.arg(now),
            None => call.arg(""),
        };
        call.arg(margin_ms).arg(self.hits.len());
        for hit in &self.hits {
            call.arg(hit.key_index + 1)
                .arg(algorithm_code(hit.rule.algorithm()))
                .arg(hit.rule.limit())
                .arg(hit.rule.window_micros())
                .arg(hit.cost)
                .arg(hit.asked);
        }
        call
    }

    /// The script's reply as one decision per hit.
    pub(crate) fn decisions(&self, reply: &[i64]) -> Result<Vec<Decision>> {
        if reply.len() != 5 * self.hits.len() {
            return Err(Error::Store(format!(
                "the script answered {} numbers for {} hits",
                reply.len(),
                self.hits.len()
            )));
        }
        reply
            .chunks_exact(5)
            .map(|d| {
                let field = |x: i64| {
                    u64::try_from(x)
                        .map_err(|_| Error::Store(format!("the script answered a negative {x}")))
                };
                Ok(Decision::from_parts(
                    d[0] == 1,
                    field(d[1])?,
                    field(d[2])?,
                    field(d[3])?,
                    field(d[4])?,
                ))
            })
            .collect()
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
