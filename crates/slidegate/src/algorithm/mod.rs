//! The five algorithms, each a pure state machine: state + rate + now + cost
//! in, [`Decision`](crate::decision::Decision) out. No I/O, no clock, no locks: stores own those.
//!
//! Every algorithm follows the same protocol, which lets a store decide
//! several rules all-or-nothing:
//!
//! 1. [`Meter::check`] for every rule: what would happen, recording nothing
//!    (it may drop entries that have expired, which changes no answer);
//! 2. if every rule allowed, [`Meter::record`] for every rule.
//!
//! A cost of 0 is a *probe*: would a request of cost 1 pass now? Its
//! decision reports the state without consuming anything.
//!
//! Times are whole microseconds; durations in decisions are measured from
//! the `now` passed in.

pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub(crate) mod log_algorithm;
pub(crate) mod meter;
pub(crate) mod options;
pub mod sliding_counter;
pub mod sliding_log;
pub(crate) mod state;

pub use crate::rate::Algorithm;
pub use concurrency::Concurrency;
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use meter::Meter;
pub use sliding_counter::SlidingCounter;
pub use sliding_log::SlidingLog;
pub use state::State;
