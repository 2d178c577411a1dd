//! Reference models: the plainest code that obeys the contract. Every
//! model keeps the raw list of admissions and recomputes everything from it
//! on every call, searching for `retry_after` and `reset_after` instead of
//! computing them in closed form. Stores are compared against these.
//!
//! Time must not go backwards here: the models know nothing of clocks that
//! step back (the stores' handling of that is tested on its own). Entries
//! may lie ahead of `now`: reservations are recorded at the time they wait
//! for.

use std::collections::HashMap;

use slidegate::{Algorithm, Decision, Error, Rule};

/// One (key, rule)'s admissions, `(time, cost)`, oldest first.
#[derive(Clone, Debug, Default)]
pub struct Admissions(Vec<(u64, u64)>);

impl Admissions {
    fn sum_in(&self, from: u64, to: u64) -> u64 {
        self.0
            .iter()
            .filter(|(t, _)| from <= *t && *t <= to)
            .map(|(_, c)| c)
            .sum()
    }

    /// The newest time recorded.
    fn last(&self) -> Option<u64> {
        self.0.iter().map(|(t, _)| *t).max()
    }
}

/// The least `s` in `[lo, hi]` with `pred(s)`, for a predicate that stays
/// true once true; `hi` when none is found below it.
fn least(lo: u64, hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// What a model says about one rule at one time.
struct Model<'a> {
    rule: Rule,
    log: &'a Admissions,
}

impl Model<'_> {
    fn w(&self) -> u64 {
        self.rule.window_micros()
    }

    fn l(&self) -> u64 {
        self.rule.limit()
    }

    /// The most that may pass at once: the GCRA bucket's size.
    fn b(&self) -> u64 {
        self.rule.burst()
    }

    /// Units in use at `t` (for GCRA: the bucket level, in units of cost,
    /// rounded up), assuming no admission after the log's last.
    fn usage(&self, t: u64) -> u64 {
        let w = self.w();
        match self.rule.algorithm() {
            // Every entry not yet expired at `t`, those ahead of it too.
            Algorithm::SlidingLog => self.log.sum_in(t.saturating_sub(w), u64::MAX),
            Algorithm::FixedWindow => {
                let start = t - t % w;
                self.log.sum_in(start, start + w - 1)
            }
            Algorithm::SlidingCounter => {
                let start = t - t % w;
                let current = self.log.sum_in(start, start + w - 1);
                let previous = if start >= w {
                    self.log.sum_in(start - w, start - 1)
                } else {
                    0
                };
                let weighted = (previous as u128 * (w - (t - start)) as u128).div_ceil(w as u128);
                current + weighted as u64
            }
            Algorithm::Gcra => self.gcra_level(t).div_ceil(w as u128) as u64,
            // Places held by leases have a model of their own (lease_reference.rs).
            Algorithm::Concurrency => unreachable!("a rule of places in the model of rates"),
        }
    }

    /// GCRA as a leaky bucket, replayed from the first admission, in the
    /// order recorded. The level is in units of µs·L; each unit of cost
    /// adds W, it drains L per µs, and it holds at most W·B (B the burst,
    /// L unless the rule has one). An admission
    /// recorded before the newest time (a plain one behind a reservation)
    /// is added at the newest time, and a level asked for before the
    /// newest time is the newest one, undrained: the bucket is full from
    /// the moment a reservation is taken.
    fn gcra_level(&self, t: u64) -> u128 {
        let l = self.l() as u128;
        let mut level: u128 = 0;
        let mut last = 0u64;
        for &(at, cost) in &self.log.0 {
            let at = at.max(last);
            level = level.saturating_sub((at - last) as u128 * l) + cost as u128 * self.w() as u128;
            last = at;
        }
        if t < last {
            return level + (last - t) as u128 * l;
        }
        level.saturating_sub((t - last) as u128 * l)
    }

    fn passes(&self, t: u64, cost: u64) -> bool {
        match self.rule.algorithm() {
            Algorithm::Gcra => {
                self.gcra_level(t) + cost as u128 * self.w() as u128
                    <= self.w() as u128 * self.b() as u128
            }
            _ => self.usage(t) + cost <= self.l(),
        }
    }

    /// Units that could pass at `t` one after another.
    fn room(&self, t: u64) -> u64 {
        match self.rule.algorithm() {
            Algorithm::Gcra => least(0, self.b() + 1, |n| !self.passes(t, n)).saturating_sub(1),
            _ => self.l().saturating_sub(self.usage(t)),
        }
    }

    fn horizon(&self, t: u64) -> u64 {
        // Reservations can fill a GCRA bucket for many windows ahead.
        let queued: u64 = self.log.0.iter().map(|(_, c)| c).sum();
        t.max(self.log.last().unwrap_or(0)) + (3 + queued.min(1 << 20)) * self.w() + 2
    }

    fn empty_at(&self, t: u64) -> u64 {
        least(t, self.horizon(t), |s| match self.rule.algorithm() {
            Algorithm::Gcra => self.gcra_level(s) == 0,
            _ => self.usage(s) == 0,
        })
    }
}

