//! The runtime limits' file (`--runtime-limits-file`), for the memory
//! store: every entry with its version, written whole and atomically (a
//! temporary file in the same directory, synced, renamed over the old
//! one, the directory synced), so that a crash leaves the old file or the
//! new one, never a torn one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use slidegate::store::redis::{LimitKind, SharedLimit};

/// What the file holds: the version of the last change, and every entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    /// The version of the last change.
    pub version: u64,
    /// Every entry.
    pub entries: Vec<SharedLimit>,
}

fn kind_name(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::Domain => "domain",
        _ => "key",
    }
}

/// Reads the file; an absent file is an empty set (nothing saved yet).
/// A file that cannot be read or is not this format is an error: the
/// server refuses to start rather than run without the limits it holds.
pub fn load(path: &Path) -> Result<Saved, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let bad = |why: &str| format!("{} is not a runtime limits file: {why}", path.display());
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    let version = value["version"]
        .as_u64()
        .ok_or_else(|| bad("no \"version\""))?;
    let mut entries = Vec::new();
    for entry in value["entries"]
        .as_array()
        .ok_or_else(|| bad("no \"entries\""))?
    {
        let kind = match entry["kind"].as_str() {
            Some("key") => LimitKind::Key,
            Some("domain") => LimitKind::Domain,
            _ => return Err(bad("an entry of no known kind")),
        };
        let (Some(name), Some(text), Some(version)) = (
            entry["name"].as_str(),
            entry["text"].as_str(),
            entry["version"].as_u64(),
        ) else {
            return Err(bad("an entry without name, text or version"));
        };
        entries.push(SharedLimit {
            kind,
            name: name.to_owned(),
            text: text.to_owned(),
            version,
        });
    }
    Ok(Saved { version, entries })
}

/// Writes `saved` to `path` atomically (see the module documentation).
pub fn save(path: &Path, saved: &Saved) -> std::io::Result<()> {
    let entries: Vec<Value> = saved
        .entries
        .iter()
        .map(|e| {
            json!({"kind": kind_name(e.kind), "name": e.name, "version": e.version, "text": e.text})
        })
        .collect();
    let body = json!({"version": saved.version, "entries": entries}).to_string();
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(body.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_set_loads_back_and_a_bad_file_is_an_error() {
        let dir =
            std::env::temp_dir().join(format!("slidegate-runtime-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("limits.json");
        let _ = std::fs::remove_file(&path);
        assert_eq!(load(&path).unwrap(), Saved::default());
        let saved = Saved {
            version: 9,
            entries: vec![SharedLimit {
                kind: LimitKind::Domain,
                name: "api".into(),
                text: "{\"format\":\"yaml\"}".into(),
                version: 4,
            }],
        };
        save(&path, &saved).unwrap();
        assert_eq!(load(&path).unwrap(), saved);
        std::fs::write(&path, "{\"version\": 1}").unwrap();
        assert!(load(&path).unwrap_err().contains("entries"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
