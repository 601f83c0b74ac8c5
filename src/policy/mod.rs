//! Policy: the operator's TOML compiled into checked verbs, and the per-call verdict.
//!
//! Responsibility: turn untrusted request arguments into either a rendered call or a typed
//! refusal. Invariants: unknown verbs, roles without the verb, unknown parameters, missing
//! required parameters and invalid values are all refused before anything runs (invariant 2);
//! the verdict is a [`Verdict`], never a bool or a string; the argv comes only from the verb's
//! template ([`template::RenderedArgv`] cannot be built elsewhere).
#![forbid(unsafe_code)]

pub mod compile;
pub mod include;
pub mod param_schema;
pub mod params;
pub mod schema;
pub mod sql;
pub mod template;
pub mod units;

pub use compile::{PolicyError, compile, compile_in, load_file};

use crate::files::FileVerbSpec;
pub use crate::proposal::Quorum;
use crate::sandbox::SandboxSpec;
use crate::scrub::ScrubPattern;
use crate::secrets::SecretSource;
use params::{Param, ParamRejection, PathCheck};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use template::{ElementTemplate, RenderedArg, RenderedArgv, Template};
use units::Rate;

/// The embedded demo policy served when `verbd serve` gets no `--policy`.
pub const DEMO_POLICY: &str = include_str!("../../policy/demo.toml");

/// The special member name that stands for the uid that started the daemon.
pub const INVOKER: &str = "@invoker";

/// A compiled, checked policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Where it came from (`<embedded demo>` or a path).
    pub origin: String,
    /// Hex sha256 of the policy text: proposals record it.
    pub hash: String,
    pub daemon: DaemonConfig,
    pub roles: BTreeMap<String, Role>,
    pub approvals: ApprovalsConfig,
    pub secrets: BTreeMap<String, SecretSource>,
    /// `[postgres_ephemeral.NAME]`: sources of per-call database roles.
    pub postgres_ephemeral: BTreeMap<String, crate::pg_ephemeral::PgEphemeralSource>,
    pub sandboxes: BTreeMap<String, SandboxSpec>,
    pub protected: crate::protected::ProtectedNames,
    pub scrub_builtin: bool,
    pub scrub_patterns: Vec<ScrubPattern>,
    pub verbs: BTreeMap<String, Verb>,
    /// `[commands]`: what counts as privileged in a shell command an agent types.
    pub commands: CommandsConfig,
    /// Non-fatal findings (e.g. a short secret), shown by `policy check` and logged at start.
    pub warnings: Vec<String>,
    /// Canonical paths of the packs this policy includes.
    pub included: Vec<PathBuf>,
    /// Where settings that are checked after compiling are written, as `file:line:col`: keys
    /// `daemon.user`, `daemon.socket_group`, `daemon.approver_socket_group`, `roles.NAME`,
    /// `verb.NAME` (a pack's verb: in the pack). The self-test's findings name them.
    pub locations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub socket: Option<PathBuf>,
    pub socket_mode: u32,
    pub socket_group: Option<String>,
    pub approver_socket: Option<PathBuf>,
    pub approver_socket_group: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub user: Option<String>,
    pub allow_root: bool,
    /// Agent socket: connections being read or answered, in all (parked `wait`s not counted).
    pub max_connections: usize,
    /// Per socket: connections one uid may hold at once.
    pub max_connections_per_uid: usize,
    /// Agent socket: `wait` requests parked at once, in all.
    pub max_waits: usize,
    /// Per socket: `wait` requests one uid may have parked at once.
    pub max_waits_per_uid: usize,
    /// Approver socket: connections in all, and parked `wait`s in all (its own pool).
    pub approver_max_connections: usize,
    pub max_executions: usize,
    /// How long a call over `max_executions` (or its verb's `max_concurrent`) waits for a slot.
    pub queue_timeout: Duration,
    pub max_request_bytes: usize,
    pub request_timeout: Duration,
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Agent,
    Human,
}

#[derive(Debug, Clone)]
pub struct Role {
    pub name: String,
    pub kind: RoleKind,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub uids: Vec<u32>,
    /// How shell commands typed by this role's agents are answered.
    pub commands: CommandMode,
}

/// How the daemon answers a shell command an agent is about to run (`verbd hook claude-code`
/// on Bash, `verbd sh`). Ordered: a caller in several roles gets the strongest mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CommandMode {
    /// No decision: the runtime runs the command as it would without verbd.
    Off,
    /// A command that maps to a verb is refused with the `verbd call` to use instead.
    Advise,
    /// A command that maps to a verb is rewritten into its `verbd call`.
    Rewrite,
}

