//! Reading the files a `--config` path stands for.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// The largest config file read: 4 MiB. A larger file is refused before
/// it is read.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The text of every file the `--config` paths stand for, as `(name,
/// text)` pairs in load order.
pub fn read_sources(paths: &[PathBuf]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut sources = Vec::new();
    for path in paths {
        for file in config_files(path)? {
            let text = read_file(&file)?;
            sources.push((file.display().to_string(), text));
        }
    }
    Ok(sources)
}

/// Reads one config file: a regular file (through symlinks) of at most
/// [`MAX_FILE_BYTES`] of UTF-8. A device, a FIFO or a huge file behind a
/// config name is refused without reading it.
fn read_file(path: &Path) -> Result<String, ConfigError> {
    let fail = |message: String| ConfigError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("error loading config file: {message}"),
    };
    let io = |e: std::io::Error| fail(e.to_string());
    let too_large = || fail(format!("larger than {} MiB", MAX_FILE_BYTES >> 20));
    // Checked before opening: opening a FIFO would block.
    let metadata = std::fs::metadata(path).map_err(io)?;
    if !metadata.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Checked again on the opened file, which a swap of the path since
    // cannot change; the read is bounded all the same.
    if !file.metadata().map_err(io)?.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))
}

/// The files a `--config` path stands for.
fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let unreadable = |e: std::io::Error| ConfigError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("error loading config file: {e}"),
    };
    if !path.is_dir() {
        // Reading reports a missing file.
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(unreadable)? {
        let file = entry.map_err(unreadable)?.path();
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        // Anything else named like a config file is read, so that what
        // cannot be (a dangling link, a device) is reported, not skipped.
        if yaml && !name.starts_with('.') && !file.is_dir() {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}
