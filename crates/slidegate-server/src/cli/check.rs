//! The flags of `slidegate check`.

use std::time::Duration;

use clap::Args;
use slidegate::{Algorithm, Rate};

use super::store::StoreArgs;
use super::values::wait;
use crate::commands::check::{self, CheckOptions};

/// Flags of `slidegate check`.
///
/// The question flags (`--key`, `--rate`, `--cost`, `--algorithm`) are
/// deliberately not read from the environment: a stray variable must not
/// silently change the question asked.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The key to decide for, e.g. `login:10.0.0.1`: the ad-hoc key of
    /// `POST /v1/acquire` (a long key is counted under its digest; braces
    /// only as a `{hash tag}`).
    #[arg(long, value_name = "KEY")]
    pub key: String,

    /// A rate such as `100/1m`, `10/s`, `3/250ms` or `5000/1h`. Repeat the
    /// flag for several rules decided all-or-nothing (`--rate 10/s --rate 1000/1h`).
    #[arg(long = "rate", value_name = "LIMIT/WINDOW", required = true)]
    pub rates: Vec<Rate>,

    /// Units the request consumes; 0 consumes nothing and asks whether
    /// one more would pass (denied on a full window).
    #[arg(long, value_name = "N", default_value_t = check::DEFAULT_COST)]
    pub cost: u64,

    /// The algorithm: `sliding_log` (exact), `sliding_counter`,
    /// `fixed_window` or `gcra`.
    #[arg(long, value_name = "NAME", default_value_t = Algorithm::default())]
    pub algorithm: Algorithm,

    /// Waits up to this long (`5s`, `250ms`; at most 4 minutes) for the
    /// request's turn when it does not fit now: one reservation, then a
    /// sleep until its time, and the decision printed with `waited_ms`.
    /// A longer wait is refused at once. Default: no wait.
    #[arg(long, value_name = "DURATION", value_parser = wait)]
    pub wait: Option<Duration>,

    /// Where the limiter keeps its state.
    #[command(flatten)]
    pub store: StoreArgs,
}

impl From<CheckArgs> for CheckOptions {
    fn from(args: CheckArgs) -> CheckOptions {
        CheckOptions {
            key: args.key,
            rates: args.rates,
            cost: args.cost,
            algorithm: args.algorithm,
            wait: args.wait,
            store: args.store.into(),
        }
    }
}
