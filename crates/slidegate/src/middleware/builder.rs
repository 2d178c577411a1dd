//! [`RateLimitBuilder`]: the configuration of a layer, checked once.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::build_error::BuildError;
use super::decide::{Config, CostFn, RejectionHook};
use super::fallback::{MissingKey, OnStoreError};
use super::head::RequestHead;
use super::key::KeyExtractor;
use super::layer::RateLimitLayer;
use super::lease_options::{IN_FLIGHT_POLICY, InFlightRule, LeaseOptions};
use super::policies::PolicySet;
use super::response::Rejection;
use super::runtime_rules::RuntimeRules;
use crate::error::Error;
use crate::headers;
use crate::limits::LimitTable;
use crate::rate::{Rate, Rule};
use crate::store::contract::Store;
use crate::store::lease::check_lease;

/// Something that names a rule: a [`Rule`], a [`Rate`], or the text of a
/// rate (`"10/s"`, `"300/m"`), parsed when the layer is built.
pub trait IntoRule {
    /// The rule, or why the text is not one.
    fn into_rule(self) -> Result<Rule, Error>;
}

impl IntoRule for Rule {
    fn into_rule(self) -> Result<Rule, Error> {
        Ok(self)
    }
}

impl IntoRule for Rate {
    fn into_rule(self) -> Result<Rule, Error> {
        Ok(Rule::new(self))
    }
}

impl IntoRule for &str {
    fn into_rule(self) -> Result<Rule, Error> {
        Rule::parse(self)
    }
}

impl IntoRule for String {
    fn into_rule(self) -> Result<Rule, Error> {
        Rule::parse(&self)
    }
}

impl<St, K> RateLimitLayer<St, K>
where
    St: Store + 'static,
    K: KeyExtractor,
{
    /// Starts configuring a layer that counts requests in `store` under the
    /// key that `key` extracts. Add at least one rule, then
    /// [`build`](RateLimitBuilder::build).
    pub fn builder(store: St, key: K) -> RateLimitBuilder<St, K> {
        RateLimitBuilder::new(store, key)
    }
}

/// Configures a [`RateLimitLayer`]; made by [`RateLimitLayer::builder`].
pub struct RateLimitBuilder<St, K> {
    store: St,
    key: K,
    rules: Vec<(Option<String>, Result<Rule, Error>)>,
    cost: Option<Box<CostFn>>,
    missing_key: MissingKey,
    on_store_error: OnStoreError,
    headers_on_success: bool,
    prefix: Option<String>,
    on_rejection: Option<Box<RejectionHook>>,
    max_delay: Option<Duration>,
    /// `block_for` was called before any rule: a mistake told at `build`.
    block_before_rule: bool,
    runtime: Option<LimitTable>,
    /// `burst` was called before any rule: the same mistake.
    burst_before_rule: bool,
    /// `max_in_flight`: the bound, checked at `build`.
    max_in_flight: Option<u64>,
    in_flight_lease: Duration,
    /// `reserve_and_commit`: the lease time of a budget.
    reserve: Option<Duration>,
}

/// How long a place in flight is held at most by default: past it, the
/// place is freed even while its request runs.
pub const DEFAULT_IN_FLIGHT_LEASE: Duration = Duration::from_secs(60);

impl<St, K> RateLimitBuilder<St, K> {
    pub(super) fn new(store: St, key: K) -> Self {
        RateLimitBuilder {
            store,
            key,
            rules: Vec::new(),
            cost: None,
            missing_key: MissingKey::default(),
            on_store_error: OnStoreError::default(),
            headers_on_success: false,
            prefix: None,
            on_rejection: None,
            max_delay: None,
            block_before_rule: false,
            runtime: None,
            burst_before_rule: false,
            max_in_flight: None,
            in_flight_lease: DEFAULT_IN_FLIGHT_LEASE,
            reserve: None,
        }
    }

