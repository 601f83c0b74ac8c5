//! Tools that help operators move agents onto verbs, offline: `verbd policy coverage` (replay
//! recorded agent commands against a policy), `policy suggest` (draft verbs from what is not
//! covered), `policy test` (expected verdicts for given calls), `policy schema`, and `policy
//! polkit` (the polkit rule for the units the policy's verbs manage).
//!
//! Invariants: nothing here executes a recorded command or expands it; matching uses the
//! policy's compiled templates and its real parameter validators (through
//! [`crate::policy::Policy::evaluate`]), never a second copy of them; whatever cannot be known
//! offline (substitutions, variables, globs, redirections, `sh -c`, `xargs`, `-exec`) is
//! reported as such, never guessed through.
#![forbid(unsafe_code)]

pub mod cases;
pub mod coverage;
pub mod danger;
pub mod filters;
pub mod mapping;
pub mod matcher;
pub mod packs;
pub mod polkit;
pub mod shell;
pub mod sources;
pub mod suggest;
