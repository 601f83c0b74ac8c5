//! `verbd hook claude-code`: a Claude Code `PreToolUse` hook that asks the daemon whether a file
//! edit may go ahead, and what a shell command stands for.
//!
//! Claude Code runs the hook before Write, Edit, MultiEdit, NotebookEdit and Bash with the tool
//! call as JSON on stdin. For the file tools the adapter extracts every path the tool would
//! write, resolves it as the kernel would (relative to `cwd`, symlinks followed, dangling ones
//! included), and sends one `check` request per path to the daemon. For Bash it sends the
//! command in one `command` request: the daemon answers `rewrite` (the hook hands Claude Code
//! the equivalent `verbd call VERB k=v … | filters` through `updatedInput`), `advise` or
//! `refuse` (deny, the reason naming the verb to call or the closest one), or `pass` (no
//! decision). The policy lives in one place and each decision is journaled there.
//!
//! Invariant: the hook fails closed. Claude Code lets the call through when a hook exits with
//! anything but 2, crashes, times out or prints bad JSON, so every failure here (unparseable or
//! oversized input, an unknown tool that names a path, a Bash call without a command, an
//! unreachable, erroring or slow daemon, a panic, the hard deadline) produces the deny answer:
//! the deny JSON on stdout, the reason on stderr, exit code 2. Only an explicit "allowed" from
//! the daemon for every path, a `pass` for a command, or a tool that names no path to write,
//! gives exit 0 with no output (Claude's normal permission flow goes on); a `rewrite` gives
//! exit 0 with the allow JSON carrying the rewritten command. Every value in a rewritten command
//! is quoted so the shell passes it as one word.
//!
//! The hook is a fast, model-visible pre-check, not the enforcement boundary: writes made
//! through Bash never reach it. `verbd exec` (the Landlock sandbox) enforces those.
#![forbid(unsafe_code)]

use crate::client::{self, ClientError};
use crate::exit::{EXIT_HOOK_DENIED, EXIT_SUCCESS};
use crate::hard_deadline;
use crate::protocol::{CommandDecision, Request, Response, VerbCall};
use serde_json::{Map, Value, json};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest hook input read from stdin (a Write carries the whole new file).
pub const MAX_HOOK_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// The deadline `verbd hook claude-code` uses unless told otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// The tool names the hook is registered for.
pub const HOOK_MATCHER: &str = "Write|Edit|MultiEdit|NotebookEdit|Bash";

/// The shell tool: its `command` is mapped by the daemon.
const SHELL_TOOL: &str = "Bash";

/// Environment switch that makes [`run`] panic, so tests can prove a panic exits 2.
pub const TEST_PANIC_ENV: &str = "VERBD_HOOK_TEST_PANIC";

/// Time kept back from the deadline for `decide`, so it answers before the hard deadline
/// fires.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// Claude Code caps hook output strings at 10,000 characters; stay well below.
const MAX_REASON_CHARS: usize = 9_000;

