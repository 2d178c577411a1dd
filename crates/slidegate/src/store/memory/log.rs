//! The sliding log as the memory store keeps it: in the key's slot while
//! it is short, in a ring with its summary in the slot once it is not.
//!
//! Both are storage for the one algorithm of the sliding log
//! (`algorithm/log_algorithm.rs`, over `LogEntries`), so they decide
//! exactly as [`SlidingLog`](crate::algorithm::SlidingLog) does; what
//! differs is where the bytes are:
//!
//! - [`InlineLog`]: up to [`INLINE`] entries inside the slot, each a `u32`
//!   holding its time as a delta from the oldest entry, at the width the
//!   window needs (20 bits for a second), and its cost in the bits left.
//!   A decision on such a key reads one cache line.
//! - [`SpilledLog`]: the oldest and newest times and the usage stay in the
//!   slot, so that a denial of a full key still reads one line; the
//!   entries go to a ring of `u64` (time delta and running total, 32 bits
//!   each) that grows by doubling, never past the limit.
//!
//! A log that no longer fits goes from the slot to a ring; a ring left
//! with few entries comes back into the slot.

pub(crate) use inline::{INLINE, Inline, InlineLog, UNSPILL_AT, inline_cost_bits};
pub(crate) use ring::{Spilled, SpilledLog, ring_fits};

mod inline;
mod ring;
