//! All-or-nothing decisions over keys in several Redis Cluster slots.
//!
//! One script call is atomic within one slot only. A batch whose keys live
//! in several slots (the descriptors of one Envoy request, each its own
//! hash tag) is decided slot by slot, in slot order, and made
//! all-or-nothing by compensation:
//!
//! 1. **Record, one slot at a time.** One call per slot decides its hits
//!    and, when they all pass, records them and writes a *journal* in that
//!    slot: per state, what it added (see `main.lua`). The next slot is
//!    asked only once the previous one has recorded; the first slot that
//!    denies stops the decision, and the slots after it are only checked
//!    (nothing recorded) to report their state.
//! 2. **Undo.** When a slot denies, or a call fails or times out, every
//!    slot that recorded, or may have (a call that timed out may still
//!    run), is undone: one call per slot takes back exactly what its
//!    journal says, if it is still there, and leaves a tombstone in its
//!    place. The undo therefore happens at most once however often it is
//!    sent, so it is retried until it succeeds (within the journal's
//!    lifetime, [`JOURNAL_LIFETIME`]), and a record call that reaches Redis
//!    after its undo records nothing.
//! 3. **Whatever the caller does.** An undo runs in a task of its own: a
//!    caller's future dropped half-way (a client that reset its stream, a
//!    deadline) still undoes what was recorded. A denial waits for its
//!    undo, so once it is answered it has left no charge; a failure does
//!    not wait (the node may be down) and is undone in the background.
//!
//! Concurrent decisions may meanwhile see the charge of one that is about
//! to be undone, and be denied when they would have passed: an
//! over-denial, bounded by the time an undo takes. Never an
//! over-admission: an undo only ever takes back what its own decision
//! added, and never more than is still counted. Per algorithm (the Lua
//! `undo` of each):
//!
//! - **Sliding log**: the cost leaves the record made at the decision's
//!   time (and the running totals after it), if that record is still in
//!   the log. Exactly that admission disappears; no other changes.
//! - **Fixed window, sliding counter**: counts add up, so the cost is
//!   subtracted from the window it was counted in (the previous count once
//!   the window has moved on by one; nothing once older). Exact.
//! - **GCRA**: subtracting the cost's emission intervals `a = c·W/L` from
//!   the TAT would over-admit once the meter drained meanwhile (admitted
//!   at t on an empty meter, then another request at t + a/2: without the
//!   first, the TAT would be t + a/2 + a; with it and the naive undo,
//!   t + a). The undo subtracts `d = max(0, a − (u − t))` instead, `u`
//!   the undo's time: what is left of the charge. Proof that the TAT never
//!   falls below that of the same history without the undone admission:
//!   admissions act as `x ↦ max(x, tₖ) + aₖ`, undos as `x ↦ x − dⱼ`, both
//!   monotone. Let P be the admissions not undone yet (including this
//!   one, R, at t with cost a). Invariant: the stored TAT is at least the
//!   TAT of P's admissions alone, G(x) after R's, which holds initially
//!   and through every admission (the same monotone map on both sides).
//!   With x the TAT before R in P: with R, the TAT at u is
//!   `G(max(x, t) + a) ≥ max(x, t) + a + A` (A: the admissions after R;
//!   each adds at least its own aₖ); without R it is
//!   `G(x) ≤ max(x, u) + A` (no admission after R came after u, so none
//!   restarts the meter above u + A). Their difference is at least
//!   `max(x, t) + a − max(x, u) ≥ a − (u − t)`: subtracting d keeps the
//!   stored TAT above the TAT of P without R, and the invariant holds for
//!   the next undo. Both times are on one clock: Redis' (the slot's
//!   master), or the caller's, which makes both calls.
//!
//! What an undo cannot know: a `reset` of the key between the record and
//! its undo (the undo may then take the cost from admissions made after
//! the reset, once), or, with a client clock, a record made in the same
//! microsecond after such a reset. Resets are admin operations; the
//! documentation says so.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::inner::Inner;
use super::keys::{journal_key, slot_of};
use super::plan::{JOURNAL_LIFETIME, Plan, Step};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::rate::Rule;
use crate::store::hit::Hit;
use crate::store::resilient::gate;

/// How long an undo is retried: well within the journal's lifetime.
const UNDO_PATIENCE: Duration = Duration::from_millis(1_500);
const _: () = assert!(UNDO_PATIENCE.as_millis() < JOURNAL_LIFETIME.as_millis());
/// The first pause between two tries of an undo; it doubles.
const UNDO_FIRST_PAUSE: Duration = Duration::from_millis(20);

/// The hits of one slot: their places in the batch, the hits themselves
/// (owned: an undo may outlive its caller), and the journal key of this
/// decision in that slot.
struct Group {
    indices: Vec<usize>,
    hits: Vec<(String, Rule, u64)>,
    journal: String,
}

impl Group {
    fn plan<'a>(&'a self, prefix: &'a str) -> Result<Plan<'a>> {
        Plan::new(
            prefix,
            self.hits.iter().map(|(k, r, c)| (k.as_str(), *r, *c)),
        )
    }

    /// The caller's key of the first hit: it names the slot.
    fn route(&self) -> &str {
        self.hits.first().map_or("", |(key, _, _)| key.as_str())
    }

    fn consumes(&self) -> bool {
        self.hits.iter().any(|&(_, _, cost)| cost > 0)
    }
}

