//! verbd: a privilege-separation broker for AI agents.
//!
//! An agent asks the daemon, over a Unix socket, to run one of a fixed set of verbs declared in a
//! TOML policy. The daemon identifies the caller from the kernel, validates every argument by
//! type, renders the argv itself, asks a human when the verb changes things, runs the binary in a
//! per-call sandbox with credentials only it holds, scrubs the output and journals every step.
//!
//! The README's invariant table names the module that upholds each invariant, and
//! docs/ARCHITECTURE.md maps the modules and walks one call, one approval and one policy load
//! through them.
//!
//! `unsafe` is denied here and allowed only where it lives: the sandbox's fork child and its
//! pre-exec registration (`sandbox`), the spawner process's fork and descriptor passing
//! (`spawner`), two systemd file-descriptor functions (`sd`, which
//! allows it per item), the command-line tools' `SIGPIPE` disposition (`sigpipe`, one
//! item), the hooks' `SIGALRM` deadline (`hard_deadline`, per item), and the memory hints of the
//! daemon and its spawner (`sys`).
#![deny(unsafe_code)]

// The daemon's top floor: start-up, then the server that handles requests.
pub mod serve;
pub mod server;

// What the server stands on: policy loading, the proposal book and its events, privileges.
pub mod approvals;
pub mod events;
pub mod loader;
pub mod paths;
pub mod privileges;
pub mod proposal;
pub mod selftest;

// The mechanisms: policy, execution, sandbox, journal, secrets, file verbs.
pub mod exec;
pub mod files;
pub mod journal;
pub mod pg_ephemeral;
pub mod pinned;
pub mod policy;
pub mod policy_tools;
pub mod program_files;
pub mod protected;
#[allow(unsafe_code)]
pub mod sandbox;
pub mod scrub;
pub mod sd;
pub mod secrets;
pub mod slots;
#[allow(unsafe_code)]
pub mod spawner;
#[allow(unsafe_code)]
pub mod sys;

// Shared by the daemon and its clients.
pub mod adapters;
pub mod client;
pub mod digest;
pub mod exit;
pub mod hard_deadline;
pub mod protocol;
pub mod sigpipe;
pub mod status;
pub mod terminal;

// Failure injection for the integration tests only.
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
