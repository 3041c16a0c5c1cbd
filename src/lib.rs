//! shellbox: fresh, isolated machines behind one async trait.
pub use shellbox_core::*;
