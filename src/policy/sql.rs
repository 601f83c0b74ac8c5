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
//! Caveats the caller must handle: `PGOPTIONS=-c default_transaction_read_only=on` is only a
//! default — `BEGIN READ WRITE; …` in a multi-statement string overrides it (tests/pg_harness.rs
//! shows it), so the single-statement rule here and a read-only database role are both
//! needed. User-defined functions and views can do anything their owner allows: the role must
//! be read-only. Use a UTF-8 client encoding (`PGCLIENTENCODING=UTF8`).

#![forbid(unsafe_code)]

use std::fmt;
use std::ops::ControlFlow;
use std::str::FromStr;

use sqlparser::ast::{
    DescribeAlias, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr,
    Statement, TableFactor, ValueWithSpan, Visit, Visitor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token as ParserToken;

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
    fn new(rule: &'static str, message: impl Into<String>) -> Self {
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
    let tokens = lex(sql, StringMode::Conforming)?;
    check_string_mode_independent(sql, &tokens)?;
    check_single_statement(sql, &tokens)?;
    let first_word = check_leading_keyword(sql, &tokens)?;
    check_locking_tokens(sql, &tokens)?;

    let statements = parse(&parser_text(sql, &tokens), first_word == "table")
        .map_err(|error| SqlRejection::new("parse", error.to_string()))?;
    let statement = match statements.as_slice() {
        [statement] => statement,
        [] => return Err(SqlRejection::new("statement-count", "no statement found")),
        more => {
            return Err(SqlRejection::new(
                "statement-count",
                format!("{} statements found, exactly one is allowed", more.len()),
            ));
        }
    };
    check_top_level(statement, opts)?;
    if let ControlFlow::Break(rejection) =
        statement.visit(&mut ShapeChecker::new(&rules, statement))
    {
        return Err(rejection);
    }
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

// ---------------------------------------------------------------------------------------------
// Lexer: a PostgreSQL-faithful scanner that knows only what matters here — where code is, where
// strings/identifiers/comments are, and the tokens `name`, `(`, `.`, `;`.

#[derive(Debug, Clone, PartialEq, Eq)]
enum TokenKind {
    /// An identifier or keyword, as PostgreSQL resolves it (see [`normalize_identifier`]):
    /// unquoted ones folded to lower case (ASCII only), quoted ones (`"…"`, `U&"…"` with its
    /// escapes decoded) verbatim; both cut to [`NAMEDATALEN_MAX`] bytes.
    Word(String),
    OpenParen,
    Semicolon,
    /// Any other token: literal, operator, number, punctuation.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    kind: TokenKind,
    /// Byte offset of the token's first character.
    offset: usize,
    /// Byte offset just past the token.
    end: usize,
}

fn is_ident_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte >= 0x80
}

fn is_ident_continue(byte: u8) -> bool {
    is_ident_start(byte) || byte.is_ascii_digit() || byte == b'$'
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn unterminated(sql: &str, what: &str, start: usize) -> SqlRejection {
    SqlRejection::new(
        "unterminated",
        format!(
            "{what} starting at {} is not closed",
            Position::of(sql, start)
        ),
    )
}

/// Scans a quoted run starting at `start` (the opening quote) where the quote is escaped by
/// doubling it and, if `backslash_escapes`, also by a preceding backslash. Returns the offset
/// just past the closing quote.
fn scan_quoted(bytes: &[u8], start: usize, quote: u8, backslash_escapes: bool) -> Option<usize> {
    let mut at = start + 1;
    while at < bytes.len() {
        let byte = bytes[at];
        if backslash_escapes && byte == b'\\' {
            at += 2;
        } else if byte == quote {
            if bytes.get(at + 1) == Some(&quote) {
                at += 2;
            } else {
                return Some(at + 1);
            }
        } else {
            at += 1;
        }
    }
    None
}

/// The dollar-quote delimiter (`$tag$` or `$$`) starting at `start`, if there is one.
fn dollar_delimiter(bytes: &[u8], start: usize) -> Option<&[u8]> {
    let mut at = start + 1;
    if bytes.get(at).is_some_and(|&byte| is_ident_start(byte)) {
        at += 1;
        while bytes
            .get(at)
            .is_some_and(|&byte| is_ident_continue(byte) && byte != b'$')
        {
            at += 1;
        }
    }
    (bytes.get(at) == Some(&b'$')).then(|| &bytes[start..=at])
}

/// How the server reads plain `'…'` literals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StringMode {
    /// `standard_conforming_strings=on` (the default): a backslash is an ordinary character.
    Conforming,
    /// `standard_conforming_strings=off`: a backslash escapes the next character.
    Legacy,
}

fn lex(sql: &str, mode: StringMode) -> Result<Vec<Token>, SqlRejection> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let pushed_before = tokens.len();
        let byte = bytes[at];
        let next = bytes.get(at + 1).copied();
        if is_space(byte) {
            at += 1;
        } else if byte == b'-' && next == Some(b'-') {
            while at < bytes.len() && bytes[at] != b'\n' && bytes[at] != b'\r' {
                at += 1;
            }
        } else if byte == b'/' && next == Some(b'*') {
            let mut depth = 0usize;
            loop {
                match (bytes.get(at), bytes.get(at + 1)) {
                    (Some(b'/'), Some(b'*')) => {
                        depth += 1;
                        at += 2;
                    }
                    (Some(b'*'), Some(b'/')) => {
                        depth -= 1;
                        at += 2;
                        if depth == 0 {
                            break;
                        }
                    }
                    (Some(_), _) => at += 1,
                    (None, _) => return Err(unterminated(sql, "comment", start)),
                }
            }
        } else if byte == b'\'' {
            at = scan_plain_string(sql, start, start, mode)?;
            tokens.push(Token {
                kind: TokenKind::Other,
                offset: start,
                end: 0,
            });
        } else if byte == b'"' {
            at = scan_quoted(bytes, start, b'"', false)
                .ok_or_else(|| unterminated(sql, "quoted identifier", start))?;
            tokens.push(Token {
                kind: TokenKind::Word(normalize_identifier(
                    &sql[start + 1..at - 1].replace("\"\"", "\""),
                    true,
                )),
                offset: start,
                end: 0,
            });
        } else if byte == b'$' {
            if let Some(delimiter) = dollar_delimiter(bytes, start) {
                let body = start + delimiter.len();
                let close = find_subslice(&bytes[body..], delimiter)
                    .ok_or_else(|| unterminated(sql, "dollar-quoted string", start))?;
                at = body + close + delimiter.len();
            } else {
                at += 1;
                while bytes.get(at).is_some_and(u8::is_ascii_digit) {
                    at += 1;
                }
            }
            tokens.push(Token {
                kind: TokenKind::Other,
                offset: start,
                end: 0,
            });
        } else if is_ident_start(byte) {
            while bytes.get(at).is_some_and(|&byte| is_ident_continue(byte)) {
                at += 1;
            }
            at = lex_word_or_prefixed_literal(sql, start, at, mode, &mut tokens)?;
        } else if byte == b'\\' {
            return Err(SqlRejection::new(
                "backslash",
                format!(
                    "backslash outside a string literal at {} (psql would run it as a meta-command)",
                    Position::of(sql, start)
                ),
            ));
        } else {
            at += 1;
            let kind = match byte {
                b'(' => TokenKind::OpenParen,
                b';' => TokenKind::Semicolon,
                _ => TokenKind::Other,
            };
            tokens.push(Token {
                kind,
                offset: start,
                end: 0,
            });
        }
        // Every branch pushes at most one token with `end: 0`; its end is known only now.
        if tokens.len() > pushed_before
            && let Some(token) = tokens.last_mut()
        {
            token.end = at;
        }
    }
    Ok(tokens)
}

