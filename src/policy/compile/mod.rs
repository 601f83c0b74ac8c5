//! Policy compilation: raw TOML → checked [`Policy`], with every error located at file:line:col.
//!
//! Load-time checks (fail closed; each is an error, not a warning): version is 1; program paths
//! are absolute; a program that is a shell, interpreter or exec wrapper is refused unless the verb
//! sets `allow_interpreter`; every placeholder is declared and every parameter is used; optional
//! parameters without a default appear only inside optional groups; regexes compile and are
//! anchored; roles, sandboxes, secrets and approver roles referenced exist; secrets are never
//! inline; sandbox paths exist; examples are valid TOML values.
//!
//! One module per concern, each a phase of `build` read top to bottom: the daemon and
//! `[commands]` (`daemon`), roles and approver roles (`roles`), quorums, break-glass and the
//! notifier (`approvals`), secret sources and `[postgres_ephemeral]` (`secrets`), sandbox
//! profiles (`sandboxes`), then each verb (`verb`) with its parameters (`param`), the
//! built-in file verbs (`file_verb`) and the interpreter list (`interpreters`). Every phase
//! reports into one `Ctx`; the diagnostics are sorted by location at the end, so the order of
//! the phases decides only the order of problems found at the same place.
#![forbid(unsafe_code)]

mod approvals;
mod daemon;
mod file_verb;
mod interpreters;
mod param;
mod roles;
mod sandboxes;
mod secrets;
mod verb;

pub use approvals::MAX_QUORUM;
pub use interpreters::{interpreter_name, is_interpreter};
pub use sandboxes::DEFAULT_SANDBOX;

use super::include::{self, Expanded, Region};
use super::schema::*;
use super::template::Template;
use super::units::{parse_duration, parse_size};
use super::*;
use crate::protected::ProtectedNames;
use regex::Regex;
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a policy, with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file this is in when it is not the policy itself (an included pack).
    pub origin: Option<String>,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// A policy that cannot be used; lists every problem found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    pub origin: String,
    pub diagnostics: Vec<Diagnostic>,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let origin = d.origin.as_deref().unwrap_or(&self.origin);
            write!(f, "{origin}:{}:{}: {}", d.line, d.col, d.message)?;
        }
        Ok(())
    }
}

struct Ctx<'a> {
    text: &'a str,
    /// Where included packs sit in `text`.
    regions: &'a [Region],
    diagnostics: Vec<Diagnostic>,
    warnings: Vec<String>,
}

impl Ctx<'_> {
    fn at(&mut self, span: Range<usize>, message: impl Into<String>) {
        let diagnostic = located(self.text, self.regions, span.start, message.into());
        self.diagnostics.push(diagnostic);
    }

    /// `file:line:col` of `span`, with `origin` naming the policy itself.
    fn location(&self, span: Range<usize>, origin: &str) -> String {
        let d = located(self.text, self.regions, span.start, String::new());
        format!(
            "{}:{}:{}",
            d.origin.as_deref().unwrap_or(origin),
            d.line,
            d.col
        )
    }
}

/// A diagnostic at a byte offset of the combined text, in the file that offset came from.
fn located(text: &str, regions: &[Region], offset: usize, message: String) -> Diagnostic {
    let (line, col) = line_col(text, offset);
    match regions.iter().rev().find(|r| r.start <= offset) {
        Some(region) => Diagnostic {
            origin: Some(region.origin.clone()),
            line: line + 1 - region.first_line,
            col,
            message,
        },
        None => Diagnostic {
            origin: None,
            line,
            col,
            message,
        },
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, col)
}

/// Read and compile a policy file.
pub fn load_file(path: &Path) -> Result<Policy, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
        origin: path.display().to_string(),
        diagnostics: vec![Diagnostic {
            origin: None,
            line: 0,
            col: 0,
            message: format!("cannot read the policy: {e}"),
        }],
    })?;
    // The policy file and the packs it includes are always protected from the agents' writes,
    // by everything the compiled policy hands a protected set to: file verbs, path parameters,
    // sandboxes and the hook's check.
    let own = std::fs::canonicalize(path).ok();
    compile_with(
        &text,
        &path.display().to_string(),
        path.parent(),
        own.as_deref(),
    )
}

