//! Limits set at run time through the admin API: the domains of
//! `PUT /v1/config/domains/{domain}` and the per-key limits of
//! `PUT /v1/keys/{key}/limit`, kept where every server that shares the
//! store reads them, and put in force in this one
//! ([`CurrentConfig`]).
//!
//! | store | where they are kept | how another server hears of a change |
//! |---|---|---|
//! | Redis (node, Sentinel, Cluster) | Redis (`RedisStore::write_limit`) | the change feed at once, and a read of what changed every [`POLL`] whatever the feed does |
//! | memory, `--runtime-limits-file` | the file, written atomically | no other server shares them |
//! | memory | this process only (a WARN at start says so) | the same |
//!
//! A server that cannot read them (Redis down) keeps the last set it
//! read, and says so: `/readyz`'s detail, the gauge
//! `slidegate_runtime_limits_stale`, a WARN. It never drops them for "no
//! limit". A Redis that comes back without them (restarted empty) is
//! given back the last set this server read.

mod entries;
mod file;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use slidegate::limits::KeyLimits;
use slidegate::store::redis::{
    LimitKind, LimitWrite, LimitsSync, RedisStore, SharedLimit, Written,
};
use slidegate::store::{Change, ChangeListener};
use slidegate::{Rule, Store};
use tokio::sync::Notify;

pub use entries::{decode_rules, encode_rules, rule_json};

use crate::epoch::millis_since_epoch;
use crate::rules::{CurrentConfig, DomainRefused, RuntimeDomain, check_domain};

/// How often a server on Redis reads what changed, whatever the change
/// feed says: the bound of a change's way to every server when the feed
/// is lost (it is usually heard within milliseconds).
pub const POLL: Duration = Duration::from_millis(250);

/// `--max-runtime-keys`'s default.
pub const DEFAULT_MAX_RUNTIME_KEYS: usize = 100_000;
/// `--max-runtime-domains`'s default.
pub const DEFAULT_MAX_RUNTIME_DOMAINS: usize = 100;
/// `--max-runtime-body-bytes`'s default: 256 KiB.
pub const DEFAULT_MAX_RUNTIME_BODY_BYTES: usize = 256 * 1024;

/// How many runtime limits a server takes, and how large a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeBounds {
    /// The most keys with a limit (`--max-runtime-keys`).
    pub max_keys: usize,
    /// The most runtime domains (`--max-runtime-domains`).
    pub max_domains: usize,
    /// The largest body of a write (`--max-runtime-body-bytes`).
    pub max_body_bytes: usize,
}

impl Default for RuntimeBounds {
    fn default() -> Self {
        RuntimeBounds {
            max_keys: DEFAULT_MAX_RUNTIME_KEYS,
            max_domains: DEFAULT_MAX_RUNTIME_DOMAINS,
            max_body_bytes: DEFAULT_MAX_RUNTIME_BODY_BYTES,
        }
    }
}

/// Where the runtime limits are kept.
#[derive(Clone, Debug)]
pub enum Home {
    /// In this process only.
    Memory,
    /// In this file (`--runtime-limits-file`).
    File(PathBuf),
    /// In the Redis the store decides with.
    Redis(RedisStore),
}

impl Home {
    fn name(&self) -> &'static str {
        match self {
            Home::Memory => "memory",
            Home::File(_) => "file",
            Home::Redis(_) => "redis",
        }
    }
}

/// Why a change was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// `If-Match` named another version than the entry's.
    #[error("the entry is at version {current}, not the one If-Match names")]
    VersionMismatch {
        /// The entry's version (0: none).
        current: u64,
    },
    /// No such entry.
    #[error("no such runtime limit")]
    NotFound,
    /// `--max-runtime-keys` keys have a limit already.
    #[error(
        "limits are set for {max} keys, the most --max-runtime-keys allows; remove one or raise the flag"
    )]
    TooManyKeys {
        /// The bound.
        max: usize,
    },
    /// `--max-runtime-domains` domains are set already.
    #[error(
        "{max} runtime domains are set, the most --max-runtime-domains allows; remove one or raise the flag"
    )]
    TooManyDomains {
        /// The bound.
        max: usize,
    },
    /// The domain is defined in a rule file.
    #[error("the domain is defined in a rule file; a runtime domain must be a domain of its own")]
    DomainInFile,
    /// The domain's text does not load.
    #[error("{0:?}")]
    Refused(DomainRefused),
    /// Where the limits are kept cannot be written now.
    #[error("the runtime limits cannot be written: {0}")]
    Unavailable(String),
}

