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
//!   set lives in a slot of its own, which one call cannot reach beside
//!   the lease's: a call of its own counts the lease there first
//!   (`count_apart`), and takes it out when it is refused or settled.
//! - **Places** are one per lease and rule (a member of the rule's sorted
//!   set): a lease of places takes exactly one place on Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codes::{BUDGET_LEASE, Mode, PLACES_LEASE, options_code};
use super::inner::{Connection, Inner};
use super::keys::{lease_key, open_leases_key, slot_of, write_state_key};
use super::script::{NUMBER, Part, plain_call, push_key};
use super::turns::ASK_AGAIN;
use crate::decision::{Decision, micros};
use crate::error::{Error, Result};
use crate::rate::{Algorithm, Rate, Rule};
use crate::store::lease::{
    Lease, LeaseKind, Settled, check_lease, hex, parse_hex, random_id, retention,
};
use crate::store::reserve::MAX_WAIT;

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
    reserve_as(inner, key, rules, cost, time, None).await
}

/// A waiter for places: its ticket and its deadline on the script's
/// clock (µs), which name its member of the queues.
struct Waiter {
    ticket: String,
    deadline: u64,
}

impl Waiter {
    /// Its member of the queues, as `concurrency.lua` writes it.
    fn member(&self) -> String {
        format!("{}:{}", self.ticket, self.deadline)
    }
}

/// Reserves a lease of places on `key` under `rules` for `time`, waiting
/// up to `max_wait` in arrival order (see `turns.rs`).
pub(super) async fn reserve_in_turn(
    inner: &Arc<Inner>,
    key: &str,
    rules: &[Rule],
    time: Duration,
    max_wait: Duration,
) -> Result<Lease> {
    let started = Instant::now();
    let max_wait = max_wait.min(MAX_WAIT);
    let deadline = started + max_wait;
    let clock = match now(inner) {
        Some(now) => now,
        None => redis_now(inner, key).await?,
    };
    let waiter = Waiter {
        ticket: hex(&random_id()?),
        deadline: clock + micros(max_wait).max(1),
    };
    let queued = Queued::new(inner, key, rules, waiter.member());
    let bell = inner.turns.bell(&inner.feed, key);
    loop {
        // Listening before asking: a release between the answer and the
        // sleep still wakes this waiter.
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let lease = reserve_as(inner, key, rules, 1, time, Some(&waiter)).await?;
        if lease.granted() {
            queued.served();
            return Ok(lease.after_waiting(started.elapsed()));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // `queued` leaves the queues as it drops.
            return Ok(lease.after_waiting(started.elapsed()));
        }
        let nap = lease
            .decision()
            .retry_after()
            .min(ASK_AGAIN)
            .clamp(Duration::from_millis(1), left);
        let _ = tokio::time::timeout(nap, rung).await;
    }
}

/// Redis' clock on the node of `key`, in µs: what the scripts read when
/// the store sends no time of its own.
async fn redis_now(inner: &Inner, key: &str) -> Result<u64> {
    let mut stem = Vec::new();
    super::keys::write_stem(&mut stem, &inner.prefix, key);
    let route = String::from_utf8_lossy(&stem).into_owned();
    let (seconds, micros): (u64, u64) = inner.query(&redis::cmd("TIME"), &route).await?;
    Ok(seconds * 1_000_000 + micros)
}

/// [`reserve`], as the waiter `waiter` when given (places only).
async fn reserve_as(
    inner: &Inner,
    key: &str,
    rules: &[Rule],
    cost: u64,
    time: Duration,
    waiter: Option<&Waiter>,
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
    // On a cluster the set of open leases is in another slot: counted by
    // a call of its own, before the lease's.
    let apart = is_cluster(inner) && inner.max_leases > 0;
    if apart {
        count_apart(inner, &id, time).await?;
    }
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
            // A waiter's deadline, and whether to queue it when denied
            // (deadline 0: not a waiter, never queued).
            put(waiter.map_or(0.0, |w| w.deadline as f64));
            put(if waiter.is_some() { 1.0 } else { 0.0 });
        }
    }
    let part = Part::new(buf, keys_end, nkeys, slot);
    let mut cmd = plain_call(&part, now(inner), inner.calls.margin_ms);
    cmd.arg(&id)
        .arg(key)
        .arg(waiter.map_or("", |w| w.ticket.as_str()));
    let max = inner.max_leases;
    let reply = inner
        .eval(&cmd, key, |e| {
            (e.code() == Some("TOOMANYLEASES")).then_some(Error::TooManyLeases { max })
        })
        .await?;
    let decisions = parse(&reply, rules)?;
    let decision = Decision::combine(&decisions).ok_or(Error::NoRules)?;
    if apart && !decision.allowed() {
        uncount_apart(inner, &id).await;
    }
    let id = decision.allowed().then_some(id);
    Ok(Lease::new(id, decision, time))
}

