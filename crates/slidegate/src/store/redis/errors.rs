//! Redis' errors as this store reports them: as text without script
//! hashes, as typed errors, and the replies that say a call did not run
//! where it was sent (`NOSCRIPT`, `MOVED`, `ASK`).

use std::time::Duration;

use crate::error::Error;

/// Further attempts when the script cache is flushed again right after
/// the script was loaded (the script did not run, so nothing is applied
/// twice).
pub(super) const NOSCRIPT_RETRIES: u32 = 3;

/// An error that is `NOSCRIPT`: the script did not run.
pub(super) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// An error that is `MOVED` or `ASK`: another node serves the slot.
pub(super) fn is_redirect(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask)
    )
}

/// A reply that is `NOSCRIPT`: the script did not run.
pub(super) fn is_noscript_reply(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::ServerError(e)
        if e.kind() == Some(redis::ServerErrorKind::NoScript))
}

/// A reply that is `MOVED` or `ASK`: another node serves the slot.
pub(super) fn is_redirect_reply(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::ServerError(e)
        if matches!(e.kind(), Some(redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask)))
}

/// A Redis error as text, without script hashes (an implementation detail
/// callers never need).
pub(super) fn describe(e: &redis::RedisError) -> String {
    e.to_string()
        .split(' ')
        .filter(|word| {
            let w = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            !(w.len() == 40 && w.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A failed call as this crate's error: [`Error::Timeout`] (of `timeout`)
/// when the connection timed out, [`Error::Store`] otherwise.
pub(super) fn store_error(e: &redis::RedisError, timeout: Duration) -> Error {
    if e.is_timeout() {
        Error::Timeout(timeout)
    } else {
        Error::Store(describe(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_never_carries_a_script_hash() {
        let e = redis::RedisError::from((
            redis::ErrorKind::Client,
            "script failed",
            "ERR user_script:1: boom script: e0e1f9fabfc9d4800c877a703b823ac0578ff8db, on @user_script:1.".to_owned(),
        ));
        let text = describe(&e);
        assert!(text.contains("boom"), "{text}");
        assert!(
            !text.contains("e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
            "{text}"
        );
    }
}
