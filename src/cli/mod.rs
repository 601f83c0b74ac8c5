//! The command line's work, one module per group of commands; `args` holds what the command
//! line accepts (`fast_path` reads the hook's and a plain `call`'s command lines without clap,
//! into the same values) and `main.rs` only parses and dispatches. Adding a subcommand: a variant in
//! `args::Command` (its flags are the documentation), one arm in `main.rs`'s `run`, and a
//! function here (in the module of its group, or a new one).
//!
//! Exit codes of client commands (stable, documented in docs/protocol.md): the child's own exit
//! code for a verb that ran (128+N when killed by signal N, 124 on timeout); 65 invalid
//! arguments; 69 daemon unreachable; 70 daemon error; 73 confirmation required; 75 busy; 77
//! denied; 1 for a failed check (`policy check`, `audit verify`, `selftest`). `serve` has its own
//! (see `verbd::serve`). The constants live in `verbd::exit`, with the man pages' tables.
#![forbid(unsafe_code)]

pub mod args;
pub mod audit;
pub mod client;
pub mod docs;
pub mod fast_path;
pub mod local;
pub mod mcp;
pub mod notify;
pub mod policy_report;
pub mod policy_tools;
pub mod sh;
pub mod socket_arg;
pub mod status;

use anyhow::{Context, bail};
use std::collections::BTreeMap;

pub use verbd::exit::{
    EXIT_BUSY, EXIT_CANNOT_EXECUTE, EXIT_CHECK_FAILED, EXIT_CONFIRM, EXIT_DENIED, EXIT_ERROR,
    EXIT_INVALID, EXIT_NOT_FOUND, EXIT_SIGNAL_BASE, EXIT_TIMED_OUT, EXIT_UNAVAILABLE,
};

/// `key=value` arguments; each key once.
pub fn parse_kv(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for arg in args {
        let (k, v) = arg
            .split_once('=')
            .with_context(|| format!("argument {arg:?} is not key=value"))?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            bail!("argument `{k}` given twice");
        }
    }
    Ok(out)
}

/// The error and its causes, each cause once: most layers' messages already end with their
/// source's text, which `{:#}` would print a second time.
pub fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
