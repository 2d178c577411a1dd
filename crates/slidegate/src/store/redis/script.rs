//! The one Lua script every decision runs, and how a decision travels:
//! its part of a script call ([`Part`]), sent alone ([`plain_call`]) or
//! with the parts of other waiting decisions in one coalesced call
//! ([`coalesced_call`], `batch.lua`). The plan of a decision, which
//! encodes its part and reads its answer, is `plan.rs`.
//!
//! The text is constant (one file per algorithm plus the drivers, joined
//! at compile time, with the numbers `codes.lua` names written in once),
//! so Redis caches it once and every call is an EVALSHA with its
//! parameters in KEYS and ARGV only.
//!
//! Parameters and reply are little-endian doubles (every value is an
//! integer below 2^53, so exact): Lua reads them with one `struct.unpack`
//! and answers with one `struct.pack`, where text would cost a `tonumber`
//! per parameter and a table per reply, a large part of the Redis CPU of a
//! decision.

use std::io::Write as _;
use std::sync::LazyLock;

use redis::RedisWrite as _;

use super::codes::Mode;

/// The script as written. The chunk runs in full on every EVALSHA, so it
/// starts with what every call needs and the common call (one
/// sliding-log hit), which returns before any function of the other
/// paths is created: the exact integer helpers, the algorithms, the
/// driver of a call's hits and, last, the driver of coalesced calls.
/// `sliding_log_one.lua` is a block placed twice: inline for a call of
/// one hit, and as the function that decides such a hit inside a
/// coalesced call (see that file). The numbers both sides agree on are
/// written by name (`RESERVE`, `COMPACT`): see [`SCRIPT_TEXT`].
const SCRIPT_SOURCE: &str = concat!(
    include_str!("prelude.lua"),
    "if n == 1 and code == SLIDING_LOG then\nlocal index, memo = 1, false\n",
    include_str!("sliding_log_one.lua"),
    "end\n",
    include_str!("arith.lua"),
    include_str!("sliding_log.lua"),
    include_str!("sliding_counter.lua"),
    include_str!("fixed_window.lua"),
    include_str!("gcra.lua"),
    include_str!("concurrency.lua"),
    include_str!("main.lua"),
    include_str!("lease.lua"),
    "local function sliding_log_one(index, now, L, W, cost, margin, memo)\n",
    include_str!("sliding_log_one.lua"),
    "end\n",
    include_str!("batch.lua"),
);

/// The script as sent: [`SCRIPT_SOURCE`] with every name of `codes.lua`
/// written as its number. As Lua locals the names would cost Redis CPU on
/// every call (a load each, an upvalue in every function that reads one:
/// 3 % more instructions for a plain call, 5 % for a batch); as literals
/// they cost nothing.
pub(crate) static SCRIPT_TEXT: LazyLock<String> =
    LazyLock::new(|| inline_codes(SCRIPT_SOURCE, include_str!("codes.lua")));

/// The script's SHA1, as EVALSHA names it.
pub(crate) static SCRIPT_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(&SCRIPT_TEXT).get_hash().to_owned());

/// The names a Lua table defines (`local A, B = 1, 2` lines) and their
/// numbers, as written.
fn lua_names(table: &str) -> Vec<(&str, &str)> {
    table
        .lines()
        .filter_map(|line| line.strip_prefix("local ")?.split_once('='))
        .flat_map(|(names, numbers)| names.split(',').zip(numbers.split(',')))
        .map(|(name, number)| (name.trim(), number.trim()))
        .collect()
}

/// `source` with every name that `table` defines written as its number,
/// in code only: comments (from `--` on; no string of the script holds
/// one) keep their names.
fn inline_codes(source: &str, table: &str) -> String {
    let names = lua_names(table);
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(source.len());
    for line in source.split_inclusive('\n') {
        let (mut code, comment) = line.split_at(line.find("--").unwrap_or(line.len()));
        while let Some(start) = code.find(is_word) {
            out.push_str(&code[..start]);
            let word = &code[start..];
            let word = &word[..word.find(|c: char| !is_word(c)).unwrap_or(word.len())];
            match names.iter().find(|(name, _)| *name == word) {
                Some((_, number)) => out.push_str(number),
                None => out.push_str(word),
            }
            code = &code[start + word.len()..];
        }
        out.push_str(code);
        out.push_str(comment);
    }
    out
}

