//! What a passed request holds until its response body ends: a place
//! under an in-flight limit, a reserved budget; and [`ReportedCost`], how
//! a handler says what its work really cost.
//!
//! A hold is settled by a task of its own when it is dropped (a drop
//! cannot wait for the store), so it is settled on every path a request
//! can end by: the body's end, the body dropped (the client left), the
//! inner service's error, a panic (the guard drops while unwinding), the
//! response future dropped. A holder that dies without any of these (the
//! process killed) is settled by the store when the lease's time runs
//! out: places are freed, a budget is charged in full.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::store::contract::Store;

/// What a handler reports its work cost, for a layer that
/// [reserved an estimate](super::RateLimitBuilder::reserve_and_commit):
/// the layer commits it when the response body ends (or is dropped).
///
/// The layer puts one in each request's extensions (in axum,
/// `Extension<ReportedCost>`); a handler may also put one in its
/// response's extensions, which the layer then reads instead. Clones
/// share the count, so a streamed body can [`add`](Self::add) what each
/// chunk cost while it is produced.
#[derive(Clone, Default)]
pub struct ReportedCost {
    shared: Arc<Reported>,
}

#[derive(Default)]
struct Reported {
    /// Set once anything was reported: 0 reported is not "nothing said".
    said: AtomicBool,
    cost: AtomicU64,
}

impl ReportedCost {
    /// A handle with nothing reported yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports `cost` as the whole cost.
    pub fn set(&self, cost: u64) {
        self.shared.cost.store(cost, Ordering::Relaxed);
        self.shared.said.store(true, Ordering::Release);
    }

    /// Adds `cost` to what was reported (saturating).
    pub fn add(&self, cost: u64) {
        // fetch_update never fails with a closure that always answers.
        let _ = self
            .shared
            .cost
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(cost))
            });
        self.shared.said.store(true, Ordering::Release);
    }

    /// What was reported, or `None` when nothing was.
    pub fn get(&self) -> Option<u64> {
        self.shared
            .said
            .load(Ordering::Acquire)
            .then(|| self.shared.cost.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for ReportedCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReportedCost").field(&self.get()).finish()
    }
}

/// How a lease is settled.
enum Settle {
    Commit(u64),
    Release,
}

type Settler = Box<dyn FnOnce(Settle) + Send>;

/// A settler of the lease `id` of `key` in the store `get(&handle)`.
fn settler<H, St>(handle: H, get: fn(&H) -> &St, id: String, key: String) -> Settler
where
    H: Send + Sync + 'static,
    St: Store + 'static,
{
    Box::new(move |settle| {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to settle on: the lease's time settles it.
            return;
        };
        runtime.spawn(async move {
            let store = get(&handle);
            let settled = match settle {
                Settle::Commit(cost) => store.commit(&id, Some(&key), cost).await,
                Settle::Release => store.release(&id, Some(&key)).await,
            };
            // Expired meanwhile (then charged in full or freed already),
            // or the store is down (then its time settles it).
            if let Err(error) = settled {
                tracing::debug!(%error, "a held lease could not be settled");
            }
        });
    })
}

/// A place under a concurrency rule, released when dropped.
pub(crate) struct Place {
    settle: Option<Settler>,
}

impl Place {
    /// The place of the lease `id` of `key`, held in `get(&handle)`.
    pub(crate) fn new<H, St>(handle: H, get: fn(&H) -> &St, id: String, key: String) -> Place
    where
        H: Send + Sync + 'static,
        St: Store + 'static,
    {
        Place {
            settle: Some(settler(handle, get, id, key)),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            settle(Settle::Release);
        }
    }
}

/// A reserved budget: when dropped, commits what was reported, or the
/// estimate when nothing was (the work may have been done: a panic, a
/// client gone mid-stream, a future dropped never turn a cost into 0).
pub(crate) struct Budget {
    settle: Option<Settler>,
    estimate: u64,
    reported: ReportedCost,
}

impl Budget {
    /// The budget of the lease `id` of `key` in `get(&handle)`, reserved
    /// for `estimate`, settled with what `reported` says.
    pub(crate) fn new<H, St>(
        handle: H,
        get: fn(&H) -> &St,
        id: String,
        key: String,
        estimate: u64,
        reported: ReportedCost,
    ) -> Budget
    where
        H: Send + Sync + 'static,
        St: Store + 'static,
    {
        Budget {
            settle: Some(settler(handle, get, id, key)),
            estimate,
            reported,
        }
    }

    fn settle(&mut self, nothing_said: Settle) {
        if let Some(settle) = self.settle.take() {
            settle(match self.reported.get() {
                // A cost of 0 is the whole reservation given back.
                Some(0) => Settle::Release,
                Some(cost) => Settle::Commit(cost),
                None => nothing_said,
            });
        }
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        let estimate = self.estimate;
        self.settle(Settle::Commit(estimate));
    }
}

/// What a passed request holds until its response body ends or is
/// dropped, whatever the path (an error, a panic, a client gone): made by
/// the layers, given to
/// [`RejectionBody::hold`](super::RejectionBody::hold).
#[derive(Default)]
pub struct Holding {
    pub(crate) place: Option<Place>,
    pub(crate) budget: Option<Budget>,
}

impl Holding {
    /// The inner service failed before a response: a budget is given
    /// back whole, unless the handler reported a cost (then that is
    /// committed); a place is released.
    pub(crate) fn failed(mut self) {
        if let Some(budget) = &mut self.budget {
            budget.settle(Settle::Release);
        }
    }

    /// Reads the handler's report from its response's extensions, when it
    /// put one there.
    pub(crate) fn read_report(&mut self, extensions: &http::Extensions) {
        if let (Some(budget), Some(reported)) = (&mut self.budget, extensions.get::<ReportedCost>())
        {
            budget.reported = reported.clone();
        }
    }

    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.place.is_none() && self.budget.is_none()
    }
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("place", &self.place.is_some())
            .field("budget", &self.budget.as_ref().map(|b| b.estimate))
            .finish()
    }
}

pin_project! {
    /// A response body that holds its request's place or budget until it
    /// ends or is dropped.
    pub struct HeldBody<B> {
        #[pin]
        inner: B,
        holding: Option<Holding>,
    }
}

impl<B> HeldBody<B> {
    /// `inner`, holding `holding` until it ends.
    pub(crate) fn new(inner: B, holding: Holding) -> Self {
        HeldBody {
            inner,
            holding: (!holding.is_empty()).then_some(holding),
        }
    }
}

impl<B: Body> Body for HeldBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            // The body ended: settled now, not when the connection gets
            // round to dropping the body.
            this.holding.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for HeldBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldBody")
            .field("holding", &self.holding)
            .finish_non_exhaustive()
    }
}
