//! The `sql` parameter type: one read-only PostgreSQL query, checked before psql ever runs.
//!
//! Responsibility: decide whether a piece of SQL text supplied by an agent may be handed to
//! `psql -c` (or a native client) as a single read-only query. The validator is an *allowlist of
//! statement shapes*; PostgreSQL's own read-only transaction (`PGOPTIONS=-c
//! default_transaction_read_only=on`) and a read-only database role remain the primary
//! defence, this module is the layer in front of them.
//!
//! Invariants upheld by [`validate`] (each refusal names a stable rule id, see [`SqlRejection`]):
//! - `nul`: the text contains no NUL byte; `length`: it is at most `max_length` bytes.
//! - `backslash`: no backslash appears outside string literals, dollar-quoted strings, quoted
//!   identifiers and comments. psql treats such a backslash as a meta-command (`\!` runs a shell
//!   command, `\copy` writes files); `psql -c '\…'` executes one. The text is scanned by a small
//!   PostgreSQL-faithful lexer written here, independent of sqlparser's tokenizer.
//! - `ambiguous-string`: text that lexes into different tokens under
//!   `standard_conforming_strings=off` (a backslash right before a quote in a plain `'…'`
//!   literal moves its end) is refused, so the server can never see code where the validator
//!   saw a string. Text whose legacy reading does not lex at all (e.g. `ESCAPE '\'` at the
//!   end) is fine: such a server would reject it whole.
//! - `unterminated`: every string, quoted identifier, dollar quote and comment is closed.
//! - `unicode-escape`: a `U&"…"` identifier (with an optional `UESCAPE 'c'`) decodes as the
//!   server decodes it. **Names are compared as the server resolves them**: `U&` escapes
//!   decoded, unquoted names folded to lower case (ASCII letters only), quoted names kept,
//!   both cut to 63 bytes ([`normalize_identifier`]). sqlparser does not know `U&"…"` (it
//!   reads `U&"pg\005Fsleep"(3)` as `U & "pg\005Fsleep"(3)`), so it is given the text with each
//!   such identifier rewritten as the plain quoted identifier it stands for.
//! - `statement-count`: exactly one statement; one trailing `;` is accepted. Checked both by the
//!   lexer (any `;` followed by more code) and by the parser.
//! - `parse`: the text parses with sqlparser's PostgreSQL dialect.
//! - `statement-kind`: the statement is a query (`SELECT`, `WITH … SELECT`, `VALUES`, `TABLE`,
//!   set operations of those) or `EXPLAIN` of a query. Everything else — COPY, SET, DO, CALL,
//!   transaction control, LISTEN/NOTIFY, PREPARE/EXECUTE, DDL, DML — is refused, wherever it
//!   appears in the tree. The lexer first requires the leading word (after any `(`) to be
//!   SELECT, WITH, VALUES, TABLE or EXPLAIN; the AST decides the rest.
//! - `not-allowed-kind`: the query's kind (see [`SqlKind`]) is in the parameter's `allow` list.
//!   A set operation needs every operand's kind allowed; `EXPLAIN` needs only `explain`.
//! - `explain-analyze`: `EXPLAIN ANALYZE` / `EXPLAIN (ANALYZE …)` executes the statement and is
//!   refused, whatever the option's value, unless the parameter allows `explain-analyze`; then
//!   the statement inside must pass every other rule. `SHOW name` / `SHOW ALL` likewise needs
//!   `show` in `allow`.
//! - `data-modifying-cte`: no `INSERT`/`UPDATE`/`DELETE`/`MERGE` inside `WITH`.
//! - `quoted-name-as-string`: no double-quoted token that sqlparser read as a string value (it
//!   takes `(table "t")` for the typed string `TABLE "t"`); to PostgreSQL a double-quoted token
//!   is only ever a name (there, the subquery `(TABLE t)`), so the validator would not see the
//!   relation the server reads.
//! - `select-into`: no `SELECT … INTO` (it creates a table).
//! - `locking-clause`: no `FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE`, at any depth
//!   (checked on the token stream, which also covers the forms sqlparser cannot parse, and on
//!   every query node of the AST).
//! - `denied-function`: no call to a function on the denylist ([`BUILTIN_DENIED_FUNCTIONS`] plus
//!   the parameter's `deny_functions`), matched on the last name part, case-insensitively, at any
//!   depth of the AST (select list, FROM/LATERAL table functions, subqueries, CTEs, ORDER BY, …)
//!   and, as a second independent layer, on the lexer's token stream (`name (`).
//! - `denied-relation`: no reference to a relation on [`BUILTIN_DENIED_RELATIONS`] (credential
//!   catalogs) or the parameter's `deny_relations`, in any position (FROM, JOIN, subqueries,
//!   CTEs, `TABLE name`); as a second layer, a denied name may not appear as any word.
//! - `relation-not-allowed`: with `allow_relations`, every relation read is on it (a CTE name
//!   counts only where the server would resolve it to the CTE: inside its query, after its
//!   definition unless RECURSIVE).
//! - `denied-column`: a column on `deny_columns` may not appear as any word; nor may anything
//!   that reads every column (`*`, `t.*`, `f(t.*)`, `TABLE t`, a whole-row reference such as
//!   `row_to_json(t)`, `NATURAL` joins).
//!
//! Order: nul, length, lexical rules (backslash, unterminated, unicode-escape,
//! ambiguous-string, statement-count, leading keyword, locking tokens), parse, top-level shape
//! (statement-kind, explain-analyze, not-allowed-kind), AST walk, lexer-level function calls,
//! lexer-level relation and column names. The first failing rule is reported.
//!
//! Phases, one module each, in the order [`validate`] runs them (the way a compiler splits a
//! frontend from its checks): `lex` (PostgreSQL's own reading of the text: tokens, names as the
//! server resolves them, the one comment scanner), `tokens` (the rules read on the tokens),
//! `shape` (sqlparser's tree: its top level, then every node), with `names` (the function,
//! relation and column rules both readings consult); `tests` holds the unit tests.
//!
//! Caveats the caller must handle: `PGOPTIONS=-c default_transaction_read_only=on` is only a
//! default — `BEGIN READ WRITE; …` in a multi-statement string overrides it (tests/sql/pg_harness.rs
//! shows it), so the single-statement rule here and a read-only database role are both
//! needed. User-defined functions and views can do anything their owner allows: the role must
//! be read-only. Use a UTF-8 client encoding (`PGCLIENTENCODING=UTF8`).

