//! Reloading the config when its files change.
//!
//! The directories holding the config are watched (not the files: editors
//! save by renaming, and Kubernetes ConfigMaps swap a `..data` symlink).
//! Only events that can change content start a reload (writes, creates,
//! renames, removes); reads and metadata changes do not, so a reader of the
//! files (another program's watcher, the reload's own reads) cannot start
//! reloads. Events are debounced, then every path is read again; sources
//! identical to the ones in force change nothing. Otherwise the new config
//! is checked and swapped in at once, or refused (the old rules stay):
//!
//! | outcome | when | log | `slidegate_config_reloads_total{result}` |
//! |---|---|---|---|
//! | applied | a good new config | INFO | `ok` |
//! | unchanged | same files, same contents | DEBUG | none |
//! | refused | no domain left, or a domain in force removed, without `--allow-empty-config` | WARN, with the domains that would go (`removed`) | `refused` |
//! | error | a file unreadable or bad | ERROR, with its `file`, `line` and `column` | `error` |
//!
//! Every one of these log lines carries `paths` (the configured paths),
//! `result` (as the metric's label) and `domains` (the domains in force
//! once the reload is over), so an operator can filter on them.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::RecursiveMode;
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use super::current::CurrentConfig;
use super::error::ConfigError;
use super::files::read_sources;
use super::set::{LoadOptions, RateLimitConfig};
use super::yaml::FileSpec;

/// Counts of reload attempts, for metrics and tests.
#[derive(Debug, Default)]
pub struct ReloadCounts {
    /// Reloads that replaced the rules.
    pub ok: AtomicU64,
    /// Reloads refused because the new config was bad.
    pub failed: AtomicU64,
    /// Reloads refused because they would remove a domain, or every one.
    pub refused: AtomicU64,
    /// Reloads that found the sources in force, unchanged.
    pub unchanged: AtomicU64,
}

/// What a reload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new rules are in force.
    Applied,
    /// The files and their contents are the ones in force: nothing to do.
    Unchanged,
    /// The new config would remove these domains in force (all of them,
    /// when it has none): refused, the old rules stay.
    Refused {
        /// The domains the new config lacks, sorted.
        removed: Vec<String>,
    },
}

/// Which files, with which contents, a config was loaded from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Fingerprint(Vec<(String, usize, u64)>);

impl Fingerprint {
    fn of(sources: &[(String, String)]) -> Fingerprint {
        Fingerprint(
            sources
                .iter()
                .map(|(name, text)| {
                    let mut hasher = DefaultHasher::new();
                    text.hash(&mut hasher);
                    (name.clone(), text.len(), hasher.finish())
                })
                .collect(),
        )
    }
}

/// The rules in use, the paths they come from, and how to load them.
#[derive(Debug)]
pub struct LiveConfig {
    paths: Vec<PathBuf>,
    options: LoadOptions,
    allow_empty: bool,
    current: CurrentConfig,
    /// The sources of the rules in force; held through a reload (or a
    /// control plane's update), so two changes never interleave.
    in_force: Mutex<InForce>,
    counts: Arc<ReloadCounts>,
}

/// What the rules in force were made of: the files, and the domains a
/// control plane sent (`xds/`), each rebuilt with the other's last good
/// state when it changes.
#[derive(Debug, Default)]
struct InForce {
    fingerprint: Fingerprint,
    sources: Vec<(String, String)>,
    xds: Vec<(String, FileSpec)>,
}

impl LiveConfig {
    /// Loads the paths once; fails if the config is bad or has no domain.
    pub fn load(paths: Vec<PathBuf>, options: LoadOptions) -> Result<LiveConfig, ConfigError> {
        LiveConfig::open(paths, options, false)
    }

    /// Loads the paths once; fails if the config is bad, or has no domain
    /// unless `allow_empty`, which also lets later reloads remove domains.
    pub fn open(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        allow_empty: bool,
    ) -> Result<LiveConfig, ConfigError> {
        LiveConfig::open_with(paths, options, allow_empty, false)
    }

