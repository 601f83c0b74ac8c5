//! Policy compilation: raw TOML → checked [`Policy`], with every error located at file:line:col.
//!
//! Load-time checks (fail closed; each is an error, not a warning): version is 1; program paths
//! are absolute; a program that is a shell, interpreter or exec wrapper is refused unless the verb
//! sets `allow_interpreter`; every placeholder is declared and every parameter is used; optional
//! parameters without a default appear only inside optional groups; regexes compile and are
//! anchored; roles, sandboxes, secrets and approver roles referenced exist; secrets are never
//! inline; sandbox paths exist; examples are valid TOML values.
#![forbid(unsafe_code)]

mod sandboxes;

pub use sandboxes::DEFAULT_SANDBOX;

use super::include::{self, Expanded, Region};
use super::params::{DEFAULT_MAX_LENGTH, Param, ParamKind, PathOpener};
use super::schema::*;
use super::sql::{QualifiedName, SqlKind, SqlOptions};
use super::template::{ElementTemplate, Template};
use super::units::{parse_duration, parse_mode, parse_rate, parse_size};
use super::*;
use crate::files::{FileOp, FileVerbSpec};
use crate::pg_ephemeral::PgEphemeralSource;
use crate::protected::ProtectedNames;
use crate::sandbox::SandboxSpec;
use regex::Regex;
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

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

/// Programs that would turn a verb back into a general-purpose shell.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "pdksh",
    "csh",
    "tcsh",
    "fish",
    "ash",
    "rbash",
    "busybox",
    "toybox",
    "env",
    "python",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "expect",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "xargs",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "setsid",
    "sudo",
    "su",
    "doas",
    "pkexec",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "script",
    "gdb",
    "osascript",
    "pwsh",
    "powershell",
    "R",
    "Rscript",
    "julia",
    "ssh",
    "socat",
    "ncat",
    "nc",
    "vim",
    "vi",
    "nvim",
    "ed",
    "ex",
    "emacs",
];

/// The interpreter or shell name when `program` (or what it resolves to) is one.
pub fn is_interpreter(program: &Path) -> Option<String> {
    let check = |p: &Path| -> Option<String> {
        let name = p.file_name()?.to_str()?;
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        INTERPRETERS
            .iter()
            .any(|i| *i == name || *i == stem)
            .then(|| name.to_string())
    };
    check(program).or_else(|| std::fs::canonicalize(program).ok().and_then(|p| check(&p)))
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
    let mut policy = compile_in(&text, &path.display().to_string(), path.parent())?;
    // The policy file and the packs it includes are always protected from the agents' writes.
    if let Ok(real) = std::fs::canonicalize(path) {
        let mut files = vec![real];
        files.extend(policy.included.iter().cloned());
        policy.protected = policy
            .protected
            .clone()
            .with_paths(&files)
            .unwrap_or(policy.protected);
    }
    Ok(policy)
}

/// Compile policy text. `origin` names it in errors. Relative `include` paths need a file:
/// use [`load_file`] (or [`compile_in`]) for a policy that includes packs.
pub fn compile(text: &str, origin: &str) -> Result<Policy, PolicyError> {
    compile_in(text, origin, None)
}

