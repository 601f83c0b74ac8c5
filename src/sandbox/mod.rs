//! Per-call sandbox: Landlock, seccomp, capabilities, rlimits, umask and an optional run-as user,
//! applied to a child between `fork` and `execve` — or to the current process by `verbd exec`.
//!
//! A [`SandboxSpec`] (one `[sandbox.NAME]` table of the policy) is compiled once, at policy load,
//! into a [`PreparedSandbox`]: the Landlock template ruleset (see [`fs_rules`]: write roots
//! granted whole for verbs, or split around protected names for `verbd exec` without user
//! namespaces, and the trade-offs), the BPF
//! programs (module `seccomp`: their shape and the attach-cost measurements), the highest
//! capability number and the rlimit values. Per spawn, [`PreparedSandbox::install`] clones the
//! ruleset (one `dup`), clones an `Arc` and sets a `pre_exec` closure that runs only raw syscalls
//! (module `child`), in this order: setsid, rlimits (all but open files), umask, close-on-exec
//! for fds ≥ 3, setgroups, setresgid, bounding set, keep-caps, setresuid, capset, ambient set,
//! parent-death signal, no_new_privs, Landlock (filesystem, then the TCP port layer of module
//! `net_rules`), seccomp (the last filter hands its listener to the connect broker of
//! [`unix_broker`], which decides every `connect` outside the sandbox: a confined program
//! reaches only the Unix sockets its profile lists; under `verbd exec` it also hands every
//! creating call to the create broker of module `create_broker`, which refuses new protected
//! names; both brokers stand on the seccomp user-notification primitives of module `notify`),
//! then the open-files limit (the listener is a new descriptor, and a busy daemon's
//! child inherits its descriptor table until exec, so the lowest free number can be above the
//! verb's limit).
//!
//! Every `SIGKILL` the daemon sends a child or its process group goes through module [`kill`],
//! which can end a `run_as` child of another uid without `CAP_KILL`.
//!
//! Invariants:
//! - fail closed: a child whose sandbox cannot be fully applied never execs; `spawn()` fails with
//!   a code that [`stage_of_spawn_error`] maps back to the [`Stage`];
//! - nothing in the child allocates, locks or panics;
//! - Landlock is required at a pinned ABI ([`fs_rules::PINNED_ABI`], `HardRequirement`): an older
//!   kernel makes [`PreparedSandbox::prepare`] fail, never a silently weaker child;
//! - the test hook `PreparedSandbox::fail_stage_for_test` (feature `test-hooks`) can only make a stage fail, so the
//!   child dies before exec; it cannot skip or weaken anything.
//!
//! Caveats for callers: `RLIMIT_NPROC` is not enforced by the kernel for uid 0, so fork bombs are
//! contained only for children with `run_as` (or a cgroup); `PR_SET_PDEATHSIG` follows the
//! *thread* that forked, so spawn from long-lived threads; do not use `Command::uid/gid/groups/
//! process_group` together with `install` (std applies them before `pre_exec`).

mod ancestor_listing;
mod child;
mod connect_hub;
mod create_broker;
pub mod exec_env;
pub mod fs_rules;
pub mod git_config;
mod git_dirs;
pub mod identity;
pub mod kill;
mod namespace;
mod net_rules;
mod notify;
pub mod remote;
mod seccomp;
pub mod unix_broker;

use std::ffi::{CString, OsString};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::RulesetCreated;
use seccompiler::BpfProgram;

use ancestor_listing::AncestorListing;
use child::{ChildPlan, RlimitTable};
pub use child::{Stage, StageFailure};
pub use fs_rules::{
    DenialLog, Explanation, FsAccess, MountKind, ProtectedMount, WriteRoots, explain, explain_exec,
};
pub use namespace::{NamespaceError, Support as NamespaceSupport, probe as probe_namespaces};
use seccomp::FilterUse;

/// Network access of sandboxed children. In every mode a `connect` to a pathname Unix socket
/// succeeds only for the profile's `unix_sockets` (module [`unix_broker`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// Only `AF_UNIX` sockets can be created.
    #[default]
    None,
    /// Any socket family.
    Full,
    /// `AF_UNIX` sockets, and TCP connects to these ports only (Landlock TCP rules; no bind,
    /// no UDP).
    ConnectTcp(Vec<u16>),
}

/// Resource limits of a child. `u64::MAX` means unlimited. A value above the limit the parent
/// already has is lowered to it; the core-file limit is always 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimits {
    pub cpu_seconds: u64,
    pub address_space_bytes: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    /// Counted per real uid across all its processes; not enforced for uid 0.
    pub processes: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            cpu_seconds: 300,
            address_space_bytes: 8 << 30,
            file_size_bytes: 4 << 30,
            open_files: 1024,
            processes: 512,
        }
    }
}

/// The user and group a child switches to (supplementary groups become empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// One sandbox profile, as the policy declares it.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The profile name (`[sandbox.NAME]`), for error messages.
    pub name: String,
    /// Read and execute roots.
    pub read: Vec<PathBuf>,
    /// Write roots (read + write), granted as [`WriteRoots`] says.
    pub write: Vec<PathBuf>,
    /// The daemon's private paths (canonical): no child reads or writes them, whatever `read`
    /// and `write` say (read roots are split around them, write roots may not touch them; see
    /// [`fs_rules`]). Set by the loader for daemon children; empty for `verbd exec`.
    pub private: Vec<PathBuf>,
    pub protected: crate::protected::ProtectedNames,
    pub network: Network,
    /// Capabilities the child keeps (default none).
    pub keep_capabilities: Vec<caps::Capability>,
    pub rlimits: Rlimits,
    /// The profile's `umask`. `None` (not set): [`DEFAULT_UMASK`] for the daemon's children,
    /// the caller's own for `verbd exec`, so files an agent creates get the modes the human's
    /// tools would give them.
    pub umask: Option<u32>,
    pub run_as: Option<RunAs>,
    /// Pathname Unix sockets the child may connect to (absolute; default none). `verbd exec`
    /// adds the daemon's own socket.
    pub unix_sockets: Vec<PathBuf>,
    /// Service variables `verbd exec` keeps in the environment (see [`exec_env::DROPPED`]).
    pub keep_env: Vec<String>,
}

