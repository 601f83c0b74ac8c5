//! A typed policy for tests whose point is the daemon's behaviour, not the policy's syntax.
//!
//! [`Policy`] holds the roles, approvals, sandbox profiles, secrets and verbs a test needs and
//! renders them with `toml::to_string` from `Serialize` types: every value is quoted and escaped
//! by the TOML serializer, never spliced into text, so a description with quotes or a template
//! with braces reaches the loader as written. Field names and value spellings mirror the loader's
//! schema (`src/policy/schema.rs`); `tests/policy/builder.rs` holds the rendering to the real
//! loader. A test about policy text itself (parse errors, packs, line numbers) keeps its TOML.
//!
//! Paths may contain `@DIR@`: [`super::Daemon`] replaces it with the test's temp dir when it
//! writes the policy, as it does for hand-written TOML.
#![allow(dead_code)] // each test binary uses part of it

use serde::Serialize;
use std::collections::BTreeMap;

/// A whole policy (`version = 1`).
#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    version: u32,
    #[serde(skip_serializing_if = "DaemonSettings::is_default")]
    daemon: DaemonSettings,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    roles: BTreeMap<String, Role>,
    #[serde(skip_serializing_if = "Approvals::is_default")]
    approvals: Approvals,
    #[serde(skip_serializing_if = "Commands::is_default")]
    commands: Commands,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    secrets: BTreeMap<String, Secret>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    sandbox: BTreeMap<String, Sandbox>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    verb: BTreeMap<String, Verb>,
    #[serde(skip_serializing_if = "Protected::is_default")]
    protected: Protected,
}

/// `[protected]`: the operator's additions to the built-in protected names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
struct Protected {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    paths: Vec<String>,
}

impl Protected {
    fn is_default(&self) -> bool {
        *self == Protected::default()
    }
}

/// `[daemon]`: the settings tests change.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DaemonSettings {
    #[serde(skip_serializing_if = "is_false")]
    pub allow_root: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_executions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver_socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver_socket_group: Option<String>,
    /// The account a daemon started as root drops to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_uid: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_timeout: Option<String>,
}

impl DaemonSettings {
    fn is_default(&self) -> bool {
        *self == DaemonSettings::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoleKind {
    Agent,
    Human,
}

/// `[roles.NAME]`: who is in it, by uid or group name.
#[derive(Debug, Clone, Serialize)]
pub struct Role {
    kind: RoleKind,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    uids: Vec<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commands: Option<CommandMode>,
}

/// A role's `commands`: what the daemon decides on the shell commands its agents type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommandMode {
    Off,
    Advise,
    Rewrite,
}

/// `[commands]`: the site's mode, and the programs and paths whose use in a shell command
/// needs a verb.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
struct Commands {
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<CommandMode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    privileged_programs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    privileged_paths: Vec<String>,
}

impl Commands {
    fn is_default(&self) -> bool {
        *self == Commands::default()
    }
}

/// `[approvals]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Approvals {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<ApprovalMode>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Command>,
}

/// `[approvals] mode`; unset is interactive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    Headless,
}

/// A verb's `approval`; unset, a mutating or destructive verb needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    None,
}

impl Approvals {
    fn is_default(&self) -> bool {
        *self == Approvals::default()
    }
}

/// `[secrets.NAME]`: where the daemon reads a secret from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Secret {
    File(String),
}

/// A profile's `network`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    None,
    Full,
    /// `network = { connect_tcp = [PORT, …] }`: TCP connections to these ports alone.
    #[serde(untagged)]
    Ports {
        connect_tcp: Vec<u16>,
    },
}

/// `[sandbox.NAME]`: a profile; unset fields inherit the built-in default.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sandbox {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<Vec<String>>,
    /// Service variables (`TMUX`, `SSH_AUTH_SOCK`, …) `verbd exec` keeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_env: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub umask: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as: Option<RunAs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimits: Option<Rlimits>,
}

/// `rlimits = { open_files }`: the resource limits of a profile's children.
#[derive(Debug, Clone, Serialize)]
pub struct Rlimits {
    pub open_files: u64,
}

/// `run_as = { user }`: the account a profile's children run as.
#[derive(Debug, Clone, Serialize)]
pub struct RunAs {
    pub user: String,
}

impl Sandbox {
    /// A profile reading (and executing) beneath `read` and writing beneath `write`.
    /// An empty `write` leaves `write` unset (the built-in default: none).
    pub fn new(read: &[&str], write: &[&str]) -> Sandbox {
        Sandbox {
            read: Some(strings(read)),
            write: (!write.is_empty()).then(|| strings(write)),
            ..Sandbox::default()
        }
    }
}

