//! Compiling one verb, as named steps read top to bottom in [`build_verb`]: its name and roles,
//! its approver roles and sandbox, its parameters, its action (a command or a built-in file
//! verb), its env, the placeholders of its command checked against its parameters, its approval
//! requirement, its limits, its quorum and break-glass roles, its stream bounds and its examples.
//! A verb with any problem is left out (and the policy refused); every problem is reported, not
//! only the first, except that a verb without a usable action stops there.
#![forbid(unsafe_code)]

use super::approvals::{verb_break_glass, verb_quorum};
use super::file_verb::build_file_verb;
use super::param::build_param;
use super::roles::check_approver_roles;
use super::{Ctx, DEFAULT_SANDBOX, command_template, duration_or, is_interpreter, size_or};
use crate::pg_ephemeral::PgEphemeralSource;
use crate::policy::params::{Param, ParamKind, PathOpener};
use crate::policy::schema::{RawApprovalRequirement, RawCategory, RawStream, RawVerb};
use crate::policy::template::{ElementTemplate, Piece, Template};
use crate::policy::units::{Rate, parse_duration, parse_rate, parse_size};
use crate::policy::{ApprovalsConfig, Category, Role, StreamBounds, Verb, VerbAction};
use crate::protected::ProtectedNames;
use crate::sandbox::SandboxSpec;
use crate::secrets::SecretSource;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

/// What the rest of the policy defines, which a verb may name.
pub(super) struct Known<'a> {
    pub roles: &'a BTreeMap<String, Role>,
    pub approvals: &'a ApprovalsConfig,
    pub sandboxes: &'a BTreeMap<String, SandboxSpec>,
    pub secrets: &'a BTreeMap<String, SecretSource>,
    pub protected: &'a ProtectedNames,
    pub postgres_ephemeral: &'a BTreeMap<String, PgEphemeralSource>,
}