/// The umask the daemon's children get unless the profile sets another.
pub const DEFAULT_UMASK: u32 = 0o077;

impl SandboxSpec {
    /// A profile with the defaults: no roots (only `/dev/null` writable), the built-in protected
    /// names, no network, no capabilities, default rlimits, no umask of its own, no run-as.
    pub fn new(name: impl Into<String>) -> SandboxSpec {
        SandboxSpec {
            name: name.into(),
            read: Vec::new(),
            write: Vec::new(),
            private: Vec::new(),
            protected: crate::protected::ProtectedNames::builtin(),
            network: Network::None,
            keep_capabilities: Vec::new(),
            rlimits: Rlimits::default(),
            umask: None,
            run_as: None,
            unix_sockets: Vec::new(),
            keep_env: Vec::new(),
        }
    }
}

/// Why a profile could not be prepared or applied.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox `{profile}`: path {path:?} cannot be used: {reason}")]
    Path {
        profile: String,
        path: PathBuf,
        reason: String,
    },
    #[error("sandbox `{profile}`: write root {path:?} is protected ({rule})")]
    ProtectedWriteRoot {
        profile: String,
        path: PathBuf,
        rule: String,
    },
    #[error(
        "sandbox `{profile}`: {kind} {root:?} touches {private:?}, a private path of the daemon (its policy, a secret source, the credentials or the state directory), which no child may read or write; narrow the root, or move the daemon's file out of it"
    )]
    PrivateRoot {
        profile: String,
        kind: &'static str,
        root: PathBuf,
        private: PathBuf,
    },
    #[error(
        "sandbox `{profile}`: write root {inner:?} lies inside write root {outer:?}; list only the outer one"
    )]
    NestedWriteRoots {
        profile: String,
        inner: PathBuf,
        outer: PathBuf,
    },
    #[error(
        "sandbox `{profile}`: write root {root:?} has more than {limit} entries within the protected-name walk; narrow it"
    )]
    WalkTooLarge {
        profile: String,
        root: PathBuf,
        limit: usize,
    },
    #[error("Landlock: {0}")]
    Landlock(String),
    #[error("seccomp filter: {0}")]
    Seccomp(String),
    #[error("cannot read /proc/sys/kernel/cap_last_cap: {0}")]
    CapLastCap(String),
    #[error("capability {0} cannot be kept (number above 63)")]
    CapabilityOutOfRange(String),
    #[error("cannot clone the Landlock ruleset: {0}")]
    CloneRuleset(io::Error),
    #[error("{0}")]
    Stage(StageFailure),
    #[error("exec_confined needs a single-threaded process, this one has {0} threads")]
    NotSingleThreaded(u32),
    #[error(
        "profile `{0}` sets run_as, which needs CAP_SETUID and CAP_SETGID; run without run_as or as root"
    )]
    RunAsNeedsPrivilege(String),
    #[error("program {0:?} not found in PATH")]
    ProgramNotFound(PathBuf),
    #[error("argument contains a NUL byte")]
    NulInArgument,
    #[error("cannot read the process status: {0}")]
    Status(io::Error),
    #[error("{0}")]
    Namespace(NamespaceError),
    #[error("{0}")]
    NamespaceRefused(String),
    #[error("cannot observe accesses in a confined child: {0}")]
    Observe(String),
    #[error("cannot execute {program:?}: {source}")]
    Exec { program: PathBuf, source: io::Error },
    #[error(
        "sandbox `{profile}`: unix_sockets entry {path:?} must be an absolute path shorter than 108 bytes"
    )]
    UnixSocketPath { profile: String, path: PathBuf },
    #[error(
        "sandbox `{profile}`: unix_sockets entry {socket:?} lies inside write root {root:?}: the confined program could replace it with a symlink to any socket, which the broker would follow; list only sockets outside the profile's write roots"
    )]
    SwappableSocket {
        profile: String,
        socket: PathBuf,
        root: PathBuf,
    },
    #[error(
        "cannot start the connect broker: {0} (verbd exec cannot run inside another sandbox that already brokers seccomp notifications, e.g. a nested verbd exec)"
    )]
    Broker(io::Error),
}

/// seccomp flags for every filter. `SECCOMP_FILTER_FLAG_SPEC_ALLOW` is deliberately not set: it
/// saved nothing measurable (module `seccomp` has the numbers) and on kernels with
/// `spec_store_bypass_disable=seccomp` it would leave the SSB mitigation off.
const SECCOMP_FLAGS: libc::c_ulong = 0;