/// Compile policy text. `origin` names it in errors. Relative `include` paths need a file:
/// use [`load_file`] (or [`compile_in`]) for a policy that includes packs.
pub fn compile(text: &str, origin: &str) -> Result<Policy, PolicyError> {
    compile_in(text, origin, None)
}

/// Compile policy text whose relative `include` paths resolve against `base`.
pub fn compile_in(text: &str, origin: &str, base: Option<&Path>) -> Result<Policy, PolicyError> {
    compile_with(text, origin, base, None)
}

/// [`compile_in`], with the policy's own file (canonical) when it has one: that file and every
/// included pack join the protected paths before anything that holds the protected set is built.
fn compile_with(
    text: &str,
    origin: &str,
    base: Option<&Path>,
    own_file: Option<&Path>,
) -> Result<Policy, PolicyError> {
    let parse_error = |e: toml::de::Error| {
        let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        PolicyError {
            origin: origin.to_string(),
            diagnostics: vec![Diagnostic {
                origin: None,
                line,
                col,
                message: e.message().trim().to_string(),
            }],
        }
    };
    let mut raw: RawPolicy = toml::from_str(text).map_err(parse_error)?;
    let expanded = if raw.include.is_empty() {
        Expanded {
            text: text.to_string(),
            ..Expanded::default()
        }
    } else {
        let (expanded, errors) = include::expand(&mut raw, text, base);
        if !errors.is_empty() {
            return Err(PolicyError {
                origin: origin.to_string(),
                diagnostics: errors
                    .into_iter()
                    .map(|(span, message)| {
                        located(&expanded.text, &expanded.regions, span.start, message)
                    })
                    .collect(),
            });
        }
        expanded
    };
    let mut ctx = Ctx {
        text: &expanded.text,
        regions: &expanded.regions,
        diagnostics: Vec::new(),
        warnings: expanded.warnings.clone(),
    };
    let policy_files: Vec<PathBuf> = own_file
        .map(Path::to_path_buf)
        .into_iter()
        .chain(expanded.files.iter().cloned())
        .collect();
    let mut policy = build(&mut ctx, raw, &expanded.text, origin, &policy_files);
    policy.included = expanded.files.clone();
    if ctx.diagnostics.is_empty() {
        policy.warnings = ctx.warnings;
        Ok(policy)
    } else {
        ctx.diagnostics.sort_by_key(|d| (d.line, d.col));
        Err(PolicyError {
            origin: origin.to_string(),
            diagnostics: ctx.diagnostics,
        })
    }
}

fn duration_or(
    ctx: &mut Ctx,
    value: &Option<toml::Spanned<String>>,
    default: Duration,
) -> Duration {
    match value {
        None => default,
        Some(v) => parse_duration(v.get_ref()).unwrap_or_else(|e| {
            ctx.at(v.span(), e);
            default
        }),
    }
}

/// A `[daemon]` limit: at least 1 (a limit of 0 would refuse everyone).
fn count_or(
    ctx: &mut Ctx,
    key: &str,
    value: &Option<toml::Spanned<usize>>,
    default: usize,
) -> usize {
    match value {
        None => default,
        Some(v) if *v.get_ref() == 0 => {
            ctx.at(
                v.span(),
                format!("daemon.{key} must be at least 1 (0 would refuse every caller)"),
            );
            default
        }
        Some(v) => *v.get_ref(),
    }
}

fn size_or(ctx: &mut Ctx, value: &Option<toml::Spanned<String>>, default: u64) -> u64 {
    match value {
        None => default,
        Some(v) => parse_size(v.get_ref()).unwrap_or_else(|e| {
            ctx.at(v.span(), e);
            default
        }),
    }
}

