//! Defence-in-depth facts about running psql the way a SQL verb does, checked against a real
//! throwaway PostgreSQL cluster (tests/common/pg.rs): what `psql -c` does with backslashes, what
//! the read-only transaction refuses, and that real read-only queries return the right rows.

use std::path::Path;

use verbd::policy::sql::{SqlOptions, validate};

use crate::pg;

use pg::{AGENT_ROLE, PgCluster, T_ROWS};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn count_rows_of_t(cluster: &PgCluster) -> usize {
    let output = cluster.psql(&["-A", "-t", "-c", "SELECT count(*) FROM t"]);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output).trim().parse().expect("a count")
}

#[test]
fn harness_cluster_holds_table_t_and_runs_verbs_as_the_agent_role() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let output = cluster.verb_psql("SELECT current_user, id, name FROM t ORDER BY id");
    assert!(output.status.success(), "{}", stderr(&output));
    let mut expected = String::from("current_user,id,name\n");
    for (id, name) in T_ROWS {
        expected.push_str(&format!("{AGENT_ROLE},{id},{name}\n"));
    }
    assert_eq!(stdout(&output), expected);
    let socket = cluster.socket_dir().join(format!(".s.PGSQL.{}", pg::PORT));
    assert!(
        socket.exists(),
        "the server listens on {}",
        socket.display()
    );
}

#[test]
fn backslash_inside_dash_c_sql_is_sent_to_the_server_not_run_by_psql() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let marker = cluster.dir().join("marker");
    let attack = format!("SELECT 1 \\! /usr/bin/touch {}", marker.display());
    let rejection = validate(&attack, &SqlOptions::default()).unwrap_err();
    assert_eq!(rejection.rule, "backslash");

    // Validator bypassed: psql sends the whole -c string to the server, which rejects it.
    let output = cluster.verb_psql(&attack);
    assert!(!output.status.success(), "the server must reject it");
    assert!(
        stderr(&output).contains("syntax error at or near \"\\\""),
        "{}",
        stderr(&output)
    );
    assert!(!marker.exists(), "psql must not have run the \\! command");

    // Control: a -c string that *starts* with a backslash is a psql meta-command, and psql does
    // run it. This is why the validator refuses every backslash outside literals.
    let control = cluster.dir().join("control");
    let meta = format!("\\! /usr/bin/touch {}", control.display());
    assert_eq!(
        validate(&meta, &SqlOptions::default()).unwrap_err().rule,
        "backslash"
    );
    let output = cluster.verb_psql(&meta);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        control.exists(),
        "psql -c '\\! …' runs a shell command (the marker method detects it)"
    );
}

#[test]
fn read_only_transaction_refuses_a_write_the_role_may_otherwise_do() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let insert = "INSERT INTO t VALUES (10, 'written')";
    assert_eq!(
        validate(insert, &SqlOptions::default()).unwrap_err().rule,
        "statement-kind"
    );

    let output = cluster.verb_psql(insert);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("cannot execute INSERT in a read-only transaction"),
        "{}",
        stderr(&output)
    );
    assert_eq!(count_rows_of_t(&cluster), T_ROWS.len());

    // Control: without PGOPTIONS the same role can write, so the refusal above came from the
    // read-only transaction and not from a missing privilege.
    let output = cluster
        .verb_command(insert)
        .env_remove("PGOPTIONS")
        .output()
        .expect("run psql");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(count_rows_of_t(&cluster), T_ROWS.len() + 1);
}

#[test]
fn pgoptions_alone_is_not_a_boundary_the_validator_and_a_read_only_role_are() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    // default_transaction_read_only is only a default: an explicit READ WRITE transaction in
    // a multi-statement -c string overrides it. The validator refuses the second statement.
    let escape = "BEGIN READ WRITE; INSERT INTO t VALUES (11, 'escaped'); COMMIT";
    assert_eq!(
        validate(escape, &SqlOptions::default()).unwrap_err().rule,
        "statement-count"
    );
    let output = cluster.verb_psql(escape);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        count_rows_of_t(&cluster),
        T_ROWS.len() + 1,
        "with the validator bypassed, a role with write privileges can write"
    );
}

#[test]
fn real_read_only_queries_return_the_right_rows() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let cases: &[(&str, &str)] = &[
        (
            "SELECT id, name FROM t WHERE id >= 2 ORDER BY id",
            "id,name\n2,beta\n3,gamma\n",
        ),
        (
            "WITH r AS (SELECT id, name, row_number() OVER (ORDER BY id DESC) AS rn FROM t)\n\
             SELECT id::text || ';' || 'C:\\tmp\\new' AS s, rn FROM r WHERE rn <= 2 ORDER BY id;",
            "s,rn\n2;C:\\tmp\\new,2\n3;C:\\tmp\\new,1\n",
        ),
        (
            "SELECT a.name AS left_name, b.name AS right_name FROM t a \
             JOIN t b ON b.id = a.id + 1 ORDER BY a.id -- join; \\! not a command",
            "left_name,right_name\nalpha,beta\nbeta,gamma\n",
        ),
        (
            "SELECT upper(name) AS n, length($q$it's \\ ; $q$) AS l, E'x\\ty' = 'x' || chr(9) || 'y' AS tab \
             FROM t WHERE name LIKE '%a' ORDER BY 1 /* nested /* comment */ ok */",
            "n,l,tab\nALPHA,9,t\nBETA,9,t\nGAMMA,9,t\n",
        ),
        (
            "VALUES (1, 'one'), (2, 'two')",
            "column1,column2\n1,one\n2,two\n",
        ),
        ("TABLE t", "id,name\n1,alpha\n2,beta\n3,gamma\n"),
        (
            "SELECT count(*) FILTER (WHERE id > 1) AS big, sum(id)::numeric(5,1) AS total FROM t",
            "big,total\n2,6.0\n",
        ),
    ];
    for (sql, expected) in cases {
        if let Err(rejection) = validate(sql, &SqlOptions::default()) {
            panic!("{sql:?} should be accepted: {rejection}");
        }
        let output = cluster.verb_psql(sql);
        assert!(output.status.success(), "{sql}: {}", stderr(&output));
        assert_eq!(stdout(&output), *expected, "{sql}");
    }

    let output = cluster.verb_psql("EXPLAIN (COSTS OFF) SELECT * FROM t WHERE id = 2");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("Scan"), "{}", stdout(&output));
}

#[test]
fn the_cluster_directory_is_removed_on_drop() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let dir = cluster.dir().to_path_buf();
    assert!(dir.join("data").join("PG_VERSION").exists());
    drop(cluster);
    assert!(!Path::new(&dir).exists(), "{} still exists", dir.display());
}
