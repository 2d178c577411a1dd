//! A circuit breaker: after repeated failures, stop calling the store and
//! let one probe through now and then until it answers again.
//!
//! Every call holds a [`Permit`] until it has a verdict. A permit dropped
//! without one (the caller's future was dropped: a client that reset its
//! HTTP/2 stream, a proxy that gave up before the store deadline) never
//! leaves the breaker waiting for a verdict that cannot come:
//!
//! - dropped **before** the call's deadline, it is no verdict at all. A
//!   probe is given back and the circuit stays open for one more cool-down
//!   (not doubled: the store did not fail, the caller left), after which
//!   the next call probes;
//! - dropped **at or after** the deadline, it is a failure: the store did
//!   not answer in time, whoever stopped waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::decision::micros;

/// What a permit lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Closed: call the store.
    Call,
    /// Half open: this call is the probe.
    Probe,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    /// What the breaker guards, for logs and metrics: `store`, or a Redis
    /// Cluster node's address.
    name: Arc<str>,
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

/// The settings every breaker of one store shares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) threshold: u32,
    pub(crate) min_cooldown: Duration,
    pub(crate) max_cooldown: Duration,
}

impl Breaker {
    pub(crate) fn new(name: impl Into<Arc<str>>, settings: Settings) -> Breaker {
        let breaker = Breaker {
            name: name.into(),
            origin: Instant::now(),
            threshold: settings.threshold.max(1),
            min_cooldown: settings.min_cooldown,
            max_cooldown: settings.max_cooldown.max(settings.min_cooldown),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            cooldown_us: AtomicU64::new(micros(settings.min_cooldown)),
            probing: AtomicBool::new(false),
        };
        breaker.report(false);
        breaker
    }

    /// The name given at creation.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn now(&self) -> u64 {
        micros(self.origin.elapsed()).max(1)
    }

    /// A permit for a call whose verdict is due by `deadline`, or `None`
    /// while the circuit is open (or another call is the probe).
    pub(crate) fn permit(self: &Arc<Self>, deadline: Instant) -> Option<Permit> {
        let kind = self.admit()?;
        Some(Permit {
            breaker: Arc::clone(self),
            kind,
            deadline,
            settled: false,
        })
    }

    fn admit(&self) -> Option<Kind> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Some(Kind::Call);
        }
        if self.now() < open_until {
            return None;
        }
        self.probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then_some(Kind::Probe)
    }

    /// True when a call asking now would be refused (open and cooling
    /// down, or probed by another call), without taking a permit.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn refuses(&self) -> bool {
        let open_until = self.open_until.load(Ordering::Acquire);
        open_until != 0 && (self.now() < open_until || self.probing.load(Ordering::Acquire))
    }

    /// True while calls are refused (for readiness reports).
    pub(crate) fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    fn success(&self) {
        self.failures.store(0, Ordering::Release);
        if self.open_until.swap(0, Ordering::AcqRel) != 0 {
            tracing::info!(
                node = %self.name,
                state = "closed",
                "store answers again: circuit closed"
            );
            self.report(false);
        }
        self.cooldown_us
            .store(micros(self.min_cooldown), Ordering::Release);
        self.probing.store(false, Ordering::Release);
    }

    fn failure(&self, kind: Kind) {
        match kind {
            Kind::Probe => {
                // Still down: open again, for longer.
                let cooldown = self.cooldown_us.load(Ordering::Acquire);
                let next = (cooldown * 2).min(micros(self.max_cooldown));
                self.cooldown_us.store(next, Ordering::Release);
                self.open_until.store(self.now() + next, Ordering::Release);
                self.probing.store(false, Ordering::Release);
                tracing::debug!(
                    node = %self.name,
                    state = "open",
                    cooldown_ms = next / 1_000,
                    "probe failed: circuit stays open"
                );
            }
            Kind::Call => {
                let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                if failures >= self.threshold && self.open_until.load(Ordering::Acquire) == 0 {
                    let cooldown = self.cooldown_us.load(Ordering::Acquire);
                    self.open_until
                        .store(self.now() + cooldown, Ordering::Release);
                    tracing::warn!(
                        node = %self.name,
                        state = "open",
                        failures,
                        cooldown_ms = cooldown / 1_000,
                        "store failing: circuit open, deciding by policy"
                    );
                    self.report(true);
                }
            }
        }
    }

    /// A probe whose caller left before its deadline: the store gave no
    /// verdict. Another probe may go after one more cool-down.
    fn abandon(&self, kind: Kind) {
        if kind == Kind::Probe {
            let cooldown = self.cooldown_us.load(Ordering::Acquire);
            self.open_until
                .store(self.now() + cooldown, Ordering::Release);
            self.probing.store(false, Ordering::Release);
        }
    }

    /// A permit given back before any call was made.
    fn release(&self, kind: Kind) {
        if kind == Kind::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    fn report(&self, open: bool) {
        metrics::gauge!("slidegate_store_circuit_open", "node" => self.name.to_string())
            .set(if open { 1.0 } else { 0.0 });
    }
}

