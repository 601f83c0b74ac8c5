//! A shell-command reader for recorded agent history: parses the way POSIX sh / bash would
//! split a command line, and never executes or expands anything.
//!
//! What it produces is deliberately literal: quotes are removed, escapes resolved, and every
//! construct whose meaning depends on run time — command and process substitution, variables,
//! globs, tildes, brace expansion, here-documents, subshells and compound commands — is recorded
//! as a [`Hazard`] on the word or [`Construct`] on the command instead of being guessed through.
//! Callers decide what to do with them; `coverage` reports them as such.
#![forbid(unsafe_code)]

use std::ops::Range;

/// Something whose value is only known when a shell runs the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hazard {
    CommandSubstitution,
    ProcessSubstitution,
    Variable(String),
    Arithmetic,
    Glob,
    Tilde,
    BraceExpansion,
}

impl Hazard {
    pub fn describe(&self) -> String {
        match self {
            Hazard::CommandSubstitution => "command substitution $(…)/`…`".into(),
            Hazard::ProcessSubstitution => "process substitution <(…)".into(),
            Hazard::Variable(name) => {
                format!("shell variable ${name} (its value is not known here)")
            }
            Hazard::Arithmetic => "arithmetic expansion $((…))".into(),
            Hazard::Glob => "a glob (* ? […]) that expands to file names".into(),
            Hazard::Tilde => "tilde expansion (~)".into(),
            Hazard::BraceExpansion => "brace expansion {a,b}".into(),
        }
    }
}

/// One word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    pub text: String,
    pub hazards: Vec<Hazard>,
    /// True when any part of the word was quoted or escaped (so `=`, `{`… were literal).
    pub quoted: bool,
    /// How many bytes of `text` came before the first quote or escape.
    pub unquoted_prefix: usize,
    pub span: Range<usize>,
}

/// Redirection operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectOp {
    /// `>`, `>|`, `&>`
    Write,
    /// `>>`, `&>>`
    Append,
    /// `<`
    Read,
    /// `<>`
    ReadWrite,
    /// `>&N`, `<&N` (duplicating a descriptor)
    Duplicate,
    /// `<<`, `<<-`
    HereDoc,
    /// `<<<`
    HereString,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub fd: Option<u32>,
    pub op: RedirectOp,
    pub target: Word,
}

impl Redirect {
    /// Harmless for coverage: descriptor duplication (`2>&1`) and anything to/from /dev/null.
    pub fn is_harmless(&self) -> bool {
        match self.op {
            RedirectOp::Duplicate => true,
            RedirectOp::Write | RedirectOp::Append | RedirectOp::Read => {
                self.target.hazards.is_empty() && self.target.text == "/dev/null"
            }
            _ => false,
        }
    }

    pub fn describe(&self) -> String {
        let fd = self.fd.map(|f| f.to_string()).unwrap_or_default();
        match self.op {
            RedirectOp::Write => format!("redirection to a file ({fd}> {})", self.target.text),
            RedirectOp::Append => format!("redirection to a file ({fd}>> {})", self.target.text),
            RedirectOp::Read => format!("input read from a file (< {})", self.target.text),
            RedirectOp::ReadWrite => format!("a file opened read-write (<> {})", self.target.text),
            RedirectOp::Duplicate => format!("descriptor duplication ({fd}>&{})", self.target.text),
            RedirectOp::HereDoc => "a here-document feeding stdin".into(),
            RedirectOp::HereString => "a here-string feeding stdin".into(),
        }
    }
}

/// Shell syntax a verb can never stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Construct {
    Subshell,
    BraceGroup,
    Compound(String),
    FunctionDefinition,
}

impl Construct {
    pub fn describe(&self) -> String {
        match self {
            Construct::Subshell => "a subshell ( … )".into(),
            Construct::BraceGroup => "a command group { …; }".into(),
            Construct::Compound(k) => format!("a shell `{k}` construct"),
            Construct::FunctionDefinition => "a shell function definition".into(),
        }
    }
}

