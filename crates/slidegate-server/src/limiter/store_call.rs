//! One hit asked of the store, as every decision path asks it.

use slidegate::{Decision, Hit, Store};

/// One hit's decision: at once when the store can take it without waiting
/// (the memory store, a cached denial), otherwise awaited in a box of its
/// own. A network store's future is large; held inline, it would make the
/// future of every check as large, and moving it (into the gRPC
/// framework's box, say) would cost every request that much copying.
pub async fn acquire_one<S: Store + ?Sized>(
    store: &S,
    hit: Hit<'_>,
) -> slidegate::Result<Decision> {
    let rules = [hit.rule];
    match store.acquire_now(hit.key, &rules, hit.cost) {
        Some(answer) => answer,
        None => Box::pin(store.acquire(hit.key, &rules, hit.cost)).await,
    }
}
