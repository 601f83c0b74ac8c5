//! Policy packs: `include = [...]` brings the verbs and sandbox profiles of other files into a
//! policy before it is compiled.
//!
//! A pack holds only `[pack]` (a description), `[sandbox.*]` and `[verb.*]`: it cannot define
//! roles, secrets, approvers, the daemon or protected paths, so including one never widens who
//! may call or approve anything beyond the verbs it adds. The including policy narrows a pack
//! with `roles` (replaces every verb's roles), `verbs` (takes only these), `values` (every
//! parameter of that name becomes an enum of exactly these values; the pack's examples follow:
//! an accepted example outside the values must now be refused, and is accepted again with the
//! first value) and `programs` (the path of a program on this host).
//!
//! Invariants: every name the including policy uses (verb, parameter, program) must exist in the
//! pack, or loading fails; a verb defined twice (policy and pack, or two packs) is an error; a
//! sandbox profile defined in the policy replaces the pack's, with a warning; a pack file that
//! group or others may write is refused (whoever can write it can add verbs). Errors keep the
//! pack's own file:line:col: each pack is parsed at its offset in one combined text, and
//! [`Region`]s map a combined offset back to the file it came from. The policy hash covers the
//! combined text, so editing a pack changes it.
#![forbid(unsafe_code)]