/// One simple command: assignments, words, redirections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stage {
    pub assignments: Vec<(String, Word)>,
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    pub constructs: Vec<Construct>,
    pub span: Range<usize>,
}

/// How a list item is joined to the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    Sequence,
    And,
    Or,
    Background,
}

/// A pipeline (`a | b | c`) and how it follows the previous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub after: Option<Connector>,
    pub stages: Vec<Stage>,
    pub span: Range<usize>,
}

/// Why a line could not be read as shell at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(Word),
    Op(&'static str, Range<usize>),
    Newline,
}

const OPERATORS: &[&str] = &[
    "&>>", "<<<", "<<-", ";;", "&&", "||", "|&", ">>", ">|", "<<", "<>", ">&", "<&", "&>", "<(",
    ">(", "|", "&", ";", "<", ">", "(", ")",
];

const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "select", "function", "!", "[[", "]]",
];

/// Parse a command line (or a multi-line script) into pipelines.
pub fn parse(text: &str) -> Result<Vec<Pipeline>, ParseError> {
    let tokens = tokenize(text)?;
    build(tokens)
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    tokens: Vec<Token>,
    pending_heredocs: Vec<(String, bool)>,
}

fn tokenize(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut lx = Lexer {
        text,
        pos: 0,
        tokens: Vec::new(),
        pending_heredocs: Vec::new(),
    };
    lx.run()?;
    Ok(lx.tokens)
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn run(&mut self) -> Result<(), ParseError> {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\\' if self.rest().starts_with("\\\n") => self.pos += 2,
                '\n' => {
                    self.pos += 1;
                    self.tokens.push(Token::Newline);
                    self.skip_heredoc_bodies();
                }
                '#' => {
                    let end = self
                        .rest()
                        .find('\n')
                        .map_or(self.text.len(), |i| self.pos + i);
                    self.pos = end;
                }
                _ => {
                    if let Some(op) = OPERATORS.iter().find(|op| self.rest().starts_with(**op)) {
                        let start = self.pos;
                        self.pos += op.len();
                        if *op == "<(" || *op == ">(" {
                            // Process substitution: a word of its own.
                            self.skip_balanced(start + 1)?;
                            self.tokens.push(Token::Word(Word {
                                text: self.text[start..self.pos].to_string(),
                                hazards: vec![Hazard::ProcessSubstitution],
                                quoted: false,
                                unquoted_prefix: self.pos - start,
                                span: start..self.pos,
                            }));
                            continue;
                        }
                        self.tokens.push(Token::Op(op, start..self.pos));
                        if *op == "<<" || *op == "<<-" {
                            self.read_heredoc_delimiter(*op == "<<-")?;
                        }
                    } else {
                        let word = self.word()?;
                        self.tokens.push(Token::Word(word));
                    }
                }
            }
        }
        Ok(())
    }

    fn read_heredoc_delimiter(&mut self, strip_tabs: bool) -> Result<(), ParseError> {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        let word = self.word()?;
        self.pending_heredocs.push((word.text.clone(), strip_tabs));
        self.tokens.push(Token::Word(word));
        Ok(())
    }

    /// After a newline, skip the bodies of the here-documents opened on the line before.
    fn skip_heredoc_bodies(&mut self) {
        for (delimiter, strip_tabs) in std::mem::take(&mut self.pending_heredocs) {
            loop {
                if self.pos >= self.text.len() {
                    return;
                }
                let end = self
                    .rest()
                    .find('\n')
                    .map_or(self.text.len(), |i| self.pos + i);
                let line = &self.text[self.pos..end];
                let line = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line
                };
                let done = line == delimiter;
                self.pos = (end + 1).min(self.text.len());
                if done {
                    break;
                }
            }
        }
    }

    /// Skip from an opening `(` at `open` to its matching `)`, honouring quotes.
    fn skip_balanced(&mut self, open: usize) -> Result<(), ParseError> {
        let mut depth = 0usize;
        let mut i = open;
        let bytes = self.text.as_bytes();
        while i < bytes.len() {
            match bytes[i] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos = i + 1;
                        return Ok(());
                    }
                }
                b'\'' => {
                    let close = self.text[i + 1..]
                        .find('\'')
                        .ok_or_else(|| ParseError("unterminated single quote".into()))?;
                    i += close + 1;
                }
                b'\\' => i += 1,
                _ => {}
            }
            i += 1;
        }
        Err(ParseError("unbalanced parentheses".into()))
    }

    fn word(&mut self) -> Result<Word, ParseError> {
        let start = self.pos;
        let mut text = String::new();
        let mut hazards = Vec::new();
        let mut quoted = false;
        let mut unquoted_brace = false;
        let mut unquoted_comma_or_dots = false;
        let mut unquoted_bracket = false;
        let mut unquoted_prefix: Option<usize> = None;
        while let Some(c) = self.peek() {
            if matches!(c, ' ' | '\t' | '\n')
                || OPERATORS.iter().any(|op| self.rest().starts_with(*op))
            {
                break;
            }
            if matches!(c, '\'' | '"' | '\\') && unquoted_prefix.is_none() {
                unquoted_prefix = Some(text.len());
            }
            match c {
                '\'' => {
                    quoted = true;
                    let close = self.rest()[1..]
                        .find('\'')
                        .ok_or_else(|| ParseError("unterminated single quote".into()))?;
                    text.push_str(&self.rest()[1..1 + close]);
                    self.pos += close + 2;
                }
                '"' => {
                    quoted = true;
                    self.pos += 1;
                    loop {
                        let Some(d) = self.peek() else {
                            return Err(ParseError("unterminated double quote".into()));
                        };
                        match d {
                            '"' => {
                                self.pos += 1;
                                break;
                            }
                            '\\' => {
                                let next = self.rest()[1..].chars().next();
                                match next {
                                    Some(n @ ('$' | '`' | '"' | '\\')) => {
                                        text.push(n);
                                        self.pos += 2;
                                    }
                                    Some('\n') => self.pos += 2,
                                    _ => {
                                        text.push('\\');
                                        self.pos += 1;
                                    }
                                }
                            }
                            '$' => self.dollar(&mut text, &mut hazards)?,
                            '`' => self.backtick(&mut text, &mut hazards)?,
                            other => {
                                text.push(other);
                                self.pos += other.len_utf8();
                            }
                        }
                    }
                }
                '\\' => {
                    quoted = true;
                    let next = self.rest()[1..].chars().next();
                    match next {
                        Some('\n') => self.pos += 2,
                        Some(n) => {
                            text.push(n);
                            self.pos += 1 + n.len_utf8();
                        }
                        None => self.pos += 1,
                    }
                }
                '$' => {
                    if self.rest().starts_with("$'") {
                        quoted = true;
                        unquoted_prefix.get_or_insert(text.len());
                        self.ansi_c(&mut text)?;
                    } else {
                        self.dollar(&mut text, &mut hazards)?;
                    }
                }
                '`' => self.backtick(&mut text, &mut hazards)?,
                _ => {
                    match c {
                        '*' | '?' => push_once(&mut hazards, Hazard::Glob),
                        '[' => unquoted_bracket = true,
                        ']' if unquoted_bracket => push_once(&mut hazards, Hazard::Glob),
                        '~' if text.is_empty() && self.pos == start => {
                            push_once(&mut hazards, Hazard::Tilde)
                        }
                        '{' => unquoted_brace = true,
                        ',' if unquoted_brace => unquoted_comma_or_dots = true,
                        '.' if unquoted_brace && self.rest().starts_with("..") => {
                            unquoted_comma_or_dots = true
                        }
                        '}' if unquoted_brace && unquoted_comma_or_dots => {
                            push_once(&mut hazards, Hazard::BraceExpansion)
                        }
                        _ => {}
                    }
                    text.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
        Ok(Word {
            unquoted_prefix: unquoted_prefix.unwrap_or(text.len()),
            text,
            hazards,
            quoted,
            span: start..self.pos,
        })
    }

    fn ansi_c(&mut self, text: &mut String) -> Result<(), ParseError> {
        self.pos += 2;
        loop {
            let Some(c) = self.peek() else {
                return Err(ParseError("unterminated $'…' quote".into()));
            };
            self.pos += c.len_utf8();
            match c {
                '\'' => return Ok(()),
                '\\' => {
                    let Some(n) = self.peek() else {
                        return Err(ParseError("unterminated $'…' quote".into()));
                    };
                    self.pos += n.len_utf8();
                    text.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                }
                other => text.push(other),
            }
        }
    }

    fn dollar(&mut self, text: &mut String, hazards: &mut Vec<Hazard>) -> Result<(), ParseError> {
        let start = self.pos;
        let rest = self.rest();
        if rest.starts_with("$((") {
            self.skip_balanced(start + 1)?;
            push_once(hazards, Hazard::Arithmetic);
        } else if rest.starts_with("$(") {
            self.skip_balanced(start + 1)?;
            push_once(hazards, Hazard::CommandSubstitution);
        } else if rest.starts_with("${") {
            let close = rest
                .find('}')
                .ok_or_else(|| ParseError("unterminated ${".into()))?;
            let name: String = rest[2..close]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            self.pos += close + 1;
            push_once(hazards, Hazard::Variable(name));
        } else {
            let name: String = rest[1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                let special = rest[1..].chars().next();
                match special {
                    Some(s @ ('?' | '#' | '@' | '*' | '$' | '!' | '-')) => {
                        self.pos += 1 + s.len_utf8();
                        push_once(hazards, Hazard::Variable(s.to_string()));
                    }
                    _ => {
                        // A lone `$` is literal.
                        text.push('$');
                        self.pos += 1;
                    }
                }
            } else {
                self.pos += 1 + name.len();
                push_once(hazards, Hazard::Variable(name));
            }
        }
        text.push_str(&self.text[start..self.pos]);
        Ok(())
    }

    fn backtick(&mut self, text: &mut String, hazards: &mut Vec<Hazard>) -> Result<(), ParseError> {
        let start = self.pos;
        let close = self.rest()[1..]
            .find('`')
            .ok_or_else(|| ParseError("unterminated backquote".into()))?;
        self.pos += close + 2;
        text.push_str(&self.text[start..self.pos]);
        push_once(hazards, Hazard::CommandSubstitution);
        Ok(())
    }
}

fn push_once(hazards: &mut Vec<Hazard>, h: Hazard) {
    if !hazards.contains(&h) {
        hazards.push(h);
    }
}

fn is_assignment(word: &Word) -> Option<(String, Word)> {
    let (name, value) = word.text.split_once('=')?;
    let valid = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    // The name and the `=` must have been written unquoted.
    (valid && word.unquoted_prefix > name.len()).then(|| {
        (
            name.to_string(),
            Word {
                text: value.to_string(),
                hazards: word.hazards.clone(),
                quoted: word.quoted,
                unquoted_prefix: word.unquoted_prefix.saturating_sub(name.len() + 1),
                span: word.span.clone(),
            },
        )
    })
}

fn build(tokens: Vec<Token>) -> Result<Vec<Pipeline>, ParseError> {
    let mut pipelines = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage = Stage::default();
    let mut after: Option<Connector> = None;
    let mut depth = 0usize;
    let mut iter = tokens.into_iter().peekable();
    let finish_stage = |stage: &mut Stage, stages: &mut Vec<Stage>| {
        let s = std::mem::take(stage);
        if !s.words.is_empty() || !s.assignments.is_empty() || !s.constructs.is_empty() {
            stages.push(s);
        }
    };
    let finish_pipeline = |stages: &mut Vec<Stage>,
                           pipelines: &mut Vec<Pipeline>,
                           after: &mut Option<Connector>,
                           next: Option<Connector>| {
        if !stages.is_empty() {
            let span = stages[0].span.start..stages[stages.len() - 1].span.end;
            pipelines.push(Pipeline {
                after: *after,
                stages: std::mem::take(stages),
                span,
            });
            *after = next;
        } else if next.is_some() && after.is_none() {
            *after = next;
        }
    };
    while let Some(token) = iter.next() {
        match token {
            Token::Word(word) => {
                extend_span(&mut stage, &word.span);
                if stage.words.is_empty() {
                    if !word.quoted && KEYWORDS.contains(&word.text.as_str()) {
                        stage
                            .constructs
                            .push(Construct::Compound(word.text.clone()));
                        continue;
                    }
                    if !word.quoted && word.text == "{" {
                        stage.constructs.push(Construct::BraceGroup);
                        continue;
                    }
                    if !word.quoted && word.text == "}" {
                        continue;
                    }
                    if let Some(assignment) = is_assignment(&word) {
                        stage.assignments.push(assignment);
                        continue;
                    }
                }
                stage.words.push(word);
            }
            Token::Op(op, span) => match op {
                "|" | "|&" => finish_stage(&mut stage, &mut stages),
                "&&" | "||" | ";" | ";;" | "&" => {
                    finish_stage(&mut stage, &mut stages);
                    let next = match op {
                        "&&" => Connector::And,
                        "||" => Connector::Or,
                        "&" => Connector::Background,
                        _ => Connector::Sequence,
                    };
                    finish_pipeline(&mut stages, &mut pipelines, &mut after, Some(next));
                }
                "(" => {
                    // A parenthesis is part of its stage's text: a stage made only of
                    // constructs still has a span inside the line.
                    extend_span(&mut stage, &span);
                    if stage.words.len() == 1
                        && iter.peek().is_some_and(|t| matches!(t, Token::Op(")", _)))
                    {
                        stage.constructs.push(Construct::FunctionDefinition);
                        if let Some(Token::Op(_, close)) = iter.next() {
                            extend_span(&mut stage, &close);
                        }
                    } else {
                        depth += 1;
                        stage.constructs.push(Construct::Subshell);
                    }
                }
                ")" => {
                    extend_span(&mut stage, &span);
                    depth = depth.saturating_sub(1);
                    stage.constructs.push(Construct::Subshell);
                }
                redirect => {
                    let (fd, op) = redirect_op(redirect, span.start, &mut stage);
                    let Some(Token::Word(target)) = iter.next() else {
                        return Err(ParseError(format!("`{redirect}` without a target")));
                    };
                    extend_span(&mut stage, &span);
                    extend_span(&mut stage, &target.span);
                    let (op, fd) =
                        match (op, target.text.parse::<u32>().is_ok() || target.text == "-") {
                            (RedirectOp::Write, true) if redirect == ">&" => {
                                (RedirectOp::Duplicate, fd)
                            }
                            (RedirectOp::Read, true) if redirect == "<&" => {
                                (RedirectOp::Duplicate, fd)
                            }
                            other => (other.0, fd),
                        };
                    stage.redirects.push(Redirect { fd, op, target });
                }
            },
            Token::Newline => {
                finish_stage(&mut stage, &mut stages);
                finish_pipeline(
                    &mut stages,
                    &mut pipelines,
                    &mut after,
                    Some(Connector::Sequence),
                );
            }
        }
    }
    finish_stage(&mut stage, &mut stages);
    finish_pipeline(&mut stages, &mut pipelines, &mut after, None);
    if depth != 0 {
        return Err(ParseError("unbalanced parentheses".into()));
    }
    Ok(pipelines)
}

fn extend_span(stage: &mut Stage, span: &Range<usize>) {
    if stage.span == (0..0) && stage.words.is_empty() && stage.assignments.is_empty() {
        stage.span = span.clone();
    } else {
        stage.span.end = stage.span.end.max(span.end);
        stage.span.start = stage.span.start.min(span.start);
    }
}

/// The operator's kind; a preceding all-digit word is its descriptor (`2>`).
fn redirect_op(op: &str, op_start: usize, stage: &mut Stage) -> (Option<u32>, RedirectOp) {
    let fd = stage
        .words
        .last()
        .filter(|w| {
            !w.quoted
                && !w.text.is_empty()
                && w.text.bytes().all(|b| b.is_ascii_digit())
                && w.span.end == op_start
        })
        .and_then(|w| w.text.parse::<u32>().ok());
    if fd.is_some() {
        stage.words.pop();
    }
    let kind = match op {
        ">" | ">|" | "&>" => RedirectOp::Write,
        ">>" | "&>>" => RedirectOp::Append,
        "<" => RedirectOp::Read,
        "<>" => RedirectOp::ReadWrite,
        ">&" => RedirectOp::Write,
        "<&" => RedirectOp::Read,
        "<<" | "<<-" => RedirectOp::HereDoc,
        _ => RedirectOp::HereString,
    };
    (fd, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: &Pipeline, stage: usize) -> Vec<String> {
        p.stages[stage]
            .words
            .iter()
            .map(|w| w.text.clone())
            .collect()
    }

    #[test]
    fn splits_lists_and_pipelines() {
        let p =
            parse("cd /srv && sudo journalctl -u nginx -n 50 | grep -i error | tail -20; uptime")
                .unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(words(&p[0], 0), ["cd", "/srv"]);
        assert_eq!(p[1].after, Some(Connector::And));
        assert_eq!(p[1].stages.len(), 3);
        assert_eq!(words(&p[1], 2), ["tail", "-20"]);
        assert_eq!(p[2].after, Some(Connector::Sequence));
    }

    #[test]
    fn quotes_and_escapes_are_removed_not_expanded() {
        let p = parse(r#"psql -c "SELECT \"a\" FROM t WHERE x = 'y'" 'it''s' a\ b"#).unwrap();
        assert_eq!(
            words(&p[0], 0),
            [
                "psql",
                "-c",
                "SELECT \"a\" FROM t WHERE x = 'y'",
                "its",
                "a b"
            ]
        );
        assert!(p[0].stages[0].words.iter().all(|w| w.hazards.is_empty()));
    }

    #[test]
    fn hazards_are_recorded() {
        let p = parse("kill $(pidof nginx) `id` $HOME ~/x /var/log/*.log {a,b} '$(safe)'").unwrap();
        let h: Vec<Vec<Hazard>> = p[0].stages[0]
            .words
            .iter()
            .map(|w| w.hazards.clone())
            .collect();
        assert_eq!(h[1], [Hazard::CommandSubstitution]);
        assert_eq!(h[2], [Hazard::CommandSubstitution]);
        assert_eq!(h[3], [Hazard::Variable("HOME".into())]);
        assert_eq!(h[4], [Hazard::Tilde]);
        assert_eq!(h[5], [Hazard::Glob]);
        assert_eq!(h[6], [Hazard::BraceExpansion]);
        assert!(h[7].is_empty());
    }

    #[test]
    fn redirections_assignments_and_constructs() {
        let p = parse("PGPASSWORD=x psql -c 'select 1' 2>&1 >/tmp/out </dev/null").unwrap();
        let s = &p[0].stages[0];
        assert_eq!(s.assignments[0].0, "PGPASSWORD");
        assert_eq!(words(&p[0], 0), ["psql", "-c", "select 1"]);
        assert_eq!(s.redirects.len(), 3);
        assert!(s.redirects[0].is_harmless());
        assert_eq!(s.redirects[1].op, RedirectOp::Write);
        assert!(!s.redirects[1].is_harmless());
        assert!(s.redirects[2].is_harmless());
        let p = parse("for p in a b; do kubectl logs $p; done").unwrap();
        assert!(matches!(p[0].stages[0].constructs[0], Construct::Compound(ref k) if k == "for"));
        let p = parse("(cd /x && ls)").unwrap();
        assert!(p[0].stages[0].constructs.contains(&Construct::Subshell));
    }

    #[test]
    fn heredoc_bodies_are_skipped() {
        let p = parse("cat <<'EOF' > /etc/x\nrm -rf /\nEOF\nuptime").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].stages[0].redirects[0].op, RedirectOp::HereDoc);
        assert_eq!(words(&p[1], 0), ["uptime"]);
    }

    #[test]
    fn unterminated_quotes_are_errors() {
        assert!(parse("echo 'abc").is_err());
        assert!(parse("echo \"abc").is_err());
        assert!(parse("echo $(abc").is_err());
    }
}
