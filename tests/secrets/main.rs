//! Secrets (invariant 7): sources, copies, channels, reload and output scrubbing.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;

mod scrub_oracle;
mod secret_copies;
mod secrets;
mod secrets_channels;
mod secrets_daemon;
mod secrets_reload;