/// Symlinks followed while resolving one path before giving up (the kernel's limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// Tools that write a file, with the `tool_input` field holding its path.
const WRITING_TOOLS: &[(&str, &str)] = &[
    ("Write", "file_path"),
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// Tools that name a path but only read it.
const READ_ONLY_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS", "NotebookRead"];

/// Fields that make an unknown tool look like it touches a file.
const PATH_FIELDS: &[&str] = &["file_path", "notebook_path", "path"];

/// What the hook process prints and exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutcome {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl HookOutcome {
    /// No decision: exit 0 and no output, so Claude Code's own permission flow applies.
    fn no_objection() -> Self {
        HookOutcome {
            exit_code: EXIT_SUCCESS.into(),
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    /// Run `updated_input` instead of the tool call's input: allow JSON on stdout, exit 0.
    fn rewrite(updated_input: Map<String, Value>, reason: &str) -> Self {
        let body = json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": truncate_chars(reason, MAX_REASON_CHARS),
                "updatedInput": updated_input,
            }
        });
        HookOutcome {
            exit_code: EXIT_SUCCESS.into(),
            stdout: format!("{body}\n"),
            stderr: String::new(),
        }
    }

    /// Block the tool call: deny JSON on stdout, the reason on stderr, exit 2.
    fn deny(reason: &str) -> Self {
        let reason = truncate_chars(reason, MAX_REASON_CHARS);
        let body = json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        });
        HookOutcome {
            exit_code: EXIT_HOOK_DENIED.into(),
            stdout: format!("{body}\n"),
            stderr: format!("{reason}\n"),
        }
    }
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Why the hook blocks a tool call. Each message tells the model what it can do about it.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("the hook received no input, so verbd cannot tell what this tool call writes")]
    EmptyInput,
    #[error("the hook input is larger than {max} bytes; write the file in smaller pieces")]
    InputTooLarge { max: usize },
    #[error("the hook input could not be read: {0}")]
    Unreadable(std::io::Error),
    #[error("the hook input is not valid JSON ({0})")]
    BadJson(String),
    #[error("the hook input is not a PreToolUse tool call ({0})")]
    NotPreToolUse(String),
    #[error(
        "tool `{tool}` is not one verbd knows and its input names a path (`{field}`); verbd blocks unknown tools that may write files — use Write or Edit"
    )]
    UnknownToolWithPath { tool: String, field: &'static str },
    #[error("the {tool} input has no `{field}` string")]
    MissingPath { tool: String, field: &'static str },
    #[error("{0}")]
    CommandRefused(String),
    #[error(
        "this command stands for a verb; run it as `{0}` (verbd answers with the verb's output, or with CONFIRM_REQUIRED when a person must approve)"
    )]
    UseVerb(String),
    #[error(
        "path {path:?} is relative and the hook input has no absolute `cwd`; use an absolute path"
    )]
    RelativeWithoutCwd { path: String },
    #[error(
        "path {path} cannot be resolved ({problem}); use an absolute path to an existing directory"
    )]
    Unresolvable { path: PathBuf, problem: String },
    #[error("path {0:?} is not valid UTF-8; use a UTF-8 path")]
    NotUtf8(PathBuf),
    #[error(
        "verbd is not running or not reachable ({0}); file edits and shell commands are blocked until the verbd daemon runs — ask the user to start it"
    )]
    Unreachable(ClientError),
    #[error(
        "verbd did not answer in time; file edits and shell commands are blocked while verbd is unresponsive — ask the user to check the verbd daemon"
    )]
    DeadlinePassed,
    #[error("verbd refused a write to {path}{via}: {reason}")]
    Denied {
        path: String,
        /// ` (the tool's path X resolves there)` when resolution changed the path.
        via: String,
        reason: String,
    },
    #[error("verbd could not check {path}: {message}")]
    DaemonError { path: String, message: String },
    #[error("verbd gave an answer this hook does not understand for {path}")]
    UnexpectedAnswer { path: String },
}

/// Where the daemon is, and the `verbd` binary a rewritten command runs.
#[derive(Debug, Clone, Copy)]
pub struct Daemon<'a> {
    pub socket: &'a Path,
    pub verbd: &'a Path,
}

/// Decide one hook call: parse the PreToolUse JSON; for a file tool resolve every path it
/// would write and ask the daemon about each, for Bash ask what the command stands for; all
/// within `deadline`. Never panics on any input.
pub fn decide(stdin: &[u8], daemon: Daemon<'_>, deadline: Duration) -> HookOutcome {
    decide_as(stdin, daemon, deadline, Runtime::ClaudeCode)
}

/// [`decide`], journaling the runtime the call came from (`gemini-cli Bash`); the answer is
/// still in Claude Code's terms.
pub fn decide_as(
    stdin: &[u8],
    daemon: Daemon<'_>,
    deadline: Duration,
    runtime: Runtime,
) -> HookOutcome {
    let started = Instant::now();
    let (tool, verdict) = match parse_call(stdin) {
        Ok(call) => {
            let verdict = match &call.command {
                Some(command) => map_command(&call, command, daemon, deadline, started, runtime),
                None => check_paths(&call, daemon.socket, deadline, started).map(|()| None),
            };
            (Some(call.tool), verdict)
        }
        Err(refusal) => (None, Err(refusal)),
    };
    match verdict {
        Ok(None) => HookOutcome::no_objection(),
        Ok(Some(Rewrite { input, reason })) => HookOutcome::rewrite(input, &reason),
        Err(refusal) => {
            let subject = tool.map_or("this tool call".to_string(), |t| format!("this {t} call"));
            HookOutcome::deny(&format!("verbd blocked {subject}: {refusal}"))
        }
    }
}

