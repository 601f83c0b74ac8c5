//! The thin operating-system layer: calls the logic modules cannot make without `unsafe`, each
//! behind a safe function whose invariants its module states.
//!
//! Invariant: nothing here decides policy; a caller asks for one effect and gets a typed result.

pub mod memory;
