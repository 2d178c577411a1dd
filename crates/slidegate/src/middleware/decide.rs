//! How the layer decides a request: key and cost, the store's answer, and
//! what to do with it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use super::body::RejectionBody;
use super::fallback::{MissingKey, OnStoreError};
use super::head::RequestHead;
use super::key::{KeyExtractor, KeyWriter, NoKey};
use super::lease_options::LeaseOptions;
use super::policies::PolicySet;
use super::response::{self, DEGRADED, Rejection};
use super::runtime_rules::RuntimeRules;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::headers;
use crate::store::contract::Store;
use crate::store::hit::Hit;
use crate::store::key::MAX_KEY_LEN;

pub(crate) type CostFn = dyn Fn(&RequestHead<'_>) -> u64 + Send + Sync;
pub(crate) type RejectionHook =
    dyn Fn(&Rejection<'_>, &RequestHead<'_>, Response<Bytes>) -> Response<Bytes> + Send + Sync;

/// A layer's configuration, shared by its services.
pub(crate) struct Config<St, K> {
    pub store: St,
    pub key: K,
    pub policies: PolicySet,
    /// Per-key rules set at run time, in place of `policies` for the keys
    /// that have some.
    pub runtime: Option<RuntimeRules>,
    pub cost: Option<Box<CostFn>>,
    pub missing_key: MissingKey,
    pub on_store_error: OnStoreError,
    pub headers_on_success: bool,
    pub prefix: Option<String>,
    pub on_rejection: Option<Box<RejectionHook>>,
    /// How long a request over the limit may be delayed for its turn.
    pub max_delay: Option<Duration>,
    /// A place in flight and a reserved budget per request, held until
    /// the response body ends.
    pub leases: Option<LeaseOptions>,
}

impl<St: fmt::Debug, K: fmt::Debug> fmt::Debug for Config<St, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("store", &self.store)
            .field("key", &self.key)
            .field("policies", &self.policies)
            .field("missing_key", &self.missing_key)
            .field("on_store_error", &self.on_store_error)
            .field("headers_on_success", &self.headers_on_success)
            .field("prefix", &self.prefix)
            .field("max_delay", &self.max_delay)
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

/// The store's answer: one decision per rule, in the order of the rules.
pub(crate) enum Decisions {
    /// A layer with one rule.
    One(Decision),
    /// A layer with several: one hit per rule in a batch.
    Each(Vec<Decision>),
}

impl Decisions {
    fn as_slice(&self) -> &[Decision] {
        match self {
            Decisions::One(decision) => std::slice::from_ref(decision),
            Decisions::Each(decisions) => decisions,
        }
    }
}

/// The denying decision that makes the client wait longest (the first of
/// equals), if any denied.
fn longest_wait(decisions: &[Decision]) -> Option<usize> {
    let mut longest: Option<usize> = None;
    for (i, decision) in decisions.iter().enumerate() {
        let longer = |l: usize| decision.retry_after() > decisions[l].retry_after();
        if !decision.allowed() && longest.is_none_or(longer) {
            longest = Some(i);
        }
    }
    longest
}

/// Rules up to this many are put in a batch without allocating.
const INLINE_RULES: usize = 4;

/// What a request needs before the store is asked.
pub(crate) enum Prepared {
    /// Ask the store for `cost` units of the key written, under the
    /// key's own policies (set at run time) or, `None`, the layer's.
    Ask {
        cost: u64,
        policies: Option<Arc<PolicySet>>,
    },
    /// Decided without the store.
    Decided(Verdict),
}

/// The outcome of the checks made before the inner service is called.
pub(crate) enum Verdict {
    /// Call the inner service, then add these headers.
    Pass(Extra),
    /// Answer without calling it.
    Refuse(Refusal),
}

/// Why a request is answered by the layer: what a [`Rejection`] borrows.
pub(crate) enum Refusal {
    /// Denied: `deciding` indexes the denying decision that makes the
    /// client wait longest.
    Limited {
        decisions: Decisions,
        deciding: usize,
    },
    CostTooHigh {
        cost: u64,
        limit: u64,
    },
    MissingKey {
        reason: NoKey,
        status: StatusCode,
    },
    StoreFailed {
        error: Error,
        retry_after: Duration,
    },
    StoreFull {
        error: Error,
        retry_after: Duration,
    },
}

/// The `Retry-After` of a request refused because the store is full: the
/// memory store's default sweep interval, within which idle keys go.
pub(crate) const FULL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The headers added to a passed request's response.
#[derive(Debug, Default)]
pub(crate) struct Extra {
    /// `RateLimit-Policy` and `RateLimit`, with `headers_on_success`.
    ratelimit: Option<(HeaderValue, HeaderValue)>,
    degraded: bool,
}

impl Extra {
    pub(crate) fn apply<B>(self, response: &mut Response<B>) {
        let headers = response.headers_mut();
        if let Some((policy, state)) = self.ratelimit {
            // Appended: layers stacked on one route each add their policies.
            headers.append(headers::RATELIMIT_POLICY, policy);
            headers.append(headers::RATELIMIT, state);
        }
        if self.degraded {
            headers.insert(DEGRADED, HeaderValue::from_static("true"));
        }
    }
}

impl<St: Store, K: KeyExtractor> Config<St, K> {
    /// Writes the store key of `request`: the prefix and the extracted
    /// parts; answers the policies set at run time for what the extractor
    /// wrote, if any.
    fn write_key(
        &self,
        request: &RequestHead<'_>,
        key: &mut KeyWriter,
    ) -> Result<Option<Arc<PolicySet>>, NoKey> {
        if let Some(prefix) = &self.prefix {
            key.push_word(prefix);
        }
        let start = key.as_str().len();
        self.key.extract(request, key)?;
        if key.as_str().len() == start {
            return Err(NoKey::new("the key extractor wrote no key"));
        }
        let own = self
            .runtime
            .as_ref()
            .and_then(|runtime| runtime.policies_for(&key.as_str()[start..]));
        key.finish_store_key(MAX_KEY_LEN);
        Ok(own)
    }

    /// The policies a request is decided under: its key's own, or the
    /// layer's.
    pub(crate) fn policies<'a>(&'a self, own: Option<&'a PolicySet>) -> &'a PolicySet {
        own.unwrap_or(&self.policies)
    }

    /// Writes the key of the bucket shared by requests without one.
    fn write_shared_key(&self, key: &mut KeyWriter) {
        key.clear();
        if let Some(prefix) = &self.prefix {
            key.push_word(prefix);
        }
        key.push_word("nokey");
        key.finish_store_key(MAX_KEY_LEN);
    }

    /// Writes the key and finds the cost, or reaches a verdict that needs
    /// no store.
    pub(crate) fn prepare(&self, request: &RequestHead<'_>, key: &mut KeyWriter) -> Prepared {
        let own = match self.write_key(request, key) {
            Ok(own) => own,
            Err(reason) => match self.missing_key {
                MissingKey::Allow => return Prepared::Decided(Verdict::Pass(Extra::default())),
                MissingKey::Shared => {
                    self.write_shared_key(key);
                    None
                }
                MissingKey::Reject(status) => {
                    return Prepared::Decided(Verdict::Refuse(Refusal::MissingKey {
                        reason,
                        status,
                    }));
                }
            },
        };
        let cost = self.cost.as_ref().map_or(1, |cost| cost(request));
        let limit = self.policies(own.as_deref()).min_limit();
        if cost > limit {
            return Prepared::Decided(Verdict::Refuse(Refusal::CostTooHigh { cost, limit }));
        }
        Prepared::Ask {
            cost,
            policies: own,
        }
    }

    /// The decision, when the store can take it without waiting
    /// ([`Store::acquire_now`]: the memory store, a cached denial): the
    /// layer then answers without creating a future. Only for one rule:
    /// several are decided as a batch, to know each one's decision.
    pub(crate) fn decide_now(
        &self,
        key: &str,
        cost: u64,
        policies: &PolicySet,
    ) -> Option<Result<Decisions>> {
        let rules = policies.rules();
        if rules.len() > 1 || self.max_delay.is_some() {
            return None;
        }
        let answer = self.store.acquire_now(key, rules, cost)?;
        Some(answer.map(Decisions::One))
    }

    /// Asks the store: `acquire` for one rule; for several, a batch of one
    /// hit per rule on the same key, which is decided all or nothing just
    /// as `acquire` is, and answers for each rule.
    pub(crate) async fn ask(
        &self,
        key: &str,
        cost: u64,
        policies: &PolicySet,
    ) -> Result<Decisions> {
        let rules = policies.rules();
        let [first, ..] = rules else {
            return Err(Error::NoRules);
        };
        if let Some(max_delay) = self.max_delay {
            return self.ask_delayed(key, cost, max_delay, rules).await;
        }
        if rules.len() == 1 {
            return self
                .store
                .acquire(key, rules, cost)
                .await
                .map(Decisions::One);
        }
        let mut inline = [Hit::new(key, *first, cost); INLINE_RULES];
        let spilled: Vec<Hit<'_>>;
        let hits: &[Hit<'_>] = if rules.len() <= INLINE_RULES {
            for (hit, &rule) in inline.iter_mut().zip(rules) {
                hit.rule = rule;
            }
            &inline[..rules.len()]
        } else {
            spilled = rules
                .iter()
                .map(|&rule| Hit::new(key, rule, cost))
                .collect();
            &spilled
        };
        self.store.acquire_batch(hits).await.map(Decisions::Each)
    }

    /// Asks the store for a reservation within `max_delay`, and sleeps
    /// until its time: the request is then passed on (nginx's
    /// `limit_req ... delay`). One store call: waiters pass in the order
    /// they reserved, never beyond the limit.
    async fn ask_delayed(
        &self,
        key: &str,
        cost: u64,
        max_delay: Duration,
        rules: &[crate::rate::Rule],
    ) -> Result<Decisions> {
        let hits: Vec<Hit<'_>> = rules
            .iter()
            .map(|&rule| Hit::new(key, rule, cost))
            .collect();
        let reserved = self.store.reserve_batch(&hits, max_delay).await?;
        if reserved.granted() && !reserved.wait().is_zero() {
            tokio::time::sleep(reserved.wait()).await;
        }
        Ok(match reserved.decisions() {
            [one] => Decisions::One(*one),
            _ => Decisions::Each(reserved.into_decisions()),
        })
    }

    /// The verdict on the store's answer.
    pub(crate) fn judge(&self, answer: Result<Decisions>, policies: &PolicySet) -> Verdict {
        // The common case, kept short: one rule, allowed, no headers.
        if let Ok(Decisions::One(decision)) = &answer
            && decision.allowed()
            && !self.headers_on_success
        {
            return Verdict::Pass(Extra {
                ratelimit: None,
                degraded: decision.degraded(),
            });
        }
        match answer {
            Ok(decisions) if decisions.as_slice().len() != policies.len() => {
                self.store_failed(Error::Store(format!(
                    "the store answered {} decisions for {} rules",
                    decisions.as_slice().len(),
                    policies.len()
                )))
            }
            Ok(decisions) => {
                let all = decisions.as_slice();
                if let Some(deciding) = longest_wait(all) {
                    return Verdict::Refuse(Refusal::Limited {
                        decisions,
                        deciding,
                    });
                }
                let ratelimit = self.headers_on_success.then(|| {
                    let policy = policies.policy_header().clone();
                    (policy, policies.ratelimit(all))
                });
                Verdict::Pass(Extra {
                    ratelimit,
                    degraded: all.iter().any(Decision::degraded),
                })
            }
            Err(error) => self.undecided(error),
        }
    }

    /// The verdict on a request the store did not decide. Each kind of
    /// error gets its answer here, on purpose (see the module docs of
    /// [`middleware`](crate::middleware), "When the store cannot decide").
    fn undecided(&self, error: Error) -> Verdict {
        match error {
            // The request can never pass.
            Error::CostExceedsLimit { cost, limit } => {
                Verdict::Refuse(Refusal::CostTooHigh { cost, limit })
            }
            // Full (too many keys, bytes, or rules on the key): what a
            // flood of new clients causes. Denied whatever the failure
            // policy says: letting requests through would switch the limit
            // off for whoever filled the store.
            Error::StoreFull { .. } | Error::TooManyRules { .. } => {
                Verdict::Refuse(Refusal::StoreFull {
                    error,
                    retry_after: FULL_RETRY_AFTER,
                })
            }
            // Down: timed out, unreachable, failed. The failure policy,
            // which may be to fail open.
            Error::Timeout(_) | Error::Store(_) => self.store_failed(error),
            // The store refused what the layer sent (a prefix that is no
            // valid key, a store configured wrongly): the layer's own
            // configuration, not the client's doing and not an outage.
            // Failing open would switch the limit off unnoticed: 503.
            error => {
                tracing::error!(%error, "the rate limit layer's store refused its request");
                let retry_after = match self.on_store_error {
                    OnStoreError::Deny { retry_after } => retry_after,
                    OnStoreError::Allow => FULL_RETRY_AFTER,
                };
                Verdict::Refuse(Refusal::StoreFailed { error, retry_after })
            }
        }
    }

    /// The verdict when the store failed: the failure policy applies.
    fn store_failed(&self, error: Error) -> Verdict {
        match self.on_store_error {
            OnStoreError::Allow => Verdict::Pass(Extra {
                ratelimit: None,
                degraded: true,
            }),
            OnStoreError::Deny { retry_after } => {
                Verdict::Refuse(Refusal::StoreFailed { error, retry_after })
            }
        }
    }

    /// What the rejection hook and the default response see of a refusal.
    fn rejection<'a>(&'a self, refusal: &'a Refusal, policies: &'a PolicySet) -> Rejection<'a> {
        match refusal {
            Refusal::Limited {
                decisions,
                deciding,
            } => rate_limited(policies, decisions.as_slice(), *deciding),
            &Refusal::CostTooHigh { cost, limit } => Rejection::CostTooHigh { cost, limit },
            &Refusal::MissingKey { reason, status } => Rejection::MissingKey { reason, status },
            Refusal::StoreFailed { error, retry_after } => Rejection::StoreFailure {
                error,
                retry_after: *retry_after,
            },
            Refusal::StoreFull { error, retry_after } => Rejection::StoreFull {
                error,
                retry_after: *retry_after,
            },
        }
    }

    /// The response to a refusal: the default one, through the hook.
    pub(crate) fn reject<B: RejectionBody>(
        &self,
        refusal: &Refusal,
        request: &RequestHead<'_>,
        policies: &PolicySet,
    ) -> Response<B> {
        let rejection = self.rejection(refusal, policies);
        let cx = response::Context {
            grpc: response::grpc_content_type(request),
            policy_header: policies.policy_header(),
        };
        let default = response::default_response(&rejection, &cx);
        let response = match &self.on_rejection {
            Some(hook) => hook(&rejection, request, default),
            None => default,
        };
        response.map(B::from_rejection)
    }
}

/// A denial: every policy's decision, and the one `Retry-After` follows.
fn rate_limited<'a>(
    set: &'a PolicySet,
    decisions: &'a [Decision],
    deciding: usize,
) -> Rejection<'a> {
    let policies = set.decisions(decisions);
    let mut decision = decisions[deciding];
    if decisions.iter().any(Decision::degraded) {
        decision = decision.into_degraded();
    }
    Rejection::RateLimited {
        decision,
        policy: &set.names()[deciding],
        rule: set.rules()[deciding],
        policies,
    }
}