    /// [`open`](LiveConfig::open) for a server whose control plane sends
    /// rules too (`xds/`): the files may hold no domain at start, since
    /// the control plane's come once it answers.
    pub fn open_for_xds(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        allow_empty: bool,
    ) -> Result<LiveConfig, ConfigError> {
        let live = LiveConfig::open_with(paths, options, allow_empty, true)?;
        live.current.set_pending(Some(
            "the control plane has not sent its rules yet (xDS)".to_owned(),
        ));
        Ok(live)
    }

    fn open_with(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        allow_empty: bool,
        empty_at_start: bool,
    ) -> Result<LiveConfig, ConfigError> {
        let sources = read_sources(&paths)?;
        let config = RateLimitConfig::from_sources(&sources, options)?;
        if config.domains().next().is_none() && !allow_empty && !empty_at_start {
            return Err(ConfigError {
                file: display_paths(&paths),
                line: None,
                column: None,
                message: "no domain is configured (no .yaml file, or only empty ones); \
                    refusing to serve without rules (--allow-empty-config allows it)"
                    .into(),
            });
        }
        Ok(LiveConfig {
            paths,
            options,
            allow_empty,
            current: CurrentConfig::new(config),
            in_force: Mutex::new(InForce {
                fingerprint: Fingerprint::of(&sources),
                sources,
                xds: Vec::new(),
            }),
            counts: Arc::default(),
        })
    }

    /// The rules in use (what requests are decided against).
    pub fn current(&self) -> CurrentConfig {
        self.current.clone()
    }

    /// Reload counts.
    pub fn counts(&self) -> Arc<ReloadCounts> {
        Arc::clone(&self.counts)
    }

