//! Compiling one parameter of a verb: the fields its type accepts and no others, the type's own
//! checks (an enum has values, an int has min ≤ max, a string has an anchored pattern, a path
//! has absolute roots, SQL options name kinds and relations that parse), and a default that is
//! itself a valid value.
#![forbid(unsafe_code)]

use super::Ctx;
use crate::policy::params::{DEFAULT_MAX_LENGTH, Param, ParamKind, PathOpener};
use crate::policy::schema::{RawParam, RawParamType};
use crate::policy::sql::{QualifiedName, SqlKind, SqlOptions};
use crate::policy::units::parse_duration;
use regex::Regex;
use std::ops::Range;

/// Where a parameter's problems are reported: its span, and `verb `V`, parameter `P`` before
/// each message.
struct Place {
    span: Range<usize>,
    here: String,
}

impl Place {
    fn refuse(&self, ctx: &mut Ctx, what: impl std::fmt::Display) {
        ctx.at(self.span.clone(), format!("{}: {what}", self.here));
    }
}

pub(super) fn build_param(
    ctx: &mut Ctx,
    verb: &str,
    name: &str,
    spanned: &toml::Spanned<RawParam>,
) -> Option<Param> {
    let raw = spanned.get_ref();
    let place = Place {
        span: spanned.span(),
        here: format!("verb `{verb}`, parameter `{name}`"),
    };
    check_fields_apply(ctx, &place, raw);
    let kind = param_kind(ctx, &place, raw)?;
    let required = raw.required.unwrap_or(!kind.is_bool());
    let mut param = Param {
        name: name.to_string(),
        description: raw.description.clone(),
        kind,
        required,
        default: None,
        allow_dash: raw.allow_dash,
    };
    if let Some(default) = &raw.default {
        param.default = Some(checked_default(ctx, &place, &param, default)?);
    }
    Some(param)
}

/// Every type-specific field that is set belongs to the parameter's type.
fn check_fields_apply(ctx: &mut Ctx, place: &Place, raw: &RawParam) {
    let allowed: &[&str] = match raw.kind {
        RawParamType::Enum => &["values"],
        RawParamType::Int => &["min", "max"],
        RawParamType::String => &["pattern", "max_length"],
        RawParamType::Bool => &["flag"],
        RawParamType::Path => &["roots", "must_exist", "create"],
        RawParamType::Duration => &["max_duration"],
        RawParamType::Sql => &[
            "allow",
            "deny_functions",
            "deny_relations",
            "allow_relations",
            "deny_columns",
            "max_length",
        ],
        RawParamType::SystemdUnit | RawParamType::K8sName | RawParamType::Hostname => &[],
    };
    let present = [
        ("values", raw.values.is_some()),
        ("min", raw.min.is_some()),
        ("max", raw.max.is_some()),
        ("pattern", raw.pattern.is_some()),
        ("max_length", raw.max_length.is_some()),
        ("flag", raw.flag.is_some()),
        ("roots", raw.roots.is_some()),
        ("must_exist", raw.must_exist.is_some()),
        ("create", raw.create.is_some()),
        ("max_duration", raw.max_duration.is_some()),
        ("allow", raw.allow.is_some()),
        ("deny_functions", raw.deny_functions.is_some()),
        ("deny_relations", raw.deny_relations.is_some()),
        ("allow_relations", raw.allow_relations.is_some()),
        ("deny_columns", raw.deny_columns.is_some()),
    ];
    for (field, is_set) in present {
        if is_set && !allowed.contains(&field) {
            place.refuse(ctx, format!("`{field}` does not apply to this type"));
        }
    }
}

/// The checked kind; `None` when the type lacks what it cannot do without.
fn param_kind(ctx: &mut Ctx, place: &Place, raw: &RawParam) -> Option<ParamKind> {
    let kind = match raw.kind {
        RawParamType::Enum => {
            let values = raw.values.clone().unwrap_or_default();
            if values.is_empty() {
                place.refuse(ctx, "an enum needs values = [...]");
            }
            ParamKind::Enum { values }
        }
        RawParamType::Int => {
            let (Some(min), Some(max)) = (raw.min, raw.max) else {
                place.refuse(ctx, "an int needs min and max");
                return None;
            };
            if min > max {
                place.refuse(ctx, "min is greater than max");
            }
            ParamKind::Int { min, max }
        }
        RawParamType::String => string_kind(ctx, place, raw)?,
        RawParamType::Bool => match &raw.flag {
            Some(flag) if !flag.is_empty() => ParamKind::Bool { flag: flag.clone() },
            _ => {
                place.refuse(ctx, "a bool needs flag = \"--the-flag\"");
                return None;
            }
        },
        RawParamType::Path => path_kind(ctx, place, raw),
        RawParamType::Duration => ParamKind::Duration {
            max: raw
                .max_duration
                .as_ref()
                .and_then(|m| parse_duration(m).map_err(|e| place.refuse(ctx, e)).ok()),
        },
        RawParamType::SystemdUnit => ParamKind::SystemdUnit,
        RawParamType::K8sName => ParamKind::K8sName,
        RawParamType::Hostname => ParamKind::Hostname,
        RawParamType::Sql => ParamKind::Sql(sql_options(ctx, place, raw)),
    };
    Some(kind)
}

