//! The proposal book and the approval path: invariants 4, 6 and 9, quorum, guards, re-checks.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;

mod approvals;
mod approvals_guards;
mod approvals_quorum;
mod approvals_recheck;
mod core_state;
mod state_machine;
