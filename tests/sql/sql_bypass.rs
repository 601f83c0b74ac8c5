//! The `sql` type against a hostile agent (issue 11, item 4), through a real daemon, a real
//! psql and a real PostgreSQL 15, with the calls sent as uid 61302.
//!
//! - Spelling: `U&"pg\005Fsleep"(3)` is `pg_sleep(3)` to PostgreSQL; the validator must read
//!   identifiers as the server resolves them (U& escapes, UESCAPE, case folding, qualification).
//! - Hidden SQL: `query_to_xml('…')` runs the SQL in its string; it and every other function
//!   that executes SQL text or dumps tables by name are denied by default.
//! - Relations and columns: credential catalogs are refused by default; `deny_relations`,
//!   `allow_relations` and `deny_columns` let the policy refuse `SELECT password_hash FROM users`.
//! - `SHOW name` and `EXPLAIN ANALYZE` are allowed only when the parameter opts in.
use crate::common;
use crate::hostile;
use crate::pg;

use crate::psql_verbs::{open_socket_dir, pg_sandbox, psql_verb};
use common::policy::{Param, ParamType, Policy};
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use verbd::protocol::Response;

const AGENT: u32 = 61302;
const REAL_PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

/// `stats` and the `extra_verbs`, each one parsed read-only query whose `sql` parameter is typed
/// as given.
fn policy(pg: &pg::PgCluster, extra_verbs: Vec<(&str, Param)>) -> String {
    let verb = |param: Param| {
        psql_verb(pg, REAL_PSQL, param, "10s")
            .description("one parsed read-only query")
            .roles(&["agent"])
    };
    let mut policy = Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .sandbox("pg", pg_sandbox(pg))
        .verb("stats", verb(sql()));
    for (name, param) in extra_verbs {
        policy = policy.verb(name, verb(param));
    }
    policy.render()
}

fn sql() -> Param {
    Param::of(ParamType::Sql)
}

fn start(extra_verbs: Vec<(&str, Param)>) -> Option<(pg::PgCluster, Daemon)> {
    if !require_root("sql bypass") {
        return None;
    }
    let pg = pg::PgCluster::start()?;
    open_socket_dir(&pg);
    pg.setup(
        "CREATE TABLE users (id int PRIMARY KEY, name text, password_hash text);\n\
         INSERT INTO users VALUES (1, 'alice', '$argon2id$alice-hash'), (2, 'bob', '$argon2id$bob-hash');\n\
         GRANT SELECT ON users TO agent;",
    );
    let d = Daemon::start(&policy(&pg, extra_verbs));
    d.open_socket();
    Some((pg, d))
}

/// One call as the hostile uid: the answer and how long it took.
fn call_as_agent(d: &Daemon, verb: &str, sql: &str) -> (Response, Duration) {
    let started = Instant::now();
    let answers = hostile::requests_as(AGENT, &d.socket, &[hostile::call(verb, &[("sql", sql)])]);
    (hostile::decode(&answers[0]), started.elapsed())
}

#[track_caller]
fn assert_refused(d: &Daemon, verb: &str, sql: &str, rule: &str, mentions: &str) {
    match call_as_agent(d, verb, sql).0 {
        Response::Invalid {
            param,
            rule: got,
            message,
            ..
        } => {
            assert_eq!(param.as_deref(), Some("sql"), "{sql}");
            assert_eq!(got, rule, "{sql}: {message}");
            assert!(message.contains(mentions), "{sql}: {message}");
        }
        other => panic!("{sql:?} was not refused: {other:?}"),
    }
}

#[track_caller]
fn rows(d: &Daemon, verb: &str, sql: &str) -> String {
    match call_as_agent(d, verb, sql).0 {
        Response::Ok { result, .. } => {
            assert_eq!(result.exit.code, Some(0), "{sql}: {}", result.stderr);
            result.stdout
        }
        other => panic!("{sql:?} did not run: {other:?}"),
    }
}

