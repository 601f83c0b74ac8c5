//! Token checks: the rules read on the lexer's tokens (module `lex`), before and after the
//! parser — one statement, a query's leading keyword, no locking clause, no text whose meaning
//! depends on `standard_conforming_strings`, and, as a layer independent of sqlparser, no call of
//! a denied function and no denied relation or column name anywhere.
#![forbid(unsafe_code)]

use super::lex::{StringMode, Token, TokenKind, lex};
use super::names::{Denylist, NameRules, denied_columns_hidden, denied_function};
use super::{Position, SqlRejection, not_a_query};

/// Refuses text that a server with `standard_conforming_strings=off` would read as different
/// tokens (a backslash before a quote in a plain literal moves the literal's end), so the
/// server can never see code where the validator saw a string. If the legacy reading does not
/// even lex, such a server would reject the whole text before running any of it.
pub(super) fn check_string_mode_independent(
    sql: &str,
    tokens: &[Token],
) -> Result<(), SqlRejection> {
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

/// Lexer-level statement count: a `;` may only be the last token.
pub(super) fn check_single_statement(sql: &str, tokens: &[Token]) -> Result<(), SqlRejection> {
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
pub(super) fn check_leading_keyword(sql: &str, tokens: &[Token]) -> Result<String, SqlRejection> {
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
pub(super) fn check_locking_tokens(sql: &str, tokens: &[Token]) -> Result<(), SqlRejection> {
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

/// Lexer-level function check: every `name (` where `name` is denied. Independent of sqlparser,
/// so a divergence between its tokenizer and PostgreSQL's cannot hide a call.
pub(super) fn check_call_tokens(
    sql: &str,
    tokens: &[Token],
    denylist: &Denylist,
) -> Result<(), SqlRejection> {
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

/// Lexer-level name check, independent of sqlparser: a denied relation or column name may not
/// appear as any word of the query (identifier or keyword, quoted or not, U& decoded), and with
/// denied columns `NATURAL` (which joins on every common column) may not either.
pub(super) fn check_name_tokens(
    sql: &str,
    tokens: &[Token],
    rules: &NameRules,
) -> Result<(), SqlRejection> {
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