    /// Decides a key that has limits in `table` (set at run time: a
    /// tenant's quota, see [`LimitRegistry`](crate::limits::LimitRegistry))
    /// under those, in place of the layer's rules, which stay the quota of
    /// every other key. The key looked up is what the key extractor
    /// writes, without the [`prefix`](Self::prefix): `x-api-key=k1` for
    /// `Key::header("x-api-key")` and a request sending `k1`. A change in the table
    /// applies from the next request.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, Rule, middleware::{Key, RateLimitLayer}};
    /// use slidegate::limits::LimitRegistry;
    ///
    /// let registry = LimitRegistry::new(MemoryStore::new());
    /// let key = Key::header(http::HeaderName::from_static("x-api-key"));
    /// let layer = RateLimitLayer::builder(registry.store().clone(), key)
    ///     .rule("10/1m") // keys without a limit of their own
    ///     .rules_from(&registry)
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn rules_from(mut self, table: impl Into<LimitTable>) -> Self {
        self.runtime = Some(table.into());
        self
    }

    /// Adds a rule. Unnamed rules are the policy `"default"` when alone,
    /// `"p0"`, `"p1"`, ... (by position) otherwise.
    pub fn rule(mut self, rule: impl IntoRule) -> Self {
        self.rules.push((None, rule.into_rule()));
        self
    }

    /// Adds a rule with the policy name shown in the `RateLimit` fields
    /// and the problem's `violated-policies` (printable ASCII).
    pub fn policy(mut self, name: impl Into<String>, rule: impl IntoRule) -> Self {
        self.rules.push((Some(name.into()), rule.into_rule()));
        self
    }