/// `SCRIPT LOAD` of the script (after a `NOSCRIPT`).
pub(crate) fn load_command() -> redis::Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(SCRIPT_TEXT.as_str());
    cmd
}

/// Bytes of one number in the parameters and the reply.
pub(super) const NUMBER: usize = 8;
/// The largest expiry margin sent, in ms (about 35 years): keeps the
/// script's TTL arithmetic exact and within what PEXPIRE accepts.
const MAX_MARGIN_MS: u64 = 1 << 40;

/// Appends a key to a part's buffer, written by `write` after its length
/// (4 bytes little-endian), as [`Part`] reads it back.
#[inline]
pub(super) fn push_key(buf: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    write(buf);
    let length = u32::try_from(buf.len() - at - 4).unwrap_or(u32::MAX);
    buf[at..at + 4].copy_from_slice(&length.to_le_bytes());
}

/// One decision's part of a script call, encoded once by its caller: its
/// Redis keys (each after its length, 4 bytes little-endian), then its
/// numbers (see [`Plan::part`]).
#[derive(Debug)]
pub(crate) struct Part {
    buf: Vec<u8>,
    keys_end: usize,
    nkeys: usize,
    /// The Redis Cluster slot of its keys.
    pub(crate) slot: u16,
}

impl Part {
    /// The part encoded in `buf`: `nkeys` keys (see [`push_key`]) up to
    /// `keys_end`, then the numbers; its keys are in `slot`.
    pub(super) fn new(buf: Vec<u8>, keys_end: usize, nkeys: usize, slot: u16) -> Part {
        Part {
            buf,
            keys_end,
            nkeys,
            slot,
        }
    }

    /// How many KEYS it takes.
    pub(crate) fn nkeys(&self) -> usize {
        self.nkeys
    }

    /// Its size, to bound a coalesced call.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        std::iter::from_fn(move || {
            let length = self.buf.get(at..at + 4)?;
            let length = u32::from_le_bytes(length.try_into().ok()?) as usize;
            let key = self.buf.get(at + 4..at + 4 + length)?;
            at += 4 + length;
            Some(key)
        })
        .take(self.nkeys)
    }

    /// The numbers of a coalesced call: the hit count, the key count, the rest.
    fn numbers(&self) -> &[u8] {
        &self.buf[self.keys_end..]
    }
}

/// `EVALSHA` of the script with `nkeys` KEYS.
fn evalsha(nkeys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(SCRIPT_SHA.as_str()).arg(nkeys);
    cmd
}

/// The call of one decision alone, decided at `now` (`None`: Redis' clock).
pub(crate) fn plain_call(part: &Part, now: Option<u64>, margin_ms: u64) -> redis::Cmd {
    let mut cmd = evalsha(part.nkeys);
    for key in part.keys() {
        cmd.arg(key);
    }
    let numbers = part.numbers();
    let mut head = header(now, margin_ms);
    head[2 * NUMBER..].copy_from_slice(&numbers[..NUMBER]);
    let mut argv = cmd.writer_for_next_arg();
    // Writing to a Vec cannot fail.
    let _ = argv.write_all(&head);
    let _ = argv.write_all(&numbers[2 * NUMBER..]);
    drop(argv);
    cmd
}