impl CommandMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandMode::Off => "off",
            CommandMode::Advise => "advise",
            CommandMode::Rewrite => "rewrite",
        }
    }

    /// The mode of a caller in `roles`: the strongest any of them sets.
    pub fn of(roles: &[&Role]) -> CommandMode {
        roles
            .iter()
            .map(|r| r.commands)
            .max()
            .unwrap_or(CommandMode::Off)
    }
}

/// `[commands]`: what, besides `sudo` and its kind, needs a privilege the agent does not have.
#[derive(Debug, Clone, Default)]
pub struct CommandsConfig {
    /// Program names the agent reaches only through verbs.
    pub privileged_programs: Vec<String>,
    /// Absolute paths: naming one, or anything beneath it, needs a verb.
    pub privileged_paths: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    Interactive,
    Headless,
}

#[derive(Debug, Clone)]
pub struct ApprovalsConfig {
    pub mode: ApprovalMode,
    pub approvers: Vec<String>,
    pub expires: Duration,
    pub notify: Option<Template>,
    /// The sandbox profile the notifier runs in.
    pub notify_sandbox: String,
    /// Per category name (`mutating`, `destructive`): the quorum its verbs need unless a verb
    /// sets its own (already resolved into each [`Verb::quorum`]).
    pub quorum: BTreeMap<String, Quorum>,
}

/// What a verb does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    ReadOnly,
    Mutating,
    Destructive,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::ReadOnly => "read-only",
            Category::Mutating => "mutating",
            Category::Destructive => "destructive",
        }
    }
}

/// What a verb runs.
#[derive(Debug, Clone)]
pub enum VerbAction {
    Command {
        template: Template,
        dry_run: Option<Template>,
    },
    File(FileVerbSpec),
}

#[derive(Debug, Clone)]
pub struct Verb {
    pub name: String,
    pub description: String,
    /// `None` means the operator did not say: treated as needing approval.
    pub category: Option<Category>,
    /// True when a call needs a human decision before it runs.
    pub needs_approval: bool,
    pub approvers: Vec<String>,
    /// The approvals a call needs beyond one person's (the verb's own, or its category's).
    pub quorum: Option<Quorum>,
    /// Human roles that may run it without approval, loudly (`verbd call --break-glass`).
    pub break_glass: Vec<String>,
    pub roles: Vec<String>,
    pub action: VerbAction,
    pub params: BTreeMap<String, Param>,
    pub env: Vec<(String, ElementTemplate)>,
    pub timeout: Duration,
    pub max_output: u64,
    pub cwd: PathBuf,
    pub sandbox: String,
    pub rate: Option<Rate>,
    pub rate_global: Option<Rate>,
    pub sha256: Option<String>,
    pub max_concurrent: Option<usize>,
    /// The `[postgres_ephemeral.NAME]` each call of this verb gets a role from.
    pub postgres_ephemeral: Option<String>,
    /// Set when the verb streams: its bounds (they replace `timeout`).
    pub stream: Option<StreamBounds>,
    pub examples_accept: Vec<BTreeMap<String, String>>,
    pub examples_reject: Vec<BTreeMap<String, String>>,
}

impl Verb {
    /// The category as shown to people (`unspecified` when absent).
    pub fn category_label(&self) -> &'static str {
        self.category.map_or("unspecified", Category::as_str)
    }

    /// The text of what this verb alone decides about a run: template, dry-run, env, params,
    /// category, limits, working directory, the sandbox's name. [`Policy::verb_fingerprint`]
    /// adds the sandbox profile's content.
    fn fingerprint_text(&self) -> String {
        let action = match &self.action {
            VerbAction::Command { template, dry_run } => format!(
                "cmd:{:?}|dry:{:?}",
                template.source(),
                dry_run.as_ref().map(Template::source)
            ),
            VerbAction::File(spec) => format!("file:{spec:?}"),
        };
        let params: Vec<String> = self
            .params
            .values()
            .map(|p| {
                format!(
                    "{}:{}:{}:{:?}",
                    p.name,
                    p.kind.describe(),
                    p.allow_dash,
                    p.default
                )
            })
            .collect();
        // A quorum joins the text only when there is one, so verbs without one keep the
        // fingerprints their pending proposals were made with.
        let quorum = self
            .quorum
            .as_ref()
            .map_or_else(String::new, |q| format!("|quorum:{q:?}"));
        // Likewise a stream.
        let stream = self
            .stream
            .as_ref()
            .map_or_else(String::new, |s| format!("|stream:{s:?}"));
        format!(
            "{action}|env:{:?}|params:{params:?}|category:{}|timeout:{:?}|max_output:{}|cwd:{:?}|sandbox:{}|postgres_ephemeral:{:?}{quorum}{stream}",
            self.env,
            self.category_label(),
            self.timeout,
            self.max_output,
            self.cwd,
            self.sandbox,
            self.postgres_ephemeral,
        )
    }
}