/// A profile compiled for spawning: built once at policy load, shared by every spawn.
pub struct PreparedSandbox {
    spec: SandboxSpec,
    write_roots: WriteRoots,
    denial_log: DenialLog,
    template: RulesetCreated,
    daemon_filters: Arc<Vec<BpfProgram>>,
    exec_filters: Arc<Vec<BpfProgram>>,
    connect_filter: Arc<BpfProgram>,
    /// What the connect broker lets this profile's children reach, shared by every call.
    connect_policy_shared: Arc<unix_broker::ConnectPolicy>,
    /// `verbd exec`'s last filter: connects and every naming syscall to the brokers.
    exec_broker_filter: Arc<BpfProgram>,
    net_template: Option<RulesetCreated>,
    cap_last_cap: u32,
    keep_mask: u64,
    rlimits: RlimitTable,
    forced_failure: Option<Stage>,
    /// Set by [`PreparedSandbox::prepare_for_exec`].
    exec: Option<ExecSetup>,
}

/// How `verbd exec` keeps the protected entries of its write roots (docs/policy.md has the table
/// of what each guarantees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecIsolation {
    /// The default: no namespace, write roots granted whole (new entries anywhere), the create
    /// broker alone keeps protected entries at any depth. The program sees the host as it is:
    /// owners, groups and `ls -la` exactly as outside.
    Brokered,
    /// A user and mount namespace: write roots granted whole (new entries anywhere), existing
    /// protected entries read-only bind mounts, the directories leading to them pinned in place.
    MountNamespace,
    /// Landlock alone: write roots split around protected entries.
    LandlockOnly { reason: String },
}

/// `verbd exec` uses the Landlock-only split when this is set (to anything): for tests and
/// operators (`--landlock-only` does the same).
pub const LANDLOCK_ONLY_ENV: &str = "VERBD_EXEC_LANDLOCK_ONLY";

/// `verbd exec` adds a user and mount namespace when this is set (to anything)
/// (`--mount-namespace` does the same).
pub const MOUNT_NAMESPACE_ENV: &str = "VERBD_EXEC_MOUNT_NAMESPACE";

/// Which isolation the operator asked `verbd exec` for, and how (the flag or the variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestedIsolation {
    /// [`ExecIsolation::Brokered`].
    Default,
    /// [`ExecIsolation::MountNamespace`]; refused where the host or the profile cannot have it.
    MountNamespace { asked_by: String },
    /// [`ExecIsolation::LandlockOnly`].
    LandlockOnly { asked_by: String },
}

impl ExecIsolation {
    /// The isolation `verbd exec` gets for `spec` as `requested`. A mount namespace the host
    /// cannot give (the probe fails) or the profile cannot use (`run_as`, kept capabilities) is
    /// an error naming why, never a silent fallback. Forks a probe child for a requested mount
    /// namespace: call from a single-threaded process.
    pub fn choose(
        spec: &SandboxSpec,
        requested: RequestedIsolation,
    ) -> Result<ExecIsolation, SandboxError> {
        let asked_by = match requested {
            RequestedIsolation::Default => return Ok(ExecIsolation::Brokered),
            RequestedIsolation::LandlockOnly { asked_by } => {
                return Ok(ExecIsolation::LandlockOnly {
                    reason: format!("forced by {asked_by}"),
                });
            }
            RequestedIsolation::MountNamespace { asked_by } => asked_by,
        };
        let refuse = |reason: String| {
            Err(SandboxError::NamespaceRefused(format!(
                "{asked_by} asks for a user and mount namespace, but {reason}; run without it (the create broker keeps protected entries either way)"
            )))
        };
        if spec.run_as.is_some() {
            return refuse(
                "the profile sets run_as, a uid a user namespace mapping only the caller cannot switch to".into(),
            );
        }
        if !spec.keep_capabilities.is_empty() {
            return refuse(
                "the profile keeps capabilities, which must be the host's, not a user namespace's"
                    .into(),
            );
        }
        match namespace::probe() {
            namespace::Support::Available => Ok(ExecIsolation::MountNamespace),
            namespace::Support::Unavailable(reason) => refuse(reason),
        }
    }
}

/// What `verbd exec` sets up besides the sandbox's stages.
#[derive(Debug, Clone)]
struct ExecSetup {
    isolation: ExecIsolation,
    /// The binds made in the mount namespace (empty for the Landlock-only split).
    mounts: Vec<ProtectedMount>,
    /// Protected symlinks of the write roots, which no mount can pin.
    unpinned_symlinks: Vec<PathBuf>,
    /// The write roots' `.git` files and the git directories followed from them (module
    /// `git_dirs`), read once: the template's grants and the create broker both come from it.
    git_links: Vec<git_dirs::GitLink>,
}

impl ExecSetup {
    /// One line for `--print-status`.
    fn describe(&self) -> String {
        match &self.isolation {
            ExecIsolation::Brokered => "protected entries: kept by the create broker at any depth; no namespace (owners and groups as on the host), write roots whole (new entries anywhere)".into(),
            ExecIsolation::MountNamespace => {
                let read_only = self
                    .mounts
                    .iter()
                    .filter(|m| m.kind == MountKind::ReadOnly)
                    .count();
                let mut line = format!(
                    "protected entries: user + mount namespace: write roots whole (new entries anywhere); {read_only} existing protected entries are read-only bind mounts, {} directories pinned in place",
                    self.mounts.len() - read_only
                );
                if !self.unpinned_symlinks.is_empty() {
                    let names: Vec<String> = self
                        .unpinned_symlinks
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect();
                    line.push_str(&format!(
                        "; protected symlinks that can be removed and recreated: {}",
                        names.join(", ")
                    ));
                }
                line
            }
            ExecIsolation::LandlockOnly { reason } => format!(
                "protected entries: Landlock-only split ({reason}): existing protected entries read-only; no new entry directly in a write root or a split directory"
            ),
        }
    }
}

