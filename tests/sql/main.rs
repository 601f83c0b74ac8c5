//! The `sql` parameter and PostgreSQL: the validator, its bypass attempts, real clusters.
//!
//! One test binary for the area: each file is a module, its tests named `file::test`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/hostile.rs"]
mod hostile;
#[path = "../common/pg.rs"]
mod pg;
#[path = "../common/sql_corpus.rs"]
mod sql_corpus;

mod pg_ephemeral;
mod pg_harness;
mod psql_verbs;
mod sql;
mod sql_bypass;
mod sql_daemon;
mod sql_differential;
mod sql_multiline;