/// What an approver decides on: which approver roles count.
#[derive(Debug, Clone, Copy)]
pub enum ApprovalScope<'a> {
    /// One verb: the global approvers and the verb's own.
    Verb(&'a Verb),
    /// Any verb (listing pending proposals): approvers of at least one verb count.
    AnyVerb,
    /// The policy itself (reload): only the global approvers.
    Policy,
}

/// Who is calling, as the kernel reported it and the user database resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
    pub user: Option<String>,
    /// Group names of the caller's primary and supplementary groups.
    pub groups: Vec<String>,
}

/// The outcome of evaluating a call request against the policy. Each variant carries everything
/// the next step needs, so nothing downstream looks the verb up again.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Run now.
    Run(PreparedCall),
    /// A human must approve first.
    Propose(ProposedCall),
    /// Refused; nothing runs.
    Refuse(Refusal),
}

/// [`Policy::evaluate_offline`]'s answer: the decision and the argv it would show, nothing that
/// can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OfflineVerdict {
    Run { display_argv: Vec<String> },
    Propose { display_argv: Vec<String> },
    Refuse(Refusal),
}

/// A fully validated and rendered call: what the executor runs, and the limits it runs under.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    pub verb: String,
    /// Normalized arguments, defaults applied.
    pub args: BTreeMap<String, String>,
    /// Hex sha256 of the canonical `{verb, args}`: what an approval is bound to.
    pub args_hash: String,
    pub action: PreparedAction,
    pub limits: CallLimits,
}

/// A call that needs a human, with what the proposal shows and binds.
#[derive(Debug, Clone)]
pub struct ProposedCall {
    pub call: PreparedCall,
    pub description: String,
    pub category: &'static str,
    /// [`Policy::verb_fingerprint`] at proposal time: an approval is refused when it changed.
    pub verb_fingerprint: String,
}

/// A streaming verb's bounds: a run ends when its child exits or at the first bound reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBounds {
    pub max_duration: Duration,
    /// Lines of stdout and stderr together.
    pub max_lines: Option<u64>,
}

impl StreamBounds {
    /// The longest `max_duration` a policy may give: the deadline `verbd call` and `verbd mcp`
    /// give a verb call.
    pub const MAX_DURATION: Duration = Duration::from_secs(15 * 60);
}

/// The verb's settings a run needs, copied from the policy when the call is prepared.
#[derive(Debug, Clone)]
pub struct CallLimits {
    /// The sandbox profile's name.
    pub sandbox: String,
    pub cwd: PathBuf,
    pub timeout: Duration,
    pub max_output: u64,
    pub rate: Option<Rate>,
    pub rate_global: Option<Rate>,
    pub max_concurrent: Option<usize>,
    /// The `[postgres_ephemeral.NAME]` the run gets its own database role from.
    pub postgres_ephemeral: Option<String>,
    /// The verb streams: the bounds of this run (the policy's, or less when the caller asked).
    pub stream: Option<StreamBounds>,
}

/// What a prepared call does: run a rendered argv, or one built-in file operation.
#[derive(Debug, Clone)]
pub enum PreparedAction {
    Exec {
        argv: RenderedArgv,
        env: Vec<(String, RenderedArg)>,
        dry_run: Option<RenderedArgv>,
    },
    File(FileCall),
}

/// A built-in file operation with its validated arguments (the daemon resolves the path beneath
/// the roots itself; see `files`).
#[derive(Debug, Clone)]
pub struct FileCall {
    pub spec: FileVerbSpec,
    pub path: PathBuf,
    /// What `file.write`/`file.append` write (empty for read and list).
    pub content: Vec<u8>,
    /// `file.write`'s mode, one of the spec's allowed modes.
    pub mode: Option<u32>,
}

impl PreparedCall {
    /// Argv with secrets as placeholders, for proposals, journal and `explain`.
    pub fn display_argv(&self) -> Vec<String> {
        match &self.action {
            PreparedAction::Exec { argv, .. } => argv.display(),
            PreparedAction::File(_) => vec![format!("(builtin {})", self.verb)],
        }
    }

