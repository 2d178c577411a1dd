//! The Redis store's leases: the calls of `lease.lua`, one atomic script
//! call per reservation and per settlement, on Redis' clock.
//!
//! - **Ids** are the slot of the lease's key (four hex digits) and 128
//!   random bits (hex). The record of a lease lives in that slot, under a
//!   tag of the slot's own (`keys::lease_key`), so a settlement finds it
//!   from the id alone, beside the states it settles: one call, one slot.
//! - **A settlement** first reads the record (its rules, their marks and
//!   its key), then settles in one call that checks again that the lease
//!   is still open: two settlements of one lease never both apply.
//! - **Open leases** are counted in one sorted set (ids scored by expiry)
//!   on a single Redis, in the same call as the lease. On a cluster that
//!   set would live in a slot of its own, which one call cannot reach
//!   beside the lease's: there `max_leases` is not enforced (see
//!   RELIABILITY.md).
//! - **Places** are one per lease and rule (a member of the rule's sorted
//!   set): a lease of places takes exactly one place on Redis.

use std::time::Duration;

use super::codes::{BUDGET_LEASE, Mode, PLACES_LEASE, options_code};
use super::inner::{Connection, Inner};
use super::keys::{lease_key, open_leases_key, slot_of, write_state_key};
use super::script::{NUMBER, Part, plain_call, push_key};
use crate::decision::{Decision, micros};
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rate, Rule};
use crate::store::lease::{
    Lease, LeaseKind, Settled, check_lease, hex, parse_hex, random_id, retention,
};

/// Numbers per rule in a decision's reply.
const REPLY_NUMBERS: usize = 4;

/// Reserves a lease of `cost` on `key` under `rules` for `time`.
pub(super) async fn reserve(
    inner: &Inner,
    key: &str,
    rules: &[Rule],
    cost: u64,
    time: Duration,
) -> Result<Lease> {
    let kind = check_lease(rules, cost, time)?;
    if kind == LeaseKind::Places && cost != 1 {
        return Err(Error::InvalidLease(
            "on Redis a lease of places takes one place".into(),
        ));
    }
    // The lease script sizes a GCRA bucket by the limit; a burst apart
    // from it would be reserved against the wrong bucket.
    if rules.iter().any(|rule| rule.has_burst()) {
        return Err(Error::InvalidLease(
            "on Redis a lease cannot yet reserve from a gcra rule with a burst".into(),
        ));
    }
    let slot = slot_of(key);
    let id = format!("{slot:04x}{}", hex(&random_id()?));
    // On a cluster the set of open leases is in another slot: not counted.
    let most = if is_cluster(inner) {
        0
    } else {
        inner.max_leases
    };
    let mut buf = Vec::new();
    for &rule in rules {
        push_key(&mut buf, |buf| {
            write_state_key(buf, &inner.prefix, key, rule)
        });
    }
    push_key(&mut buf, |buf| {
        buf.extend_from_slice(lease_key(&inner.prefix, slot, &id).as_bytes())
    });
    if most > 0 {
        push_key(&mut buf, |buf| {
            buf.extend_from_slice(open_leases_key(&inner.prefix).as_bytes())
        });
    }
    let keys_end = buf.len();
    let nkeys = rules.len() + 1 + usize::from(most > 0);
    let mut put = |x: f64| buf.extend_from_slice(&x.to_le_bytes());
    let n = rules.len();
    // Times, limits, windows and costs are below 2^53: `as f64` is exact.
    let (time_us, retain) = (micros(time), retention(rules, time));
    match kind {
        LeaseKind::Budget => {
            put(Mode::Lease.hit_count(n));
            put(nkeys as f64);
            for (i, &rule) in rules.iter().enumerate() {
                put((i + 1) as f64);
                put(options_code(rule));
                put(rule.limit() as f64);
                put(rule.window_micros() as f64);
                put(cost as f64);
                put(cost as f64);
                // The hit layout of main.lua (HIT_NUMBERS): the bucket last.
                put(rule.burst() as f64);
            }
            put(time_us as f64);
            put(retain as f64);
            put(most as f64);
        }
        LeaseKind::Places => {
            put(Mode::Places.hit_count(n));
            put(nkeys as f64);
            for &rule in rules {
                put(rule.limit() as f64);
                put(rule.window_micros() as f64);
            }
            put(time_us as f64);
            put(retain as f64);
            put(most as f64);
            // Not a waiter: deadline 0, never queued.
            put(0.0);
            put(0.0);
        }
    }
    let part = Part::new(buf, keys_end, nkeys, slot);
    let mut cmd = plain_call(&part, now(inner), inner.calls.margin_ms);
    cmd.arg(&id).arg(key).arg("");
    let max = inner.max_leases;
    let reply = inner
        .eval(&cmd, key, |e| {
            (e.code() == Some("TOOMANYLEASES")).then_some(Error::TooManyLeases { max })
        })
        .await?;
    let decisions = parse(&reply, rules)?;
    let decision = Decision::combine(&decisions).ok_or(Error::NoRules)?;
    let id = decision.allowed().then_some(id);
    Ok(Lease::new(id, decision, time))
}

