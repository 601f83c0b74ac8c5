//! Statement shape: the text parsed with sqlparser's PostgreSQL dialect, then the top level
//! checked (a query or `EXPLAIN` of one, of allowed kinds) and every node of the tree walked
//! (data-modifying CTEs, `SELECT … INTO`, locking clauses, quoted names read as strings, denied
//! functions, relations and columns, relations outside `allow_relations`).
#![forbid(unsafe_code)]

use std::ops::ControlFlow;

use sqlparser::ast::{
    DescribeAlias, Ident, ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr,
    Statement, TableFactor, ValueWithSpan, Visit, Visitor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token as ParserToken;

use super::lex::normalize_identifier;
use super::names::{NameRules, denied_columns_hidden, denied_function};
use super::{SqlKind, SqlOptions, SqlRejection, not_a_query};

/// The one statement of `sql` (the parser's text: `U&` identifiers rewritten); `parse` and
/// `statement-count` refusals.
pub(super) fn parse_one(sql: &str, starts_with_table: bool) -> Result<Statement, SqlRejection> {
    let mut statements = parse(sql, starts_with_table)
        .map_err(|error| SqlRejection::new("parse", error.to_string()))?;
    match statements.len() {
        1 => Ok(statements.remove(0)),
        0 => Err(SqlRejection::new("statement-count", "no statement found")),
        more => Err(SqlRejection::new(
            "statement-count",
            format!("{more} statements found, exactly one is allowed"),
        )),
    }
}

/// Walks every node of `statement` ([`ShapeChecker`]); the first refusal.
pub(super) fn check_tree(statement: &Statement, rules: &NameRules) -> Result<(), SqlRejection> {
    match statement.visit(&mut ShapeChecker::new(rules, statement)) {
        ControlFlow::Break(rejection) => Err(rejection),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Parses with the PostgreSQL dialect. sqlparser accepts `TABLE name` only inside a query
/// body, so a statement starting with `TABLE` is parsed as a query body directly.
pub(super) fn parse(sql: &str, starts_with_table: bool) -> Result<Vec<Statement>, ParserError> {
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

pub(super) fn check_top_level(
    statement: &Statement,
    opts: &SqlOptions,
) -> Result<(), SqlRejection> {
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
pub(super) struct ShapeChecker<'a> {
    rules: &'a NameRules,
    /// Names a whole-row reference could use (see [`RowNames`]).
    row_names: Vec<String>,
    unknown_source: Option<String>,
    /// Enclosing queries' CTE names, innermost last.
    scopes: Vec<CteScope>,
}

impl<'a> ShapeChecker<'a> {
    pub(super) fn new(rules: &'a NameRules, statement: &Statement) -> ShapeChecker<'a> {
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