/// After an identifier `sql[start..end]`: either a prefixed literal (`E'…'`, `B'…'`, `X'…'`,
/// `N'…'`, `U&'…'`, `U&"…"`) or a plain word. Returns the offset after the token.
fn lex_word_or_prefixed_literal(
    sql: &str,
    start: usize,
    end: usize,
    mode: StringMode,
    tokens: &mut Vec<Token>,
) -> Result<usize, SqlRejection> {
    let bytes = sql.as_bytes();
    let word = &sql[start..end];
    let quote_follows = bytes.get(end) == Some(&b'\'');
    let unicode_prefix = word.eq_ignore_ascii_case("u") && bytes.get(end) == Some(&b'&');
    let (after, kind) = if quote_follows && word.eq_ignore_ascii_case("e") {
        let after = scan_quoted(bytes, end, b'\'', true)
            .ok_or_else(|| unterminated(sql, "string literal", start))?;
        (after, TokenKind::Other)
    } else if quote_follows && ["b", "x"].iter().any(|p| word.eq_ignore_ascii_case(p)) {
        // Bit and hex strings never treat a backslash as an escape.
        let after = scan_quoted(bytes, end, b'\'', false)
            .ok_or_else(|| unterminated(sql, "string literal", start))?;
        (after, TokenKind::Other)
    } else if quote_follows && word.eq_ignore_ascii_case("n") {
        (scan_plain_string(sql, start, end, mode)?, TokenKind::Other)
    } else if unicode_prefix && bytes.get(end + 1) == Some(&b'\'') {
        if mode == StringMode::Legacy {
            // The server refuses U&'…' when standard_conforming_strings is off.
            return Err(SqlRejection::new(
                "parse",
                "U&'…' literals need standard_conforming_strings=on",
            ));
        }
        (
            scan_plain_string(sql, start, end + 1, mode)?,
            TokenKind::Other,
        )
    } else if unicode_prefix && bytes.get(end + 1) == Some(&b'"') {
        let close = scan_quoted(bytes, end + 1, b'"', false)
            .ok_or_else(|| unterminated(sql, "quoted identifier", start))?;
        let body = sql[end + 2..close - 1].replace("\"\"", "\"");
        let (after, escape) = unicode_escape_clause(sql, close, mode)?;
        let decoded = decode_unicode_escapes(&body, escape).map_err(|problem| {
            SqlRejection::new(
                "unicode-escape",
                format!(
                    "U&\"…\" identifier at {}: {problem}",
                    Position::of(sql, start)
                ),
            )
        })?;
        (after, TokenKind::Word(normalize_identifier(&decoded, true)))
    } else {
        (end, TokenKind::Word(normalize_identifier(word, false)))
    };
    tokens.push(Token {
        kind,
        offset: start,
        end: 0,
    });
    Ok(after)
}

