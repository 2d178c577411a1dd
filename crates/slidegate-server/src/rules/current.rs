//! The rules in force: the config requests are decided against (the
//! files' rules and the domains set at run time, in one config swapped
//! whole when either changes), the per-key limits set at run time, and
//! the last reload that was refused (the status page shows it).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use arc_swap::{ArcSwap, Guard};
use serde::Serialize;

use slidegate::limits::LimitTable;

use super::runtime_domain::RuntimeDomain;
use super::set::RateLimitConfig;
use crate::epoch::millis_since_epoch;

/// A config reload that was refused, with why.
#[derive(Clone, Debug, Serialize)]
pub struct RefusedReload {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `error` (a bad or unreadable file) or `refused` (domains would go).
    pub result: &'static str,
    /// The error as logged.
    pub error: String,
}

/// The config in force, shared by everything that decides or shows it: a
/// clone is another handle on the same rules. Reading it costs no lock
/// and no write to a shared count ([`CurrentConfig::load`]).
#[derive(Clone, Debug, Default)]
pub struct CurrentConfig {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    config: ArcSwap<RateLimitConfig>,
    /// The runtime domains in force; held while a new config is made from
    /// them and the files, so two changes never interleave.
    runtime: Mutex<Vec<RuntimeDomain>>,
    key_limits: LimitTable,
    last_refused: Mutex<Option<RefusedReload>>,
    /// Why the rules in force are not all there yet (a control plane
    /// that has not answered), if so.
    pending: Mutex<Option<String>>,
}

impl CurrentConfig {
    /// `config` in force, with no refused reload.
    pub fn new(config: RateLimitConfig) -> CurrentConfig {
        CurrentConfig {
            inner: Arc::new(Inner {
                config: ArcSwap::from_pointee(config),
                ..Inner::default()
            }),
        }
    }

    /// The per-key limits set at run time.
    pub fn key_limits(&self) -> &LimitTable {
        &self.inner.key_limits
    }

    /// Puts `domains` in force beside the files' rules, in place of the
    /// runtime domains before.
    pub fn set_runtime_domains(&self, domains: Vec<RuntimeDomain>) {
        let mut runtime = self
            .inner
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let merged = self.inner.config.load().with_runtime(&domains);
        self.swap(merged);
        *runtime = domains;
    }

    /// The runtime domains in force.
    pub fn runtime_domains(&self) -> Vec<RuntimeDomain> {
        self.inner
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The config in force, for one request: a guard, not a clone of the
    /// `Arc` (no write to its shared count).
    pub fn load(&self) -> Guard<Arc<RateLimitConfig>> {
        self.inner.config.load()
    }

    /// The config in force, kept as long as wanted.
    pub fn load_full(&self) -> Arc<RateLimitConfig> {
        self.inner.config.load_full()
    }

    /// Marks the rules as incomplete until a source answers (`why`), or
    /// complete (`None`): `/readyz` answers 503 meanwhile, so that no
    /// traffic is sent to a server whose limits have not come.
    pub fn set_pending(&self, why: Option<String>) {
        *self
            .inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
    }

    /// Why the rules are incomplete, if they are (see
    /// [`set_pending`](CurrentConfig::set_pending)).
    pub fn pending(&self) -> Option<String> {
        self.inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `config`, the files' rules, in force, with the runtime
    /// domains beside them.
    pub fn store(&self, config: RateLimitConfig) {
        let runtime = self
            .inner
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let merged = if runtime.is_empty() {
            config
        } else {
            config.with_runtime(&runtime)
        };
        self.swap(merged);
        drop(runtime);
    }

    /// Puts `next` in force in place of the config before, carrying over
    /// what counters used under the limits it changes. The caller holds
    /// the runtime lock, so that swaps never interleave.
    fn swap(&self, mut next: RateLimitConfig) {
        next.carry_from(&self.inner.config.load(), Instant::now());
        self.inner.config.store(Arc::new(next));
    }

    /// Remembers a refused reload (the last one is shown).
    pub fn refused(&self, result: &'static str, error: String) {
        *self
            .inner
            .last_refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(RefusedReload {
            at_ms: millis_since_epoch(SystemTime::now()),
            result,
            error,
        });
    }

    /// The last refused reload, if any.
    pub fn last_refused(&self) -> Option<RefusedReload> {
        self.inner
            .last_refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
