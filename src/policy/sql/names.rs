//! Names a query may not use: the function denylist, denied and allowed relations, denied
//! columns — one [`NameRules`] per validation, read by the token checks and the tree walk alike.
#![forbid(unsafe_code)]

use super::{
    BUILTIN_DENIED_FUNCTIONS, BUILTIN_DENIED_RELATIONS, QualifiedName, SqlOptions, SqlRejection,
};

pub(super) struct Denylist {
    entries: Vec<String>,
}

impl Denylist {
    pub(super) fn new(extra: &[String]) -> Denylist {
        let entries = BUILTIN_DENIED_FUNCTIONS
            .iter()
            .map(|entry| (*entry).to_owned())
            .chain(extra.iter().map(|entry| entry.to_ascii_lowercase()))
            .collect();
        Denylist { entries }
    }

    /// The denylist entry that `name` (any case) matches, if any.
    pub(super) fn matching_entry(&self, name: &str) -> Option<&str> {
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
pub(super) struct NameRules {
    pub(super) functions: Denylist,
    denied_relations: Vec<QualifiedName>,
    pub(super) allowed_relations: Option<Vec<QualifiedName>>,
    pub(super) denied_columns: Vec<String>,
}

impl NameRules {
    pub(super) fn new(opts: &SqlOptions) -> NameRules {
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
    pub(super) fn denied_relation(&self, reference: &[String]) -> Option<&QualifiedName> {
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
    pub(super) fn relation_allowed(&self, reference: &[String]) -> bool {
        let Some(allowed) = &self.allowed_relations else {
            return true;
        };
        let reference = &reference[reference.len().saturating_sub(2)..];
        allowed.iter().any(|entry| entry.0 == reference)
    }

    pub(super) fn denied_column(&self, name: &str) -> Option<&str> {
        self.denied_columns
            .iter()
            .find(|column| column.eq_ignore_ascii_case(name))
            .map(String::as_str)
    }
}

pub(super) fn denied_columns_hidden(rules: &NameRules, what: &str) -> SqlRejection {
    SqlRejection::new(
        "denied-column",
        format!(
            "{what} would read every column, and the denied column(s) `{}` with them; name the \
             columns you need",
            rules.denied_columns.join("`, `")
        ),
    )
}

pub(super) fn denied_function(name: &str, entry: &str, location: &str) -> SqlRejection {
    SqlRejection::new(
        "denied-function",
        format!("function `{name}` at {location} is denied (denylist entry `{entry}`)"),
    )
}
