//! Commands that work without a daemon: `exec` (confine a program), `selftest`, the hidden
//! sandbox canary, `sandbox why`, and the Claude Code hook (with their argument types).
#![forbid(unsafe_code)]

use super::{EXIT_CANNOT_EXECUTE, EXIT_CHECK_FAILED, EXIT_NOT_FOUND};
use anyhow::{Context, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use verbd::loader::{Loader, PolicySource, Scope};

/// `verbd exec`: replace this process with `program`, confined by a sandbox profile.
pub fn exec(
    policy: Option<PathBuf>,
    profile: &str,
    print_status: bool,
    landlock_only: bool,
    mount_namespace: bool,
    program: &Path,
    args: &[OsString],
) -> anyhow::Result<ExitCode> {
    let policy = Loader::new(PolicySource::from_flag(policy)).compile()?;
    let Some(spec) = policy.sandboxes.get(profile) else {
        bail!(
            "profile `{profile}` is not defined in {} (defined: {})",
            policy.origin,
            policy
                .sandboxes
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let isolation = verbd::sandbox::ExecIsolation::choose(
        spec,
        requested_isolation(landlock_only, mount_namespace)?,
    )?;
    let prepared = verbd::sandbox::PreparedSandbox::prepare_for_exec(spec.clone(), isolation)?;
    let err = match verbd::sandbox::exec_confined(&prepared, program, args, print_status) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    verbd::eprintln_lossy!("verbd exec: {err}");
    Ok(ExitCode::from(
        if matches!(err, verbd::sandbox::SandboxError::ProgramNotFound(_)) {
            EXIT_NOT_FOUND
        } else {
            EXIT_CANNOT_EXECUTE
        },
    ))
}

/// The isolation the operator asked `verbd exec` for, by flag or variable; both at once is an
/// error.
fn requested_isolation(
    landlock_only: bool,
    mount_namespace: bool,
) -> anyhow::Result<verbd::sandbox::RequestedIsolation> {
    use verbd::sandbox::RequestedIsolation;
    let landlock_only = if landlock_only {
        Some("--landlock-only".to_string())
    } else {
        std::env::var_os(verbd::sandbox::LANDLOCK_ONLY_ENV)
            .map(|_| verbd::sandbox::LANDLOCK_ONLY_ENV.to_string())
    };
    let mount_namespace = if mount_namespace {
        Some("--mount-namespace".to_string())
    } else {
        std::env::var_os(verbd::sandbox::MOUNT_NAMESPACE_ENV)
            .map(|_| verbd::sandbox::MOUNT_NAMESPACE_ENV.to_string())
    };
    Ok(match (landlock_only, mount_namespace) {
        (Some(a), Some(b)) => bail!("{a} and {b} ask for two different isolations; choose one"),
        (Some(asked_by), None) => RequestedIsolation::LandlockOnly { asked_by },
        (None, Some(asked_by)) => RequestedIsolation::MountNamespace { asked_by },
        (None, None) => RequestedIsolation::Default,
    })
}

/// `verbd sandbox why`: what `profile`'s Landlock rules decide for `access` to `path`. Exit 0
/// allowed, 1 denied.
pub fn sandbox_why(
    policy: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    exec: bool,
    profile: &str,
    path: &Path,
    access: verbd::sandbox::FsAccess,
) -> anyhow::Result<ExitCode> {
    let loader = Loader::new(PolicySource::from_flag(policy));
    let policy = loader.compile()?;
    let Some(spec) = policy.sandboxes.get(profile) else {
        bail!(
            "profile `{profile}` is not defined in {} (defined: {})",
            policy.origin,
            policy
                .sandboxes
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let explanation = if exec {
        // As `verbd exec` would run here and now: the same choice of isolation.
        let isolation =
            verbd::sandbox::ExecIsolation::choose(spec, requested_isolation(false, false)?)?;
        let how = match &isolation {
            verbd::sandbox::ExecIsolation::Brokered => {
                "as `verbd exec` applies it on this host: no namespace, write roots whole, protected entries kept and new protected names refused by the create broker".to_string()
            }
            verbd::sandbox::ExecIsolation::MountNamespace => {
                "as `verbd exec` applies it on this host: user + mount namespace, write roots whole, protected entries read-only binds, new protected names refused by the create broker".to_string()
            }
            verbd::sandbox::ExecIsolation::LandlockOnly { reason } => format!(
                "as `verbd exec` applies it on this host: Landlock-only split ({reason}), new protected names refused by the create broker"
            ),
        };
        let mode = match isolation {
            verbd::sandbox::ExecIsolation::Brokered
            | verbd::sandbox::ExecIsolation::MountNamespace => verbd::sandbox::WriteRoots::Whole,
            verbd::sandbox::ExecIsolation::LandlockOnly { .. } => {
                verbd::sandbox::WriteRoots::ProtectedReadOnly
            }
        };
        let prepared = verbd::sandbox::PreparedSandbox::prepare_for_exec(spec.clone(), isolation)?;
        let mounts = prepared
            .exec_isolation()
            .map_or(&[][..], |(_, mounts)| mounts);
        println!("profile `{profile}` of {}, {how}", policy.origin);
        println!("connect: {}", prepared.describe_exec_connects());
        println!("{}", prepared.describe_exec_listing());
        verbd::sandbox::explain_exec(spec, mode, mounts, path, access)?
    } else {
        let state_dir = state_dir
            .or_else(|| policy.daemon.state_dir.clone())
            .unwrap_or_else(verbd::paths::default_state_dir);
        let private = loader.with_state_dir(state_dir).private_paths(&policy);
        let spec = verbd::sandbox::SandboxSpec {
            private,
            ..spec.clone()
        };
        println!(
            "profile `{profile}` of {}, as the daemon runs its verbs: write roots whole, its private paths out of reach",
            policy.origin
        );
        verbd::sandbox::explain(&spec, verbd::sandbox::WriteRoots::Whole, &[], path, access)?
    };
    print!("{explanation}");
    Ok(if explanation.allowed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    })
}

/// `verbd selftest`: the loader's compile and self-test steps, offline. Exit 1 on any FAIL.
pub fn selftest(
    policy: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut loader = Loader::new(PolicySource::from_flag(policy));
    if let Some(dir) = &state_dir {
        loader = loader.with_state_dir(dir.clone());
    }
    let policy = match loader.compile() {
        Ok(p) => p,
        Err(e) => {
            verbd::eprintln_lossy!("{e}");
            return Ok(ExitCode::from(EXIT_CHECK_FAILED));
        }
    };
    // Loaded only for their warnings; whether each source is usable is a check itself.
    let secrets = verbd::secrets::SecretStore::load(&policy.secrets).ok();
    let report = loader.self_test(
        &policy,
        secrets.as_ref(),
        verbd::privileges::daemon_uid_for(&policy),
        Scope::Offline {
            state_dir: state_dir.as_deref(),
        },
    );
    if json {
        verbd::println_lossy!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        verbd::print_lossy!("{}", report.render());
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    })
}

/// The sandbox canary the self-test runs inside each profile.
pub fn canary(plan: &verbd::selftest::CanaryPlan) -> ExitCode {
    let code = verbd::selftest::canary_main(plan);
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// The Claude Code PreToolUse hook, or its settings snippet.
pub fn claude_code_hook(
    socket: &Path,
    socket_flag: Option<&Path>,
    print_settings: bool,
) -> anyhow::Result<ExitCode> {
    use verbd::adapters::claude_hook;
    if print_settings {
        let exe = std::env::current_exe().context("locating the verbd binary")?;
        verbd::println_lossy!(
            "{}",
            claude_hook::settings_snippet(&exe, socket_flag, claude_hook::DEFAULT_DEADLINE)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let code = claude_hook::run(
        socket,
        claude_hook::DEFAULT_DEADLINE,
        claude_hook::CLAUDE_CODE,
    );
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// `verbd hook gemini-cli`: the Claude Code hook's decisions in Gemini CLI's BeforeTool terms.
pub fn gemini_cli_hook(
    socket: &Path,
    socket_flag: Option<&Path>,
    print_settings: bool,
) -> anyhow::Result<ExitCode> {
    use verbd::adapters::{claude_hook, gemini_hook};
    if print_settings {
        let exe = std::env::current_exe().context("locating the verbd binary")?;
        verbd::println_lossy!(
            "{}",
            gemini_hook::settings_snippet(&exe, socket_flag, claude_hook::DEFAULT_DEADLINE)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let code = claude_hook::run(socket, claude_hook::DEFAULT_DEADLINE, gemini_hook::FRONTEND);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// `verbd hook cursor`: the Bash decisions in Cursor's beforeShellExecution terms.
pub fn cursor_hook(
    socket: &Path,
    socket_flag: Option<&Path>,
    print_settings: bool,
) -> anyhow::Result<ExitCode> {
    use verbd::adapters::{claude_hook, cursor_hook};
    if print_settings {
        let exe = std::env::current_exe().context("locating the verbd binary")?;
        verbd::println_lossy!(
            "{}",
            cursor_hook::settings_snippet(&exe, socket_flag, claude_hook::DEFAULT_DEADLINE)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let code = claude_hook::run(socket, claude_hook::DEFAULT_DEADLINE, cursor_hook::FRONTEND);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum HookCommand {
    /// Claude Code PreToolUse hook: reads the hook JSON on stdin; exit 0 allows, exit 2 denies
    /// (and every failure denies)
    ClaudeCode {
        #[command(flatten)]
        socket: crate::cli::socket_arg::SocketArg,
        /// Print the settings.json snippet instead
        #[arg(long)]
        print_settings: bool,
    },
    /// Gemini CLI BeforeTool hook (run_shell_command, write_file, replace): the same decisions
    /// in Gemini's terms; exit 0 allows or rewrites, exit 2 denies (and every failure denies)
    GeminiCli {
        #[command(flatten)]
        socket: crate::cli::socket_arg::SocketArg,
        /// Print the settings.json snippet instead
        #[arg(long)]
        print_settings: bool,
    },
    /// Cursor beforeShellExecution hook: the agent's own work is allowed; a command that
    /// stands for a verb is denied with the `verbd call` to run, a privileged one with the
    /// closest verb (exit 2, and every failure denies)
    Cursor {
        #[command(flatten)]
        socket: crate::cli::socket_arg::SocketArg,
        /// Print the hooks.json snippet instead
        #[arg(long)]
        print_settings: bool,
    },
}

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum SandboxCommand {
    /// Does PROFILE allow ACCESS (read, write or exec) to PATH, and which Landlock rule decides?
    /// As the daemon builds the profile for its verbs (write roots whole, the daemon's private
    /// paths out of reach), or with --exec as `verbd exec` would on this host (mount namespace or
    /// Landlock-only split). Exit 0 allowed, 1 denied.
    Why {
        /// Policy holding the profile (default: the embedded demo policy)
        #[arg(long)]
        policy: Option<PathBuf>,
        /// The daemon's state directory (default: as `verbd serve` chooses it)
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Explain the profile as `verbd exec` applies it
        #[arg(long)]
        exec: bool,
        /// The sandbox profile (a `[sandbox.NAME]` of the policy, or `default`)
        profile: String,
        /// The path to ask about
        path: PathBuf,
        /// The access to ask about
        #[arg(value_enum, default_value = "read")]
        access: WhyAccess,
    },
}

/// The access `verbd sandbox why` asks about.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WhyAccess {
    /// Open for reading (a directory: list it)
    Read,
    /// Create, write, rename or remove
    Write,
    /// Execute
    Exec,
}

/// `verbd sandbox …`.
pub fn sandbox(command: SandboxCommand) -> anyhow::Result<ExitCode> {
    let SandboxCommand::Why {
        policy,
        state_dir,
        exec,
        profile,
        path,
        access,
    } = command;
    sandbox_why(
        policy,
        state_dir,
        exec,
        &profile,
        &path,
        match access {
            WhyAccess::Read => verbd::sandbox::FsAccess::Read,
            WhyAccess::Write => verbd::sandbox::FsAccess::Write,
            WhyAccess::Exec => verbd::sandbox::FsAccess::Exec,
        },
    )
}

/// `verbd hook …`.
pub fn hook(command: HookCommand) -> anyhow::Result<ExitCode> {
    match command {
        HookCommand::ClaudeCode {
            socket,
            print_settings,
        } => claude_code_hook(
            &socket.path(crate::ClientSide::Agent),
            socket.socket.as_deref(),
            print_settings,
        ),
        HookCommand::GeminiCli {
            socket,
            print_settings,
        } => gemini_cli_hook(
            &socket.path(crate::ClientSide::Agent),
            socket.socket.as_deref(),
            print_settings,
        ),
        HookCommand::Cursor {
            socket,
            print_settings,
        } => cursor_hook(
            &socket.path(crate::ClientSide::Agent),
            socket.socket.as_deref(),
            print_settings,
        ),
    }
}
