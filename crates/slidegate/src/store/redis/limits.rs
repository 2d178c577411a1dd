//! Limits shared through Redis: named entries (a key's rules, a domain's
//! rules, as text the caller encodes) that every process using the same
//! Redis and prefix reads, written with a version so that a reader can
//! catch up with what it missed.
//!
//! Layout, every Redis key in one hash slot (the `{limits}` tag), so that
//! each call is one atomic script on a single node, on Redis Cluster too:
//!
//! | Redis key | type | holds |
//! |---|---|---|
//! | `PREFIX:v2:shared:{limits}:key` | hash | entry name → `VERSION TEXT`, kind [`LimitKind::Key`] |
//! | `PREFIX:v2:shared:{limits}:domain` | hash | the same, kind [`LimitKind::Domain`] |
//! | `PREFIX:v2:shared:{limits}:version` | string | the version of the last write, counted from 1 |
//! | `PREFIX:v2:shared:{limits}:log` | list | the last [`LOG_LEN`] writes: `VERSION KIND NAME` |
//!
//! No state key starts that way (a state key's stem has `{` or `t:` after
//! the version), so no key a caller decides on can reach them, and a
//! reset never deletes them.
//!
//! A reader that holds version `v` asks [`RedisStore::sync_limits`] for
//! what changed since: the entries the log names after `v` (read as they
//! are now), or every entry when the log no longer reaches back to `v`.
//! Every write is published on the change feed as [`Change::Limits`], so
//! that readers ask at once rather than at their next poll.

use super::keys::FORMAT;
use super::store::RedisStore;
use crate::error::{Error, Result};
use crate::store::changes::Change;

/// How many writes the log keeps: a reader that missed more reads every
/// entry again.
pub const LOG_LEN: usize = 1000;

/// Which set of shared limits an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// The rules of one key.
    Key,
    /// The rules of one domain.
    Domain,
}

impl LimitKind {
    fn name(self) -> &'static str {
        match self {
            LimitKind::Key => "key",
            LimitKind::Domain => "domain",
        }
    }

    fn parse(name: &[u8]) -> Option<LimitKind> {
        match name {
            b"key" => Some(LimitKind::Key),
            b"domain" => Some(LimitKind::Domain),
            _ => None,
        }
    }
}

/// One shared entry as read: its kind, name, text and the version of the
/// write that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedLimit {
    /// Its set.
    pub kind: LimitKind,
    /// Its name in the set (a key, a domain).
    pub name: String,
    /// What the writer stored, as it stored it.
    pub text: String,
    /// The version of the write that made it.
    pub version: u64,
}

/// A write to make: `text` under `name` in `kind`'s set, or the entry
/// removed when `text` is `None`.
#[derive(Clone, Debug)]
pub struct LimitWrite<'a> {
    /// The set written to.
    pub kind: LimitKind,
    /// The entry's name.
    pub name: &'a str,
    /// The new text, or `None` to remove the entry.
    pub text: Option<&'a str>,
    /// Made only if the entry's version is this one now (`Some(0)`: only
    /// if there is no entry); `None` writes whatever is there.
    pub if_version: Option<u64>,
    /// Refused when the set holds this many entries and the write would
    /// add one.
    pub max_entries: usize,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Written {
    /// Made: the version of this write.
    Done(u64),
    /// Not made: the entry's version is this one (0 for none), not the
    /// one asked for.
    VersionMismatch(u64),
    /// Not made: a removal of an entry that does not exist.
    Absent,
    /// Not made: the set already holds `max_entries`.
    Full,
}

/// What changed since a reader's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsSync {
    /// The version the reader holds once it applies this.
    pub version: u64,
    /// True when `entries` is every entry: the reader replaces what it
    /// holds. Otherwise `entries` are the ones changed, and `removed` the
    /// ones gone.
    pub full: bool,
    /// Entries, as they are now.
    pub entries: Vec<SharedLimit>,
    /// Entries removed since the reader's version (never with `full`).
    pub removed: Vec<(LimitKind, String)>,
}

/// KEYS: the kind's hash, version, log. ARGV: name, text ('' with ARGV[6]
/// = '1' removes), expected version (-1: any), max entries, kind, remove,
/// log length.
const WRITE: &str = r"
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local cur_version = 0
if cur then cur_version = tonumber(string.match(cur, '^(%d+) ')) or 0 end
local want = tonumber(ARGV[3])
if want >= 0 and want ~= cur_version then return {'mismatch', cur_version} end
if ARGV[6] == '1' then
  if not cur then return {'absent', 0} end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  if not cur and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return {'full', 0} end