/// A Bash call's input to run instead of the agent's, and why.
struct Rewrite {
    input: Map<String, Value>,
    reason: String,
}

/// Ask the daemon what `command` stands for: `Some` (the tool input to run instead, and why)
/// for a rewrite, `None` for no decision.
fn map_command(
    call: &ToolCall,
    command: &str,
    daemon: Daemon<'_>,
    deadline: Duration,
    started: Instant,
    runtime: Runtime,
) -> Result<Option<Rewrite>, Refusal> {
    let remaining = deadline
        .checked_sub(started.elapsed())
        .filter(|d| !d.is_zero())
        .ok_or(Refusal::DeadlinePassed)?;
    let request = Request::Command {
        command: command.to_string(),
        cwd: call.cwd.clone(),
        tool: Some(format!("{} {}", runtime.name(), call.tool)),
    };
    let subject = || "the command".to_string();
    let response = client::request(daemon.socket, &request, remaining).map_err(|e| match e {
        ClientError::Timeout { .. } => Refusal::DeadlinePassed,
        other => Refusal::Unreachable(other),
    })?;
    match response {
        Response::Command { decision } => match decision {
            CommandDecision::Pass { .. } => Ok(None),
            CommandDecision::Refuse { reason } => Err(Refusal::CommandRefused(reason)),
            CommandDecision::Advise(verb_call) => Err(Refusal::UseVerb(verb_call_command(
                daemon.verbd,
                daemon.socket,
                &verb_call,
            ))),
            CommandDecision::Rewrite(verb_call) => {
                let rewritten = verb_call_command(daemon.verbd, daemon.socket, &verb_call);
                let mut input = call.input.clone();
                input.insert("command".into(), Value::String(rewritten));
                Ok(Some(Rewrite {
                    input,
                    reason: format!("verbd runs this command as its verb `{}`", verb_call.verb),
                }))
            }
        },
        Response::Denied { reason } => Err(Refusal::CommandRefused(reason)),
        Response::Error { message }
        | Response::Busy { message }
        | Response::Invalid { message, .. } => Err(Refusal::DaemonError {
            path: subject(),
            message,
        }),
        _ => Err(Refusal::UnexpectedAnswer { path: subject() }),
    }
}

/// The shell command that runs `call` through `verbd call` on `socket`, each word quoted so the
/// shell passes it as one argument, followed by the command's own client-side filters.
pub fn verb_call_command(verbd: &Path, socket: &Path, call: &VerbCall) -> String {
    let mut words = vec![
        verbd.to_string_lossy().into_owned(),
        "call".into(),
        "--socket".into(),
        socket.to_string_lossy().into_owned(),
        "--".into(),
        call.verb.clone(),
    ];
    words.extend(call.args.iter().map(|(k, v)| format!("{k}={v}")));
    let mut line = shell_words::join(&words);
    if let Some(filters) = &call.client_side {
        line.push_str(" | ");
        line.push_str(filters);
    }
    line
}

/// The parts of the hook input the decision needs.
struct ToolCall {
    tool: String,
    /// Paths as given (absolute or relative to `cwd`); empty when the tool writes nothing.
    paths: Vec<String>,
    /// The shell command of a Bash call.
    command: Option<String>,
    /// The tool input as given (a rewrite keeps every field but `command`).
    input: Map<String, Value>,
    cwd: Option<String>,
}