    /// Reads the paths again and swaps the rules in if they changed, are
    /// good, and keep every domain in force (or `allow_empty`).
    pub fn reload(&self) -> Result<ReloadOutcome, ConfigError> {
        let mut in_force = self.in_force.lock().unwrap_or_else(PoisonError::into_inner);
        let paths = display_paths(&self.paths);
        let loaded = read_sources(&self.paths).and_then(|sources| {
            let fingerprint = Fingerprint::of(&sources);
            if fingerprint == in_force.fingerprint {
                return Ok(None);
            }
            let config = RateLimitConfig::with_xds(&sources, &in_force.xds, self.options)?;
            Ok(Some((config, fingerprint, sources)))
        });
        let (config, fingerprint, sources) = match loaded {
            Ok(Some(loaded)) => loaded,
            Ok(None) => {
                self.counts.unchanged.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    %paths,
                    result = "unchanged",
                    domains = ?sorted_domains(&self.current.load()),
                    "config files unchanged: nothing to reload"
                );
                return Ok(ReloadOutcome::Unchanged);
            }
            Err(error) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("slidegate_config_reloads_total", "result" => "error")
                    .increment(1);
                tracing::error!(
                    %paths,
                    result = "error",
                    file = %error.file,
                    line = error.line,
                    column = error.column,
                    domains = ?sorted_domains(&self.current.load()),
                    %error,
                    "config reload refused: a file is unreadable or bad; the previous rules stay in force"
                );
                self.current.refused("error", error.to_string());
                return Err(error);
            }
        };
        let domains = sorted_domains(&config);
        // The runtime domains are no reload's to keep or remove.
        let in_force_domains = sorted_domains(&self.current.load().files_only());
        let removed: Vec<String> = in_force_domains
            .iter()
            .filter(|d| !config.has_domain(d))
            .cloned()
            .collect();
        if (domains.is_empty() || !removed.is_empty()) && !self.allow_empty {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("slidegate_config_reloads_total", "result" => "refused").increment(1);
            tracing::warn!(
                %paths,
                result = "refused",
                removed = ?removed,
                domains = ?in_force_domains,
                "config reload refused: it would remove domains in force (pass --allow-empty-config to allow it); the previous rules stay in force"
            );
            self.current.refused(
                "refused",
                format!(
                    "it would remove the domains in force {removed:?} (pass --allow-empty-config to allow it)"
                ),
            );
            return Ok(ReloadOutcome::Refused { removed });
        }
        self.current.store(config);
        in_force.fingerprint = fingerprint;
        in_force.sources = sources;
        self.counts.ok.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("slidegate_config_reloads_total", "result" => "ok").increment(1);
        tracing::info!(%paths, result = "ok", domains = ?domains, removed = ?removed, "config reloaded");
        Ok(ReloadOutcome::Applied)
    }

    /// Puts a control plane's domains in force beside the files' (see
    /// `xds/`): `xds` is its whole state (state of the world), `version`
    /// its version, for the logs. Refused, the rules in force unchanged,
    /// when a resource is bad, names a domain a file defines, or would
    /// leave no domain at all (unless `--allow-empty-config`).
    pub(crate) fn apply_xds(
        &self,
        version: &str,
        xds: Vec<(String, FileSpec)>,
    ) -> Result<(), ConfigError> {
        let mut in_force = self.in_force.lock().unwrap_or_else(PoisonError::into_inner);
        let config = RateLimitConfig::with_xds(&in_force.sources, &xds, self.options)
            .and_then(|config| {
                if config.domains().next().is_none() && !self.allow_empty {
                    return Err(ConfigError {
                        file: "xds".into(),
                        line: None,
                        column: None,
                        message: "the update leaves no domain at all; refusing to serve without rules (--allow-empty-config allows it)".into(),
                    });
                }
                Ok(config)
            });
        let config = match config {
            Ok(config) => config,
            Err(error) => {
                metrics::counter!("slidegate_config_reloads_total", "result" => "xds_rejected")
                    .increment(1);
                tracing::error!(
                    version,
                    result = "xds_rejected",
                    domains = ?sorted_domains(&self.current.load()),
                    %error,
                    "rules from the control plane refused: the previous rules stay in force"
                );
                self.current.refused("error", error.to_string());
                return Err(error);
            }
        };
        let domains = sorted_domains(&config);
        self.current.store(config);
        self.current.set_pending(None);
        in_force.xds = xds;
        metrics::counter!("slidegate_config_reloads_total", "result" => "xds_ok").increment(1);
        tracing::info!(
            version,
            result = "xds_ok",
            domains = ?domains,
            "rules from the control plane in force"
        );
        Ok(())
    }

    /// Watches the config's directories and reloads when a file's content
    /// may have changed, waiting `debounce` for a burst of events to
    /// settle. Stops when dropped.
    pub fn watch(self: &Arc<Self>, debounce: Duration) -> notify::Result<ConfigWatcher> {
        let live = Arc::clone(self);
        let mut debouncer =
            new_debouncer(
                debounce,
                None,
                move |result: DebounceEventResult| match result {
                    Ok(events) => {
                        if events.iter().any(|e| changes_content(&e.event.kind)) {
                            let _ = live.reload();
                        }
                    }
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

/// True for the events that can change what a config path holds: writes,
/// creates, renames (a symlink swap is one), removes. Reads (open, access,
/// close without writing) and metadata changes (`touch`, `chmod`) are not.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        // Data, names, and what a backend cannot tell apart (Any, Other:
        // a rescan, say) may be a change; an unchanged one costs a read.
        EventKind::Modify(_)
        | EventKind::Create(_)
        | EventKind::Remove(_)
        | EventKind::Any
        | EventKind::Other => true,
    }
}

fn sorted_domains(config: &RateLimitConfig) -> Vec<String> {
    let mut domains: Vec<String> = config.domains().map(str::to_owned).collect();
    domains.sort_unstable();
    domains
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
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

        std::fs::remove_dir_all(dir).unwrap();
    }

    fn counts(live: &LiveConfig) -> [u64; 4] {
        let c = live.counts();
        [&c.ok, &c.failed, &c.refused, &c.unchanged].map(|n| n.load(Ordering::Relaxed))
    }

    #[test]
    fn a_deleted_file_that_takes_a_domain_with_it_is_refused_and_the_old_rules_stay() {
        let dir = temp_dir("deleted");
        std::fs::write(dir.join("a.yaml"), rules("a", 1)).unwrap();
        std::fs::write(
            dir.join("b.yaml"),
            "domain: other\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .unwrap();
        let live = Arc::new(LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap());
        let _watch = live.watch(Duration::from_millis(50)).unwrap();
        std::fs::remove_file(dir.join("b.yaml")).unwrap();
        wait_for("the refusal", || {
            live.counts().refused.load(Ordering::Relaxed) > 0
        });
        assert!(live.current().load().has_domain("other"), "old rules stay");
        assert_eq!(limit_of(&live, "a"), Some(1));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_emptied_directory_is_refused() {
        let dir = temp_dir("emptied");
        std::fs::write(dir.join("rl.yaml"), rules("a", 1)).unwrap();
        let live = LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap();
        std::fs::remove_file(dir.join("rl.yaml")).unwrap();
        assert_eq!(
            live.reload().unwrap(),
            ReloadOutcome::Refused {
                removed: vec!["d".into()]
            }
        );
        assert_eq!(limit_of(&live, "a"), Some(1));
        assert_eq!(counts(&live), [0, 0, 1, 0]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn allow_empty_lets_a_reload_remove_every_domain() {
        let dir = temp_dir("allowed");
        std::fs::write(dir.join("rl.yaml"), rules("a", 1)).unwrap();
        let live = LiveConfig::open(vec![dir.clone()], LoadOptions::default(), true).unwrap();
        std::fs::remove_file(dir.join("rl.yaml")).unwrap();
        assert_eq!(live.reload().unwrap(), ReloadOutcome::Applied);
        assert_eq!(limit_of(&live, "a"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_empty_config_is_refused_at_start_unless_allowed() {
        let dir = temp_dir("empty-start");
        let err = LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap_err();
        assert!(err.message.contains("--allow-empty-config"), "{err}");
        assert!(LiveConfig::open(vec![dir.clone()], LoadOptions::default(), true).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_same_files_with_the_same_contents_change_nothing() {
        let dir = temp_dir("same");
        std::fs::write(dir.join("rl.yaml"), rules("a", 1)).unwrap();
        let live = LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap();
        let before = live.current().load_full();
        std::fs::write(dir.join("rl.yaml"), rules("a", 1)).unwrap();
        assert_eq!(live.reload().unwrap(), ReloadOutcome::Unchanged);
        assert!(Arc::ptr_eq(&before, &live.current().load_full()));
        assert_eq!(counts(&live), [0, 0, 0, 1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reading_or_touching_the_files_starts_no_reload() {
        let dir = temp_dir("reads");
        let file = dir.join("rl.yaml");
        std::fs::write(&file, rules("a", 1)).unwrap();
        let live = Arc::new(LiveConfig::load(vec![dir.clone()], LoadOptions::default()).unwrap());
        let _watch = live.watch(Duration::from_millis(50)).unwrap();
        for _ in 0..10 {
            std::fs::read_to_string(&file).unwrap();
            std::fs::read_dir(&dir).unwrap().for_each(drop);
            // What `touch` does: both times at once, a metadata event.
            // (Setting the modification time alone is reported as a
            // write, and the unchanged contents are then caught by the
            // comparison with the sources in force.)
            let now = std::time::SystemTime::now();
            let times = std::fs::FileTimes::new()
                .set_accessed(now)
                .set_modified(now);
            std::fs::File::open(&file)
                .unwrap()
                .set_times(times)
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            counts(&live),
            [0, 0, 0, 0],
            "a read or a touch started a reload"
        );
        // The watch works: a write is picked up.
        std::fs::write(&file, rules("a", 2)).unwrap();
        wait_for("the change", || limit_of(&live, "a") == Some(2));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn only_events_that_can_change_content_count() {
        use notify::event::{
            AccessKind, CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode,
        };
        for (kind, changes) in [
            (EventKind::Access(AccessKind::Open(AccessMode::Read)), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                false,
            ),
            (EventKind::Access(AccessKind::Read), false),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime)),
                false,
            ),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
                false,
            ),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                true,
            ),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), true),
            (EventKind::Modify(ModifyKind::Name(RenameMode::Both)), true),
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Remove(RemoveKind::File), true),
        ] {
            assert_eq!(changes_content(&kind), changes, "{kind:?}");
        }
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
