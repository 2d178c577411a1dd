//! Reloading the config when its files change.
//!
//! The directories holding the config are watched (not the files: editors
//! save by renaming, and Kubernetes ConfigMaps swap a `..data` symlink).
//! Events are debounced, then every path is read again, checked, and the
//! new rules swapped in at once. A bad new config is refused: the old rules
//! stay, the error is logged with its file, line and column, and counted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use super::{ConfigError, LoadOptions, RateLimitConfig};

/// Counts of reload attempts, for metrics and tests.
#[derive(Debug, Default)]
pub struct ReloadCounts {
    /// Reloads that replaced the rules.
    pub ok: AtomicU64,
    /// Reloads refused because the new config was bad.
    pub failed: AtomicU64,
}

/// The rules in use, the paths they come from, and how to load them.
#[derive(Debug)]
pub struct LiveConfig {
    paths: Vec<PathBuf>,
    options: LoadOptions,
    current: Arc<ArcSwap<RateLimitConfig>>,
    counts: Arc<ReloadCounts>,
}

impl LiveConfig {
    /// Loads the paths once; fails if the config is bad.
    pub fn load(paths: Vec<PathBuf>, options: LoadOptions) -> Result<LiveConfig, ConfigError> {
        let config = RateLimitConfig::load(&paths, options)?;
        Ok(LiveConfig {
            paths,
            options,
            current: Arc::new(ArcSwap::from_pointee(config)),
            counts: Arc::default(),
        })
    }

    /// The rules in use (what requests are decided against).
    pub fn current(&self) -> Arc<ArcSwap<RateLimitConfig>> {
        Arc::clone(&self.current)
    }

    /// Reload counts.
    pub fn counts(&self) -> Arc<ReloadCounts> {
        Arc::clone(&self.counts)
    }

    /// Reads the paths again and swaps the rules in if they are good.
    pub fn reload(&self) -> Result<(), ConfigError> {
        match RateLimitConfig::load(&self.paths, self.options) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                self.counts.ok.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("slidegate_config_reloads_total", "result" => "ok").increment(1);
                tracing::info!(paths = ?self.paths, "config reloaded");
                Ok(())
            }
            Err(error) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("slidegate_config_reloads_total", "result" => "error")
                    .increment(1);
                tracing::error!(%error, "config reload refused; the previous rules stay in force");
                Err(error)
            }
        }
    }

    /// Watches the config's directories and reloads on change, waiting
    /// `debounce` for a burst of events to settle. Stops when dropped.
    pub fn watch(self: &Arc<Self>, debounce: Duration) -> notify::Result<ConfigWatcher> {
        let live = Arc::clone(self);
        let mut debouncer =
            new_debouncer(
                debounce,
                None,
                move |result: DebounceEventResult| match result {
                    Ok(events) if !events.is_empty() => {
                        let _ = live.reload();
                    }
                    Ok(_) => {}
                    Err(errors) => tracing::warn!(?errors, "config watch error"),
                },
            )?;
        let mut watched: Vec<PathBuf> = Vec::new();
        for path in &self.paths {
            let dir = directory_of(path);
            if !watched.contains(&dir) {
                debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
                watched.push(dir);
            }
        }
        Ok(ConfigWatcher {
            _debouncer: debouncer,
        })
    }
}

/// A running watch; dropping it stops watching.
pub struct ConfigWatcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConfigWatcher")
    }
}

/// The directory to watch for a config path: itself if a directory,
/// otherwise the directory holding it.
fn directory_of(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_owned();
    }
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn limit_of(live: &LiveConfig, key: &str) -> Option<u64> {
        live.current()
            .load()
            .lookup("d", &[(key, "x")])
            .map(|m| m.limit.requests_per_unit)
    }

    fn rules(key: &str, limit: u64) -> String {
        format!(
            "domain: d\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"
        )
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("slidegate-reload-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_good_change_is_applied_and_a_bad_one_refused() {
        let dir = temp_dir("change");
        std::fs::write(dir.join("rl.yaml"), rules("a", 1)).unwrap();
        let live = Arc::new(LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap());
        let _watch = live.watch(Duration::from_millis(50)).unwrap();
        assert_eq!(limit_of(&live, "a"), Some(1));

        std::fs::write(dir.join("rl.yaml"), rules("a", 2)).unwrap();
        wait_for("the change", || limit_of(&live, "a") == Some(2));

        std::fs::write(
            dir.join("rl.yaml"),
            "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {}\n",
        )
        .unwrap();
        wait_for("the refusal", || {
            live.counts().failed.load(Ordering::Relaxed) > 0
        });
        assert_eq!(limit_of(&live, "a"), Some(2), "old rules stay");

        // A deleted file of a watched directory takes its domain with it.
        std::fs::write(dir.join("rl.yaml"), rules("a", 3)).unwrap();
        wait_for("the fix", || limit_of(&live, "a") == Some(3));
        std::fs::remove_file(dir.join("rl.yaml")).unwrap();
        wait_for("the deletion", || limit_of(&live, "a").is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_deleted_config_file_named_on_its_own_keeps_the_old_rules() {
        let dir = temp_dir("named");
        let file = dir.join("rl.yaml");
        std::fs::write(&file, rules("a", 1)).unwrap();
        let live = Arc::new(LiveConfig::load(vec![file.clone()], LoadOptions::default()).unwrap());
        let _watch = live.watch(Duration::from_millis(50)).unwrap();
        std::fs::remove_file(&file).unwrap();
        wait_for("the refusal", || {
            live.counts().failed.load(Ordering::Relaxed) > 0
        });
        assert_eq!(limit_of(&live, "a"), Some(1));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_kubernetes_configmap_symlink_swap_is_picked_up() {
        use std::os::unix::fs::symlink;
        let dir = temp_dir("configmap");
        std::fs::create_dir(dir.join("..v1")).unwrap();
        std::fs::write(dir.join("..v1/rl.yaml"), rules("a", 1)).unwrap();
        symlink("..v1", dir.join("..data")).unwrap();
        symlink("..data/rl.yaml", dir.join("rl.yaml")).unwrap();
        let live = Arc::new(LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap());
        let _watch = live.watch(Duration::from_millis(50)).unwrap();
        assert_eq!(limit_of(&live, "a"), Some(1));

        // What the kubelet does: a new directory, then an atomic rename of
        // a new `..data` link over the old one.
        std::fs::create_dir(dir.join("..v2")).unwrap();
        std::fs::write(dir.join("..v2/rl.yaml"), rules("a", 7)).unwrap();
        symlink("..v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        std::fs::remove_dir_all(dir.join("..v1")).unwrap();
        wait_for("the swap", || limit_of(&live, "a") == Some(7));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
