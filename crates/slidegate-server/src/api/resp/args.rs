//! Reading a command's arguments: numbers, keys, and option names, with
//! Redis's own error texts.

/// Redis's reply to an argument that is not a 64-bit integer.
pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

/// An argument as a signed 64-bit integer, as Redis reads one.
pub fn integer(arg: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|text| !text.starts_with('+'))
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| NOT_AN_INTEGER.to_owned())
}

/// A key: any UTF-8 text (the store's keys are text).
pub fn key(arg: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(arg).map_err(|_| "ERR invalid key: not UTF-8 text".to_owned())
}

/// True when `arg` is `name`, in any case.
pub fn is(arg: &[u8], name: &str) -> bool {
    arg.eq_ignore_ascii_case(name.as_bytes())
}

/// Redis's reply to a command with the wrong number of arguments.
pub fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// An argument as error messages show it: printable ASCII, at most 128
/// bytes.
pub fn shown(arg: &[u8]) -> String {
    arg.iter()
        .take(128)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(integer(b"-12"), Ok(-12));
        for bad in [
            &b"+1"[..],
            b"1.5",
            b"",
            b" 1",
            b"99999999999999999999",
            b"\xff",
        ] {
            assert_eq!(integer(bad), Err(NOT_AN_INTEGER.to_owned()), "{bad:?}");
        }
        assert_eq!(shown(b"a\r\nb"), "a??b");
    }
}
