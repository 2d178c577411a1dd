//! A config file that could not be loaded, with where and why, and how
//! the text of a config file is shown in such an error.

use std::fmt;

/// A config file that could not be loaded, with where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file's name.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                write!(f, "{}:{line}:{column}: {}", self.file, self.message)
            }
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The longest key or list item an error message quotes.
pub(super) const NAME_CHARS: usize = 32;

/// The longest value of a field with a few known values (a unit, a window,
/// an algorithm) an error message quotes.
pub(super) const WORD_CHARS: usize = 16;

/// The longest domain or descriptor key an error message quotes.
pub(super) const PATH_CHARS: usize = 64;

/// A string from a config file, as error messages show it: as written when
/// it has at most `max_chars` name characters (a unit, a key, a domain),
/// otherwise only by its length. A file that is not a rule file (a key
/// file behind a symlink, say) must not be echoed into the logs.
pub(super) fn shown(text: &str, max_chars: usize) -> String {
    let chars = text.chars().count();
    let name_like = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./*".contains(c));
    if chars <= max_chars && name_like && !text.is_empty() {
        text.to_owned()
    } else {
        format!("a string of {chars} characters")
    }
}

/// [`shown`], quoted when it is the text itself.
pub(super) fn quoted(text: &str, max_chars: usize) -> String {
    let shown = shown(text, max_chars);
    if shown == text {
        format!("'{text}'")
    } else {
        shown
    }
}
