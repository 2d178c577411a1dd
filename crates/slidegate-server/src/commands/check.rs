//! `slidegate check`: one decision, printed as the JSON of `POST /v1/acquire`.

use std::time::{Duration, Instant};

use anyhow::Context;
use slidegate::{Algorithm, Rate, Rule, Store};

use crate::api::http::DecisionBody;
use crate::limiter::adhoc;
use crate::store::{Backend, StoreOptions};

/// `--cost`'s default.
pub const DEFAULT_COST: u64 = 1;

/// The exit code of a degraded answer: printed as any other, but the store
/// did not decide it, so a script that reads only the exit code must not
/// take it for the shared limit's verdict.
pub const DEGRADED_EXIT_CODE: u8 = 3;

/// How long `check` waits for a store that is reachable but not answering
/// yet: its connection opens on first use, and a decision sent before it is
/// up (within `--store-timeout-ms`) would be the policy's, not the store's.
pub const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// The failure policy answered instead of the store (the decision is
/// printed all the same, with `"degraded":true`), and why the store did
/// not answer when that is known.
#[derive(Debug)]
pub struct Degraded(pub Option<String>);

impl std::fmt::Display for Degraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the store did not decide")?;
        if let Some(why) = &self.0 {
            write!(f, " ({why})")?;
        }
        f.write_str(": --on-store-error answered, and the decision printed is degraded")
    }
}

impl std::error::Error for Degraded {}

/// One decision to take (see `slidegate check --help`).
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The ad-hoc key to decide for.
    pub key: String,
    /// Its rates, decided all-or-nothing.
    pub rates: Vec<Rate>,
    /// Units the request consumes.
    pub cost: u64,
    /// The algorithm of every rate.
    pub algorithm: Algorithm,
    /// How long it may wait for its turn.
    pub wait: Option<Duration>,
    /// The store it is decided in.
    pub store: StoreOptions,
}

/// Decides once and prints the decision as one line of JSON on stdout
/// (with `--wait`, once its turn has come, with `waited_ms`); a degraded
/// decision is printed, then returned as the error [`Degraded`].
pub async fn run(args: CheckOptions) -> anyhow::Result<()> {
    let checked = decide(&args).await?;
    let mut json = serde_json::to_string(&checked.decision)?;
    if let Some(waited) = checked.waited {
        // As `POST /v1/acquire` answers it: the last field.
        let waited_ms = u64::try_from(waited.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        json.pop();
        json.push_str(&format!(",\"waited_ms\":{waited_ms}}}"));
    }
    println!("{json}");
    if checked.decision.degraded {
        return Err(Degraded(checked.unready).into());
    }
    Ok(())
}

/// What `slidegate check` decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The decision, as `POST /v1/acquire` shows it.
    pub decision: DecisionBody,
    /// With `--wait`, when admitted: how long it waited for its turn.
    pub waited: Option<std::time::Duration>,
    /// Why the store was not ready before the decision, if it was not.
    pub unready: Option<String>,
}

/// Decides once against the store `--store` names; with `--wait`, reserves
/// and sleeps until the request's turn.
pub async fn decide(args: &CheckOptions) -> anyhow::Result<Checked> {
    let backend = Backend::connect(&args.store)
        .await
        .context("cannot open the store")?;
    let unready = wait_ready(&backend).await;
    let rules: Vec<Rule> = args
        .rates
        .iter()
        .map(|rate| Rule::new(*rate).with_algorithm(args.algorithm))
        .collect();
    if let Some((i, rule)) = rules
        .iter()
        .enumerate()
        .find(|(i, rule)| rules[..*i].contains(rule))
    {
        anyhow::bail!(
            "--rate {} is given twice (rate number {})",
            rule.rate(),
            i + 1
        );
    }
    let Some(max_wait) = args.wait else {
        let outcome = adhoc::acquire(&backend, &args.key, &rules, args.cost).await?;
        return Ok(Checked {
            decision: DecisionBody::from(&outcome.decision),
            waited: None,
            unready,
        });
    };
    let (outcome, wait) = adhoc::reserve(&backend, &args.key, &rules, args.cost, max_wait).await?;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    let allowed = outcome.decision.allowed();
    Ok(Checked {
        decision: DecisionBody::from(&outcome.decision),
        waited: allowed.then_some(wait),
        unready,
    })
}

/// Waits up to [`CONNECT_WAIT`] for the store to answer; returns why it
/// does not. A store that cannot be reached (its error names the cause,
/// not a timeout) is not waited for.
async fn wait_ready(backend: &Backend) -> Option<String> {
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        match backend.ready().await {
            Ok(()) => return None,
            Err(slidegate::Error::Timeout(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => return Some(error.to_string()),
        }
    }
}
