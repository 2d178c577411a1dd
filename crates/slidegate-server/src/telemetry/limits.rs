//! What is counted per configured limit, kept here rather than in the
//! rules (which stay plain data): one entry per limit, found by the
//! limit's [`LimitId`], in a table made for one config.
//!
//! A reload brings a config of a new generation; the first decision (or
//! status page sample) that sees it makes the new table and swaps it in,
//! once, atomically. Deciding reads the table through an `ArcSwap` guard:
//! no lock, no allocation, no write to a shared count.

use std::sync::{Arc, OnceLock};

use arc_swap::{ArcSwap, Guard};
use metrics::Counter;

use super::counts::Counts;
use crate::rules::{LimitId, RateLimitConfig};

/// The counters of one configured limit.
#[derive(Debug, Default)]
pub struct LimitEntry {
    /// Its domain.
    pub domain: String,
    /// Its stats key, its `rule` label.
    pub full_key: String,
    /// Its `slidegate_decisions_total` series, one per outcome, each
    /// registered on first use.
    pub handles: [OnceLock<Counter>; 6],
    /// Its decisions, for the status page.
    pub counts: Counts,
}

/// The counters of every limit of one config, by id.
#[derive(Debug, Default)]
pub struct LimitTable {
    generation: u64,
    entries: Vec<LimitEntry>,
}

impl LimitTable {
    /// A table for every limit of `config`, each counter at zero.
    pub fn of(config: &RateLimitConfig) -> LimitTable {
        let mut entries: Vec<LimitEntry> = Vec::with_capacity(config.limit_count());
        entries.resize_with(config.limit_count(), LimitEntry::default);
        for (domain, limit) in config.limits() {
            if let Some(entry) = entries.get_mut(limit.id.index()) {
                entry.domain = domain.to_owned();
                entry.full_key.clone_from(&limit.full_key);
            }
        }
        LimitTable {
            generation: config.generation(),
            entries,
        }
    }

    /// The generation of the config the table was made for.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The counters of the limit `id`.
    pub fn entry(&self, id: LimitId) -> Option<&LimitEntry> {
        self.entries.get(id.index())
    }

    /// Every entry, by id.
    pub fn entries(&self) -> &[LimitEntry] {
        &self.entries
    }
}

/// The table of the newest config seen.
#[derive(Debug, Default)]
pub struct Limits {
    table: ArcSwap<LimitTable>,
}

impl Limits {
    /// The table of the newest config seen, made for `config` first if it
    /// is newer. The table of an older config (a decision made with the
    /// rules a reload has just replaced) is not made again: the caller
    /// finds the generations differ and counts without it.
    pub fn for_config(&self, config: &RateLimitConfig) -> Guard<Arc<LimitTable>> {
        let table = self.table.load();
        if table.generation >= config.generation() {
            return table;
        }
        drop(table);
        let fresh = Arc::new(LimitTable::of(config));
        self.table.rcu(|current| {
            if current.generation >= fresh.generation {
                Arc::clone(current)
            } else {
                Arc::clone(&fresh)
            }
        });
        self.table.load()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::LoadOptions;

    fn config(keys: &[&str]) -> RateLimitConfig {
        let mut yaml = String::from("domain: d\ndescriptors:\n");
        for key in keys {
            yaml.push_str(&format!(
                "  - key: {key}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
            ));
        }
        RateLimitConfig::from_sources(&[("t.yaml".into(), yaml)], LoadOptions::default()).unwrap()
    }

    #[test]
    fn a_newer_config_gets_a_table_of_its_own_and_an_older_one_none() {
        let limits = Limits::default();
        let first = config(&["a"]);
        let table = limits.for_config(&first);
        assert_eq!(table.generation(), first.generation());
        assert_eq!(table.entries().len(), 1);
        table.entries()[0].counts.add(true, false);
        // The same config: the same table, counts kept.
        assert_eq!(
            limits.for_config(&first).entries()[0].counts.load(),
            [1, 0, 0]
        );

        let second = config(&["a", "b"]);
        let table = limits.for_config(&second);
        assert_eq!(table.generation(), second.generation());
        let keys: Vec<&str> = table
            .entries()
            .iter()
            .map(|e| e.full_key.as_str())
            .collect();
        assert_eq!(keys, ["d.a", "d.b"]);
        assert_eq!(table.entries()[0].counts.load(), [0, 0, 0], "from zero");

        // A decision made with the replaced config does not bring its
        // table back.
        let stale = limits.for_config(&first);
        assert_eq!(stale.generation(), second.generation());
    }
}
