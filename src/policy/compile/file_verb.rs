//! Compiling a built-in file verb (`builtin = "file.write"` and its siblings): existing absolute
//! roots, no declared params (the verb's own `path`, `content` and `mode` are added here), and
//! modes without an executable or set-id bit.
#![forbid(unsafe_code)]

use super::{Ctx, size_or};
use crate::files::{FileOp, FileVerbSpec};
use crate::policy::VerbAction;
use crate::policy::params::{Param, ParamKind, PathOpener};
use crate::policy::schema::RawVerb;
use crate::policy::units::parse_mode;
use crate::protected::ProtectedNames;
use std::collections::BTreeMap;

/// The file verb `builtin` names; its parameters go into `params`.
pub(super) fn build_file_verb(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    builtin: &toml::Spanned<String>,
    protected: &ProtectedNames,
    params: &mut BTreeMap<String, Param>,
) -> Option<VerbAction> {
    let op = file_op(ctx, name, builtin)?;
    check_roots(ctx, name, raw, builtin);
    let max_size = size_or(ctx, &raw.max_size, 1 << 20);
    let allowed_modes = allowed_modes(ctx, name, raw, builtin);
    add_params(params, op, raw, max_size, &allowed_modes);
    Some(VerbAction::File(FileVerbSpec {
        op,
        roots: raw.roots.clone(),
        max_size,
        create_only: raw.create_only,
        allowed_modes,
        protected: protected.clone(),
    }))
}

fn file_op(ctx: &mut Ctx, name: &str, builtin: &toml::Spanned<String>) -> Option<FileOp> {
    match builtin.get_ref().as_str() {
        "file.write" => Some(FileOp::Write),
        "file.append" => Some(FileOp::Append),
        "file.read" => Some(FileOp::Read),
        "file.list" => Some(FileOp::List),
        other => {
            ctx.at(
                builtin.span(),
                format!("verb `{name}`: unknown builtin {other:?} (file.write, file.append, file.read, file.list)"),
            );
            None
        }
    }
}

/// No declared params, and at least one root, each an existing absolute directory.
fn check_roots(ctx: &mut Ctx, name: &str, raw: &RawVerb, builtin: &toml::Spanned<String>) {
    if !raw.params.is_empty() {
        ctx.at(
            builtin.span(),
            format!("verb `{name}`: builtin verbs declare no params (they take path, and content for writes)"),
        );
    }
    if raw.roots.is_empty() {
        ctx.at(
            builtin.span(),
            format!("verb `{name}`: a file verb needs roots = [...]"),
        );
    }
    for root in &raw.roots {
        if !root.is_absolute() || !root.is_dir() {
            ctx.at(
                builtin.span(),
                format!(
                    "verb `{name}`: root {} must be an existing absolute directory",
                    root.display()
                ),
            );
        }
    }
}

/// The modes a write may give, never executable or set-id; 0644 when none is given.
fn allowed_modes(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    builtin: &toml::Spanned<String>,
) -> Vec<u32> {
    let mut allowed_modes = Vec::new();
    for m in &raw.modes {
        match parse_mode(m) {
            Ok(mode) if mode & 0o7111 == 0 => allowed_modes.push(mode),
            Ok(_) => ctx.at(
                builtin.span(),
                format!("verb `{name}`: mode {m} has an executable or set-id bit; file verbs never create executables"),
            ),
            Err(e) => ctx.at(builtin.span(), format!("verb `{name}`: {e}")),
        }
    }
    if allowed_modes.is_empty() {
        allowed_modes.push(0o644);
    }
    allowed_modes
}

/// The parameters of a file verb: `path` always, `content` for writes and appends, `mode` for
/// writes (defaulting to the first allowed mode).
fn add_params(
    params: &mut BTreeMap<String, Param>,
    op: FileOp,
    raw: &RawVerb,
    max_size: u64,
    allowed_modes: &[u32],
) {
    let mk = |pname: &str, kind: ParamKind, required: bool| Param {
        name: pname.to_string(),
        description: String::new(),
        kind,
        required,
        default: None,
        allow_dash: false,
    };
    params.insert(
        "path".into(),
        mk(
            "path",
            ParamKind::Path {
                roots: raw.roots.clone(),
                create: matches!(op, FileOp::Write | FileOp::Append),
                opened_by: PathOpener::FileVerb,
            },
            true,
        ),
    );
    if matches!(op, FileOp::Write | FileOp::Append) {
        params.insert(
            "content".into(),
            mk(
                "content",
                ParamKind::Content {
                    max_bytes: max_size,
                },
                true,
            ),
        );
    }
    if op == FileOp::Write {
        params.insert(
            "mode".into(),
            Param {
                default: Some(format!("{:04o}", allowed_modes[0])),
                ..mk(
                    "mode",
                    ParamKind::Enum {
                        values: allowed_modes.iter().map(|m| format!("{m:04o}")).collect(),
                    },
                    false,
                )
            },
        );
    }
}
