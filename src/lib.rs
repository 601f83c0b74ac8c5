//! verbd: a privilege-separation broker for AI agents.
//!
//! An agent asks the daemon, over a Unix socket, to run one of a fixed set of verbs declared in a
//! TOML policy. The daemon identifies the caller from the kernel, validates every argument by
//! type, renders the argv itself, asks a human when the verb changes things, runs the binary in a
//! per-call sandbox with credentials only it holds, scrubs the output and journals every step.
//! See DESIGN.md (docs/) for the invariants each module upholds.

pub mod adapters;
pub mod approvals;
pub mod audit;
pub mod client;
pub mod digest;
pub mod exec;
pub mod files;
pub mod journal;
pub mod policy;
pub mod protected;
pub mod protocol;
pub mod sandbox;
pub mod scrub;
pub mod sd;
pub mod secrets;
pub mod selftest;
pub mod server;
