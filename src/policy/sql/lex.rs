//! Lexing: a PostgreSQL-faithful scanner that knows only what matters to the validator — where
//! code is, where strings, quoted identifiers and comments are, and the tokens `name`, `(`, `;`.
//! Written here, independent of sqlparser's tokenizer, so the token checks (module `tokens`) are
//! a second reading of the text, not the parser's.
//!
//! Invariants: names come out as the server resolves them ([`normalize_identifier`]); a
//! backslash outside a literal, an unterminated string, identifier, dollar quote or comment, and
//! a malformed `U&` escape are refused here, before anything else reads the text.
#![forbid(unsafe_code)]

use super::{Position, SqlRejection};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TokenKind {
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
pub(super) struct Token {
    pub(super) kind: TokenKind,
    /// Byte offset of the token's first character.
    pub(super) offset: usize,
    /// Byte offset just past the token.
    end: usize,
}

pub(super) fn is_ident_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte >= 0x80
}

pub(super) fn is_ident_continue(byte: u8) -> bool {
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
pub(super) fn scan_quoted(
    bytes: &[u8],
    start: usize,
    quote: u8,
    backslash_escapes: bool,
) -> Option<usize> {
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
pub(super) enum StringMode {
    /// `standard_conforming_strings=on` (the default): a backslash is an ordinary character.
    Conforming,
    /// `standard_conforming_strings=off`: a backslash escapes the next character.
    Legacy,
}

pub(super) fn lex(sql: &str, mode: StringMode) -> Result<Vec<Token>, SqlRejection> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let pushed_before = tokens.len();
        let byte = bytes[at];
        if is_space(byte) {
            at += 1;
        } else if let Some(end) = comment_end(sql, at)? {
            at = end;
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
        if bytes.get(at).is_some_and(|&byte| is_space(byte)) {
            at += 1;
        } else if let Some(end) = comment_end(sql, at)? {
            at = end;
        } else {
            return Ok(at);
        }
    }
}

/// The one comment scanner: where the comment that starts at `at` ends — a `--` comment at the
/// end of its line, a `/* … */` comment after its matching `*/` (they nest, as the server
/// reads them) — or `None` when no comment starts at `at`. An unclosed `/*` is refused.
fn comment_end(sql: &str, start: usize) -> Result<Option<usize>, SqlRejection> {
    let bytes = sql.as_bytes();
    let mut at = start;
    match (bytes.get(at), bytes.get(at + 1)) {
        (Some(b'-'), Some(b'-')) => {
            while at < bytes.len() && bytes[at] != b'\n' && bytes[at] != b'\r' {
                at += 1;
            }
        }
        (Some(b'/'), Some(b'*')) => {
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
        _ => return Ok(None),
    }
    Ok(Some(at))
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
pub(super) fn decode_unicode_escapes(body: &str, escape: char) -> Result<String, String> {
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
pub(super) fn parser_text(sql: &str, tokens: &[Token]) -> String {
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

fn find_subslice(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
