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
//!   refused, whatever the option's value.
//! - `data-modifying-cte`: no `INSERT`/`UPDATE`/`DELETE`/`MERGE` inside `WITH`.
//! - `select-into`: no `SELECT … INTO` (it creates a table).
//! - `locking-clause`: no `FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE`, at any depth
//!   (checked on the token stream, which also covers the forms sqlparser cannot parse, and on
//!   every query node of the AST).
//! - `denied-function`: no call to a function on the denylist ([`BUILTIN_DENIED_FUNCTIONS`] plus
//!   the parameter's `deny_functions`), matched on the last name part, case-insensitively, at any
//!   depth of the AST (select list, FROM/LATERAL table functions, subqueries, CTEs, ORDER BY, …)
//!   and, as a second independent layer, on the lexer's token stream (`name (`).
//!
//! Order: nul, length, lexical rules (backslash, unterminated, ambiguous-string,
//! statement-count, leading keyword, locking tokens), parse, top-level shape (statement-kind,
//! explain-analyze, not-allowed-kind), AST walk, lexer-level function calls. The first failing
//! rule is reported.
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
    DescribeAlias, Ident, ObjectName, ObjectNamePart, Query, Select, SetExpr, Statement,
    TableFactor, Visit, Visitor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token as ParserToken;

/// Default cap on the length of one query, in bytes.
pub const DEFAULT_MAX_LENGTH: usize = 16_384;

/// Functions refused in any query, matched on the last part of the (possibly schema-qualified)
/// name, case-insensitively. An entry ending in `*` matches every name with that prefix.
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
/// - running SQL hidden in a string, out of the validator's sight: `query_to_xml*`,
///   `cursor_to_xml*`, `ts_stat`, `ts_rewrite`, tablefunc's `crosstab*` and `connectby`;
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
}

impl SqlKind {
    /// Every kind, the default `allow` list.
    pub const ALL: [SqlKind; 4] = [
        SqlKind::Select,
        SqlKind::Explain,
        SqlKind::Values,
        SqlKind::Table,
    ];

    /// The name used in policy files.
    pub fn name(self) -> &'static str {
        match self {
            SqlKind::Select => "select",
            SqlKind::Explain => "explain",
            SqlKind::Values => "values",
            SqlKind::Table => "table",
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
#[error("unknown sql kind `{given}`; expected one of: select, explain, values, table")]
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

/// Per-parameter options of the `sql` type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlOptions {
    /// Statement kinds accepted. Default: all four.
    pub allow: Vec<SqlKind>,
    /// Extra denied function names (lower-case; a trailing `*` is a prefix), added to
    /// [`BUILTIN_DENIED_FUNCTIONS`].
    pub deny_functions: Vec<String>,
    /// Maximum length of the query text in bytes. Default [`DEFAULT_MAX_LENGTH`].
    pub max_length: usize,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            allow: SqlKind::ALL.to_vec(),
            deny_functions: Vec::new(),
            max_length: DEFAULT_MAX_LENGTH,
        }
    }
}

/// Why a query was refused: a stable rule id and a message saying where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sql refused ({rule}): {message}")]
pub struct SqlRejection {
    /// Stable rule id: "nul", "length", "backslash", "ambiguous-string", "unterminated",
    /// "statement-count", "parse", "statement-kind", "not-allowed-kind", "explain-analyze",
    /// "data-modifying-cte", "select-into", "locking-clause", "denied-function".
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
    let denylist = Denylist::new(&opts.deny_functions);
    let tokens = lex(sql, StringMode::Conforming)?;
    check_string_mode_independent(sql, &tokens)?;
    check_single_statement(sql, &tokens)?;
    let first_word = check_leading_keyword(sql, &tokens)?;
    check_locking_tokens(sql, &tokens)?;

    let statements = parse(sql, first_word == "table")
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
    if let ControlFlow::Break(rejection) = statement.visit(&mut ShapeChecker {
        denylist: &denylist,
    }) {
        return Err(rejection);
    }
    check_call_tokens(sql, &tokens, &denylist)
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
    /// An identifier or keyword; unquoted ones as written, quoted ones without their quotes.
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
                kind: TokenKind::Word(sql[start + 1..at - 1].replace("\"\"", "\"")),
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
        let after = scan_quoted(bytes, end + 1, b'"', false)
            .ok_or_else(|| unterminated(sql, "quoted identifier", start))?;
        (after, TokenKind::Word(sql[end + 2..after - 1].to_owned()))
    } else {
        (end, TokenKind::Word(word.to_owned()))
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
const LEADING_KEYWORDS: &[&str] = &["select", "with", "values", "table", "explain"];

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
            if *analyze || analyze_option.is_some() {
                return Err(SqlRejection::new(
                    "explain-analyze",
                    "EXPLAIN ANALYZE executes the statement and is not allowed",
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
            vec![SqlKind::Explain]
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

/// Walks every node of the statement: nested statements, queries, selects, expressions and
/// table factors.
struct ShapeChecker<'a> {
    denylist: &'a Denylist,
}

impl ShapeChecker<'_> {
    fn check_function_name(&self, name: &ObjectName) -> ControlFlow<SqlRejection> {
        let Some(last) = name.0.last() else {
            return ControlFlow::Continue(());
        };
        let (text, location) = match last {
            ObjectNamePart::Identifier(ident) => (ident.value.clone(), ident_location(ident)),
            ObjectNamePart::Function(_) => (last.to_string(), "an unknown position".to_owned()),
        };
        match self.denylist.matching_entry(&text) {
            Some(entry) => ControlFlow::Break(denied_function(&name.to_string(), entry, &location)),
            None => ControlFlow::Continue(()),
        }
    }
}

impl Visitor for ShapeChecker<'_> {
    type Break = SqlRejection;

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<SqlRejection> {
        match statement {
            Statement::Query(_) | Statement::Explain { .. } => ControlFlow::Continue(()),
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
        for cte in ctes {
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
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<SqlRejection> {
        match &select.into {
            Some(into) => ControlFlow::Break(SqlRejection::new(
                "select-into",
                format!("`{into}` creates a table and is not allowed"),
            )),
            None => ControlFlow::Continue(()),
        }
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<SqlRejection> {
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => self.check_function_name(name),
            _ => ControlFlow::Continue(()),
        }
    }

    fn pre_visit_expr(&mut self, expr: &sqlparser::ast::Expr) -> ControlFlow<SqlRejection> {
        match expr {
            sqlparser::ast::Expr::Function(function) => self.check_function_name(&function.name),
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
        assert!(error.to_string().contains("select, explain, values, table"));
        assert!("SELECT".parse::<SqlKind>().is_err(), "names are lower-case");
    }

    #[test]
    fn default_options() {
        let opts = SqlOptions::default();
        assert_eq!(opts.allow, SqlKind::ALL.to_vec());
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
        let denylist = Denylist::new(&[]);
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
            let outcome = statements[0].visit(&mut ShapeChecker {
                denylist: &denylist,
            });
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
                TokenKind::Word("SELECT".to_owned()),
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
}