    /// Each path parameter of the argv with what it resolved to (`RenderedArgv::pins`).
    pub fn display_pins(&self) -> Vec<String> {
        match &self.action {
            PreparedAction::Exec { argv, .. } => argv.pins(),
            PreparedAction::File(_) => Vec::new(),
        }
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such verb, or the caller's roles may not use it (not distinguished, to avoid probing).
    NotAvailable {
        verb: String,
    },
    UnknownParam {
        param: String,
        known: Vec<String>,
    },
    Missing {
        params: Vec<String>,
    },
    Invalid(ParamRejection),
    /// Headless policy and the verb needs approval.
    Headless {
        category: String,
    },
    /// Refused for a reason found outside the arguments (rate limit, idempotency key reuse,
    /// too many pending proposals).
    Denied {
        reason: String,
    },
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::NotAvailable { verb } => format!(
                "verb `{verb}` does not exist or is not available to your roles (run `verbd list`)"
            ),
            Refusal::UnknownParam { param, known } => format!(
                "unknown parameter `{param}` (this verb takes: {})",
                if known.is_empty() {
                    "no parameters".to_string()
                } else {
                    known.join(", ")
                }
            ),
            Refusal::Missing { params } => format!(
                "REQUIRES_CLARIFICATION: missing required parameters: {}",
                params.join(", ")
            ),
            Refusal::Invalid(r) => r.to_string(),
            Refusal::Headless { category } => format!(
                "denied by automatic policy: {category} action requires explicit human confirmation"
            ),
            Refusal::Denied { reason } => reason.clone(),
        }
    }
}

/// Hex sha256 of the canonical JSON of verb + normalized args.
pub fn args_hash(verb: &str, args: &BTreeMap<String, String>) -> String {
    let canonical = serde_json::json!({ "verb": verb, "args": args });
    crate::digest::sha256_hex(canonical.to_string().as_bytes())
}

/// Arguments given as text (CLI `key=value`, stored proposals, policy examples) in the form a
/// request carries them.
pub fn text_args(args: &BTreeMap<String, String>) -> BTreeMap<String, serde_json::Value> {
    args.iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect()
}

/// Turn a JSON argument into its text form: strings as-is, integers and bools printed.
fn arg_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

impl Policy {
    /// The roles whose membership matches the caller.
    pub fn roles_of(&self, caller: &Caller, invoker_uid: u32) -> Vec<&Role> {
        self.roles
            .values()
            .filter(|role| {
                role.uids.contains(&caller.uid)
                    || role.users.iter().any(|u| {
                        (u == INVOKER && caller.uid == invoker_uid)
                            || caller.user.as_deref() == Some(u.as_str())
                    })
                    || role.groups.iter().any(|g| caller.groups.contains(g))
            })
            .collect()
    }

    /// Why these roles (of uid `caller_uid`) may not decide in `scope`, or `None` when they may.
    /// The single approver check: an agent role never approves, nobody approves a request of
    /// their own (`requester_uid`), and only the approver roles of the scope count.
    pub fn approver_refusal(
        &self,
        caller_uid: u32,
        roles: &[Role],
        scope: ApprovalScope<'_>,
        requester_uid: Option<u32>,
    ) -> Option<String> {
        let agent_roles: Vec<&str> = roles
            .iter()
            .filter(|r| r.kind == RoleKind::Agent)
            .map(|r| r.name.as_str())
            .collect();
        if !agent_roles.is_empty() {
            return Some(format!(
                "uid {caller_uid} is in an agent role ({}); agent identities can never approve anything",
                agent_roles.join(", ")
            ));
        }
        if requester_uid == Some(caller_uid) {
            return Some("nobody approves their own request: another person must decide".into());
        }
        let counts = |role: &Role| {
            self.approvals.approvers.contains(&role.name)
                || match scope {
                    ApprovalScope::Verb(v) => v.approvers.contains(&role.name),
                    ApprovalScope::AnyVerb => self
                        .verbs
                        .values()
                        .any(|v| v.approvers.contains(&role.name)),
                    ApprovalScope::Policy => false,
                }
        };
        if roles.iter().any(counts) {
            return None;
        }
        Some(match scope {
            ApprovalScope::Verb(v) => format!("you are not an approver for `{}`", v.name),
            ApprovalScope::AnyVerb => "only approvers may list pending proposals".into(),
            ApprovalScope::Policy => {
                "only approvers (roles in [approvals] approvers) may reload the policy".into()
            }
        })
    }

