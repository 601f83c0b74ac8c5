//! The `sql` validator against PostgreSQL's own parser (libpg_query, through the `pg_query`
//! crate): every query the validator accepts must be, to PostgreSQL's parser, exactly one
//! read-only statement that calls no denied function, reads no denied relation, no relation
//! outside `allow_relations` and no denied column. Any accepted query where the two disagree is
//! a bypass (the validator reads one query, the server runs another).
//!
//! Inputs: the read-only corpus, the hostile spellings of the other SQL tests, and queries
//! generated from a small grammar of the spellings that matter (quoted, `U&`-escaped,
//! schema-qualified and case-folded names; typed strings; `TABLE` in every position; nested
//! subqueries, CTEs, comments and dollar quotes). `VERBD_SQL_DIFF_QUERIES` sets how many are
//! generated (default 20,000; a long run uses millions) and `VERBD_SQL_DIFF_SEED` the seed.
//! Queries PostgreSQL cannot parse while the validator accepts them are counted, not failed:
//! the server would refuse them whole.
//!
//! A second oracle runs what the validator accepts on a real PostgreSQL server
//! (`accepted_queries_neither_write_nor_reach_a_denied_function_on_postgres`).
use crate::pg;
use crate::sql_corpus;

use pg_query::NodeRef;
use pg_query::protobuf::node::Node as NodeEnum;
use verbd::policy::sql::{
    BUILTIN_DENIED_FUNCTIONS, BUILTIN_DENIED_RELATIONS, QualifiedName, SqlOptions, validate,
};

/// The parameter shapes compared: the default, and one with `allow_relations` and
/// `deny_columns`.
fn option_sets() -> Vec<(&'static str, SqlOptions)> {
    vec![
        ("default", SqlOptions::default()),
        (
            "allow t, deny password_hash",
            SqlOptions {
                allow_relations: Some(vec![QualifiedName::parse("t").unwrap()]),
                deny_columns: vec!["password_hash".to_owned()],
                ..SqlOptions::default()
            },
        ),
    ]
}

fn denied_function(name: &str) -> Option<&'static str> {
    let last = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    BUILTIN_DENIED_FUNCTIONS
        .iter()
        .copied()
        .find(|entry| match entry.strip_suffix('*') {
            Some(prefix) => last.starts_with(prefix),
            None => last == *entry,
        })
}

