//! Multi-line SQL end to end: the read-only corpus (tests/data/sql_read_only_corpus.sql, mostly
//! formatted multi-line queries) goes through a real `verbd serve` — the daemon's call path, with
//! `Param::validate`, the template, the sandbox and the journal — into psql against a real
//! PostgreSQL (tests/common/pg.rs). A `sql` parameter takes LF and TAB; CR, NUL and other control
//! characters are refused with the reason; other parameter types still refuse LF.
use crate::common;
use crate::pg;
use crate::sql_corpus;

use crate::psql_verbs::{open_socket_dir, pg_sandbox, psql_verb};
use common::policy::{Category, Param, ParamType, Policy, Verb};
use common::*;
use verbd::policy::sql::{SqlOptions, validate};
use verbd::protocol::Response;

/// The same floor tests/sql/sql.rs sets for the validator alone.
const MIN_ACCEPTANCE_PERCENT: f64 = 95.0;

fn policy(pg: &pg::PgCluster) -> String {
    let psql = pg.psql_binary();
    let psql = psql.to_str().unwrap();
    Policy::new()
        .allow_root()
        .agents("me", &[0])
        .sandbox("pg", pg_sandbox(pg))
        .verb(
            "stats",
            psql_verb(pg, psql, Param::of(ParamType::Sql), "5s")
                .description("one parsed read-only query")
                .roles(&["me"]),
        )
        .verb(
            "stats-leading-comment",
            psql_verb(pg, psql, Param::of(ParamType::Sql).allow_dash(), "5s")
                .description(
                    "the same, for queries that open with a `--` comment (`-c` takes them as its argument)",
                )
                .roles(&["me"]),
        )
        .verb(
            "echo-word",
            Verb::argv(Category::ReadOnly, &["/bin/echo", "{word}"])
                .description("a string parameter that takes any one-line text")
                .roles(&["me"])
                .param("word", Param::matching(".*").max_length(200)),
        )
        .render()
}

fn start() -> Option<(pg::PgCluster, Daemon)> {
    if !require_root("sql_multiline") {
        return None;
    }
    let pg = pg::PgCluster::start()?;
    open_socket_dir(&pg);
    let d = Daemon::start(&policy(&pg));
    Some((pg, d))
}

#[test]
fn the_read_only_corpus_runs_through_the_daemon() {
    let Some((pg, d)) = start() else { return };
    pg.setup(sql_corpus::APP_SCHEMA);
    pg.setup(&format!(
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}; \
         GRANT pg_read_all_stats, pg_read_all_settings TO {};",
        pg::AGENT_ROLE,
        pg::AGENT_ROLE
    ));
    let records = sql_corpus::corpus_records();
    let multi_line = records
        .iter()
        .filter(|r| r.trim_end().contains('\n'))
        .count();
    assert!(
        multi_line >= records.len() / 2,
        "the corpus should be mostly multi-line ({multi_line}/{})",
        records.len()
    );
    let (mut ran, mut ran_multi_line, mut leading_comment) = (0, 0, 0);
    let mut failures = Vec::new();
    for (index, sql) in records.iter().enumerate() {
        let number = index + 1;
        let verdict = validate(sql, &SqlOptions::default());
        // A query opening with a `--` comment begins its argv element with `-`: the template
        // refuses it (option injection) unless the parameter sets `allow_dash`
        // (docs/policy.md, "SQL verbs"); the verb that does runs it.
        let verb = if sql.starts_with('-') {
            let expected = verdict
                .as_ref()
                .err()
                .map_or("option-injection", |r| r.rule);
            match d.call("stats", &[("sql", sql)]) {
                Response::Invalid { rule, .. } if rule == expected => {}
                other => failures.push(format!("record {number}: {other:?}")),
            }
            leading_comment += 1;
            "stats-leading-comment"
        } else {
            "stats"
        };
        match (verdict, d.call(verb, &[("sql", sql)])) {
            (Ok(()), Response::Ok { result, .. }) => {
                if result.exit.code == Some(0) {
                    ran += 1;
                    if sql.trim_end().contains('\n') {
                        ran_multi_line += 1;
                    }
                } else {
                    failures.push(format!("record {number}: psql failed: {}", result.stderr));
                }
            }
            // The validator's refusals (a denied function, on purpose) reach the caller with
            // the validator's own rule, never the generic control-character rule.
            (Err(expected), Response::Invalid { param, rule, .. }) => {
                assert_eq!(param.as_deref(), Some("sql"), "record {number}");
                if rule != expected.rule {
                    failures.push(format!(
                        "record {number}: refused by `{rule}`, the validator says `{}`",
                        expected.rule
                    ));
                }
            }
            (verdict, other) => failures.push(format!(
                "record {number}: validator {verdict:?}, daemon {other:?}\n{sql}"
            )),
        }
    }
    let percent = 100.0 * ran as f64 / records.len() as f64;
    skip::announce(&format!(
        "sql_multiline: {ran}/{} corpus queries ran through the daemon ({percent:.1}%), \
         {ran_multi_line} of them multi-line; {leading_comment} open with a comment",
        records.len()
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        percent >= MIN_ACCEPTANCE_PERCENT,
        "{percent:.1}% < {MIN_ACCEPTANCE_PERCENT}%"
    );
    assert!(
        ran_multi_line * 2 >= multi_line,
        "multi-line queries did not run"
    );
    let execs = d
        .journal_events()
        .iter()
        .filter(|e| {
            e["kind"] == "exec" && (e["verb"] == "stats" || e["verb"] == "stats-leading-comment")
        })
        .count();
    assert_eq!(execs, ran, "one journaled exec per query that ran");
}