impl Sandbox {
    /// The `logs` profile of the shell-command mapping tests: reads the system and
    /// `@DIR@/logs`, writes nothing, no network.
    pub fn logs() -> Sandbox {
        Sandbox {
            network: Some(NetworkMode::None),
            ..Sandbox::new(&["/usr", "/lib", "/etc", "/bin", "@DIR@/logs"], &[])
        }
    }

    /// A profile reading what the built-in default reads and writing beneath `write`.
    pub fn writing(write: &[&str]) -> Sandbox {
        Sandbox {
            write: Some(strings(write)),
            ..Sandbox::default()
        }
    }
}

/// Write the policy `verbd exec --policy PATH` reads: the profile `agent` alone.
pub fn write_exec_policy(path: &std::path::Path, agent: Sandbox) {
    std::fs::write(path, Policy::new().sandbox("agent", agent).render()).unwrap();
}

/// A command template: one line split with shell words at load time, or an explicit argv.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Command {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    ReadOnly,
    Mutating,
    Destructive,
}

/// `quorum = { count, from, max_per_role }`.
#[derive(Debug, Clone, Serialize)]
pub struct Quorum {
    pub count: u32,
    pub from: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_per_role: Option<u32>,
}

/// `[verb.NAME]`: a command verb ([`Verb::command`]) or a built-in file verb
/// ([`Verb::builtin`]), with the settings tests use.
#[derive(Debug, Clone, Serialize)]
pub struct Verb {
    description: String,
    category: Category,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval: Option<Approval>,
    roles: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Command>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<Command>,
    #[serde(skip_serializing_if = "Option::is_none")]
    builtin: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    roots: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<Quorum>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    break_glass: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    params: BTreeMap<String, Param>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    allow_interpreter: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrent: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<Stream>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    #[serde(skip_serializing_if = "Examples::is_empty")]
    examples: Examples,
}

/// `examples.accept` / `examples.reject`: arguments the self-test checks the verb against.
#[derive(Debug, Clone, Default, Serialize)]
struct Examples {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    accept: Vec<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reject: Vec<BTreeMap<String, String>>,
}

impl Examples {
    fn is_empty(&self) -> bool {
        self.accept.is_empty() && self.reject.is_empty()
    }
}

fn arguments(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// `stream = { max_duration, max_lines }`: a streaming verb's bounds.
#[derive(Debug, Clone, Serialize)]
pub struct Stream {
    pub max_duration: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_lines: Option<u64>,
}

/// A parameter's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamType {
    Enum,
    Int,
    String,
    SystemdUnit,
    K8sName,
    Hostname,
    Duration,
    Path,
    Bool,
    Sql,
}

/// `params.NAME = { type = …, … }`.
#[derive(Debug, Clone, Serialize)]
pub struct Param {
    #[serde(rename = "type")]
    kind: ParamType,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    required: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default: Option<toml::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pattern: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_length: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    roots: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_duration: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    allow_dash: bool,
    #[serde(skip_serializing_if = "is_false")]
    create: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deny_relations: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow_relations: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deny_columns: Option<Vec<String>>,
}

fn is_false(value: &bool) -> bool {
    !value
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new()
    }
}

impl Policy {
    /// An empty version 1 policy.
    pub fn new() -> Policy {
        Policy {
            version: 1,
            daemon: DaemonSettings::default(),
            roles: BTreeMap::new(),
            approvals: Approvals::default(),
            commands: Commands::default(),
            secrets: BTreeMap::new(),
            sandbox: BTreeMap::new(),
            verb: BTreeMap::new(),
            protected: Protected::default(),
        }
    }

    /// `[daemon] allow_root = true`: the tests run the daemon as root.
    pub fn allow_root(mut self) -> Policy {
        self.daemon.allow_root = true;
        self
    }

    pub fn shutdown_grace(mut self, grace: &str) -> Policy {
        self.daemon.shutdown_grace = Some(grace.into());
        self
    }

    /// `[daemon] max_executions`: runs at once, in all.
    pub fn max_executions(mut self, runs: usize) -> Policy {
        self.daemon.max_executions = Some(runs);
        self
    }

    /// `[daemon] user`: the account the daemon drops to when started as root.
    pub fn daemon_user(mut self, user: &str) -> Policy {
        self.daemon.user = Some(user.into());
        self
    }