/// Scans a plain `'…'` literal whose opening quote is at `quote`, as the server reads it in
/// `mode`. Returns the offset after the closing quote.
fn scan_plain_string(
    sql: &str,
    token_start: usize,
    quote: usize,
    mode: StringMode,
) -> Result<usize, SqlRejection> {
    scan_quoted(sql.as_bytes(), quote, b'\'', mode == StringMode::Legacy)
        .ok_or_else(|| unterminated(sql, "string literal", token_start))
}

/// PostgreSQL keeps only the first `NAMEDATALEN - 1` bytes of an identifier.
pub const NAMEDATALEN_MAX: usize = 63;

/// An identifier as PostgreSQL resolves it: unquoted ones are folded to lower case, ASCII letters
/// only (multibyte characters are left alone in a UTF-8 database); quoted ones are kept
/// verbatim; both are truncated to [`NAMEDATALEN_MAX`] bytes at a character boundary.
pub fn normalize_identifier(text: &str, quoted: bool) -> String {
    let mut name = if quoted {
        text.to_owned()
    } else {
        text.to_ascii_lowercase()
    };
    if name.len() > NAMEDATALEN_MAX {
        let mut cut = NAMEDATALEN_MAX;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name
}

/// Skips whitespace and comments from `at`; returns the offset of the next token.
fn skip_space_and_comments(sql: &str, mut at: usize) -> Result<usize, SqlRejection> {
    let bytes = sql.as_bytes();
    loop {
        match (bytes.get(at), bytes.get(at + 1)) {
            (Some(&byte), _) if is_space(byte) => at += 1,
            (Some(b'-'), Some(b'-')) => {
                while at < bytes.len() && bytes[at] != b'\n' && bytes[at] != b'\r' {
                    at += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                let start = at;
                let mut depth = 0usize;
                loop {
                    match (bytes.get(at), bytes.get(at + 1)) {
                        (Some(b'/'), Some(b'*')) => {
                            depth += 1;
                            at += 2;
                        }
                        (Some(b'*'), Some(b'/')) => {
                            depth -= 1;
                            at += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        (Some(_), _) => at += 1,
                        (None, _) => return Err(unterminated(sql, "comment", start)),
                    }
                }
            }
            _ => return Ok(at),
        }
    }
}

/// After a `U&"…"` identifier ending at `after`: an optional `UESCAPE 'c'` clause (comments and
/// whitespace may surround it, as the server's grammar allows). Returns the offset after the
/// clause (or `after`) and the escape character (`\` by default).
fn unicode_escape_clause(
    sql: &str,
    after: usize,
    mode: StringMode,
) -> Result<(usize, char), SqlRejection> {
    let bytes = sql.as_bytes();
    let keyword_at = skip_space_and_comments(sql, after)?;
    let mut keyword_end = keyword_at;
    while bytes
        .get(keyword_end)
        .is_some_and(|&byte| is_ident_continue(byte))
    {
        keyword_end += 1;
    }
    if !sql[keyword_at..keyword_end].eq_ignore_ascii_case("uescape") {
        return Ok((after, '\\'));
    }
    let refuse = |problem: &str| {
        SqlRejection::new(
            "unicode-escape",
            format!("UESCAPE at {}: {problem}", Position::of(sql, keyword_at)),
        )
    };
    let literal_at = skip_space_and_comments(sql, keyword_end)?;
    if bytes.get(literal_at) != Some(&b'\'') {
        return Err(refuse(
            "UESCAPE must be followed by a one-character '…' literal",
        ));
    }
    let literal_end = scan_plain_string(sql, literal_at, literal_at, mode)?;
    let escape = sql[literal_at + 1..literal_end - 1].replace("''", "'");
    let mut chars = escape.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None)
            if !c.is_ascii_hexdigit() && !matches!(c, '+' | '\'' | '"') && !c.is_whitespace() =>
        {
            Ok((literal_end, c))
        }
        _ => Err(refuse("invalid Unicode escape character")),
    }
}

/// Decodes the `\` + 4 hex digits, `\+` + 6 hex digits and doubled-escape sequences of a `U&`
/// identifier body, as the server does (surrogate pairs combined; NUL, lone surrogates and
/// values above U+10FFFF refused).
fn decode_unicode_escapes(body: &str, escape: char) -> Result<String, String> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    let mut pending_high: Option<u32> = None;
    while let Some(c) = chars.next() {
        if c != escape {
            if pending_high.is_some() {
                return Err("a high surrogate is not followed by a low one".into());
            }
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&escape) {
            chars.next();
            if pending_high.is_some() {
                return Err("a high surrogate is not followed by a low one".into());
            }
            out.push(escape);
            continue;
        }
        let digits = if chars.peek() == Some(&'+') {
            chars.next();
            6
        } else {
            4
        };
        let mut value = 0u32;
        for _ in 0..digits {
            let digit = chars.next().and_then(|d| d.to_digit(16)).ok_or(
                "invalid Unicode escape (write \\ and 4 hex digits, or \\+ and 6, e.g. \\0041)",
            )?;
            value = value * 16 + digit;
        }
        match (pending_high.take(), value) {
            (None, 0xD800..=0xDBFF) => pending_high = Some(value),
            (Some(high), 0xDC00..=0xDFFF) => {
                let combined = 0x10000 + ((high - 0xD800) << 10) + (value - 0xDC00);
                out.push(char::from_u32(combined).ok_or("invalid surrogate pair")?);
            }
            (Some(_), _) => return Err("a high surrogate is not followed by a low one".into()),
            (None, 0xDC00..=0xDFFF) => return Err("a low surrogate without a high one".into()),
            (None, 0) => return Err("U+0000 is not allowed in an identifier".into()),
            (None, value) => {
                out.push(char::from_u32(value).ok_or("invalid Unicode escape value")?);
            }
        }
    }
    if pending_high.is_some() {
        return Err("a high surrogate is not followed by a low one".into());
    }
    Ok(out)
}