    /// Locks a client out for `block` once the rule added last denies it:
    /// every request of that key is then refused under that rule (429,
    /// `Retry-After` the rest of the block) until the block ends, however
    /// the window slides meanwhile; refusals do not extend it. What login
    /// forms need against password guessing. See [`Rule::block_for`].
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer}};
    /// # use std::time::Duration;
    /// // Five attempts per 15 minutes, then an hour locked out.
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .policy("login", "5/15m")
    ///     .block_for(Duration::from_secs(3600))
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn block_for(mut self, block: Duration) -> Self {
        match self.rules.last_mut() {
            Some((_, rule)) => {
                *rule = rule.clone().and_then(|rule| rule.block_for(block));
            }
            None => self.block_before_rule = true,
        }
        self
    }

    /// Lets the rule added last, a `gcra` rule, pass `burst` requests at
    /// once, refilled at its rate: a token bucket of `burst` tokens (see
    /// [`Rule::with_burst`]). The `RateLimit` field's quota stays the
    /// rate's limit; its remaining runs from 0 to `burst`. Another
    /// algorithm, or a burst out of range, fails at `build`.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer}};
    /// // 10 a second, up to 50 at once.
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .rule("10/s gcra")
    ///     .burst(50)
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn burst(mut self, burst: u64) -> Self {
        match self.rules.last_mut() {
            Some((_, rule)) => {
                *rule = rule.clone().and_then(|rule| rule.with_burst(burst));
            }
            None => self.burst_before_rule = true,
        }
        self
    }

    /// The cost of each request, in the rules' units (1 by default): bytes
    /// from `Content-Length`, tokens, the price of an expensive call. A cost
    /// of 0 passes when the quota has room, without using any.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer}};
    /// // One megabyte a minute per client, counted in kilobytes.
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .rule("1024/m")
    ///     .cost(|req| {
    ///         let bytes = req.headers.get(http::header::CONTENT_LENGTH)
    ///             .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    ///             .unwrap_or(0);
    ///         bytes.div_ceil(1024).max(1)
    ///     })
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn cost(mut self, cost: impl Fn(&RequestHead<'_>) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Box::new(cost));
        self
    }

    /// What to do with requests without a key (default: reject with 400).
    pub fn missing_key(mut self, outcome: MissingKey) -> Self {
        self.missing_key = outcome;
        self
    }

    /// What to do when the store is down (default: allow); see
    /// [`OnStoreError`] for the errors it covers and those it does not.
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// Also send `RateLimit-Policy` and `RateLimit` on the responses of
    /// allowed requests (default: only on rejections).
    pub fn headers_on_success(mut self, yes: bool) -> Self {
        self.headers_on_success = yes;
        self
    }

    /// Starts every key with `prefix`, so layers sharing a store keep apart
    /// (`login|ip=203.0.113.7`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Rewrites the responses of rejected requests. The hook gets the
    /// rejection, the request's head and the default response, and returns
    /// the response to send.
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer, Rejection}};
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), Key::peer_ip())
    ///     .rule("10/s")
    ///     .on_rejection(|rejection, _request, mut response| {
    ///         if let Rejection::RateLimited { .. } = rejection {
    ///             *response.body_mut() = "slow down".into();
    ///             response.headers_mut().insert(
    ///                 http::header::CONTENT_TYPE,
    ///                 http::HeaderValue::from_static("text/plain"),
    ///             );
    ///         }
    ///         response
    ///     })
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn on_rejection(
        mut self,
        hook: impl Fn(&Rejection<'_>, &RequestHead<'_>, Response<Bytes>) -> Response<Bytes>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.on_rejection = Some(Box::new(hook));
        self
    }

    /// Delays a request over the limit for up to `max_delay` instead of
    /// refusing it, as nginx's `limit_req ... delay` does: the request
    /// [reserves](crate::Store::reserve) the earliest time it fits (one
    /// store call), sleeps until then and is passed on; one that would
    /// wait longer is refused at once (429). Waiters pass in the order
    /// they reserved, never beyond the limit. A waiting request holds its
    /// connection and a sleeping task (bound them, e.g. with tower's
    /// `ConcurrencyLimitLayer` outside this one); a client that leaves
    /// while it waits has still used its turn. At most
    /// [`MAX_WAIT`](crate::store::MAX_WAIT).
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// At most `n` requests of a key in flight at once, across every
    /// process sharing the store (a [concurrency](crate::Algorithm::Concurrency)
    /// rule, a lease per request). A request takes its place before its
    /// rules are asked, so one refused for want of a place uses none of
    /// their quota; one over the rules gives its place back. The place is
    /// held until the response body ends, and given back on every path:
    /// the body dropped (the client left), the inner service's error, a
    /// panic, the response future dropped; at the latest after
    /// [`in_flight_lease`](Self::in_flight_lease). Refused: `429` with
    /// the policy `"in-flight"` in the `RateLimit` fields. The same
    /// places as [`InFlightLayer`](super::InFlightLayer), inside this
    /// layer's key and failure policy ([`OnStoreError`]).
    ///
    /// ```
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer}};
    /// // 100 exports an hour per tenant, at most 3 at once.
    /// let key = Key::header(http::HeaderName::from_static("x-tenant"));
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), key)
    ///     .rule("100/1h")
    ///     .max_in_flight(3)
    ///     .build()?;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn max_in_flight(mut self, n: u64) -> Self {
        self.max_in_flight = Some(n);
        self
    }

    /// The longest a request holds its place in flight (default
    /// [`DEFAULT_IN_FLIGHT_LEASE`]): past it the place is freed, so that
    /// a process that dies cannot hold places for ever.
    pub fn in_flight_lease(mut self, lease: Duration) -> Self {
        self.in_flight_lease = lease;
        self
    }

    /// Reserves each request's cost (the [`cost`](Self::cost) function's
    /// estimate) as a lease of `time` before the inner service runs, and
    /// commits what the handler reports ([`ReportedCost`](super::ReportedCost))
    /// when the response body ends: what an LLM gateway needs, a budget
    /// of tokens checked before a call whose cost is known after. Ten
    /// requests estimated at 1,000 on a budget of 5,000 get five passes,
    /// not ten.
    ///
    /// Settled on every path: the body's end or drop commits what was
    /// reported, or the estimate when nothing was (the work may have been
    /// done: a client gone mid-stream pays what was reported so far); an
    /// error of the inner service before a response gives the whole
    /// reservation back (or commits what it reported); a panic or the
    /// response future dropped commits as the body's drop does; a report
    /// of 0 gives everything back; a holder that dies is charged the
    /// estimate when `time` runs out. More than the estimate is taken
    /// as a report takes it: usage may pass the limit.
    ///
    /// `time` is from [`MIN_LEASE`](crate::store::MIN_LEASE) to the
    /// shortest window; the rules take no options (report, lockout,
    /// burst); no [`max_delay`](Self::max_delay). The store must keep
    /// leases (the memory and Redis stores do). An estimate of 0
    /// reserves 1.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use slidegate::{MemoryStore, middleware::{Key, RateLimitLayer, ReportedCost}};
    /// let key = Key::header(http::HeaderName::from_static("x-api-key"));
    /// let layer = RateLimitLayer::builder(MemoryStore::new(), key)
    ///     .rule("100000/1m") // tokens
    ///     .cost(|req| {
    ///         // The most the call may use: its max_tokens.
    ///         req.headers.get("x-max-tokens")
    ///             .and_then(|v| v.to_str().ok()?.parse().ok())
    ///             .unwrap_or(1000)
    ///     })
    ///     .reserve_and_commit(Duration::from_secs(60))
    ///     .build()?;
    /// // In the handler: `Extension(cost): Extension<ReportedCost>`, then
    /// // `cost.add(tokens)` as each chunk is produced.
    /// # let _: Option<ReportedCost> = None;
    /// # Ok::<(), slidegate::middleware::BuildError>(())
    /// ```
    pub fn reserve_and_commit(mut self, time: Duration) -> Self {
        self.reserve = Some(time);
        self
    }

    /// The layer, or what is wrong with the rules.
    pub fn build(self) -> Result<RateLimitLayer<St, K>, BuildError> {
        let count = self.rules.len();
        if count == 0 {
            return Err(BuildError::NoRules);
        }
        if self.block_before_rule {
            return Err(BuildError::BlockForWithoutRule);
        }
        if self.burst_before_rule {
            return Err(BuildError::BurstWithoutRule);
        }
        let mut defaults = headers::default_policy_names(count).into_iter();
        let mut policies: Vec<(String, Rule)> = Vec::with_capacity(count);
        for (index, (name, rule)) in self.rules.into_iter().enumerate() {
            let rule = rule.map_err(|source| BuildError::Rule { index, source })?;
            if rule.reports() && self.max_delay.is_some() {
                return Err(BuildError::Rule {
                    index,
                    source: Error::ReportCannotWait,
                });
            }
            let default = defaults.next().unwrap_or_default();
            let name = name.unwrap_or(default);
            headers::check_policy_name(&name)?;
            if policies.iter().any(|(other, _)| *other == name) {
                return Err(BuildError::DuplicatePolicy(name));
            }
            policies.push((name, rule));
        }
        if let Some(time) = self.reserve {
            if self.max_delay.is_some() {
                return Err(BuildError::Lease(Error::InvalidLease(
                    "a reserved cost cannot also wait (max_delay): a lease is granted or refused at once".into(),
                )));
            }
            for (index, (_, rule)) in policies.iter().enumerate() {
                check_lease(std::slice::from_ref(rule), 1, time)
                    .map_err(|source| BuildError::Rule { index, source })?;
            }
        }
        let in_flight = match self.max_in_flight {
            Some(n) => {
                let rule = Rule::concurrency(n).map_err(BuildError::Lease)?;
                check_lease(&[rule], 1, self.in_flight_lease).map_err(BuildError::Lease)?;
                Some(InFlightRule {
                    rule,
                    lease: self.in_flight_lease,
                    policies: PolicySet::new(vec![(IN_FLIGHT_POLICY.to_owned(), rule)])?,
                })
            }
            None => None,
        };
        let leases = (in_flight.is_some() || self.reserve.is_some()).then_some(LeaseOptions {
            in_flight,
            budget: self.reserve,
        });
        let policies = PolicySet::new(policies)?;
        let missing_key = match self.missing_key {
            MissingKey::Reject(status) if !status.is_client_error() => {
                MissingKey::Reject(StatusCode::BAD_REQUEST)
            }
            other => other,
        };
        Ok(RateLimitLayer::from_config(Config {
            store: self.store,
            key: self.key,
            policies,
            runtime: self.runtime.map(RuntimeRules::new),
            cost: self.cost,
            missing_key,
            on_store_error: self.on_store_error,
            headers_on_success: self.headers_on_success,
            prefix: self.prefix,
            on_rejection: self.on_rejection,
            max_delay: self.max_delay,
            leases,
        }))
    }
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimitBuilder<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("store", &self.store)
            .field("key", &self.key)
            .field("rules", &self.rules)
            .field("missing_key", &self.missing_key)
            .field("on_store_error", &self.on_store_error)
            .field("headers_on_success", &self.headers_on_success)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}