/// One verb, or `None` when it has a problem. (Past the named steps, its length is the [`Verb`]
/// it fills in.)
pub(super) fn build_verb(
    ctx: &mut Ctx,
    name: &str,
    spanned: &toml::Spanned<RawVerb>,
    known: &Known,
) -> Option<Verb> {
    let span = spanned.span();
    let raw = spanned.get_ref();
    let errors_before = ctx.diagnostics.len();
    check_name_and_roles(ctx, name, &span, raw, known.roles);
    let approvers = check_approver_roles(ctx, &raw.approvers, known.roles);
    let sandbox = sandbox_name(ctx, name, raw, known.sandboxes);
    let mut params = build_params(ctx, name, raw);
    let action = build_action(ctx, name, &span, raw, known.protected, &mut params)?;
    let env = build_env(ctx, name, &span, raw);
    if let VerbAction::Command { template, dry_run } = &action {
        let uses = Placeholders {
            verb: name,
            span: &span,
            params: &params,
            secrets: known.secrets,
            used: BTreeSet::new(),
        };
        let profile = known.sandboxes.get(&sandbox);
        check_command(ctx, uses, raw, (template, dry_run.as_ref()), &env, profile);
    }
    let category = category(raw);
    let needs_approval = needs_approval(ctx, name, &span, raw, category);
    check_destructive_has_dry_run(ctx, name, &span, category, &action);
    let rate = parsed_rate(ctx, &raw.rate);
    let rate_global = parsed_rate(ctx, &raw.rate_global);
    let cwd = check_pin_and_cwd(ctx, name, &span, raw);
    if let Some(source) = &raw.postgres_ephemeral {
        let sources = known.postgres_ephemeral;
        check_postgres_ephemeral_verb(ctx, &span, name, source, raw, &action, sources);
    }
    let quorum = verb_quorum(
        ctx,
        (name, &span),
        raw,
        (needs_approval, category),
        known.approvals,
        &approvers,
        known.roles,
    );
    let break_glass = verb_break_glass(ctx, name, raw, needs_approval, known.roles);
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

/// A name of letters, digits, `-`, `_`, `.`; at least one role, each defined.
fn check_name_and_roles(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    raw: &RawVerb,
    roles: &BTreeMap<String, Role>,
) {
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
}

/// The verb's sandbox profile (the default one when it names none), which must be defined.
fn sandbox_name(
    ctx: &mut Ctx,
    name: &str,
    raw: &RawVerb,
    sandboxes: &BTreeMap<String, SandboxSpec>,
) -> String {
    match &raw.sandbox {
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
    }
}

/// The declared parameters that compile; a broken one is reported and left out.
fn build_params(ctx: &mut Ctx, name: &str, raw: &RawVerb) -> BTreeMap<String, Param> {
    let mut params = BTreeMap::new();
    for (pname, rp) in &raw.params {
        if let Some(p) = build_param(ctx, name, pname, rp) {
            params.insert(pname.clone(), p);
        }
    }
    params
}

/// A command (never an interpreter without `allow_interpreter`, nor its dry run) or a built-in
/// file verb, which adds its own parameters to `params`; exactly one of the two.
fn build_action(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    raw: &RawVerb,
    protected: &ProtectedNames,
    params: &mut BTreeMap<String, Param>,
) -> Option<VerbAction> {
    let command = match (&raw.builtin, &raw.command) {
        (Some(_), Some(c)) => {
            ctx.at(
                c.span(),
                format!("verb `{name}`: a builtin verb has no command"),
            );
            return None;
        }
        (None, None) => {
            ctx.at(
                span.clone(),
                format!("verb `{name}` needs a command (or a builtin)"),
            );
            return None;
        }
        (Some(builtin), None) => {
            return build_file_verb(ctx, name, raw, builtin, protected, params);
        }
        (None, Some(command)) => command,
    };
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
    Some(VerbAction::Command { template, dry_run })
}

/// The verb's env: names without `=` or NUL, values that parse as element templates.
fn build_env(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    raw: &RawVerb,
) -> Vec<(String, ElementTemplate)> {
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
    env
}

/// The placeholders of a command verb's elements checked against its parameters and the
/// policy's secrets, remembering which parameters were used.
struct Placeholders<'a> {
    verb: &'a str,
    span: &'a Range<usize>,
    params: &'a BTreeMap<String, Param>,
    secrets: &'a BTreeMap<String, SecretSource>,
    used: BTreeSet<String>,
}

