//! Reading commands off a RESP connection: the bytes a client sends,
//! split into commands of arguments, within bounds.
//!
//! A command is RESP's array of bulk strings (`*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n`),
//! what every client library sends, or an inline command (`PING hi\r\n`),
//! what a person types into `nc`: one line, split on spaces. Anything else
//! is a protocol error, and so is a command over the bounds: more
//! arguments than `max_args`, or more bytes than `max_command_bytes`.
//! Both are checked from the lengths a client announces, before its bytes
//! arrive, so a client cannot make the server buffer past them.
//!
//! [`parse`] reads no further than one command and copies nothing: it
//! gives the arguments as ranges of the buffer. The parser is a pure
//! function of the bytes, fuzzed by `fuzz/fuzz_targets/resp_frame.rs`.

use std::ops::Range;

/// The bounds of one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// Most bytes one command may take on the wire.
    pub max_command_bytes: usize,
    /// Most arguments (the command's name included).
    pub max_args: usize,
}

/// `--resp-max-command-bytes`' default: Redis's own client query buffer
/// is far larger (1 GiB), but a rate limit command is a few dozen bytes.
pub const DEFAULT_MAX_COMMAND_BYTES: usize = 512 * 1024;

/// `--resp-max-args`' default.
pub const DEFAULT_MAX_ARGS: usize = 1024;

/// The longest line of an inline command, as Redis bounds it.
const MAX_INLINE_BYTES: usize = 64 * 1024;

/// The longest `*N` or `$N` header line, digits and sign included.
const MAX_LENGTH_LINE: usize = 24;

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_command_bytes: DEFAULT_MAX_COMMAND_BYTES,
            max_args: DEFAULT_MAX_ARGS,
        }
    }
}

/// One whole command at the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Each argument's bytes in the buffer, the name first; empty for an
    /// empty command (`*0`, a blank line), which is skipped.
    pub args: Vec<Range<usize>>,
    /// How many bytes of the buffer the command took.
    pub len: usize,
}

/// Bytes that are not a command within bounds. The connection answers
/// `-ERR Protocol error: ...` and closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A header line (`*N`, `$N`) that is not a length.
    #[error("invalid {0} length")]
    BadLength(&'static str),
    /// An array element that is not a bulk string.
    #[error("expected '$', got '{0}'")]
    NotBulk(char),
    /// A bulk string not followed by CRLF.
    #[error("bulk string not terminated by CRLF")]
    Unterminated,
    /// More arguments than `max_args`.
    #[error("too many arguments (--resp-max-args)")]
    TooManyArgs,
    /// More bytes than `max_command_bytes`.
    #[error("command too large (--resp-max-command-bytes)")]
    TooLarge,
    /// An inline command longer than 64 KiB without a line end.
    #[error("too big inline request")]
    InlineTooLarge,
}

/// The first command of `buf`, `None` when more bytes are needed, or an
/// error for bytes that can never become one.
pub fn parse(buf: &[u8], limits: FrameLimits) -> Result<Option<Command>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => multibulk(buf, limits),
        Some(_) => inline(buf, limits),
    }
}

fn multibulk(buf: &[u8], limits: FrameLimits) -> Result<Option<Command>, ProtocolError> {
    let Some((count, mut at)) = length_line(buf, 1, "multibulk")? else {
        return Ok(None);
    };
    if count <= 0 {
        // `*0` and `*-1`: nothing to do, as Redis reads them.
        return Ok(Some(Command {
            args: Vec::new(),
            len: at,
        }));
    }
    let count = usize::try_from(count).map_err(|_| ProtocolError::TooManyArgs)?;
    if count > limits.max_args {
        return Err(ProtocolError::TooManyArgs);
    }
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let Some(&kind) = buf.get(at) else {
            return within(at, limits).map(|()| None);
        };
        if kind != b'$' {
            return Err(ProtocolError::NotBulk(printable(kind)));
        }
        let Some((len, start)) = length_line(buf, at + 1, "bulk")? else {
            return within(at, limits).map(|()| None);
        };
        let len = usize::try_from(len).map_err(|_| ProtocolError::BadLength("bulk"))?;
        let end = start
            .checked_add(len)
            .filter(|end| end + 2 <= limits.max_command_bytes)
            .ok_or(ProtocolError::TooLarge)?;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError::Unterminated);
        }
        args.push(start..end);
        at = end + 2;
    }
    Ok(Some(Command { args, len: at }))
}

/// Fails once a command has taken more than its bound.
fn within(taken: usize, limits: FrameLimits) -> Result<(), ProtocolError> {
    if taken > limits.max_command_bytes {
        Err(ProtocolError::TooLarge)
    } else {
        Ok(())
    }
}

