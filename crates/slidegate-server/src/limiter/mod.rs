//! The decisions: Envoy's check against the rules in force ([`check`]),
//! and ad-hoc decisions for keys and rules a client sends ([`adhoc`]).
//! Both ask the store; [`Limiter`] is what every protocol front calls: it
//! decides, and reports each decision to a [`Sink`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use slidegate::{Rule, Store};

pub mod adhoc;
pub mod check;
pub mod leases;
mod sink;
mod store_call;
mod traced;

pub use adhoc::{ADHOC_RULE, AdhocDecision};
pub use sink::{NoSink, Sink};
pub use store_call::acquire_one;

use crate::rules::{CurrentConfig, RateLimitConfig};
use check::{CheckError, CheckRequest, CheckResponse};

/// The store, the rules in force and the sink every decision is reported
/// to, as the fronts share them: a clone is another handle on the same.
pub struct Limiter<S> {
    store: Arc<S>,
    config: CurrentConfig,
    sink: Arc<dyn Sink>,
}

impl<S> Clone for Limiter<S> {
    fn clone(&self) -> Self {
        Limiter {
            store: Arc::clone(&self.store),
            config: self.config.clone(),
            sink: Arc::clone(&self.sink),
        }
    }
}

impl<S> Limiter<S> {
    /// Decides with `store` under `config`, reporting to `sink`.
    pub fn new(store: S, config: CurrentConfig, sink: Arc<dyn Sink>) -> Limiter<S> {
        Limiter {
            store: Arc::new(store),
            config,
            sink,
        }
    }

    /// The same store and sink, under `config`.
    pub fn with_config(mut self, config: CurrentConfig) -> Limiter<S> {
        self.config = config;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The rules in force.
    pub fn config(&self) -> &CurrentConfig {
        &self.config
    }

    /// The rules the ad-hoc `key` is decided under: the request's own
    /// (`asked`), the limits set for the key at run time, or both, all or
    /// nothing (a rule of both counted once); `None` with neither.
    #[inline]
    pub fn rules_for<'r>(&self, key: &str, asked: &'r [Rule]) -> Option<Cow<'r, [Rule]>> {
        let table = self.config.key_limits();
        // No lookup at all until a limit was ever set.
        let set = if table.version() == 0 {
            None
        } else {
            table.get(key)
        };
        match set {
            None if asked.is_empty() => None,
            None => Some(Cow::Borrowed(asked)),
            Some(set) => {
                let mut rules = set.rules().to_vec();
                for rule in asked {
                    if !rules.iter().any(|r| r.same_state(rule)) {
                        rules.push(*rule);
                    }
                }
                Some(Cow::Owned(rules))
            }
        }
    }
}

impl<S: Store> Limiter<S> {
    /// Decides an Envoy check against `config` (loaded from
    /// [`Limiter::config`] by the caller, which keeps it for as long as
    /// the answer borrows from it), and reports it.
    pub async fn check<'c>(
        &self,
        config: &'c RateLimitConfig,
        request: &CheckRequest,
    ) -> Result<CheckResponse<'c>, CheckError> {
        let response = traced::check(config, &*self.store, request).await?;
        self.sink.check_decided(config, request, &response);
        Ok(response)
    }

    /// Decides `cost` units for the ad-hoc `key` under every rule,
    /// all-or-nothing, and reports it.
    pub async fn acquire(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
    ) -> slidegate::Result<AdhocDecision> {
        let answer = traced::acquire(&*self.store, key, rules, cost).await?;
        self.sink.adhoc_decided(key, &answer.decision);
        Ok(answer)
    }

    /// Reserves `cost` units for the ad-hoc `key` (see [`adhoc::reserve`]),
    /// and reports the decision.
    pub async fn reserve(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        max_wait: Duration,
    ) -> slidegate::Result<(AdhocDecision, Duration)> {
        let (answer, wait) = adhoc::reserve(&*self.store, key, rules, cost, max_wait).await?;
        self.sink.adhoc_decided(key, &answer.decision);
        Ok((answer, wait))
    }

    /// Reserves a lease for the ad-hoc `key` (see [`leases::reserve`]),
    /// and reports its decision.
    pub async fn reserve_lease(
        &self,
        key: &str,
        rules: &[Rule],
        cost: u64,
        time: Duration,
        max_wait: Duration,
    ) -> slidegate::Result<leases::Leased> {
        let leased = leases::reserve(&*self.store, key, rules, cost, time, max_wait).await?;
        self.sink.adhoc_decided(key, &leased.answer.decision);
        Ok(leased)
    }

    /// Commits (`used`) or releases (`None`) the lease `id` (see
    /// [`leases::settle`]).
    pub async fn settle_lease(
        &self,
        id: &str,
        key: Option<&str>,
        used: Option<u64>,
    ) -> slidegate::Result<slidegate::store::Settled> {
        leases::settle(&*self.store, id, key, used).await
    }

    /// The state of the ad-hoc `key` under `rule`, consuming nothing (not
    /// a decision: nothing is reported).
    pub async fn peek(&self, key: &str, rule: Rule) -> slidegate::Result<AdhocDecision> {
        adhoc::peek(&*self.store, key, rule).await
    }

    /// Decides `cost` units of `CL.THROTTLE` for `key` under `rule`, in
    /// the throttle key space, and reports it.
    pub async fn throttle(
        &self,
        key: &str,
        rule: Rule,
        cost: u64,
    ) -> slidegate::Result<slidegate::Decision> {
        let decision = adhoc::throttle(&*self.store, key, rule, cost).await?;
        self.sink.adhoc_decided(key, &decision);
        Ok(decision)
    }

    /// The state of the `CL.THROTTLE` key `key` under `rule`, consuming
    /// nothing (not reported).
    pub async fn throttle_peek(
        &self,
        key: &str,
        rule: Rule,
    ) -> slidegate::Result<slidegate::Decision> {
        adhoc::throttle_peek(&*self.store, key, rule).await
    }

    /// Forgets the ad-hoc `key` under every rule.
    pub async fn reset(&self, key: &str) -> slidegate::Result<()> {
        adhoc::reset(&*self.store, key).await
    }

    /// Records on the ad-hoc `key`, under each rule of `new` that
    /// replaces one of `old` of the same window and algorithm, what the
    /// key used under the old one: a raised limit gives no fresh quota.
    pub async fn carry_over(&self, key: &str, old: &[Rule], new: &[Rule]) -> slidegate::Result<()> {
        let carried = slidegate::limits::carried_over(old, new);
        if carried.is_empty() {
            return Ok(());
        }
        slidegate::limits::carry_over(&*self.store, &crate::keys::adhoc_key(key)?, &carried).await
    }
}
