//! The `verbd` command line: the daemon (`serve`) and its clients.
//!
//! Exit codes of client commands (stable, documented in docs/protocol.md):
//! the child's own exit code for a verb that ran (128+N when killed by signal N, 124 on timeout);
//! 65 invalid arguments; 69 daemon unreachable; 70 daemon error; 73 confirmation required;
//! 75 busy; 77 denied; 1 for a failed check (`policy check`, `audit verify`).
#![forbid(unsafe_code)]

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use verbd::approvals::escape_for_terminal;
use verbd::policy::{self, Policy, Verdict};
use verbd::protocol::{Request, Response};
use verbd::server::{self, Daemon, Runtime, ServeSettings, audit::AuditEvent};

const EXIT_INVALID: u8 = 65;
const EXIT_UNAVAILABLE: u8 = 69;
const EXIT_ERROR: u8 = 70;
const EXIT_CONFIRM: u8 = 73;
const EXIT_BUSY: u8 = 75;
const EXIT_DENIED: u8 = 77;

#[derive(Parser)]
#[command(
    name = "verbd",
    version,
    about = "Privilege-separation broker for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct SocketArg {
    /// Daemon socket (default: $VERBD_SOCKET, else the path `verbd serve` uses by default)
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .or_else(|| std::env::var_os("VERBD_SOCKET").map(PathBuf::from))
            .unwrap_or_else(server::default_socket_path)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (embedded demo policy when no --policy is given)
    Serve {
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long)]
        socket: Option<PathBuf>,
        #[arg(long)]
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
        verb: String,
        /// Arguments as key=value
        args: Vec<String>,
    },
    /// List the verbs you may call
    List {
        #[command(flatten)]
        socket: SocketArg,
        #[arg(long)]
        json: bool,
    },
    /// Proposals waiting for a human decision (approvers)
    Pending {
        #[command(flatten)]
        socket: SocketArg,
        #[arg(long)]
        json: bool,
    },
    /// Approve proposal ID; --hash is the prefix `verbd pending` shows (at least 8 hex digits)
    Approve {
        #[command(flatten)]
        socket: SocketArg,
        id: u64,
        #[arg(long)]
        hash: String,
        #[arg(long)]
        json: bool,
    },
    /// Deny proposal ID
    Deny {
        #[command(flatten)]
        socket: SocketArg,
        id: u64,
        #[arg(long)]
        reason: String,
    },
    /// Wait until proposal ID is decided and run (or the timeout passes)
    Wait {
        #[command(flatten)]
        socket: SocketArg,
        id: u64,
        /// Seconds to wait (at most 600)
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        #[arg(long)]
        json: bool,
    },
    /// State and outcome of proposal ID
    Result {
        #[command(flatten)]
        socket: SocketArg,
        id: u64,
        #[arg(long)]
        json: bool,
    },
    /// Resolve a proposal whose outcome is unknown (after a crash), after checking by hand
    Resolve {
        #[command(flatten)]
        socket: SocketArg,
        id: u64,
        /// succeeded, failed or not-run
        #[arg(long)]
        outcome: String,
        #[arg(long)]
        note: String,
    },
    /// Run any program confined by a sandbox profile (Landlock, seccomp, no capabilities,
    /// rlimits): e.g. `verbd exec --policy p.toml --profile agent -- claude`. No privileges needed.
    Exec {
        /// Policy holding the profile (default: the embedded demo policy)
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long, default_value = "default")]
        profile: String,
        /// Print the achieved Landlock ABI, seccomp mode, no_new_privs and capabilities to stderr
        #[arg(long)]
        print_status: bool,
        program: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run the start-up self-test on a policy (binaries, sandbox canaries, examples, validator
    /// corpus, secrets; the journal too with --state-dir). Exit 1 on any FAIL.
    Selftest {
        #[arg(long)]
        policy: Option<PathBuf>,
        #[arg(long)]
        state_dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
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
        protected: Option<PathBuf>,
        #[arg(long)]
        network_none: bool,
        #[arg(long)]
        keeps_capabilities: bool,
    },
    /// The audit journal
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Agent runtime adapters
    Hook {
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Policy tools (work offline, no daemon needed)
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check every segment: hash chain, sequence, epochs and seals, the heads published to the
    /// witness, and (with --verify-key) every sealed epoch's MACs; names each edited, deleted,
    /// inserted, reordered or cut-off record and says what it could not prove. Exit 1 when
    /// anything is wrong.
    Verify {
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Check an exported file (`audit export`) instead of the state directory
        #[arg(long)]
        file: Option<PathBuf>,
        /// The verification key `audit setup-keys` printed (repeat for several generations;
        /// visible to local users in the process list, see --verify-key-file)
        #[arg(long)]
        verify_key: Vec<String>,
        /// A file holding a verification key (`-` reads standard input)
        #[arg(long)]
        verify_key_file: Vec<PathBuf>,
        /// A witness file to compare with (default: the state directory's)
        #[arg(long)]
        witness: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Make forward-secure sealing keys: the initial sealing key goes to the state directory
    /// (taken at the next daemon start) or to a file for a systemd credential; the
    /// verification key is printed once
    SetupKeys {
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Write the initial sealing key to this new file (for `systemd-creds encrypt`)
        /// instead of the state directory
        #[arg(long)]
        credential: Option<PathBuf>,
        /// Close an epoch after this many records
        #[arg(long, default_value_t = verbd::journal::DEFAULT_EPOCH_RECORDS)]
        epoch_records: u64,
        /// Close an epoch after this many seconds
        #[arg(long, default_value_t = verbd::journal::DEFAULT_EPOCH_SECONDS)]
        epoch_seconds: u64,
    },
    /// Write the journal's exact lines (all segments) for offline checking or a SIEM
    Export {
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Start at the first record with this seq or higher
        #[arg(long, default_value_t = 1)]
        since: u64,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExportFormat,
        /// A new file to write (default: standard output)
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Acknowledge records missing from the end of the journal so the daemon serves again;
    /// the acknowledgement (who, why, which records) is journaled at the next start
    AcknowledgeGap {
        #[arg(long)]
        state_dir: Option<PathBuf>,
        #[arg(long)]
        reason: String,
    },
    /// Show the most recent records
    Tail {
        #[arg(long)]
        state_dir: Option<PathBuf>,
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    /// One record per line, byte for byte as journaled
    Jsonl,
}

#[derive(Subcommand)]
enum HookCommand {
    /// Claude Code PreToolUse hook: reads the hook JSON on stdin; exit 0 allows, exit 2 denies
    /// (and every failure denies)
    ClaudeCode {
        #[command(flatten)]
        socket: SocketArg,
        /// Print the settings.json snippet instead
        #[arg(long)]
        print_settings: bool,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Check a policy file; errors show file:line:col
    Check { file: PathBuf },
    /// Print the argv a verb would run with these arguments, without running it
    Explain {
        file: PathBuf,
        verb: String,
        args: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("verbd: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            policy,
            socket,
            state_dir,
        } => serve(policy, socket, state_dir),
        Command::Call {
            socket,
            json,
            reason,
            idempotency_key,
            verb,
            args,
        } => {
            let args = policy::text_args(&parse_kv(&args)?);
            let request = Request::Call {
                verb,
                args,
                reason,
                idempotency_key,
            };
            client_call(&socket.path(), &request, json)
        }
        Command::List { socket, json } => client_list(&socket.path(), json),
        Command::Pending { socket, json } => client_pending(&socket.path(), json),
        Command::Approve {
            socket,
            id,
            hash,
            json,
        } => client_call(&socket.path(), &Request::Approve { id, hash }, json),
        Command::Deny { socket, id, reason } => {
            client_call(&socket.path(), &Request::Deny { id, reason }, false)
        }
        Command::Wait {
            socket,
            id,
            timeout,
            json,
        } => client_proposal(
            &socket.path(),
            &Request::Wait {
                id,
                timeout_ms: timeout.min(600) * 1000,
            },
            json,
        ),
        Command::Result { socket, id, json } => {
            client_proposal(&socket.path(), &Request::Result { id }, json)
        }
        Command::Resolve {
            socket,
            id,
            outcome,
            note,
        } => client_call(
            &socket.path(),
            &Request::Resolve { id, outcome, note },
            false,
        ),
        Command::Exec {
            policy,
            profile,
            print_status,
            program,
            args,
        } => {
            let policy = load_policy(policy.as_deref())?;
            let Some(spec) = policy.sandboxes.get(&profile) else {
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
            let prepared = verbd::sandbox::PreparedSandbox::prepare(spec.clone())
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let err = match verbd::sandbox::exec_confined(&prepared, &program, &args, print_status)
            {
                Err(e) => e,
                Ok(never) => match never {},
            };
            eprintln!("verbd exec: {err}");
            Ok(ExitCode::from(
                if matches!(err, verbd::sandbox::SandboxError::ProgramNotFound(_)) {
                    127
                } else {
                    126
                },
            ))
        }
        Command::Selftest {
            policy,
            state_dir,
            json,
        } => {
            let policy = match load_policy(policy.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(ExitCode::from(1));
                }
            };
            let daemon_uid = match (&policy.daemon.user, nix::unistd::geteuid().is_root()) {
                (Some(name), true) => nix::unistd::User::from_name(name)
                    .ok()
                    .flatten()
                    .map(|u| u.uid.as_raw())
                    .unwrap_or(0),
                _ => nix::unistd::geteuid().as_raw(),
            };
            // Loaded only for their warnings; whether each source is usable is a check itself.
            let secrets = verbd::secrets::SecretStore::load(&policy.secrets).ok();
            let report = verbd::selftest::run(&verbd::selftest::Context {
                policy: &policy,
                daemon_uid,
                canary_exe: std::env::current_exe()?,
                serving: None,
                state_dir: state_dir.as_deref(),
                secrets: secrets.as_ref(),
            });
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render());
            }
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Reload { socket } => client_call(&socket.path(), &Request::Reload {}, false),
        Command::Canary {
            outside,
            protected,
            network_none,
            keeps_capabilities,
        } => Ok(ExitCode::from(verbd::selftest::canary_main(
            &outside,
            protected.as_deref(),
            network_none,
            keeps_capabilities,
        ) as u8)),
        Command::Audit { command } => {
            let dir =
                |state_dir: Option<PathBuf>| state_dir.unwrap_or_else(server::default_state_dir);
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            let code = match command {
                AuditCommand::Verify {
                    state_dir,
                    file,
                    verify_key,
                    verify_key_file,
                    witness,
                    json,
                } => verbd::audit::verify(
                    verbd::audit::VerifyArgs {
                        state_dir: dir(state_dir),
                        file,
                        verify_keys: verify_key,
                        verify_key_files: verify_key_file,
                        witness,
                        json,
                    },
                    &mut out,
                    &mut err,
                ),
                AuditCommand::Tail { state_dir, n, json } => {
                    verbd::audit::tail(&dir(state_dir), n, json, &mut out)
                }
                AuditCommand::SetupKeys {
                    state_dir,
                    credential,
                    epoch_records,
                    epoch_seconds,
                } => verbd::audit::setup_keys(
                    &dir(state_dir),
                    credential.as_deref(),
                    epoch_records,
                    epoch_seconds,
                    &mut out,
                ),
                AuditCommand::Export {
                    state_dir,
                    since,
                    format: ExportFormat::Jsonl,
                    output,
                } => verbd::audit::export(&dir(state_dir), since, output.as_deref(), &mut err),
                AuditCommand::AcknowledgeGap { state_dir, reason } => {
                    verbd::audit::acknowledge_gap(&dir(state_dir), &reason, &mut out)
                }
            };
            Ok(ExitCode::from(code.map_err(|e| anyhow::anyhow!("{e}"))?))
        }
        Command::Hook { command } => match command {
            HookCommand::ClaudeCode {
                socket,
                print_settings,
            } => {
                use verbd::adapters::claude_hook;
                if print_settings {
                    let exe = std::env::current_exe().context("locating the verbd binary")?;
                    println!(
                        "{}",
                        claude_hook::settings_snippet(
                            &exe,
                            socket.socket.as_deref(),
                            claude_hook::DEFAULT_DEADLINE
                        )
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                let code = claude_hook::run(&socket.path(), claude_hook::DEFAULT_DEADLINE);
                Ok(ExitCode::from(code.clamp(0, 255) as u8))
            }
        },
        Command::Policy { command } => match command {
            PolicyCommand::Check { file } => policy_check(&file),
            PolicyCommand::Explain {
                file,
                verb,
                args,
                json,
            } => policy_explain(&file, &verb, &args, json),
        },
    }
}

fn parse_kv(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for arg in args {
        let (k, v) = arg
            .split_once('=')
            .with_context(|| format!("argument {arg:?} is not key=value"))?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            bail!("argument `{k}` given twice");
        }
    }
    Ok(out)
}

/// Deadline for client calls: verbs can run long, so be generous; connection errors are instant.
const CALL_DEADLINE: Duration = Duration::from_secs(15 * 60);

fn request(socket: &Path, req: &Request) -> Result<Response, ExitCode> {
    verbd::client::request(socket, req, CALL_DEADLINE).map_err(|e| {
        eprintln!("verbd: {e}");
        ExitCode::from(EXIT_UNAVAILABLE)
    })
}

/// Print a non-`ok` response as one line on stderr and map it to its exit code.
fn report(response: &Response) -> ExitCode {
    let (code, line) = match response {
        Response::Invalid { message, .. } => (EXIT_INVALID, format!("invalid: {message}")),
        Response::Denied { reason } => (EXIT_DENIED, format!("denied: {reason}")),
        Response::ConfirmRequired { message, .. } => (EXIT_CONFIRM, message.clone()),
        Response::Busy { message } => (EXIT_BUSY, format!("busy: {message}")),
        Response::Error { message } => (EXIT_ERROR, format!("error: {message}")),
        other => (EXIT_ERROR, format!("unexpected answer: {other:?}")),
    };
    eprintln!("{line}");
    ExitCode::from(code)
}

fn client_call(socket: &Path, req: &Request, json: bool) -> anyhow::Result<ExitCode> {
    // The state a `Decided` answer must report for the command to have done what it asked.
    let wanted_state = match req {
        Request::Deny { .. } => Some("denied"),
        Request::Resolve { .. } => Some("resolved"),
        _ => None,
    };
    let response = match request(socket, req) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    if json {
        println!("{}", String::from_utf8_lossy(&response.encode()).trim_end());
    }
    match &response {
        Response::Ok { result, .. } => {
            if !json {
                use std::io::Write;
                let _ = std::io::stdout().write_all(result.stdout.as_bytes());
                let _ = std::io::stderr().write_all(result.stderr.as_bytes());
                if result.stdout_truncated || result.stderr_truncated {
                    eprintln!("verbd: output truncated at the verb's max_output");
                }
            }
            let code = if result.exit.timed_out {
                if !json {
                    eprintln!("verbd: the verb timed out; its process group was killed");
                }
                124
            } else if let Some(sig) = result.exit.signal {
                128 + sig
            } else {
                result.exit.code.unwrap_or(EXIT_ERROR as i32)
            };
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Response::Info { info } => {
            println!("{}", info["message"].as_str().unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        Response::Decided { state, message, .. } => {
            println!("{}", escape_for_terminal(message));
            Ok(if wanted_state == Some(state.as_str()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_DENIED)
            })
        }
        other if json => Ok(exit_code_of(other)),
        other => Ok(report(other)),
    }
}

fn client_pending(socket: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let response = match request(socket, &Request::Pending {}) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let Response::Proposals { proposals } = &response else {
        return Ok(report(&response));
    };
    if json {
        println!("{}", serde_json::to_string_pretty(proposals)?);
        return Ok(ExitCode::SUCCESS);
    }
    if proposals.is_empty() {
        println!("no pending proposals");
    }
    for p in proposals {
        print_proposal(p);
    }
    Ok(ExitCode::SUCCESS)
}

/// Show a proposal for a human. Every value passes through `escape_for_terminal`, so a hostile
/// argument or reason cannot move the cursor, clear the screen or fake lines of this view.
fn print_proposal(p: &serde_json::Value) {
    let text = |v: &serde_json::Value| -> String {
        escape_for_terminal(&match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        })
    };
    let hash = p["args_hash"].as_str().unwrap_or_default();
    println!("─── proposal {} ({}) ───", p["id"], text(&p["state"]));
    println!(
        "  verb:        {} ({}) — {}",
        text(&p["verb"]),
        text(&p["category"]),
        text(&p["description"])
    );
    let user = match &p["requester"]["user"] {
        serde_json::Value::Null => "no user name".to_string(),
        other => text(other),
    };
    println!(
        "  requested:   uid {} ({user}) pid {} at {}",
        p["requester"]["uid"],
        p["requester"]["pid"],
        text(&p["created_at"])
    );
    println!("  expires:     {}", text(&p["expires_at"]));
    if let Some(args) = p["args"].as_object() {
        for (k, v) in args {
            println!("  arg {k:<9} {}", text(v));
        }
    }
    let argv: Vec<String> = p["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    println!(
        "  will run:    {}",
        escape_for_terminal(&shell_words::join(argv))
    );
    if !p["reason"].is_null() {
        println!(
            "  reason (UNTRUSTED, written by the requester): {}",
            text(&p["reason"])
        );
    }
    if let Some(out) = p["dry_run_output"].as_str() {
        println!("  dry run output:");
        for line in out.lines() {
            println!("    | {}", escape_for_terminal(line));
        }
    }
    println!("  hash:        {hash}");
    println!(
        "  approve:     verbd approve {} --hash {}",
        p["id"],
        &hash[..hash.len().min(16)]
    );
    println!("  deny:        verbd deny {} --reason '…'", p["id"]);
}

fn client_proposal(socket: &Path, req: &Request, json: bool) -> anyhow::Result<ExitCode> {
    let response = match request(socket, req) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let Response::Proposals { proposals } = &response else {
        return Ok(report(&response));
    };
    let Some(p) = proposals.first() else {
        return Ok(report(&response));
    };
    if json {
        println!("{}", serde_json::to_string_pretty(p)?);
    } else {
        print_proposal(p);
        if let Some(r) = p.get("result") {
            use std::io::Write;
            let _ =
                std::io::stdout().write_all(r["stdout"].as_str().unwrap_or_default().as_bytes());
            let _ =
                std::io::stderr().write_all(r["stderr"].as_str().unwrap_or_default().as_bytes());
        }
    }
    let state = p["state"].as_str().unwrap_or_default();
    Ok(match state {
        "succeeded" | "failed" => {
            let code = p["exit_code"].as_i64().unwrap_or(EXIT_ERROR as i64);
            ExitCode::from(code.clamp(0, 255) as u8)
        }
        "pending" | "approved" | "executing" => ExitCode::from(EXIT_BUSY),
        "denied" | "expired" => ExitCode::from(EXIT_DENIED),
        _ => ExitCode::from(EXIT_ERROR),
    })
}

fn exit_code_of(response: &Response) -> ExitCode {
    ExitCode::from(match response {
        Response::Invalid { .. } => EXIT_INVALID,
        Response::Denied { .. } => EXIT_DENIED,
        Response::ConfirmRequired { .. } => EXIT_CONFIRM,
        Response::Busy { .. } => EXIT_BUSY,
        _ => EXIT_ERROR,
    })
}

fn client_list(socket: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let response = match request(socket, &Request::List {}) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let Response::Verbs { verbs } = &response else {
        return Ok(report(&response));
    };
    if json {
        println!("{}", serde_json::to_string_pretty(verbs)?);
        return Ok(ExitCode::SUCCESS);
    }
    for verb in verbs {
        let approval = if verb.needs_approval {
            ", needs approval"
        } else {
            ""
        };
        println!("{}  ({}{approval})", verb.name, verb.category);
        if !verb.description.is_empty() {
            println!("    {}", verb.description);
        }
        for p in &verb.params {
            let req = if p.required { "required" } else { "optional" };
            let default = p
                .default
                .as_ref()
                .map(|d| format!(", default {d}"))
                .unwrap_or_default();
            println!("    {}=…  {} ({req}{default})", p.name, p.kind);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn policy_check(file: &Path) -> anyhow::Result<ExitCode> {
    match policy::load_file(file) {
        Ok(p) => {
            for w in &p.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "{}: ok ({} verbs, {} roles, {} sandbox profiles)",
                file.display(),
                p.verbs.len(),
                p.roles.len(),
                p.sandboxes.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::from(1))
        }
    }
}

fn policy_explain(
    file: &Path,
    verb: &str,
    args: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let policy = match policy::load_file(file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(1));
        }
    };
    let raw = policy::text_args(&parse_kv(args)?);
    // Explain as an operator: every role.
    let roles: Vec<&policy::Role> = policy.roles.values().collect();
    let (call, decision) = match policy.evaluate(&roles, verb, &raw) {
        Verdict::Run(call) => (call, "runs at once"),
        Verdict::Propose(call) => (call, "needs human approval"),
        Verdict::Refuse(refusal) => {
            eprintln!("refused: {}", refusal.message());
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    let v = &policy.verbs[verb];
    let env: BTreeMap<String, String> = match &call.action {
        policy::PreparedAction::Exec { env, .. } => {
            env.iter().map(|(k, v)| (k.clone(), v.display())).collect()
        }
        policy::PreparedAction::File => BTreeMap::new(),
    };
    let dry_run = match &call.action {
        policy::PreparedAction::Exec {
            dry_run: Some(d), ..
        } => Some(d.display()),
        _ => None,
    };
    if json {
        let out = serde_json::json!({
            "verb": verb,
            "category": v.category_label(),
            "decision": decision,
            "args": call.args,
            "args_hash": call.args_hash,
            "argv": call.display_argv(),
            "dry_run": dry_run,
            "env": env,
            "sandbox": v.sandbox,
            "timeout_ms": v.timeout.as_millis() as u64,
            "max_output": v.max_output,
            "cwd": v.cwd,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("verb:     {verb} ({}, {decision})", v.category_label());
        println!("argv:     {}", shell_words::join(call.display_argv()));
        if let Some(d) = dry_run {
            println!("dry-run:  {}", shell_words::join(d));
        }
        for (k, val) in &env {
            println!("env:      {k}={val}");
        }
        println!("sandbox:  {}", v.sandbox);
        println!("hash:     {}", call.args_hash);
    }
    Ok(ExitCode::SUCCESS)
}

fn load_policy(path: Option<&Path>) -> anyhow::Result<Policy> {
    match path {
        Some(p) => policy::load_file(p).map_err(|e| anyhow::anyhow!("{e}")),
        None => policy::compile(policy::DEMO_POLICY, "<embedded demo policy>")
            .map_err(|e| anyhow::anyhow!("{e}")),
    }
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 0700 {}", dir.display()))?;
    Ok(())
}

/// Started as root: give the state dir to the daemon user, then drop to it for good.
fn drop_privileges(policy: &Policy, state_dir: &Path) -> anyhow::Result<()> {
    use nix::unistd::{
        Gid, Uid, User, chown, getresgid, getresuid, setgroups, setresgid, setresuid,
    };
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let Some(name) = &policy.daemon.user else {
        if policy.daemon.allow_root {
            tracing::warn!("running as root because the policy sets daemon.allow_root = true");
            return Ok(());
        }
        bail!(
            "refusing to run as root: set [daemon] user = \"verbd\" (the daemon drops to it after binding its socket), or allow_root = true if you really mean it"
        );
    };
    let user = User::from_name(name)
        .ok()
        .flatten()
        .with_context(|| format!("daemon.user {name:?} does not exist (create it: systemd-sysusers systemd/sysusers.d/verbd.conf)"))?;
    if user.uid.is_root() {
        bail!("daemon.user {name:?} is root; choose an unprivileged user");
    }
    let mut paths = vec![state_dir.to_path_buf()];
    for entry in std::fs::read_dir(state_dir)? {
        let entry = entry?;
        // The journal witness and a gap acknowledgement stay root's: the daemon user may only
        // append to the witness through the descriptor opened before this drop.
        let name = entry.file_name();
        if !verbd::journal::ROOT_OWNED_FILES
            .iter()
            .any(|root_owned| name == *root_owned)
        {
            paths.push(entry.path());
        }
    }
    for p in &paths {
        chown(p, Some(user.uid), Some(user.gid))
            .with_context(|| format!("chown {} to {name}", p.display()))?;
    }
    // Capabilities: none, unless a sandbox profile runs its children as another user, which
    // needs CAP_SETUID/CAP_SETGID (and CAP_SETPCAP to empty the children's bounding sets).
    use caps::{CapSet, Capability};
    let keep: caps::CapsHashSet = if policy.sandboxes.values().any(|s| s.run_as.is_some()) {
        [
            Capability::CAP_SETUID,
            Capability::CAP_SETGID,
            Capability::CAP_SETPCAP,
        ]
        .into()
    } else {
        caps::CapsHashSet::new()
    };
    for cap in caps::runtime::thread_all_supported() {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .with_context(|| format!("dropping {cap} from the bounding set"))?;
        }
    }
    setgroups(&[user.gid]).context("setgroups")?;
    setresgid(user.gid, user.gid, user.gid).context("setresgid")?;
    if !keep.is_empty() {
        nix::sys::prctl::set_keepcaps(true).context("PR_SET_KEEPCAPS")?;
    }
    setresuid(user.uid, user.uid, user.uid).context("setresuid")?;
    if !keep.is_empty() {
        nix::sys::prctl::set_keepcaps(false).context("PR_SET_KEEPCAPS")?;
        caps::set(None, CapSet::Permitted, &keep).context("keeping CAP_SETUID/SETGID/SETPCAP")?;
        caps::set(None, CapSet::Effective, &keep).context("keeping CAP_SETUID/SETGID/SETPCAP")?;
    }
    caps::clear(None, CapSet::Inheritable).context("clearing inheritable capabilities")?;
    caps::clear(None, CapSet::Ambient).context("clearing ambient capabilities")?;
    let bounding = caps::read(None, CapSet::Bounding).context("reading the bounding set")?;
    if bounding != keep || caps::read(None, CapSet::Permitted)? != keep {
        bail!("capability drop could not be verified; refusing to serve");
    }
    let uids = getresuid()?;
    let gids = getresgid()?;
    let dropped = [uids.real, uids.effective, uids.saved] == [user.uid; 3]
        && [gids.real, gids.effective, gids.saved] == [user.gid; 3]
        && nix::unistd::setuid(Uid::from_raw(0)).is_err()
        && nix::unistd::setgid(Gid::from_raw(0)).is_err();
    if !dropped {
        bail!("privilege drop to {name} could not be verified; refusing to serve");
    }
    Ok(())
}

/// Exit status of `serve` when the policy or the self-test fails (systemd: no restart loop).
const EXIT_CONFIG: u8 = 78;

fn serve(
    policy_path: Option<PathBuf>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    // Socket activation first: it edits the environment, which is only safe with one thread.
    let activated = verbd::sd::activated_sockets().map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VERBD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let invoker_uid = nix::unistd::getuid().as_raw();
    let policy = match load_policy(policy_path.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("verbd: the policy cannot be used; not serving.\n{e}");
            verbd::sd::notify_status("policy invalid; not serving");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    for w in &policy.warnings {
        tracing::warn!("policy: {w}");
    }
    let state_dir = state_dir
        .or_else(|| policy.daemon.state_dir.clone())
        .unwrap_or_else(server::default_state_dir);
    create_private_dir(&state_dir)?;
    let secret_dir = state_dir.join(server::SECRET_FILES_DIR);
    create_private_dir(&secret_dir)?;
    let mut policy = policy;
    server::grant_secret_file_access(&mut policy, &secret_dir)?;
    let origin = policy.origin.clone();
    // Secrets are read here, before the privilege drop (they may be root-owned 0600).
    let runtime = match Runtime::build(policy) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("verbd: cannot prepare the policy; not serving: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    for w in runtime.secrets.warnings() {
        tracing::warn!("secrets: {w}");
    }
    // Sockets: from systemd, or bound here — bound, but not listening until the self-test passed.
    let mut bound = Vec::new();
    let mut listeners = Vec::new();
    let socket_path = if activated.is_empty() {
        let path = socket
            .or_else(|| runtime.policy.daemon.socket.clone())
            .unwrap_or_else(|| server::socket_path_in(&state_dir));
        bound.push(server::socket::bind(
            &path,
            runtime.policy.daemon.socket_mode,
            runtime.policy.daemon.socket_group.as_deref(),
        )?);
        if let Some(approver) = &runtime.policy.daemon.approver_socket {
            bound.push(server::socket::bind(
                approver,
                runtime.policy.daemon.socket_mode,
                runtime.policy.daemon.approver_socket_group.as_deref(),
            )?);
        }
        Some(path)
    } else {
        for socket in activated {
            match socket.name.as_deref() {
                None
                | Some("agent")
                | Some("approver")
                | Some("verbd.socket")
                | Some("verbd-approve.socket") => listeners.push(socket.listener),
                Some(other) => bail!(
                    "systemd passed a socket named {other:?}; verbd serves sockets named `agent` and `approver` (FileDescriptorName=)"
                ),
            }
        }
        None
    };
    // The witness of published journal heads is opened before the privilege drop, so a
    // root-started daemon keeps it root's (the daemon user only holds the descriptor).
    let witness = verbd::journal::Witness::open(&state_dir)
        .with_context(|| format!("opening the journal witness in {}", state_dir.display()))?;
    drop_privileges(&runtime.policy, &state_dir)?;
    // Opened as the daemon user, who keeps appending to it; opening checks the journal against
    // the last published head and verifies it since the last seal. The journal is the source of
    // truth for proposals: rebuild them from it (streamed). A journal that does not verify is a
    // failed self-test: nothing is served on a broken or shortened record.
    let opened = verbd::journal::Journal::open_with(verbd::journal::JournalConfig::for_daemon(
        &state_dir, witness,
    ))
    .and_then(|journal| Ok((journal.replay_all()?, journal)));
    let (mut records, journal) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!(
                "FAIL journal: {e}\n     fix: run `verbd audit verify --state-dir {}` to find the damage; never delete records to make this pass\nverbd: not serving: the journal does not verify. Nothing was accepted.",
                state_dir.display()
            );
            verbd::sd::notify_status("journal does not verify; not serving");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let (book, unknown_outcome, never_started) =
        verbd::approvals::Book::replay(records.by_ref().map(|r| {
            (
                r.seq,
                verbd::journal::parse_rfc3339(&r.time).unwrap_or(std::time::UNIX_EPOCH),
                r.event,
            )
        }));
    if let Err(e) = records.finish() {
        eprintln!(
            "FAIL journal: {e}\nverbd: not serving: the journal does not verify. Nothing was accepted."
        );
        verbd::sd::notify_status("journal does not verify; not serving");
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let exe = std::env::current_exe().context("locating the verbd binary for the canaries")?;
    let report = verbd::selftest::run(&verbd::selftest::Context {
        policy: &runtime.policy,
        daemon_uid: nix::unistd::geteuid().as_raw(),
        canary_exe: exe,
        serving: Some(verbd::selftest::Serving {
            state_dir: &state_dir,
            socket: socket_path.as_deref(),
        }),
        state_dir: None,
        secrets: Some(&runtime.secrets),
    });
    if !report.passed() {
        eprint!("{}", report.render());
        eprintln!("verbd: not serving: the self-test failed (see above). Nothing was accepted.");
        verbd::sd::notify_status(&report.summary());
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    eprintln!("verbd: {}", report.summary());
    for socket in bound {
        listeners.push(socket.listen()?);
    }
    let settings = ServeSettings {
        state_dir: state_dir.clone(),
        invoker_uid,
        policy_path,
    };
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summary = report.summary();
    tokio_rt.block_on(async move {
        let policy_hash = runtime.policy.hash.clone();
        let grace = runtime.policy.daemon.shutdown_grace;
        let daemon = Daemon::new(runtime, journal, book, settings);
        daemon
            .journal(AuditEvent::Start {
                version: env!("CARGO_PKG_VERSION").into(),
                policy: origin.clone(),
                policy_hash,
                pid: std::process::id(),
                uid: nix::unistd::getuid().as_raw(),
            })
            .await
            .map_err(|e| anyhow::anyhow!("cannot write the journal: {e}"))?;
        for id in unknown_outcome {
            tracing::warn!(
                id,
                "proposal was executing when the daemon stopped: unknown outcome, not re-run"
            );
            daemon
                .journal(AuditEvent::ProposalUnknownOutcome { id })
                .await
                .map_err(|e| anyhow::anyhow!("cannot write the journal: {e}"))?;
        }
        for id in never_started {
            daemon
                .journal(AuditEvent::ProposalNotStarted { id })
                .await
                .map_err(|e| anyhow::anyhow!("cannot write the journal: {e}"))?;
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut serving = Vec::new();
        for listener in listeners {
            let listener = tokio::net::UnixListener::from_std(listener)?;
            let mut rx = stop_rx.clone();
            serving.push(tokio::spawn(daemon.clone().serve(listener, async move {
                let _ = rx.wait_for(|stop| *stop).await;
            })));
        }
        match &socket_path {
            Some(path) => eprintln!(
                "verbd: serving {origin} on {} (state dir {})",
                path.display(),
                state_dir.display()
            ),
            None => eprintln!(
                "verbd: serving {origin} on sockets from systemd (state dir {})",
                state_dir.display()
            ),
        }
        verbd::sd::notify_ready(&format!("serving {origin}; {summary}"));
        // An idle daemon still closes its journal epoch within epoch_seconds.
        let sealer = daemon.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                if let Err(e) = sealer.seal_journal(false).await {
                    tracing::error!(error = %e, "journal epoch could not be sealed; calls are denied until it can");
                }
            }
        });
        if let Some(interval) = verbd::sd::watchdog_interval() {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                loop {
                    tick.tick().await;
                    verbd::sd::notify_watchdog();
                }
            });
        }
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        let reason = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = hup.recv() => {
                    let outcome = daemon.clone().reload().await;
                    tracing::info!("reload: {outcome}");
                }
            }
        };
        verbd::sd::notify_stopping();
        let _ = stop_tx.send(true);
        for task in serving {
            let _ = task.await;
        }
        // Let running verbs finish up to the grace period; after it their process groups are
        // killed when the runtime drops their tasks.
        let deadline = tokio::time::Instant::now() + grace;
        while daemon.executions_in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let in_flight = daemon.executions_in_flight();
        let _ = daemon
            .journal(AuditEvent::Stop {
                reason: if in_flight > 0 {
                    format!(
                        "{reason}; killing {in_flight} running verb(s) after the {}s grace period",
                        grace.as_secs()
                    )
                } else {
                    reason.to_string()
                },
                in_flight,
            })
            .await;
        if let Err(e) = daemon.seal_journal(true).await {
            tracing::error!(error = %e, "the journal's last epoch could not be sealed");
        }
        eprintln!("verbd: stopped ({reason})");
        anyhow::Ok(())
    })?;
    tokio_rt.shutdown_timeout(Duration::from_secs(2));
    Ok(ExitCode::SUCCESS)
}
