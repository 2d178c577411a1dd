//! How much one request may ask of the service: descriptors per Envoy
//! check, entries per descriptor, and the largest ad-hoc limit and window.
//! Each bound has a `slidegate serve` flag, and a request beyond one is
//! refused before any work with a message naming the bound and its flag.
//!
//! Configured rules are exempt from the ad-hoc bounds: they come from the
//! operator, not from a client.

use std::time::Duration;

/// The bounds the service enforces on every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestBounds {
    /// Most descriptors in one gRPC `ShouldRateLimit` or `POST /v1/check`.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_descriptor_entries: usize,
    /// Largest limit of an ad-hoc rule (`POST /v1/acquire`, `GET /v1/keys`).
    pub max_adhoc_limit: u64,
    /// Longest window of an ad-hoc rule.
    pub max_adhoc_window: Duration,
}

impl RequestBounds {
    /// `--max-descriptors`' default: far more than any Envoy route sends
    /// (one descriptor per `rate_limits` entry).
    pub const MAX_DESCRIPTORS: usize = 64;
    /// `--max-descriptor-entries`' default (one entry per action).
    pub const MAX_DESCRIPTOR_ENTRIES: usize = 16;
    /// `--max-adhoc-limit`'s default.
    pub const MAX_ADHOC_LIMIT: u64 = 1_000_000;
    /// `--max-adhoc-window`'s default: one day.
    pub const MAX_ADHOC_WINDOW: Duration = Duration::from_secs(86_400);

    /// Checks the shape of an Envoy check before it is read any further:
    /// `entries` gives each descriptor's number of entries.
    pub fn check_descriptors(
        &self,
        descriptors: usize,
        mut entries: impl Iterator<Item = usize>,
    ) -> Result<(), OutOfBounds> {
        if descriptors > self.max_descriptors {
            return Err(OutOfBounds::Descriptors {
                got: descriptors,
                max: self.max_descriptors,
            });
        }
        match entries.position(|n| n > self.max_descriptor_entries) {
            Some(index) => Err(OutOfBounds::Entries {
                index,
                max: self.max_descriptor_entries,
            }),
            None => Ok(()),
        }
    }
}

impl Default for RequestBounds {
    fn default() -> RequestBounds {
        RequestBounds {
            max_descriptors: RequestBounds::MAX_DESCRIPTORS,
            max_descriptor_entries: RequestBounds::MAX_DESCRIPTOR_ENTRIES,
            max_adhoc_limit: RequestBounds::MAX_ADHOC_LIMIT,
            max_adhoc_window: RequestBounds::MAX_ADHOC_WINDOW,
        }
    }
}

/// An Envoy check larger than the bounds allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutOfBounds {
    /// Too many descriptors.
    #[error("the request has {got} descriptors; at most {max} are allowed (--max-descriptors)")]
    Descriptors {
        /// Descriptors in the request.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// A descriptor with too many entries.
    #[error("descriptor {index} has more than {max} entries (--max-descriptor-entries)")]
    Entries {
        /// The first descriptor over the bound.
        index: usize,
        /// The bound.
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_entries_are_counted_against_their_flags() {
        let bounds = RequestBounds {
            max_descriptors: 2,
            max_descriptor_entries: 3,
            ..RequestBounds::default()
        };
        assert_eq!(bounds.check_descriptors(2, [3, 1].into_iter()), Ok(()));
        let many = bounds.check_descriptors(3, [1, 1, 1].into_iter());
        assert_eq!(many, Err(OutOfBounds::Descriptors { got: 3, max: 2 }));
        assert!(many.unwrap_err().to_string().contains("--max-descriptors"));
        let wide = bounds.check_descriptors(2, [1, 4].into_iter());
        assert_eq!(wide, Err(OutOfBounds::Entries { index: 1, max: 3 }));
        assert!(
            wide.unwrap_err()
                .to_string()
                .contains("--max-descriptor-entries")
        );
    }
}
