//! `slidegate validate-config`: load rule files as `serve --config` would,
//! and say which domains they hold, or why they cannot be loaded.

use std::path::PathBuf;

use crate::rules::{LiveConfig, LoadOptions};

/// The files to check (see `slidegate validate-config --help`).
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    /// Rule files or directories.
    pub paths: Vec<PathBuf>,
    /// Merge a domain split over several files.
    pub merge_domains: bool,
    /// Accept a config with no domain, as `serve --allow-empty-config` does.
    pub allow_empty: bool,
}

/// Loads the files and prints their domains; fails with the first error.
pub fn run(options: ValidateOptions) -> anyhow::Result<()> {
    let load = LoadOptions {
        merge_domains: options.merge_domains,
    };
    // The loader `serve` starts with, so that both refuse the same
    // configs (an empty one included) with the same message.
    let live = LiveConfig::open(options.paths, load, options.allow_empty)?;
    let config = live.current().load_full();
    let mut domains: Vec<&str> = config.domains().collect();
    domains.sort_unstable();
    println!("ok: {} domain(s): {}", domains.len(), domains.join(", "));
    Ok(())
}