/// Compile policy text whose relative `include` paths resolve against `base`.
pub fn compile_in(text: &str, origin: &str, base: Option<&Path>) -> Result<Policy, PolicyError> {
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
    let mut policy = build(&mut ctx, raw, &expanded.text, origin);
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

fn build(ctx: &mut Ctx, raw: RawPolicy, text: &str, origin: &str) -> Policy {
    if *raw.version.get_ref() != 1 {
        ctx.at(
            raw.version.span(),
            format!(
                "unsupported policy version {} (this verbd reads version = 1)",
                raw.version.get_ref()
            ),
        );
    }
    let daemon = build_daemon(ctx, &raw.daemon);
    let roles = build_roles(&raw.roles, raw.commands.mode);
    let approvals = build_approvals(ctx, &raw.approvals, &roles);
    let secrets = build_secrets(ctx, &raw.secrets);
    let postgres_ephemeral = build_postgres_ephemeral(ctx, &raw.postgres_ephemeral, &secrets);
    let protected = match ProtectedNames::with_additions(&raw.protected.names, &raw.protected.paths)
    {
        Ok(p) => p,
        Err(e) => {
            ctx.at(0..0, format!("[protected]: {e}"));
            ProtectedNames::builtin()
        }
    };
    let sandboxes = sandboxes::build_sandboxes(ctx, &raw.sandbox, &protected);
    check_notify(ctx, &raw.approvals, &approvals, &secrets, &sandboxes);
    let mut scrub_names = BTreeSet::new();
    for pattern in &raw.scrub.patterns {
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
    let mut verbs = BTreeMap::new();
    for (name, raw_verb) in &raw.verb {
        if let Some(verb) = build_verb(
            ctx,
            name,
            raw_verb,
            &roles,
            &approvals,
            &sandboxes,
            &secrets,
            &protected,
            &postgres_ephemeral,
        ) {
            verbs.insert(name.clone(), verb);
        }
    }
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
        commands: build_commands(ctx, &raw.commands),
        warnings: Vec::new(),
        included: Vec::new(),
        locations: locations(ctx, &raw, origin),
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

/// The longest `daemon.queue_timeout` may be.
const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(600);

fn build_daemon(ctx: &mut Ctx, raw: &RawDaemon) -> DaemonConfig {
    let socket_mode = match &raw.socket_mode {
        None => 0o660,
        Some(m) => parse_mode(m.get_ref()).unwrap_or_else(|e| {
            ctx.at(m.span(), e);
            0o660
        }),
    };
    if socket_mode & 0o007 != 0
        && let Some(m) = &raw.socket_mode
    {
        ctx.at(
            m.span(),
            "socket_mode must not grant access to others (use a group: socket_group)",
        );
    }
    for p in [&raw.socket, &raw.approver_socket, &raw.state_dir]
        .into_iter()
        .flatten()
    {
        if !p.get_ref().is_absolute() {
            ctx.at(p.span(), "path must be absolute");
        }
    }
    let queue_timeout = duration_or(ctx, &raw.queue_timeout, Duration::from_secs(5));
    if queue_timeout > MAX_QUEUE_TIMEOUT
        && let Some(v) = &raw.queue_timeout
    {
        ctx.at(
            v.span(),
            format!(
                "daemon.queue_timeout must be at most {}s: a queued call holds its connection",
                MAX_QUEUE_TIMEOUT.as_secs()
            ),
        );
    }
    DaemonConfig {
        socket: raw.socket.as_ref().map(|s| s.get_ref().clone()),
        socket_mode,
        socket_group: raw.socket_group.as_ref().map(|s| s.get_ref().clone()),
        approver_socket: raw.approver_socket.as_ref().map(|s| s.get_ref().clone()),
        approver_socket_group: raw
            .approver_socket_group
            .as_ref()
            .map(|s| s.get_ref().clone()),
        state_dir: raw.state_dir.as_ref().map(|s| s.get_ref().clone()),
        user: raw.user.as_ref().map(|s| s.get_ref().clone()),
        allow_root: raw.allow_root,
        max_connections: count_or(ctx, "max_connections", &raw.max_connections, 256),
        max_connections_per_uid: count_or(
            ctx,
            "max_connections_per_uid",
            &raw.max_connections_per_uid,
            32,
        ),
        max_waits: count_or(ctx, "max_waits", &raw.max_waits, 256),
        max_waits_per_uid: count_or(ctx, "max_waits_per_uid", &raw.max_waits_per_uid, 16),
        approver_max_connections: count_or(
            ctx,
            "approver_max_connections",
            &raw.approver_max_connections,
            64,
        ),
        max_executions: count_or(ctx, "max_executions", &raw.max_executions, 16),
        queue_timeout: queue_timeout.min(MAX_QUEUE_TIMEOUT),
        max_request_bytes: raw
            .max_request_bytes
            .unwrap_or(crate::protocol::MAX_REQUEST_BYTES),
        request_timeout: duration_or(ctx, &raw.request_timeout, Duration::from_secs(10)),
        shutdown_grace: duration_or(ctx, &raw.shutdown_grace, Duration::from_secs(10)),
    }
}

/// `[commands]`: privileged paths must be absolute (they are compared with absolute words).
fn build_commands(ctx: &mut Ctx, raw: &RawCommands) -> CommandsConfig {
    let mut paths = Vec::new();
    for spanned in &raw.privileged_paths {
        let path = spanned.get_ref();
        if path.is_absolute() {
            paths.push(path.clone());
        } else {
            ctx.at(
                spanned.span(),
                format!(
                    "[commands] privileged_paths: {} is not absolute",
                    path.display()
                ),
            );
        }
    }
    CommandsConfig {
        privileged_programs: raw.privileged_programs.clone(),
        privileged_paths: paths,
    }
}

/// The roles; an agent role without its own `commands` takes `default_mode` (`[commands] mode`).
fn build_roles(
    raw: &BTreeMap<String, toml::Spanned<RawRole>>,
    default_mode: Option<RawCommandMode>,
) -> BTreeMap<String, Role> {
    raw.iter()
        .map(|(name, r)| {
            let r = r.get_ref();
            let kind = match r.kind {
                RawRoleKind::Agent => RoleKind::Agent,
                RawRoleKind::Human => RoleKind::Human,
            };
            let inherited = match kind {
                RoleKind::Agent => default_mode,
                RoleKind::Human => None,
            };
            (
                name.clone(),
                Role {
                    name: name.clone(),
                    kind,
                    users: r.users.clone(),
                    groups: r.groups.clone(),
                    uids: r.uids.clone(),
                    commands: match r.commands.or(inherited).unwrap_or_default() {
                        RawCommandMode::Off => CommandMode::Off,
                        RawCommandMode::Advise => CommandMode::Advise,
                        RawCommandMode::Rewrite => CommandMode::Rewrite,
                    },
                },
            )
        })
        .collect()
}

/// Every approver role named exists and is human; a problem is located at the name itself.
fn check_approver_roles(
    ctx: &mut Ctx,
    names: &[toml::Spanned<String>],
    roles: &BTreeMap<String, Role>,
) -> Vec<String> {
    for spanned in names {
        let (name, span) = (spanned.get_ref(), spanned.span());
        match roles.get(name) {
            None => ctx.at(span, format!("approver role `{name}` is not defined")),
            Some(r) if r.kind != RoleKind::Human => ctx.at(
                span,
                format!(
                    "approver role `{name}` is an agent role; approvers must be roles with kind = \"human\""
                ),
            ),
            Some(_) => {}
        }
    }
    names.iter().map(|n| n.get_ref().clone()).collect()
}

/// Most distinct people a quorum may ask for.
pub const MAX_QUORUM: u32 = 16;

/// A quorum as written, checked on its own: a count of 1 to [`MAX_QUORUM`], human roles named
/// once each, a `max_per_role` of at least 1 that the roles of `from` can meet together.
fn build_quorum(
    ctx: &mut Ctx,
    place: &str,
    spanned: &toml::Spanned<RawQuorum>,
    roles: &BTreeMap<String, Role>,
) -> Option<Quorum> {
    let (raw, span) = (spanned.get_ref(), spanned.span());
    let errors_before = ctx.diagnostics.len();
    if raw.count == 0 || raw.count > MAX_QUORUM {
        ctx.at(
            span.clone(),
            format!(
                "{place}: quorum count = {}: give 1 to {MAX_QUORUM} distinct approvers",
                raw.count
            ),
        );
    }
    let from = check_approver_roles(ctx, &raw.from, roles);
    let mut seen = BTreeSet::new();
    for name in &from {
        if !seen.insert(name) {
            ctx.at(
                span.clone(),
                format!("{place}: quorum role `{name}` is named twice in `from`; name it once"),
            );
        }
    }
    match raw.max_per_role {
        Some(0) => ctx.at(
            span.clone(),
            format!("{place}: max_per_role = 0 would refuse every approval; give at least 1 or leave it out"),
        ),
        Some(max) if !from.is_empty() && max.saturating_mul(from.len() as u32) < raw.count => {
            ctx.at(
                span.clone(),
                format!(
                    "{place}: a quorum of {} can never be met: {} role(s) in `from` × max_per_role {max} give at most {}; raise max_per_role, add roles to `from` or lower count",
                    raw.count,
                    from.len(),
                    max.saturating_mul(from.len() as u32)
                ),
            );
        }
        _ => {}
    }
    if ctx.diagnostics.len() > errors_before {
        return None;
    }
    Some(Quorum {
        count: raw.count,
        from,
        max_per_role: raw.max_per_role,
    })
}

/// A verb's quorum (its own, or its category's) checked against who may approve the verb: every
/// role of `from` is one of its approver roles, and they can meet `max_per_role` together.
/// `None` when one person's approval is enough.
fn verb_quorum(
    ctx: &mut Ctx,
    (name, span): (&str, &Range<usize>),
    raw: &RawVerb,
    (needs_approval, category): (bool, Option<Category>),
    approvals: &ApprovalsConfig,
    verb_approvers: &[String],
    roles: &BTreeMap<String, Role>,
) -> Option<Quorum> {
    let place = format!("verb `{name}`");
    let quorum = match &raw.quorum {
        Some(own) => {
            if !needs_approval {
                ctx.at(
                    own.span(),
                    format!("{place} runs without approval, so `quorum` has nothing to count; remove it or require approval"),
                );
                return None;
            }
            build_quorum(ctx, &place, own, roles)?
        }
        None if needs_approval => approvals
            .quorum
            .get(category.map_or("unspecified", Category::as_str))
            .cloned()?,
        None => return None,
    };
    let approver_roles: BTreeSet<&String> =
        approvals.approvers.iter().chain(verb_approvers).collect();
    for role in &quorum.from {
        if !approver_roles.contains(role) {
            ctx.at(
                span.clone(),
                format!("{place}: quorum role `{role}` cannot approve this verb; add it to the verb's `approvers` or to [approvals] approvers"),
            );
        }
    }
    let counted = if quorum.from.is_empty() {
        approver_roles.len()
    } else {
        quorum.from.len()
    } as u32;
    if let Some(max) = quorum.max_per_role
        && max.saturating_mul(counted) < quorum.count
    {
        ctx.at(
            span.clone(),
            format!(
                "{place}: a quorum of {} can never be met: {counted} approver role(s) × max_per_role {max}; raise max_per_role, add approver roles or lower count",
                quorum.count
            ),
        );
    }
    let one_person = Quorum {
        count: 1,
        from: Vec::new(),
        max_per_role: None,
    };
    (quorum != one_person).then_some(quorum)
}

/// A verb's `break_glass` roles: human roles that may call the verb, on a verb that needs
/// approval (there is nothing to skip otherwise).
fn verb_break_glass(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    needs_approval: bool,
    roles: &BTreeMap<String, Role>,
) -> Vec<String> {
    for spanned in &raw.break_glass {
        let (role, span) = (spanned.get_ref(), spanned.span());
        match roles.get(role) {
            None => ctx.at(span, format!("verb `{name}`: break_glass role `{role}` is not defined in [roles]")),
            Some(r) if r.kind != RoleKind::Human => ctx.at(
                span,
                format!("verb `{name}`: break_glass role `{role}` is an agent role; break-glass is for people (a verb an agent runs without approval is approval = \"none\")"),
            ),
            Some(_) if !raw.roles.contains(role) => ctx.at(
                span,
                format!("verb `{name}`: break_glass role `{role}` may not call the verb; add it to the verb's `roles`"),
            ),
            Some(_) if !needs_approval => ctx.at(
                span,
                format!("verb `{name}` runs without approval, so `break_glass` has nothing to skip; remove it"),
            ),
            Some(_) => {}
        }
    }
    raw.break_glass
        .iter()
        .map(|r| r.get_ref().clone())
        .collect()
}

fn build_approvals(
    ctx: &mut Ctx,
    raw: &RawApprovals,
    roles: &BTreeMap<String, Role>,
) -> ApprovalsConfig {
    let approvers = check_approver_roles(ctx, &raw.approvers, roles);
    let notify = raw.notify.as_ref().and_then(|n| command_template(ctx, n));
    ApprovalsConfig {
        mode: match raw.mode {
            RawApprovalMode::Interactive => ApprovalMode::Interactive,
            RawApprovalMode::Headless => ApprovalMode::Headless,
        },
        approvers,
        expires: duration_or(ctx, &raw.expires, Duration::from_secs(30 * 60)),
        notify,
        notify_sandbox: raw
            .notify_sandbox
            .as_ref()
            .map_or_else(|| DEFAULT_SANDBOX.to_string(), |s| s.get_ref().clone()),
        quorum: raw
            .quorum
            .iter()
            .filter_map(|(category, q)| {
                let place = format!("[approvals.quorum] {category}");
                match category.as_str() {
                    "mutating" | "destructive" => {}
                    "read-only" => {
                        ctx.at(
                            q.span(),
                            format!("{place}: a read-only verb runs without approval, so a quorum has nothing to count; remove it"),
                        );
                        return None;
                    }
                    other => {
                        ctx.at(
                            q.span(),
                            format!("[approvals.quorum]: unknown category `{other}`; use `mutating` or `destructive`"),
                        );
                        return None;
                    }
                }
                build_quorum(ctx, &place, q, roles).map(|q| (category.clone(), q))
            })
            .collect(),
    }
}

/// The notifier names only `{id}`, secrets that exist and a sandbox profile that exists.
fn check_notify(
    ctx: &mut Ctx,
    raw: &RawApprovals,
    approvals: &ApprovalsConfig,
    secrets: &BTreeMap<String, SecretSource>,
    sandboxes: &BTreeMap<String, SandboxSpec>,
) {
    if let (Some(template), Some(raw_notify)) = (&approvals.notify, &raw.notify) {
        for (element, _) in template.elements() {
            for param in element.params().filter(|p| *p != "id") {
                ctx.at(
                    raw_notify.span(),
                    format!(
                        "[approvals] notify: `{{{param}}}` is not a placeholder of the notifier (only {{id}}; the proposal itself arrives on stdin)"
                    ),
                );
            }
            for secret in element.secrets().filter(|s| !secrets.contains_key(*s)) {
                ctx.at(
                    raw_notify.span(),
                    format!(
                        "[approvals] notify uses secret `{secret}`, which is not defined in [secrets]"
                    ),
                );
            }
        }
    }
    if let Some(name) = &raw.notify_sandbox
        && !sandboxes.contains_key(name.get_ref())
    {
        ctx.at(
            name.span(),
            format!(
                "[approvals] notify_sandbox: sandbox `{}` is not defined",
                name.get_ref()
            ),
        );
    }
}

fn command_template(ctx: &mut Ctx, raw: &toml::Spanned<RawCommand>) -> Option<Template> {
    let parsed = match raw.get_ref() {
        RawCommand::Line(line) => Template::parse_line(line),
        RawCommand::Argv(argv) => Template::parse(argv.clone()),
    };
    parsed.map_err(|e| ctx.at(raw.span(), e.to_string())).ok()
}

fn build_secrets(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, toml::Spanned<RawSecret>>,
) -> BTreeMap<String, SecretSource> {
    let mut out = BTreeMap::new();
    for (name, s) in raw {
        let span = s.span();
        let s = s.get_ref();
        if s.value.is_some() {
            ctx.at(
                span,
                format!(
                    "secret `{name}` is written inline; secrets never live in the policy. Put it in a file (file = \"/etc/verbd/secrets/{name}\", mode 0600) or a systemd credential (credential = \"{name}\")"
                ),
            );
            continue;
        }
        let sources = [
            s.file.clone().map(SecretSource::File),
            s.credential.clone().map(SecretSource::Credential),
            s.env.clone().map(SecretSource::Env),
        ];
        let mut given = sources.into_iter().flatten();
        match (given.next(), given.next()) {
            (Some(source), None) => {
                if let SecretSource::File(p) = &source
                    && !p.is_absolute()
                {
                    ctx.at(span, format!("secret `{name}`: file path must be absolute"));
                }
                out.insert(name.clone(), source);
            }
            _ => ctx.at(
                span,
                format!("secret `{name}` needs exactly one of file, credential or env"),
            ),
        }
    }
    out
}

/// `[postgres_ephemeral.NAME]`: absolute psql, plain role names, an admin secret that exists.
fn build_postgres_ephemeral(
    ctx: &mut Ctx,
    raw: &BTreeMap<String, toml::Spanned<RawPostgresEphemeral>>,
    secrets: &BTreeMap<String, SecretSource>,
) -> BTreeMap<String, PgEphemeralSource> {
    let mut out = BTreeMap::new();
    for (name, spanned) in raw {
        let span = spanned.span();
        let s = spanned.get_ref();
        let errors_before = ctx.diagnostics.len();
        let refuse = |ctx: &mut Ctx, what: String| {
            ctx.at(span.clone(), format!("postgres_ephemeral `{name}`: {what}"));
        };
        if !s.psql.is_absolute() {
            refuse(ctx, "psql must be an absolute path".into());
        }
        if s.host.is_empty() || s.host.contains(['\0', '\n']) {
            refuse(ctx, "host must be a socket directory or a host name".into());
        }
        for (key, value) in [
            ("admin_user", &s.admin_user),
            ("template", &s.template),
            ("database", &s.database),
        ] {
            if !crate::pg_ephemeral::valid_identifier(value) {
                refuse(
                    ctx,
                    format!("{key} `{value}` must be a plain lowercase name ([a-z_][a-z0-9_]*)"),
                );
            }
        }
        if s.template.starts_with(crate::pg_ephemeral::ROLE_PREFIX) {
            refuse(ctx, "the template must not look like a minted role".into());
        }
        if !secrets.contains_key(&s.admin_secret) {
            refuse(
                ctx,
                format!(
                    "admin_secret `{}` is not defined in [secrets]",
                    s.admin_secret
                ),
            );
        }
        let slack = match &s.slack {
            None => Duration::from_secs(60),
            Some(text) => parse_duration(text).unwrap_or_else(|e| {
                refuse(ctx, format!("slack: {e}"));
                Duration::from_secs(60)
            }),
        };
        if ctx.diagnostics.len() > errors_before {
            continue;
        }
        out.insert(
            name.clone(),
            PgEphemeralSource {
                name: name.clone(),
                psql: s.psql.clone(),
                host: s.host.clone(),
                port: s.port.unwrap_or(5432),
                database: s.database.clone(),
                admin_user: s.admin_user.clone(),
                admin_secret: s.admin_secret.clone(),
                template: s.template.clone(),
                slack,
            },
        );
    }
    out
}

fn example_maps(
    ctx: &mut Ctx,
    span: Range<usize>,
    verb: &str,
    raw: &[BTreeMap<String, toml::Value>],
) -> Vec<BTreeMap<String, String>> {
    raw.iter()
        .map(|example| {
            example
                .iter()
                .filter_map(|(k, v)| {
                    let text = match v {
                        toml::Value::String(s) => s.clone(),
                        toml::Value::Integer(i) => i.to_string(),
                        toml::Value::Boolean(b) => b.to_string(),
                        _ => {
                            ctx.at(
                                span.clone(),
                                format!("verb `{verb}`: example value for `{k}` must be a string, integer or bool"),
                            );
                            return None;
                        }
                    };
                    Some((k.clone(), text))
                })
                .collect()
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn build_verb(
    ctx: &mut Ctx,
    name: &str,
    spanned: &toml::Spanned<RawVerb>,
    roles: &BTreeMap<String, Role>,
    approvals: &ApprovalsConfig,
    sandboxes: &BTreeMap<String, SandboxSpec>,
    secrets: &BTreeMap<String, SecretSource>,
    protected: &ProtectedNames,
    postgres_ephemeral: &BTreeMap<String, PgEphemeralSource>,
) -> Option<Verb> {
    let span = spanned.span();
    let raw = spanned.get_ref();
    let errors_before = ctx.diagnostics.len();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        ctx.at(
            span.clone(),
            format!("verb name {name:?}: use letters, digits, `-`, `_`, `.`"),
        );
    }
    if raw.roles.is_empty() {
        ctx.at(
            span.clone(),
            format!("verb `{name}` lists no roles, so nobody could call it"),
        );
    }
    for role in &raw.roles {
        if !roles.contains_key(role) {
            ctx.at(
                span.clone(),
                format!("verb `{name}`: role `{role}` is not defined in [roles]"),
            );
        }
    }
    let approvers = check_approver_roles(ctx, &raw.approvers, roles);
    let sandbox = match &raw.sandbox {
        None => DEFAULT_SANDBOX.to_string(),
        Some(s) => {
            if !sandboxes.contains_key(s.get_ref()) {
                ctx.at(
                    s.span(),
                    format!("verb `{name}`: sandbox `{}` is not defined", s.get_ref()),
                );
            }
            s.get_ref().clone()
        }
    };

    let mut params = BTreeMap::new();
    for (pname, rp) in &raw.params {
        if let Some(p) = build_param(ctx, name, pname, rp) {
            params.insert(pname.clone(), p);
        }
    }

    let action = match (&raw.builtin, &raw.command) {
        (Some(_), Some(c)) => {
            ctx.at(
                c.span(),
                format!("verb `{name}`: a builtin verb has no command"),
            );
            return None;
        }
        (None, None) => {
            ctx.at(
                span,
                format!("verb `{name}` needs a command (or a builtin)"),
            );
            return None;
        }
        (Some(builtin), None) => build_file_verb(ctx, name, raw, builtin, protected, &mut params)?,
        (None, Some(command)) => {
            let template = command_template(ctx, command)?;
            let dry_run = raw.dry_run.as_ref().and_then(|d| command_template(ctx, d));
            for t in std::iter::once(&template).chain(dry_run.as_ref()) {
                if let Some(shell) = is_interpreter(t.program())
                    && !raw.allow_interpreter
                {
                    ctx.at(
                            command.span(),
                            format!(
                                "verb `{name}`: program {} is a shell/interpreter ({shell}); a verb that runs one is a shell with extra steps. Set allow_interpreter = true only if the script is fixed and not writable by agents",
                                t.program().display()
                            ),
                        );
                }
            }
            VerbAction::Command { template, dry_run }
        }
    };

    let mut env = Vec::new();
    for (key, value) in &raw.env {
        if key.is_empty() || key.contains(['=', '\0']) {
            ctx.at(span.clone(), format!("verb `{name}`: bad env name {key:?}"));
            continue;
        }
        match ElementTemplate::parse(value) {
            Ok(t) => env.push((key.clone(), t)),
            Err(e) => ctx.at(span.clone(), format!("verb `{name}`: env {key}: {e}")),
        }
    }

    // Every placeholder declared, every param used, optional params only inside groups.
    let mut used = BTreeSet::new();
    let mut check_element = |ctx: &mut Ctx,
                             element: &ElementTemplate,
                             in_group: bool,
                             what: &str| {
        for p in element.params() {
            used.insert(p.to_string());
            match params.get(p) {
                None => ctx.at(
                    span.clone(),
                    format!(
                        "verb `{name}`: {what} uses {{{p}}} but no parameter `{p}` is declared"
                    ),
                ),
                Some(param) => {
                    let optional = !param.required && param.default.is_none();
                    if param.kind.is_bool() && element.pieces().len() != 1 {
                        ctx.at(
                            span.clone(),
                            format!("verb `{name}`: bool parameter `{p}` must be a whole element `{{{p}}}`"),
                        );
                    } else if optional && !param.kind.is_bool() && !in_group {
                        ctx.at(
                            span.clone(),
                            format!(
                                "verb `{name}`: optional parameter `{p}` has no default, so it must sit inside an optional group `[ … ]`"
                            ),
                        );
                    }
                }
            }
        }
        let is_path = |p: &str| {
            params
                .get(p)
                .is_some_and(|param| matches!(param.kind, ParamKind::Path { .. }))
        };
        if let Some(problem) = element.misplaced_path(is_path) {
            ctx.at(
                span.clone(),
                format!(
                    "verb `{name}`: {what} element {:?}: {problem}",
                    element.text()
                ),
            );
        }
        for s in element.secrets() {
            if !secrets.contains_key(s) {
                ctx.at(
                    span.clone(),
                    format!(
                        "verb `{name}`: {what} uses secret `{s}`, which is not defined in [secrets]"
                    ),
                );
            }
        }
    };
    if let VerbAction::Command { template, dry_run } = &action {
        for (element, in_group) in template.elements() {
            check_element(ctx, element, in_group, "the command");
        }
        let in_argv = template
            .elements()
            .chain(dry_run.iter().flat_map(|d| d.elements()))
            .flat_map(|(e, _)| e.pieces())
            .filter_map(|p| match p {
                crate::policy::template::Piece::Secret(n) => Some(n.clone()),
                _ => None,
            });
        for secret in in_argv.collect::<BTreeSet<_>>() {
            ctx.warnings.push(format!(
                "verb `{name}` passes secret `{secret}` in its argv: while the verb runs, any local user can read it from /proc/PID/cmdline; prefer env (readable only by the child's uid) or ${{secret_file:{secret}}}"
            ));
        }
        if let Some(d) = dry_run {
            for (element, in_group) in d.elements() {
                check_element(ctx, element, in_group, "dry_run");
            }
        }
        // (A malformed value is reported where the verb's limits are built.)
        let max_output = raw
            .max_output
            .as_ref()
            .and_then(|value| parse_size(value.get_ref()).ok())
            .unwrap_or(1 << 20);
        if max_output <= crate::scrub::CUT_WITHHELD_TAIL as u64 {
            ctx.warnings.push(format!(
                "verb `{name}`: max_output ({max_output} bytes) is not above the {} bytes withheld where output is cut, so a cut output shows nothing; raise it",
                crate::scrub::CUT_WITHHELD_TAIL
            ));
        }
        for (key, value) in &env {
            check_element(ctx, value, false, &format!("env {key}"));
        }
        check_new_file_params(
            ctx,
            &span,
            name,
            &params,
            dry_run.as_ref(),
            &env,
            sandboxes.get(&sandbox),
        );
        for p in params.keys() {
            if !used.contains(p) {
                ctx.at(
                    raw.params[p].span(),
                    format!(
                        "verb `{name}`: parameter `{p}` is declared but never used in the command"
                    ),
                );
            }
        }
    }

    let category = raw.category.map(|c| match c {
        RawCategory::ReadOnly => Category::ReadOnly,
        RawCategory::Mutating => Category::Mutating,
        RawCategory::Destructive => Category::Destructive,
    });
    let needs_approval = match (category, raw.approval) {
        (Some(Category::ReadOnly), Some(RawApprovalRequirement::Required)) => true,
        (Some(Category::ReadOnly), _) => false,
        (Some(Category::Mutating), Some(RawApprovalRequirement::None)) => false,
        (Some(Category::Destructive), Some(RawApprovalRequirement::None)) => {
            ctx.at(
                span.clone(),
                format!("verb `{name}`: a destructive verb always needs approval (approval = \"none\" is only for mutating verbs)"),
            );
            true
        }
        (None, Some(RawApprovalRequirement::None)) => {
            ctx.at(
                span.clone(),
                format!(
                    "verb `{name}`: approval = \"none\" needs an explicit category = \"mutating\""
                ),
            );
            true
        }
        _ => true,
    };
    if category == Some(Category::Destructive) {
        let has_dry_run = matches!(
            &action,
            VerbAction::Command {
                dry_run: Some(_),
                ..
            }
        );
        if !has_dry_run {
            ctx.at(
                span.clone(),
                format!("verb `{name}`: a destructive verb needs a dry_run command whose output the approver sees"),
            );
        }
    }
    let mut rate_of = |r: &Option<toml::Spanned<String>>| {
        r.as_ref().and_then(|r| {
            parse_rate(r.get_ref())
                .map_err(|e| ctx.at(r.span(), e))
                .ok()
        })
    };
    let rate = rate_of(&raw.rate);
    let rate_global = rate_of(&raw.rate_global);
    if let Some(pin) = &raw.sha256
        && (pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        ctx.at(
            span.clone(),
            format!("verb `{name}`: sha256 must be 64 hex digits"),
        );
    }
    let cwd = raw.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
    if !cwd.is_absolute() {
        ctx.at(span.clone(), format!("verb `{name}`: cwd must be absolute"));
    }
    if let Some(source) = &raw.postgres_ephemeral {
        check_postgres_ephemeral_verb(ctx, &span, name, source, raw, &action, postgres_ephemeral);
    }
    let quorum = verb_quorum(
        ctx,
        (name, &span),
        raw,
        (needs_approval, category),
        approvals,
        &approvers,
        roles,
    );
    let break_glass = verb_break_glass(ctx, name, raw, needs_approval, roles);
    let stream = raw
        .stream
        .as_ref()
        .and_then(|stream| stream_bounds(ctx, name, stream, raw, &action));
    let examples_accept = example_maps(ctx, span.clone(), name, &raw.examples.accept);
    let examples_reject = example_maps(ctx, span.clone(), name, &raw.examples.reject);

    if ctx.diagnostics.len() > errors_before {
        return None;
    }
    Some(Verb {
        name: name.to_string(),
        description: raw.description.clone(),
        category,
        needs_approval,
        approvers,
        quorum,
        break_glass,
        roles: raw.roles.clone(),
        action,
        params,
        env,
        timeout: match stream {
            Some(bounds) => bounds.max_duration,
            None => duration_or(ctx, &raw.timeout, Duration::from_secs(30)),
        },
        max_output: size_or(ctx, &raw.max_output, 1 << 20),
        cwd,
        sandbox,
        rate,
        rate_global,
        sha256: raw.sha256.as_ref().map(|s| s.to_ascii_lowercase()),
        max_concurrent: raw.max_concurrent,
        postgres_ephemeral: raw.postgres_ephemeral.clone(),
        stream,
        examples_accept,
        examples_reject,
    })
}

/// A verb's `stream` table: a command verb, bounded by a `max_duration` of at most
/// [`StreamBounds::MAX_DURATION`] (which replaces `timeout`) and optionally `max_lines`; never
/// with `postgres_ephemeral` (its per-call password is cut out of the whole output after the
/// run, which a stream has already delivered).
fn stream_bounds(
    ctx: &mut Ctx,
    name: &str,
    stream: &toml::Spanned<crate::policy::schema::RawStream>,
    raw: &RawVerb,
    action: &VerbAction,
) -> Option<StreamBounds> {
    let span = stream.span();
    let stream = stream.get_ref();
    let errors_before = ctx.diagnostics.len();
    let refuse =
        |ctx: &mut Ctx, what: String| ctx.at(span.clone(), format!("verb `{name}`: {what}"));
    if matches!(action, VerbAction::File(_)) {
        refuse(
            ctx,
            "stream is for command verbs, not built-in file verbs".into(),
        );
    }
    if raw.postgres_ephemeral.is_some() {
        refuse(
            ctx,
            "stream and postgres_ephemeral cannot be combined (the per-call password is cut out of the whole output, which a stream has already delivered)".into(),
        );
    }
    if raw.timeout.is_some() {
        refuse(
            ctx,
            "a streaming verb is bounded by stream.max_duration; remove timeout".into(),
        );
    }
    let max_duration = match parse_duration(&stream.max_duration) {
        Ok(d) if d.is_zero() => {
            refuse(ctx, "stream.max_duration must be above 0".into());
            Duration::ZERO
        }
        Ok(d) if d > StreamBounds::MAX_DURATION => {
            refuse(
                ctx,
                format!(
                    "stream.max_duration {} is above {}s, the deadline clients give a verb call",
                    stream.max_duration,
                    StreamBounds::MAX_DURATION.as_secs()
                ),
            );
            d
        }
        Ok(d) => d,
        Err(e) => {
            refuse(ctx, format!("stream.max_duration: {e}"));
            Duration::ZERO
        }
    };
    if stream.max_lines == Some(0) {
        refuse(ctx, "stream.max_lines must be at least 1".into());
    }
    (ctx.diagnostics.len() == errors_before).then_some(StreamBounds {
        max_duration,
        max_lines: stream.max_lines,
    })
}

/// A verb with `postgres_ephemeral` names a source that exists, runs a command without a dry
/// run (a dry run runs before approval and gets no role), and leaves `PGUSER`/`PGPASSWORD` to
/// the daemon.
fn check_postgres_ephemeral_verb(
    ctx: &mut Ctx,
    span: &Range<usize>,
    name: &str,
    source: &str,
    raw: &RawVerb,
    action: &VerbAction,
    sources: &BTreeMap<String, PgEphemeralSource>,
) {
    let mut refuse = |what: String| ctx.at(span.clone(), format!("verb `{name}`: {what}"));
    if !sources.contains_key(source) {
        refuse(format!(
            "postgres_ephemeral `{source}` is not defined in [postgres_ephemeral]"
        ));
    }
    match action {
        VerbAction::Command { dry_run: None, .. } => {}
        VerbAction::Command { dry_run: Some(_), .. } => refuse(
            "postgres_ephemeral and dry_run cannot be combined (the dry run would need a role before approval)".into(),
        ),
        VerbAction::File(_) => {
            refuse("postgres_ephemeral is for command verbs, not built-in file verbs".into())
        }
    }
    for key in ["PGUSER", "PGPASSWORD"] {
        if raw.env.contains_key(key) {
            refuse(format!(
                "env {key} is set by the daemon for postgres_ephemeral; remove it from env"
            ));
        }
    }
}

/// A path parameter with `create = true` makes the daemon create a file before the run, outside
/// any sandbox: only where the verb's own profile may write, and never for a dry run (which runs
/// before approval, without write roots).
fn check_new_file_params(
    ctx: &mut Ctx,
    span: &Range<usize>,
    verb: &str,
    params: &BTreeMap<String, Param>,
    dry_run: Option<&Template>,
    env: &[(String, ElementTemplate)],
    profile: Option<&SandboxSpec>,
) {
    let creating = params.values().filter_map(|p| match &p.kind {
        ParamKind::Path {
            roots,
            create: true,
            opened_by: PathOpener::Child,
        } => Some((p.name.as_str(), roots)),
        _ => None,
    });
    for (param, roots) in creating {
        let in_dry_run = dry_run.iter().flat_map(|d| d.elements()).map(|(e, _)| e);
        let in_env = env.iter().map(|(_, e)| e).filter(|_| dry_run.is_some());
        if in_dry_run
            .chain(in_env)
            .any(|e| e.params().any(|p| p == param))
        {
            ctx.at(
                span.clone(),
                format!("verb `{verb}`: parameter `{param}` creates a file (`create = true`), so it cannot reach the dry run, which runs before approval"),
            );
        }
        let Some(profile) = profile else { continue };
        for root in roots {
            if !profile.write.iter().any(|w| root.starts_with(w)) {
                ctx.at(
                    span.clone(),
                    format!(
                        "verb `{verb}`: parameter `{param}` creates files under {} (`create = true`), which is not inside a write root of sandbox `{}`; add the directory to its `write`, or drop `create`",
                        root.display(),
                        profile.name
                    ),
                );
            }
        }
    }
}

fn build_file_verb(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    builtin: &toml::Spanned<String>,
    protected: &ProtectedNames,
    params: &mut BTreeMap<String, Param>,
) -> Option<VerbAction> {
    let op = match builtin.get_ref().as_str() {
        "file.write" => FileOp::Write,
        "file.append" => FileOp::Append,
        "file.read" => FileOp::Read,
        "file.list" => FileOp::List,
        other => {
            ctx.at(
                builtin.span(),
                format!("verb `{name}`: unknown builtin {other:?} (file.write, file.append, file.read, file.list)"),
            );
            return None;
        }
    };
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
    let max_size = size_or(ctx, &raw.max_size, 1 << 20);
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
    Some(VerbAction::File(FileVerbSpec {
        op,
        roots: raw.roots.clone(),
        max_size,
        create_only: raw.create_only,
        allowed_modes,
        protected: protected.clone(),
    }))
}

fn build_param(
    ctx: &mut Ctx,
    verb: &str,
    name: &str,
    spanned: &toml::Spanned<RawParam>,
) -> Option<Param> {
    let span = spanned.span();
    let raw = spanned.get_ref();
    let t = raw.kind;
    let here = format!("verb `{verb}`, parameter `{name}`");
    // Fields that only some types accept.
    let allowed: &[&str] = match t {
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
            ctx.at(
                span.clone(),
                format!("{here}: `{field}` does not apply to this type"),
            );
        }
    }
    let kind = match t {
        RawParamType::Enum => {
            let values = raw.values.clone().unwrap_or_default();
            if values.is_empty() {
                ctx.at(
                    span.clone(),
                    format!("{here}: an enum needs values = [...]"),
                );
            }
            ParamKind::Enum { values }
        }
        RawParamType::Int => {
            let (Some(min), Some(max)) = (raw.min, raw.max) else {
                ctx.at(span.clone(), format!("{here}: an int needs min and max"));
                return None;
            };
            if min > max {
                ctx.at(span.clone(), format!("{here}: min is greater than max"));
            }
            ParamKind::Int { min, max }
        }
        RawParamType::String => {
            let Some(source) = raw.pattern.clone() else {
                ctx.at(
                    span.clone(),
                    format!("{here}: a string needs a pattern (it is anchored: the whole value must match)"),
                );
                return None;
            };
            match Regex::new(&format!("^(?:{source})$")) {
                Ok(pattern) => ParamKind::Str {
                    pattern,
                    source,
                    max_length: raw.max_length.unwrap_or(DEFAULT_MAX_LENGTH),
                },
                Err(e) => {
                    ctx.at(span.clone(), format!("{here}: bad pattern: {e}"));
                    return None;
                }
            }
        }
        RawParamType::Bool => match &raw.flag {
            Some(flag) if !flag.is_empty() => ParamKind::Bool { flag: flag.clone() },
            _ => {
                ctx.at(
                    span.clone(),
                    format!("{here}: a bool needs flag = \"--the-flag\""),
                );
                return None;
            }
        },
        RawParamType::Path => {
            let roots = raw.roots.clone().unwrap_or_default();
            if roots.is_empty() {
                ctx.at(span.clone(), format!("{here}: a path needs roots = [...]"));
            }
            for r in &roots {
                if !r.is_absolute() {
                    ctx.at(span.clone(), format!("{here}: root {r:?} must be absolute"));
                }
            }
            let create = raw.create.unwrap_or(false);
            match (raw.must_exist, create) {
                (Some(false), _) => ctx.at(
                    span.clone(),
                    format!("{here}: `must_exist = false` no longer lets a path name a new entry (the program would resolve the new name itself, after the check, and follow a symlink planted there); a path names an existing file or directory, or, with `create = true`, a new file the daemon creates just before the run"),
                ),
                (Some(true), true) => ctx.at(
                    span.clone(),
                    format!("{here}: `must_exist = true` and `create = true` contradict each other"),
                ),
                _ => {}
            }
            ParamKind::Path {
                roots,
                create,
                opened_by: PathOpener::Child,
            }
        }
        RawParamType::Duration => ParamKind::Duration {
            max: raw.max_duration.as_ref().and_then(|m| {
                parse_duration(m)
                    .map_err(|e| ctx.at(span.clone(), format!("{here}: {e}")))
                    .ok()
            }),
        },
        RawParamType::SystemdUnit => ParamKind::SystemdUnit,
        RawParamType::K8sName => ParamKind::K8sName,
        RawParamType::Hostname => ParamKind::Hostname,
        RawParamType::Sql => {
            let mut opts = SqlOptions::default();
            if let Some(allow) = &raw.allow {
                opts.allow = allow
                    .iter()
                    .filter_map(|a| {
                        a.parse::<SqlKind>()
                            .map_err(|e| ctx.at(span.clone(), format!("{here}: {e}")))
                            .ok()
                    })
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
                            .map_err(|e| ctx.at(span.clone(), format!("{here}: {key}: {e}")))
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
                            ctx.at(
                                span.clone(),
                                format!("{here}: deny_columns: `{name}` must be a column name without a table"),
                            );
                            None
                        }
                    })
                    .collect();
            }
            if let Some(max) = raw.max_length {
                opts.max_length = max;
            }
            ParamKind::Sql(opts)
        }
    };
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
        let text = match default {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => {
                ctx.at(
                    span,
                    format!("{here}: default must be a string, integer or bool"),
                );
                return None;
            }
        };
        match param.validate(&text) {
            Ok(normalized) => param.default = Some(normalized),
            Err(e) => {
                ctx.at(
                    span,
                    format!("{here}: the default is itself invalid: {}", e.message),
                );
                return None;
            }
        }
    }
    Some(param)
}