fn parse_call(stdin: &[u8]) -> Result<ToolCall, Refusal> {
    if stdin.len() > MAX_HOOK_INPUT_BYTES {
        return Err(Refusal::InputTooLarge {
            max: MAX_HOOK_INPUT_BYTES,
        });
    }
    if stdin.iter().all(u8::is_ascii_whitespace) {
        return Err(Refusal::EmptyInput);
    }
    let value: Value =
        serde_json::from_slice(stdin).map_err(|e| Refusal::BadJson(e.to_string()))?;
    let Value::Object(input) = value else {
        return Err(Refusal::NotPreToolUse("not a JSON object".into()));
    };
    if let Some(event) = input.get("hook_event_name")
        && event != "PreToolUse"
    {
        return Err(Refusal::NotPreToolUse(format!(
            "hook_event_name is {event}"
        )));
    }
    let tool = input
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or_else(|| Refusal::NotPreToolUse("no tool_name string".into()))?
        .to_string();
    let empty = Map::new();
    let tool_input = match input.get("tool_input") {
        Some(Value::Object(fields)) => fields,
        None | Some(Value::Null) => &empty,
        Some(_) => return Err(Refusal::NotPreToolUse("tool_input is not an object".into())),
    };
    let cwd = input.get("cwd").and_then(Value::as_str).map(str::to_string);

    let mut command = None;
    let paths = if tool == SHELL_TOOL {
        let text = tool_input
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(|| Refusal::MissingPath {
                tool: tool.clone(),
                field: "command",
            })?;
        command = Some(text.to_string());
        Vec::new()
    } else if let Some(&(_, field)) = WRITING_TOOLS.iter().find(|(name, _)| *name == tool) {
        let path = tool_input
            .get(field)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Refusal::MissingPath {
                tool: tool.clone(),
                field,
            })?;
        vec![path.to_string()]
    } else if READ_ONLY_TOOLS.contains(&tool.as_str()) {
        Vec::new()
    } else if let Some(&field) = PATH_FIELDS.iter().find(|f| tool_input.contains_key(**f)) {
        return Err(Refusal::UnknownToolWithPath { tool, field });
    } else {
        Vec::new()
    };
    Ok(ToolCall {
        tool,
        paths,
        command,
        input: tool_input.clone(),
        cwd,
    })
}

fn check_paths(
    call: &ToolCall,
    socket: &Path,
    deadline: Duration,
    started: Instant,
) -> Result<(), Refusal> {
    for raw in &call.paths {
        let resolved = resolve_as_kernel_would(raw, call.cwd.as_deref())?;
        let path = resolved
            .to_str()
            .ok_or_else(|| Refusal::NotUtf8(resolved.clone()))?
            .to_string();
        let via = if *raw == path {
            String::new()
        } else {
            format!(" (the tool's path {raw} resolves there)")
        };
        let remaining = deadline
            .checked_sub(started.elapsed())
            .filter(|d| !d.is_zero())
            .ok_or(Refusal::DeadlinePassed)?;
        let request = Request::Check {
            path: path.clone(),
            tool: Some(call.tool.clone()),
        };
        let response = client::request(socket, &request, remaining).map_err(|e| match e {
            ClientError::Timeout { .. } => Refusal::DeadlinePassed,
            other => Refusal::Unreachable(other),
        })?;
        match response {
            Response::Check { allowed: true, .. } => {}
            Response::Check {
                allowed: false,
                reason,
            }
            | Response::Denied { reason } => return Err(Refusal::Denied { path, via, reason }),
            Response::Error { message }
            | Response::Busy { message }
            | Response::Invalid { message, .. } => {
                return Err(Refusal::DaemonError { path, message });
            }
            _ => return Err(Refusal::UnexpectedAnswer { path }),
        }
    }
    Ok(())
}

/// Resolve `raw` as an `open(O_CREAT)` would: relative to `cwd`, following every symlink
/// (dangling ones too, since the kernel creates their target), `..` applied to the physical
/// path. The part that does not exist yet is appended lexically; `..` there is refused.
fn resolve_as_kernel_would(raw: &str, cwd: Option<&str>) -> Result<PathBuf, Refusal> {
    let given = Path::new(raw);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        match cwd.map(Path::new).filter(|c| c.is_absolute()) {
            Some(cwd) => cwd.join(given),
            None => {
                return Err(Refusal::RelativeWithoutCwd {
                    path: raw.to_string(),
                });
            }
        }
    };
    let unresolvable = |problem: String| Refusal::Unresolvable {
        path: joined.clone(),
        problem,
    };
    // Components still to walk, last one first. `.` and `..` never appear as normal names.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, &joined);
    let mut resolved = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&name);
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(unresolvable("too many levels of symbolic links".into()));
                }
                let target = std::fs::read_link(&candidate)
                    .map_err(|e| unresolvable(format!("reading {}: {e}", candidate.display())))?;
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                push_components(&mut pending, &target);
            }
            Ok(_) => resolved = candidate,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                resolved = candidate;
                while let Some(rest) = pending.pop() {
                    if rest == ".." {
                        return Err(unresolvable(
                            "`..` after a directory that does not exist".into(),
                        ));
                    }
                    resolved.push(rest);
                }
            }
            Err(e) => return Err(unresolvable(format!("{}: {e}", candidate.display()))),
        }
    }
    Ok(resolved)
}