/// Commits (`used`, the cost the work took) or releases (`None`) the
/// lease `id`, which must be `key`'s when `key` is given.
pub(super) async fn settle(
    inner: &Inner,
    id: &str,
    key: Option<&str>,
    used: Option<u64>,
) -> Result<Settled> {
    if let Some(used) = used
        && used > Rate::MAX_LIMIT
    {
        return Err(Error::CostExceedsLimit {
            cost: used,
            limit: Rate::MAX_LIMIT,
        });
    }
    let slot = parse_id(id).ok_or(Error::LeaseNotFound)?;
    let record_key = lease_key(&inner.prefix, slot, id);
    let mut get = redis::cmd("GET");
    get.arg(&record_key);
    let stored: Option<Vec<u8>> = inner.query(&get, &record_key).await?;
    let record = stored
        .as_deref()
        .and_then(Record::parse)
        .ok_or(Error::LeaseNotFound)?;
    if key.is_some_and(|key| key != record.key) {
        return Err(Error::LeaseNotFound);
    }
    if record.places && used.is_some() {
        return Err(Error::NotCommittable);
    }
    let counted = !is_cluster(inner) && inner.max_leases > 0;
    let n = record.parts.len();
    let mut buf = Vec::new();
    for &(rule, _) in &record.parts {
        push_key(&mut buf, |buf| {
            write_state_key(buf, &inner.prefix, &record.key, rule)
        });
    }
    push_key(&mut buf, |buf| buf.extend_from_slice(record_key.as_bytes()));
    if counted {
        push_key(&mut buf, |buf| {
            buf.extend_from_slice(open_leases_key(&inner.prefix).as_bytes())
        });
    }
    let keys_end = buf.len();
    let nkeys = n + 1 + usize::from(counted);
    let mut put = |x: f64| buf.extend_from_slice(&x.to_le_bytes());
    put(Mode::Settle.hit_count(n));
    put(nkeys as f64);
    for &(rule, mark) in &record.parts {
        put(options_code(rule));
        put(rule.limit() as f64);
        put(rule.window_micros() as f64);
        put(mark as f64);
    }
    put(used.map_or(-1.0, |used| used as f64));
    put(record.cost as f64);
    put(if counted { 1.0 } else { 0.0 });
    let part = Part::new(buf, keys_end, nkeys, slot);
    let mut cmd = plain_call(&part, now(inner), inner.calls.margin_ms);
    cmd.arg(id).arg(inner.feed.channel_name()).arg(&record.key);
    let reply = inner
        .eval(&cmd, &record_key, |e| match e.code() {
            Some("LEASENOTFOUND") => Some(Error::LeaseNotFound),
            Some("LEASEEXPIRED") => Some(Error::LeaseExpired),
            _ => None,
        })
        .await?;
    let bytes = match &reply {
        redis::Value::BulkString(bytes) if bytes.len() == NUMBER * (1 + REPLY_NUMBERS * n) => bytes,
        other => {
            return Err(Error::Store(format!(
                "the script answered an unexpected {other:?} to a settlement"
            )));
        }
    };
    let over = number(&bytes[..NUMBER])? == 1;
    let rules: Vec<Rule> = record.parts.iter().map(|&(rule, _)| rule).collect();
    let decisions = decisions(&bytes[NUMBER..], &rules)?;
    let decision = Decision::combine(&decisions).ok_or(Error::NoRules)?;
    Ok(Settled::new(over, decision))
}

