//! The validator's unit tests: each rule accepted and refused on small texts; the lexer and the
//! name rules on their own.

use std::ops::ControlFlow;

use sqlparser::ast::Visit;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::lex::{TokenKind, decode_unicode_escapes};
use super::names::Denylist;
use super::shape::{ShapeChecker, parse};
use super::*;

fn check(sql: &str) -> Result<(), SqlRejection> {
    validate(sql, &SqlOptions::default())
}

#[track_caller]
fn accepted(sql: &str) {
    if let Err(rejection) = check(sql) {
        panic!("expected {sql:?} to be accepted, got {rejection}");
    }
}

#[track_caller]
fn refused(sql: &str, rule: &str) -> String {
    refused_with(sql, &SqlOptions::default(), rule)
}

#[track_caller]
fn refused_with(sql: &str, opts: &SqlOptions, rule: &str) -> String {
    match validate(sql, opts) {
        Ok(()) => panic!("expected {sql:?} to be refused by `{rule}`, it was accepted"),
        Err(rejection) => {
            assert_eq!(rejection.rule, rule, "{sql:?}: {rejection}");
            assert!(
                rejection.to_string().contains(rule),
                "the error text names the rule: {rejection}"
            );
            rejection.message
        }
    }
}

#[test]
fn sql_kind_names_round_trip_and_unknown_is_a_clear_error() {
    for kind in SqlKind::ALL {
        assert_eq!(kind.name().parse::<SqlKind>(), Ok(kind));
        assert_eq!(kind.to_string(), kind.name());
    }
    let error = "insert".parse::<SqlKind>().unwrap_err();
    assert_eq!(error.given, "insert");
    assert!(
        error
            .to_string()
            .contains("select, explain, values, table, show, explain-analyze")
    );
    assert!("SELECT".parse::<SqlKind>().is_err(), "names are lower-case");
}

#[test]
fn default_options() {
    let opts = SqlOptions::default();
    assert_eq!(opts.allow, SqlKind::DEFAULT.to_vec());
    assert!(opts.deny_functions.is_empty());
    assert_eq!(opts.max_length, 16_384);
}

#[test]
fn plain_queries_are_accepted() {
    accepted("SELECT 1");
    accepted("select 1;");
    accepted("SELECT 1 ;  -- trailing comment\n");
    accepted("SELECT a, count(*) FROM t WHERE b > 3 GROUP BY a ORDER BY 2 DESC LIMIT 10");
    accepted("WITH x AS (SELECT 1 AS a) SELECT a FROM x");
    accepted(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r",
    );
    accepted("VALUES (1, 'a'), (2, 'b')");
    accepted("TABLE t");
    accepted("SELECT 1 UNION SELECT 2 EXCEPT SELECT 3");
    accepted("EXPLAIN SELECT * FROM t");
    accepted("EXPLAIN (VERBOSE, COSTS OFF, FORMAT JSON) SELECT * FROM t");
    accepted("SELECT row_number() OVER (PARTITION BY a ORDER BY b) FROM t");
    accepted("SELECT now()::date, '1 day'::interval, CAST(x AS bigint) FROM t");
    accepted("SELECT pg_size_pretty(pg_database_size(current_database()))");
    accepted("SELECT currval('s'), lastval(), txid_current_if_assigned()");
    accepted("SELECT '0/16B3748'::pg_lsn, pg_current_wal_lsn()");
}

#[test]
fn nul_is_refused() {
    let message = refused("SELECT 1\0", "nul");
    assert!(message.contains("line 1, column 9"), "{message}");
}

#[test]
fn length_cap() {
    let opts = SqlOptions {
        max_length: 10,
        ..SqlOptions::default()
    };
    assert_eq!(validate("SELECT 1", &opts), Ok(()));
    // The limit itself is within it.
    assert_eq!(validate("SELECT 123", &opts), Ok(()));
    refused_with("SELECT 1234", &opts, "length");
    let message = refused_with("SELECT 12345", &opts, "length");
    assert!(
        message.contains("12 bytes") && message.contains("10"),
        "{message}"
    );
    let long = format!("SELECT '{}'", "x".repeat(DEFAULT_MAX_LENGTH));
    refused(&long, "length");
}