fn build(
    ctx: &mut Ctx,
    raw: RawPolicy,
    text: &str,
    origin: &str,
    policy_files: &[PathBuf],
) -> Policy {
    if *raw.version.get_ref() != 1 {
        ctx.at(
            raw.version.span(),
            format!(
                "unsupported policy version {} (this verbd reads version = 1)",
                raw.version.get_ref()
            ),
        );
    }
    let daemon = daemon::build_daemon(ctx, &raw.daemon);
    let roles = roles::build_roles(&raw.roles, raw.commands.mode);
    let approvals = approvals::build_approvals(ctx, &raw.approvals, &roles);
    let secrets = secrets::build_secrets(ctx, &raw.secrets);
    let postgres_ephemeral =
        secrets::build_postgres_ephemeral(ctx, &raw.postgres_ephemeral, &secrets);
    let protected = build_protected(ctx, &raw.protected, policy_files);
    let sandboxes = sandboxes::build_sandboxes(ctx, &raw.sandbox, &protected);
    approvals::check_notify(ctx, &raw.approvals, &approvals, &secrets, &sandboxes);
    check_scrub(ctx, &raw.scrub);
    let known = verb::Known {
        roles: &roles,
        approvals: &approvals,
        sandboxes: &sandboxes,
        secrets: &secrets,
        protected: &protected,
        postgres_ephemeral: &postgres_ephemeral,
    };
    let verbs = raw
        .verb
        .iter()
        .filter_map(|(name, raw_verb)| {
            let verb = verb::build_verb(ctx, name, raw_verb, &known)?;
            Some((name.clone(), verb))
        })
        .collect();
    Policy {
        origin: origin.to_string(),
        hash: crate::digest::sha256_hex(text.as_bytes()),
        daemon,
        roles,
        approvals,
        secrets,
        postgres_ephemeral,
        sandboxes,
        protected,
        scrub_builtin: raw.scrub.builtin,
        scrub_patterns: raw
            .scrub
            .patterns
            .iter()
            .map(|p| ScrubPattern {
                name: p.name.clone(),
                regex: p.regex.clone(),
            })
            .collect(),
        verbs,
        commands: daemon::build_commands(ctx, &raw.commands),
        warnings: Vec::new(),
        included: Vec::new(),
        locations: locations(ctx, &raw, origin),
    }
}

/// `[protected]`: the built-in names and paths with the operator's additions, and the policy's
/// own files (canonical).
fn build_protected(ctx: &mut Ctx, raw: &RawProtected, policy_files: &[PathBuf]) -> ProtectedNames {
    match ProtectedNames::with_additions(&raw.names, &raw.paths)
        .and_then(|protected| protected.with_paths(policy_files))
    {
        Ok(p) => p,
        Err(e) => {
            ctx.at(0..0, format!("[protected]: {e}"));
            ProtectedNames::builtin()
        }
    }
}

/// `[scrub]` patterns: each regex compiles and each name is used once.
fn check_scrub(ctx: &mut Ctx, raw: &RawScrub) {
    let mut scrub_names = BTreeSet::new();
    for pattern in &raw.patterns {
        if let Err(e) = Regex::new(&pattern.regex) {
            ctx.at(
                0..0,
                format!("[scrub] pattern `{}`: bad regex: {e}", pattern.name),
            );
        }
        if !scrub_names.insert(pattern.name.clone()) {
            ctx.at(
                0..0,
                format!("[scrub] pattern name `{}` is used twice", pattern.name),
            );
        }
    }
}

/// [`Policy::locations`].
fn locations(ctx: &Ctx, raw: &RawPolicy, origin: &str) -> BTreeMap<String, String> {
    let daemon = [
        ("daemon.user", &raw.daemon.user),
        ("daemon.socket_group", &raw.daemon.socket_group),
        (
            "daemon.approver_socket_group",
            &raw.daemon.approver_socket_group,
        ),
    ];
    let daemon = daemon.into_iter().filter_map(|(key, value)| {
        let span = value.as_ref()?.span();
        Some((key.to_string(), ctx.location(span, origin)))
    });
    let roles = raw
        .roles
        .iter()
        .map(|(name, role)| (format!("roles.{name}"), ctx.location(role.span(), origin)));
    let verbs = raw
        .verb
        .iter()
        .map(|(name, verb)| (format!("verb.{name}"), ctx.location(verb.span(), origin)));
    daemon.chain(roles).chain(verbs).collect()
}

/// A command written as one line or as an argv, parsed into a template; a parse error is
/// reported at the command.
fn command_template(ctx: &mut Ctx, raw: &toml::Spanned<RawCommand>) -> Option<Template> {
    let parsed = match raw.get_ref() {
        RawCommand::Line(line) => Template::parse_line(line),
        RawCommand::Argv(argv) => Template::parse(argv.clone()),
    };
    parsed.map_err(|e| ctx.at(raw.span(), e.to_string())).ok()
}