#[test]
fn unicode_escaped_pg_sleep_is_refused_not_slept() {
    let Some((_pg, d)) = start(vec![]) else {
        return;
    };
    let (answer, took) = call_as_agent(&d, "stats", r#"select U&"pg\005Fsleep"(3)"#);
    assert!(
        matches!(&answer, Response::Invalid { rule, .. } if rule == "denied-function"),
        "U&\"pg\\005Fsleep\"(3) was not refused (took {took:?}): {answer:?}"
    );
    assert!(took < Duration::from_secs(3), "it slept: {took:?}");
    for spelling in [
        r#"select u&"pg\005fsleep"(1)"#,
        r#"select U&"pg!005Fsleep" UESCAPE '!' (1)"#,
        r#"select U&"pg\+00005Fsleep"(1)"#,
        r#"select "pg_catalog".U&"pg\005Fsleep"(1)"#,
        r#"select * from U&"pg\005Fsleep"(1)"#,
        r#"select PG_SLEEP(1)"#,
    ] {
        assert_refused(&d, "stats", spelling, "denied-function", "pg_sleep");
    }
    // Positive control: the same U& spelling of an allowed function runs.
    assert_eq!(
        rows(&d, "stats", r#"select U&"\0075pper"('ok') as x"#),
        "x\nOK\n"
    );
}

/// A second session of the agent role, sleeping; killed and reaped when dropped.
struct Victim(std::process::Child);

impl Victim {
    /// Starts the session and waits until the server lists it.
    fn start(pg: &pg::PgCluster) -> Victim {
        let victim = Victim(
            Command::new(pg::PSQL)
                .args(["-X", "-h"])
                .arg(pg.socket_dir())
                .args([
                    "-p",
                    "5432",
                    "-U",
                    "agent",
                    "-d",
                    "verbd",
                    "-c",
                    "select pg_sleep(30)",
                ])
                .env_clear()
                .env("PGAPPNAME", "victim")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = pg.psql(&[
                "-At",
                "-c",
                "select count(*) from pg_stat_activity where application_name = 'victim'",
            ]);
            if String::from_utf8_lossy(&out.stdout).trim() == "1" {
                return victim;
            }
            assert!(
                Instant::now() < deadline,
                "the victim session never showed up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How the session ended, if it has.
    fn ended(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().unwrap()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sql_hidden_in_a_string_cannot_kill_another_session() {
    let Some((pg, d)) = start(vec![]) else { return };
    let mut session = Victim::start(&pg);
    let hidden =
        "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'victim'";
    let (answer, _) = call_as_agent(
        &d,
        "stats",
        &format!(r#"select U&"query\005Fto\005Fxml"($q${hidden}$q$, true, true, '')"#),
    );
    std::thread::sleep(Duration::from_millis(500));
    let killed = session.ended();
    drop(session);
    assert!(
        killed.is_none(),
        "the hidden SQL killed the other session ({killed:?}); the answer was {answer:?}"
    );
    assert!(
        matches!(&answer, Response::Invalid { rule, message, .. }
            if rule == "denied-function" && message.contains("query_to_xml")),
        "{answer:?}"
    );
    // Every function that runs SQL text or dumps tables by name is denied, however spelled.
    for (sql, name) in [
        (
            format!("select query_to_xml($q${hidden}$q$, true, true, '')"),
            "query_to_xml",
        ),
        (
            "select query_to_xmlschema('select 1', true, true, '')".into(),
            "query_to_xmlschema",
        ),
        (
            "select table_to_xml('users', true, true, '')".into(),
            "table_to_xml",
        ),
        (
            "select pg_catalog.TABLE_TO_XML('users'::regclass, true, true, '')".into(),
            "table_to_xml",
        ),
        (
            "select schema_to_xml('public', true, true, '')".into(),
            "schema_to_xml",
        ),
        (
            "select database_to_xml(true, true, '')".into(),
            "database_to_xml",
        ),
        (
            "select cursor_to_xml('c', 1, true, true, '')".into(),
            "cursor_to_xml",
        ),
        (
            "select * from ts_stat('select to_tsvector(name) from users')".into(),
            "ts_stat",
        ),
        (
            "select ts_rewrite('a'::tsquery, 'select ''a''::tsquery, ''b''::tsquery')".into(),
            "ts_rewrite",
        ),
        (
            "select * from xpath_table('id', 'doc', 'users', '/a', 'true') as t(id int, a text)"
                .into(),
            "xpath_table",
        ),
        (
            "select dblink_exec('dbname=verbd', 'delete from t')".into(),
            "dblink_exec",
        ),
    ] {
        assert_refused(&d, "stats", &sql, "denied-function", name);
    }
}

#[test]
fn credential_catalogs_and_denied_relations_and_columns_are_refused() {
    let Some((_pg, d)) = start(vec![
        ("no-users", sql().deny_relations(&["users"])),
        ("only-t", sql().allow_relations(&["t"])),
        ("no-hashes", sql().deny_columns(&["password_hash"])),
    ]) else {
        return;
    };
    // Built in, on every sql parameter: the credential catalogs.
    for (sql, catalog) in [
        ("SELECT rolpassword FROM pg_authid", "pg_authid"),
        ("select * from pg_catalog.PG_AUTHID", "pg_authid"),
        (r#"select * from U&"pg\005Fshadow""#, "pg_shadow"),
        ("select umoptions from pg_user_mappings", "pg_user_mappings"),
        ("select * from pg_hba_file_rules", "pg_hba_file_rules"),
        (
            "select * from pg_ident_file_mappings",
            "pg_ident_file_mappings",
        ),
        ("select subconninfo from pg_subscription", "pg_subscription"),
        (
            "with x as (select 1) select * from x, (select * from pg_authid) a",
            "pg_authid",
        ),
    ] {
        assert_refused(&d, "stats", sql, "denied-relation", catalog);
    }
    // Without a rule, the table is readable: the positive control.
    assert!(
        rows(&d, "stats", "SELECT password_hash FROM users ORDER BY id").contains("alice-hash")
    );
    // deny_relations
    for sql in [
        "SELECT password_hash FROM users",
        "select * from public.USERS",
        r#"select * from "users""#,
        r#"select * from U&"\0075sers""#,
        "select (select count(*) from users) as n",
        "table users",
    ] {
        assert_refused(&d, "no-users", sql, "denied-relation", "users");
    }
    assert_eq!(
        rows(&d, "no-users", "select count(*) as n from t"),
        "n\n3\n"
    );
    // allow_relations: anything else is refused, CTE names are not relations.
    assert_refused(
        &d,
        "only-t",
        "select * from users",
        "relation-not-allowed",
        "users",
    );
    assert_refused(
        &d,
        "only-t",
        "select * from t join users u on u.id = t.id",
        "relation-not-allowed",
        "users",
    );
    assert_eq!(
        rows(
            &d,
            "only-t",
            "with users as (select id from t where id < 3) select count(*) as n from users"
        ),
        "n\n2\n"
    );
    // deny_columns: the column by any spelling, and anything that would include it.
    for sql in [
        "SELECT password_hash FROM users",
        r#"select u."PASSWORD_HASH" is null, u.password_hash from users u"#,
        "select * from users",
        "select u.* from users u",
        "select row_to_json(u) from users u",
        "select users from users",
        "table users",
    ] {
        assert_refused(&d, "no-hashes", sql, "denied-column", "password_hash");
    }
    assert_eq!(
        rows(&d, "no-hashes", "select id, name from users order by id"),
        "id,name\n1,alice\n2,bob\n"
    );
}

#[test]
fn show_and_explain_analyze_only_by_opt_in() {
    let Some((_pg, d)) = start(vec![
        ("show", sql().allow(&["select", "show"])),
        ("analyze", sql().allow(&["select", "explain-analyze"])),
    ]) else {
        return;
    };
    assert_refused(&d, "stats", "SHOW work_mem", "statement-kind", "SHOW");
    assert_eq!(rows(&d, "show", "SHOW work_mem"), "work_mem\n4MB\n");
    assert!(rows(&d, "show", "SHOW ALL").contains("work_mem,4MB,"));
    assert_refused(&d, "stats", "SHOW ALL", "statement-kind", "SHOW");
    assert_refused(
        &d,
        "stats",
        "EXPLAIN ANALYZE SELECT * FROM t",
        "explain-analyze",
        "ANALYZE",
    );
    let plan = rows(&d, "analyze", "EXPLAIN ANALYZE SELECT * FROM t");
    assert!(plan.contains("actual time="), "{plan}");
    // Opting in to ANALYZE does not open the statement inside it.
    assert_refused(
        &d,
        "analyze",
        "EXPLAIN ANALYZE DELETE FROM t",
        "statement-kind",
        "DELETE",
    );
    assert_refused(
        &d,
        "analyze",
        r#"EXPLAIN ANALYZE SELECT U&"pg\005Fsleep"(1)"#,
        "denied-function",
        "pg_sleep",
    );
}

/// Every entry of the built-in function denylist, each with a call of a real function it
/// denies, in a query the parser takes (literal here, not derived from the list: removing an
/// entry from the list must make its query run).
const DENYLIST_CALLS: &[(&str, &str, &str)] = &[
    (
        "pg_read*",
        "pg_read_binary_file",
        "SELECT pg_read_binary_file('/etc/passwd')",
    ),
    (
        "pg_stat_file",
        "pg_stat_file",
        "SELECT (pg_stat_file('postgresql.conf')).size",
    ),
    (
        "pg_ls_*",
        "pg_ls_waldir",
        "SELECT count(*) FROM pg_ls_waldir()",
    ),
    (
        "pg_file_*",
        "pg_file_write",
        "SELECT pg_file_write('x', 'y', false)",
    ),
    (
        "pg_logdir_ls",
        "pg_logdir_ls",
        "SELECT * FROM pg_logdir_ls() AS l(a timestamp, b text)",
    ),
    (
        "lo_*",
        "lo_import",
        "SELECT id FROM users WHERE id = lo_import('/etc/passwd')",
    ),
    ("loread", "loread", "SELECT loread(lo_open(1, 262144), 10)"),
    ("lowrite", "lowrite", "SELECT lowrite(0, 'x')"),
    (
        "dblink*",
        "dblink_exec",
        "SELECT dblink_exec('dbname=verbd', 'DROP TABLE users')",
    ),
    (
        "pg_terminate_backend",
        "pg_terminate_backend",
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    ),
    (
        "pg_cancel_backend",
        "pg_cancel_backend",
        "SELECT pg_cancel_backend(pg_backend_pid())",
    ),
    (
        "pg_reload_conf",
        "pg_reload_conf",
        "SELECT pg_reload_conf()",
    ),
    (
        "pg_rotate_logfile*",
        "pg_rotate_logfile",
        "SELECT pg_rotate_logfile()",
    ),
    (
        "pg_log_backend_memory_contexts",
        "pg_log_backend_memory_contexts",
        "SELECT pg_log_backend_memory_contexts(1)",
    ),
    ("pg_promote", "pg_promote", "SELECT pg_promote(false, 1)"),
    (
        "set_config",
        "set_config",
        "SELECT 1 WHERE set_config('default_transaction_read_only', 'off', false) = 'off'",
    ),
    ("pg_switch_wal", "pg_switch_wal", "SELECT pg_switch_wal()"),
    (
        "pg_switch_xlog",
        "pg_switch_xlog",
        "SELECT pg_switch_xlog()",
    ),
    (
        "pg_create_*",
        "pg_create_restore_point",
        "SELECT pg_create_restore_point('x')",
    ),
    (
        "pg_drop_*",
        "pg_drop_replication_slot",
        "SELECT pg_drop_replication_slot('s')",
    ),
    (
        "pg_copy_*",
        "pg_copy_physical_replication_slot",
        "SELECT pg_copy_physical_replication_slot('a', 'b')",
    ),
    (
        "pg_start_backup",
        "pg_start_backup",
        "SELECT pg_start_backup('x')",
    ),
    (
        "pg_backup_start",
        "pg_backup_start",
        "SELECT pg_backup_start('x')",
    ),
    (
        "pg_stop_backup",
        "pg_stop_backup",
        "SELECT pg_stop_backup()",
    ),
    (
        "pg_backup_stop",
        "pg_backup_stop",
        "SELECT pg_backup_stop()",
    ),
    (
        "pg_wal_replay_*",
        "pg_wal_replay_pause",
        "SELECT pg_wal_replay_pause()",
    ),
    (
        "pg_xlog_replay_*",
        "pg_xlog_replay_resume",
        "SELECT pg_xlog_replay_resume()",
    ),
    (
        "pg_logical_*",
        "pg_logical_emit_message",
        "SELECT pg_logical_emit_message(true, 'p', 'm')",
    ),
    (
        "pg_replication_origin_*",
        "pg_replication_origin_create",
        "SELECT pg_replication_origin_create('o')",
    ),
    (
        "pg_replication_slot_advance",
        "pg_replication_slot_advance",
        "SELECT pg_replication_slot_advance('s', '0/0')",
    ),
    (
        "pg_sync_replication_slots",
        "pg_sync_replication_slots",
        "SELECT pg_sync_replication_slots()",
    ),
    (
        "pg_log_standby_snapshot",
        "pg_log_standby_snapshot",
        "SELECT pg_log_standby_snapshot()",
    ),
    (
        "pg_stat_reset*",
        "pg_stat_reset_shared",
        "SELECT pg_stat_reset_shared('bgwriter')",
    ),
    (
        "pg_stat_statements_reset",
        "pg_stat_statements_reset",
        "SELECT pg_stat_statements_reset()",
    ),
    (
        "pg_sleep*",
        "pg_sleep_for",
        "SELECT pg_sleep_for('5 seconds')",
    ),
    (
        "pg_advisory_*",
        "pg_advisory_lock",
        "SELECT pg_advisory_lock(42)",
    ),
    (
        "pg_try_advisory_*",
        "pg_try_advisory_xact_lock",
        "WITH l AS (SELECT pg_try_advisory_xact_lock(42)) SELECT * FROM l",
    ),
    (
        "query_to_xml*",
        "query_to_xml_and_xmlschema",
        "SELECT query_to_xml_and_xmlschema('SELECT 1', true, false, '')",
    ),
    (
        "cursor_to_xml*",
        "cursor_to_xml",
        "SELECT cursor_to_xml('c', 1, false, false, '')",
    ),
    (
        "table_to_xml*",
        "table_to_xml",
        "SELECT table_to_xml('users', true, false, '')",
    ),
    (
        "schema_to_xml*",
        "schema_to_xml",
        "SELECT schema_to_xml('public', true, false, '')",
    ),
    (
        "database_to_xml*",
        "database_to_xml",
        "SELECT database_to_xml(true, false, '')",
    ),
    (
        "xpath_table",
        "xpath_table",
        "SELECT * FROM xpath_table('id', 'x', 'users', '/a', 'true') AS t(id int, a text)",
    ),
    (
        "get_raw_page",
        "get_raw_page",
        "SELECT get_raw_page('users', 0)",
    ),
    ("ts_stat", "ts_stat", "SELECT * FROM ts_stat('SELECT 1')"),
    (
        "ts_rewrite",
        "ts_rewrite",
        "SELECT ts_rewrite('a'::tsquery, 'SELECT 1')",
    ),
    (
        "crosstab*",
        "crosstab",
        "SELECT * FROM crosstab('SELECT 1') AS t(a int)",
    ),
    (
        "connectby",
        "connectby",
        "SELECT * FROM connectby('users', 'id', 'id', '1', 0) AS t(a int, b int, c int)",
    ),
    ("nextval", "nextval", "SELECT nextval('s')"),
    ("setval", "setval", "SELECT setval('s', 1)"),
    ("txid_current", "txid_current", "SELECT txid_current()"),
    (
        "pg_current_xact_id",
        "pg_current_xact_id",
        "SELECT pg_current_xact_id()",
    ),
    ("pg_notify", "pg_notify", "SELECT pg_notify('c', 'p')"),
    (
        "pg_import_system_collations",
        "pg_import_system_collations",
        "SELECT pg_import_system_collations('pg_catalog')",
    ),
    (
        "binary_upgrade_*",
        "binary_upgrade_set_next_pg_type_oid",
        "SELECT binary_upgrade_set_next_pg_type_oid(1)",
    ),
];

#[test]
fn every_denylist_entry_is_refused_through_the_daemon() {
    let Some((_pg, d)) = start(vec![]) else {
        return;
    };
    let requests: Vec<_> = DENYLIST_CALLS
        .iter()
        .map(|(_, _, sql)| hostile::call("stats", &[("sql", sql)]))
        .collect();
    let answers = hostile::requests_as(AGENT, &d.socket, &requests);
    let mut wrong = Vec::new();
    for ((entry, function, sql), answer) in DENYLIST_CALLS.iter().zip(&answers) {
        match hostile::decode(answer) {
            Response::Invalid { rule, message, .. }
                if rule == "denied-function"
                    && message.contains(&format!("function `{function}`"))
                    && message.contains(&format!("denylist entry `{entry}`")) => {}
            other => wrong.push(format!("{entry}: {sql:?} answered {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} denied calls were not refused by their entry:\n{}",
        wrong.len(),
        DENYLIST_CALLS.len(),
        wrong.join("\n")
    );
    let execs = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec")
        .count();
    assert_eq!(execs, 0, "psql ran for a denied call");
    // The table covers the list: an entry added without a call here fails this test.
    let covered: std::collections::BTreeSet<&str> =
        DENYLIST_CALLS.iter().map(|(entry, _, _)| *entry).collect();
    let listed: std::collections::BTreeSet<&str> = verbd::policy::sql::BUILTIN_DENIED_FUNCTIONS
        .iter()
        .copied()
        .collect();
    assert_eq!(covered, listed, "denylist entries without a call here");
    // Controls: the same verb runs allowed calls whose names are near the denied ones.
    assert_eq!(
        rows(
            &d,
            "stats",
            "SELECT lower('LO_IMPORT') AS a, pg_backend_pid() > 0 AS b"
        ),
        "a,b\nlo_import,t\n"
    );
    assert_eq!(
        rows(&d, "stats", "SELECT count(*) FROM users"),
        "count\n2\n"
    );
}

/// sqlparser reads `(table "tokens")` as a typed string (`TABLE` followed by the string
/// `"tokens"`), so the validator saw no relation; PostgreSQL reads a double-quoted token only as
/// a name, here the scalar subquery `(TABLE tokens)`, and returned the token to a verb whose
/// `allow_relations` admits only `t`. Found by comparing with PostgreSQL's own parser.
#[test]
fn a_quoted_name_the_parser_reads_as_a_string_is_refused() {
    let Some((pg, d)) = start(vec![("only-t", sql().allow_relations(&["t"]))]) else {
        return;
    };
    pg.setup(
        "CREATE TABLE tokens (token text);\n\
         INSERT INTO tokens VALUES ('tok-0123456789');\n\
         GRANT SELECT ON tokens TO agent;",
    );
    for sql in [
        r#"select (table "tokens")"#,
        r#"select 1 where (table "tokens") is not null"#,
        r#"select (table "tokens") as x from t limit 1"#,
    ] {
        let (answer, _) = call_as_agent(&d, "only-t", sql);
        assert!(
            !format!("{answer:?}").contains("tok-0123456789"),
            "{sql}: the token leaked: {answer:?}"
        );
        assert_refused(&d, "only-t", sql, "quoted-name-as-string", "\"tokens\"");
    }
    // Controls: the same shape over the allowed relation runs, and the token table is there.
    assert_eq!(
        rows(&d, "only-t", "select (select count(*) from t) as n"),
        "n\n3\n"
    );
    assert_eq!(
        rows(&d, "stats", "select (select token from tokens) as token"),
        "token\ntok-0123456789\n"
    );
}
