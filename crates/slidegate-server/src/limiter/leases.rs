//! Ad-hoc leases: a cost reserved (or places held) for a client's key
//! before its work, settled after (`POST /v1/acquire` with `lease_ms`,
//! `POST /v1/leases/{id}/commit`, `DELETE /v1/leases/{id}`). Keys are
//! ad-hoc keys, as in [`adhoc`](super::adhoc): a lease never touches a
//! counter of the configured rules.

use std::time::Duration;

use slidegate::store::{Lease, Settled};
use slidegate::{Rule, Store};

use super::adhoc::AdhocDecision;
use crate::keys;

/// A lease reserved: the lease, and its decision as an ad-hoc answer
/// (every rule carries the folded decision: a lease is one decision).
pub struct Leased {
    /// The lease (granted when it has an id).
    pub lease: Lease,
    /// Its decision, for the body and the header fields.
    pub answer: AdhocDecision,
}

/// Reserves `cost` for the ad-hoc `key` under every rule for `time`,
/// waiting up to `max_wait` for it to fit (places: in arrival order).
pub async fn reserve<S: Store + ?Sized>(
    store: &S,
    key: &str,
    rules: &[Rule],
    cost: u64,
    time: Duration,
    max_wait: Duration,
) -> slidegate::Result<Leased> {
    let key = keys::adhoc_key(key)?;
    let lease = if max_wait.is_zero() {
        Box::pin(store.reserve_lease(&key, rules, cost, time)).await?
    } else {
        Box::pin(store.reserve_lease_wait(&key, rules, cost, time, max_wait)).await?
    };
    let decision = lease.decision();
    let answer = AdhocDecision {
        decision,
        rules: rules.iter().map(|&rule| (rule, decision)).collect(),
    };
    Ok(Leased { lease, answer })
}

/// Commits the lease `id` with the cost its work took (`used`), or
/// releases it (`None`); with `key`, the lease must be that ad-hoc key's.
pub async fn settle<S: Store + ?Sized>(
    store: &S,
    id: &str,
    key: Option<&str>,
    used: Option<u64>,
) -> slidegate::Result<Settled> {
    let key = key.map(keys::adhoc_key).transpose()?;
    let key = key.as_deref();
    match used {
        Some(cost) => Box::pin(store.commit(id, key, cost)).await,
        None => Box::pin(store.release(id, key)).await,
    }
}