    /// The verbs any of these roles may call.
    pub fn verbs_for<'a>(&'a self, roles: &[&Role]) -> impl Iterator<Item = &'a Verb> {
        let names: Vec<String> = roles.iter().map(|r| r.name.clone()).collect();
        self.verbs
            .values()
            .filter(move |v| v.roles.iter().any(|r| names.contains(r)))
    }

    /// Validate and render a call for a caller with these roles: the decision of a call.
    pub fn evaluate(
        &self,
        roles: &[&Role],
        verb_name: &str,
        raw_args: &BTreeMap<String, serde_json::Value>,
    ) -> Verdict {
        self.evaluate_with(roles, verb_name, raw_args, PathCheck::OnThisHost)
    }

    /// What the policy would decide for this call on a host where its paths exist: the same
    /// rules as [`Policy::evaluate`], but path parameters are checked on their text alone
    /// ([`PathCheck::Lexical`]). For the policy tools that replay history or test cases recorded
    /// elsewhere (`policy coverage`, `suggest`, `test`); the result cannot be run.
    pub fn evaluate_offline(
        &self,
        roles: &[&Role],
        verb_name: &str,
        raw_args: &BTreeMap<String, serde_json::Value>,
    ) -> OfflineVerdict {
        match self.evaluate_with(roles, verb_name, raw_args, PathCheck::Lexical) {
            Verdict::Run(call) => OfflineVerdict::Run {
                display_argv: call.display_argv(),
            },
            Verdict::Propose(proposed) => OfflineVerdict::Propose {
                display_argv: proposed.call.display_argv(),
            },
            Verdict::Refuse(refusal) => OfflineVerdict::Refuse(refusal),
        }
    }

    fn evaluate_with(
        &self,
        roles: &[&Role],
        verb_name: &str,
        raw_args: &BTreeMap<String, serde_json::Value>,
        path_check: PathCheck,
    ) -> Verdict {
        let Some(verb) = self
            .verbs
            .get(verb_name)
            .filter(|v| roles.iter().any(|r| v.roles.contains(&r.name)))
        else {
            return Verdict::Refuse(Refusal::NotAvailable {
                verb: verb_name.to_string(),
            });
        };
        let args = match self.validate_args_with(verb, raw_args, path_check) {
            Ok(args) => args,
            Err(refusal) => return Verdict::Refuse(refusal),
        };
        let action = match self.render(verb, &args, path_check) {
            Ok(action) => action,
            Err(rejection) => return Verdict::Refuse(Refusal::Invalid(rejection)),
        };
        let call = PreparedCall {
            verb: verb.name.clone(),
            args_hash: args_hash(&verb.name, &args),
            args,
            action,
            limits: CallLimits {
                sandbox: verb.sandbox.clone(),
                cwd: verb.cwd.clone(),
                timeout: verb.timeout,
                max_output: verb.max_output,
                rate: verb.rate,
                rate_global: verb.rate_global,
                max_concurrent: verb.max_concurrent,
                postgres_ephemeral: verb.postgres_ephemeral.clone(),
                stream: verb.stream,
            },
        };
        if !verb.needs_approval {
            Verdict::Run(call)
        } else if self.approvals.mode == ApprovalMode::Headless {
            Verdict::Refuse(Refusal::Headless {
                category: verb.category_label().to_string(),
            })
        } else {
            Verdict::Propose(ProposedCall {
                call,
                description: verb.description.clone(),
                category: verb.category_label(),
                verb_fingerprint: self.verb_fingerprint(verb),
            })
        }
    }

    /// A digest of everything that decides what an approved proposal of `verb` would run and
    /// how: its template, dry run, env, params, category, limits and working directory, and the
    /// *content* of its sandbox profile (roots, network, run-as, rlimits, umask, sockets), not
    /// only its name. An approval is refused when this changed since the proposal: a reload
    /// that leaves the argv as it was but gives the run another environment, more access or
    /// another category voids the approval.
    pub fn verb_fingerprint(&self, verb: &Verb) -> String {
        let profile = self
            .sandboxes
            .get(&verb.sandbox)
            .map(|spec| format!("{spec:?}"))
            .unwrap_or_default();
        let text = format!("{}|profile:{profile}", verb.fingerprint_text());
        crate::digest::sha256_hex(text.as_bytes())
    }

    /// Check the argument names and values; apply defaults.
    pub fn validate_args(
        &self,
        verb: &Verb,
        raw_args: &BTreeMap<String, serde_json::Value>,
    ) -> Result<BTreeMap<String, String>, Refusal> {
        self.validate_args_with(verb, raw_args, PathCheck::OnThisHost)
    }

    fn validate_args_with(
        &self,
        verb: &Verb,
        raw_args: &BTreeMap<String, serde_json::Value>,
        path_check: PathCheck,
    ) -> Result<BTreeMap<String, String>, Refusal> {
        if let Some(unknown) = raw_args.keys().find(|k| !verb.params.contains_key(*k)) {
            return Err(Refusal::UnknownParam {
                param: unknown.clone(),
                known: verb.params.keys().cloned().collect(),
            });
        }
        let missing: Vec<String> = verb
            .params
            .values()
            .filter(|p| p.required && p.default.is_none() && !raw_args.contains_key(&p.name))
            .map(|p| p.name.clone())
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::Missing { params: missing });
        }
        let mut args = BTreeMap::new();
        for param in verb.params.values() {
            let value = match raw_args.get(&param.name) {
                Some(raw) => {
                    let text = arg_text(raw).ok_or_else(|| {
                        Refusal::Invalid(ParamRejection {
                            param: param.name.clone(),
                            rule: "json-type",
                            message: "must be a string, an integer or a bool".into(),
                        })
                    })?;
                    // A protected name is refused on the text, before the path is looked up:
                    // the answer never depends on what exists there.
                    if matches!(param.kind, params::ParamKind::Path { .. }) {
                        let normalized =
                            param.validate_lexically(&text).map_err(Refusal::Invalid)?;
                        self.refuse_protected_path(param, &normalized)
                            .map_err(Refusal::Invalid)?;
                    }
                    match path_check {
                        PathCheck::OnThisHost => param.validate(&text),
                        PathCheck::Lexical => param.validate_lexically(&text),
                    }
                    .map_err(Refusal::Invalid)?
                }
                None => match &param.default {
                    Some(default) => {
                        self.refuse_protected_path(param, default)
                            .map_err(Refusal::Invalid)?;
                        default.clone()
                    }
                    None => continue,
                },
            };
            args.insert(param.name.clone(), value);
        }
        Ok(args)
    }

    /// A command verb's path parameter never names a protected entry or anything beneath one:
    /// its write roots are granted whole (module `sandbox::fs_rules`), so this check, on the
    /// validated (normalized, symlink-free) path, is what keeps a program that writes its
    /// argument away from `CLAUDE.md`, `.git/hooks/…` and the rest of the list. File verbs check
    /// their own path beneath their root (`crate::files`).
    fn refuse_protected_path(&self, param: &Param, value: &str) -> Result<(), ParamRejection> {
        if !matches!(
            param.kind,
            params::ParamKind::Path {
                opened_by: params::PathOpener::Child,
                ..
            }
        ) {
            return Ok(());
        }
        match self.protected.match_path(std::path::Path::new(value)) {
            None => Ok(()),
            Some(hit) => Err(ParamRejection {
                param: param.name.clone(),
                rule: "path-protected",
                message: format!(
                    "{value:?} is a {hit}: path parameters never name protected entries"
                ),
            }),
        }
    }

    fn render(
        &self,
        verb: &Verb,
        args: &BTreeMap<String, String>,
        path_check: PathCheck,
    ) -> Result<PreparedAction, ParamRejection> {
        match &verb.action {
            VerbAction::Command { template, dry_run } => {
                let argv = template.render(&verb.params, args, path_check)?;
                let dry_run = match dry_run {
                    Some(t) => Some(t.render(&verb.params, args, path_check)?),
                    None => None,
                };
                let mut env = Vec::with_capacity(verb.env.len());
                for (key, value) in &verb.env {
                    if let Some(rendered) = value.render(&verb.params, args, path_check)? {
                        env.push((key.clone(), rendered));
                    }
                }
                Ok(PreparedAction::Exec { argv, env, dry_run })
            }
            VerbAction::File(spec) => Ok(PreparedAction::File(FileCall {
                spec: spec.clone(),
                path: PathBuf::from(args.get("path").map_or("", String::as_str)),
                content: args
                    .get("content")
                    .map(|c| c.as_bytes().to_vec())
                    .unwrap_or_default(),
                // The validated value is one of the enum's spellings of the allowed modes.
                mode: args.get("mode").and_then(|value| {
                    spec.allowed_modes
                        .iter()
                        .copied()
                        .find(|m| format!("{m:04o}") == *value)
                }),
            })),
        }
    }
}
