//! What the daemon tests of this area build their policies from: a cluster whose socket
//! directory verb children can reach, the sandbox profile `pg` that reaches it, and a read-only
//! verb that runs one query through psql as the agent role in that profile.
use crate::common::policy::{Category, Param, Sandbox, Verb};
use crate::pg;
use std::os::unix::fs::PermissionsExt;

/// Verb children have no capabilities (not even root's DAC override): let them reach the
/// server's socket directory like any other client would.
pub fn open_socket_dir(pg: &pg::PgCluster) {
    std::fs::set_permissions(pg.socket_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The profile `pg`: the system, the socket directory, and connects to the server's socket only.
pub fn pg_sandbox(pg: &pg::PgCluster) -> Sandbox {
    let dir = pg.socket_dir().to_str().unwrap();
    Sandbox {
        unix_sockets: Some(vec![format!("{dir}/.s.PGSQL.5432")]),
        ..Sandbox::new(&["/usr", "/lib", "/etc", dir], &[])
    }
}

/// A read-only verb in profile `pg`: `psql -c {sql}` as the agent role in a read-only
/// transaction whose statements time out after `statement_timeout`, `sql` typed as `param`.
pub fn psql_verb(pg: &pg::PgCluster, psql: &str, param: Param, statement_timeout: &str) -> Verb {
    let dir = pg.socket_dir().to_str().unwrap();
    Verb::argv(
        Category::ReadOnly,
        &[
            psql,
            "-X",
            "--no-password",
            "-v",
            "ON_ERROR_STOP=1",
            "--csv",
            "-h",
            dir,
            "-p",
            "5432",
            "-U",
            "agent",
            "-d",
            "verbd",
            "-c",
            "{sql}",
        ],
    )
    .sandbox("pg")
    .env(
        "PGOPTIONS",
        &format!("-c default_transaction_read_only=on -c statement_timeout={statement_timeout}"),
    )
    .param("sql", param)
}