/// What PostgreSQL's parser finds wrong with `sql` under `options`, if anything; `Err` when it
/// cannot parse it at all.
fn postgres_objections(sql: &str, options: &SqlOptions) -> Result<Vec<String>, String> {
    let parsed = pg_query::parse(sql, pg_query::ParserOptions::default())
        .map_err(|error| error.to_string())?;
    let mut objections = Vec::new();
    if parsed.protobuf.stmts.len() != 1 {
        objections.push(format!("{} statements", parsed.protobuf.stmts.len()));
    }
    for kind in parsed.statement_types() {
        if !matches!(kind, "SelectStmt" | "ExplainStmt") {
            objections.push(format!("statement {kind}"));
        }
    }
    let cte_names: Vec<String> = parsed.cte_names.clone();
    for (node, _, _, _) in parsed.protobuf.nodes() {
        match node {
            NodeRef::SelectStmt(select) => {
                if select.into_clause.is_some() {
                    objections.push("SELECT … INTO".to_owned());
                }
                if !select.locking_clause.is_empty() {
                    objections.push("a locking clause".to_owned());
                }
            }
            NodeRef::InsertStmt(_)
            | NodeRef::UpdateStmt(_)
            | NodeRef::DeleteStmt(_)
            | NodeRef::MergeStmt(_) => objections.push("a data-modifying statement".to_owned()),
            NodeRef::ExplainStmt(explain) => {
                for option in &explain.options {
                    if let Some(NodeEnum::DefElem(element)) = &option.node
                        && element.defname == "analyze"
                    {
                        objections.push("EXPLAIN ANALYZE".to_owned());
                    }
                }
            }
            NodeRef::FuncCall(call) => {
                let name: Vec<&str> = call
                    .funcname
                    .iter()
                    .filter_map(|part| match &part.node {
                        Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
                        _ => None,
                    })
                    .collect();
                let name = name.join(".");
                if let Some(entry) = denied_function(&name) {
                    objections.push(format!("function {name} (entry {entry})"));
                }
            }
            NodeRef::RangeVar(relation) => {
                let name = &relation.relname;
                if BUILTIN_DENIED_RELATIONS.contains(&name.as_str()) {
                    objections.push(format!("denied relation {name}"));
                }
                if options.allow_relations.is_some()
                    && !(relation.schemaname.is_empty()
                        && (name == "t" || cte_names.contains(name)))
                {
                    objections.push(format!(
                        "relation {}{name} outside allow_relations",
                        if relation.schemaname.is_empty() {
                            String::new()
                        } else {
                            format!("{}.", relation.schemaname)
                        }
                    ));
                }
            }
            NodeRef::ColumnRef(column) if !options.deny_columns.is_empty() => {
                for field in &column.fields {
                    match &field.node {
                        Some(NodeEnum::AStar(_)) => {
                            objections.push("a * that reads every column".to_owned())
                        }
                        Some(NodeEnum::String(s)) if options.deny_columns.contains(&s.sval) => {
                            objections.push(format!("denied column {}", s.sval))
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(objections)
}

/// Outcome of comparing one query under every option set.
#[derive(Default)]
struct Tally {
    queries: usize,
    accepted: usize,
    unparsable_but_accepted: usize,
    disagreements: Vec<String>,
}

impl Tally {
    fn compare(&mut self, sql: &str) {
        self.queries += 1;
        for (label, options) in option_sets() {
            if validate(sql, &options).is_err() {
                continue;
            }
            self.accepted += 1;
            match postgres_objections(sql, &options) {
                Ok(objections) if objections.is_empty() => {}
                Ok(objections) => self.disagreements.push(format!(
                    "accepted under [{label}] but PostgreSQL's parser sees {}: {sql:?}",
                    objections.join(", ")
                )),
                Err(_) => self.unparsable_but_accepted += 1,
            }
        }
    }

    #[track_caller]
    fn assert_agreed(&self, what: &str) {
        eprintln!(
            "{what}: {} queries, {} accepted verdicts, {} accepted but unparsable to PostgreSQL, {} disagreements",
            self.queries,
            self.accepted,
            self.unparsable_but_accepted,
            self.disagreements.len()
        );
        assert!(
            self.disagreements.is_empty(),
            "{what}: {} accepted queries PostgreSQL reads otherwise:\n{}",
            self.disagreements.len(),
            self.disagreements
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Spellings from the other SQL tests and the validator's own refusals: each compared as is.
const HOSTILE: &[&str] = &[
    r#"select (table "secrets")"#,
    r#"select (table "t")"#,
    r#"select 1 from t where exists (table "users")"#,
    r#"select U&"pg\005Fsleep"(1)"#,
    r#"select U&"!0070g_sleep" UESCAPE '!'(1)"#,
    r#"select "PG_SLEEP"(1)"#,
    r#"select pg_catalog.pg_sleep(1)"#,
    r#"select PG_CATALOG.PG_SLEEP(1)"#,
    "select * from pg_authid",
    r#"select * from U&"pg\005Fshadow""#,
    "select * from t for update",
    "select * from t for no key update of t",
    "select * into x from t",
    "with d as (delete from t returning *) select * from d",
    "explain analyze select 1",
    "explain (analyze) select 1",
    "explain (analyze false) select 1",
    "select query_to_xml('select 1', true, false, '')",
    "select password_hash from users",
    "select u.* from users u",
    "select row_to_json(u) from users u",
    "table users",
    "select 1; select 2",
    "select 1 /* ; */; -- x",
    "select $$;$$, $a$ $$ ; $a$",
    "select e'\\'; delete from t; --'",
    "select 'a' 'b'",
    "select int 'x'",
    r#"select int "x""#,
    r#"select date "t""#,
    "select (select 1 from users) from t",
    "with t as (select * from users) select * from t",
    "with recursive t as (select 1 union all select * from t) select * from t",
    "select * from t, lateral (select * from users) u",
    "select * from rows from (generate_series(1, 2))",
    "values (1), ((table users))",
    "select array(table users)",
    "select * from t natural join users",
    "select t from t",
    "select lo_import('/etc/passwd')",
    "select * from t where id = any (select pg_advisory_lock(1))",
];

#[test]
fn the_corpus_and_the_hostile_spellings_agree_with_postgres() {
    let mut tally = Tally::default();
    for record in sql_corpus::corpus_records() {
        tally.compare(&record);
    }
    for sql in HOSTILE {
        tally.compare(sql);
    }
    tally.assert_agreed("corpus and hostile spellings");
    assert!(
        tally.accepted > 100,
        "the corpus was accepted: {}",
        tally.accepted
    );
}

/// xorshift64*: a small deterministic generator (the seed is printed on failure).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const RELATIONS: &[&str] = &[
    "t",
    "users",
    "secrets",
    "pg_authid",
    "pg_shadow",
    "pg_largeobject",
];
const COLUMNS: &[&str] = &["id", "name", "password_hash", "t", "users", "x"];
const FUNCTIONS: &[&str] = &[
    "lower",
    "count",
    "now",
    "coalesce",
    "generate_series",
    "row_to_json",
    "pg_backend_pid",
    "current_setting",
    "pg_sleep",
    "pg_sleep_for",
    "lo_import",
    "lo_get",
    "pg_read_file",
    "pg_ls_dir",
    "set_config",
    "query_to_xml",
    "pg_advisory_lock",
    "pg_try_advisory_lock",
    "dblink",
    "nextval",
    "pg_notify",
    "pg_terminate_backend",
    "txid_current",
    "table_to_xml",
    "pg_promote",
];
const TYPES: &[&str] = &[
    "int", "text", "date", "table", "json", "xml", "interval", "bool",
];

/// A name as a query may spell it: plain, upper case, quoted, `U&`-escaped, qualified.
fn spell(rng: &mut Rng, name: &str) -> String {
    let escaped = |name: &str| -> String {
        name.chars()
            .map(|c| {
                if c == '_' || c == 'o' {
                    format!("\\{:04X}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    let base = match rng.below(6) {
        0 => name.to_ascii_uppercase(),
        1 => format!("\"{name}\""),
        2 => format!("U&\"{}\"", escaped(name)),
        3 => format!("U&\"{}\" UESCAPE '!'", escaped(name).replace('\\', "!")),
        _ => name.to_owned(),
    };
    match rng.below(8) {
        0 => format!("pg_catalog.{base}"),
        1 => format!("public.{base}"),
        _ => base,
    }
}

fn relation(rng: &mut Rng) -> String {
    let name = rng.pick(RELATIONS);
    spell(rng, name)
}

fn expr(rng: &mut Rng, depth: u32) -> String {
    let choice = if depth > 3 {
        rng.below(4)
    } else {
        rng.below(16)
    };
    match choice {
        0 => rng.below(100).to_string(),
        1 => rng
            .pick(&[
                "'a'",
                "E'\\''",
                "$$x$$",
                "$q$ ; $q$",
                "U&'\\0041'",
                "null",
                "true",
            ])
            .to_owned(),
        2 => {
            let column = rng.pick(COLUMNS);
            spell(rng, column)
        }
        3 => format!("{}.{}", rng.pick(&["t", "u", "users"]), rng.pick(COLUMNS)),
        4 | 5 => {
            let function = rng.pick(FUNCTIONS);
            let name = spell(rng, function);
            let args = (0..rng.below(3))
                .map(|_| expr(rng, depth + 1))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{name}({args})")
        }
        6 => format!("({})", query(rng, depth + 1)),
        7 => format!("(table {})", relation(rng)),
        8 => {
            let ty = rng.pick(TYPES);
            let quote = if rng.chance(50) { '"' } else { '\'' };
            let value = rng.pick(RELATIONS);
            format!("{ty} {quote}{value}{quote}")
        }
        9 => format!("exists ({})", query(rng, depth + 1)),
        10 => format!("array({})", query(rng, depth + 1)),
        11 => format!(
            "{} {} {}",
            expr(rng, depth + 1),
            rng.pick(&["+", "=", "||", "and", "is distinct from"]),
            expr(rng, depth + 1)
        ),
        12 => format!("{}::{}", expr(rng, depth + 1), rng.pick(TYPES)),
        13 => format!(
            "case when {} then {} end",
            expr(rng, depth + 1),
            expr(rng, depth + 1)
        ),
        14 => format!("{} /* c */", expr(rng, depth + 1)),
        _ => format!("({})", expr(rng, depth + 1)),
    }
}

fn from_item(rng: &mut Rng, depth: u32) -> String {
    match rng.below(7) {
        0 | 1 => {
            let name = relation(rng);
            if rng.chance(40) {
                format!("{name} u")
            } else {
                name
            }
        }
        2 => format!("({}) s", query(rng, depth + 1)),
        3 => format!("lateral ({}) l", query(rng, depth + 1)),
        4 => {
            let function = rng.pick(FUNCTIONS);
            format!("{}({}) f", spell(rng, function), expr(rng, depth + 1))
        }
        5 => format!(
            "{} {} {} on true",
            relation(rng),
            rng.pick(&["join", "left join", "natural join", "cross join"]),
            relation(rng)
        ),
        _ => format!("rows from ({}(1))", rng.pick(FUNCTIONS)),
    }
}

fn query(rng: &mut Rng, depth: u32) -> String {
    if depth > 4 {
        return "select 1".to_owned();
    }
    let mut sql = String::new();
    if rng.chance(15) {
        let name = rng.pick(&["t", "users", "c"]);
        sql.push_str(&format!("with {name} as ({}) ", query(rng, depth + 1)));
    }
    match rng.below(10) {
        0 => sql.push_str(&format!("table {}", relation(rng))),
        1 => sql.push_str(&format!("values ({})", expr(rng, depth + 1))),
        _ => {
            sql.push_str("select ");
            let items = 1 + rng.below(3);
            let list: Vec<String> = (0..items)
                .map(|_| {
                    if rng.chance(10) {
                        "*".to_owned()
                    } else {
                        expr(rng, depth + 1)
                    }
                })
                .collect();
            sql.push_str(&list.join(", "));
            if rng.chance(70) {
                sql.push_str(&format!(" from {}", from_item(rng, depth + 1)));
            }
            if rng.chance(30) {
                sql.push_str(&format!(" where {}", expr(rng, depth + 1)));
            }
            if rng.chance(5) {
                sql.push_str(rng.pick(&[
                    " for update",
                    " for share",
                    " into x",
                    " limit 1",
                    " order by 1",
                ]));
            }
        }
    }
    if depth == 0 {
        if rng.chance(5) {
            sql = format!("explain {sql}");
        }
        if rng.chance(5) {
            sql.push_str(rng.pick(&[";", "; select 1", " -- ;", ";\n"]));
        }
    }
    sql
}

#[test]
fn generated_queries_agree_with_postgres() {
    let count: usize = std::env::var("VERBD_SQL_DIFF_QUERIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("VERBD_SQL_DIFF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(25_481_508_257);
    let mut rng = Rng(seed | 1);
    let mut tally = Tally::default();
    for _ in 0..count {
        let sql = query(&mut rng, 0);
        tally.compare(&sql);
    }
    tally.assert_agreed(&format!("{count} generated queries, seed {seed}"));
    assert!(
        tally.accepted > count / 20,
        "too few accepted: {}",
        tally.accepted
    );
}

/// The login role the execution oracle runs accepted queries as: SELECT on the application's
/// tables and the statistics views (`pg_read_all_stats`, which the corpus's monitoring queries
/// read), no write privilege, no EXECUTE on any function of the denylist.
const ORACLE_ROLE: &str = "oracle";
/// The tables the oracle may read and whose contents must not change.
const ORACLE_TABLES: &[&str] = &[
    "t",
    "users",
    "orders",
    "order_items",
    "events",
    "jobs",
    "studies",
];

/// Prepare `pg` for the execution oracle: the application schema, [`ORACLE_ROLE`], and EXECUTE
/// on every function the denylist matches (and SELECT on every denied relation) revoked from
/// PUBLIC, so a denied call is the server's `insufficient_privilege`, not a silent success.
fn prepare_oracle(pg: &pg::PgCluster) {
    pg.setup(sql_corpus::APP_SCHEMA);
    let quoted = |names: Vec<&str>| {
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let exact = quoted(
        BUILTIN_DENIED_FUNCTIONS
            .iter()
            .filter(|e| !e.ends_with('*'))
            .copied()
            .collect(),
    );
    let prefixes = quoted(
        BUILTIN_DENIED_FUNCTIONS
            .iter()
            .filter_map(|e| e.strip_suffix('*'))
            .collect(),
    );
    let relations = quoted(BUILTIN_DENIED_RELATIONS.to_vec());
    pg.setup(&format!(
        "CREATE ROLE {ORACLE_ROLE} LOGIN;\n\
         GRANT SELECT ON {} TO {ORACLE_ROLE};\n\
         GRANT pg_read_all_stats TO {ORACLE_ROLE};\n\
         DO $$ DECLARE f regprocedure; r regclass; BEGIN\n\
           FOR f IN SELECT p.oid::regprocedure FROM pg_proc p\n\
             WHERE p.proname = ANY (ARRAY[{exact}]::text[])\n\
                OR EXISTS (SELECT 1 FROM unnest(ARRAY[{prefixes}]::text[]) AS x(prefix)\n\
                           WHERE starts_with(p.proname, x.prefix))\n\
           LOOP EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f); END LOOP;\n\
           FOR r IN SELECT to_regclass('pg_catalog.' || n) FROM unnest(ARRAY[{relations}]::text[]) AS n\n\
             WHERE to_regclass('pg_catalog.' || n) IS NOT NULL\n\
           LOOP EXECUTE format('REVOKE SELECT ON %s FROM PUBLIC', r); END LOOP;\n\
         END $$;",
        ORACLE_TABLES.join(", ")
    ));
}

/// What the oracle's tables, sequences and large objects hold: any write shows here.
fn server_state(pg: &pg::PgCluster) -> String {
    let mut parts: Vec<String> = ORACLE_TABLES
        .iter()
        .map(|table| {
            format!(
                "(SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM {table} x)"
            )
        })
        .collect();
    parts.push("(SELECT coalesce(string_agg(last_value::text, ',' ORDER BY sequencename), '') FROM pg_sequences)".to_owned());
    parts.push("(SELECT count(*)::text FROM pg_largeobject_metadata)".to_owned());
    let output = pg.psql(&[
        "-At",
        "-c",
        &format!("SELECT {}", parts.join(" || ' ' || ")),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Run `sql` as a SQL verb's psql does (one `-c`, every transaction read-only, statements
/// time-boxed), but as [`ORACLE_ROLE`]; the SQLSTATE of its error, if any.
fn run_as_oracle(pg: &pg::PgCluster, sql: &str) -> Option<String> {
    let socket = pg.socket_dir().display().to_string();
    let port = pg::PORT.to_string();
    let output = std::process::Command::new(pg::PSQL)
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=sqlstate",
        ])
        .args([
            "-h",
            &socket,
            "-p",
            &port,
            "-U",
            ORACLE_ROLE,
            "-d",
            pg::DATABASE,
        ])
        .args(["-c", sql])
        .env_clear()
        .env("PGOPTIONS", pg::READ_ONLY_PGOPTIONS)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run psql");
    if output.status.success() {
        return None;
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = stderr
        .lines()
        .find_map(|line| line.strip_prefix("ERROR:  "))
        .map(|rest| rest.chars().take(5).collect::<String>())
        .unwrap_or_else(|| format!("psql exit {}: {stderr}", output.status));
    Some(code)
}

/// SQLSTATEs no accepted query may cause: a write in a read-only transaction, and a privilege
/// the oracle lacks (a write, a denied function or a denied relation).
const FORBIDDEN_STATES: &[(&str, &str)] = &[
    (
        "25006",
        "read_only_sql_transaction (the query tried to write)",
    ),
    (
        "42501",
        "insufficient_privilege (a write, a denied function or a denied relation)",
    ),
];

/// The execution oracle: every query the validator accepts under the default options — the
/// corpus, the hostile spellings, and `VERBD_SQL_EXEC_QUERIES` generated ones (default 200) —
/// runs on a real PostgreSQL as a role with SELECT only and no EXECUTE on the denylist, in a
/// read-only transaction. None may fail with `read_only_sql_transaction` or
/// `insufficient_privilege`, and the tables, sequences and large objects must be unchanged
/// after all of them. Controls: a write, a denied function and an advisory lock run the same
/// way are each caught.
#[test]
fn accepted_queries_neither_write_nor_reach_a_denied_function_on_postgres() {
    let Some(pg) = pg::PgCluster::start() else {
        return;
    };
    prepare_oracle(&pg);
    for (control, expected) in [
        (
            "with d as (delete from t returning *) select * from d",
            "25006",
        ),
        ("select * from t for update", "25006"),
        ("select pg_sleep(0)", "42501"),
        ("select pg_advisory_lock(1)", "42501"),
        ("select lo_import('/etc/passwd')", "42501"),
        ("select * from pg_catalog.pg_file_settings", "42501"),
    ] {
        assert_eq!(
            run_as_oracle(&pg, control).as_deref(),
            Some(expected),
            "control {control:?}"
        );
    }
    assert_eq!(run_as_oracle(&pg, "select count(*) from users"), None);
    let before = server_state(&pg);

    let count: usize = std::env::var("VERBD_SQL_EXEC_QUERIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let seed: u64 = std::env::var("VERBD_SQL_DIFF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(25_481_508_257);
    let options = SqlOptions::default();
    let mut queries: Vec<String> = sql_corpus::corpus_records();
    queries.extend(HOSTILE.iter().map(|q| (*q).to_owned()));
    queries.retain(|q| validate(q, &options).is_ok());
    let fixed = queries.len();
    let mut rng = Rng(seed | 1);
    let mut tries = 0;
    while queries.len() < fixed + count && tries < count * 100 {
        tries += 1;
        let sql = query(&mut rng, 0);
        if validate(&sql, &options).is_ok() {
            queries.push(sql);
        }
    }
    let mut states: std::collections::BTreeMap<String, usize> = Default::default();
    let mut forbidden = Vec::new();
    for sql in &queries {
        let state = run_as_oracle(&pg, sql).unwrap_or_else(|| "ok".to_owned());
        if let Some((_, why)) = FORBIDDEN_STATES.iter().find(|(code, _)| *code == state) {
            forbidden.push(format!("{why}: {sql:?}"));
        }
        *states.entry(state).or_default() += 1;
    }
    let after = server_state(&pg);
    eprintln!(
        "execution oracle: {} accepted queries ({fixed} from the corpus and hostile spellings, seed {seed}), outcomes by SQLSTATE: {states:?}",
        queries.len()
    );
    assert!(
        forbidden.is_empty(),
        "accepted queries the server stopped:\n{}",
        forbidden.join("\n")
    );
    assert_eq!(
        before, after,
        "the accepted queries changed the server's data"
    );
    assert!(
        states.get("ok").copied().unwrap_or(0) > fixed / 2,
        "most of the corpus runs: {states:?}"
    );
}