/// The caller's clock, when the store sends its time.
fn now(inner: &Inner) -> Option<u64> {
    inner.calls.clock.as_ref().map(|clock| clock.now_micros())
}

/// The slot an id names, or `None` for text that is no id of this store.
fn parse_id(id: &str) -> Option<u16> {
    let (slot, random) = (id.get(..4)?, id.get(4..)?);
    parse_hex::<2>(slot)?;
    parse_hex::<16>(random)?;
    let slot = u16::from_str_radix(slot, 16).ok()?;
    (slot < 16_384).then_some(slot)
}

/// A lease's record as `lease.lua` files it.
struct Record {
    places: bool,
    cost: u64,
    /// Per rule, the mark of its admission.
    parts: Vec<(Rule, u64)>,
    key: String,
}

impl Record {
    /// The record in `bytes`, or `None` when it is not one this format
    /// writes (then no lease is found: nothing is read as one).
    fn parse(bytes: &[u8]) -> Option<Record> {
        let at = |i: usize| -> Option<f64> {
            let field = bytes.get(1 + NUMBER * i..1 + NUMBER * (i + 1))?;
            Some(f64::from_le_bytes(field.try_into().ok()?))
        };
        let whole = |x: f64| (x >= 0.0 && x.fract() == 0.0 && x < 9e15).then_some(x as u64);
        let cost = whole(at(1)?)?;
        let kind = at(2)?;
        let count = usize::try_from(whole(at(3)?)?).ok()?;
        if count == 0 || count > 64 {
            return None;
        }
        let mut parts = Vec::with_capacity(count);
        for i in 0..count {
            let base = 4 + 4 * i;
            let code = whole(at(base)?)?;
            let algorithm = [
                Algorithm::SlidingLog,
                Algorithm::SlidingCounter,
                Algorithm::FixedWindow,
                Algorithm::Gcra,
                Algorithm::Concurrency,
            ]
            .get(usize::try_from(code).ok()?)
            .copied()?;
            let limit = whole(at(base + 1)?)?;
            let window = whole(at(base + 2)?)?;
            let mark = whole(at(base + 3)?)?;
            let rate = Rate::new(limit, Duration::from_micros(window)).ok()?;
            parts.push((Rule::new(rate).with_algorithm(algorithm), mark));
        }
        let key = bytes.get(1 + NUMBER * (4 + 4 * count)..)?;
        Some(Record {
            places: kind == PLACES_LEASE,
            cost,
            parts,
            key: String::from_utf8(key.to_vec()).ok()?,
        })
        .filter(|_| kind == PLACES_LEASE || kind == BUDGET_LEASE)
    }
}

/// The decisions of a reservation's reply, one per rule.
fn parse(reply: &redis::Value, rules: &[Rule]) -> Result<Vec<Decision>> {
    match reply {
        redis::Value::BulkString(bytes) if bytes.len() == NUMBER * REPLY_NUMBERS * rules.len() => {
            decisions(bytes, rules)
        }
        other => Err(Error::Store(format!(
            "the script answered an unexpected {other:?} to a lease"
        ))),
    }
}

fn decisions(bytes: &[u8], rules: &[Rule]) -> Result<Vec<Decision>> {
    bytes
        .chunks_exact(NUMBER * REPLY_NUMBERS)
        .zip(rules)
        .map(|(d, rule)| {
            let field = |i: usize| number(&d[NUMBER * i..NUMBER * (i + 1)]);
            Ok(Decision::from_parts(
                field(0)? == 1,
                rule.limit(),
                field(1)?,
                field(2)?,
                field(3)?,
            ))
        })
        .collect()
}

/// One number of a reply: an exact integer below 2^53, else a bug.
fn number(bytes: &[u8]) -> Result<u64> {
    let mut number = [0u8; NUMBER];
    number.copy_from_slice(bytes);
    let x = f64::from_le_bytes(number);
    if (0.0..9_007_199_254_740_992.0).contains(&x) && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(Error::Store(format!("the script answered {x}")))
    }
}

/// True on a Redis Cluster, where the set of open leases is not counted.
fn is_cluster(inner: &Inner) -> bool {
    matches!(inner.connection, Connection::Cluster(_))
}