/// Decides `hits` (validated, with keys in at least two slots)
/// all-or-nothing; see the [module documentation](self).
pub(super) async fn decide(inner: &Arc<Inner>, hits: &[Hit<'_>]) -> Result<Vec<Decision>> {
    // The whole batch as one plan first: a sum of costs above a limit is
    // refused before anything is sent.
    Plan::new(&inner.prefix, hits.iter().map(|h| (h.key, h.rule, h.cost)))?;
    let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, hit) in hits.iter().enumerate() {
        slots.entry(slot_of(hit.key)).or_default().push(i);
    }
    let mut groups = Vec::with_capacity(slots.len());
    for indices in slots.into_values() {
        let own: Vec<(String, Rule, u64)> = indices
            .iter()
            .map(|&i| (hits[i].key.to_owned(), hits[i].rule, hits[i].cost))
            .collect();
        let journal = journal_key(&inner.prefix, &own[0].0, &token());
        groups.push(Arc::new(Group {
            indices,
            hits: own,
            journal,
        }));
    }
    // A slot whose node's circuit is open would fail half-way: refuse now.
    for group in &groups {
        if let Some(node) = inner.node_of(group.route())
            && gate::refuses(&node)
        {
            return Err(gate::refusal(&node));
        }
    }

    let mut undo = Compensation {
        inner: Arc::clone(inner),
        groups: groups.clone(),
        armed: vec![false; groups.len()],
    };
    let mut decisions: Vec<Option<Decision>> = vec![None; hits.len()];
    for (g, group) in groups.iter().enumerate() {
        let plan = group.plan(&inner.prefix)?;
        // From here on the call may run, even if this future is dropped.
        undo.armed[g] = group.consumes();
        match inner
            .run(
                &plan,
                Some((Step::Record, &group.journal)),
                |plan, reply| plan.decisions(reply),
            )
            .await
        {
            Ok(answers) => {
                let passed = answers.iter().all(Decision::allowed);
                place(&mut decisions, group, answers);
                if !passed {
                    // Nothing was recorded in this slot.
                    undo.armed[g] = false;
                    return undo.deny(g, decisions).await;
                }
            }
            Err(error) => {
                if matches!(error, Error::KeyConflict { .. } | Error::CircuitOpen { .. }) {
                    // Refused before anything was written.
                    undo.armed[g] = false;
                }
                // `undo` undoes the rest in the background when dropped.
                return Err(error);
            }
        }
    }
    undo.armed.fill(false);
    decisions
        .into_iter()
        .map(|d| d.ok_or(Error::NoRules))
        .collect()
}

fn place(
    decisions: &mut [Option<Decision>],
    group: &Group,
    answers: impl IntoIterator<Item = Decision>,
) {
    for (&i, decision) in group.indices.iter().zip(answers) {
        decisions[i] = Some(decision);
    }
}

/// The slots of one decision that recorded, or may have: undone in tasks
/// of their own when this is dropped armed.
struct Compensation {
    inner: Arc<Inner>,
    groups: Vec<Arc<Group>>,
    armed: Vec<bool>,
}

impl Compensation {
    /// Slot `denied` denied: undoes the slots before it and checks those
    /// after it, all at once, and answers with the state each reports.
    async fn deny(
        &mut self,
        denied: usize,
        mut decisions: Vec<Option<Decision>>,
    ) -> Result<Vec<Decision>> {
        let mut reports = Vec::with_capacity(self.groups.len());
        for (g, group) in self.groups.iter().enumerate() {
            if g == denied {
                continue;
            }
            let step = if std::mem::take(&mut self.armed[g]) {
                Step::Undo
            } else {
                Step::Check
            };
            reports.push((g, spawn_step(&self.inner, group, step)));
        }
        for (g, task) in reports {
            let answers = match task {
                Some(task) => task
                    .await
                    .map_err(|e| Error::Store(format!("a cross-slot step failed: {e}")))??,
                None => return Err(Error::Store("no tokio runtime to run an undo on".into())),
            };
            place(&mut decisions, &self.groups[g], answers);
        }
        decisions
            .into_iter()
            .map(|d| d.ok_or(Error::NoRules))
            .collect()
    }
}

impl Drop for Compensation {
    fn drop(&mut self) {
        for (g, group) in self.groups.iter().enumerate() {
            if std::mem::take(&mut self.armed[g])
                && spawn_step(&self.inner, group, Step::Undo).is_none()
            {
                tracing::warn!("no tokio runtime to undo a cross-slot decision on");
            }
        }
    }
}

/// Runs `step` on `group` in a task of its own (an undo must outlive its
/// caller), an undo with retries; `None` outside a tokio runtime.
fn spawn_step(
    inner: &Arc<Inner>,
    group: &Arc<Group>,
    step: Step,
) -> Option<tokio::task::JoinHandle<Result<Vec<Decision>>>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (inner, group) = (Arc::clone(inner), Arc::clone(group));
    Some(runtime.spawn(async move {
        let started = Instant::now();
        let mut pause = UNDO_FIRST_PAUSE;
        let plan = group.plan(&inner.prefix)?;
        loop {
            let result = inner
                .run_unguarded(&plan, Some((step, &group.journal)), |plan, reply| plan.decisions(reply))
                .await;
            match result {
                Err(error)
                    if step == Step::Undo
                        && error.is_store_failure()
                        && started.elapsed() + pause < UNDO_PATIENCE =>
                {
                    tracing::debug!(%error, "cross-slot undo failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(error) if step == Step::Undo => {
                    tracing::warn!(
                        %error,
                        key = %plan.first_redis_key(),
                        "cross-slot undo gave up: a denied decision stays charged until its window passes"
                    );
                    return Err(error);
                }
                other => return other.map(SmallVec::into_vec),
            }
        }
    }))
}

/// A token naming one decision's journal in one slot: unique among the
/// decisions of every process within a journal's lifetime (64 random bits
/// per process, a counter within it).
fn token() -> String {
    static SEED: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = SEED.get_or_init(std::hash::RandomState::new).build_hasher();
    hasher.write_u32(std::process::id());
    let seed = hasher.finish();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{seed:016x}{n:x}")
}