impl fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedSandbox")
            .field("spec", &self.spec)
            .field("cap_last_cap", &self.cap_last_cap)
            .field("forced_failure", &self.forced_failure)
            .finish_non_exhaustive()
    }
}

impl PreparedSandbox {
    /// Validates and compiles a profile for verbs: write roots granted whole. Every path must
    /// exist; Landlock must support the pinned ABI.
    pub fn prepare(spec: SandboxSpec) -> Result<PreparedSandbox, SandboxError> {
        Self::prepare_with(spec, WriteRoots::Whole)
    }

    /// [`prepare`](Self::prepare), with the write roots granted as `write_roots` says.
    pub fn prepare_with(
        spec: SandboxSpec,
        write_roots: WriteRoots,
    ) -> Result<PreparedSandbox, SandboxError> {
        Self::prepare_following(spec, write_roots, &[])
    }

    /// [`prepare_with`](Self::prepare_with), also granting the git directories `git_links`
    /// followed out of the write roots.
    fn prepare_following(
        spec: SandboxSpec,
        write_roots: WriteRoots,
        git_links: &[git_dirs::GitLink],
    ) -> Result<PreparedSandbox, SandboxError> {
        let denial_log = DenialLog::of_kernel();
        let template = fs_rules::build_template(&spec, write_roots, git_links, denial_log)?;
        let net_template = net_rules::build(&spec.network, denial_log)?;
        let canonical_write_roots: Vec<PathBuf> = spec
            .write
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .collect();
        for path in &spec.unix_sockets {
            if !path.is_absolute() || path.as_os_str().len() >= 108 {
                return Err(SandboxError::UnixSocketPath {
                    profile: spec.name.clone(),
                    path: path.clone(),
                });
            }
            // Where the socket's directory really is (the socket itself may not exist yet).
            let located = path
                .parent()
                .and_then(|dir| std::fs::canonicalize(dir).ok())
                .map_or_else(
                    || path.clone(),
                    |dir| dir.join(path.file_name().unwrap_or_default()),
                );
            if let Some(root) = canonical_write_roots
                .iter()
                .find(|root| located.starts_with(root))
            {
                return Err(SandboxError::SwappableSocket {
                    profile: spec.name.clone(),
                    socket: path.clone(),
                    root: root.clone(),
                });
            }
        }
        let daemon_filters = Arc::new(seccomp::compile(&spec.network, FilterUse::DaemonChild)?);
        let exec_filters = Arc::new(seccomp::compile(&spec.network, FilterUse::ExecWrapper)?);
        let cap_last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .map_err(|e| SandboxError::CapLastCap(e.to_string()))?
            .trim()
            .parse::<u32>()
            .map_err(|e| SandboxError::CapLastCap(e.to_string()))?;
        let mut keep_mask = 0u64;
        for cap in &spec.keep_capabilities {
            let index = cap.index();
            if index >= 64 {
                return Err(SandboxError::CapabilityOutOfRange(cap.to_string()));
            }
            keep_mask |= 1u64 << index;
        }
        let limits = spec.rlimits;
        let rlimits = [
            (libc::RLIMIT_CPU, limits.cpu_seconds),
            (libc::RLIMIT_AS, limits.address_space_bytes),
            (libc::RLIMIT_FSIZE, limits.file_size_bytes),
            (libc::RLIMIT_NOFILE, limits.open_files),
            (libc::RLIMIT_NPROC, limits.processes),
            (libc::RLIMIT_CORE, 0),
        ];
        let connect_policy_shared = Arc::new(unix_broker::ConnectPolicy {
            unix_sockets: spec.unix_sockets.clone(),
            network: spec.network.clone(),
        });
        Ok(PreparedSandbox {
            connect_policy_shared,
            spec,
            write_roots,
            denial_log,
            template,
            daemon_filters,
            exec_filters,
            connect_filter: Arc::new(seccomp::connect_program()),
            exec_broker_filter: Arc::new(seccomp::exec_program()),
            net_template,
            cap_last_cap,
            keep_mask,
            rlimits,
            forced_failure: None,
            exec: None,
        })
    }

    /// Prepares a profile for `verbd exec` under `isolation`: write roots whole and the mounts
    /// that keep protected entries in a mount namespace, or split for the Landlock-only mode.
    pub fn prepare_for_exec(
        spec: SandboxSpec,
        isolation: ExecIsolation,
    ) -> Result<PreparedSandbox, SandboxError> {
        let (write_roots, (mounts, unpinned_symlinks)) = match isolation {
            ExecIsolation::Brokered => (WriteRoots::Whole, (Vec::new(), Vec::new())),
            ExecIsolation::MountNamespace => {
                (WriteRoots::Whole, fs_rules::protected_mounts(&spec)?)
            }
            ExecIsolation::LandlockOnly { .. } => {
                (WriteRoots::ProtectedReadOnly, (Vec::new(), Vec::new()))
            }
        };
        let git_links = git_dirs::follow(&spec);
        let mut prepared = Self::prepare_following(spec, write_roots, &git_links)?;
        prepared.exec = Some(ExecSetup {
            isolation,
            mounts,
            unpinned_symlinks,
            git_links,
        });
        Ok(prepared)
    }

    /// The isolation and the mounts `verbd exec` uses (after
    /// [`prepare_for_exec`](Self::prepare_for_exec)).
    pub fn exec_isolation(&self) -> Option<(&ExecIsolation, &[ProtectedMount])> {
        self.exec
            .as_ref()
            .map(|setup| (&setup.isolation, setup.mounts.as_slice()))
    }

