//! Per-key limits set at run time: a [`LimitTable`] of the rules of each
//! key (a tenant's quota, created and changed by an admin API or a billing
//! system), and a [`LimitRegistry`] that decides a key under its rules
//! through any [`Store`].
//!
//! ```
//! use slidegate::limits::LimitRegistry;
//! use slidegate::{MemoryStore, Rule};
//!
//! # async fn run() -> slidegate::Result<()> {
//! let registry = LimitRegistry::new(MemoryStore::new());
//! registry.set("tenant:acme", vec![Rule::parse("2/1m")?]).await?;
//! assert!(registry.acquire("tenant:acme", 1).await?.allowed());
//! assert!(registry.acquire("tenant:acme", 1).await?.allowed());
//! assert!(!registry.acquire("tenant:acme", 1).await?.allowed());
//! // A key without limits is an error, never "no limit".
//! assert!(registry.acquire("tenant:unknown", 1).await.is_err());
//! # Ok(()) }
//! ```
//!
//! A raised limit keeps what was counted: [`set`](LimitRegistry::set)
//! carries the use of a rule it replaces over to the new rule of the same
//! window and algorithm, so a tenant is not given a fresh quota by a
//! change of its limit.
//!
//! The table lives in this process. To share limits between processes,
//! keep them where every process reads them (the Redis store's shared
//! limits, a file) and [`apply`](LimitTable::apply) what is read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::contract::Store;
use crate::store::key::validate_key;

/// The most keys a table holds unless told otherwise.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// The rules of one key, and the version of the change that set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLimits {
    rules: Arc<[Rule]>,
    version: u64,
}

impl KeyLimits {
    /// `rules` at `version`.
    pub fn new(rules: impl Into<Arc<[Rule]>>, version: u64) -> KeyLimits {
        KeyLimits {
            rules: rules.into(),
            version,
        }
    }

    /// The key's rules, decided all or nothing.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The version of the change that set them.
    pub fn version(&self) -> u64 {
        self.version
    }
}

/// The rules of each key, shared by its clones: lookups take no lock that
/// a writer holds for long (a sharded map), and a change replaces one
/// key's entry whole.
#[derive(Clone, Debug)]
pub struct LimitTable {
    inner: Arc<Table>,
}

#[derive(Debug)]
struct Table {
    entries: DashMap<String, Arc<KeyLimits>>,
    /// The version of the last change made or applied.
    version: AtomicU64,
    max_keys: usize,
}

impl Default for LimitTable {
    fn default() -> Self {
        LimitTable::new(DEFAULT_MAX_KEYS)
    }
}

impl LimitTable {
    /// An empty table of at most `max_keys` keys.
    pub fn new(max_keys: usize) -> LimitTable {
        LimitTable {
            inner: Arc::new(Table {
                entries: DashMap::new(),
                version: AtomicU64::new(0),
                max_keys,
            }),
        }
    }

    /// The rules of `key`, if it has any.
    #[inline]
    pub fn get(&self, key: &str) -> Option<Arc<KeyLimits>> {
        self.inner.entries.get(key).map(|e| Arc::clone(e.value()))
    }

    /// How many keys have rules.
    pub fn len(&self) -> usize {
        self.inner.entries.len()
    }

    /// True when no key has rules.
    pub fn is_empty(&self) -> bool {
        self.inner.entries.is_empty()
    }

    /// The most keys the table holds.
    pub fn max_keys(&self) -> usize {
        self.inner.max_keys
    }

    /// The version of the last change made or applied (0 before any).
    pub fn version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Sets the rules of `key` (replacing any), at a new version, which
    /// it answers. Fails for a key the stores refuse, for no rules, and
    /// for a new key when the table holds `max_keys`.
    pub fn set(&self, key: &str, rules: Vec<Rule>) -> Result<u64> {
        validate_key(key)?;
        if rules.is_empty() {
            return Err(Error::NoRules);
        }
        if !self.inner.entries.contains_key(key) && self.len() >= self.inner.max_keys {
            return Err(Error::TooManyKeys {
                max: self.inner.max_keys,
            });
        }
        let version = self.inner.version.fetch_add(1, Ordering::AcqRel) + 1;
        self.inner
            .entries
            .insert(key.to_owned(), Arc::new(KeyLimits::new(rules, version)));
        Ok(version)
    }

