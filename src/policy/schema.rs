//! Raw policy schema: what an operator writes in TOML, deserialized as-is.
//!
//! Every table denies unknown fields, so a typo is an error with its line and column instead of
//! a silently ignored setting. Nothing here is trusted or checked beyond its shape; `compile`
//! turns it into the checked [`super::Policy`].
#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use toml::Spanned;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    #[schemars(with = "u32")]
    pub version: Spanned<u32>,
    /// Policy packs whose verbs and sandbox profiles join this policy (docs/policy.md, "Packs").
    #[serde(default)]
    #[schemars(with = "Vec<RawInclude>")]
    pub include: Vec<Spanned<RawInclude>>,
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawRole>")]
    pub roles: BTreeMap<String, Spanned<RawRole>>,
    #[serde(default)]
    pub approvals: RawApprovals,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawSecret>")]
    pub secrets: BTreeMap<String, Spanned<RawSecret>>,
    /// Per-call PostgreSQL roles (docs/policy.md, "Per-call database credentials").
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawPostgresEphemeral>")]
    pub postgres_ephemeral: BTreeMap<String, Spanned<RawPostgresEphemeral>>,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawSandbox>")]
    pub sandbox: BTreeMap<String, Spanned<RawSandbox>>,
    #[serde(default)]
    pub protected: RawProtected,
    #[serde(default)]
    pub scrub: RawScrub,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawVerb>")]
    pub verb: BTreeMap<String, Spanned<RawVerb>>,
    /// Shell commands agents type (`verbd hook claude-code` on Bash, `verbd sh`): what counts as
    /// needing a privilege the agent does not have.
    #[serde(default)]
    pub commands: RawCommands,
}

/// `[commands]`: besides `sudo` and its kind, the programs and paths whose use needs a verb.
/// A command that uses one and maps to no verb is refused with the closest verb.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCommands {
    /// The mode of every agent role that sets no `commands` of its own (default `off`).
    #[serde(default)]
    pub mode: Option<RawCommandMode>,
    /// Program names (e.g. `psql`, `kubectl`) the agent reaches only through verbs.
    #[serde(default)]
    pub privileged_programs: Vec<String>,
    /// Absolute paths (e.g. `/var/log`, `/etc/ssl/private`): a command naming one, or anything
    /// beneath it, needs a verb.
    #[serde(default)]
    #[schemars(with = "Vec<PathBuf>")]
    pub privileged_paths: Vec<Spanned<PathBuf>>,
}

/// How the daemon answers a shell command an agent of a role is about to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawCommandMode {
    /// No decision on shell commands (the agent's runtime decides, as without verbd).
    #[default]
    Off,
    /// A command that maps to a verb is refused with the `verbd call` to use instead.
    Advise,
    /// A command that maps to a verb is rewritten into its `verbd call`.
    Rewrite,
}