/// The signed number of a `*N\r\n` or `$N\r\n` line whose digits start at
/// `from`, and where the next line starts; `None` when the line is not
/// all there yet.
fn length_line(
    buf: &[u8],
    from: usize,
    what: &'static str,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = &buf[from.min(buf.len())..];
    let Some(cr) = rest
        .iter()
        .take(MAX_LENGTH_LINE)
        .position(|&b| b == b'\r' || b == b'\n')
    else {
        return if rest.len() >= MAX_LENGTH_LINE {
            Err(ProtocolError::BadLength(what))
        } else {
            Ok(None)
        };
    };
    if rest[cr] == b'\n' {
        return Err(ProtocolError::BadLength(what));
    }
    match rest.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(ProtocolError::BadLength(what)),
    }
    let digits = std::str::from_utf8(&rest[..cr]).map_err(|_| ProtocolError::BadLength(what))?;
    let number: i64 = digits.parse().map_err(|_| ProtocolError::BadLength(what))?;
    if number < -1 || (what == "bulk" && number < 0) {
        return Err(ProtocolError::BadLength(what));
    }
    Ok(Some((number, from + cr + 2)))
}

fn inline(buf: &[u8], limits: FrameLimits) -> Result<Option<Command>, ProtocolError> {
    let max_line = MAX_INLINE_BYTES.min(limits.max_command_bytes);
    let Some(newline) = buf.iter().take(max_line).position(|&b| b == b'\n') else {
        return if buf.len() >= max_line {
            Err(ProtocolError::InlineTooLarge)
        } else {
            Ok(None)
        };
    };
    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
        newline - 1
    } else {
        newline
    };
    let mut args = Vec::new();
    let mut start = None;
    for (i, &b) in buf[..line_end].iter().enumerate() {
        match (b.is_ascii_whitespace(), start) {
            (true, Some(s)) => {
                args.push(s..i);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        args.push(s..line_end);
    }
    if args.len() > limits.max_args {
        return Err(ProtocolError::TooManyArgs);
    }
    Ok(Some(Command {
        args,
        len: newline + 1,
    }))
}

fn printable(byte: u8) -> char {
    if byte.is_ascii_graphic() {
        char::from(byte)
    } else {
        '?'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(buf: &[u8]) -> Option<(Vec<&[u8]>, usize)> {
        parse(buf, FrameLimits::default())
            .unwrap()
            .map(|c| (c.args.iter().map(|r| &buf[r.clone()]).collect(), c.len))
    }

    #[test]
    fn an_array_of_bulk_strings_is_a_command() {
        let wire = b"*3\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n";
        let (args, len) = words(wire).unwrap();
        assert_eq!(args, [&b"CL.THROTTLE"[..], b"k", b""]);
        assert_eq!(len, wire.len() - 4);
    }

    #[test]
    fn every_prefix_of_a_command_asks_for_more() {
        let wire = b"*2\r\n$4\r\nECHO\r\n$5\r\nhe\r\no\r\n";
        for end in 0..wire.len() {
            assert_eq!(words(&wire[..end]), None, "{end}");
        }
        assert_eq!(words(wire).unwrap().0, [&b"ECHO"[..], b"he\r\no"]);
    }

    #[test]
    fn inline_commands_split_on_spaces() {
        assert_eq!(words(b"PING\r\n").unwrap(), (vec![&b"PING"[..]], 6));
        assert_eq!(
            words(b"  SG.PEEK  k 5\t1000\n").unwrap().0,
            [&b"SG.PEEK"[..], b"k", b"5", b"1000"]
        );
        assert_eq!(words(b"\r\n").unwrap(), (vec![], 2));
        assert_eq!(words(b"PING"), None);
    }

    #[test]
    fn empty_arrays_are_skipped() {
        assert_eq!(words(b"*0\r\n").unwrap(), (vec![], 4));
        assert_eq!(words(b"*-1\r\n").unwrap(), (vec![], 5));
    }

    #[test]
    fn bounds_are_checked_from_the_announced_lengths() {
        let limits = FrameLimits {
            max_command_bytes: 64,
            max_args: 3,
        };
        assert_eq!(
            parse(b"*4\r\n", limits),
            Err(ProtocolError::TooManyArgs),
            "before any argument arrives"
        );
        assert_eq!(
            parse(b"*1\r\n$100\r\n", limits),
            Err(ProtocolError::TooLarge),
            "before the bulk string arrives"
        );
        assert_eq!(
            parse(b"*1\r\n$9223372036854775807\r\n", limits),
            Err(ProtocolError::TooLarge)
        );
        let long = [b'a'; 65];
        assert_eq!(parse(&long, limits), Err(ProtocolError::InlineTooLarge));
        assert_eq!(parse(b"a b c d\n", limits), Err(ProtocolError::TooManyArgs));
    }

    #[test]
    fn what_is_not_resp_is_an_error() {
        for (wire, error) in [
            (&b"*1\r\n:1\r\n"[..], ProtocolError::NotBulk(':')),
            (b"*x\r\n", ProtocolError::BadLength("multibulk")),
            (b"*1\r\n$-1\r\n", ProtocolError::BadLength("bulk")),
            (b"*1\n", ProtocolError::BadLength("multibulk")),
            (b"*1\r\n$1\r\nab\r\n", ProtocolError::Unterminated),
            (
                b"*111111111111111111111111111",
                ProtocolError::BadLength("multibulk"),
            ),
        ] {
            assert_eq!(parse(wire, FrameLimits::default()), Err(error), "{wire:?}");
        }
    }
}