impl Placeholders<'_> {
    /// Every placeholder of `element` declared; a bool a whole element; an optional parameter
    /// without a default only inside an optional group; a path where a path may stand; every
    /// secret defined.
    fn check(&mut self, ctx: &mut Ctx, element: &ElementTemplate, in_group: bool, what: &str) {
        let (name, span) = (self.verb, self.span);
        for p in element.params() {
            self.used.insert(p.to_string());
            match self.params.get(p) {
                None => ctx.at(
                    span.clone(),
                    format!(
                        "verb `{name}`: {what} uses {{{p}}} but no parameter `{p}` is declared"
                    ),
                ),
                Some(param) => self.check_param(ctx, element, in_group, (p, param)),
            }
        }
        let is_path = |p: &str| {
            self.params
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
            if !self.secrets.contains_key(s) {
                ctx.at(
                    span.clone(),
                    format!(
                        "verb `{name}`: {what} uses secret `{s}`, which is not defined in [secrets]"
                    ),
                );
            }
        }
    }

    fn check_param(
        &self,
        ctx: &mut Ctx,
        element: &ElementTemplate,
        in_group: bool,
        (p, param): (&str, &Param),
    ) {
        let (name, span) = (self.verb, self.span);
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

/// A command verb's command, dry run and env against its parameters: every placeholder
/// declared, every parameter used, new files only where the profile writes; and the warnings
/// (a secret in argv, a `max_output` too small to show a cut output).
fn check_command(
    ctx: &mut Ctx,
    mut uses: Placeholders,
    raw: &RawVerb,
    (template, dry_run): (&Template, Option<&Template>),
    env: &[(String, ElementTemplate)],
    profile: Option<&SandboxSpec>,
) {
    let name = uses.verb;
    for (element, in_group) in template.elements() {
        uses.check(ctx, element, in_group, "the command");
    }
    warn_secrets_in_argv(ctx, name, template, dry_run);
    if let Some(d) = dry_run {
        for (element, in_group) in d.elements() {
            uses.check(ctx, element, in_group, "dry_run");
        }
    }
    warn_small_max_output(ctx, name, raw);
    for (key, value) in env {
        uses.check(ctx, value, false, &format!("env {key}"));
    }
    check_new_file_params(ctx, uses.span, name, uses.params, dry_run, env, profile);
    for p in uses.params.keys() {
        if !uses.used.contains(p) {
            ctx.at(
                raw.params[p].span(),
                format!("verb `{name}`: parameter `{p}` is declared but never used in the command"),
            );
        }
    }
}

/// A secret in the argv of the command or its dry run is readable by any local user while the
/// verb runs: a warning naming each once.
fn warn_secrets_in_argv(
    ctx: &mut Ctx,
    name: &str,
    template: &Template,
    dry_run: Option<&Template>,
) {
    let in_argv = template
        .elements()
        .chain(dry_run.iter().flat_map(|d| d.elements()))
        .flat_map(|(e, _)| e.pieces())
        .filter_map(|p| match p {
            Piece::Secret(n) => Some(n.clone()),
            _ => None,
        });
    for secret in in_argv.collect::<BTreeSet<_>>() {
        ctx.warnings.push(format!(
            "verb `{name}` passes secret `{secret}` in its argv: while the verb runs, any local user can read it from /proc/PID/cmdline; prefer env (readable only by the child's uid) or ${{secret_file:{secret}}}"
        ));
    }
}

/// A `max_output` not above the tail withheld where output is cut shows nothing of a cut output.
fn warn_small_max_output(ctx: &mut Ctx, name: &str, raw: &RawVerb) {
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
}

fn category(raw: &RawVerb) -> Option<Category> {
    raw.category.map(|c| match c {
        RawCategory::ReadOnly => Category::ReadOnly,
        RawCategory::Mutating => Category::Mutating,
        RawCategory::Destructive => Category::Destructive,
    })
}

/// Whether a call needs approval: a read-only verb not unless it asks, a mutating verb unless
/// it says `approval = "none"`, a destructive verb (or one without a category) always.
fn needs_approval(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    raw: &RawVerb,
    category: Option<Category>,
) -> bool {
    match (category, raw.approval) {
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
    }
}

/// A destructive verb has a dry run whose output the approver sees.
fn check_destructive_has_dry_run(
    ctx: &mut Ctx,
    name: &str,
    span: &Range<usize>,
    category: Option<Category>,
    action: &VerbAction,
) {
    let has_dry_run = matches!(
        action,
        VerbAction::Command {
            dry_run: Some(_),
            ..
        }
    );
    if category == Some(Category::Destructive) && !has_dry_run {
        ctx.at(
            span.clone(),
            format!("verb `{name}`: a destructive verb needs a dry_run command whose output the approver sees"),
        );
    }
}

fn parsed_rate(ctx: &mut Ctx, r: &Option<toml::Spanned<String>>) -> Option<Rate> {
    r.as_ref().and_then(|r| {
        parse_rate(r.get_ref())
            .map_err(|e| ctx.at(r.span(), e))
            .ok()
    })
}

/// A `sha256` pin of 64 hex digits, and the working directory (`/` unless given), absolute.
fn check_pin_and_cwd(ctx: &mut Ctx, name: &str, span: &Range<usize>, raw: &RawVerb) -> PathBuf {
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
    cwd
}

/// The verb's examples as parameter maps; a value that is not a string, integer or bool is an
/// error.
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

/// run, which a stream has already delivered).
fn stream_bounds(
    ctx: &mut Ctx,
    name: &str,
    stream: &toml::Spanned<RawStream>,
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
