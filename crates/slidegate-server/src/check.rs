//! `slidegate check`: one decision, printed as the JSON of `POST /v1/acquire`.

use anyhow::Context;
use slidegate::Rule;

use crate::backend::Backend;
use crate::cli::CheckArgs;
use crate::decision::{self, DecisionBody};

/// Decides once and prints the decision as one line of JSON on stdout.
pub async fn run(args: CheckArgs) -> anyhow::Result<()> {
    let body = decide(&args).await?;
    println!("{}", serde_json::to_string(&body)?);
    Ok(())
}

/// Decides once against the store `--store` names.
pub async fn decide(args: &CheckArgs) -> anyhow::Result<DecisionBody> {
    let backend = Backend::connect(&args.store)
        .await
        .context("cannot open the store")?;
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
    let outcome = decision::acquire(&backend, &args.key, &rules, args.cost).await?;
    Ok(DecisionBody::from(&outcome.decision))
}
