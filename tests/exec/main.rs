//! `verbd exec`: the launcher, its brokers and what ordinary tools need under it.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;

mod exec_base;
mod exec_git;
mod exec_git_outside;
mod exec_git_plants;
mod exec_listing;
mod exec_metadata;
mod exec_metadata_read_roots;
mod exec_protected;
mod exec_sockets;
mod exec_wrapper;
mod terminal_injection;
mod xattr;