/// The text sqlparser is given: every `U&"…" [UESCAPE 'c']` identifier replaced by the plain
/// quoted identifier it stands for. sqlparser does not know U& identifiers (it reads
/// `U&"pg\005Fsleep"(3)` as `U & "pg\005Fsleep"(3)`), so without this its tree would name
/// functions and relations differently from the server.
fn parser_text(sql: &str, tokens: &[Token]) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut copied = 0;
    for token in tokens {
        let TokenKind::Word(name) = &token.kind else {
            continue;
        };
        let text = &sql[token.offset..token.end];
        let is_unicode_identifier = text.len() > 2
            && text.as_bytes()[..2].eq_ignore_ascii_case(b"u&")
            && text.as_bytes()[2] == b'"';
        if !is_unicode_identifier {
            continue;
        }
        out.push_str(&sql[copied..token.offset]);
        out.push('"');
        out.push_str(&name.replace('"', "\"\""));
        out.push('"');
        copied = token.end;
    }
    out.push_str(&sql[copied..]);
    out
}

/// Refuses text that a server with `standard_conforming_strings=off` would read as different
/// tokens (a backslash before a quote in a plain literal moves the literal's end), so the
/// server can never see code where the validator saw a string. If the legacy reading does not
/// even lex, such a server would reject the whole text before running any of it.
fn check_string_mode_independent(sql: &str, tokens: &[Token]) -> Result<(), SqlRejection> {
    let Ok(legacy) = lex(sql, StringMode::Legacy) else {
        return Ok(());
    };
    let first_difference = tokens
        .iter()
        .zip(&legacy)
        .find(|(conforming, legacy)| conforming != legacy)
        .map(|(conforming, legacy)| conforming.offset.min(legacy.offset))
        .or_else(|| {
            (tokens.len() != legacy.len()).then(|| {
                let shorter = tokens.len().min(legacy.len());
                tokens
                    .get(shorter)
                    .or(legacy.get(shorter))
                    .map_or(0, |token| token.offset)
            })
        });
    match first_difference {
        None => Ok(()),
        Some(offset) => Err(SqlRejection::new(
            "ambiguous-string",
            format!(
                "the text at {} reads differently when standard_conforming_strings=off \
                 (a backslash before a quote in a '…' literal); write E'…' with \\\\ instead",
                Position::of(sql, offset)
            ),
        )),
    }
}

