//! Changes to a shared store's state made elsewhere, for what keeps copies
//! of its decisions (the [deny cache](super::resilient) of every process).
//!
//! A store shared by several processes (Redis) changes under a process'
//! feet: another process resets a key, and a denial this process
//! remembers no longer holds. Such a store tells the
//! [`ChangeListener`]s handed to [`Store::watch_changes`](super::Store::watch_changes)
//! of every [`Change`] it hears of, and for how long what they hold can be
//! trusted: a listener that stops hearing the feed ([`lost`](ChangeListener::lost),
//! or no [`heard`](ChangeListener::heard) before the trust given runs out)
//! must assume it missed a change.

use std::time::Duration;

use crate::rate::Rule;

/// What changed in a store's state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// Every rule's state of this key (a reset).
    Key(String),
    /// This rule's state, for every key: what counts on a rule of the same
    /// limit, window and algorithm ([`Rule::same_state`]), for instance a
    /// limit changed at run time.
    Rule(Rule),
    /// The limits shared through the store (set, replaced or removed at
    /// run time: see `RedisStore::write_limit`) changed: a process reads
    /// them again, and a denial decided under the old ones may no longer
    /// hold, whatever its key.
    Limits,
    /// Anything: what was heard could not be read, or the store's state
    /// may have changed as a whole.
    All,
}

impl Change {
    /// True when a decision on `key` under `rules` may no longer hold
    /// after this change.
    pub fn touches(&self, key: &str, rules: &[Rule]) -> bool {
        match self {
            Change::Key(changed) => changed == key,
            Change::Rule(changed) => rules.iter().any(|rule| rule.same_state(changed)),
            Change::Limits | Change::All => true,
        }
    }
}

/// Hears of the changes a store's state goes through elsewhere (see the
/// [module documentation](self)). Called from the store's own task: each
/// method must return quickly and never block on I/O.
pub trait ChangeListener: Send + Sync {
    /// `change` happened: what it touches no longer holds.
    fn changed(&self, change: &Change);

    /// Every change made up to now has been told: what the listener holds
    /// can be trusted for `trust_for`, unless told otherwise meanwhile.
    fn heard(&self, trust_for: Duration);

    /// The feed is lost: changes may go unheard until the next
    /// [`heard`](Self::heard), so nothing held can be trusted.
    fn lost(&self);
}