#[test]
fn backslash_outside_literals_is_a_meta_command() {
    let message = refused("SELECT 1 \\! id", "backslash");
    assert!(message.contains("line 1, column 10"), "{message}");
    refused("\\copy t to '/tmp/x'", "backslash");
    refused("\\! id", "backslash");
    refused("SELECT 1\n\\g /tmp/out", "backslash");
    let message = refused("SELECT 1 -- c\n  \\gexec", "backslash");
    assert!(message.contains("line 2, column 3"), "{message}");
    refused("SELECT \"a\" \\x", "backslash");
    refused("SELECT $$a$$ \\q", "backslash");
    refused("SELECT /* a /* nested */ still */ \\q", "backslash");
}

#[test]
fn backslash_inside_literals_identifiers_and_comments_is_fine() {
    accepted(r"SELECT 'C:\temp\new' AS path");
    accepted(r"SELECT E'it\'s \\ fine; \! not a command'");
    accepted(r"SELECT e'\\'");
    accepted(r"SELECT E'a''b\'c'");
    accepted(r"SELECT $$ \! id; $$");
    accepted(r"SELECT $fn$ it's \! $ $$ $fn$");
    accepted(r#"SELECT 1 AS "odd\name""#);
    accepted("SELECT 1 -- \\! id\n");
    accepted("SELECT 1 /* \\! id /* nested \\q */ still */");
    accepted(r"SELECT * FROM t WHERE name LIKE '%\_%'");
    accepted(r"SELECT 'a;b', 'semi;colon\x'");
}

#[test]
fn standard_conforming_ambiguity_is_refused() {
    // With standard_conforming_strings=off the server would read `'x\' , '` as one string
    // and run `; DELETE FROM t; --` as code.
    let message = refused(r"SELECT 'x\' , ' ; DELETE FROM t; -- '", "ambiguous-string");
    assert!(message.contains("line 1, column 8"), "{message}");
    refused(r"SELECT 'a\' AS x, ' AS y -- '", "ambiguous-string");
    refused(r"SELECT N'a\' AS x, ' AS y -- '", "ambiguous-string");
    // The legacy reading of these does not even lex (an odd number of unescaped quotes
    // remains), so a server with standard_conforming_strings=off would reject them whole.
    accepted(r"SELECT 'a\' AS x");
    accepted(r"SELECT 1 FROM t WHERE path = 'C:\'");
    accepted(r"SELECT 1 FROM t WHERE name LIKE '%\_x%' ESCAPE '\' AND id > 1");
    accepted(r"SELECT 'a\\'");
    // Bit and hex strings never use backslash escapes, E'' strings always do.
    accepted(r"SELECT B'101', X'ff', E'\'' || ' -- '");
}

#[test]
fn unterminated_tokens_are_refused() {
    refused("SELECT 'abc", "unterminated");
    refused("SELECT E'abc\\'", "unterminated");
    refused("SELECT \"abc", "unterminated");
    refused("SELECT $x$ abc $y$", "unterminated");
    let message = refused("SELECT 1 /* a /* b */", "unterminated");
    assert!(
        message.contains("comment") && message.contains("column 10"),
        "{message}"
    );
}

#[test]
fn exactly_one_statement() {
    let message = refused("SELECT 1; DROP TABLE t", "statement-count");
    assert!(message.contains("line 1, column 9"), "{message}");
    refused("SELECT 1; SELECT 2", "statement-count");
    refused("SELECT 1;;", "statement-count");
    refused("", "statement-count");
    refused(" ; ", "statement-count");
    refused("-- only a comment", "statement-count");
    accepted("SELECT ';' AS semi, $$;$$, \";\" FROM (SELECT 1 AS \";\") s");
}

#[test]
fn parse_errors_are_reported_with_position() {
    let message = refused("SELECT (1,\n  )", "parse");
    assert!(message.contains("Line: 2, Column: 3"), "{message}");
    refused("SELEC 1", "statement-kind");
    refused("SELECT FROM WHERE", "parse");
}

#[test]
fn only_queries_are_allowed() {
    for (sql, keyword) in [
        ("INSERT INTO t VALUES (1)", "INSERT"),
        ("UPDATE t SET a = 1", "UPDATE"),
        ("DELETE FROM t", "DELETE"),
        ("COPY t TO PROGRAM 'id'", "COPY"),
        ("COPY (SELECT 1) TO '/tmp/x'", "COPY"),
        ("SET default_transaction_read_only = off", "SET"),
        ("RESET ALL", "RESET"),
        ("DO $$ BEGIN PERFORM 1; END $$", "DO"),
        ("do language plpgsql $$ begin end $$", "DO"),
        ("(DELETE FROM t)", "DELETE"),
        ("ALTER SYSTEM SET fsync = off", "ALTER"),
        ("CHECKPOINT", "CHECKPOINT"),
        ("LOCK TABLE t", "LOCK"),
        ("SHOW ALL", "SHOW"),
        (
            "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE",
            "MERGE",
        ),
        ("CALL p()", "CALL"),
        ("BEGIN", "BEGIN"),
        ("COMMIT", "COMMIT"),
        ("START TRANSACTION READ WRITE", "START"),
        ("LISTEN c", "LISTEN"),
        ("NOTIFY c", "NOTIFY"),
        ("PREPARE p AS SELECT 1", "PREPARE"),
        ("EXECUTE p", "EXECUTE"),
        ("DROP TABLE t", "DROP"),
        ("CREATE TABLE x AS SELECT 1", "CREATE"),
        ("TRUNCATE t", "TRUNCATE"),
        ("VACUUM t", "VACUUM"),
        ("ANALYZE t", "ANALYZE"),
        ("GRANT SELECT ON t TO public", "GRANT"),
        (
            "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
            "INSERT",
        ),
    ] {
        let message = refused(sql, "statement-kind");
        assert!(message.contains(keyword), "{sql:?}: {message}");
    }
}

#[test]
fn explain_only_of_queries_and_without_analyze() {
    refused("EXPLAIN ANALYZE SELECT 1", "explain-analyze");
    refused("explain analyze delete from t", "explain-analyze");
    refused("EXPLAIN (ANALYZE) SELECT 1", "explain-analyze");
    refused(
        "EXPLAIN (analyze false, verbose) SELECT 1",
        "explain-analyze",
    );
    let message = refused("EXPLAIN DELETE FROM t", "statement-kind");
    assert!(message.contains("EXPLAIN of DELETE"), "{message}");
    refused("EXPLAIN INSERT INTO t VALUES (1)", "statement-kind");
    refused("DESCRIBE t", "statement-kind");
    refused("DESCRIBE SELECT 1", "statement-kind");
    refused("DESC SELECT 1", "statement-kind");
    // Other dialects' EXPLAIN forms, which sqlparser reads and PostgreSQL has not.
    refused("EXPLAIN QUERY PLAN SELECT 1", "statement-kind");
    refused("EXPLAIN ESTIMATE SELECT 1", "statement-kind");
    refused("EXPLAIN SELECT * FROM t FOR UPDATE", "locking-clause");
    refused("EXPLAIN SELECT pg_read_file('x')", "denied-function");
}

#[test]
fn allow_list_of_kinds() {
    let select_only = SqlOptions {
        allow: vec![SqlKind::Select],
        ..SqlOptions::default()
    };
    assert_eq!(validate("SELECT 1", &select_only), Ok(()));
    assert_eq!(
        validate("WITH x AS (SELECT 1) SELECT * FROM x", &select_only),
        Ok(())
    );
    let message = refused_with("EXPLAIN SELECT 1", &select_only, "not-allowed-kind");
    assert!(
        message.contains("`explain`") && message.contains("allowed: select"),
        "{message}"
    );
    refused_with("VALUES (1)", &select_only, "not-allowed-kind");
    refused_with("TABLE t", &select_only, "not-allowed-kind");
    refused_with(
        "SELECT 1 UNION VALUES (2)",
        &select_only,
        "not-allowed-kind",
    );
    let explain_only = SqlOptions {
        allow: vec![SqlKind::Explain],
        ..SqlOptions::default()
    };
    assert_eq!(validate("EXPLAIN SELECT 1", &explain_only), Ok(()));
    refused_with("SELECT 1", &explain_only, "not-allowed-kind");
}

#[test]
fn data_modifying_ctes_are_refused() {
    let message = refused(
        "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "data-modifying-cte",
    );
    assert!(
        message.contains("`d`") && message.contains("DELETE"),
        "{message}"
    );
    refused(
        "WITH a AS (SELECT 1), u AS (UPDATE t SET x = 1 RETURNING x) SELECT * FROM u",
        "data-modifying-cte",
    );
    refused(
        "with i as (insert into t values (1) returning *) select 1",
        "data-modifying-cte",
    );
    refused(
        "SELECT * FROM (WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d) s",
        "data-modifying-cte",
    );
    refused(
        "EXPLAIN WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "data-modifying-cte",
    );
    // sqlparser takes a statement on either side of a set operation (the server would not):
    // either side that modifies data makes the CTE one that does.
    for sql in [
        "WITH d AS ((SELECT 1) UNION (DELETE FROM t RETURNING *)) SELECT * FROM d",
        "WITH d AS ((DELETE FROM t RETURNING *) UNION (SELECT 1)) SELECT * FROM d",
    ] {
        refused(sql, "data-modifying-cte");
    }
}

#[test]
fn select_into_is_refused() {
    let message = refused("SELECT * INTO newtable FROM t", "select-into");
    assert!(message.contains("newtable"), "{message}");
    refused("SELECT 1 UNION SELECT a INTO x FROM t", "select-into");
}

#[test]
fn locking_clauses_are_refused_at_any_depth() {
    for lock in [
        "FOR UPDATE",
        "FOR NO KEY UPDATE",
        "FOR SHARE",
        "FOR KEY SHARE",
    ] {
        let sql = format!("SELECT * FROM t {lock}");
        let message = refused(&sql, "locking-clause");
        assert!(message.contains(lock), "{message}");
        // The lexer layer alone refuses it too: it is the one that covers forms sqlparser
        // does not parse, so it must not lean on the tree's check.
        let tokens = lex(&sql, StringMode::Conforming).unwrap();
        let rejection = check_locking_tokens(&sql, &tokens).unwrap_err();
        assert_eq!(rejection.rule, "locking-clause", "{rejection}");
        assert!(rejection.message.contains(lock), "{rejection}");
    }
    refused(
        "SELECT * FROM t FOR UPDATE OF t SKIP LOCKED",
        "locking-clause",
    );
    refused(
        "SELECT * FROM (SELECT * FROM t FOR UPDATE) s",
        "locking-clause",
    );
    refused(
        "WITH l AS (SELECT * FROM t FOR SHARE) SELECT * FROM l",
        "locking-clause",
    );
    refused(
        "SELECT (SELECT a FROM t LIMIT 1 FOR UPDATE)",
        "locking-clause",
    );
}

#[test]
fn a_word_opening_with_a_multibyte_character_is_no_panic() {
    // Found by tests/policy/fuzz_properties.rs: the `U&` check sliced the word's first two bytes,
    // inside U+202E.
    let _ = check("select lower('x'), cont(*)\u{202e} from t group by");
    let _ = check("select \u{202e}x");
    accepted("select 1 as \"\u{202e}x\"");
}

#[test]
fn a_double_quoted_name_read_as_a_string_is_refused() {
    let only_t = SqlOptions {
        allow_relations: Some(vec![QualifiedName::parse("t").unwrap()]),
        ..SqlOptions::default()
    };
    for sql in [
        r#"select (table "secrets")"#,
        r#"select 1 from t where exists (select (table "secrets"))"#,
        r#"select int "secrets""#,
    ] {
        let message = refused_with(sql, &only_t, "quoted-name-as-string");
        assert!(message.contains("\"secrets\""), "{message}");
    }
    // Quoted names where sqlparser reads them as names stay as they were.
    accepted(r#"select "a" from "t""#);
    accepted("select 'a string', E'x', $$y$$");
}

#[test]
fn denied_functions_anywhere_in_the_tree() {
    let message = refused("SELECT pg_read_file('/etc/passwd')", "denied-function");
    assert!(
        message.contains("pg_read_file") && message.contains("pg_read*"),
        "{message}"
    );
    assert!(message.contains("column 8"), "{message}");
    for sql in [
        "SELECT PG_READ_FILE('/etc/passwd')",
        "SELECT pg_catalog.pg_read_file('/etc/passwd')",
        "SELECT \"pg_read_file\"('/etc/passwd')",
        "SELECT pg_read_binary_file('/etc/passwd')",
        "SELECT * FROM pg_ls_dir('/')",
        "SELECT * FROM pg_catalog.pg_ls_dir('/') AS f(name)",
        "SELECT * FROM t, LATERAL pg_ls_dir(t.path) d",
        "SELECT * FROM t WHERE a IN (SELECT lo_import('/etc/passwd'))",
        "SELECT EXISTS (SELECT 1 FROM t WHERE pg_terminate_backend(t.pid))",
        "WITH x AS (SELECT set_config('default_transaction_read_only', 'off', false)) SELECT * FROM x",
        "SELECT set_config('x', 'y', false)",
        "SELECT * FROM t ORDER BY pg_sleep(10)",
        "SELECT a FROM t GROUP BY a HAVING count(*) > pg_cancel_backend(1)::int",
        "SELECT dblink_connect('host=evil')",
        "SELECT * FROM dblink('host=x', 'select 1') AS r(a int)",
        "SELECT lo_export(1, '/tmp/x')",
        "SELECT query_to_xml('delete from t', true, true, '')",
        "SELECT nextval('s')",
        "SELECT txid_current()",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_notify('c', 'x')",
        "SELECT CASE WHEN true THEN pg_reload_conf() END",
        "SELECT coalesce(NULL, pg_stat_reset()::text)",
        "SELECT array_agg(x ORDER BY pg_sleep_for('1s')) FROM t",
        "VALUES (pg_read_file('x'))",
        "SELECT pg_create_logical_replication_slot('s', 'test_decoding')",
        "SELECT 1 FROM t WHERE x = ANY(ARRAY[setval('s', 1)])",
        "SELECT pg_read_file /* sneaky */ ('/etc/passwd')",
    ] {
        refused(sql, "denied-function");
    }
}

#[test]
fn ast_layer_alone_catches_denied_functions_in_every_position() {
    let rules = NameRules::new(&SqlOptions::default());
    for sql in [
        "SELECT pg_catalog.pg_read_file('/etc/passwd')",
        "SELECT * FROM pg_ls_dir('/') AS d",
        "SELECT * FROM t, LATERAL pg_ls_dir(t.path) d",
        "SELECT * FROM (SELECT lo_import('/x')) s",
        "WITH x AS (SELECT set_config('a', 'b', false)) SELECT * FROM x",
        "SELECT * FROM t ORDER BY pg_sleep(1)",
        "SELECT * FROM t WHERE EXISTS (SELECT dblink('x', 'y'))",
        "SELECT sum(a) FILTER (WHERE pg_cancel_backend(a)) FROM t",
        "VALUES (nextval('s'))",
        "EXPLAIN SELECT pg_stat_file('/etc/passwd')",
    ] {
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let outcome = statements[0].visit(&mut ShapeChecker::new(&rules, &statements[0]));
        match outcome {
            ControlFlow::Break(rejection) => {
                assert_eq!(rejection.rule, "denied-function", "{sql}: {rejection}")
            }
            ControlFlow::Continue(()) => panic!("the AST walk missed the call in {sql:?}"),
        }
    }
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let depth = 4000;
    let sql = format!("SELECT {}1{}", "(".repeat(depth), ")".repeat(depth));
    refused(&sql, "parse");
}

#[test]
fn extra_denied_functions_from_options() {
    let opts = SqlOptions {
        deny_functions: vec!["md5".to_owned(), "http_*".to_owned()],
        ..SqlOptions::default()
    };
    let message = refused_with("SELECT MD5('x')", &opts, "denied-function");
    assert!(message.contains("md5"), "{message}");
    refused_with("SELECT http_get('http://x')", &opts, "denied-function");
    assert_eq!(validate("SELECT md5sum FROM t", &opts), Ok(()));
    accepted("SELECT md5('x')");
}

#[test]
fn lexer_layer_catches_calls_the_parser_never_sees_as_calls() {
    let denylist = Denylist::new(&[]);
    let sql = "SELECT x FROM t WHERE pg_ls_dir\n(\n'/')";
    let tokens = lex(sql, StringMode::Conforming).unwrap();
    let rejection = check_call_tokens(sql, &tokens, &denylist).unwrap_err();
    assert_eq!(rejection.rule, "denied-function");
    assert!(
        rejection.message.contains("line 1, column 23"),
        "{}",
        rejection.message
    );
    let tokens = lex(
        "SELECT 'pg_ls_dir(' , pg_lsn('0/0')",
        StringMode::Conforming,
    )
    .unwrap();
    assert_eq!(check_call_tokens("", &tokens, &denylist), Ok(()));
}

/// The kinds of the tokens of `sql` in the conforming reading.
fn token_kinds(sql: &str) -> Vec<TokenKind> {
    let tokens = lex(sql, StringMode::Conforming).unwrap();
    tokens.into_iter().map(|token| token.kind).collect()
}

#[test]
fn lexer_tokens() {
    assert_eq!(
        token_kinds("SELECT a$b, $1, E'x', U&\"q\"("),
        vec![
            TokenKind::Word("select".to_owned()),
            TokenKind::Word("a$b".to_owned()),
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Word("q".to_owned()),
            TokenKind::OpenParen,
        ]
    );
    // Only `U&` opens a Unicode literal: `a&'y'` is a name, an operator and a string.
    assert_eq!(
        token_kinds("SELECT U&'x', a&'y', u&\"z\""),
        vec![
            TokenKind::Word("select".to_owned()),
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Word("a".to_owned()),
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Word("z".to_owned()),
        ]
    );
    // The server refuses U&'…' when standard_conforming_strings is off, and so does the
    // legacy reading; with it on, the literal is an ordinary string.
    let refusal = lex("SELECT U&'x'", StringMode::Legacy).unwrap_err();
    assert_eq!(refusal.rule, "parse", "{refusal}");
    accepted(r"SELECT U&'d\0061t\+000061'");
    // A dollar-quoted string is one token, and lexing goes on right after its closing tag.
    assert_eq!(
        token_kinds("SELECT $q$ a $q$, $$b$$ x("),
        vec![
            TokenKind::Word("select".to_owned()),
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Other,
            TokenKind::Word("x".to_owned()),
            TokenKind::OpenParen,
        ]
    );
}

#[test]
fn positions_count_characters_on_their_line() {
    assert_eq!(Position::of("ab\ncé\\", 6), Position { line: 2, column: 3 });
    let message = refused("SELECT 'é'\n   \\!", "backslash");
    assert!(message.contains("line 2, column 4"), "{message}");
}

#[test]
fn unicode_identifiers_are_decoded_as_the_server_does() {
    assert_eq!(
        decode_unicode_escapes(r"pg\005Fsleep", '\\').unwrap(),
        "pg_sleep"
    );
    assert_eq!(
        decode_unicode_escapes(r"d\0061t\+000061", '\\').unwrap(),
        "data"
    );
    assert_eq!(decode_unicode_escapes(r"a\\b", '\\').unwrap(), r"a\b");
    assert_eq!(
        decode_unicode_escapes("pg!005Fsleep!!", '!').unwrap(),
        "pg_sleep!"
    );
    assert_eq!(decode_unicode_escapes(r"\D83D\DE00", '\\').unwrap(), "😀");
    for bad in [
        r"\0000",
        r"\D83D",
        r"\DE00x",
        r"\12",
        r"\+11FFFF",
        r"\D83Dx",
    ] {
        assert!(decode_unicode_escapes(bad, '\\').is_err(), "{bad}");
    }
    for sql in [
        r#"select U&"pg\005Fsleep"(3)"#,
        r#"select u&"PG\005FSLEEP"(3)"#,
        r#"select U&"pg!005Fsleep" UESCAPE '!' (3)"#,
        "select U&\"pg!005Fsleep\" /* c */ uescape -- c\n '!' (3)",
        r#"select U&"pg\+00005Fsleep"(3)"#,
        r#"select * from pg_catalog.U&"pg\005Fsleep"(3)"#,
        r#"select U&"query\005Fto\005Fxml"('select 1', true, true, '')"#,
    ] {
        let message = refused(sql, "denied-function");
        assert!(
            message.contains("pg_sleep") || message.contains("query_to_xml"),
            "{message}"
        );
    }
    refused(r#"select U&"x" UESCAPE 'a' (1)"#, "unicode-escape");
    refused(r#"select U&"x" UESCAPE '!!' (1)"#, "unicode-escape");
    refused(r#"select U&"x\00" (1)"#, "unicode-escape");
    accepted(r#"select U&"\0075pper"('ok')"#);
    // A line comment that runs to the end of the text, right after the identifier or the
    // keyword: the scan stops at the end (it once could read one byte past it).
    accepted("select U&\"\\0075pper\"('ok') --");
    accepted("select 1 as U&\"x\" -- trailing comment");
    refused("select U&\"x\" UESCAPE --", "unicode-escape");
}

#[test]
fn the_parser_sees_unicode_identifiers_as_plain_quoted_ones() {
    let sql = r#"select U&"a""b\0063" UESCAPE '\' , U&"x" from t"#;
    let tokens = lex(sql, StringMode::Conforming).unwrap();
    assert_eq!(parser_text(sql, &tokens), r#"select "a""bc" , "x" from t"#);
}

#[test]
fn identifiers_are_folded_and_truncated_like_the_server_does() {
    assert_eq!(normalize_identifier("PG_Sleep", false), "pg_sleep");
    assert_eq!(normalize_identifier("PG_Sleep", true), "PG_Sleep");
    assert_eq!(
        normalize_identifier("ÉTÉ", false),
        "ÉtÉ",
        "only ASCII letters are folded"
    );
    let long = format!("{}zzz", "a".repeat(62));
    assert_eq!(normalize_identifier(&long, false).len(), 63);
    // A character across the 63rd byte is dropped whole, as the server's pg_mbcliplen does.
    let straddling = format!("{}é", "a".repeat(62));
    assert_eq!(normalize_identifier(&straddling, false), "a".repeat(62));
    let opts = SqlOptions {
        deny_functions: vec!["a".repeat(63)],
        ..SqlOptions::default()
    };
    refused_with(
        &format!("select {}xyz(1)", "a".repeat(63)),
        &opts,
        "denied-function",
    );
}

#[test]
fn qualified_names_parse_like_sql() {
    let parse = |text: &str| QualifiedName::parse(text).map(|name| name.0);
    assert_eq!(parse("Users").unwrap(), ["users"]);
    assert_eq!(parse(r#"Public."My""T""#).unwrap(), ["public", r#"My"T"#]);
    assert_eq!(parse("db.s.t").unwrap(), ["s", "t"]);
    for bad in [
        "",
        "a b",
        "1t",
        r#""unterminated"#,
        "a.",
        r#""""#,
        "a.b.c.d",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn credential_catalogs_are_refused_by_both_layers() {
    for sql in [
        "SELECT rolpassword FROM pg_authid",
        "select * from PG_CATALOG.pg_shadow",
        r#"select * from U&"pg\005Fauthid""#,
        "select 1 from t where exists (select 1 from pg_user_mappings)",
    ] {
        refused(sql, "denied-relation");
    }
    let rules = NameRules::new(&SqlOptions::default());
    for sql in [
        "SELECT rolpassword FROM pg_authid",
        "SELECT * FROM t, (SELECT * FROM pg_catalog.pg_shadow) s",
        "TABLE pg_authid",
    ] {
        let statements = parse(sql, sql.starts_with("TABLE")).unwrap();
        match statements[0].visit(&mut ShapeChecker::new(&rules, &statements[0])) {
            ControlFlow::Break(rejection) => assert_eq!(rejection.rule, "denied-relation"),
            ControlFlow::Continue(()) => panic!("the AST walk missed {sql:?}"),
        }
    }
    let tokens = lex("select 1 as pg_authid", StringMode::Conforming).unwrap();
    assert_eq!(
        check_name_tokens("select 1 as pg_authid", &tokens, &rules)
            .unwrap_err()
            .rule,
        "denied-relation"
    );
}

/// A `deny_relations` entry refuses its name in every schema and in any position (the word
/// layer sees a bare name, which the search path could resolve to the entry), and the refusal
/// names the entry as the operator wrote it.
#[test]
fn a_denied_relation_is_refused_in_any_schema_and_named_by_its_entry() {
    let opts = SqlOptions {
        deny_relations: vec![QualifiedName::parse("HR.Salaries").unwrap()],
        ..SqlOptions::default()
    };
    for sql in [
        "SELECT * FROM hr.salaries",
        "SELECT * FROM salaries",
        "SELECT * FROM finance.SALARIES",
        "SELECT 1 AS salaries",
    ] {
        let message = refused_with(sql, &opts, "denied-relation");
        assert!(message.contains("`hr.salaries`"), "{sql}: {message}");
    }
    assert_eq!(validate("SELECT * FROM hr.wages", &opts), Ok(()));
}

#[test]
fn allow_relations_admit_only_listed_relations_and_visible_ctes() {
    let opts = SqlOptions {
        allow_relations: Some(vec![
            QualifiedName::parse("t").unwrap(),
            QualifiedName::parse("reports.daily").unwrap(),
        ]),
        ..SqlOptions::default()
    };
    for sql in [
        "select * from t",
        "select * from reports.daily d join t on t.id = d.id",
        "with x as (select * from t) select * from x",
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select * from r",
        "with a as (select 1), b as (select * from a) select * from b",
        "select * from (with s as (select * from t) select * from s) q",
    ] {
        if let Err(rejection) = validate(sql, &opts) {
            panic!("{sql:?}: {rejection}");
        }
    }
    for sql in [
        "select * from secrets",
        "select * from public.t",
        "select * from daily",
        "select * from t where id in (select id from secrets)",
        // A CTE name does not reach outside its query, nor (without RECURSIVE) back to
        // an earlier sibling.
        "select * from (with secrets as (select 1) select * from secrets) a, secrets",
        "with a as (select * from b), b as (select 1) select * from a",
        "table secrets",
        // A `TABLE` leaf on either side of a set operation.
        "select 1 from t union table secrets",
        "table secrets union select 1 from t",
        "select 1 from t intersect table secrets",
        "values (1) except table secrets",
        "select 1 from t where exists (table secrets)",
        "select 1 from t union table \"SECRETS\"",
    ] {
        refused_with(sql, &opts, "relation-not-allowed");
    }
}

#[test]
fn denied_columns_refuse_the_name_and_everything_that_reads_all_columns() {
    let opts = SqlOptions {
        deny_columns: vec!["password_hash".into()],
        ..SqlOptions::default()
    };
    for sql in [
        "select password_hash from users",
        r#"select "PASSWORD_HASH" from users"#,
        r#"select U&"password\005Fhash" from users"#,
        "select id from users join v using (password_hash)",
        "select * from users",
        "select u.* from users u",
        "select row_to_json(u) from users u",
        "select to_jsonb(users) ->> 'password_hash' from users",
        "select users from users",
        "select count(public.users) from public.users",
        "select json_agg(u.*) from users u",
        "select id from users natural join v",
        "table users",
        "select 1 union table users",
        // A whole row as a value: cast to text, in an array, in a condition.
        "select (u.*)::text from users u",
        "select array[u.*] from users u",
        "select 1 from users u where (u.*) is not null",
        "select u::text from users u",
        "select format('%s', u.*) from users u",
        "select x from (select * from users) s(x)",
        "select 1 from users u group by u.*",
    ] {
        refused_with(sql, &opts, "denied-column");
    }
    for sql in [
        "select id, name from users",
        "select count(*) from users u where u.id > 1",
    ] {
        if let Err(rejection) = validate(sql, &opts) {
            panic!("{sql:?}: {rejection}");
        }
    }
}

#[test]
fn show_and_explain_analyze_need_an_opt_in() {
    refused("SHOW work_mem", "statement-kind");
    refused("EXPLAIN ANALYZE SELECT 1", "explain-analyze");
    let opts = SqlOptions {
        allow: vec![SqlKind::Select, SqlKind::Show, SqlKind::ExplainAnalyze],
        ..SqlOptions::default()
    };
    for sql in [
        "SHOW work_mem",
        "show all",
        "EXPLAIN ANALYZE SELECT * FROM t",
        "EXPLAIN (ANALYZE, BUFFERS) SELECT 1",
    ] {
        if let Err(rejection) = validate(sql, &opts) {
            panic!("{sql:?}: {rejection}");
        }
    }
    refused_with("EXPLAIN SELECT 1", &opts, "not-allowed-kind");
    refused_with("EXPLAIN ANALYZE DELETE FROM t", &opts, "statement-kind");
    refused_with(
        "EXPLAIN ANALYZE SELECT pg_sleep(1)",
        &opts,
        "denied-function",
    );
    refused_with(
        "EXPLAIN ANALYZE SELECT * FROM pg_authid",
        &opts,
        "denied-relation",
    );
    refused_with("SHOW work_mem; SELECT 1", &opts, "statement-count");
}