/// A string's pattern, anchored so the whole value must match.
fn string_kind(ctx: &mut Ctx, place: &Place, raw: &RawParam) -> Option<ParamKind> {
    let Some(source) = raw.pattern.clone() else {
        place.refuse(
            ctx,
            "a string needs a pattern (it is anchored: the whole value must match)",
        );
        return None;
    };
    match Regex::new(&format!("^(?:{source})$")) {
        Ok(pattern) => Some(ParamKind::Str {
            pattern,
            source,
            max_length: raw.max_length.unwrap_or(DEFAULT_MAX_LENGTH),
        }),
        Err(e) => {
            place.refuse(ctx, format!("bad pattern: {e}"));
            None
        }
    }
}

/// A path's absolute roots; a path names an existing entry, or a new file with `create`.
fn path_kind(ctx: &mut Ctx, place: &Place, raw: &RawParam) -> ParamKind {
    let roots = raw.roots.clone().unwrap_or_default();
    if roots.is_empty() {
        place.refuse(ctx, "a path needs roots = [...]");
    }
    for r in &roots {
        if !r.is_absolute() {
            place.refuse(ctx, format!("root {r:?} must be absolute"));
        }
    }
    let create = raw.create.unwrap_or(false);
    match (raw.must_exist, create) {
        (Some(false), _) => place.refuse(
            ctx,
            "`must_exist = false` no longer lets a path name a new entry (the program would resolve the new name itself, after the check, and follow a symlink planted there); a path names an existing file or directory, or, with `create = true`, a new file the daemon creates just before the run",
        ),
        (Some(true), true) => place.refuse(
            ctx,
            "`must_exist = true` and `create = true` contradict each other",
        ),
        _ => {}
    }
    ParamKind::Path {
        roots,
        create,
        opened_by: PathOpener::Child,
    }
}

/// An SQL parameter's options: statement kinds that exist, relation names that parse, columns
/// named without a table.
fn sql_options(ctx: &mut Ctx, place: &Place, raw: &RawParam) -> SqlOptions {
    let mut opts = SqlOptions::default();
    if let Some(allow) = &raw.allow {
        opts.allow = allow
            .iter()
            .filter_map(|a| a.parse::<SqlKind>().map_err(|e| place.refuse(ctx, e)).ok())
            .collect();
    }
    if let Some(deny) = &raw.deny_functions {
        opts.deny_functions = deny.iter().map(|f| f.to_ascii_lowercase()).collect();
    }
    let mut relations = |names: &[String], key: &str| -> Vec<QualifiedName> {
        names
            .iter()
            .filter_map(|name| {
                QualifiedName::parse(name)
                    .map_err(|e| place.refuse(ctx, format!("{key}: {e}")))
                    .ok()
            })
            .collect()
    };
    if let Some(deny) = &raw.deny_relations {
        opts.deny_relations = relations(deny, "deny_relations");
    }
    if let Some(allow) = &raw.allow_relations {
        opts.allow_relations = Some(relations(allow, "allow_relations"));
    }
    if let Some(columns) = &raw.deny_columns {
        opts.deny_columns = relations(columns, "deny_columns")
            .into_iter()
            .filter_map(|name| match name.0.as_slice() {
                [column] => Some(column.clone()),
                _ => {
                    place.refuse(
                        ctx,
                        format!("deny_columns: `{name}` must be a column name without a table"),
                    );
                    None
                }
            })
            .collect();
    }
    if let Some(max) = raw.max_length {
        opts.max_length = max;
    }
    opts
}

/// A default written as a string, integer or bool, valid for the parameter, in its normal form.
fn checked_default(
    ctx: &mut Ctx,
    place: &Place,
    param: &Param,
    default: &toml::Value,
) -> Option<String> {
    let text = match default {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        _ => {
            place.refuse(ctx, "default must be a string, integer or bool");
            return None;
        }
    };
    match param.validate(&text) {
        Ok(normalized) => Some(normalized),
        Err(e) => {
            place.refuse(ctx, format!("the default is itself invalid: {}", e.message));
            None
        }
    }
}