/// Counts the lease `id`, open for `time`, in the set of open leases of a
/// cluster (its own slot), or refuses it when the set holds `max_leases`
/// (those past their expiry dropped first). An error of the lease's own
/// call leaves it counted until its expiry: a lease whose answer was lost
/// may have been granted, and over-counting is the side that bounds.
async fn count_apart(inner: &Inner, id: &str, time: Duration) -> Result<()> {
    const COUNT: &str = r"
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[4])
return 1
";
    let open = open_leases_key(&inner.prefix);
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(COUNT)
        .arg(1)
        .arg(&open)
        .arg(now(inner).map_or(-1, |now| now as i64))
        .arg(micros(time))
        .arg(inner.max_leases)
        .arg(id);
    let counted: i64 = inner.query(&cmd, &open).await?;
    if counted == 1 {
        Ok(())
    } else {
        Err(Error::TooManyLeases {
            max: inner.max_leases,
        })
    }
}

/// Takes the lease `id` out of a cluster's set of open leases (settled,
/// or never granted). Not reached, it stops counting at its expiry.
async fn uncount_apart(inner: &Inner, id: &str) {
    let open = open_leases_key(&inner.prefix);
    let mut cmd = redis::cmd("ZREM");
    cmd.arg(&open).arg(id);
    if let Err(error) = inner.query::<i64>(&cmd, &open).await {
        tracing::debug!(%error, "a settled lease could not leave the set of open leases");
    }
}

/// Commits (`used`, the cost the work took) or releases (`None`) the
/// lease `id`, which must be `key`'s when `key` is given.
pub(super) async fn settle(
    inner: &Inner,
    id: &str,
    key: Option<&str>,
    used: Option<u64>,
) -> Result<Settled> {
    let settled = settle_in_slot(inner, id, key, used).await;
    // On a cluster the lease leaves the set of open leases too, once it
    // is no longer open.
    if is_cluster(inner)
        && inner.max_leases > 0
        && matches!(settled, Ok(_) | Err(Error::LeaseExpired))
    {
        uncount_apart(inner, id).await;
    }
    settled
}

/// [`settle`] in the slot of the lease's key.
async fn settle_in_slot(
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
    Ok(Settled::new(over, decision).with_rules(rules.into_iter().zip(decisions).collect()))
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

/// True on a Redis Cluster, where the set of open leases is counted by a
/// call of its own.
fn is_cluster(inner: &Inner) -> bool {
    matches!(inner.connection, Connection::Cluster(_))
}

/// A waiter's place in its key's queues: taken out of them when dropped
/// unless [`served`](Self::served) (the script took it out on granting).
pub(super) struct Queued {
    inner: Arc<Inner>,
    key: String,
    queues: Vec<String>,
    member: String,
    served: bool,
}

impl Queued {
    /// The waiter `member` of `key` under `rules`.
    pub(super) fn new(inner: &Arc<Inner>, key: &str, rules: &[Rule], member: String) -> Queued {
        let queues = rules
            .iter()
            .map(|&rule| {
                let mut queue = Vec::new();
                write_state_key(&mut queue, &inner.prefix, key, rule);
                queue.extend_from_slice(b":q");
                String::from_utf8_lossy(&queue).into_owned()
            })
            .collect();
        Queued {
            inner: Arc::clone(inner),
            key: key.to_owned(),
            queues,
            member,
            served: false,
        }
    }

    /// The waiter got its places: nothing to take out.
    pub(super) fn served(mut self) {
        self.served = true;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Dropped once its deadline passes, at the queue's head.
            return;
        };
        let inner = Arc::clone(&self.inner);
        let (key, queues, member) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.queues),
            std::mem::take(&mut self.member),
        );
        runtime.spawn(async move {
            for queue in &queues {
                let mut leave = redis::cmd("ZREM");
                leave.arg(queue).arg(&member);
                // Not reached: it is dropped once its deadline passes.
                if let Err(error) = inner.query::<i64>(&leave, queue).await {
                    tracing::debug!(%error, key, "a waiter could not leave its queue");
                }
            }
        });
    }
}
