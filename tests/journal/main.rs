//! The journal and the audit commands on real files and a real daemon.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;

mod audit;
mod audit_follow;
mod durability_faults;
mod journal;
mod journal_hostile;
mod journal_seal;