/// The runtime limits of one server. Cheap to clone.
#[derive(Clone)]
pub struct RuntimeLimits {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RuntimeLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeLimits")
            .field("home", &self.inner.home.name())
            .finish_non_exhaustive()
    }
}

struct Inner {
    home: Home,
    config: CurrentConfig,
    bounds: RuntimeBounds,
    /// What this server holds beyond the config: held across a write or
    /// a read of Redis, so that two never interleave.
    local: tokio::sync::Mutex<Local>,
    health: Mutex<Health>,
    wake: Arc<Notify>,
    /// True once a first set was read (or there is nothing to read).
    read: AtomicBool,
    /// Keeps the change feed's listener alive.
    listener: Mutex<Option<Arc<dyn ChangeListener>>>,
}

#[derive(Default)]
struct Local {
    version: u64,
    domains: BTreeMap<String, RuntimeDomain>,
}

#[derive(Default)]
struct Health {
    stale_since: Option<SystemTime>,
    error: Option<String>,
}

/// Wakes the reader when the feed tells of a change.
struct Nudge(Arc<Notify>);

impl ChangeListener for Nudge {
    fn changed(&self, change: &Change) {
        if matches!(change, Change::Limits | Change::All) {
            self.0.notify_one();
        }
    }
    fn heard(&self, _trust_for: Duration) {}
    fn lost(&self) {}
}

impl RuntimeLimits {
    /// The runtime limits kept in `home`, put in force in `config`: read
    /// at once (from the file, from Redis if it answers: otherwise the
    /// reader keeps trying). Fails for a file that cannot be read.
    pub async fn open(
        home: Home,
        config: CurrentConfig,
        bounds: RuntimeBounds,
    ) -> Result<RuntimeLimits, String> {
        let limits = RuntimeLimits {
            inner: Arc::new(Inner {
                home,
                config,
                bounds,
                local: tokio::sync::Mutex::default(),
                health: Mutex::default(),
                wake: Arc::new(Notify::new()),
                read: AtomicBool::new(false),
                listener: Mutex::default(),
            }),
        };
        // Every series exported from the start, at zero: a dashboard's
        // query over them has something to show before the first change.
        metrics::counter!("slidegate_runtime_limits_read_failures_total").increment(0);
        for kind in ["key", "domain"] {
            for change in ["set", "removed"] {
                metrics::counter!("slidegate_runtime_limit_changes_total", "kind" => kind, "change" => change)
                    .increment(0);
            }
        }
        metrics::gauge!("slidegate_runtime_limits_version").set(0.0);
        match &limits.inner.home {
            Home::Memory => {
                tracing::warn!(
                    "runtime limits (PUT /v1/config/domains, PUT /v1/keys/{{key}}/limit) are kept in memory only: a restart loses them; --runtime-limits-file PATH keeps them"
                );
                limits.inner.read.store(true, Ordering::Release);
            }
            Home::File(path) => {
                let saved = file::load(path)?;
                let mut local = limits.inner.local.lock().await;
                let sync = LimitsSync {
                    version: saved.version,
                    full: true,
                    entries: saved.entries,
                    removed: Vec::new(),
                };
                limits.apply(&mut local, sync);
                limits.inner.read.store(true, Ordering::Release);
                tracing::info!(path = %path.display(), version = local.version, keys = limits.inner.config.key_limits().len(), domains = local.domains.len(), "runtime limits loaded");
            }
            Home::Redis(_) => limits.sync().await,
        }
        Ok(limits)
    }