use super::schema::{
    RawCommand, RawExamples, RawInclude, RawIncludeTable, RawParamType, RawPolicy, RawSandbox,
    RawVerb,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A pack file: verbs and sandbox profiles, nothing that grants or approves.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPack {
    #[serde(default)]
    pub pack: RawPackMeta,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawSandbox>")]
    pub sandbox: BTreeMap<String, Spanned<RawSandbox>>,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawVerb>")]
    pub verb: BTreeMap<String, Spanned<RawVerb>>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPackMeta {
    #[serde(default)]
    pub description: String,
}

/// Where a stretch of the combined text came from.
#[derive(Debug, Clone)]
pub struct Region {
    /// Byte offset in the combined text where this file starts.
    pub start: usize,
    /// Line of the combined text that is this file's line 1.
    pub first_line: usize,
    pub origin: String,
}

/// The outcome of expanding a policy's includes.
#[derive(Debug, Default)]
pub struct Expanded {
    /// The policy text followed by every pack's text (what the policy hash covers).
    pub text: String,
    /// The packs' regions (the policy itself is everything before the first).
    pub regions: Vec<Region>,
    /// Canonical paths of the pack files (protected from agents' writes like the policy).
    pub files: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

/// One include problem: a span in the combined text and a message.
pub type IncludeError = (Range<usize>, String);

/// Resolve, read and merge every include of `raw` (whose text is `text`, in directory `base`).
/// The problems found are located in the returned combined text.
pub fn expand(
    raw: &mut RawPolicy,
    text: &str,
    base: Option<&Path>,
) -> (Expanded, Vec<IncludeError>) {
    let mut out = Expanded {
        text: text.to_string(),
        ..Expanded::default()
    };
    let mut errors = Vec::new();
    let mut from_packs: BTreeMap<String, String> = BTreeMap::new();
    let mut sandbox_from_packs: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::mem::take(&mut raw.include) {
        let span = entry.span();
        let table = match entry.into_inner() {
            RawInclude::Path(path) => RawIncludeTable {
                path,
                roles: None,
                verbs: None,
                values: BTreeMap::new(),
                programs: BTreeMap::new(),
            },
            RawInclude::Table(t) => t,
        };
        let mut at = |message: String| errors.push((span.clone(), message));
        let path = match resolve(&table.path, base) {
            Ok(p) => p,
            Err(e) => {
                at(e);
                continue;
            }
        };
        if out.files.contains(&path) {
            at(format!("{} is included twice", path.display()));
            continue;
        }
        let pack_text = match read_pack(&path) {
            Ok(t) => t,
            Err(e) => {
                at(e);
                continue;
            }
        };
        let origin = path.display().to_string();
        out.text.push('\n');
        let start = out.text.len();
        let first_line = out.text.matches('\n').count() + 1;
        // Parse the pack at its offset in the combined text so its spans point into it.
        let padded: String = out
            .text
            .bytes()
            .map(|b| if b == b'\n' { '\n' } else { ' ' })
            .chain(pack_text.chars())
            .collect();
        out.text.push_str(&pack_text);
        out.regions.push(Region {
            start,
            first_line,
            origin: origin.clone(),
        });
        out.files.push(path);
        let mut pack: RawPack = match toml::from_str(&padded) {
            Ok(p) => p,
            Err(e) => {
                let at_span = e.span().unwrap_or(start..start);
                errors.push((at_span, e.message().trim().to_string()));
                continue;
            }
        };
        let problems = narrow(&mut pack, &table, &origin);
        if !problems.is_empty() {
            errors.extend(problems.into_iter().map(|p| (span.clone(), p)));
            continue;
        }
        for (name, sandbox) in pack.sandbox {
            if raw.sandbox.contains_key(&name) {
                if let Some(other) = sandbox_from_packs.get(&name) {
                    errors.push((
                        span.clone(),
                        format!("sandbox `{name}` is defined by both {other} and {origin}"),
                    ));
                } else {
                    out.warnings.push(format!(
                        "sandbox `{name}` of {origin} is replaced by the policy's own [sandbox.{name}]"
                    ));
                }
                continue;
            }
            sandbox_from_packs.insert(name.clone(), origin.clone());
            raw.sandbox.insert(name, sandbox);
        }
        for (name, verb) in pack.verb {
            if raw.verb.contains_key(&name) {
                let other = from_packs
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| "the policy".to_string());
                errors.push((
                    span.clone(),
                    format!(
                        "verb `{name}` of {origin} is also defined by {other}; leave it out with `verbs = [...]` on this include"
                    ),
                ));
                continue;
            }
            from_packs.insert(name.clone(), origin.clone());
            raw.verb.insert(name, verb);
        }
    }
    (out, errors)
}

fn resolve(path: &str, base: Option<&Path>) -> Result<PathBuf, String> {
    let given = Path::new(path);
    let full = if given.is_absolute() {
        given.to_path_buf()
    } else {
        match base {
            Some(dir) => dir.join(given),
            None => {
                return Err(format!(
                    "include {path:?}: a relative pack path needs the policy to be a file on disk"
                ));
            }
        }
    };
    std::fs::canonicalize(&full).map_err(|e| format!("include {}: {e}", full.display()))
}

fn read_pack(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("include {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("include {}: not a regular file", path.display()));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(format!(
            "include {}: mode {:04o} lets group or others write it, and whoever writes a pack adds verbs (chmod go-w {})",
            path.display(),
            mode & 0o7777,
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("include {}: {e}", path.display()))
}

/// Apply the include's `verbs`, `roles`, `values` and `programs` to the pack; every name used
/// must exist in it.
fn narrow(pack: &mut RawPack, table: &RawIncludeTable, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(keep) = &table.verbs {
        for name in keep {
            if !pack.verb.contains_key(name) {
                problems.push(format!(
                    "{origin} has no verb `{name}` (it has: {})",
                    pack.verb.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        pack.verb.retain(|name, _| keep.contains(name));
    }
    for verb in pack.verb.values_mut() {
        let verb = verb.get_mut();
        if let Some(roles) = &table.roles {
            verb.roles = roles.clone();
        }
    }
    for (param, values) in &table.values {
        let mut found = false;
        for (verb_name, verb) in &mut pack.verb {
            let verb = verb.get_mut();
            let Some(p) = verb.params.get_mut(param) else {
                continue;
            };
            found = true;
            let p = p.get_mut();
            if p.kind == RawParamType::Bool {
                problems.push(format!(
                    "verb `{verb_name}` of {origin}: parameter `{param}` is a bool flag and cannot become an enum"
                ));
                continue;
            }
            if values.is_empty() {
                problems.push(format!("values.{param}: give at least one value"));
                continue;
            }
            if let Some(default) = p.default.as_ref().and_then(example_text)
                && !values.contains(&default)
            {
                problems.push(format!(
                    "values.{param}: verb `{verb_name}` of {origin} defaults `{param}` to {default:?}, which is not among these values; add it, or leave `{param}` out of values"
                ));
                continue;
            }
            follow_narrowing(&mut verb.examples, param, values);
            p.kind = RawParamType::Enum;
            p.values = Some(values.clone());
            p.min = None;
            p.max = None;
            p.pattern = None;
            p.max_length = None;
            p.roots = None;
            p.must_exist = None;
            p.create = None;
            p.max_duration = None;
            p.allow = None;
            p.deny_functions = None;
        }
        if !found {
            problems.push(format!(
                "values.{param}: no verb of {origin} has a parameter `{param}`"
            ));
        }
    }
    let mut programs_used = BTreeSet::new();
    for verb in pack.verb.values_mut() {
        let verb = verb.get_mut();
        for command in [&mut verb.command, &mut verb.dry_run].into_iter().flatten() {
            if let Some(name) = replace_program(command.get_mut(), &table.programs, &mut problems) {
                programs_used.insert(name);
            }
        }
    }
    for (name, path) in &table.programs {
        if !path.is_absolute() {
            problems.push(format!(
                "programs.{name}: {} must be an absolute path",
                path.display()
            ));
        }
        if !programs_used.contains(name) {
            problems.push(format!(
                "programs.{name}: no verb of {origin} runs a program named `{name}`"
            ));
        }
    }
    problems
}

/// An example value as the policy's examples compare it: strings as they are, integers and
/// booleans as their text.
fn example_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The pack's examples after `param` became an enum of `values`: an accept example whose value
/// is not among them is now expected to be refused (it moves to `reject`, so the self-test proves
/// the narrowing holds), and the same example with the first allowed value takes its place among
/// the accepted ones (so the self-test still renders the verb with its other arguments).
/// Reject examples stay: whatever they were refused for, they still are — unless the include
/// allows their value, which the self-test then reports as a contradiction.
fn follow_narrowing(examples: &mut RawExamples, param: &str, values: &[String]) {
    let mut accept = Vec::new();
    for example in std::mem::take(&mut examples.accept) {
        let outside = example
            .get(param)
            .and_then(example_text)
            .is_some_and(|value| !values.contains(&value));
        if !outside {
            if !accept.contains(&example) {
                accept.push(example);
            }
            continue;
        }
        let mut allowed = example.clone();
        allowed.insert(param.to_string(), toml::Value::String(values[0].clone()));
        if !examples.reject.contains(&example) {
            examples.reject.push(example);
        }
        if !accept.contains(&allowed) {
            accept.push(allowed);
        }
    }
    examples.accept = accept;
}

/// Swap the program of a command when its file name is in `programs`; returns that name.
fn replace_program(
    command: &mut RawCommand,
    programs: &BTreeMap<String, PathBuf>,
    problems: &mut Vec<String>,
) -> Option<String> {
    if programs.is_empty() {
        return None;
    }
    let mut argv = match command {
        RawCommand::Argv(argv) => argv.clone(),
        RawCommand::Line(line) => match shell_words::split(line) {
            Ok(words) => words,
            Err(e) => {
                problems.push(format!("cannot split command {line:?}: {e}"));
                return None;
            }
        },
    };
    let first = argv.first_mut()?;
    let name = Path::new(first.as_str())
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let replacement = programs.get(&name)?;
    *first = replacement.display().to_string();
    *command = RawCommand::Argv(argv);
    Some(name)
}