/// Leave to call the store, held until the call's verdict. See the
/// [module documentation](self) for what dropping it without one means.
#[derive(Debug)]
#[must_use = "a permit is a verdict waiting to be given"]
pub(crate) struct Permit {
    breaker: Arc<Breaker>,
    kind: Kind,
    deadline: Instant,
    settled: bool,
}

impl Permit {
    /// The store answered (possibly that the request was bad).
    pub(crate) fn success(mut self) {
        self.settled = true;
        self.breaker.success();
    }

    /// The store failed or did not answer in time.
    pub(crate) fn failure(mut self) {
        self.settled = true;
        self.breaker.failure(self.kind);
    }

    /// No call was made after all (not the store's doing): leave the
    /// breaker as it is, and let a waiting probe go again at once.
    pub(crate) fn release(mut self) {
        self.settled = true;
        self.breaker.release(self.kind);
    }

    /// True when this call is the probe of an open circuit.
    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.kind == Kind::Probe
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if Instant::now() >= self.deadline {
            self.breaker.failure(self.kind);
        } else {
            self.breaker.abandon(self.kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cool-downs of 200 ms, not 20: a refusal is asserted up to 150 ms
    /// before one ends, a margin a loaded machine's stall of 15 ms used up.
    fn breaker(threshold: u32, min_ms: u64, max_ms: u64) -> Arc<Breaker> {
        Arc::new(Breaker::new(
            "store",
            Settings {
                threshold,
                min_cooldown: Duration::from_millis(min_ms),
                max_cooldown: Duration::from_millis(max_ms),
            },
        ))
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn opens_after_the_threshold_and_probes_after_the_cooldown() {
        let b = breaker(3, 200, 800);
        for _ in 0..2 {
            let p = b.permit(later()).expect("closed");
            assert!(!p.is_probe());
            p.failure();
        }
        assert!(!b.is_open());
        b.permit(later()).expect("closed").failure();
        assert!(b.is_open());
        assert!(b.permit(later()).is_none());
        std::thread::sleep(Duration::from_millis(250));
        let probe = b.permit(later()).expect("a probe");
        assert!(probe.is_probe());
        assert!(b.permit(later()).is_none(), "one probe at a time");
        probe.failure();
        std::thread::sleep(Duration::from_millis(250));
        assert!(b.permit(later()).is_none(), "the cooldown doubled");
        std::thread::sleep(Duration::from_millis(250));
        let probe = b.permit(later()).expect("a probe");
        probe.success();
        assert!(!b.is_open());
        assert!(!b.permit(later()).expect("closed").is_probe());
    }

    fn opened(b: &Arc<Breaker>) {
        b.permit(later()).expect("closed").failure();
        assert!(b.is_open());
    }

    #[test]
    fn a_probe_dropped_before_its_deadline_lets_another_probe_go_after_one_cooldown() {
        let b = breaker(1, 200, 10_000);
        opened(&b);
        std::thread::sleep(Duration::from_millis(250));
        let probe = b.permit(later()).expect("a probe");
        drop(probe);
        assert!(b.is_open(), "no verdict: still open");
        assert!(b.permit(later()).is_none(), "one more cooldown first");
        std::thread::sleep(Duration::from_millis(250));
        // Not doubled: the store did not fail.
        let probe = b.permit(later()).expect("probing again after one cooldown");
        probe.success();
        assert!(!b.is_open());
    }

    #[test]
    fn a_probe_dropped_after_its_deadline_is_a_failure() {
        let b = breaker(1, 200, 10_000);
        opened(&b);
        std::thread::sleep(Duration::from_millis(250));
        let probe = b.permit(Instant::now()).expect("a probe");
        drop(probe);
        std::thread::sleep(Duration::from_millis(250));
        assert!(
            b.permit(later()).is_none(),
            "the cooldown doubled to 400 ms"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(b.permit(later()).is_some());
    }

    #[test]
    fn a_call_dropped_after_its_deadline_counts_toward_the_threshold() {
        let b = breaker(2, 200, 10_000);
        drop(b.permit(Instant::now()).expect("closed"));
        drop(b.permit(later()).expect("closed"));
        assert!(!b.is_open(), "one failure, one call without a verdict");
        drop(b.permit(Instant::now()).expect("closed"));
        assert!(b.is_open());
    }

    #[test]
    fn a_released_probe_may_go_again_at_once() {
        let b = breaker(1, 200, 10_000);
        opened(&b);
        std::thread::sleep(Duration::from_millis(250));
        b.permit(later()).expect("a probe").release();
        assert!(!b.refuses());
        assert!(b.permit(later()).expect("a probe again").is_probe());
    }
}