/// Push the components of `path` onto `pending` so that they pop in order; `.` is dropped.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    for component in path.components().rev() {
        match component {
            Component::Normal(name) => pending.push(name.to_os_string()),
            Component::ParentDir => pending.push(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
}

fn print_outcome(outcome: &HookOutcome) {
    // Write errors (a closed pipe) are ignored: the exit code alone still blocks.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(outcome.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(outcome.stderr.as_bytes());
    let _ = stderr.flush();
}

/// The agent runtime whose hook protocol the process answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    ClaudeCode,
    /// Gemini CLI's BeforeTool protocol ([`super::gemini_hook`]).
    GeminiCli,
    /// Cursor's beforeShellExecution protocol ([`super::cursor_hook`]).
    Cursor,
}

impl Runtime {
    /// The name of its `verbd hook` subcommand.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::ClaudeCode => "claude-code",
            Runtime::GeminiCli => "gemini-cli",
            Runtime::Cursor => "cursor",
        }
    }
}

/// What [`run`] needs of the runtime it serves: how to decide one call from that runtime's
/// input, and how to put an answer in its terms. Each runtime's adapter module owns its own
/// (this one [`CLAUDE_CODE`]), so this module never reaches the adapters built on it.
#[derive(Clone, Copy)]
pub struct Frontend {
    pub decide: fn(&[u8], Daemon<'_>, Duration) -> HookOutcome,
    pub in_runtime_terms: fn(HookOutcome) -> HookOutcome,
}

/// The Claude Code (and Codex) PreToolUse protocol: answers are already in its terms.
pub const CLAUDE_CODE: Frontend = Frontend {
    decide,
    in_runtime_terms: std::convert::identity,
};

/// Set once by [`run`] before the panic hook exists, so it denies in the served runtime's
/// terms.
static SERVED_TERMS: OnceLock<fn(HookOutcome) -> HookOutcome> = OnceLock::new();

/// `outcome` in the protocol of the runtime [`run`] serves.
fn in_runtime_terms(outcome: HookOutcome) -> HookOutcome {
    match SERVED_TERMS.get() {
        Some(translate) => translate(outcome),
        None => outcome,
    }
}

/// Print the deny answer (unless someone already printed) and exit 2.
fn deny_and_exit(reason: &str) -> ! {
    if hard_deadline::claim_output() {
        print_outcome(&in_runtime_terms(HookOutcome::deny(reason)));
    }
    std::process::exit(EXIT_HOOK_DENIED.into())
}

/// Entry point for `verbd hook claude-code` (and `gemini-cli`, `cursor`, in their terms): one
/// thread, one blocking request per question. Installs a panic hook that answers deny and
/// exits 2, and arms the hard deadline (`SIGALRM`, no watchdog thread: see
/// [`hard_deadline`]) with the deny answer it prints; reads stdin with a cap, decides, prints
/// and returns the exit code. A rewritten command runs this same `verbd` binary.
pub fn run(socket: &Path, deadline: Duration, frontend: Frontend) -> i32 {
    let started = Instant::now();
    let _ = SERVED_TERMS.set(frontend.in_runtime_terms);
    std::panic::set_hook(Box::new(|info| {
        deny_and_exit(&format!(
            "verbd blocked this tool call: the verbd hook failed internally ({info}); report this to the user"
        ))
    }));
    let too_late = in_runtime_terms(HookOutcome::deny(&format!(
        "verbd blocked this tool call: the verbd hook did not finish within {deadline:?}; file edits and shell commands are blocked while verbd is unresponsive — ask the user to check the verbd daemon"
    )));
    let armed = hard_deadline::arm(
        deadline,
        hard_deadline::LastWord {
            stdout: too_late.stdout.into_bytes(),
            stderr: too_late.stderr.into_bytes(),
            exit_code: too_late.exit_code,
        },
    );
    if let Err(e) = armed {
        deny_and_exit(&format!(
            "verbd blocked this tool call: the hook cannot set its deadline ({e}); report this to the user"
        ));
    }
    if std::env::var_os(TEST_PANIC_ENV).is_some_and(|v| v == "1") {
        panic!("forced by {TEST_PANIC_ENV}=1");
    }
    let mut input = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_HOOK_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut input);
    let verbd = std::env::current_exe();
    let outcome = match (read, verbd) {
        (Ok(_), Ok(verbd)) => {
            let budget = deadline
                .saturating_sub(started.elapsed())
                .saturating_sub(DEADLINE_MARGIN);
            let daemon = Daemon {
                socket,
                verbd: &verbd,
            };
            (frontend.decide)(&input, daemon, budget)
        }
        (Ok(_), Err(e)) => in_runtime_terms(HookOutcome::deny(&format!(
            "verbd blocked this tool call: the hook cannot locate its own binary ({e}); report this to the user"
        ))),
        (Err(e), _) => in_runtime_terms(HookOutcome::deny(&format!(
            "verbd blocked this tool call: {}",
            Refusal::Unreadable(e)
        ))),
    };
    if !hard_deadline::claim_output() {
        // Only the deadline's handler or the panic hook claims first, and both end the
        // process themselves; should either not have, the answer is still deny.
        return 2;
    }
    print_outcome(&outcome);
    outcome.exit_code
}

