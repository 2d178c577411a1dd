//! Checks read from the wire, handed back once answered, so that the next
//! one read on the same thread is written into their buffers (see
//! [`decode`](super::decode)): the usual check's domain, descriptor list,
//! entry list, key and value are then five allocations fewer per call.
//!
//! Only small checks are kept, and only a few per thread: a client's large
//! request is dropped once answered, never held.

use std::cell::RefCell;

use crate::limiter::check::CheckRequest;

/// Most checks kept per thread.
const KEPT_PER_THREAD: usize = 8;
/// Room for descriptors, and for entries in each, of a check kept.
const MAX_DESCRIPTORS: usize = 4;
const MAX_ENTRIES: usize = 8;
/// Room for the bytes of all its strings.
const MAX_STRING_BYTES: usize = 1024;

thread_local! {
    static KEPT: RefCell<Vec<CheckRequest>> = const { RefCell::new(Vec::new()) };
}

/// A check handed back on this thread, or a new one; its contents are to
/// be written over.
pub fn take() -> CheckRequest {
    KEPT.try_with(|kept| kept.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Hands `check` back for the next [`take`] on this thread, if it is small
/// and the thread keeps fewer than it may; otherwise drops it.
pub fn give(check: CheckRequest) {
    if !small(&check) {
        return;
    }
    let _ = KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() < KEPT_PER_THREAD {
            kept.push(check);
        }
    });
}

/// Within every room above, counted by what its buffers hold, not by what
/// they are filled with.
fn small(check: &CheckRequest) -> bool {
    if check.descriptors.capacity() > MAX_DESCRIPTORS {
        return false;
    }
    let mut bytes = check.domain.capacity();
    for descriptor in &check.descriptors {
        if descriptor.entries.capacity() > MAX_ENTRIES {
            return false;
        }
        for (key, value) in &descriptor.entries {
            bytes += key.capacity() + value.capacity();
        }
    }
    bytes <= MAX_STRING_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::check::DescriptorRequest;

    fn check(descriptors: usize, entries: usize, value: &str) -> CheckRequest {
        let descriptor = DescriptorRequest {
            entries: vec![("k".to_owned(), value.to_owned()); entries],
            ..DescriptorRequest::default()
        };
        CheckRequest {
            domain: "d".to_owned(),
            descriptors: vec![descriptor; descriptors],
            hits_addend: 1,
        }
    }

    /// A small check is kept and taken back, a few per thread at most;
    /// a large one (by descriptors, entries or bytes) is not kept.
    #[test]
    fn only_a_few_small_checks_are_kept() {
        assert_eq!(take(), CheckRequest::default(), "nothing kept yet");
        for large in [
            check(MAX_DESCRIPTORS + 1, 1, "v"),
            check(1, MAX_ENTRIES + 1, "v"),
            check(1, 1, &"v".repeat(MAX_STRING_BYTES)),
        ] {
            give(large);
            assert_eq!(take(), CheckRequest::default());
        }
        for _ in 0..KEPT_PER_THREAD + 1 {
            give(check(1, 1, "v"));
        }
        for _ in 0..KEPT_PER_THREAD {
            assert_eq!(take(), check(1, 1, "v"));
        }
        assert_eq!(take(), CheckRequest::default(), "at most {KEPT_PER_THREAD}");
    }
}