#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

mod lex;
mod names;
mod shape;
#[cfg(test)]
mod tests;
mod tokens;

pub use lex::{NAMEDATALEN_MAX, normalize_identifier};
use lex::{StringMode, is_ident_continue, is_ident_start, lex, parser_text, scan_quoted};
use names::NameRules;
use tokens::{
    check_call_tokens, check_leading_keyword, check_locking_tokens, check_name_tokens,
    check_single_statement, check_string_mode_independent,
};

/// Default cap on the length of one query, in bytes.
pub const DEFAULT_MAX_LENGTH: usize = 16_384;

/// Functions refused in any query, matched on the last part of the (possibly schema-qualified)
/// name as the server resolves it (U& escapes decoded, unquoted names folded) and then without
/// regard to ASCII case. An entry ending in `*` matches every name with that prefix.
///
/// Why each group is here:
/// - server file access: `pg_read_file`, `pg_read_binary_file`, `pg_stat_file`, `pg_ls_*`
///   directory listings (`pg_ls_dir`, `pg_ls_logdir`, `pg_ls_waldir`, `pg_ls_tmpdir`,
///   `pg_ls_archive_statusdir`, … — the prefix is `pg_ls_` so the `pg_lsn` type stays usable),
///   adminpack's `pg_file_*` and `pg_logdir_ls`;
/// - large objects (import/export server files, write storage): `lo_*`, `loread`, `lowrite`;
/// - other servers: `dblink*`;
/// - other sessions and the server process: `pg_terminate_backend`, `pg_cancel_backend`,
///   `pg_reload_conf`, `pg_rotate_logfile*`, `pg_log_backend_memory_contexts`, `pg_promote`;
/// - configuration: `set_config` (changes session settings, e.g. the read-only default);
/// - WAL, backup and replication: `pg_switch_wal`, `pg_switch_xlog`, `pg_create_*`
///   (restore points, replication slots), `pg_drop_*`, `pg_copy_*`, `pg_start_backup`,
///   `pg_backup_start`, `pg_stop_backup`, `pg_backup_stop`, `pg_wal_replay_*`,
///   `pg_xlog_replay_*`, `pg_logical_*` (emit messages, consume slots),
///   `pg_replication_origin_*`, `pg_replication_slot_advance`, `pg_sync_replication_slots`,
///   `pg_log_standby_snapshot`;
/// - statistics resets: `pg_stat_reset*`, `pg_stat_statements_reset`;
/// - waiting and locking (denial of service): `pg_sleep*`, `pg_advisory_*`,
///   `pg_try_advisory_*`;
/// - running SQL hidden in a string, out of the validator's sight (PostgreSQL 15 docs 9.15.4
///   "Mapping Tables to XML", 12.4 text search, Appendix F): `query_to_xml*` (three variants),
///   `cursor_to_xml*` (fetch from any open cursor), `ts_stat`, `ts_rewrite`, tablefunc's
///   `crosstab*` and `connectby`, xml2's `xpath_table` (builds a query from its arguments),
///   and `dblink*` above (a new session the read-only default does not reach);
/// - reading whole relations named by a string, past the relation rules:
///   `table_to_xml*`, `schema_to_xml*`, `database_to_xml*` (dump every readable table), and
///   pageinspect's `get_raw_page` (raw pages of any relation);
/// - sequences and transaction ids (state changes): `nextval`, `setval`, `txid_current` and
///   `pg_current_xact_id` (they assign a transaction id). `currval`, `lastval` and the
///   `*_if_assigned` / snapshot functions only read and stay allowed;
/// - notifications: `pg_notify`;
/// - catalog writes and upgrade internals: `pg_import_system_collations`, `binary_upgrade_*`.
///
/// Core PostgreSQL has no SQL-callable COPY function (COPY is a statement, refused by the
/// `statement-kind` rule); `pg_copy_*` above are the replication-slot copies.
pub const BUILTIN_DENIED_FUNCTIONS: &[&str] = &[
    "pg_read*",
    "pg_stat_file",
    "pg_ls_*",
    "pg_file_*",
    "pg_logdir_ls",
    "lo_*",
    "loread",
    "lowrite",
    "dblink*",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile*",
    "pg_log_backend_memory_contexts",
    "pg_promote",
    "set_config",
    "pg_switch_wal",
    "pg_switch_xlog",
    "pg_create_*",
    "pg_drop_*",
    "pg_copy_*",
    "pg_start_backup",
    "pg_backup_start",
    "pg_stop_backup",
    "pg_backup_stop",
    "pg_wal_replay_*",
    "pg_xlog_replay_*",
    "pg_logical_*",
    "pg_replication_origin_*",
    "pg_replication_slot_advance",
    "pg_sync_replication_slots",
    "pg_log_standby_snapshot",
    "pg_stat_reset*",
    "pg_stat_statements_reset",
    "pg_sleep*",
    "pg_advisory_*",
    "pg_try_advisory_*",
    "query_to_xml*",
    "cursor_to_xml*",
    "table_to_xml*",
    "schema_to_xml*",
    "database_to_xml*",
    "xpath_table",
    "get_raw_page",
    "ts_stat",
    "ts_rewrite",
    "crosstab*",
    "connectby",
    "nextval",
    "setval",
    "txid_current",
    "pg_current_xact_id",
    "pg_notify",
    "pg_import_system_collations",
    "binary_upgrade_*",
];