#[test]
fn lf_and_tab_pass_cr_nul_and_controls_are_refused_by_name() {
    let Some((_pg, d)) = start() else { return };
    // Positive control: LF and TAB formatting, and the right rows.
    let formatted = "SELECT id,\n\tname\nFROM t\n-- a comment line\nWHERE id > 1\nORDER BY id";
    match d.call("stats", &[("sql", formatted)]) {
        Response::Ok { result, .. } => {
            assert_eq!(result.exit.code, Some(0), "{}", result.stderr);
            assert_eq!(result.stdout, "id,name\n2,beta\n3,gamma\n");
        }
        other => panic!("multi-line query refused: {other:?}"),
    }
    // The same query with CRLF, a lone CR, NUL, ESC: refused with the reason, never run.
    let crlf = formatted.replace('\n', "\r\n");
    let cases = [
        (
            crlf.as_str(),
            "CR is not allowed in SQL: send LF line endings",
        ),
        ("SELECT 1\rFROM t", "CR is not allowed in SQL"),
        ("SELECT 1\0", "control character 0x00"),
        ("SELECT '\x1b[2J' AS x", "control character 0x1b"),
    ];
    for (sql, reason) in cases {
        match d.call("stats", &[("sql", sql)]) {
            Response::Invalid {
                param,
                rule,
                message,
                ..
            } => {
                assert_eq!(param.as_deref(), Some("sql"), "{sql:?}");
                assert_eq!(rule, "control-character", "{sql:?}");
                assert!(message.contains(reason), "{sql:?}: {message}");
            }
            other => panic!("{sql:?} was not refused: {other:?}"),
        }
    }
    // Other types keep refusing LF: the same text in a string parameter.
    match d.call("echo-word", &[("word", "a\nb")]) {
        Response::Invalid { param, rule, .. } => {
            assert_eq!(param.as_deref(), Some("word"));
            assert_eq!(rule, "control-character");
        }
        other => panic!("LF in a string parameter was not refused: {other:?}"),
    }
    assert_eq!(
        stdout_of(&d.call("echo-word", &[("word", "a b")])),
        "a b\n",
        "control: the string verb runs"
    );
    let execs = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "exec" && e["verb"] == "stats")
        .count();
    assert_eq!(execs, 1, "only the positive control ran psql");
}