    /// The profile this was built from.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// Whether this profile's Landlock denials are logged.
    pub fn denial_log(&self) -> DenialLog {
        self.denial_log
    }

    /// Test hook: make `stage` fail in every child of this profile, so spawns fail before exec.
    /// It cannot weaken the sandbox: a failing stage ends the child.
    /// Compiled only with the `test-hooks` feature (the integration tests' build).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn fail_stage_for_test(mut self, stage: Stage) -> Self {
        self.forced_failure = Some(stage);
        self
    }

    /// Where `verbd exec`'s create broker refuses protected names: the canonical write roots.
    fn create_policy(&self) -> create_broker::CreatePolicy {
        let mounts = self.exec.as_ref().map_or(&[][..], |setup| &setup.mounts);
        let git_links = self.exec.as_ref().map_or(&[][..], |setup| &setup.git_links);
        create_broker::CreatePolicy::of(
            &self.spec,
            mounts.iter().map(|m| m.path.as_path()),
            git_links,
        )
    }

    /// What `verbd exec` followed out of its write roots' `.git` files and granted, one line
    /// each, as `--print-status` and `verbd sandbox why --exec` show it.
    pub fn describe_exec_git_links(&self) -> Vec<String> {
        self.exec.as_ref().map_or_else(Vec::new, |setup| {
            setup
                .git_links
                .iter()
                .map(git_dirs::GitLink::describe)
                .collect()
        })
    }

    /// What the broker lets this profile's children connect to.
    /// What `verbd exec`'s connect broker allows, as `--print-status` and `verbd sandbox why
    /// --exec` show it: the profile's Unix sockets and verbd's own agent socket, then the
    /// network.
    pub fn describe_exec_connects(&self) -> String {
        let mut policy = self.connect_policy();
        policy.unix_sockets.push(exec_verbd_socket());
        format!(
            "{}\nnetwork: {}",
            policy.describe(),
            describe_network(&self.spec.network)
        )
    }

    /// The directories above the roots `verbd exec` lets the program list, as `--print-status`
    /// and `verbd sandbox why --exec` show them.
    pub fn describe_exec_listing(&self) -> String {
        AncestorListing::of(&self.spec).describe()
    }

    pub fn connect_policy(&self) -> unix_broker::ConnectPolicy {
        (*self.connect_policy_shared).clone()
    }

    fn plan(&self, usage: FilterUse, broker_channel: RawFd) -> Result<ChildPlan, SandboxError> {
        let ruleset = self
            .template
            .try_clone()
            .map_err(SandboxError::CloneRuleset)?;
        let daemon_child = usage == FilterUse::DaemonChild;
        let filters = if daemon_child {
            Arc::clone(&self.daemon_filters)
        } else {
            Arc::clone(&self.exec_filters)
        };
        let landlock_flags = match self.denial_log {
            DenialLog::Audit => LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON,
            DenialLog::Unavailable { .. } => 0,
        };
        Ok(ChildPlan {
            setsid: daemon_child,
            rlimits: self.rlimits,
            umask: match (usage, self.spec.umask) {
                (_, Some(mask)) => Some(mask as libc::mode_t),
                (FilterUse::DaemonChild, None) => Some(DEFAULT_UMASK as libc::mode_t),
                (FilterUse::ExecWrapper, None) => None,
            },
            run_as: self.spec.run_as.map(|r| (r.uid, r.gid)),
            drop_bounding: Self::drops_bounding_set(),
            cap_last_cap: self.cap_last_cap,
            keep_mask: self.keep_mask,
            death_signal_parent: daemon_child.then(|| std::process::id() as libc::pid_t),
            ruleset: Some(ruleset_fd(ruleset)?),
            net_ruleset: match &self.net_template {
                Some(template) => Some(ruleset_fd(
                    template.try_clone().map_err(SandboxError::CloneRuleset)?,
                )?),
                None => None,
            },
            landlock_flags,
            filters,
            connect_filter: if daemon_child {
                Arc::clone(&self.connect_filter)
            } else {
                Arc::clone(&self.exec_broker_filter)
            },
            broker_channel,
            seccomp_flags: SECCOMP_FLAGS,
            forced_failure: self.forced_failure,
            keep_fds: Vec::new(),
            observe: None,
        })
    }

    /// Sets the sandbox on a tokio command (the command may be spawned more than once; each
    /// child restricts itself with the same cloned ruleset). The child starts its own
    /// session, so the executor can kill its whole process group. The connect hub (module
    /// `connect_hub`) watches every child's listener and starts a broker thread (module
    /// [`unix_broker`]) for a child's first `connect`, serving it until the child and its
    /// descendants are gone; the channel is closed when the command is dropped.
    pub fn install(&self, cmd: &mut tokio::process::Command) -> Result<(), SandboxError> {
        self.install_std(cmd.as_std_mut())
    }

    /// [`install`](Self::install), and the descriptors in `keep_fds` (close-on-exec in the
    /// daemon: pinned path parameters, secret copies) stay open across this child's `execve`.
    pub fn install_keeping(
        &self,
        cmd: &mut tokio::process::Command,
        keep_fds: Vec<RawFd>,
    ) -> Result<(), SandboxError> {
        self.install_plan(cmd.as_std_mut(), keep_fds)
    }

    /// [`install`](Self::install) for a std command (tests, benches).
    pub fn install_std(&self, cmd: &mut std::process::Command) -> Result<(), SandboxError> {
        self.install_plan(cmd, Vec::new())
    }

    /// [`install_std`](Self::install_std) for the self-test's canary, whose refused connects are
    /// the point of the check, not an event: the broker logs them at debug level only (a
    /// warning at every start reads like a failure).
    /// Whether a child of this process has its capability bounding set emptied: only when this
    /// process holds `CAP_SETPCAP` (root, or a daemon keeping it for `run_as`). Otherwise the
    /// set stays as inherited and `no_new_privs` with empty permitted, effective, inheritable and
    /// ambient sets is what keeps it from granting anything at `execve`.
    pub fn drops_bounding_set() -> bool {
        has_effective_cap(caps::Capability::CAP_SETPCAP)
    }

    pub fn install_canary(&self, cmd: &mut std::process::Command) -> Result<(), SandboxError> {
        self.install_with(cmd, Vec::new(), None, notify::Reporter::Expected)
    }

    /// Observes, in a real child confined by exactly this profile, whether each path can be
    /// executed (`true`: an `execveat` with `AT_EXECVE_CHECK`, which checks like an `execve`
    /// without running anything) or read (`false`: an `open`). One errno per check, 0 when
    /// allowed. The child never execs: it reports and exits once every stage is applied.
    pub fn observe(&self, checks: &[(PathBuf, bool)]) -> Result<Vec<i32>, SandboxError> {
        let observation_error = |e: io::Error| SandboxError::Observe(e.to_string());
        let checks = checks
            .iter()
            .map(|(path, execute)| {
                CString::new(path.as_os_str().as_bytes())
                    .map(|c| (c, *execute))
                    .map_err(|_| SandboxError::NulInArgument)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let expected = checks.len();
        let (read_end, write_end) = std::io::pipe().map_err(observation_error)?;
        let report_fd = write_end.as_raw_fd();
        // Never executed: the child exits in its last stage.
        let mut cmd = std::process::Command::new("/");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        self.install_observing(
            &mut cmd,
            child::Observation { checks, report_fd },
            write_end,
        )?;
        let mut child = cmd.spawn().map_err(|e| match spawn_failure(&e) {
            Some(failure) => SandboxError::Stage(failure),
            None => observation_error(e),
        })?;
        drop(cmd);
        let mut bytes = Vec::with_capacity(expected * 4);
        let mut read_end = read_end;
        read_end
            .read_to_end(&mut bytes)
            .map_err(observation_error)?;
        let status = child.wait().map_err(observation_error)?;
        if !status.success() || bytes.len() != expected * 4 {
            return Err(SandboxError::Observe(format!(
                "the probe child reported {} of {expected} results ({status})",
                bytes.len() / 4
            )));
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    fn install_observing(
        &self,
        cmd: &mut std::process::Command,
        observation: child::Observation,
        report_end: std::io::PipeWriter,
    ) -> Result<(), SandboxError> {
        self.install_with(
            cmd,
            Vec::new(),
            Some((observation, report_end)),
            notify::Reporter::Log,
        )
    }

    fn install_plan(
        &self,
        cmd: &mut std::process::Command,
        keep_fds: Vec<RawFd>,
    ) -> Result<(), SandboxError> {
        self.install_with(cmd, keep_fds, None, notify::Reporter::Log)
    }

    fn install_with(
        &self,
        cmd: &mut std::process::Command,
        keep_fds: Vec<RawFd>,
        observe: Option<(child::Observation, std::io::PipeWriter)>,
        reporter: notify::Reporter,
    ) -> Result<(), SandboxError> {
        use std::os::unix::process::CommandExt;
        let (broker_end, child_end) = unix_broker::channel_pair().map_err(SandboxError::Broker)?;
        let mut plan = self.plan(FilterUse::DaemonChild, child_end.as_raw_fd())?;
        let report_end = observe.map(|(observation, report_end)| {
            plan.observe = Some(observation);
            report_end
        });
        let identity = self.spec.run_as.map(|r| notify::ThreadIdentity {
            uid: r.uid,
            gid: r.gid,
        });
        connect_hub::watch(
            broker_end,
            connect_hub::Brokering {
                policy: Arc::clone(&self.connect_policy_shared),
                identity,
                reporter,
            },
        )
        .map_err(SandboxError::Broker)?;
        plan.keep_fds = keep_fds;
        // SAFETY: the closure only runs `ChildPlan::apply`, which is async-signal-safe (raw
        // syscalls, no allocation, no locks, no panics) and reports failure as a raw errno. It
        // owns `child_end`, so the channel stays open while the command can still be spawned.
        unsafe {
            cmd.pre_exec(move || {
                let _channel_owner = &child_end;
                let _report_owner = &report_end;
                plan.apply()
                    .map_err(|failure| io::Error::from_raw_os_error(failure.code()))
            });
        }
        Ok(())
    }
}

/// `landlock_restrict_self`'s flag for logging denials after `execve` (Landlock ABI 7).
const LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON: u32 = 2;

/// The descriptor of a created ruleset. A ruleset built with `HardRequirement` always has one;
/// `None` would mean Landlock is unsupported, which the build already refused.
fn ruleset_fd(ruleset: RulesetCreated) -> Result<std::os::fd::OwnedFd, SandboxError> {
    Option::<std::os::fd::OwnedFd>::from(ruleset)
        .ok_or_else(|| SandboxError::Landlock("the ruleset has no descriptor".into()))
}

fn has_effective_cap(cap: caps::Capability) -> bool {
    caps::has_cap(None, caps::CapSet::Effective, cap).unwrap_or(false)
}

/// The stage a failed `spawn()` died in, if the failure came from the sandbox.
pub fn stage_of_spawn_error(err: &io::Error) -> Option<Stage> {
    spawn_failure(err).map(|f| f.stage)
}

/// The stage and the errno of the failing syscall, if the spawn failure came from the sandbox.
pub fn spawn_failure(err: &io::Error) -> Option<StageFailure> {
    StageFailure::from_code(err.raw_os_error()?)
}

/// What confinement a process actually has, read from `/proc/self/status` after applying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinementStatus {
    /// The kernel's Landlock ABI version (0: Landlock unavailable).
    pub landlock_abi: i32,
    /// What was applied, e.g. `fully enforced at pinned ABI 6, scoped signals and abstract sockets`.
    pub landlock_status: String,
    /// 0 disabled, 1 strict, 2 filter.
    pub seccomp_mode: u32,
    pub seccomp_filters: u32,
    pub no_new_privs: bool,
    pub cap_inh: u64,
    pub cap_prm: u64,
    pub cap_eff: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    /// Real uid and gid.
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl ConfinementStatus {
    /// Parses the text of a `/proc/PID/status` file.
    pub fn parse(status: &str, landlock_status: &str) -> ConfinementStatus {
        let field = |name: &str| -> Option<&str> {
            status.lines().find_map(|line| {
                line.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .map(str::trim)
            })
        };
        let hex = |name: &str| {
            field(name)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .unwrap_or(u64::MAX)
        };
        let number = |name: &str| field(name).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        let first = |name: &str| {
            field(name)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(u32::MAX)
        };
        ConfinementStatus {
            landlock_abi: landlock_kernel_abi(),
            landlock_status: landlock_status.to_string(),
            seccomp_mode: number("Seccomp"),
            seccomp_filters: number("Seccomp_filters"),
            no_new_privs: field("NoNewPrivs") == Some("1"),
            cap_inh: hex("CapInh"),
            cap_prm: hex("CapPrm"),
            cap_eff: hex("CapEff"),
            cap_bnd: hex("CapBnd"),
            cap_amb: hex("CapAmb"),
            uid: first("Uid"),
            gid: first("Gid"),
            groups: field("Groups")
                .map(|v| {
                    v.split_whitespace()
                        .filter_map(|g| g.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

impl fmt::Display for ConfinementStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "landlock: {} (kernel ABI {})",
            self.landlock_status, self.landlock_abi
        )?;
        let mode = match self.seccomp_mode {
            0 => "disabled",
            1 => "strict",
            _ => "filter",
        };
        writeln!(
            f,
            "seccomp: mode {} ({mode}), {} filters",
            self.seccomp_mode, self.seccomp_filters
        )?;
        writeln!(f, "no_new_privs: {}", u8::from(self.no_new_privs))?;
        writeln!(
            f,
            "capabilities: eff={:016x} prm={:016x} inh={:016x} bnd={:016x} amb={:016x}",
            self.cap_eff, self.cap_prm, self.cap_inh, self.cap_bnd, self.cap_amb
        )?;
        write!(
            f,
            "uid={} gid={} groups={:?}",
            self.uid, self.gid, self.groups
        )
    }
}

/// The running kernel's Landlock ABI version, 0 if Landlock is unavailable.
fn landlock_kernel_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 the call only returns the ABI version.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// Applies the profile to the current, single-threaded process and execs `program` (absolute,
/// relative with a `/`, or looked up in `PATH`). Without `setsid`, so an interactive program keeps
/// its terminal, and without the parent-death signal. A profile prepared with
/// [`PreparedSandbox::prepare_for_exec`] for [`ExecIsolation::MountNamespace`] enters its user
/// and mount namespace first (module `namespace`). Works unprivileged: without CAP_SETPCAP the
/// bounding set is left alone (`no_new_privs` makes it moot); `run_as` needs CAP_SETUID and
/// CAP_SETGID and is refused otherwise. Returns only on failure.
pub fn exec_confined(
    prepared: &PreparedSandbox,
    program: &Path,
    args: &[OsString],
    print_status: bool,
) -> Result<std::convert::Infallible, SandboxError> {
    let mut status_file = std::fs::File::open("/proc/self/status").map_err(SandboxError::Status)?;
    let mut before = String::new();
    status_file
        .read_to_string(&mut before)
        .map_err(SandboxError::Status)?;
    let threads = thread_count(&before);
    if threads != 1 {
        return Err(SandboxError::NotSingleThreaded(threads));
    }
    if prepared.spec.run_as.is_some()
        && !(has_effective_cap(caps::Capability::CAP_SETUID)
            && has_effective_cap(caps::Capability::CAP_SETGID))
    {
        return Err(SandboxError::RunAsNeedsPrivilege(
            prepared.spec.name.clone(),
        ));
    }
    let resolved = resolve_program(program)?;
    let c_program =
        CString::new(resolved.as_os_str().as_bytes()).map_err(|_| SandboxError::NulInArgument)?;
    let mut c_args = Vec::with_capacity(args.len() + 1);
    c_args.push(
        CString::new(program.as_os_str().as_bytes()).map_err(|_| SandboxError::NulInArgument)?,
    );
    for arg in args {
        c_args.push(CString::new(arg.as_bytes()).map_err(|_| SandboxError::NulInArgument)?);
    }
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());

    let verbd_socket = exec_verbd_socket();
    let (env, dropped_env) =
        exec_env::filter(std::env::vars_os(), &prepared.spec.keep_env, &verbd_socket);
    let c_env = env
        .iter()
        .map(|(name, value)| {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            CString::new(entry).map_err(|_| SandboxError::NulInArgument)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut envp: Vec<*const libc::c_char> = c_env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut connect_policy = prepared.connect_policy();
    connect_policy.unix_sockets.push(verbd_socket);

    let create_policy = prepared.create_policy();
    // Read before any confinement: the gitlink and `commondir` of a linked worktree.
    let worktree = if print_status {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| create_policy.describe_worktree(&cwd))
    } else {
        None
    };
    let listing = AncestorListing::of(&prepared.spec);
    let listing_status = listing.describe();
    let creates = unix_broker::CreateSetup {
        listing,
        policy: create_policy.clone(),
        ruleset: prepared
            .template
            .try_clone()
            .map_err(SandboxError::CloneRuleset)?,
    };

    // The program runs in a forked child; this process stays outside the sandbox as its connect
    // and create broker and exits with the child's status.
    let (broker_end, child_end) = unix_broker::channel_pair().map_err(SandboxError::Broker)?;
    let mut plan = prepared.plan(FilterUse::ExecWrapper, child_end.as_raw_fd())?;
    plan.death_signal_parent = Some(std::process::id() as libc::pid_t);
    // SAFETY: the process is single-threaded (checked above), so the child may allocate.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SandboxError::Broker(io::Error::last_os_error()));
    }
    if pid > 0 {
        drop(child_end);
        drop(plan);
        let identity = prepared.spec.run_as.map(|r| notify::ThreadIdentity {
            uid: r.uid,
            gid: r.gid,
        });
        unix_broker::run_launcher(broker_end, pid, connect_policy, identity, creates);
    }
    drop(broker_end);
    drop(creates);
    // This process's own status (the file opened above names the parent, now the broker).
    let status_file = std::fs::File::open("/proc/self/status").map_err(SandboxError::Status)?;
    if let Some(setup) = &prepared.exec
        && setup.isolation == ExecIsolation::MountNamespace
    {
        namespace::enter(&setup.mounts).map_err(SandboxError::Namespace)?;
        // The child holds CAP_SETPCAP in its new user namespace: empty the bounding set too.
        plan.drop_bounding = true;
    }
    plan.apply().map_err(|failure| {
        if failure.stage == Stage::Seccomp && failure.errno == libc::EBUSY {
            // The kernel allows one seccomp listener per process tree.
            SandboxError::Broker(io::Error::from_raw_os_error(libc::EBUSY))
        } else {
            SandboxError::Stage(failure)
        }
    })?;

    if print_status {
        // The file was opened before Landlock applied; /proc regenerates it on each read.
        let mut after = String::new();
        let mut reopened = status_file;
        use std::io::Seek;
        reopened
            .seek(io::SeekFrom::Start(0))
            .map_err(SandboxError::Status)?;
        reopened
            .read_to_string(&mut after)
            .map_err(SandboxError::Status)?;
        let landlock_status = format!(
            "fully enforced at pinned ABI {}, signals and abstract sockets scoped; {}",
            fs_rules::PINNED_ABI as i32,
            prepared.denial_log
        );
        let protected = match (&prepared.exec, prepared.write_roots) {
            (Some(setup), _) => setup.describe(),
            (None, WriteRoots::Whole) => {
                "protected entries: not kept (write roots whole, no mount namespace)".into()
            }
            (None, WriteRoots::ProtectedReadOnly) => {
                "protected entries: Landlock-only split: existing protected entries read-only"
                    .into()
            }
        };
        let mut worktree = worktree.map(|line| line + "\n").unwrap_or_default();
        for line in prepared.describe_exec_git_links() {
            worktree.push_str(&line);
            worktree.push('\n');
        }
        let report = format!(
            "verbd exec: profile `{}` applied\n{}\n{protected}\n{}\n{listing_status}\n{worktree}{}\nnetwork: {}\nenvironment: dropped [{}]\n",
            prepared.spec.name,
            ConfinementStatus::parse(&after, &landlock_status),
            create_policy.describe(),
            connect_policy.describe(),
            describe_network(&prepared.spec.network),
            dropped_env.join(", ")
        );
        // Straight to fd 2 (not `eprintln!`, which a test harness may capture).
        io::stderr()
            .write_all(report.as_bytes())
            .map_err(SandboxError::Status)?;
    }

    // SAFETY: `c_program` and every `argv`/`envp` element are NUL-terminated strings kept alive
    // by `c_program`/`c_args`/`c_env` for the call; both arrays end with a null pointer.
    unsafe { libc::execve(c_program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Err(SandboxError::Exec {
        program: resolved,
        source: io::Error::last_os_error(),
    })
}

/// The socket of verbd a program under `verbd exec` may reach: `VERBD_SOCKET`, or the agent
/// side's default.
fn exec_verbd_socket() -> PathBuf {
    std::env::var_os("VERBD_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::paths::client_socket(crate::paths::ClientSide::Agent))
}

/// The network mode as `--print-status` shows it.
fn describe_network(network: &Network) -> String {
    match network {
        Network::None => "none (Unix sockets only)".into(),
        Network::Full => "full".into(),
        Network::ConnectTcp(ports) => format!("TCP connect to ports {ports:?} only (Landlock)"),
    }
}

/// The `Threads:` count of a status file (0 if missing).
fn thread_count(status: &str) -> u32 {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A program name with a `/` is used as given; otherwise the first executable regular file of
/// that name in `PATH` (as `execvp` would, but resolved before confinement).
fn resolve_program(program: &Path) -> Result<PathBuf, SandboxError> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .ok_or_else(|| SandboxError::ProgramNotFound(program.to_path_buf()))
}