/// The statement shapes a `sql` parameter can allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqlKind {
    /// `SELECT …`, `WITH … SELECT …`, and set operations with a `SELECT` operand.
    Select,
    /// `EXPLAIN` (without `ANALYZE`) of a query.
    Explain,
    /// `VALUES (…)`.
    Values,
    /// `TABLE name`.
    Table,
    /// `SHOW name` / `SHOW ALL`: reads settings. Only by opt-in.
    Show,
    /// `EXPLAIN ANALYZE` of a validated query: runs it. Only by opt-in.
    ExplainAnalyze,
}

impl SqlKind {
    /// The default `allow` list: the four query shapes.
    pub const DEFAULT: [SqlKind; 4] = [
        SqlKind::Select,
        SqlKind::Explain,
        SqlKind::Values,
        SqlKind::Table,
    ];

    /// Every kind a policy can name.
    pub const ALL: [SqlKind; 6] = [
        SqlKind::Select,
        SqlKind::Explain,
        SqlKind::Values,
        SqlKind::Table,
        SqlKind::Show,
        SqlKind::ExplainAnalyze,
    ];

    /// The name used in policy files.
    pub fn name(self) -> &'static str {
        match self {
            SqlKind::Select => "select",
            SqlKind::Explain => "explain",
            SqlKind::Values => "values",
            SqlKind::Table => "table",
            SqlKind::Show => "show",
            SqlKind::ExplainAnalyze => "explain-analyze",
        }
    }
}