fn find_subslice(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Lexer-level statement count: a `;` may only be the last token.
fn check_single_statement(sql: &str, tokens: &[Token]) -> Result<(), SqlRejection> {
    let semicolons = tokens
        .iter()
        .enumerate()
        .filter(|(_, token)| token.kind == TokenKind::Semicolon);
    for (index, token) in semicolons {
        if index + 1 < tokens.len() {
            return Err(SqlRejection::new(
                "statement-count",
                format!(
                    "`;` at {} is followed by more SQL; exactly one statement is allowed",
                    Position::of(sql, token.offset)
                ),
            ));
        }
    }
    if tokens
        .iter()
        .all(|token| token.kind == TokenKind::Semicolon)
    {
        return Err(SqlRejection::new("statement-count", "no statement found"));
    }
    Ok(())
}

/// Statements that may start a query, lower-case; the parser decides the rest.
const LEADING_KEYWORDS: &[&str] = &["select", "with", "values", "table", "explain", "show"];

/// Lexer-level statement-kind allowlist: the first word (after any opening parentheses) must
/// start a query. Returns that word in lower case.
fn check_leading_keyword(sql: &str, tokens: &[Token]) -> Result<String, SqlRejection> {
    let first = tokens
        .iter()
        .find(|token| token.kind != TokenKind::OpenParen);
    match first {
        Some(Token {
            kind: TokenKind::Word(word),
            offset,
            ..
        }) => {
            let word = word.to_ascii_lowercase();
            if LEADING_KEYWORDS.contains(&word.as_str()) {
                Ok(word)
            } else {
                Err(not_a_query(&format!(
                    "{} (at {})",
                    word.to_ascii_uppercase(),
                    Position::of(sql, *offset)
                )))
            }
        }
        _ => Ok(String::new()),
    }
}

/// Lexer-level locking-clause check (`FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`,
/// `FOR KEY SHARE`), which also covers forms sqlparser does not parse.
fn check_locking_tokens(sql: &str, tokens: &[Token]) -> Result<(), SqlRejection> {
    let words: Vec<Option<String>> = tokens
        .iter()
        .map(|token| match &token.kind {
            TokenKind::Word(word) => Some(word.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    let word_at = |index: usize| words.get(index).and_then(Option::as_deref);
    for (index, token) in tokens.iter().enumerate() {
        if word_at(index) != Some("for") {
            continue;
        }
        let clause = match (word_at(index + 1), word_at(index + 2), word_at(index + 3)) {
            (Some("update"), _, _) => Some("FOR UPDATE"),
            (Some("share"), _, _) => Some("FOR SHARE"),
            (Some("no"), Some("key"), Some("update")) => Some("FOR NO KEY UPDATE"),
            (Some("key"), Some("share"), _) => Some("FOR KEY SHARE"),
            _ => None,
        };
        if let Some(clause) = clause {
            return Err(SqlRejection::new(
                "locking-clause",
                format!(
                    "locking clause `{clause}` at {} is not allowed",
                    Position::of(sql, token.offset)
                ),
            ));
        }
    }
    Ok(())
}

/// Parses with the PostgreSQL dialect. sqlparser accepts `TABLE name` only inside a query
/// body, so a statement starting with `TABLE` is parsed as a query body directly.
fn parse(sql: &str, starts_with_table: bool) -> Result<Vec<Statement>, ParserError> {
    let dialect = PostgreSqlDialect {};
    if !starts_with_table {
        return Parser::parse_sql(&dialect, sql);
    }
    let mut parser = Parser::new(&dialect).try_with_sql(sql)?;
    let query = parser.parse_query()?;
    // An optional trailing semicolon; whether it was there does not matter.
    let _ = parser.consume_token(&ParserToken::SemiColon);
    parser.expect_token(&ParserToken::EOF)?;
    Ok(vec![Statement::Query(query)])
}

/// Lexer-level function check: every `name (` where `name` is denied. Independent of sqlparser,
/// so a divergence between its tokenizer and PostgreSQL's cannot hide a call.
fn check_call_tokens(sql: &str, tokens: &[Token], denylist: &Denylist) -> Result<(), SqlRejection> {
    for pair in tokens.windows(2) {
        if let [
            Token {
                kind: TokenKind::Word(name),
                offset,
                ..
            },
            Token {
                kind: TokenKind::OpenParen,
                ..
            },
        ] = pair
            && let Some(entry) = denylist.matching_entry(name)
        {
            return Err(denied_function(
                name,
                entry,
                &Position::of(sql, *offset).to_string(),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Denylist.

struct Denylist {
    entries: Vec<String>,
}

impl Denylist {
    fn new(extra: &[String]) -> Denylist {
        let entries = BUILTIN_DENIED_FUNCTIONS
            .iter()
            .map(|entry| (*entry).to_owned())
            .chain(extra.iter().map(|entry| entry.to_ascii_lowercase()))
            .collect();
        Denylist { entries }
    }

    /// The denylist entry that `name` (any case) matches, if any.
    fn matching_entry(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.entries
            .iter()
            .find(|entry| match entry.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == **entry,
            })
            .map(String::as_str)
    }
}

/// Everything a query's names are checked against: functions, relations, columns.
struct NameRules {
    functions: Denylist,
    denied_relations: Vec<QualifiedName>,
    allowed_relations: Option<Vec<QualifiedName>>,
    denied_columns: Vec<String>,
}

impl NameRules {
    fn new(opts: &SqlOptions) -> NameRules {
        let denied_relations = BUILTIN_DENIED_RELATIONS
            .iter()
            .map(|name| QualifiedName(vec![(*name).to_owned()]))
            .chain(opts.deny_relations.iter().cloned())
            .collect();
        NameRules {
            functions: Denylist::new(&opts.deny_functions),
            denied_relations,
            allowed_relations: opts.allow_relations.clone(),
            denied_columns: opts.deny_columns.clone(),
        }
    }

    /// The denied relation a reference (normalized parts) may resolve to. Conservative: names
    /// compare without regard to ASCII case, and an unqualified reference matches an entry in
    /// any schema (the search path decides which one the server picks).
    fn denied_relation(&self, reference: &[String]) -> Option<&QualifiedName> {
        let (schema, name) = match reference {
            [.., schema, name] => (Some(schema.as_str()), name.as_str()),
            [name] => (None, name.as_str()),
            [] => return None,
        };
        self.denied_relations.iter().find(|entry| {
            entry.name().eq_ignore_ascii_case(name)
                && match (entry.schema(), schema) {
                    (Some(wanted), Some(given)) => wanted.eq_ignore_ascii_case(given),
                    _ => true,
                }
        })
    }

    /// Is a reference admitted by `allow_relations` (exact, as the server resolves names)?
    fn relation_allowed(&self, reference: &[String]) -> bool {
        let Some(allowed) = &self.allowed_relations else {
            return true;
        };
        let reference = &reference[reference.len().saturating_sub(2)..];
        allowed.iter().any(|entry| entry.0 == reference)
    }

    fn denied_column(&self, name: &str) -> Option<&str> {
        self.denied_columns
            .iter()
            .find(|column| column.eq_ignore_ascii_case(name))
            .map(String::as_str)
    }
}

/// Lexer-level name check, independent of sqlparser: a denied relation or column name may not
/// appear as any word of the query (identifier or keyword, quoted or not, U& decoded), and with
/// denied columns `NATURAL` (which joins on every common column) may not either.
fn check_name_tokens(sql: &str, tokens: &[Token], rules: &NameRules) -> Result<(), SqlRejection> {
    for token in tokens {
        let TokenKind::Word(word) = &token.kind else {
            continue;
        };
        let location = Position::of(sql, token.offset);
        if let Some(entry) = rules.denied_relation(std::slice::from_ref(word)) {
            return Err(SqlRejection::new(
                "denied-relation",
                format!("`{word}` at {location} names the denied relation `{entry}`"),
            ));
        }
        if let Some(column) = rules.denied_column(word) {
            return Err(SqlRejection::new(
                "denied-column",
                format!("`{word}` at {location} names the denied column `{column}`"),
            ));
        }
        if !rules.denied_columns.is_empty() && word == "natural" {
            return Err(denied_columns_hidden(
                rules,
                &format!("NATURAL at {location} (it joins on every common column)"),
            ));
        }
    }
    Ok(())
}

fn denied_columns_hidden(rules: &NameRules, what: &str) -> SqlRejection {
    SqlRejection::new(
        "denied-column",
        format!(
            "{what} would read every column, and the denied column(s) `{}` with them; name the \
             columns you need",
            rules.denied_columns.join("`, `")
        ),
    )
}

fn denied_function(name: &str, entry: &str, location: &str) -> SqlRejection {
    SqlRejection::new(
        "denied-function",
        format!("function `{name}` at {location} is denied (denylist entry `{entry}`)"),
    )
}

// ---------------------------------------------------------------------------------------------
// AST checks.

fn ident_location(ident: &Ident) -> String {
    let start = ident.span.start;
    if start.line == 0 {
        "an unknown position".to_owned()
    } else {
        format!("line {}, column {}", start.line, start.column)
    }
}

/// The first word of a statement's SQL form, e.g. `INSERT`, to name it in messages.
fn statement_keyword(statement: &Statement) -> String {
    let text = statement.to_string();
    text.split_whitespace().next().unwrap_or("").to_owned()
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

fn check_top_level(statement: &Statement, opts: &SqlOptions) -> Result<(), SqlRejection> {
    let kinds = match statement {
        Statement::Query(query) => {
            let mut kinds = Vec::new();
            collect_kinds(&query.body, &mut kinds)?;
            kinds
        }
        Statement::Explain {
            describe_alias,
            analyze,
            query_plan,
            estimate,
            statement: explained,
            options,
            ..
        } => {
            let analyze_option = options.iter().flatten().find(|option| {
                let name = option.name.value.to_ascii_lowercase();
                name == "analyze" || name == "analyse"
            });
            let analyzes = *analyze || analyze_option.is_some();
            if analyzes && !opts.allow.contains(&SqlKind::ExplainAnalyze) {
                return Err(SqlRejection::new(
                    "explain-analyze",
                    "EXPLAIN ANALYZE executes the statement and is not allowed (a policy can \
                     allow it with allow = [\"explain-analyze\"])",
                ));
            }
            if !matches!(describe_alias, DescribeAlias::Explain) || *query_plan || *estimate {
                return Err(not_a_query(&statement_keyword(statement)));
            }
            if !matches!(**explained, Statement::Query(_)) {
                return Err(not_a_query(&format!(
                    "EXPLAIN of {}",
                    statement_keyword(explained)
                )));
            }
            vec![if analyzes {
                SqlKind::ExplainAnalyze
            } else {
                SqlKind::Explain
            }]
        }
        Statement::ShowVariable { .. } if opts.allow.contains(&SqlKind::Show) => {
            vec![SqlKind::Show]
        }
        other => return Err(not_a_query(&statement_keyword(other))),
    };
    match kinds.iter().find(|kind| !opts.allow.contains(kind)) {
        Some(kind) => Err(SqlRejection::new(
            "not-allowed-kind",
            format!(
                "a `{kind}` statement is not allowed here (allowed: {})",
                opts.allow
                    .iter()
                    .map(|kind| kind.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The kinds of the leaves of a query body; data-modifying bodies are refused.
fn collect_kinds(body: &SetExpr, kinds: &mut Vec<SqlKind>) -> Result<(), SqlRejection> {
    match body {
        SetExpr::Select(_) => kinds.push(SqlKind::Select),
        SetExpr::Values(_) => kinds.push(SqlKind::Values),
        SetExpr::Table(_) => kinds.push(SqlKind::Table),
        SetExpr::Query(query) => collect_kinds(&query.body, kinds)?,
        SetExpr::SetOperation { left, right, .. } => {
            collect_kinds(left, kinds)?;
            collect_kinds(right, kinds)?;
        }
        SetExpr::Insert(statement)
        | SetExpr::Update(statement)
        | SetExpr::Delete(statement)
        | SetExpr::Merge(statement) => return Err(not_a_query(&statement_keyword(statement))),
    }
    Ok(())
}

fn modifies_data(body: &SetExpr) -> bool {
    match body {
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => true,
        SetExpr::Query(query) => modifies_data(&query.body),
        SetExpr::SetOperation { left, right, .. } => modifies_data(left) || modifies_data(right),
        SetExpr::Select(_) | SetExpr::Values(_) | SetExpr::Table(_) => false,
    }
}

/// The normalized parts of an object name as the server resolves them.
fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => normalize_ident(ident),
            ObjectNamePart::Function(_) => part.to_string().to_ascii_lowercase(),
        })
        .collect()
}

fn normalize_ident(ident: &Ident) -> String {
    normalize_identifier(&ident.value, ident.quote_style.is_some())
}

/// Every relation, alias and CTE name of a statement: what a whole-row reference (`t` in
/// `row_to_json(t)`) can name. Table sources this walk does not know are reported, so a policy
/// with denied columns can refuse them (fail closed).
#[derive(Default)]
struct RowNames {
    names: Vec<String>,
    unknown_source: Option<String>,
}

impl Visitor for RowNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        for cte in query.with.iter().flat_map(|with| &with.cte_tables) {
            self.names.push(normalize_ident(&cte.alias.name));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let alias = match factor {
            TableFactor::Table { name, alias, .. } => {
                if let Some(last) = name_parts(name).pop() {
                    self.names.push(last);
                }
                alias
            }
            TableFactor::Derived { alias, .. }
            | TableFactor::TableFunction { alias, .. }
            | TableFactor::Function { alias, .. }
            | TableFactor::UNNEST { alias, .. }
            | TableFactor::JsonTable { alias, .. }
            | TableFactor::NestedJoin { alias, .. } => alias,
            other => {
                self.unknown_source.get_or_insert_with(|| other.to_string());
                &None
            }
        };
        if let Some(alias) = alias {
            self.names.push(normalize_ident(&alias.name));
        }
        ControlFlow::Continue(())
    }
}

/// The WITH names one query defines, and which of its CTE bodies is being walked.
struct CteScope {
    query: usize,
    names: Vec<String>,
    recursive: bool,
    cte_queries: Vec<usize>,
    /// Index of the CTE whose body is being walked, if any.
    inside: Option<usize>,
}

fn address(query: &Query) -> usize {
    std::ptr::from_ref(query) as usize
}

/// Walks every node of the statement: nested statements, queries, selects, expressions and
/// table factors.
struct ShapeChecker<'a> {
    rules: &'a NameRules,
    /// Names a whole-row reference could use (see [`RowNames`]).
    row_names: Vec<String>,
    unknown_source: Option<String>,
    /// Enclosing queries' CTE names, innermost last.
    scopes: Vec<CteScope>,
}

impl<'a> ShapeChecker<'a> {
    fn new(rules: &'a NameRules, statement: &Statement) -> ShapeChecker<'a> {
        let mut row_names = RowNames::default();
        let _ = statement.visit(&mut row_names);
        ShapeChecker {
            rules,
            row_names: row_names.names,
            unknown_source: row_names.unknown_source,
            scopes: Vec::new(),
        }
    }

    fn check_function_name(&self, name: &ObjectName) -> ControlFlow<SqlRejection> {
        let Some(last) = name.0.last() else {
            return ControlFlow::Continue(());
        };
        let (text, location) = match last {
            ObjectNamePart::Identifier(ident) => (normalize_ident(ident), ident_location(ident)),
            ObjectNamePart::Function(_) => (last.to_string(), "an unknown position".to_owned()),
        };
        match self.rules.functions.matching_entry(&text) {
            Some(entry) => ControlFlow::Break(denied_function(&name.to_string(), entry, &location)),
            None => ControlFlow::Continue(()),
        }
    }

    /// Is `name` a CTE visible here: defined by an enclosing query's WITH, and (without
    /// RECURSIVE) before the CTE whose body is being walked?
    fn cte_visible(&self, name: &str) -> bool {
        self.scopes.iter().any(|scope| {
            let visible = match scope.inside {
                Some(index) if !scope.recursive => &scope.names[..index],
                _ => &scope.names[..],
            };
            visible.iter().any(|cte| cte == name)
        })
    }

    fn check_relation(&self, parts: &[String], shown: &str) -> ControlFlow<SqlRejection> {
        if let Some(entry) = self.rules.denied_relation(parts) {
            return ControlFlow::Break(SqlRejection::new(
                "denied-relation",
                format!("relation `{shown}` is denied (entry `{entry}`)"),
            ));
        }
        let is_cte = parts.len() == 1 && self.cte_visible(&parts[0]);
        if !is_cte && !self.rules.relation_allowed(parts) {
            return ControlFlow::Break(SqlRejection::new(
                "relation-not-allowed",
                format!(
                    "relation `{shown}` is not in this parameter's allow_relations ({})",
                    self.rules
                        .allowed_relations
                        .iter()
                        .flatten()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        ControlFlow::Continue(())
    }

    /// With denied columns, a reference to a whole row of a relation.
    fn check_whole_row(&self, name: &Ident) -> ControlFlow<SqlRejection> {
        if self.rules.denied_columns.is_empty() {
            return ControlFlow::Continue(());
        }
        let name = normalize_ident(name);
        if self
            .row_names
            .iter()
            .any(|row| row.eq_ignore_ascii_case(&name))
        {
            return ControlFlow::Break(denied_columns_hidden(
                self.rules,
                &format!("the whole-row reference `{name}`"),
            ));
        }
        ControlFlow::Continue(())
    }

    fn check_columns_hidden(&self, what: &str) -> ControlFlow<SqlRejection> {
        if self.rules.denied_columns.is_empty() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(denied_columns_hidden(self.rules, what))
        }
    }
}

/// The `TABLE name` leaves of a query body (set operations included).
fn table_statements(body: &SetExpr, out: &mut Vec<Vec<String>>) {
    match body {
        SetExpr::Table(table) => {
            let parts = [&table.schema_name, &table.table_name]
                .into_iter()
                .flatten()
                .map(normalize_ident)
                .collect();
            out.push(parts);
        }
        SetExpr::SetOperation { left, right, .. } => {
            table_statements(left, out);
            table_statements(right, out);
        }
        _ => {}
    }
}

impl Visitor for ShapeChecker<'_> {
    type Break = SqlRejection;

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<SqlRejection> {
        match statement {
            Statement::Query(_) | Statement::Explain { .. } | Statement::ShowVariable { .. } => {
                ControlFlow::Continue(())
            }
            nested => ControlFlow::Break(not_a_query(&statement_keyword(nested))),
        }
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<SqlRejection> {
        if let Some(lock) = query.locks.first() {
            return ControlFlow::Break(SqlRejection::new(
                "locking-clause",
                format!("locking clause `{lock}` is not allowed"),
            ));
        }
        let ctes = query.with.iter().flat_map(|with| &with.cte_tables);
        for cte in ctes.clone() {
            if modifies_data(&cte.query.body) {
                return ControlFlow::Break(SqlRejection::new(
                    "data-modifying-cte",
                    format!(
                        "WITH query `{}` at {} modifies data ({})",
                        cte.alias.name.value,
                        ident_location(&cte.alias.name),
                        cte.query
                            .body
                            .to_string()
                            .split_whitespace()
                            .next()
                            .unwrap_or("")
                    ),
                ));
            }
        }
        let here = address(query);
        if let Some(enclosing) = self.scopes.last_mut()
            && let Some(index) = enclosing.cte_queries.iter().position(|&q| q == here)
        {
            enclosing.inside = Some(index);
        }
        self.scopes.push(CteScope {
            query: here,
            names: ctes
                .clone()
                .map(|cte| normalize_ident(&cte.alias.name))
                .collect(),
            recursive: query.with.as_ref().is_some_and(|with| with.recursive),
            cte_queries: ctes.map(|cte| address(&cte.query)).collect(),
            inside: None,
        });
        let mut tables = Vec::new();
        table_statements(&query.body, &mut tables);
        for parts in tables {
            self.check_relation(&parts, &parts.join("."))?;
            self.check_columns_hidden(&format!("`TABLE {}`", parts.join(".")))?;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &Query) -> ControlFlow<SqlRejection> {
        let here = address(query);
        if self.scopes.last().is_some_and(|scope| scope.query == here) {
            self.scopes.pop();
        }
        if let Some(enclosing) = self.scopes.last_mut()
            && enclosing
                .inside
                .is_some_and(|index| enclosing.cte_queries[index] == here)
        {
            enclosing.inside = None;
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<SqlRejection> {
        if let Some(into) = &select.into {
            return ControlFlow::Break(SqlRejection::new(
                "select-into",
                format!("`{into}` creates a table and is not allowed"),
            ));
        }
        for item in &select.projection {
            if let SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) = item {
                self.check_columns_hidden(&format!("`{item}`"))?;
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<SqlRejection> {
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => self.check_function_name(name),
            TableFactor::Table {
                name, args: None, ..
            } => self.check_relation(&name_parts(name), &name.to_string()),
            _ => match &self.unknown_source {
                Some(source) => self.check_columns_hidden(&format!("the table source `{source}`")),
                None => ControlFlow::Continue(()),
            },
        }
    }

    fn pre_visit_value(&mut self, value: &ValueWithSpan) -> ControlFlow<SqlRejection> {
        use sqlparser::ast::Value;
        match &value.value {
            Value::DoubleQuotedString(name)
            | Value::TripleDoubleQuotedString(name)
            | Value::DoubleQuotedByteStringLiteral(name)
            | Value::TripleDoubleQuotedByteStringLiteral(name)
            | Value::DoubleQuotedRawStringLiteral(name)
            | Value::TripleDoubleQuotedRawStringLiteral(name) => {
                let start = value.span.start;
                ControlFlow::Break(SqlRejection::new(
                    "quoted-name-as-string",
                    format!(
                        "\"{name}\" at line {}, column {} is a name to PostgreSQL, but the \
                         validator's parser read it as a string; write string literals in single \
                         quotes",
                        start.line, start.column
                    ),
                ))
            }
            _ => ControlFlow::Continue(()),
        }
    }

    fn pre_visit_expr(&mut self, expr: &sqlparser::ast::Expr) -> ControlFlow<SqlRejection> {
        use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
        match expr {
            Expr::Function(function) => {
                self.check_function_name(&function.name)?;
                if let FunctionArguments::List(list) = &function.args {
                    for arg in &list.args {
                        let arg = match arg {
                            FunctionArg::Unnamed(arg) => arg,
                            FunctionArg::Named { arg, .. } | FunctionArg::ExprNamed { arg, .. } => {
                                arg
                            }
                        };
                        // `count(*)` reads no column; `f(t.*)` reads them all.
                        if let FunctionArgExpr::QualifiedWildcard(_)
                        | FunctionArgExpr::WildcardWithOptions(_) = arg
                        {
                            self.check_columns_hidden(&format!("`{arg}`"))?;
                        }
                    }
                }
                ControlFlow::Continue(())
            }
            Expr::Identifier(ident) => self.check_whole_row(ident),
            Expr::CompoundIdentifier(parts) => match parts.last() {
                Some(last) => self.check_whole_row(last),
                None => ControlFlow::Continue(()),
            },
            Expr::Wildcard(_) | Expr::QualifiedWildcard(..) => {
                self.check_columns_hidden(&format!("`{expr}`"))
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

#[cfg(test)]
mod tests {
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
            let message = refused(&format!("SELECT * FROM t {lock}"), "locking-clause");
            assert!(message.contains(lock), "{message}");
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
        // Found by tests/fuzz_properties.rs: the `U&` check sliced the word's first two bytes,
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

    #[test]
    fn lexer_tokens() {
        let tokens = lex("SELECT a$b, $1, E'x', U&\"q\"(", StringMode::Conforming).unwrap();
        let kinds: Vec<TokenKind> = tokens.into_iter().map(|token| token.kind).collect();
        assert_eq!(
            kinds,
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
}