/// The `settings.json` snippet for `verbd hook claude-code --print-settings`: a PreToolUse
/// command hook in exec form on the file-editing tools, with a timeout above the deadline so
/// the hook's own deny answer always arrives before Claude Code gives up on it (which would
/// let the edit through). `socket` is written into the arguments when the daemon listens
/// somewhere other than the default (e.g. `/run/verbd/verbd.sock` under systemd).
pub fn settings_snippet(verbd_binary: &Path, socket: Option<&Path>, deadline: Duration) -> String {
    let mut args = vec!["hook".to_string(), "claude-code".to_string()];
    if let Some(socket) = socket {
        args.push("--socket".into());
        args.push(socket.to_string_lossy().into_owned());
    }
    let deadline_secs = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
    let snippet = json!({
        "hooks": {
            "PreToolUse": [{
                "matcher": HOOK_MATCHER,
                "hooks": [{
                    "type": "command",
                    "command": verbd_binary.to_string_lossy(),
                    "args": args,
                    "timeout": deadline_secs + 5,
                }]
            }]
        }
    });
    let mut text = serde_json::to_string_pretty(&snippet).expect("values always serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_follows_symlinks_and_appends_the_missing_rest() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("real/target"), base.join("dangling")).unwrap();
        let cwd = base.to_str().unwrap();
        let resolve = |p: &str| resolve_as_kernel_would(p, Some(cwd));
        assert_eq!(resolve("link/new/x").unwrap(), base.join("real/new/x"));
        assert_eq!(resolve("dangling").unwrap(), base.join("real/target"));
        assert_eq!(resolve("link/../real/./y").unwrap(), base.join("real/y"));
        assert!(resolve("missing/../x").is_err());
        assert!(resolve_as_kernel_would("rel", None).is_err());
        std::os::unix::fs::symlink(base.join("loop"), base.join("loop")).unwrap();
        assert!(resolve("loop/x").is_err());
    }

    #[test]
    fn deny_reason_is_capped() {
        let outcome = HookOutcome::deny(&"x".repeat(20_000));
        let body: Value = serde_json::from_str(&outcome.stdout).unwrap();
        let reason = body["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(reason.chars().count() <= MAX_REASON_CHARS + 1);
    }

    #[test]
    fn snippet_timeout_exceeds_the_deadline() {
        let text = settings_snippet(
            Path::new("/usr/local/bin/verbd"),
            None,
            Duration::from_millis(4500),
        );
        let value: Value = serde_json::from_str(&text).unwrap();
        let hook = &value["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(hook["command"], "/usr/local/bin/verbd");
        assert_eq!(hook["args"], json!(["hook", "claude-code"]));
        assert_eq!(hook["timeout"], 10);
        assert_eq!(value["hooks"]["PreToolUse"][0]["matcher"], HOOK_MATCHER);
    }
}
