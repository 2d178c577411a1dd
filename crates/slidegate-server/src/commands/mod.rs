//! The commands of the `slidegate` binary.

pub mod bench;
pub mod check;
pub mod parts;
pub mod serve;