impl fmt::Display for SqlKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy named a statement kind that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sql kind `{given}`; expected one of: select, explain, values, table, show, explain-analyze"
)]
pub struct UnknownSqlKind {
    /// The name as written in the policy.
    pub given: String,
}

impl FromStr for SqlKind {
    type Err = UnknownSqlKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SqlKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| UnknownSqlKind {
                given: s.to_owned(),
            })
    }
}

/// Relations refused in any query, whatever the policy says: the catalogs and views that hold
/// credentials or the server's authentication setup, matched on the relation name in any schema.
///
/// - `pg_authid`, `pg_shadow`: role password hashes;
/// - `pg_user_mapping`, `pg_user_mappings`: foreign-server user mappings (their options hold
///   the remote user's password);
/// - `pg_subscription`: logical replication subscriptions (`subconninfo` holds a connection
///   string, password included);
/// - `pg_hba_file_rules`, `pg_ident_file_mappings`, `pg_file_settings`: the server's
///   authentication and configuration files;
/// - `pg_statistic`, `pg_statistic_ext_data`: sampled values of every column of every table
///   (the reason the server restricts them; `pg_stats` is the filtered view);
/// - `pg_largeobject`: the content of every large object.
pub const BUILTIN_DENIED_RELATIONS: &[&str] = &[
    "pg_authid",
    "pg_shadow",
    "pg_user_mapping",
    "pg_user_mappings",
    "pg_subscription",
    "pg_hba_file_rules",
    "pg_ident_file_mappings",
    "pg_file_settings",
    "pg_statistic",
    "pg_statistic_ext_data",
    "pg_largeobject",
];

/// A (possibly schema-qualified) relation name as a policy writes it, normalized the way the
/// server resolves it: `users` → `["users"]`, `Public."Users"` → `["public", "Users"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QualifiedName(pub Vec<String>);

impl QualifiedName {
    /// Parses `name`, `schema.name` or `db.schema.name` (the database part is dropped: the
    /// server requires it to be the current database); each part unquoted (folded to lower
    /// case) or `"quoted"` (kept).
    pub fn parse(text: &str) -> Result<QualifiedName, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        loop {
            let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
                let close = scan_quoted(rest.as_bytes(), 0, b'"', false)
                    .ok_or_else(|| format!("`{text}`: unterminated quoted name"))?;
                let body = quoted[..close - 2].replace("\"\"", "\"");
                if body.is_empty() {
                    return Err(format!("`{text}`: empty quoted name"));
                }
                (normalize_identifier(&body, true), &rest[close..])
            } else {
                let len = rest
                    .bytes()
                    .take_while(|&byte| is_ident_continue(byte))
                    .count();
                let word = &rest[..len];
                if !word.bytes().next().is_some_and(is_ident_start) {
                    return Err(format!(
                        "`{text}` is not a relation name (write `name`, `schema.name` or `\"Quoted\"`)"
                    ));
                }
                (normalize_identifier(word, false), &rest[len..])
            };
            parts.push(part);
            match after.strip_prefix('.') {
                Some(next) => rest = next,
                None if after.is_empty() => break,
                None => return Err(format!("`{text}`: unexpected `{after}`")),
            }
        }
        if parts.len() > 3 {
            return Err(format!("`{text}` has more than three parts"));
        }
        let keep = parts.len().min(2);
        Ok(QualifiedName(parts.split_off(parts.len() - keep)))
    }

    fn name(&self) -> &str {
        self.0.last().map_or("", String::as_str)
    }

    fn schema(&self) -> Option<&str> {
        (self.0.len() == 2).then(|| self.0[0].as_str())
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// Per-parameter options of the `sql` type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlOptions {
    /// Statement kinds accepted. Default: [`SqlKind::DEFAULT`].
    pub allow: Vec<SqlKind>,
    /// Extra denied function names (lower-case; a trailing `*` is a prefix), added to
    /// [`BUILTIN_DENIED_FUNCTIONS`].
    pub deny_functions: Vec<String>,
    /// Extra denied relations, added to [`BUILTIN_DENIED_RELATIONS`]. A denied name may not
    /// appear in the query at all, as any identifier.
    pub deny_relations: Vec<QualifiedName>,
    /// When set, the only relations a query may read (CTE names aside). An unqualified entry
    /// admits only unqualified references; `schema.name` only references so qualified.
    pub allow_relations: Option<Vec<QualifiedName>>,
    /// Denied column names: they may not appear in the query at all, and neither may anything
    /// that reads every column (`*`, `t.*`, `TABLE t`, a whole-row reference, `NATURAL`).
    pub deny_columns: Vec<String>,
    /// Maximum length of the query text in bytes. Default [`DEFAULT_MAX_LENGTH`].
    pub max_length: usize,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            allow: SqlKind::DEFAULT.to_vec(),
            deny_functions: Vec::new(),
            deny_relations: Vec::new(),
            allow_relations: None,
            deny_columns: Vec::new(),
            max_length: DEFAULT_MAX_LENGTH,
        }
    }
}

