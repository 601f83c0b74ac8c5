//! The command line's types: what `verbd` accepts, parsed by clap. The doc comments are the
//! `--help` texts, the man pages and the completions; `main.rs` dispatches each variant.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use std::path::PathBuf;

use crate::cli;
use crate::cli::socket_arg::SocketArg;

#[derive(Parser)]
#[command(
    name = "verbd",
    version,
    about = "Privilege-separation broker for AI agents"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// `defer`: a subcommand's arguments are built only when it is the one invoked, so `verbd call`
/// does not first build every other subcommand's arguments and help (a quarter of its start's
/// instructions, docs/PERFORMANCE.md). Completions and man pages build the whole tree.
#[derive(Subcommand)]
#[command(defer = true)]
pub(crate) enum Command {
    /// Run the daemon (embedded demo policy when no --policy is given)
    Serve {
        /// Policy file (default: the embedded demo policy, the invoking user as its only role)
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Agent socket to bind (default: the policy's daemon.socket, else
        /// $XDG_RUNTIME_DIR/verbd.sock, else verbd.sock in the state directory; not used when
        /// systemd passes the sockets)
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// State directory: the journal and its keys (default: the policy's daemon.state_dir,
        /// else /var/lib/verbd as root, $XDG_STATE_HOME/verbd or ~/.local/state/verbd otherwise)
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Call a verb: verbd call VERB key=value…
    Call {
        #[command(flatten)]
        socket: SocketArg,
        /// Print the full JSON response
        #[arg(long)]
        json: bool,
        /// Why the agent asks (stored and shown to approvers as untrusted text)
        #[arg(long)]
        reason: Option<String>,
        /// Replaying the same key with the same arguments returns the first outcome
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Run a verb that needs approval without it: only for people in a role the verb names
        /// in `break_glass`; journaled as break-glass and announced by the notifier
        #[arg(long, conflicts_with = "idempotency_key")]
        break_glass: bool,
        /// A streaming verb: stop after this many lines (at most the verb's own bound)
        #[arg(long, value_name = "N")]
        max_lines: Option<u64>,
        /// A streaming verb: stop after this long, e.g. 30s (at most the verb's own bound)
        #[arg(long, value_name = "DURATION", value_parser = parse_stream_duration)]
        max_duration: Option<u64>,
        /// The verb's name (`verbd list` shows the ones you may call)
        verb: String,
        /// Arguments as key=value
        args: Vec<String>,
    },
    /// List the verbs you may call
    List {
        #[command(flatten)]
        socket: SocketArg,
        /// Print the daemon's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Proposals waiting for a human decision (approvers)
    Pending {
        #[command(flatten)]
        socket: SocketArg,
        /// Print the daemon's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Approve proposal ID; --hash is the prefix `verbd pending` shows (at least 8 hex digits)
    Approve {
        #[command(flatten)]
        socket: SocketArg,
        /// The proposal's id (`verbd pending` lists them)
        id: u64,
        /// Leading hex digits of the proposal's arguments hash, as `verbd pending` shows them
        #[arg(long)]
        hash: String,
        /// Print the daemon's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Deny proposal ID
    Deny {
        #[command(flatten)]
        socket: SocketArg,
        /// The proposal's id
        id: u64,
        /// Why (journaled, and shown to the requester)
        #[arg(long)]
        reason: String,
    },
    /// Wait until proposal ID is decided and run (or the timeout passes)
    Wait {
        #[command(flatten)]
        socket: SocketArg,
        /// The proposal's id
        id: u64,
        /// Seconds to wait (at most 600)
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Print the daemon's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// State and outcome of proposal ID
    Result {
        #[command(flatten)]
        socket: SocketArg,
        /// The proposal's id
        id: u64,
        /// Print the daemon's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Resolve a proposal whose outcome is unknown (after a crash), after checking by hand
    Resolve {
        #[command(flatten)]
        socket: SocketArg,
        /// The proposal's id
        id: u64,
        /// succeeded, failed or not-run
        #[arg(long)]
        outcome: verbd::protocol::Outcome,
        /// What you checked, and how you know (journaled)
        #[arg(long)]
        note: String,
    },
    /// Run any program confined by a sandbox profile (Landlock, seccomp, no capabilities,
    /// rlimits): e.g. `verbd exec --policy p.toml --profile agent -- claude`. No privileges needed.
    Exec {
        /// Policy holding the profile (default: the embedded demo policy)
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The sandbox profile (a `[sandbox.NAME]` of the policy) to confine the program with
        #[arg(long, default_value = "default")]
        profile: String,
        /// Print the achieved Landlock ABI, seccomp mode, no_new_privs and capabilities to stderr
        #[arg(long)]
        print_status: bool,
        /// Keep protected entries with the Landlock-only split too: nothing new at the top of a
        /// write root (also: VERBD_EXEC_LANDLOCK_ONLY=1)
        #[arg(long, conflicts_with = "mount_namespace")]
        landlock_only: bool,
        /// Add a user and mount namespace: existing protected entries become read-only binds
        /// (owners other than the caller show as nobody; also: VERBD_EXEC_MOUNT_NAMESPACE=1)
        #[arg(long)]
        mount_namespace: bool,
        /// The program to run (looked up in $PATH when it has no `/`)
        program: PathBuf,
        /// Its arguments, passed as they are (put `--` before the program)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run the start-up self-test on a policy (binaries, sandbox canaries, examples, validator
    /// corpus, secrets; the journal too with --state-dir). Exit 1 on any FAIL.
    Selftest {
        /// Policy file (default: the embedded demo policy)
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Also verify this state directory's journal from its last checkpoint
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// The daemon's identity; for callers whose roles are all human also its counters (calls,
    /// refusals, proposals, approval latency, limits, the journal's size and growth)
    Status {
        #[command(flatten)]
        socket: SocketArg,
        /// Print the daemon's JSON answer
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// Prometheus text exposition format (node_exporter's textfile collector)
        #[arg(long)]
        prometheus: bool,
        /// Write to FILE atomically (temporary file, then rename) instead of standard output
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Ask the daemon to re-read, self-test and swap its policy (approvers; same as SIGHUP)
    Reload {
        #[command(flatten)]
        socket: SocketArg,
    },
    /// (internal) the sandbox canary the self-test runs inside each profile
    #[command(name = "__sandbox-canary", hide = true)]
    Canary {
        #[arg(long)]
        outside: PathBuf,
        #[arg(long)]
        network_none: bool,
        #[arg(long)]
        fast_open_refused: bool,
        #[arg(long)]
        keeps_capabilities: bool,
        #[arg(long)]
        bounding_kept: bool,
        #[arg(long)]
        private: Vec<PathBuf>,
    },
    // The subcommands that have subcommands of their own, and the two between them, are built
    // eagerly (see `Tools`); their place here keeps their place in the help.
    #[command(flatten)]
    Tools(Tools),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Write the man pages (verbd.1 and one per subcommand) into DIR/man1, so `MANPATH=DIR`
    /// finds them
    Man {
        /// The man directory (DIR/man1/ is created)
        dir: PathBuf,
    },
}

/// The subcommands with subcommands of their own (and `sh` and `mcp`, between them in the help),
/// not deferred: clap copies the tree for `verbd help …` before it expands deferred ones, and
/// the completion scripts complete `verbd help audit …` from that copy. Their own subcommands'
/// arguments are deferred instead (`defer` on their enums; not on `notify`'s, whose arguments'
/// own doc comments would then replace its subcommands' help).
#[derive(Subcommand)]
pub(crate) enum Tools {
    /// The audit journal
    Audit {
        #[command(subcommand)]
        command: cli::audit::AuditCommand,
    },
    /// A drop-in for an agent runtime's shell tool that never runs a shell: `verbd sh -c
    /// 'COMMAND'` runs the verb the command stands for (its `| grep …` filters applied), or
    /// refuses with the closest verb. Needs the mode `rewrite` for the caller's role (its
    /// `commands`, or `[commands] mode`)
    Sh {
        #[command(flatten)]
        socket: SocketArg,
        /// The command, as a shell tool would receive it
        #[arg(short = 'c', value_name = "COMMAND")]
        command: String,
    },
    /// Agent runtime adapters
    Hook {
        #[command(subcommand)]
        command: cli::local::HookCommand,
    },
    /// MCP server on stdio for agent runtimes: each verb you may call is a tool
    /// (`claude mcp add verbd -- verbd mcp`); --print-config prints a runtime's snippet
    Mcp {
        #[command(flatten)]
        socket: SocketArg,
        /// Print this runtime's configuration snippet for `verbd mcp` instead of serving
        #[arg(long, value_enum, value_name = "RUNTIME")]
        print_config: Option<verbd::adapters::mcp::config::Client>,
    },
    /// Sandbox profiles: what they allow, and which rule decides (offline)
    Sandbox {
        #[command(subcommand)]
        command: cli::local::SandboxCommand,
    },
    /// Policy tools (work offline, no daemon needed)
    Policy {
        #[command(subcommand)]
        command: cli::policy_tools::PolicyCommand,
    },
    /// Approval notifiers: `[approvals] notify` runs one with the proposal on stdin
    /// (ntfy, Slack-compatible webhooks, email, desktop; docs/fleet.md)
    Notify {
        #[command(subcommand)]
        command: cli::notify::NotifyCommand,
    },
}

impl Command {
    /// Whether this command should end quietly when the reader of its output goes away (`verbd
    /// list | head -1`), like any filter: it writes only its output and requests on sockets
    /// that never raise SIGPIPE (see `verbd::sigpipe`). The daemon, and the commands that feed
    /// other processes' pipes or sockets (`exec`, `selftest`'s canaries, `mcp`, `notify`, the
    /// hook), keep SIGPIPE ignored and never print through a panicking macro instead.
    pub(crate) fn ends_with_its_reader(&self) -> bool {
        match self {
            Command::Serve { .. }
            | Command::Exec { .. }
            | Command::Selftest { .. }
            | Command::Canary { .. }
            | Command::Tools(Tools::Hook { .. })
            | Command::Tools(Tools::Sh { .. })
            | Command::Tools(Tools::Mcp { .. })
            | Command::Tools(Tools::Notify { .. }) => false,
            Command::Call { .. }
            | Command::List { .. }
            | Command::Pending { .. }
            | Command::Approve { .. }
            | Command::Deny { .. }
            | Command::Wait { .. }
            | Command::Result { .. }
            | Command::Resolve { .. }
            | Command::Status { .. }
            | Command::Reload { .. }
            | Command::Tools(Tools::Audit { .. })
            | Command::Tools(Tools::Sandbox { .. })
            | Command::Tools(Tools::Policy { .. })
            | Command::Completions { .. }
            | Command::Man { .. } => true,
        }
    }
}

/// `--max-duration`: a duration such as `30s` or `2m`, as milliseconds.
pub(crate) fn parse_stream_duration(text: &str) -> Result<u64, String> {
    verbd::policy::units::parse_duration(text).map(|d| d.as_millis() as u64)
}
