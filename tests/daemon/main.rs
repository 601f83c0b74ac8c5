//! The daemon end to end: calls, parameters, identity, start-up, status, streaming, systemd.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;

mod core_daemon;
mod core_params;
mod daemon_identity;
mod idle_pages;
mod operator_checks;
mod quickstart_user;
mod serve_exits;
mod serve_gate;
mod status;
mod streaming;
mod systemd_units;