/// Why a query was refused: a stable rule id and a message saying where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sql refused ({rule}): {message}")]
pub struct SqlRejection {
    /// Stable rule id: "nul", "length", "backslash", "ambiguous-string", "unterminated",
    /// "unicode-escape", "statement-count", "parse", "statement-kind", "not-allowed-kind",
    /// "explain-analyze", "data-modifying-cte", "quoted-name-as-string", "select-into",
    /// "locking-clause",
    /// "denied-function", "denied-relation", "relation-not-allowed", "denied-column".
    pub rule: &'static str,
    /// Human-readable detail naming the offending clause, function or position (line:col).
    pub message: String,
}

impl SqlRejection {
    pub(super) fn new(rule: &'static str, message: impl Into<String>) -> Self {
        SqlRejection {
            rule,
            message: message.into(),
        }
    }
}

/// Checks that `sql` is exactly one read-only query acceptable under `opts`.
pub fn validate(sql: &str, opts: &SqlOptions) -> Result<(), SqlRejection> {
    if let Some(offset) = sql.find('\0') {
        return Err(SqlRejection::new(
            "nul",
            format!("NUL byte at {}", Position::of(sql, offset)),
        ));
    }
    if sql.len() > opts.max_length {
        return Err(SqlRejection::new(
            "length",
            format!(
                "query is {} bytes, the limit is {}",
                sql.len(),
                opts.max_length
            ),
        ));
    }
    let rules = NameRules::new(opts);
    // The text as PostgreSQL lexes it, and the rules read on its tokens.
    let tokens = lex(sql, StringMode::Conforming)?;
    check_string_mode_independent(sql, &tokens)?;
    check_single_statement(sql, &tokens)?;
    let first_word = check_leading_keyword(sql, &tokens)?;
    check_locking_tokens(sql, &tokens)?;
    // The statement as sqlparser reads it: its top level, then every node.
    let statement = shape::parse_one(&parser_text(sql, &tokens), first_word == "table")?;
    shape::check_top_level(&statement, opts)?;
    shape::check_tree(&statement, &rules)?;
    // The names again on the tokens, independent of sqlparser.
    check_call_tokens(sql, &tokens, &rules.functions)?;
    check_name_tokens(sql, &tokens, &rules)
}

/// A 1-based line and column (in characters), for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    line: usize,
    column: usize,
}

impl Position {
    fn of(text: &str, offset: usize) -> Position {
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        Position {
            line,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

fn not_a_query(what: &str) -> SqlRejection {
    SqlRejection::new(
        "statement-kind",
        format!(
            "{what} is not allowed; only queries are (SELECT, WITH … SELECT, VALUES, TABLE, \
             EXPLAIN of a query)"
        ),
    )
}