/// The reference store: admissions per (key, rule), every reported cost
/// kept as it was reported, and lockouts per (key, rule): when they end.
/// Rules are keyed without their options.
#[derive(Default, Clone)]
pub struct Reference {
    logs: HashMap<(String, Rule), Admissions>,
    blocks: HashMap<(String, Rule), u64>,
}

/// The largest cost a hit may ask: its limit (a GCRA rule's burst, if it
/// has one), or for a rule that reports, the largest limit.
fn max_cost(rule: &Rule) -> u64 {
    if rule.reports() {
        slidegate::Rate::MAX_LIMIT
    } else {
        rule.burst()
    }
}

impl Reference {
    /// What a sliding log of `key` under `rule` holds at `now`: the
    /// admissions that still count, one per microsecond (costs of the same
    /// microsecond added up), oldest first.
    pub fn admissions(&self, key: &str, rule: Rule, now: u64) -> Vec<(u64, u64)> {
        let mut held: Vec<(u64, u64)> = Vec::new();
        let Some(log) = self.logs.get(&(key.to_owned(), rule.without_options())) else {
            return held;
        };
        for &(at, cost) in log
            .0
            .iter()
            .filter(|(at, _)| at + rule.window_micros() >= now)
        {
            match held.last_mut() {
                Some((last, total)) if *last == at => *total += cost,
                _ => held.push((at, cost)),
            }
        }
        held
    }

    pub fn reset(&mut self, key: &str) {
        self.logs.retain(|(k, _), _| k != key);
        self.blocks.retain(|(k, _), _| k != key);
    }