end
local v = redis.call('INCR', KEYS[2])
if ARGV[6] ~= '1' then redis.call('HSET', KEYS[1], ARGV[1], v .. ' ' .. ARGV[2]) end
redis.call('RPUSH', KEYS[3], v .. ' ' .. ARGV[5] .. ' ' .. ARGV[1])
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[7]), -1)
return {'ok', v}
";

/// KEYS: key hash, domain hash, version, log. ARGV: the reader's version.
/// Answers {version, 'same'}, {version, 'delta', kind, name, value or
/// false, ...} or {version, 'full', key entries, domain entries}.
const SYNC: &str = r"
local v = tonumber(redis.call('GET', KEYS[3]) or '0')
local since = tonumber(ARGV[1])
if v == since then return {v, 'same'} end
if since > 0 and since < v then
  local log = redis.call('LRANGE', KEYS[4], 0, -1)
  local first = log[1] and tonumber(string.match(log[1], '^(%d+) '))
  if first and first <= since + 1 then
    local out = {v, 'delta'}
    local seen = {}
    for _, entry in ipairs(log) do
      local ver, kind, name = string.match(entry, '^(%d+) (%a+) (.*)$')
      if ver and tonumber(ver) > since and not seen[kind .. ' ' .. name] then
        seen[kind .. ' ' .. name] = true
        local hash = KEYS[1]
        if kind == 'domain' then hash = KEYS[2] end
        out[#out + 1] = kind
        out[#out + 1] = name
        out[#out + 1] = redis.call('HGET', hash, name)
      end
    end
    return out
  end
end
return {v, 'full', redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
";

/// KEYS: key hash, domain hash, version. ARGV: version, then kind, name,
/// `VERSION TEXT` per entry. Writes only into an empty layout (no version
/// at all: a Redis that lost them); answers 1 when it wrote.
const SEED: &str = r"
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
for i = 2, #ARGV, 3 do
  local hash = KEYS[1]
  if ARGV[i] == 'domain' then hash = KEYS[2] end
  redis.call('HSET', hash, ARGV[i + 1], ARGV[i + 2])
end
redis.call('SET', KEYS[3], ARGV[1])
return 1
";

/// The Redis keys of the layout (see the module documentation).
struct Layout {
    key: String,
    domain: String,
    version: String,
    log: String,
}

impl Layout {
    fn of(prefix: &str) -> Layout {
        let stem = format!("{prefix}:{FORMAT}:shared:{{limits}}:");
        Layout {
            key: format!("{stem}key"),
            domain: format!("{stem}domain"),
            version: format!("{stem}version"),
            log: format!("{stem}log"),
        }
    }

    fn hash(&self, kind: LimitKind) -> &str {
        match kind {
            LimitKind::Key => &self.key,
            LimitKind::Domain => &self.domain,
        }
    }
}

impl RedisStore {
    /// Makes `write` to the limits shared through this Redis (see
    /// [`LimitWrite`]), then tells every process on the
    /// change feed ([`Change::Limits`]). A write that was made but could
    /// not be published is still made: readers find it at their next poll.
    pub async fn write_limit(&self, write: LimitWrite<'_>) -> Result<Written> {
        let layout = Layout::of(&self.inner.prefix);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(WRITE)
            .arg(3)
            .arg(layout.hash(write.kind))
            .arg(&layout.version)
            .arg(&layout.log)
            .arg(write.name)
            .arg(write.text.unwrap_or(""))
            .arg(
                write
                    .if_version
                    .map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX)),
            )
            .arg(write.max_entries)
            .arg(write.kind.name())
            .arg(if write.text.is_none() { "1" } else { "0" })
            .arg(LOG_LEN);
        let (outcome, version): (String, u64) = self.inner.query(&cmd, &layout.version).await?;
        let written = match outcome.as_str() {
            "ok" => Written::Done(version),
            "mismatch" => Written::VersionMismatch(version),
            "absent" => Written::Absent,
            "full" => Written::Full,
            other => return Err(Error::Store(format!("unexpected answer {other:?}"))),
        };
        if matches!(written, Written::Done(_))
            && let Err(error) = self.inner.publish(&Change::Limits).await
        {
            tracing::warn!(%error, "a shared limit was written, but not published: other processes see it at their next poll");
        }
        Ok(written)
    }

    /// What changed in the shared limits since version `since` (0: read
    /// everything), in one atomic call.
    pub async fn sync_limits(&self, since: u64) -> Result<LimitsSync> {
        let layout = Layout::of(&self.inner.prefix);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SYNC)
            .arg(4)
            .arg(&layout.key)
            .arg(&layout.domain)
            .arg(&layout.version)
            .arg(&layout.log)
            .arg(since);
        let reply: redis::Value = self.inner.query(&cmd, &layout.version).await?;
        parse_sync(reply)
    }

    /// Writes `entries` at `version` into a Redis that holds no shared
    /// limits at all (restarted empty, flushed): a process that kept the
    /// last set it read puts it back. Does nothing, and answers `false`,
    /// when Redis holds a version already.
    pub async fn seed_limits(&self, version: u64, entries: &[SharedLimit]) -> Result<bool> {
        let layout = Layout::of(&self.inner.prefix);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SEED)
            .arg(3)
            .arg(&layout.key)
            .arg(&layout.domain)
            .arg(&layout.version)
            .arg(version);
        for entry in entries {
            cmd.arg(entry.kind.name())
                .arg(&entry.name)
                .arg(format!("{} {}", entry.version, entry.text));
        }
        let wrote: i64 = self.inner.query(&cmd, &layout.version).await?;
        if wrote == 1
            && let Err(error) = self.inner.publish(&Change::Limits).await
        {
            tracing::warn!(%error, "shared limits were written back, but not published");
        }
        Ok(wrote == 1)
    }
}

