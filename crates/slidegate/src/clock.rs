//! Time as a trait: stores read a [`Clock`], tests move a [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of "now" in whole microseconds.
///
/// Algorithms never read a clock themselves; stores read one and pass the
/// time in. Only differences between readings matter, except for
/// [`SystemClock`], whose readings are Unix time and are shared by every
/// process that uses it.
pub trait Clock: Send + Sync + 'static {
    /// The current time in microseconds since this clock's origin.
    fn now_micros(&self) -> u64;
}

/// A fast monotonic clock (the CPU's time stamp counter through `quanta`
/// where it is invariant, the OS monotonic clock otherwise), counting from
/// the moment it was created. The memory store's default.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// Creates the clock. The first one in a process calibrates the time
    /// stamp counter, which can take a few milliseconds.
    pub fn new() -> MonotonicClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_micros(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw()) / 1_000
    }
}

/// Wall-clock time: microseconds since the Unix epoch. Use it when several
/// processes must agree on time without Redis' clock (Redis store with
/// `clock = client`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for tests and simulations.
/// Clones share the same time.
///
/// ```
/// use slidegate::clock::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now_micros(), 5_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at 0.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// A clock standing at `micros`.
    pub fn at(micros: u64) -> ManualClock {
        let clock = ManualClock::new();
        clock.set(micros);
        clock
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.now.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets the clock, forward or backward.
    pub fn set(&self, micros: u64) {
        self.now.store(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_micros(&self) -> u64 {
        (**self).now_micros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_moves_forward() {
        let clock = MonotonicClock::new();
        let a = clock.now_micros();
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now_micros();
        assert!(b >= a + 1_000, "{a} -> {b}");
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::at(10);
        let b = a.clone();
        a.advance(Duration::from_micros(5));
        assert_eq!(b.now_micros(), 15);
        b.set(3);
        assert_eq!(a.now_micros(), 3);
    }

    #[test]
    fn system_clock_is_unix_time() {
        // 2020-01-01 in microseconds: any real clock is past it.
        assert!(SystemClock.now_micros() > 1_577_836_800_000_000);
    }
}
