//! The values of flags that are more than a number or a name: durations
//! (one parser for all), counts from 1, the longest ad-hoc window.

use std::fmt;
use std::time::Duration;

use slidegate::Rate;

/// A duration such as `500ms`, `10s` or `1m`.
pub(super) fn duration(text: &str) -> Result<Duration, String> {
    slidegate::rate::parse_window(text).map_err(|_| {
        // A bare number is refused rather than read as seconds: the flags
        // that take bare numbers say their unit in their name (`-ms`).
        let unitless = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        let why = if unitless {
            ": a number needs a unit"
        } else {
            ""
        };
        format!("'{text}' is not a duration{why} (expected e.g. 500ms, 10s, 1m)")
    })
}

/// A [`duration`] above zero.
pub(super) fn positive_duration(text: &str) -> Result<ShownDuration, String> {
    match duration(text)? {
        Duration::ZERO => Err("must be above zero".into()),
        d => Ok(ShownDuration(d)),
    }
}

/// A [`duration`], zero included.
pub(super) fn any_duration(text: &str) -> Result<ShownDuration, String> {
    duration(text).map(ShownDuration)
}

/// A duration flag with a default: shown in `--help` as it is written
/// (`10s`, `60s`, `30m`, `1d`), so that a default is a constant of the
/// module that owns it rather than a string here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShownDuration(pub Duration);

impl fmt::Display for ShownDuration {
    /// In whole days, hours, minutes (from 2), seconds or milliseconds,
    /// the largest that is exact: a minute shows as `60s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        if !millis.is_multiple_of(1_000) {
            return write!(f, "{millis}ms");
        }
        let secs = self.0.as_secs();
        match secs {
            0 => f.write_str("0s"),
            s if s.is_multiple_of(86_400) => write!(f, "{}d", s / 86_400),
            s if s.is_multiple_of(3_600) => write!(f, "{}h", s / 3_600),
            s if s.is_multiple_of(60) && s >= 120 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// A whole number from 1.
pub(super) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number from 1".into()),
    }
}

/// A window an ad-hoc rule may have: from [`Rate::MIN_WINDOW`] to
/// [`Rate::MAX_WINDOW`].
pub(super) fn adhoc_window(text: &str) -> Result<ShownDuration, String> {
    let window = duration(text)?;
    if window < Rate::MIN_WINDOW || window > Rate::MAX_WINDOW {
        return Err(format!(
            "expected a window from {:?} to {} days",
            Rate::MIN_WINDOW,
            Rate::MAX_WINDOW.as_secs() / 86_400
        ));
    }
    Ok(ShownDuration(window))
}

/// How long `slidegate check --wait` may wait: at most
/// [`slidegate::store::MAX_WAIT`].
pub(super) fn wait(text: &str) -> Result<Duration, String> {
    let wait = duration(text)?;
    if wait > slidegate::store::MAX_WAIT {
        return Err(format!("at most {}s", slidegate::store::MAX_WAIT.as_secs()));
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_show_as_they_are_written() {
        for (secs, shown) in [
            (10, "10s"),
            (60, "60s"),
            (1_800, "30m"),
            (86_400, "1d"),
            (7_200, "2h"),
        ] {
            assert_eq!(ShownDuration(Duration::from_secs(secs)).to_string(), shown);
        }
        assert_eq!(
            ShownDuration(Duration::from_millis(250)).to_string(),
            "250ms"
        );
        for text in ["10s", "60s", "30m", "1d", "250ms"] {
            let parsed = any_duration(text).unwrap();
            assert_eq!(any_duration(&parsed.to_string()), Ok(parsed), "{text}");
        }
    }
}
