//! Dropping idle keys: the background thread that sweeps every
//! `sweep_interval`, and the sweeps a full store makes on the request path.
//! A key is only removed under its shard's lock, when all its states are
//! idle, so a sweep never changes an answer.

use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::inner::Inner;
use super::map::{Entry, Shard};
use super::rules::{MAX_RULES, RuleTable};
use crate::clock::Clock;
use crate::error::{Error, Result};

/// Starts the thread that sweeps `inner` every `interval`, for as long as
/// the store lives (it holds a weak reference, and the store's drop wakes
/// it up to end).
pub(super) fn spawn_sweeper<K, C>(inner: &Arc<Inner<K, C>>, interval: Duration)
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock,
{
    let weak: Weak<Inner<K, C>> = Arc::downgrade(inner);
    let spawned = std::thread::Builder::new()
        .name("slidegate-sweeper".into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                let Some(inner) = weak.upgrade() else { return };
                inner.sweep();
            }
        });
    // Without the thread the store still works; it sweeps when full.
    if let Ok(handle) = spawned {
        let _ = inner.sweeper.set(handle.thread().clone());
    }
}

impl<K, C> Inner<K, C>
where
    K: Hash + Eq,
    C: Clock,
{
    /// Drops every idle key, shard by shard; how many were dropped.
    pub(super) fn sweep(&self) -> usize {
        let (mut removed, mut bytes) = (0, 0);
        for shard in 0..self.map.shards() {
            let mut shard = self.map.lock(shard);
            let Shard { table, rules } = &mut *shard;
            let now = self.clock.now_micros();
            table.retain(|entry| {
                let idle = entry.slot.is_idle(now, rules);
                if idle {
                    removed += 1;
                    bytes += entry.slot.bytes();
                }
                !idle
            });
            self.map.shrink(table);
            if rules.len() > MAX_RULES / 2 {
                compact_rules(table, rules);
            }
        }
        self.bounds.remove_keys(removed, bytes);
        self.leases.purge(self.clock.now_micros(), &self.bounds);
        removed
    }

    /// Sweeps on the request path, at most once per `forced_sweep_gap`;
    /// true when that freed some keys.
    fn sweep_if_due(&self, now: u64) -> bool {
        let due = self.next_forced_sweep.load(Ordering::Relaxed);
        now >= due
            && self
                .next_forced_sweep
                .compare_exchange(
                    due,
                    now + self.forced_sweep_gap,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
            && self.sweep() > 0
    }

    /// After `full`, a sweep if one is due, then `again`; `full` when no
    /// sweep freed anything.
    #[cold]
    pub(super) fn after_sweep<T>(
        &self,
        full: Error,
        again: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if self.sweep_if_due(self.clock.now_micros()) {
            again()
        } else {
            Err(full)
        }
    }
}

/// Keeps only the rules a shard's slots refer to.
fn compact_rules<K>(table: &mut hashbrown::HashTable<Entry<K>>, rules: &mut RuleTable) {
    let mut used = vec![false; rules.len()];
    for entry in table.iter() {
        if let Some(id) = entry.slot.rule_id() {
            used[usize::from(id)] = true;
        }
    }
    let renumbered = rules.compact(&used);
    for entry in table.iter_mut() {
        entry.slot.renumber(&renumbered);
    }
}
