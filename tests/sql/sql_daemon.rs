//! SQL verbs through the real daemon against a real PostgreSQL: the validator refuses attacks
//! before psql ever runs; with the validator bypassed, the read-only session and `-c` still hold;
//! real read-only queries return the right rows.
use crate::common;
use crate::pg;
use crate::psql_verbs::{open_socket_dir, pg_sandbox, psql_verb};
use common::policy::{Param, ParamType, Policy};
use common::*;
use verbd::protocol::Response;

const REAL_PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

fn policy(pg: &pg::PgCluster) -> String {
    Policy::new()
        .allow_root()
        .agents("me", &[0])
        .sandbox("pg", pg_sandbox(pg))
        .verb(
            "stats",
            psql_verb(pg, REAL_PSQL, Param::of(ParamType::Sql), "5s")
                .description("one parsed read-only query")
                .roles(&["me"]),
        )
        .verb(
            "raw-stats",
            psql_verb(pg, REAL_PSQL, Param::matching(".*").max_length(4000), "5s")
                .description("TEST ONLY: the validator bypassed, to prove the second layer")
                .roles(&["me"]),
        )
        .render()
}

fn start() -> Option<(pg::PgCluster, Daemon)> {
    if !require_root("sql verbs") {
        return None;
    }
    let pg = pg::PgCluster::start()?;
    open_socket_dir(&pg);
    let d = Daemon::start(&policy(&pg));
    Some((pg, d))
}

#[test]
fn attacks_are_refused_before_psql_runs() {
    let Some((pg, d)) = start() else { return };
    let marker = pg.dir().join("pwned");
    let m = marker.display();
    let attacks = [
        format!("SELECT 1 \\! touch {m}"),
        "SELECT 1; DROP TABLE t".to_string(),
        format!("\\copy t to '{m}'"),
        format!("COPY t TO PROGRAM 'touch {m}'"),
        "INSERT INTO t VALUES (9, 'x')".to_string(),
        "UPDATE t SET name = 'x'".to_string(),
        "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d".to_string(),
        "SELECT pg_read_file('/etc/passwd')".to_string(),
        "SELECT set_config('default_transaction_read_only', 'off', false)".to_string(),
        "SELECT * FROM t FOR UPDATE".to_string(),
        format!("\\! touch {m}"),
    ];
    for sql in &attacks {
        match d.call("stats", &[("sql", sql)]) {
            Response::Invalid { param, rule, .. } => {
                assert_eq!(param.as_deref(), Some("sql"), "{sql}");
                assert!(!rule.is_empty());
            }
            other => panic!("{sql:?} was not refused: {other:?}"),
        }
    }
    let execs = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec" && e["verb"] == "stats")
        .count();
    assert_eq!(execs, 0, "the journal shows psql ran");
    let refused = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "refused" && e["verb"] == "stats")
        .count();
    assert_eq!(refused, attacks.len());
    assert!(!marker.exists());
    let rows = pg.psql(&["-At", "-c", "SELECT count(*) FROM t"]);
    assert_eq!(
        String::from_utf8_lossy(&rows.stdout).trim(),
        "3",
        "the table is intact"
    );
}

#[test]
fn second_layer_holds_with_the_validator_bypassed() {
    let Some((pg, d)) = start() else { return };
    let marker = pg.dir().join("pwned2");
    // A write: the read-only session refuses it.
    match d.call("raw-stats", &[("sql", "INSERT INTO t VALUES (9, 'x')")]) {
        Response::Ok { result, .. } => {
            assert_ne!(result.exit.code, Some(0));
            assert!(
                result.stderr.contains("read-only transaction"),
                "{}",
                result.stderr
            );
        }
        other => panic!("{other:?}"),
    }
    // A meta-command inside -c text goes to the server as SQL and fails there.
    match d.call(
        "raw-stats",
        &[("sql", &format!("SELECT 1 \\! touch {}", marker.display()))],
    ) {
        // The server got the backslash as SQL text (psql did not run it as a meta-command).
        Response::Ok { result, .. } => {
            assert_ne!(result.exit.code, Some(0));
            assert!(
                result.stderr.contains("syntax error at or near \"\\\""),
                "{}",
                result.stderr
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!marker.exists(), "psql executed a meta-command from -c");
    let rows = pg.psql(&["-At", "-c", "SELECT count(*) FROM t"]);
    assert_eq!(String::from_utf8_lossy(&rows.stdout).trim(), "3");
}

#[test]
fn real_read_only_queries_return_the_right_rows() {
    let Some((_pg, d)) = start() else { return };
    let cases: &[(&str, &str)] = &[
        (
            "SELECT id, name FROM t ORDER BY id",
            "id,name\n1,alpha\n2,beta\n3,gamma\n",
        ),
        (
            "SELECT a.name, b.name AS next FROM t a JOIN t b ON b.id = a.id + 1 ORDER BY a.id",
            "name,next\nalpha,beta\nbeta,gamma\n",
        ),
        (
            "WITH big AS (SELECT * FROM t WHERE id > 1) SELECT count(*) AS n FROM big",
            "n\n2\n",
        ),
        (
            "SELECT name, row_number() OVER (ORDER BY id DESC) AS r FROM t ORDER BY id",
            "name,r\nalpha,3\nbeta,2\ngamma,1\n",
        ),
        (
            "SELECT '42'::int + 1 AS x, CAST(2.5 AS numeric(3,1)) AS y",
            "x,y\n43,2.5\n",
        ),
        ("SELECT 'a\\b;c' AS s, E'x\\\\y' AS e", "s,e\na\\b;c,x\\y\n"),
    ];
    for (sql, expected) in cases {
        match d.call("stats", &[("sql", sql)]) {
            Response::Ok { result, .. } => {
                assert_eq!(result.exit.code, Some(0), "{sql}: {}", result.stderr);
                assert_eq!(&result.stdout, expected, "{sql}");
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
}