    /// Reads what changed on Redis whenever the change feed tells of it,
    /// and every [`POLL`] whatever it does, until the server stops.
    /// Nothing to do for the other homes.
    pub fn spawn_reader<S: Store>(&self, store: &S) -> Option<tokio::task::JoinHandle<()>> {
        if !matches!(self.inner.home, Home::Redis(_)) {
            return None;
        }
        let nudge: Arc<dyn ChangeListener> = Arc::new(Nudge(Arc::clone(&self.inner.wake)));
        let weak: Weak<dyn ChangeListener> = Arc::downgrade(&nudge);
        store.watch_changes(weak);
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(nudge);
        let weak = Arc::downgrade(&self.inner);
        Some(tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let wake = Arc::clone(&inner.wake);
                RuntimeLimits { inner }.sync().await;
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(POLL) => {}
                }
            }
        }))
    }

    /// The rules in force, with the per-key limits.
    pub fn config(&self) -> &CurrentConfig {
        &self.inner.config
    }

    /// The bounds.
    pub fn bounds(&self) -> RuntimeBounds {
        self.inner.bounds
    }

    /// True once the runtime limits were read (or there is nothing to
    /// read): until then a key without a limit may have one not read yet.
    pub fn read(&self) -> bool {
        self.inner.read.load(Ordering::Acquire)
    }

    /// The limits of `key`.
    pub fn key(&self, key: &str) -> Option<Arc<KeyLimits>> {
        self.inner.config.key_limits().get(key)
    }

    /// The runtime domain `domain`.
    pub async fn domain(&self, domain: &str) -> Option<RuntimeDomain> {
        self.inner.local.lock().await.domains.get(domain).cloned()
    }

    /// Every runtime domain, by name.
    pub async fn domains(&self) -> Vec<RuntimeDomain> {
        self.inner
            .local
            .lock()
            .await
            .domains
            .values()
            .cloned()
            .collect()
    }

    /// Sets the rules of `key`; answers the change's version.
    pub async fn put_key(
        &self,
        key: &str,
        rules: &[Rule],
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        let text = encode_rules(rules);
        self.write(LimitKind::Key, key, Some(text), if_match, who)
            .await
    }

    /// Removes the rules of `key`.
    pub async fn delete_key(
        &self,
        key: &str,
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        self.write(LimitKind::Key, key, None, if_match, who).await
    }

    /// Sets the rules of `domain` from `text` (YAML or JSON, `format`),
    /// checked by the code that loads files.
    pub async fn put_domain(
        &self,
        domain: &str,
        text: &str,
        format: &str,
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        if self.inner.config.load().in_files(domain) {
            return Err(RuntimeError::DomainInFile);
        }
        check_domain(domain, text).map_err(RuntimeError::Refused)?;
        let stored = entries::encode_domain(format, text);
        self.write(LimitKind::Domain, domain, Some(stored), if_match, who)
            .await
    }

    /// Removes the runtime domain `domain`.
    pub async fn delete_domain(
        &self,
        domain: &str,
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        if self.inner.config.load().in_files(domain) {
            return Err(RuntimeError::DomainInFile);
        }
        self.write(LimitKind::Domain, domain, None, if_match, who)
            .await
    }

    /// Makes one write in a task of its own: a caller that goes away (a
    /// client that hangs up, a request timeout) never leaves it half done
    /// (the file written but the change not in force here).
    async fn write(
        &self,
        kind: LimitKind,
        name: &str,
        text: Option<String>,
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        let this = self.clone();
        let (name, who) = (name.to_owned(), who.to_owned());
        tokio::spawn(async move { this.write_now(kind, &name, text, if_match, &who).await })
            .await
            .map_err(|e| RuntimeError::Unavailable(format!("the write did not end: {e}")))?
    }

    async fn write_now(
        &self,
        kind: LimitKind,
        name: &str,
        text: Option<String>,
        if_match: Option<u64>,
        who: &str,
    ) -> Result<u64, RuntimeError> {
        let max = match kind {
            LimitKind::Domain => self.inner.bounds.max_domains,
            _ => self.inner.bounds.max_keys,
        };
        let too_many = || match kind {
            LimitKind::Domain => RuntimeError::TooManyDomains { max },
            _ => RuntimeError::TooManyKeys { max },
        };
        let removing = text.is_none();
        let version = match &self.inner.home {
            Home::Redis(store) => {
                let write = LimitWrite {
                    kind,
                    name,
                    text: text.as_deref(),
                    if_version: if_match,
                    max_entries: max,
                };
                let written = store
                    .write_limit(write)
                    .await
                    .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
                let version = match written {
                    Written::Done(version) => version,
                    Written::VersionMismatch(current) => {
                        return Err(RuntimeError::VersionMismatch { current });
                    }
                    Written::Absent => return Err(RuntimeError::NotFound),
                    _ => return Err(too_many()),
                };
                // This server answers with the change in force.
                self.sync().await;
                version
            }
            Home::File(_) | Home::Memory => {
                let mut local = self.inner.local.lock().await;
                let current = self.version_of(&local, kind, name);
                if let Some(want) = if_match
                    && want != current
                {
                    return Err(RuntimeError::VersionMismatch { current });
                }
                if removing && current == 0 {
                    return Err(RuntimeError::NotFound);
                }
                if !removing && current == 0 && self.count(&local, kind) >= max {
                    return Err(too_many());
                }
                let version = local.version + 1;
                if let Home::File(path) = &self.inner.home {
                    let mut saved = self.saved(&local);
                    saved.version = version;
                    saved
                        .entries
                        .retain(|e| !(e.kind == kind && e.name == name));
                    if let Some(text) = &text {
                        saved.entries.push(SharedLimit {
                            kind,
                            name: name.to_owned(),
                            text: text.clone(),
                            version,
                        });
                    }
                    let path = path.clone();
                    tokio::task::spawn_blocking(move || file::save(&path, &saved))
                        .await
                        .map_err(|e| RuntimeError::Unavailable(e.to_string()))?
                        .map_err(|e| RuntimeError::Unavailable(format!("the file: {e}")))?;
                }
                let sync = LimitsSync {
                    version,
                    full: false,
                    entries: text
                        .map(|text| SharedLimit {
                            kind,
                            name: name.to_owned(),
                            text,
                            version,
                        })
                        .into_iter()
                        .collect(),
                    removed: if removing {
                        vec![(kind, name.to_owned())]
                    } else {
                        Vec::new()
                    },
                };
                self.apply(&mut local, sync);
                version
            }
        };
        let (kind_name, change) = (
            if kind == LimitKind::Domain {
                "domain"
            } else {
                "key"
            },
            if removing { "removed" } else { "set" },
        );
        metrics::counter!("slidegate_runtime_limit_changes_total", "kind" => kind_name, "change" => change)
            .increment(1);
        tracing::info!(
            who,
            kind = kind_name,
            name,
            change,
            version,
            "runtime limit changed"
        );
        Ok(version)
    }

    fn version_of(&self, local: &Local, kind: LimitKind, name: &str) -> u64 {
        match kind {
            LimitKind::Domain => local.domains.get(name).map_or(0, |d| d.version),
            _ => self
                .inner
                .config
                .key_limits()
                .get(name)
                .map_or(0, |k| k.version()),
        }
    }

    fn count(&self, local: &Local, kind: LimitKind) -> usize {
        match kind {
            LimitKind::Domain => local.domains.len(),
            _ => self.inner.config.key_limits().len(),
        }
    }

    /// Every entry this server holds, as kept.
    fn saved(&self, local: &Local) -> file::Saved {
        let mut entries: Vec<SharedLimit> = self
            .inner
            .config
            .key_limits()
            .entries()
            .into_iter()
            .map(|(name, limits)| SharedLimit {
                kind: LimitKind::Key,
                name,
                text: encode_rules(limits.rules()),
                version: limits.version(),
            })
            .collect();
        entries.extend(local.domains.values().map(|d| SharedLimit {
            kind: LimitKind::Domain,
            name: d.domain.clone(),
            text: entries::encode_domain(&d.format, &d.text),
            version: d.version,
        }));
        file::Saved {
            version: local.version,
            entries,
        }
    }

    /// Puts what `sync` says in force.
    fn apply(&self, local: &mut Local, sync: LimitsSync) {
        let table = self.inner.config.key_limits();
        let mut domains_changed = sync.full;
        let mut keys = Vec::new();
        if sync.full {
            local.domains.clear();
        }
        for entry in sync.entries {
            match entry.kind {
                LimitKind::Domain => {
                    domains_changed = true;
                    match entries::decode_domain(&entry.name, &entry.text, entry.version) {
                        Some(domain) => {
                            local.domains.insert(entry.name, domain);
                        }
                        None => {
                            tracing::warn!(domain = %entry.name, "a runtime domain this release cannot read: left out");
                        }
                    }
                }
                _ => match decode_rules(&entry.text) {
                    Some(rules) => keys.push((entry.name, KeyLimits::new(rules, entry.version))),
                    None => {
                        tracing::warn!(key = %entry.name, "a runtime key limit this release cannot read: left out");
                    }
                },
            }
        }
        if sync.full {
            table.replace_all(keys, sync.version);
        } else {
            for (name, limits) in keys {
                table.apply(&name, Some(limits));
            }
        }
        for (kind, name) in sync.removed {
            match kind {
                LimitKind::Domain => {
                    domains_changed |= local.domains.remove(&name).is_some();
                }
                _ => table.apply(&name, None),
            }
        }
        local.version = sync.version;
        table.set_version(sync.version);
        if domains_changed {
            self.inner
                .config
                .set_runtime_domains(local.domains.values().cloned().collect());
        }
        metrics::gauge!("slidegate_runtime_limits_version").set(sync.version as f64);
    }

    /// Reads what changed on Redis since this server's version, and puts
    /// it in force; on failure, keeps what it holds and says so.
    async fn sync(&self) {
        let Home::Redis(store) = &self.inner.home else {
            return;
        };
        let mut local = self.inner.local.lock().await;
        match store.sync_limits(local.version).await {
            Ok(sync) if sync.version < local.version => {
                self.went_back(store, &mut local, sync).await;
            }
            Ok(sync) => {
                if sync.version != local.version || sync.full {
                    self.apply(&mut local, sync);
                }
                self.inner.read.store(true, Ordering::Release);
                self.healthy(&local);
            }
            Err(error) => self.unhealthy(&error.to_string(), &local),
        }
    }

    /// Redis holds an older version than this server read: it lost the
    /// runtime limits (restarted without them, flushed). Given none at
    /// all, it is given back the last set this server read; otherwise
    /// its own set is followed.
    async fn went_back(&self, store: &RedisStore, local: &mut Local, sync: LimitsSync) {
        if sync.version == 0 && sync.entries.is_empty() {
            let saved = self.saved(local);
            match store.seed_limits(saved.version, &saved.entries).await {
                Ok(wrote) => {
                    if wrote {
                        tracing::warn!(
                            version = saved.version,
                            entries = saved.entries.len(),
                            "Redis held no runtime limits: wrote back the last set this server read"
                        );
                    }
                    self.healthy(local);
                }
                Err(error) => self.unhealthy(&error.to_string(), local),
            }
            return;
        }
        tracing::warn!(
            held = local.version,
            redis = sync.version,
            "Redis holds an older set of runtime limits than this server read: following Redis"
        );
        self.apply(local, sync);
        self.healthy(local);
    }

    fn healthy(&self, local: &Local) {
        let mut health = self
            .inner
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if health.stale_since.take().is_some() {
            tracing::info!(version = local.version, "runtime limits read again");
        }
        health.error = None;
        metrics::gauge!("slidegate_runtime_limits_stale").set(0.0);
    }

    fn unhealthy(&self, error: &str, local: &Local) {
        metrics::counter!("slidegate_runtime_limits_read_failures_total").increment(1);
        metrics::gauge!("slidegate_runtime_limits_stale").set(1.0);
        let mut health = self
            .inner
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if health.stale_since.is_none() {
            health.stale_since = Some(SystemTime::now());
            tracing::warn!(
                %error,
                version = local.version,
                keys = self.inner.config.key_limits().len(),
                domains = local.domains.len(),
                "cannot read the runtime limits from Redis: keeping the last set read until it answers"
            );
        }
        health.error = Some(error.to_owned());
    }

    /// What `/readyz`, `/v1/config` and the status page show.
    pub fn status(&self) -> Value {
        let health = self
            .inner
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let table = self.inner.config.key_limits();
        let mut status = json!({
            "home": self.inner.home.name(),
            "version": table.version(),
            "keys": table.len(),
            "domains": self.inner.config.runtime_domains().len(),
            "read": self.read(),
            "stale": health.stale_since.is_some() || !self.read(),
        });
        if let Home::File(path) = &self.inner.home {
            status["file"] = path.display().to_string().into();
        }
        if let Some(since) = health.stale_since {
            status["stale_since_ms"] = millis_since_epoch(since).into();
        }
        if let Some(error) = &health.error {
            status["error"] = error.as_str().into();
        }
        status
    }
}
