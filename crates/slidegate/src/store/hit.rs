//! A hit: one part of an atomic batch.

use crate::rate::Rule;

/// One part of an atomic batch: `cost` units of `rule` for `key`.
///
/// A batch passes only if every hit passes; then all are recorded,
/// otherwise none. A cost of 0 consumes nothing and asks whether one more
/// would pass: it is denied on a full window.
#[derive(Debug, PartialEq, Eq)]
pub struct Hit<'a, Q: ?Sized = str> {
    /// The key the rule applies to (`"login:10.0.0.1"`).
    pub key: &'a Q,
    /// The rule.
    pub rule: Rule,
    /// The cost: 1 for one request, 0 to check without consuming.
    pub cost: u64,
}

// By hand: derived impls would ask `Q: Copy`, which `str` is not.
impl<Q: ?Sized> Clone for Hit<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q: ?Sized> Copy for Hit<'_, Q> {}

impl<'a, Q: ?Sized> Hit<'a, Q> {
    /// A hit of `cost` units of `rule` for `key`.
    pub fn new(key: &'a Q, rule: Rule, cost: u64) -> Self {
        Hit { key, rule, cost }
    }
}