/// One `include` entry: a pack path, or a table that also narrows what the pack brings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawInclude {
    Path(String),
    Table(RawIncludeTable),
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawIncludeTable {
    /// The pack file; a relative path is resolved against the including policy's directory.
    pub path: String,
    /// Replaces the `roles` of every verb the pack brings.
    pub roles: Option<Vec<String>>,
    /// Take only these verbs of the pack.
    pub verbs: Option<Vec<String>>,
    /// Parameter name → allowed values: every parameter of that name in the pack's verbs becomes
    /// an enum of exactly these values (e.g. `namespace = ["web"]`, `unit = ["nginx.service"]`).
    #[serde(default)]
    pub values: BTreeMap<String, Vec<String>>,
    /// Program name → absolute path on this host, for verbs whose program has that file name.
    #[serde(default)]
    pub programs: BTreeMap<String, PathBuf>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDaemon {
    #[schemars(with = "Option<PathBuf>")]
    pub socket: Option<Spanned<PathBuf>>,
    #[schemars(with = "Option<String>")]
    pub socket_mode: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub socket_group: Option<Spanned<String>>,
    /// Optional second socket for approvers (humans), with its own group.
    #[schemars(with = "Option<PathBuf>")]
    pub approver_socket: Option<Spanned<PathBuf>>,
    #[schemars(with = "Option<String>")]
    pub approver_socket_group: Option<Spanned<String>>,
    #[schemars(with = "Option<PathBuf>")]
    pub state_dir: Option<Spanned<PathBuf>>,
    #[schemars(with = "Option<String>")]
    pub user: Option<Spanned<String>>,
    #[serde(default)]
    pub allow_root: bool,
    /// Agent socket: connections being read or answered, in all.
    #[schemars(with = "Option<usize>")]
    pub max_connections: Option<Spanned<usize>>,
    /// Per socket: connections one uid may hold at once.
    #[schemars(with = "Option<usize>")]
    pub max_connections_per_uid: Option<Spanned<usize>>,
    /// Agent socket: `wait` requests parked at once, in all.
    #[schemars(with = "Option<usize>")]
    pub max_waits: Option<Spanned<usize>>,
    /// Per socket: `wait` requests one uid may have parked at once.
    #[schemars(with = "Option<usize>")]
    pub max_waits_per_uid: Option<Spanned<usize>>,
    /// Approver socket: its own pool of connections (and of parked waits).
    #[schemars(with = "Option<usize>")]
    pub approver_max_connections: Option<Spanned<usize>>,
    #[schemars(with = "Option<usize>")]
    pub max_executions: Option<Spanned<usize>>,
    /// How long a call over an execution limit waits for a slot before `busy`.
    #[schemars(with = "Option<String>")]
    pub queue_timeout: Option<Spanned<String>>,
    pub max_request_bytes: Option<usize>,
    #[schemars(with = "Option<String>")]
    pub request_timeout: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub shutdown_grace: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawRoleKind {
    /// A process acting for a model. Can never approve anything.
    #[default]
    Agent,
    /// A person. May approve when named in `[approvals] approvers` or a verb's `approvers`.
    Human,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRole {
    #[serde(default)]
    pub kind: RawRoleKind,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub uids: Vec<u32>,
    /// Shell commands this role's agents type: `off`, `advise` or `rewrite`; unset, an agent
    /// role takes `[commands] mode` (default `off`).
    #[serde(default)]
    pub commands: Option<RawCommandMode>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawApprovalMode {
    #[default]
    Interactive,
    Headless,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawApprovals {
    #[serde(default)]
    pub mode: RawApprovalMode,
    /// Roles (of kind `human`) whose members may approve any verb.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub approvers: Vec<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub expires: Option<Spanned<String>>,
    #[schemars(with = "Option<RawCommand>")]
    pub notify: Option<Spanned<RawCommand>>,
    /// The sandbox profile the notifier runs in (default: `default`).
    #[schemars(with = "Option<String>")]
    pub notify_sandbox: Option<Spanned<String>>,
    /// Per category (`mutating`, `destructive`): the quorum its verbs need unless a verb sets
    /// its own.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawQuorum>")]
    pub quorum: BTreeMap<String, Spanned<RawQuorum>>,
}

/// `{ count = 2, from = ["sre", "dba"], max_per_role = 1 }`: distinct people, the roles that
/// count, and at most how many approvals one role gives.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawQuorum {
    pub count: u32,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub from: Vec<Spanned<String>>,
    pub max_per_role: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSecret {
    pub file: Option<PathBuf>,
    pub credential: Option<String>,
    pub env: Option<String>,
    /// Present only so an inline secret gets a clear refusal instead of "unknown field".
    #[schemars(with = "Option<serde_json::Value>")]
    pub value: Option<toml::Value>,
}

/// `[postgres_ephemeral.NAME]`: a login role minted for each call of a verb that names this
/// source, member of `template`, dropped when the call ends.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPostgresEphemeral {
    /// The psql binary the daemon runs to mint and drop roles (absolute path).
    pub psql: PathBuf,
    /// A socket directory (absolute) or a host name.
    pub host: String,
    pub port: Option<u16>,
    pub database: String,
    /// The admin role the daemon connects as.
    pub admin_user: String,
    /// The `[secrets.NAME]` holding the admin role's password.
    pub admin_secret: String,
    /// The role every minted role is a member of.
    pub template: String,
    /// Added to the verb's timeout in `VALID UNTIL` (default `60s`).
    pub slack: Option<String>,
}

/// `network = "none" | "full"`, or `network = { connect_tcp = [PORT, …] }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawNetwork {
    Mode(RawNetworkMode),
    Ports(RawNetworkPorts),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawNetworkMode {
    None,
    Full,
}

/// TCP connects to these ports only (Landlock TCP port rules).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNetworkPorts {
    pub connect_tcp: Vec<u16>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRlimits {
    #[schemars(with = "Option<String>")]
    pub cpu: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub address_space: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub file_size: Option<Spanned<String>>,
    pub open_files: Option<u64>,
    pub processes: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    #[schemars(with = "Option<String>")]
    pub inherit: Option<Spanned<String>>,
    pub read: Option<Vec<PathBuf>>,
    pub write: Option<Vec<PathBuf>>,
    pub network: Option<RawNetwork>,
    /// Pathname Unix sockets the sandboxed program may connect to (every other connect is
    /// refused by the connect broker).
    pub unix_sockets: Option<Vec<PathBuf>>,
    /// Service variables (`SSH_AUTH_SOCK`, `DISPLAY`, …) `verbd exec` keeps in the environment.
    pub keep_env: Option<Vec<String>>,
    pub capabilities: Option<Vec<String>>,
    pub rlimits: Option<RawRlimits>,
    #[schemars(with = "Option<String>")]
    pub umask: Option<Spanned<String>>,
    pub run_as: Option<RawRunAs>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRunAs {
    pub user: String,
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawProtected {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawScrub {
    #[serde(default = "yes")]
    pub builtin: bool,
    #[serde(default)]
    pub patterns: Vec<RawScrubPattern>,
}

impl Default for RawScrub {
    fn default() -> Self {
        RawScrub {
            builtin: true,
            patterns: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawScrubPattern {
    pub name: String,
    pub regex: String,
}

/// A command template: one string split with shell-words at load time, or an explicit array.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawCommand {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawCategory {
    ReadOnly,
    Mutating,
    Destructive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawApprovalRequirement {
    /// Runs at once even though the verb mutates (reversible, with ceilings). Journaled.
    None,
    Required,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawExamples {
    #[serde(default)]
    #[schemars(with = "Vec<BTreeMap<String, serde_json::Value>>")]
    pub accept: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    #[schemars(with = "Vec<BTreeMap<String, serde_json::Value>>")]
    pub reject: Vec<BTreeMap<String, toml::Value>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawVerb {
    #[serde(default)]
    pub description: String,
    pub category: Option<RawCategory>,
    pub approval: Option<RawApprovalRequirement>,
    /// Roles (of kind `human`) that may approve this verb, in addition to the global ones.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub approvers: Vec<Spanned<String>>,
    /// How many distinct people must approve, from which roles (overrides the category's).
    #[schemars(with = "Option<RawQuorum>")]
    pub quorum: Option<Spanned<RawQuorum>>,
    /// Human roles that may run this verb without approval (`verbd call --break-glass`),
    /// journaled as break-glass and announced by the notifier.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub break_glass: Vec<Spanned<String>>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[schemars(with = "Option<RawCommand>")]
    pub command: Option<Spanned<RawCommand>>,
    #[schemars(with = "Option<RawCommand>")]
    pub dry_run: Option<Spanned<RawCommand>>,
    #[schemars(with = "Option<String>")]
    pub builtin: Option<Spanned<String>>,
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    #[schemars(with = "Option<String>")]
    pub max_size: Option<Spanned<String>>,
    #[serde(default)]
    pub create_only: bool,
    #[serde(default)]
    pub modes: Vec<String>,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, RawParam>")]
    pub params: BTreeMap<String, Spanned<RawParam>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub max_output: Option<Spanned<String>>,
    pub cwd: Option<PathBuf>,
    #[schemars(with = "Option<String>")]
    pub sandbox: Option<Spanned<String>>,
    #[serde(default)]
    pub allow_interpreter: bool,
    /// Per caller: at most N runs per period (`5/h`).
    #[schemars(with = "Option<String>")]
    pub rate: Option<Spanned<String>>,
    /// All callers together.
    #[schemars(with = "Option<String>")]
    pub rate_global: Option<Spanned<String>>,
    pub sha256: Option<String>,
    pub max_concurrent: Option<usize>,
    /// A `[postgres_ephemeral.NAME]`: each call gets its own role as `PGUSER`/`PGPASSWORD`.
    pub postgres_ephemeral: Option<String>,
    /// The verb streams (`tail -f`): its output goes to the caller as it comes, within bounds.
    #[schemars(with = "Option<RawStream>")]
    pub stream: Option<Spanned<RawStream>>,
    #[serde(default)]
    pub examples: RawExamples,
}

/// `stream = { max_duration = "60s", max_lines = 1000 }`: a streaming verb's bounds.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStream {
    /// The longest a run streams (required; at most `15m`).
    pub max_duration: String,
    /// The most lines (stdout and stderr together) a run delivers.
    pub max_lines: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RawParamType {
    Enum,
    Int,
    String,
    Bool,
    Path,
    Duration,
    SystemdUnit,
    K8sName,
    Hostname,
    Sql,
}

/// One parameter. Which fields are meaningful depends on `type`; `compile` refuses the others.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawParam {
    #[serde(rename = "type")]
    pub kind: RawParamType,
    #[serde(default)]
    pub description: String,
    pub required: Option<bool>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub default: Option<toml::Value>,
    pub values: Option<Vec<String>>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub pattern: Option<String>,
    pub max_length: Option<usize>,
    pub flag: Option<String>,
    pub roots: Option<Vec<PathBuf>>,
    pub must_exist: Option<bool>,
    pub create: Option<bool>,
    pub max_duration: Option<String>,
    #[serde(default)]
    pub allow_dash: bool,
    pub allow: Option<Vec<String>>,
    pub deny_functions: Option<Vec<String>>,
    pub deny_relations: Option<Vec<String>>,
    pub allow_relations: Option<Vec<String>>,
    pub deny_columns: Option<Vec<String>>,
}
