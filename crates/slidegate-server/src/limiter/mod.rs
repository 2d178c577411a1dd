//! The decisions: Envoy's check against the rules, and ad-hoc decisions.

pub mod adhoc;
pub mod check;