    /// Same contract as `Store::acquire`.
    pub fn acquire(
        &mut self,
        now: u64,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> Result<Decision, Error> {
        if rules.is_empty() {
            return Err(Error::NoRules);
        }
        for rule in rules {
            if cost > max_cost(rule) {
                return Err(Error::CostExceedsLimit {
                    cost,
                    limit: max_cost(rule),
                });
            }
        }
        let hits: Vec<(String, Rule, u64)> =
            rules.iter().map(|r| (key.to_owned(), *r, cost)).collect();
        let decisions = self.batch_unchecked(now, &hits)?;
        Ok(combine(&decisions))
    }

    /// Same contract as `Store::reserve`: the combined decision and the
    /// wait in µs when granted.
    pub fn reserve(
        &mut self,
        now: u64,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: u64,
    ) -> Result<(Decision, Option<u64>), Error> {
        if rules.is_empty() {
            return Err(Error::NoRules);
        }
        for rule in rules {
            if cost > max_cost(rule) {
                return Err(Error::CostExceedsLimit {
                    cost,
                    limit: max_cost(rule),
                });
            }
        }
        if rules.iter().any(Rule::reports) {
            return Err(Error::ReportCannotWait);
        }
        let hits: Vec<(String, Rule, u64)> =
            rules.iter().map(|r| (key.to_owned(), *r, cost)).collect();
        let (decisions, wait) = self.reserve_unchecked(now, &hits, max_wait)?;
        Ok((combine(&decisions), wait))
    }

    /// Same contract as `Store::reserve_batch`: one decision per hit, and
    /// the wait in µs when granted. Found by its own search, over the
    /// time at which every hit fits at once (not through the hits'
    /// `retry_after`, as the stores find it). For rules without options
    /// (`reserve` models lockouts too).
    pub fn reserve_batch(
        &mut self,
        now: u64,
        hits: &[(String, Rule, u64)],
        max_wait: u64,
    ) -> Result<(Vec<Decision>, Option<u64>), Error> {
        assert!(
            hits.iter().all(|(_, rule, _)| !rule.has_options()),
            "the reference's reserve_batch models rules without options"
        );
        if hits.is_empty() {
            return Err(Error::NoRules);
        }
        for (_, rule, cost) in hits {
            if *cost > rule.burst() {
                return Err(Error::CostExceedsLimit {
                    cost: *cost,
                    limit: rule.burst(),
                });
            }
        }
        let max_wait = max_wait.min(slidegate::store::MAX_WAIT.as_micros() as u64);
        // A plain batch at `now`: its errors, and its answer when every
        // hit fits at once.
        let mut copy = self.clone();
        let plain = copy.batch_unchecked(now, hits)?;
        if plain.iter().all(|d| d.allowed()) {
            *self = copy;
            return Ok((plain, Some(0)));
        }
        let at = self.earliest_fit(now, hits);
        if at - now > max_wait {
            return Ok((plain, None));
        }
        for (key, rule, cost) in hits.iter().filter(|h| h.2 > 0) {
            let log = self.logs.entry((key.clone(), *rule)).or_default();
            let recorded = at.max(log.last().unwrap_or(0));
            log.0.push((recorded, *cost));
        }
        Ok((self.granted(now, hits), Some(at - now)))
    }

    /// The least time from `now` at which every hit fits its log, each
    /// asking its own cost plus the costs of the hits before it on the
    /// same state (a probe asks one unit). A window counter whose newest
    /// admission lies in a later window admits nothing before that window
    /// begins; a rule with a lockout that runs admits nothing before it
    /// ends.
    fn earliest_fit(&self, now: u64, hits: &[(String, Rule, u64)]) -> u64 {
        let empty = Admissions::default();
        let needs: Vec<(Model<'_>, u64, u64)> = hits
            .iter()
            .enumerate()
            .map(|(i, (key, rule, cost))| {
                let before: u64 = hits[..i]
                    .iter()
                    .filter(|(k, r, _)| k == key && r.same_state(rule))
                    .map(|(_, _, c)| c)
                    .sum();
                let asked = if *cost == 0 { 1 } else { before + cost };
                let state = (key.clone(), rule.without_options());
                let log = self.logs.get(&state).unwrap_or(&empty);
                let blocked_until = match rule.block() {
                    Some(_) => self.blocks.get(&state).copied().unwrap_or(0),
                    None => 0,
                };
                (Model { rule: *rule, log }, asked, blocked_until)
            })
            .collect();
        let not_before = |m: &Model<'_>| match m.rule.algorithm() {
            Algorithm::FixedWindow | Algorithm::SlidingCounter => {
                let last = m.log.last().unwrap_or(0);
                last - last % m.w()
            }
            _ => 0,
        };
        let horizon = needs
            .iter()
            .map(|(m, _, blocked_until)| m.horizon(now.max(*blocked_until)))
            .max()
            .unwrap_or(now);
        least(now, horizon, |s| {
            needs.iter().all(|(m, asked, blocked_until)| {
                s >= *blocked_until && s >= not_before(m) && m.passes(s, *asked)
            })
        })
    }

    /// A reservation of `hits` (one key's rules, options included), found
    /// by the model's own search as `reserve_batch` is.
    fn reserve_unchecked(
        &mut self,
        now: u64,
        hits: &[(String, Rule, u64)],
        max_wait: u64,
    ) -> Result<(Vec<Decision>, Option<u64>), Error> {
        let max_wait = max_wait.min(slidegate::store::MAX_WAIT.as_micros() as u64);
        // A plain decision at `now`: its errors, and its answer when every
        // hit fits at once.
        let mut copy = self.clone();
        let plain = copy.batch_unchecked(now, hits)?;
        if plain.iter().all(|d| d.allowed()) {
            *self = copy;
            return Ok((plain, Some(0)));
        }
        let at = self.earliest_fit(now, hits);
        if at - now > max_wait {
            // A refusal is a denial like any other (it starts lockouts).
            *self = copy;
            return Ok((plain, None));
        }
        for (key, rule, cost) in hits.iter().filter(|h| h.2 > 0) {
            let log = self
                .logs
                .entry((key.clone(), rule.without_options()))
                .or_default();
            let recorded = at.max(log.last().unwrap_or(0));
            log.0.push((recorded, *cost));
        }
        Ok((self.granted(now, hits), Some(at - now)))
    }

    /// The answers of a granted reservation: allowed, with what remains
    /// now, the reservation counted.
    fn granted(&self, now: u64, hits: &[(String, Rule, u64)]) -> Vec<Decision> {
        let empty = Admissions::default();
        hits.iter()
            .map(|(k, r, _)| {
                let log = self
                    .logs
                    .get(&(k.clone(), r.without_options()))
                    .unwrap_or(&empty);
                let d = decide_one(Model { rule: *r, log }, now, 0);
                Decision::from_parts(
                    true,
                    d.limit(),
                    d.remaining(),
                    0,
                    d.reset_after().as_micros() as u64,
                )
            })
            .collect()
    }

    /// Same contract as `Store::acquire_batch`.
    pub fn acquire_batch(
        &mut self,
        now: u64,
        hits: &[(String, Rule, u64)],
    ) -> Result<Vec<Decision>, Error> {
        if hits.is_empty() {
            return Err(Error::NoRules);
        }
        for (_, rule, cost) in hits {
            if *cost > max_cost(rule) {
                return Err(Error::CostExceedsLimit {
                    cost: *cost,
                    limit: max_cost(rule),
                });
            }
        }
        self.batch_unchecked(now, hits)
    }

    /// Per hit: the cost asked (with the earlier hits' on its state) and
    /// what it gets at `now`, recording nothing.
    fn decisions(
        &self,
        now: u64,
        hits: &[(String, Rule, u64)],
    ) -> Result<(Vec<u64>, Vec<Decision>), Error> {
        let mut asked = Vec::new();
        for (i, (key, rule, cost)) in hits.iter().enumerate() {
            let before: u64 = hits[..i]
                .iter()
                .filter(|(k, r, _)| k == key && r.same_state(rule))
                .map(|(_, _, c)| c)
                .sum();
            if before + cost > max_cost(rule) {
                return Err(Error::CostExceedsLimit {
                    cost: before + cost,
                    limit: max_cost(rule),
                });
            }
            asked.push(if *cost == 0 { 0 } else { before + cost });
        }
        let empty = Admissions::default();
        let decide =
            |key: &String, rule: &Rule, cost: u64, logs: &HashMap<(String, Rule), Admissions>| {
                let log = logs
                    .get(&(key.clone(), rule.without_options()))
                    .unwrap_or(&empty);
                decide_one(Model { rule: *rule, log }, now, cost)
            };
        let decisions: Vec<Decision> = hits
            .iter()
            .zip(&asked)
            .map(|((k, r, _), &c)| {
                let d = decide(k, r, c.min(r.burst()), &self.logs);
                let d = if c > r.burst() {
                    Decision::from_parts(
                        false,
                        d.limit(),
                        d.remaining(),
                        d.retry_after().as_micros() as u64,
                        d.reset_after().as_micros() as u64,
                    )
                } else {
                    d
                };
                under_block(&self.blocks, k, r, d, now)
            })
            .collect();
        Ok((asked, decisions))
    }

    /// A batch, all-or-nothing, with options:
    ///
    /// - a hit whose rule has a lockout and whose key is locked out under
    ///   it is denied until the block ends (or later, if its rule says
    ///   so), nothing remaining;
    /// - a hit that reports asking more than its limit is denied;
    /// - when every hit passes, every consuming hit is recorded;
    /// - otherwise the reporting hits are recorded all the same, and each
    ///   consuming hit that its own rule denied starts its rule's lockout,
    ///   unless one runs; the hits that would have passed answer the state
    ///   (a probe) after that, and the denied reporting ones the probe's
    ///   remaining, retry and reset, still denied.
    fn batch_unchecked(
        &mut self,
        now: u64,
        hits: &[(String, Rule, u64)],
    ) -> Result<Vec<Decision>, Error> {
        let (_, decisions) = self.decisions(now, hits)?;
        let empty = Admissions::default();
        let decide =
            |key: &String, rule: &Rule, cost: u64, logs: &HashMap<(String, Rule), Admissions>| {
                let log = logs
                    .get(&(key.clone(), rule.without_options()))
                    .unwrap_or(&empty);
                decide_one(Model { rule: *rule, log }, now, cost)
            };
        let record =
            |logs: &mut HashMap<(String, Rule), Admissions>, key: &String, rule: &Rule, cost| {
                let log = logs
                    .entry((key.clone(), rule.without_options()))
                    .or_default();
                let t = now.max(log.last().unwrap_or(0));
                log.0.push((t, cost));
            };
        if decisions.iter().all(|d| d.allowed()) {
            for (key, rule, cost) in hits.iter().filter(|h| h.2 > 0) {
                record(&mut self.logs, key, rule, *cost);
            }
            return Ok(decisions);
        }
        for ((key, rule, cost), d) in hits.iter().zip(&decisions) {
            if *cost == 0 || d.allowed() {
                continue;
            }
            if let Some(block) = rule.block() {
                let held = self
                    .blocks
                    .entry((key.clone(), rule.without_options()))
                    .or_insert(0);
                if *held <= now {
                    *held = now + block.as_micros() as u64;
                }
            }
        }
        for (key, rule, cost) in hits.iter().filter(|h| h.2 > 0 && h.1.reports()) {
            record(&mut self.logs, key, rule, *cost);
        }
        // Last, every hit under a lockout that runs now (one this batch
        // started too) answers it.
        Ok(hits
            .iter()
            .zip(decisions)
            .map(|((k, r, c), d)| {
                if *c == 0 {
                    return d;
                }
                if d.allowed() {
                    return decide(k, r, 0, &self.logs);
                }
                if !r.reports() {
                    return d;
                }
                let probe = decide(k, r, 0, &self.logs);
                let retry = if probe.allowed() {
                    0
                } else {
                    probe.retry_after().as_micros() as u64
                };
                Decision::from_parts(
                    false,
                    probe.limit(),
                    probe.remaining(),
                    retry,
                    probe.reset_after().as_micros() as u64,
                )
            })
            .zip(hits)
            .map(|(d, (k, r, _))| under_block(&self.blocks, k, r, d, now))
            .collect())
    }
}

/// The decision for `cost` (0: a probe with cost 1 that records nothing).
fn decide_one(model: Model<'_>, now: u64, cost: u64) -> Decision {
    let asked = cost.max(1);
    let (l, w) = (model.l(), model.w());
    // A window counter whose newest admission lies in a later window (a
    // reservation) is judged there, and nothing passes before it begins.
    let t = match model.rule.algorithm() {
        Algorithm::FixedWindow | Algorithm::SlidingCounter => {
            let last = model.log.last().unwrap_or(0);
            now.max(last - last % w)
        }
        _ => now,
    };
    let ahead = t > now;
    let reset_now = model.empty_at(t) - now;
    if !ahead && model.passes(t, asked) {
        if cost == 0 {
            return Decision::from_parts(true, l, model.room(t), 0, reset_now);
        }
        let mut after = model.log.clone();
        after.0.push((t.max(model.log.last().unwrap_or(0)), cost));
        let after = Model {
            rule: model.rule,
            log: &after,
        };
        return Decision::from_parts(true, l, after.room(t), 0, after.empty_at(t) - now);
    }
    let _ = w;
    let retry_at = least(t, model.horizon(t), |s| model.passes(s, asked));
    Decision::from_parts(false, l, model.room(t), retry_at - now, reset_now)
}

/// `d`, for a hit of `rule` on `key`, when the key is locked out under
/// the rule until after `now`: denied until the block ends, or later if
/// the rule says so, nothing remaining.
fn under_block(
    blocks: &HashMap<(String, Rule), u64>,
    key: &str,
    rule: &Rule,
    d: Decision,
    now: u64,
) -> Decision {
    let end = blocks
        .get(&(key.to_owned(), rule.without_options()))
        .copied()
        .unwrap_or(0);
    if rule.block().is_none() || end <= now {
        return d;
    }
    let rest = end - now;
    let retry = if d.allowed() {
        rest
    } else {
        rest.max(d.retry_after().as_micros() as u64)
    };
    let reset = rest.max(d.reset_after().as_micros() as u64);
    Decision::from_parts(false, d.limit(), 0, retry, reset)
}

/// Several rules' decisions folded as the contract says.
pub fn combine(decisions: &[Decision]) -> Decision {
    let reset = decisions
        .iter()
        .map(|d| d.reset_after())
        .max()
        .unwrap_or_default();
    let deciding = if decisions.iter().all(|d| d.allowed()) {
        *decisions
            .iter()
            .min_by_key(|d| d.remaining())
            .expect("at least one rule")
    } else {
        *decisions
            .iter()
            .filter(|d| !d.allowed())
            .max_by_key(|d| d.retry_after())
            .expect("a denial")
    };
    Decision::from_parts(
        deciding.allowed(),
        deciding.limit(),
        deciding.remaining(),
        deciding.retry_after().as_micros() as u64,
        reset.as_micros() as u64,
    )
}
