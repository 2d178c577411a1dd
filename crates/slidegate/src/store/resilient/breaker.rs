//! A circuit breaker: after repeated failures, stop calling the store and
//! let one probe through now and then until it answers again.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the breaker lets a caller do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Closed: call the store.
    Call,
    /// Half open: this call is the probe.
    Probe,
    /// Open: do not call the store.
    Refuse,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    origin: Instant,
    threshold: u32,
    min_cooldown: Duration,
    max_cooldown: Duration,
    failures: AtomicU32,
    /// Microseconds since `origin` until which the breaker is open; 0 = closed.
    open_until: AtomicU64,
    cooldown_us: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, min_cooldown: Duration, max_cooldown: Duration) -> Breaker {
        Breaker {
            origin: Instant::now(),
            threshold: threshold.max(1),
            min_cooldown,
            max_cooldown: max_cooldown.max(min_cooldown),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            cooldown_us: AtomicU64::new(micros(min_cooldown)),
            probing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        micros(self.origin.elapsed()).max(1)
    }

    pub(crate) fn permit(&self) -> Permit {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Permit::Call;
        }
        if self.now() < open_until {
            return Permit::Refuse;
        }
        if self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            Permit::Probe
        } else {
            Permit::Refuse
        }
    }

    /// True while calls are refused (for readiness reports).
    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    pub(crate) fn success(&self, permit: Permit) {
        if permit == Permit::Refuse {
            return;
        }
        self.failures.store(0, Ordering::Release);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!("store answers again: circuit closed");
        }
        self.cooldown_us
            .store(micros(self.min_cooldown), Ordering::Release);
        self.probing.store(false, Ordering::Release);
    }

    /// Gives a probe permit back without a verdict (the call was not made).
    pub(crate) fn success_if_probe(&self, permit: Permit) {
        if permit == Permit::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    pub(crate) fn failure(&self, permit: Permit) {
        match permit {
            Permit::Refuse => {}
            Permit::Probe => {
                // Still down: open again, for longer.
                let cooldown = self.cooldown_us.load(Ordering::Acquire);
                let next = (cooldown * 2).min(micros(self.max_cooldown));
                self.cooldown_us.store(next, Ordering::Release);
                self.open_until.store(self.now() + next, Ordering::Release);
                self.probing.store(false, Ordering::Release);
            }
            Permit::Call => {
                let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                if failures >= self.threshold && self.open_until.load(Ordering::Acquire) == 0 {
                    let cooldown = self.cooldown_us.load(Ordering::Acquire);
                    self.open_until
                        .store(self.now() + cooldown, Ordering::Release);
                    tracing::warn!(failures, "store failing: circuit open, deciding by policy");
                }
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_and_probes_after_the_cooldown() {
        let b = Breaker::new(3, Duration::from_millis(20), Duration::from_millis(80));
        for _ in 0..2 {
            let p = b.permit();
            assert_eq!(p, Permit::Call);
            b.failure(p);
        }
        assert!(!b.is_open());
        b.failure(b.permit());
        assert!(b.is_open());
        assert_eq!(b.permit(), Permit::Refuse);
        std::thread::sleep(Duration::from_millis(25));
        let probe = b.permit();
        assert_eq!(probe, Permit::Probe);
        assert_eq!(b.permit(), Permit::Refuse, "one probe at a time");
        b.failure(probe);
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.permit(), Permit::Refuse, "the cooldown doubled");
        std::thread::sleep(Duration::from_millis(25));
        let probe = b.permit();
        assert_eq!(probe, Permit::Probe);
        b.success(probe);
        assert!(!b.is_open());
        assert_eq!(b.permit(), Permit::Call);
    }
}
