//! What a verb run by the daemon can reach: profiles, paths, files, sockets, the spawner.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;

mod connect_hub;
mod daemon_confinement;
mod file_leases;
mod files;
mod files_symlinks;
mod hostile_paths;
mod net_ports;
mod private_paths;
mod privileged_nofollow;
mod protected_names;
mod sandbox_why;
mod selftest_programs;
mod spawner;
mod write_roots;