/// The call that decides `parts` one after the other (`batch.lua`), at
/// one `now`.
pub(crate) fn coalesced_call<'p>(
    parts: impl Iterator<Item = &'p Part> + Clone,
    now: Option<u64>,
    margin_ms: u64,
) -> redis::Cmd {
    let (count, nkeys) = parts
        .clone()
        .fold((0usize, 0usize), |(c, k), p| (c + 1, k + p.nkeys));
    let mut cmd = evalsha(nkeys);
    for part in parts.clone() {
        for key in part.keys() {
            cmd.arg(key);
        }
    }
    let mut argv = cmd.writer_for_next_arg();
    let mut head = header(now, margin_ms);
    head[2 * NUMBER..].copy_from_slice(&Mode::Coalesced.hit_count(count).to_le_bytes());
    let _ = argv.write_all(&head);
    for part in parts {
        let _ = argv.write_all(part.numbers());
    }
    drop(argv);
    cmd
}

/// now (µs, or -1 for Redis' clock), the expiry margin (ms), and room for
/// the hit count (the prelude's first three numbers).
fn header(now: Option<u64>, margin_ms: u64) -> [u8; 3 * NUMBER] {
    let mut head = [0u8; 3 * NUMBER];
    head[..NUMBER].copy_from_slice(&now.map_or(-1.0, |now| now as f64).to_le_bytes());
    head[NUMBER..2 * NUMBER].copy_from_slice(&(margin_ms.min(MAX_MARGIN_MS) as f64).to_le_bytes());
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code of a Lua text, its comments left out.
    fn code(lua: &str) -> String {
        lua.lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_script_spells_its_codes_by_name_and_is_sent_with_their_numbers() {
        let table = include_str!("codes.lua");
        let names = lua_names(table);
        assert!(names.len() >= 10, "{names:?}");
        let source = code(SCRIPT_SOURCE);
        // No number of the table is written out in the source, and no mode
        // or code is compared, scaled or split with a literal.
        let numbers: Vec<&str> = source
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .collect();
        for (_, number) in &names {
            if number.len() > 1 {
                assert!(!numbers.contains(number), "{number} outside codes.lua");
            }
        }
        let literal_use = literal_codes(&source);
        assert!(literal_use.is_empty(), "{literal_use:?}");
        // Every name is used, and sent as its number: no name is left.
        let sent = code(&SCRIPT_TEXT);
        let words: Vec<&str> = sent
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        for (name, _) in &names {
            // Named in code, or (the builders main.lua lists by code) in
            // the comment that says where.
            assert!(SCRIPT_SOURCE.contains(name), "{name} is never named");
            assert!(!words.contains(name), "{name} is sent by name");
        }
        assert!(sent.contains("mode == 5"), "RESERVE is sent as 5");
        assert!(sent.contains("reset_now < 67108864"), "COMPACT is sent");
        // Comments keep the names.
        assert_eq!(SCRIPT_TEXT.lines().count(), SCRIPT_SOURCE.lines().count());
        assert!(SCRIPT_TEXT.contains("--   RESERVE: when"));
    }

    #[test]
    fn only_whole_names_of_code_are_replaced() {
        let table = "local ONE, TWO = 1, 2\nlocal BIG = 1048576\n";
        assert_eq!(
            inline_codes(
                "if ONE == x_ONE or TWO_ then return BIG end -- ONE\n",
                table
            ),
            "if 1 == x_ONE or TWO_ then return 1048576 end -- ONE\n"
        );
        assert_eq!(
            inline_codes("x = 2ONE + ONE2 + (ONE)\n", table),
            "x = 2ONE + ONE2 + (1)\n"
        );
    }

    /// `mode` or `code` next to an operator and a digit (`mode == 5`,
    /// `code % 4`): what a name of `codes.lua` must say instead.
    fn literal_codes(code: &str) -> Vec<String> {
        let mut found = Vec::new();
        for line in code.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            for three in words.windows(3) {
                let subject = three[0].trim_start_matches('(');
                let is_subject =
                    subject == "mode" || subject == "code" || subject.ends_with("_mode");
                let is_operator =
                    ["==", "~=", "<", ">", "<=", ">=", "%", "/", "*"].contains(&three[1]);
                let is_number = three[2].starts_with(|c: char| c.is_ascii_digit());
                if is_subject && is_operator && is_number {
                    found.push(line.trim().to_owned());
                }
            }
        }
        found
    }
}