    /// Removes the rules of `key`: the version of the removal, or `None`
    /// when it had none.
    pub fn remove(&self, key: &str) -> Option<u64> {
        self.inner.entries.remove(key)?;
        Some(self.inner.version.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Applies a change read from where the limits are shared: `key`'s
    /// rules (`None`: removed) as of the change `version`. `max_keys` is
    /// not checked: the writer checked it. The table's version becomes
    /// at least `version`.
    pub fn apply(&self, key: &str, limits: Option<KeyLimits>) {
        match limits {
            Some(limits) => {
                self.inner
                    .version
                    .fetch_max(limits.version, Ordering::AcqRel);
                self.inner.entries.insert(key.to_owned(), Arc::new(limits));
            }
            None => {
                self.inner.entries.remove(key);
            }
        }
    }

    /// Replaces every entry with `entries`, as of `version` (a full read
    /// of where the limits are shared).
    pub fn replace_all(
        &self,
        entries: impl IntoIterator<Item = (String, KeyLimits)>,
        version: u64,
    ) {
        let fresh: std::collections::HashMap<String, KeyLimits> = entries.into_iter().collect();
        self.inner
            .entries
            .retain(|key, _| fresh.contains_key(key.as_str()));
        for (key, limits) in fresh {
            self.inner.entries.insert(key, Arc::new(limits));
        }
        self.set_version(version);
    }

    /// Sets the table's version (what it has read up to).
    pub fn set_version(&self, version: u64) {
        self.inner.version.store(version, Ordering::Release);
    }

    /// Every key with its rules, in no order.
    pub fn entries(&self) -> Vec<(String, Arc<KeyLimits>)> {
        self.inner
            .entries
            .iter()
            .map(|e| (e.key().clone(), Arc::clone(e.value())))
            .collect()
    }
}

impl<S> From<&LimitRegistry<S>> for LimitTable {
    /// The registry's table (shared, not copied).
    fn from(registry: &LimitRegistry<S>) -> LimitTable {
        registry.table.clone()
    }
}

/// Decides keys under the rules set for them at run time, through any
/// [`Store`] (see the [module documentation](self)). Cheap to clone:
/// clones share the table and the store's handle.
#[derive(Clone, Debug)]
pub struct LimitRegistry<S> {
    store: S,
    table: LimitTable,
}

impl<S: Store> LimitRegistry<S> {
    /// An empty registry deciding through `store`, of at most
    /// [`DEFAULT_MAX_KEYS`] keys.
    pub fn new(store: S) -> LimitRegistry<S> {
        LimitRegistry::with_table(store, LimitTable::default())
    }

    /// A registry deciding through `store` under the rules of `table`
    /// (shared with whoever else holds it).
    pub fn with_table(store: S, table: LimitTable) -> LimitRegistry<S> {
        LimitRegistry { store, table }
    }

    /// The table of rules.
    pub fn table(&self) -> &LimitTable {
        &self.table
    }

    /// The store decisions are made in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Sets the rules of `key`, replacing any; answers the change's
    /// version. A rule that replaces one of the same window and
    /// algorithm takes over what the key used under it, so that raising
    /// a limit gives no fresh quota: what was used is recorded again at
    /// the time of the change (never more than the new limit in any
    /// window; for one window, possibly less than it).
    pub async fn set(&self, key: &str, rules: Vec<Rule>) -> Result<u64> {
        let previous = self.table.get(key);
        let version = self.table.set(key, rules.clone())?;
        if let Some(previous) = previous {
            carry_over(&self.store, key, &carried_over(previous.rules(), &rules)).await?;
        }
        Ok(version)
    }

    /// The rules of `key`, if it has any.
    pub fn get(&self, key: &str) -> Option<Arc<KeyLimits>> {
        self.table.get(key)
    }

    /// Removes the rules of `key`: the removal's version, or `None` when
    /// it had none. What it used stays in the store until it expires.
    pub fn remove(&self, key: &str) -> Option<u64> {
        self.table.remove(key)
    }

    /// Decides `cost` units for `key` under its rules, all or nothing.
    /// A key without rules is [`Error::NoRules`]: never "no limit".
    pub async fn acquire(&self, key: &str, cost: u64) -> Result<Decision> {
        let limits = self.table.get(key).ok_or(Error::NoRules)?;
        self.store.acquire(key, limits.rules(), cost).await
    }
}

/// For each new rule that replaces an old one of the same window and
/// algorithm but another limit: the old rule and the new one.
pub fn carried_over(old: &[Rule], new: &[Rule]) -> Vec<(Rule, Rule)> {
    new.iter()
        .filter(|rule| !old.iter().any(|o| o.same_state(rule)))
        .filter_map(|rule| {
            old.iter()
                .find(|o| {
                    o.rate().window() == rule.rate().window() && o.algorithm() == rule.algorithm()
                })
                .map(|o| (*o, *rule))
        })
        .collect()
}

/// What `key` owes `new` of its use under `old` (the rules it was
/// counted under before, the latest first): the most it used under any
/// of them (a rule's limit, or burst, less what remains), less what it
/// already holds under `new`, at most `new`'s limit (or burst). Asking
/// twice, or after another process carried it, owes nothing more.
pub async fn owed_to<S: Store + ?Sized>(
    store: &S,
    key: &str,
    old: &[Rule],
    new: Rule,
) -> Result<u64> {
    let mut used = 0;
    for rule in old {
        let seen = store.peek(key, &[*rule]).await?;
        // `remaining` runs from 0 to the burst (the limit without one).
        used = used.max(rule.burst().saturating_sub(seen.remaining()));
    }
    if used == 0 {
        return Ok(0);
    }
    let held = store.peek(key, &[new]).await?;
    let held = new.burst().saturating_sub(held.remaining());
    Ok(used.saturating_sub(held).min(new.burst()))
}

/// Records `owed` units of use on `key` under `new`, as a report (see
/// [`owed_to`]).
pub async fn record_carry<S: Store + ?Sized>(
    store: &S,
    key: &str,
    new: Rule,
    owed: u64,
) -> Result<()> {
    if owed > 0 {
        store
            .acquire(key, &[new.without_options().reporting()], owed)
            .await?;
    }
    Ok(())
}

/// Records on `key` under each new rule what it [owes](owed_to) of its
/// use under the old one.
pub async fn carry_over<S: Store + ?Sized>(
    store: &S,
    key: &str,
    carried: &[(Rule, Rule)],
) -> Result<()> {
    for (old, new) in carried {
        let owed = owed_to(store, key, &[*old], *new).await?;
        record_carry(store, key, *new, owed).await?;
    }
    Ok(())
}
