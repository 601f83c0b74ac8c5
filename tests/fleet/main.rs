//! The daemon among other machines: journald, notifiers, approving over SSH.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;

mod fleet_journald;
mod fleet_notify;
mod fleet_ssh;
