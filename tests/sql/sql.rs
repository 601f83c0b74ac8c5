//! The `sql` parameter validator against a corpus of realistic read-only queries (acceptance
//! rate, and every accepted query really runs read-only on PostgreSQL) and against the attack
//! list of issue 7 with its variations (each refused by the expected rule).

use verbd::policy::sql::{SqlOptions, SqlRejection, validate};

use crate::pg;
use crate::sql_corpus;

use pg::{AGENT_ROLE, PgCluster};

use sql_corpus::{APP_SCHEMA, corpus_records};

const MIN_ACCEPTANCE_PERCENT: f64 = 95.0;

fn refusals(records: &[String]) -> Vec<(usize, SqlRejection)> {
    records
        .iter()
        .enumerate()
        .filter_map(|(index, sql)| {
            validate(sql, &SqlOptions::default())
                .err()
                .map(|rejection| (index + 1, rejection))
        })
        .collect()
}

#[test]
fn corpus_is_well_formed() {
    let records = corpus_records();
    assert!(
        records.len() >= 100,
        "the corpus has {} records",
        records.len()
    );
    for (index, record) in records.iter().enumerate() {
        assert!(
            record.lines().any(|line| {
                let line = line.trim();
                !line.is_empty() && !line.starts_with("--") && !line.starts_with("/*")
            }),
            "record {} has no SQL: {record:?}",
            index + 1
        );
    }
}

#[test]
fn corpus_acceptance_rate() {
    let records = corpus_records();
    let refused = refusals(&records);
    let accepted = records.len() - refused.len();
    let percent = 100.0 * accepted as f64 / records.len() as f64;
    println!(
        "accepted {accepted}/{} = {percent:.1}% of the read-only corpus",
        records.len()
    );
    for (number, rejection) in &refused {
        let first_line = records[number - 1]
            .lines()
            .find(|line| !line.trim_start().starts_with("--"))
            .unwrap_or("");
        println!("  refused record {number}: {rejection}\n      {first_line}");
    }
    assert!(
        percent >= MIN_ACCEPTANCE_PERCENT,
        "acceptance {percent:.1}% is below {MIN_ACCEPTANCE_PERCENT}%"
    );
}

