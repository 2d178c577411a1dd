//! A clock move of the property tests that lands exactly on a window
//! boundary, where fixed windows and sliding counters roll over: moving by
//! whole windows only lands there from a start on a boundary.

/// The first multiple of `window` after `now`, moved by `delta` µs (-1, 0
/// or +1): never before `now`.
pub fn next_boundary(now: u64, window: u64, delta: i8) -> u64 {
    (now - now % window + window).saturating_add_signed(i64::from(delta))
}