    /// `[daemon] max_connections`: agent-socket connections, in all.
    pub fn max_connections(mut self, connections: usize) -> Policy {
        self.daemon.max_connections = Some(connections);
        self
    }

    /// `[daemon] max_connections_per_uid`: connections one uid may hold.
    pub fn max_connections_per_uid(mut self, connections: usize) -> Policy {
        self.daemon.max_connections_per_uid = Some(connections);
        self
    }

    /// `[daemon] queue_timeout`: how long a call over the limit waits for a slot.
    pub fn queue_timeout(mut self, wait: &str) -> Policy {
        self.daemon.queue_timeout = Some(wait.into());
        self
    }

    /// `[daemon] socket`: the agent socket.
    pub fn socket(mut self, path: &str) -> Policy {
        self.daemon.socket = Some(path.into());
        self
    }

    /// `[daemon] socket_group`: the group that may connect to the agent socket.
    pub fn socket_group(mut self, group: &str) -> Policy {
        self.daemon.socket_group = Some(group.into());
        self
    }

    /// `[daemon] approver_socket_group`: the group that may connect to the approver socket.
    pub fn approver_socket_group(mut self, group: &str) -> Policy {
        self.daemon.approver_socket_group = Some(group.into());
        self
    }

    /// `[daemon] approver_socket`: the second socket, for approvers.
    pub fn approver_socket(mut self, path: &str) -> Policy {
        self.daemon.approver_socket = Some(path.into());
        self
    }

    /// An agent role of these uids.
    pub fn agents(self, role: &str, uids: &[u32]) -> Policy {
        self.role(role, RoleKind::Agent, uids)
    }

    /// A human role of these uids.
    pub fn humans(self, role: &str, uids: &[u32]) -> Policy {
        self.role(role, RoleKind::Human, uids)
    }

    fn role(mut self, role: &str, kind: RoleKind, uids: &[u32]) -> Policy {
        let entry = Role {
            kind,
            uids: uids.to_vec(),
            groups: Vec::new(),
            commands: None,
        };
        self.roles.insert(role.into(), entry);
        self
    }

    /// A role's `commands`: the role must already be declared.
    pub fn commands(mut self, role: &str, mode: CommandMode) -> Policy {
        let entry = self
            .roles
            .get_mut(role)
            .expect("commands of a declared role");
        entry.commands = Some(mode);
        self
    }

    /// `[commands] mode`: the mode of every agent role that sets none of its own.
    pub fn commands_mode(mut self, mode: CommandMode) -> Policy {
        self.commands.mode = Some(mode);
        self
    }

    /// `[commands] privileged_programs`: programs an agent reaches only through verbs.
    pub fn privileged_programs(mut self, programs: &[&str]) -> Policy {
        self.commands.privileged_programs = strings(programs);
        self
    }

    /// `[commands] privileged_paths`: a shell command naming one of these needs a verb.
    pub fn privileged_paths(mut self, paths: &[&str]) -> Policy {
        self.commands.privileged_paths = strings(paths);
        self
    }

    /// An agent role of the members of these groups.
    pub fn agent_groups(mut self, role: &str, groups: &[&str]) -> Policy {
        let entry = Role {
            kind: RoleKind::Agent,
            uids: Vec::new(),
            groups: strings(groups),
            commands: None,
        };
        self.roles.insert(role.into(), entry);
        self
    }

    /// `[approvals] approvers = [...]`: the human roles that may approve any verb.
    pub fn approvers(mut self, roles: &[&str]) -> Policy {
        self.approvals.approvers = strings(roles);
        self
    }

    /// `[approvals] mode = "headless"`: no human is asked; what needs approval is denied.
    pub fn headless(mut self) -> Policy {
        self.approvals.mode = Some(ApprovalMode::Headless);
        self
    }

    /// `[approvals] expires`.
    pub fn approvals_expire(mut self, after: &str) -> Policy {
        self.approvals.expires = Some(after.into());
        self
    }

    /// `[approvals] notify`: the command run on each new proposal.
    pub fn notify(mut self, command: Command) -> Policy {
        self.approvals.notify = Some(command);
        self
    }

    pub fn secret(mut self, name: &str, source: Secret) -> Policy {
        self.secrets.insert(name.into(), source);
        self
    }

    pub fn sandbox(mut self, name: &str, profile: Sandbox) -> Policy {
        self.sandbox.insert(name.into(), profile);
        self
    }

    pub fn verb(mut self, name: &str, verb: Verb) -> Policy {
        self.verb.insert(name.into(), verb);
        self
    }

