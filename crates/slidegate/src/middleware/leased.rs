//! How a layer with leases decides a request: a place in flight
//! ([`max_in_flight`](super::RateLimitBuilder::max_in_flight)), then a
//! reserved budget ([`reserve_and_commit`](super::RateLimitBuilder::reserve_and_commit))
//! or a plain decision; what was taken is held until the response body
//! ends ([`Holding`]).

use std::sync::Arc;

use super::decide::{Config, Decisions, Verdict};
use super::hold::{Budget, Holding, Place, ReportedCost};
use super::lease_options::LeaseOptions;
use super::policies::PolicySet;
use crate::store::contract::Store;

/// A request decided with leases.
pub(crate) struct Leased {
    pub verdict: Verdict,
    /// Refused for want of a place: the refusal names the in-flight
    /// policy, not the layer's.
    pub by_in_flight: bool,
    pub holding: Holding,
}

/// Decides `cost` of `key` under `set` with the layer's leases. With a
/// budget, `reported` is the handle its commit reads.
pub(crate) async fn decide<St: Store + 'static, K: super::key::KeyExtractor>(
    config: &Arc<Config<St, K>>,
    options: &LeaseOptions,
    key: &str,
    cost: u64,
    set: &PolicySet,
    reported: &ReportedCost,
) -> Leased {
    let mut holding = Holding::default();
    if let Some(in_flight) = &options.in_flight {
        let taken = config
            .store
            .reserve_lease(key, &[in_flight.rule], 1, in_flight.lease)
            .await;
        let answer = match taken {
            Ok(lease) => {
                let decision = lease.decision();
                if let Some(id) = lease.into_id() {
                    holding.place = Some(Place::new(
                        Arc::clone(config),
                        |config| &config.store,
                        id,
                        key.to_owned(),
                    ));
                }
                Ok(Decisions::One(decision))
            }
            Err(error) => Err(error),
        };
        // A store that is down follows the layer's failure policy, as
        // its rules do: passing then takes no place.
        if let Verdict::Refuse(refusal) = config.judge(answer, &in_flight.policies) {
            return Leased {
                verdict: Verdict::Refuse(refusal),
                by_in_flight: true,
                holding,
            };
        }
    }
    let verdict = match options.budget {
        Some(time) => {
            // A lease takes at least 1: an estimate of 0 reserves 1, and
            // a report of 0 gives it back.
            let estimate = cost.max(1);
            let reserved = config
                .store
                .reserve_lease(key, set.rules(), estimate, time)
                .await;
            let answer = reserved.map(|lease| {
                let decision = lease.decision();
                if let Some(id) = lease.into_id() {
                    holding.budget = Some(Budget::new(
                        Arc::clone(config),
                        |config| &config.store,
                        id,
                        key.to_owned(),
                        estimate,
                        reported.clone(),
                    ));
                }
                // A lease answers one decision for all its rules: each
                // policy is shown it.
                match set.len() {
                    1 => Decisions::One(decision),
                    n => Decisions::Each(vec![decision; n]),
                }
            });
            config.judge(answer, set)
        }
        None => config.judge(config.ask(key, cost, set).await, set),
    };
    Leased {
        verdict,
        by_in_flight: false,
        holding,
    }
}
