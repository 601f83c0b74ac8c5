//! Raw policy schema: what an operator writes in TOML, deserialized as-is.
//!
//! Every table denies unknown fields, so a typo is an error with its line and column instead of
//! a silently ignored setting. Nothing here is trusted or checked beyond its shape; `compile`
//! turns it into the checked [`super::Policy`].
#![forbid(unsafe_code)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub version: Spanned<u32>,
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default)]
    pub roles: BTreeMap<String, Spanned<RawRole>>,
    #[serde(default)]
    pub approvals: RawApprovals,
    #[serde(default)]
    pub secrets: BTreeMap<String, Spanned<RawSecret>>,
    #[serde(default)]
    pub sandbox: BTreeMap<String, Spanned<RawSandbox>>,
    #[serde(default)]
    pub protected: RawProtected,
    #[serde(default)]
    pub scrub: RawScrub,
    #[serde(default)]
    pub verb: BTreeMap<String, Spanned<RawVerb>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDaemon {
    pub socket: Option<Spanned<PathBuf>>,
    pub socket_mode: Option<Spanned<String>>,
    pub socket_group: Option<Spanned<String>>,
    /// Optional second socket for approvers (humans), with its own group.
    pub approver_socket: Option<Spanned<PathBuf>>,
    pub approver_socket_group: Option<Spanned<String>>,
    pub state_dir: Option<Spanned<PathBuf>>,
    pub user: Option<Spanned<String>>,
    #[serde(default)]
    pub allow_root: bool,
    pub max_connections: Option<usize>,
    pub max_executions: Option<usize>,
    pub max_request_bytes: Option<usize>,
    pub request_timeout: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawRoleKind {
    /// A process acting for a model. Can never approve anything.
    #[default]
    Agent,
    /// A person. May approve when named in `[approvals] approvers` or a verb's `approvers`.
    Human,
}

#[derive(Debug, Default, Deserialize)]
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
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawApprovalMode {
    #[default]
    Interactive,
    Headless,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApprovals {
    #[serde(default)]
    pub mode: RawApprovalMode,
    /// Roles (of kind `human`) whose members may approve any verb.
    #[serde(default)]
    pub approvers: Vec<String>,
    pub expires: Option<Spanned<String>>,
    pub notify: Option<Spanned<RawCommand>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecret {
    pub file: Option<PathBuf>,
    pub credential: Option<String>,
    pub env: Option<String>,
    /// Present only so an inline secret gets a clear refusal instead of "unknown field".
    pub value: Option<toml::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawNetwork {
    None,
    Full,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRlimits {
    pub cpu: Option<Spanned<String>>,
    pub address_space: Option<Spanned<String>>,
    pub file_size: Option<Spanned<String>>,
    pub open_files: Option<u64>,
    pub processes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    pub inherit: Option<Spanned<String>>,
    pub read: Option<Vec<PathBuf>>,
    pub write: Option<Vec<PathBuf>>,
    pub network: Option<RawNetwork>,
    pub capabilities: Option<Vec<String>>,
    pub rlimits: Option<RawRlimits>,
    pub umask: Option<Spanned<String>>,
    pub run_as: Option<RawRunAs>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunAs {
    pub user: String,
    pub group: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProtected {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScrubPattern {
    pub name: String,
    pub regex: String,
}

/// A command template: one string split with shell-words at load time, or an explicit array.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawCommand {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawCategory {
    ReadOnly,
    Mutating,
    Destructive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawApprovalRequirement {
    /// Runs at once even though the verb mutates (reversible, with ceilings). Journaled.
    None,
    Required,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExamples {
    #[serde(default)]
    pub accept: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    pub reject: Vec<BTreeMap<String, toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerb {
    #[serde(default)]
    pub description: String,
    pub category: Option<RawCategory>,
    pub approval: Option<RawApprovalRequirement>,
    /// Roles (of kind `human`) that may approve this verb, in addition to the global ones.
    #[serde(default)]
    pub approvers: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    pub command: Option<Spanned<RawCommand>>,
    pub dry_run: Option<Spanned<RawCommand>>,
    pub builtin: Option<Spanned<String>>,
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    pub max_size: Option<Spanned<String>>,
    #[serde(default)]
    pub create_only: bool,
    #[serde(default)]
    pub modes: Vec<String>,
    #[serde(default)]
    pub params: BTreeMap<String, Spanned<RawParam>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Spanned<String>>,
    pub max_output: Option<Spanned<String>>,
    pub cwd: Option<PathBuf>,
    pub sandbox: Option<Spanned<String>>,
    #[serde(default)]
    pub allow_interpreter: bool,
    /// Per caller: at most N runs per period (`5/h`).
    pub rate: Option<Spanned<String>>,
    /// All callers together.
    pub rate_global: Option<Spanned<String>>,
    pub sha256: Option<String>,
    pub max_concurrent: Option<usize>,
    #[serde(default)]
    pub examples: RawExamples,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParam {
    #[serde(rename = "type")]
    pub kind: RawParamType,
    #[serde(default)]
    pub description: String,
    pub required: Option<bool>,
    pub default: Option<toml::Value>,
    pub values: Option<Vec<String>>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub pattern: Option<String>,
    pub max_length: Option<usize>,
    pub flag: Option<String>,
    pub roots: Option<Vec<PathBuf>>,
    pub must_exist: Option<bool>,
    pub max_duration: Option<String>,
    #[serde(default)]
    pub allow_dash: bool,
    pub allow: Option<Vec<String>>,
    pub deny_functions: Option<Vec<String>>,
    pub deny_relations: Option<Vec<String>>,
    pub allow_relations: Option<Vec<String>>,
    pub deny_columns: Option<Vec<String>>,
}