    /// The policy as TOML, every value escaped by the serializer.
    /// `[protected] names`: more protected names (components or `a/b` sequences).
    pub fn protected_names(mut self, names: &[&str]) -> Policy {
        self.protected.names = strings(names);
        self
    }

    /// `[protected] paths`: more protected absolute paths.
    pub fn protected_paths(mut self, paths: &[&str]) -> Policy {
        self.protected.paths = strings(paths);
        self
    }

    pub fn render(&self) -> String {
        toml::to_string(self).expect("a test policy renders as TOML")
    }
}

impl Verb {
    /// `log-tail`, the verb a `sudo tail -n N FILE` beneath `@DIR@/logs` maps onto in the
    /// shell-command mapping tests, for `roles` (its sandbox is the caller's to set).
    pub fn log_tail(roles: &[&str]) -> Verb {
        Verb::command(Category::ReadOnly, "/usr/bin/tail -n {lines} {file}")
            .description("The last lines of a log file")
            .roles(roles)
            .param("lines", Param::int(1, 1000).default(10))
            .param("file", Param::path(&["@DIR@/logs"]))
    }

    /// A verb that runs `command` (one line, split at load time).
    pub fn command(category: Category, command: &str) -> Verb {
        Verb::new(category, Some(Command::Line(command.into())), None)
    }

    /// A verb that runs `argv` exactly as given.
    pub fn argv(category: Category, argv: &[&str]) -> Verb {
        Verb::new(category, Some(Command::Argv(strings(argv))), None)
    }

    /// A built-in verb (`file.append`, `file.read`, …) beneath `roots`.
    pub fn builtin(category: Category, builtin: &str, roots: &[&str]) -> Verb {
        let mut verb = Verb::new(category, None, Some(builtin.into()));
        verb.roots = strings(roots);
        verb
    }

    fn new(category: Category, command: Option<Command>, builtin: Option<String>) -> Verb {
        Verb {
            description: String::new(),
            category,
            approval: None,
            roles: Vec::new(),
            command,
            dry_run: None,
            builtin,
            roots: Vec::new(),
            max_size: None,
            quorum: None,
            break_glass: Vec::new(),
            params: BTreeMap::new(),
            env: BTreeMap::new(),
            timeout: None,
            max_output: None,
            rate: None,
            sandbox: None,
            allow_interpreter: false,
            max_concurrent: None,
            stream: None,
            sha256: None,
            examples: Examples::default(),
        }
    }

    /// A built-in file verb's `max_size` (`4096`, `256KiB`).
    pub fn max_size(mut self, size: &str) -> Verb {
        self.max_size = Some(size.into());
        self
    }

    pub fn description(mut self, text: &str) -> Verb {
        self.description = text.into();
        self
    }

    /// The roles whose members may call it.
    pub fn roles(mut self, roles: &[&str]) -> Verb {
        self.roles = strings(roles);
        self
    }

    /// `approval = "none"`: a mutating verb that runs at once.
    pub fn without_approval(mut self) -> Verb {
        self.approval = Some(Approval::None);
        self
    }

    pub fn dry_run(mut self, command: &str) -> Verb {
        self.dry_run = Some(Command::Line(command.into()));
        self
    }

    /// A dry run of `argv` exactly as given.
    pub fn dry_run_argv(mut self, argv: &[&str]) -> Verb {
        self.dry_run = Some(Command::Argv(strings(argv)));
        self
    }

    pub fn quorum(mut self, quorum: Quorum) -> Verb {
        self.quorum = Some(quorum);
        self
    }

    pub fn break_glass(mut self, roles: &[&str]) -> Verb {
        self.break_glass = strings(roles);
        self
    }