fn parse_sync(reply: redis::Value) -> Result<LimitsSync> {
    let bad = || Error::Store("unexpected answer to the shared limits' sync".into());
    let redis::Value::Array(items) = reply else {
        return Err(bad());
    };
    let mut items = items.into_iter();
    let version: u64 = items
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .ok_or_else(bad)?;
    let mode: String = items
        .next()
        .and_then(|v| redis::from_redis_value(v).ok())
        .ok_or_else(bad)?;
    let mut sync = LimitsSync {
        version,
        full: mode == "full",
        entries: Vec::new(),
        removed: Vec::new(),
    };
    match mode.as_str() {
        "same" => {}
        "delta" => {
            let rest: Vec<redis::Value> = items.collect();
            for triple in rest.chunks(3) {
                let [kind, name, value] = triple else {
                    return Err(bad());
                };
                let kind: Vec<u8> = redis::from_redis_value(kind.clone()).map_err(|_| bad())?;
                let kind = LimitKind::parse(&kind).ok_or_else(bad)?;
                let name: String = redis::from_redis_value(name.clone()).map_err(|_| bad())?;
                match value {
                    redis::Value::Nil => sync.removed.push((kind, name)),
                    value => {
                        let stored: String =
                            redis::from_redis_value(value.clone()).map_err(|_| bad())?;
                        sync.entries
                            .push(entry(kind, name, &stored).ok_or_else(bad)?);
                    }
                }
            }
        }
        "full" => {
            for kind in [LimitKind::Key, LimitKind::Domain] {
                let pairs: Vec<(String, String)> = items
                    .next()
                    .and_then(|v| redis::from_redis_value(v).ok())
                    .ok_or_else(bad)?;
                for (name, stored) in pairs {
                    sync.entries
                        .push(entry(kind, name, &stored).ok_or_else(bad)?);
                }
            }
        }
        _ => return Err(bad()),
    }
    Ok(sync)
}

/// An entry from its stored form, `VERSION TEXT`.
fn entry(kind: LimitKind, name: String, stored: &str) -> Option<SharedLimit> {
    let (version, text) = stored.split_once(' ')?;
    Some(SharedLimit {
        kind,
        name,
        text: text.to_owned(),
        version: version.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_one_slot_and_no_state_key() {
        let layout = Layout::of("slidegate");
        assert_eq!(layout.key, "slidegate:v2:shared:{limits}:key");
        let slots: Vec<u16> = [&layout.key, &layout.domain, &layout.version, &layout.log]
            .iter()
            .map(|k| super::super::keys::slot_of(k))
            .collect();
        assert!(slots.iter().all(|s| *s == slots[0]), "{slots:?}");
    }

    #[test]
    fn stored_entries_read_back() {
        let read = entry(LimitKind::Key, "k".into(), "12 {\"rules\": []}").unwrap();
        assert_eq!(read.version, 12);
        assert_eq!(read.text, "{\"rules\": []}");
        assert!(entry(LimitKind::Key, "k".into(), "x y").is_none());
        assert!(entry(LimitKind::Key, "k".into(), "12").is_none());
    }
}
