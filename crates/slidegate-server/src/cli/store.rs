//! The store flags, shared by every command that decides.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, ValueEnum};
use slidegate::store::resilient::FailurePolicy;

use crate::store::{self, ClockMode, CoalesceMode, StoreOptions, StoreUrl, UnknownStore};

/// Parses `--store` without ever echoing it: clap's own message for a bad
/// value repeats the value, and a store URL may carry a password.
#[derive(Clone, Copy, Debug)]
struct StoreUrlParser;

impl TypedValueParser for StoreUrlParser {
    type Value = StoreUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<StoreUrl, clap::Error> {
        let Some(text) = value.to_str() else {
            return Err(clap::Error::raw(
                ErrorKind::InvalidUtf8,
                "invalid value for '--store <URL>': not UTF-8\n",
            )
            .with_cmd(cmd));
        };
        text.parse().map_err(|e: UnknownStore| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid value for '--store <URL>': {e}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// Whose clock the Redis store uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClockArg {
    /// Redis' own clock (`TIME` in the script): one clock for every instance.
    Server,
    /// This process' clock, for Redis deployments that forbid `TIME` in
    /// scripts; keep the instances' clocks in sync.
    Client,
}

impl From<ClockMode> for ClockArg {
    fn from(mode: ClockMode) -> ClockArg {
        match mode {
            ClockMode::Server => ClockArg::Server,
            ClockMode::Client => ClockArg::Client,
        }
    }
}

/// Whether the Redis store coalesces concurrent decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CoalesceArg {
    /// Decisions that arrive while calls to the same Redis node are out
    /// wait and go together in one script call, each decided as alone.
    On,
    /// One script call per decision.
    Off,
}

impl From<CoalesceMode> for CoalesceArg {
    fn from(mode: CoalesceMode) -> CoalesceArg {
        match mode {
            CoalesceMode::On => CoalesceArg::On,
            CoalesceMode::Off => CoalesceArg::Off,
        }
    }
}

/// The store flags, shared by every command that decides.
#[derive(Clone, Debug, Args)]
pub struct StoreArgs {
    /// Where the limiter keeps its state: `memory` (this process only;
    /// lost on restart), `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` (TLS), `redis+cluster://host1:port1,host2:port2` or
    /// `redis+sentinel://[user:password@]host1:port1,host2:port2/MASTER_NAME[/db]`
    /// (the master Redis Sentinel names, followed across failovers; the
    /// sentinels' own credentials in
    /// `?sentinel_username=…&sentinel_password=…`; `rediss+sentinel://` for
    /// TLS), shared by every instance that points at it. Its passwords are
    /// never shown: not in help, logs, errors or metrics.
    #[arg(
        long = "store",
        value_name = "URL",
        env = "SLIDEGATE_STORE",
        hide_env_values = true,
        default_value_t = StoreUrl::Memory,
        value_parser = StoreUrlParser
    )]
    pub url: StoreUrl,

    /// What to answer when the store fails or is too slow: `deny` (fail
    /// closed), `allow` (fail open) or `local` (an in-process store with the
    /// same rules, per instance). Such answers say `"degraded": true`. With
    /// `--store memory` the only failure is a full store, and `local` denies.
    #[arg(
        long = "on-store-error",
        value_name = "POLICY",
        env = "SLIDEGATE_ON_STORE_ERROR",
        default_value_t = store::DEFAULT_ON_ERROR
    )]
    pub on_error: FailurePolicy,

    /// Deadline of one store call, in milliseconds; past it the policy decides.
    #[arg(
        long = "store-timeout-ms",
        value_name = "N",
        env = "SLIDEGATE_STORE_TIMEOUT_MS",
        default_value_t = store::DEFAULT_TIMEOUT_MS
    )]
    pub timeout_ms: u64,

    /// Whose clock decides time with the Redis store: `server` (Redis' TIME)
    /// or `client` (this process).
    #[arg(
        long = "clock",
        value_name = "C",
        value_enum,
        env = "SLIDEGATE_CLOCK",
        default_value_t = ClockArg::from(ClockMode::default())
    )]
    pub clock: ClockArg,

    /// Redis store: `on` gathers the decisions that arrive while calls to
    /// the same Redis node are out into one script call (each decided
    /// exactly as alone; a lone request is sent at once), `off` sends one
    /// script call per decision.
    #[arg(
        long = "redis-coalesce",
        value_name = "MODE",
        value_enum,
        env = "SLIDEGATE_REDIS_COALESCE",
        default_value_t = CoalesceArg::from(CoalesceMode::default())
    )]
    pub coalesce: CoalesceArg,

    /// How much longer than its window Redis keeps an idle key, in
    /// milliseconds. With `--clock client` it must cover the largest clock
    /// skew between the instances (a key's expiry is measured on the clock
    /// of the instance that last moved it). Default: 1 with `--clock
    /// server`, 1000 with `--clock client`.
    #[arg(
        long = "expiry-margin-ms",
        value_name = "N",
        env = "SLIDEGATE_EXPIRY_MARGIN_MS"
    )]
    pub expiry_margin_ms: Option<u64>,

    /// Most leases open at once in the store (memory, or the whole Redis
    /// for every server sharing it, a cluster too): one more is answered
    /// 503 too_many_leases, nothing recorded. Settled and expired leases
    /// stop counting.
    #[arg(
        long = "max-leases",
        value_name = "N",
        env = "SLIDEGATE_MAX_LEASES",
        default_value_t = store::DEFAULT_MAX_LEASES
    )]
    pub max_leases: usize,

    /// Most keys the memory store (and the local fallback) holds; new keys
    /// beyond it are decided by --on-store-error, held keys keep their state.
    #[arg(
        long = "max-keys",
        value_name = "N",
        env = "SLIDEGATE_MAX_KEYS",
        default_value_t = store::DEFAULT_MAX_KEYS
    )]
    pub max_keys: usize,

    /// Most bytes the memory store (and the local fallback) holds: keys,
    /// their rules' states and sliding-log buffers, counted as they are
    /// allocated. A request that would need more (a new key, a new rule on
    /// a key, a longer log) is decided by --on-store-error; the process'
    /// memory stays within this plus the hash table's spare room.
    #[arg(
        long = "max-memory-bytes",
        value_name = "N",
        env = "SLIDEGATE_MAX_MEMORY_BYTES",
        default_value_t = store::DEFAULT_MAX_MEMORY_BYTES
    )]
    pub max_memory_bytes: usize,

    /// Most distinct rules one key holds at once in the memory store, 1 to
    /// 256 (the Redis store's local fallback keeps 16). A new rule on a key
    /// that holds this many, none of them idle, is refused with 400
    /// `too_many_rules`.
    #[arg(
        long = "max-rules-per-key",
        value_name = "N",
        env = "SLIDEGATE_MAX_RULES_PER_KEY",
        default_value_t = store::DEFAULT_MAX_RULES_PER_KEY,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub max_rules_per_key: u16,

    /// Bound of the local deny cache in entries (Redis store): a request
    /// the store denied with `retry_after = d` is denied locally for `d`,
    /// exactly, without a round trip. 0 turns the cache off.
    #[arg(
        long = "deny-cache-entries",
        value_name = "N",
        env = "SLIDEGATE_DENY_CACHE_ENTRIES",
        default_value_t = store::DEFAULT_DENY_CACHE_ENTRIES
    )]
    pub deny_cache_entries: usize,
    /// The number of Redis calls in flight; its help is the store's own
    /// sentence ([`store::MAX_STORE_CALLS_HELP`]).
    #[arg(
        long = "max-store-calls",
        help = store::MAX_STORE_CALLS_HELP,
        value_name = "N",
        env = "SLIDEGATE_MAX_STORE_CALLS",
        default_value_t = store::DEFAULT_MAX_STORE_CALLS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub max_store_calls: u32,
}

impl From<StoreArgs> for StoreOptions {
    fn from(args: StoreArgs) -> StoreOptions {
        StoreOptions {
            url: args.url,
            on_error: args.on_error,
            timeout_ms: args.timeout_ms,
            clock: match args.clock {
                ClockArg::Server => ClockMode::Server,
                ClockArg::Client => ClockMode::Client,
            },
            coalesce: match args.coalesce {
                CoalesceArg::On => CoalesceMode::On,
                CoalesceArg::Off => CoalesceMode::Off,
            },
            expiry_margin_ms: args.expiry_margin_ms,
            max_keys: args.max_keys,
            max_memory_bytes: args.max_memory_bytes,
            max_rules_per_key: args.max_rules_per_key,
            deny_cache_entries: args.deny_cache_entries,
            max_store_calls: args.max_store_calls,
            max_leases: args.max_leases,
        }
    }
}