    pub fn param(mut self, name: &str, param: Param) -> Verb {
        self.params.insert(name.into(), param);
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Verb {
        self.env.insert(name.into(), value.into());
        self
    }

    pub fn timeout(mut self, timeout: &str) -> Verb {
        self.timeout = Some(timeout.into());
        self
    }

    /// The most output a run returns (`8KiB`).
    pub fn max_output(mut self, size: &str) -> Verb {
        self.max_output = Some(size.into());
        self
    }

    /// `rate = "N/period"`, per caller.
    pub fn rate(mut self, rate: &str) -> Verb {
        self.rate = Some(rate.into());
        self
    }

    /// The sandbox profile it runs in.
    pub fn sandbox(mut self, profile: &str) -> Verb {
        self.sandbox = Some(profile.into());
        self
    }

    /// `allow_interpreter = true`: its program may be a shell or another interpreter.
    pub fn allow_interpreter(mut self) -> Verb {
        self.allow_interpreter = true;
        self
    }

    /// `max_concurrent`: its runs at once, all callers together.
    pub fn max_concurrent(mut self, runs: usize) -> Verb {
        self.max_concurrent = Some(runs);
        self
    }

    /// `sha256`: the digest its program must have.
    pub fn sha256(mut self, digest: &str) -> Verb {
        self.sha256 = Some(digest.into());
        self
    }

    /// `examples.accept`: arguments the self-test expects it to accept.
    pub fn accepts(mut self, example: &[(&str, &str)]) -> Verb {
        self.examples.accept.push(arguments(example));
        self
    }

    /// `examples.reject`: arguments the self-test expects it to reject.
    pub fn rejects(mut self, example: &[(&str, &str)]) -> Verb {
        self.examples.reject.push(arguments(example));
        self
    }

    /// `stream`: its output reaches the caller as it comes, within these bounds.
    pub fn stream(mut self, bounds: Stream) -> Verb {
        self.stream = Some(bounds);
        self
    }
}

impl Param {
    pub fn of(kind: ParamType) -> Param {
        Param {
            kind,
            description: None,
            required: None,
            default: None,
            values: None,
            min: None,
            max: None,
            pattern: None,
            max_length: None,
            flag: None,
            roots: None,
            max_duration: None,
            allow_dash: false,
            create: false,
            allow: None,
            deny_relations: None,
            allow_relations: None,
            deny_columns: None,
        }
    }

    /// An `int` within `min..=max`.
    pub fn int(min: i64, max: i64) -> Param {
        Param {
            min: Some(min),
            max: Some(max),
            ..Param::of(ParamType::Int)
        }
    }

    /// An `enum` of exactly these values.
    pub fn one_of(values: &[&str]) -> Param {
        Param {
            values: Some(strings(values)),
            ..Param::of(ParamType::Enum)
        }
    }

    /// A `string` that must match `pattern` whole.
    pub fn matching(pattern: &str) -> Param {
        Param {
            pattern: Some(pattern.into()),
            ..Param::of(ParamType::String)
        }
    }

    /// A `path` beneath one of `roots`.
    pub fn path(roots: &[&str]) -> Param {
        Param {
            roots: Some(strings(roots)),
            ..Param::of(ParamType::Path)
        }
    }

    /// A `bool` that adds `flag` to the argv when true.
    pub fn flag(flag: &str) -> Param {
        Param {
            flag: Some(flag.into()),
            ..Param::of(ParamType::Bool)
        }
    }

    /// A `duration` of at most `longest`.
    pub fn duration(longest: &str) -> Param {
        Param {
            max_duration: Some(longest.into()),
            ..Param::of(ParamType::Duration)
        }
    }

    /// `default`: the value an omitted argument takes.
    pub fn default(mut self, value: impl Into<toml::Value>) -> Param {
        self.default = Some(value.into());
        self
    }

    /// What the argument is, as clients show it.
    pub fn description(mut self, text: &str) -> Param {
        self.description = Some(text.into());
        self
    }

    /// `required = false`: the argument may be omitted.
    pub fn optional(mut self) -> Param {
        self.required = Some(false);
        self
    }

    /// `allow_dash = true`: the value may begin an argv element with `-`.
    pub fn allow_dash(mut self) -> Param {
        self.allow_dash = true;
        self
    }

    /// `create = true`: a `path` may name a new entry, created by the daemon beneath a write
    /// root of the verb's profile.
    pub fn create(mut self) -> Param {
        self.create = true;
        self
    }

    /// `sql`: the statement kinds it accepts (`select`, `show`, `explain-analyze`).
    pub fn allow(mut self, kinds: &[&str]) -> Param {
        self.allow = Some(strings(kinds));
        self
    }

    /// `sql`: relations it refuses.
    pub fn deny_relations(mut self, relations: &[&str]) -> Param {
        self.deny_relations = Some(strings(relations));
        self
    }

    /// `sql`: the only relations it reads.
    pub fn allow_relations(mut self, relations: &[&str]) -> Param {
        self.allow_relations = Some(strings(relations));
        self
    }

    /// `sql`: columns it refuses.
    pub fn deny_columns(mut self, columns: &[&str]) -> Param {
        self.deny_columns = Some(strings(columns));
        self
    }

    /// At most `characters` long.
    pub fn max_length(mut self, characters: usize) -> Param {
        self.max_length = Some(characters);
        self
    }
}
