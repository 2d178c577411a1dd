//! Two circles: `ring` → `middle` → `back` → `ring`, and a child needing
//! an item of its parent's own file (`family/child.rs` → `family/mod.rs`).

pub mod back;
pub mod family;
pub mod middle;
pub mod ring;
pub mod standalone;
