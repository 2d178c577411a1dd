//! Structured logs with `tracing`, to stderr, filtered by `RUST_LOG`.
//!
//! Text lines are coloured only when stderr is a terminal and `NO_COLOR`
//! is unset or empty (<https://no-color.org>): a log file, a pipe, a
//! container runtime or journald gets plain text, never ANSI escape codes.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::otlp::{self, Otlp};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global subscriber: stderr (stdout stays clean for command
/// output such as `slidegate check`), level from `RUST_LOG`, `info` when unset.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    init_with(format, None).map(drop)
}

/// [`init`], and with `otlp_endpoint`, spans exported over OTLP (see
/// [`otlp`]); must then run inside a tokio
/// runtime. The returned exporter flushes on [`Otlp::shutdown`].
pub fn init_with(format: LogFormat, otlp_endpoint: Option<&str>) -> anyhow::Result<Option<Otlp>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = colour_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let Some(endpoint) = otlp_endpoint else {
        // Without tracing, one global filter: callsites it disables (the
        // DEBUG spans of every request) cost nothing, as before tracing.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(colour)
            .with_writer(std::io::stderr);
        let installed = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))?;
        return Ok(None);
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let (otlp, otel) = otlp::start(endpoint)?;
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))?;
    Ok(Some(otlp))
}

/// True when log lines may carry colour: stderr is a terminal and
/// `NO_COLOR` is unset or empty.
pub fn colour_wanted(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal() {
        assert!(colour_wanted(true, None));
        assert!(!colour_wanted(false, None));
    }

    #[test]
    fn no_color_with_any_value_turns_colour_off() {
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        assert!(!colour_wanted(true, Some(OsStr::new("false"))));
    }

    #[test]
    fn an_empty_no_color_is_unset() {
        assert!(colour_wanted(true, Some(OsStr::new(""))));
    }
}