#[test]
fn corpus_queries_run_read_only_on_a_real_postgres() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    cluster.setup(APP_SCHEMA);
    cluster.setup(&format!(
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {AGENT_ROLE}; \
         GRANT pg_read_all_stats, pg_read_all_settings TO {AGENT_ROLE};"
    ));
    let records = corpus_records();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (index, sql) in records.iter().enumerate() {
        if validate(sql, &SqlOptions::default()).is_err() {
            continue;
        }
        ran += 1;
        let output = cluster.verb_psql(sql);
        if !output.status.success() {
            failures.push(format!(
                "record {}: {}\n{sql}",
                index + 1,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    eprintln!(
        "ran {ran} accepted corpus queries through psql, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Issue 7's attack list with variations: each must be refused by the given rule.
const ATTACKS: &[(&str, &str)] = &[
    // psql meta-commands
    ("SELECT 1 \\! id", "backslash"),
    ("select 1 \\! id", "backslash"),
    ("SELECT 1\\!id", "backslash"),
    ("SELECT 1 -- fine\n\\! id", "backslash"),
    ("\\! id", "backslash"),
    ("\\copy t to '/tmp/x'", "backslash"),
    ("\\COPY t TO '/tmp/x'", "backslash"),
    ("  \\copy (SELECT 1) to '/tmp/x'", "backslash"),
    ("SELECT 1 \\g /tmp/out", "backslash"),
    ("SELECT 'a' \\gexec", "backslash"),
    ("SELECT $$x$$ \\o /tmp/out", "backslash"),
    ("SELECT \"x\" \\set ON_ERROR_STOP 0", "backslash"),
    ("SELECT 'x\\' , ' ; DELETE FROM t; -- '", "ambiguous-string"),
    // more than one statement
    ("SELECT 1; DROP TABLE t", "statement-count"),
    ("select 1; drop table t;", "statement-count"),
    ("SELECT 1;DELETE FROM t", "statement-count"),
    ("SELECT 1; -- comment\nDROP TABLE t", "statement-count"),
    ("SELECT ';'; DROP TABLE t", "statement-count"),
    (
        "BEGIN READ WRITE; INSERT INTO t VALUES (9, 'x'); COMMIT",
        "statement-count",
    ),
    // not a query
    ("COPY t TO PROGRAM 'id'", "statement-kind"),
    ("copy t to program 'id'", "statement-kind"),
    ("COPY (SELECT 1) TO PROGRAM 'id'", "statement-kind"),
    ("COPY t FROM '/etc/passwd'", "statement-kind"),
    ("INSERT INTO t VALUES (1, 'x')", "statement-kind"),
    ("insert into t select * from t", "statement-kind"),
    (
        "WITH x AS (SELECT 1 AS id) INSERT INTO t SELECT id, 'x' FROM x",
        "statement-kind",
    ),
    ("UPDATE t SET name = 'x'", "statement-kind"),
    ("Update t Set name = 'x' WHERE id = 1", "statement-kind"),
    ("DELETE FROM t", "statement-kind"),
    ("SET default_transaction_read_only = off", "statement-kind"),
    (
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
        "statement-kind",
    ),
    ("DO $$ BEGIN DELETE FROM t; END $$", "statement-kind"),
    ("CALL cleanup()", "statement-kind"),
    ("BEGIN", "statement-kind"),
    ("LISTEN ch", "statement-kind"),
    ("NOTIFY ch, 'x'", "statement-kind"),
    ("PREPARE p AS DELETE FROM t", "statement-kind"),
    ("EXECUTE p", "statement-kind"),
    ("CREATE TABLE x AS SELECT * FROM t", "statement-kind"),
    ("DROP TABLE t", "statement-kind"),
    ("EXPLAIN DELETE FROM t", "statement-kind"),
    // EXPLAIN ANALYZE runs the statement
    ("EXPLAIN ANALYZE DELETE FROM t", "explain-analyze"),
    ("explain analyze select * from t", "explain-analyze"),
    (
        "EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM t",
        "explain-analyze",
    ),
    (
        "EXPLAIN (FORMAT JSON, ANALYZE TRUE) UPDATE t SET name = 'x'",
        "explain-analyze",
    ),
    // data-modifying CTEs
    (
        "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "data-modifying-cte",
    ),
    (
        "with D as (delete from T returning *) select * from d",
        "data-modifying-cte",
    ),
    (
        "WITH a AS (SELECT 1), u AS (UPDATE t SET name = 'x' RETURNING *) SELECT * FROM u",
        "data-modifying-cte",
    ),
    (
        "WITH i AS (INSERT INTO t VALUES (5, 'x') RETURNING id) SELECT count(*) FROM i",
        "data-modifying-cte",
    ),
    (
        "SELECT * FROM (WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d) s",
        "data-modifying-cte",
    ),
    (
        "EXPLAIN WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "data-modifying-cte",
    ),
    // denied functions, wherever they are
    ("SELECT pg_read_file('/etc/passwd')", "denied-function"),
    ("SELECT PG_READ_FILE('/etc/passwd')", "denied-function"),
    (
        "SELECT pg_catalog.pg_read_file('/etc/passwd')",
        "denied-function",
    ),
    ("SELECT \"pg_read_file\"('/etc/passwd')", "denied-function"),
    (
        "SELECT pg_read_binary_file('/etc/passwd')",
        "denied-function",
    ),
    (
        "SELECT * FROM pg_read_file('/etc/passwd') AS f(content)",
        "denied-function",
    ),
    (
        "SELECT * FROM (SELECT pg_read_file('/etc/passwd')) s",
        "denied-function",
    ),
    (
        "WITH x AS (SELECT pg_read_file('/etc/passwd')) SELECT * FROM x",
        "denied-function",
    ),
    (
        "SELECT * FROM t, LATERAL (SELECT pg_read_file(t.name)) f",
        "denied-function",
    ),
    (
        "SELECT * FROM t CROSS JOIN LATERAL pg_ls_dir('/') AS d",
        "denied-function",
    ),
    (
        "SELECT 1 WHERE EXISTS (SELECT pg_read_file('/etc/passwd'))",
        "denied-function",
    ),
    (
        "SELECT * FROM t ORDER BY pg_read_file(name)",
        "denied-function",
    ),
    (
        "EXPLAIN SELECT pg_read_file('/etc/passwd')",
        "denied-function",
    ),
    ("SELECT set_config('x', 'y', false)", "denied-function"),
    (
        "SELECT PG_CATALOG.SET_CONFIG('default_transaction_read_only', 'off', false)",
        "denied-function",
    ),
    (
        "SELECT * FROM t WHERE set_config('transaction_read_only', 'off', true) IS NOT NULL",
        "denied-function",
    ),
    ("SELECT lo_import('/etc/passwd')", "denied-function"),
    ("SELECT lo_export(16384, '/tmp/x')", "denied-function"),
    (
        "SELECT * FROM dblink('host=evil', 'SELECT 1') AS r(a int)",
        "denied-function",
    ),
    (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
        "denied-function",
    ),
    (
        "SELECT query_to_xml('DELETE FROM t RETURNING *', true, true, '')",
        "denied-function",
    ),
    ("SELECT pg_sleep(3600)", "denied-function"),
    // locking clauses, at any depth
    ("SELECT * FROM t FOR UPDATE", "locking-clause"),
    ("select * from t for share", "locking-clause"),
    ("SELECT * FROM t FOR NO KEY UPDATE", "locking-clause"),
    ("SELECT * FROM t FOR KEY SHARE", "locking-clause"),
    ("SELECT * FROM t FOR UPDATE SKIP LOCKED", "locking-clause"),
    (
        "SELECT * FROM (SELECT * FROM t FOR UPDATE) s",
        "locking-clause",
    ),
    (
        "WITH l AS (SELECT * FROM t FOR UPDATE) SELECT * FROM l",
        "locking-clause",
    ),
    ("EXPLAIN SELECT * FROM t FOR UPDATE", "locking-clause"),
    // SELECT … INTO creates a table
    ("SELECT * INTO t2 FROM t", "select-into"),
    ("select id into temporary t2 from t", "select-into"),
    // NUL and length
    ("SELECT 1\0", "nul"),
];

#[test]
fn attack_list_is_refused_with_the_expected_rule() {
    let mut wrong = Vec::new();
    for (sql, rule) in ATTACKS {
        match validate(sql, &SqlOptions::default()) {
            Ok(()) => wrong.push(format!("{sql:?}: accepted, expected `{rule}`")),
            Err(rejection) if rejection.rule != *rule => {
                wrong.push(format!("{sql:?}: expected `{rule}`, got {rejection}"));
            }
            Err(rejection) => {
                assert!(
                    !rejection.message.is_empty() && rejection.to_string().contains(rule),
                    "{rejection}"
                );
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn oversized_query_is_refused_by_length() {
    let sql = format!("SELECT 1 -- {}", "x".repeat(20_000));
    assert_eq!(
        validate(&sql, &SqlOptions::default()).unwrap_err().rule,
        "length"
    );
}
