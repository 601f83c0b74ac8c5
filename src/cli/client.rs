//! Client commands: send one request to the daemon, print the answer for a person (or as JSON),
//! and map it to an exit code. Everything a requester or a verb wrote is printed through
//! `verbd::terminal`, the one escaping function for untrusted text.
#![forbid(unsafe_code)]

use super::{
    EXIT_BUSY, EXIT_CONFIRM, EXIT_DENIED, EXIT_ERROR, EXIT_INVALID, EXIT_SIGNAL_BASE,
    EXIT_TIMED_OUT, EXIT_UNAVAILABLE, parse_kv,
};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use verbd::protocol::{OutputStream, ProposalView, Request, Response, RunResult, State, StreamAsk};
use verbd::terminal;

/// Deadline for client calls: verbs can run long, so be generous; connection errors are instant.
pub const CALL_DEADLINE: Duration = Duration::from_secs(15 * 60);

fn request(socket: &Path, req: &Request) -> Result<Response, ExitCode> {
    request_printing_chunks(socket, req, false).map(|(response, _)| response)
}

/// [`request`], printing each chunk of a streaming verb's output as it arrives (as a JSON
/// line with `json`); also returns the text printed so, of stdout and of stderr.
fn request_printing_chunks(
    socket: &Path,
    req: &Request,
    json: bool,
) -> Result<(Response, [String; 2]), ExitCode> {
    let mut printed = [String::new(), String::new()];
    let mut print = |stream: OutputStream, text: &str| {
        printed[stream as usize].push_str(text);
        if json {
            let frame = Response::Chunk {
                stream,
                text: text.to_string(),
            };
            println!("{}", String::from_utf8_lossy(&frame.encode()).trim_end());
            return ControlFlow::Continue(());
        }
        let _ = match stream {
            OutputStream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).and_then(|()| out.flush())
            }
            OutputStream::Stderr => std::io::stderr().write_all(text.as_bytes()),
        };
        ControlFlow::Continue(())
    };
    let response = verbd::client::request_streaming(socket, req, CALL_DEADLINE, &mut print)
        .map_err(|e| {
            eprintln!("verbd: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        })?;
    Ok((response, printed))
}

/// What of `full` (a final answer's output) was not printed as chunks already.
pub fn not_yet_printed<'a>(full: &'a str, printed: &str) -> &'a str {
    full.strip_prefix(printed).unwrap_or_default()
}

/// How `verbd call` asks.
pub enum CallMode {
    /// A `call`: an idempotency key, and the stream bounds it asks for (a streaming verb's
    /// output is printed as it comes; a verb that does not stream answers once, as always).
    Call {
        idempotency_key: Option<String>,
        stream: StreamAsk,
    },
    /// `--break-glass`: a [`Request::BreakGlass`].
    BreakGlass,
}

/// `verbd call VERB key=value…`
pub fn call(
    socket: &Path,
    verb: String,
    args: &[String],
    reason: Option<String>,
    mode: CallMode,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let args = verbd::policy::text_args(&parse_kv(args)?);
    let req = match mode {
        CallMode::BreakGlass => Request::BreakGlass { verb, args, reason },
        CallMode::Call {
            idempotency_key,
            stream,
        } => Request::Call {
            verb,
            args,
            reason,
            idempotency_key,
            stream: Some(stream),
        },
    };
    send(socket, &req, None, json)
}

/// Send a request whose answer is a run, a decision or an info line. `wanted` is the state a
/// `decided` answer must report for the command to have done what it asked.
pub fn send(
    socket: &Path,
    req: &Request,
    wanted: Option<State>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (response, printed) = match request_printing_chunks(socket, req, json) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    if json {
        println!("{}", String::from_utf8_lossy(&response.encode()).trim_end());
    }
    match &response {
        Response::Ok { result, .. } => {
            if json {
                return Ok(exit_of_result(result));
            }
            // A streaming verb's output was printed as it came.
            let stdout = not_yet_printed(&result.stdout, &printed[0]);
            let stderr = not_yet_printed(&result.stderr, &printed[1]);
            let _ = std::io::stdout().write_all(stdout.as_bytes());
            let _ = std::io::stderr().write_all(stderr.as_bytes());
            print_run_notes(result);
            Ok(exit_of_result(result))
        }
        Response::Info { info } => {
            if !json {
                println!("{}", info["message"].as_str().unwrap_or_default());
            }
            Ok(ExitCode::SUCCESS)
        }
        Response::Queued { message, .. } => {
            if !json {
                println!("{}", terminal::escape(message));
            }
            Ok(ExitCode::SUCCESS)
        }
        Response::Decided { state, message, .. } => {
            if !json {
                println!("{}", terminal::escape(message));
            }
            Ok(if wanted == Some(*state) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_DENIED)
            })
        }
        other if json => Ok(exit_code_of(other)),
        other => Ok(report(other)),
    }
}

/// What the output of a run does not say, on stderr: a stream's bound that ended it, output
/// cut with bytes withheld, a timeout.
pub fn print_run_notes(result: &RunResult) {
    if let Some(bound) = result.ended_by {
        eprintln!(
            "verbd: the stream reached its {} bound; its process group was killed",
            bound.as_str()
        );
    }
    if result.stdout_truncated || result.stderr_truncated {
        eprintln!(
            "verbd: output cut (max_output, timeout or signal); the last {} bytes of stdout and {} of stderr before the cut were withheld",
            result.stdout_withheld, result.stderr_withheld
        );
    }
    if result.exit.timed_out {
        eprintln!("verbd: the verb timed out; its process group was killed");
    }
}

/// The exit code of a run's answer: 0 for a stream that reached its bound (it ended as asked),
/// else the run's own ([`exit_of_run`]).
fn exit_of_result(result: &RunResult) -> ExitCode {
    if result.ended_by.is_some() {
        ExitCode::SUCCESS
    } else {
        exit_of_run(&result.exit)
    }
}

/// The exit code of a finished run: its own, 128+N for a signal, 124 for a timeout.
fn exit_of_run(exit: &verbd::protocol::ExitInfo) -> ExitCode {
    let code = if exit.timed_out {
        i32::from(EXIT_TIMED_OUT)
    } else if let Some(sig) = exit.signal {
        EXIT_SIGNAL_BASE + sig
    } else {
        exit.code.unwrap_or(EXIT_ERROR as i32)
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Print a non-`ok` response as one line on stderr and map it to its exit code.
pub fn report(response: &Response) -> ExitCode {
    let line = match response {
        Response::Invalid { message, .. } => format!("invalid: {message}"),
        Response::Denied { reason } => format!("denied: {reason}"),
        Response::ConfirmRequired { message, .. } => message.clone(),
        Response::Busy { message } => format!("busy: {message}"),
        Response::Error { message } => format!("error: {message}"),
        other => format!("unexpected answer: {other:?}"),
    };
    eprintln!("{}", terminal::escape(&line));
    exit_code_of(response)
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

/// `verbd list`
pub fn list(socket: &Path, json: bool) -> anyhow::Result<ExitCode> {
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

/// `verbd pending`; `next_socket` is the `--socket` its `approve:` lines need.
pub fn pending(socket: &Path, next_socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
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
        print!("{}", terminal::proposal_text(p, next_socket));
    }
    Ok(ExitCode::SUCCESS)
}

/// `verbd result ID` and `verbd wait ID`: the proposal, its output, and an exit code from its
/// state (the run's own for a finished run, 75 while open, 77 denied or expired). `next_socket`
/// is the `--socket` its `approve:` line needs.
pub fn proposal(
    socket: &Path,
    next_socket: Option<&Path>,
    req: &Request,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let response = match request(socket, req) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let Response::Proposals { proposals } = &response else {
        return Ok(report(&response));
    };
    let Some(view) = proposals.first() else {
        return Ok(report(&response));
    };
    if json {
        println!("{}", serde_json::to_string_pretty(view)?);
    } else {
        print!("{}", terminal::proposal_text(view, next_socket));
        print_output(view);
    }
    let p = &view.proposal;
    Ok(match p.state {
        State::Succeeded | State::Failed => {
            let code = p.exit_code.unwrap_or(EXIT_ERROR as i32);
            ExitCode::from(code.clamp(0, 255) as u8)
        }
        State::Pending | State::Approved | State::Executing => ExitCode::from(EXIT_BUSY),
        State::Denied | State::Expired => ExitCode::from(EXIT_DENIED),
        State::UnknownOutcome | State::Resolved => ExitCode::from(EXIT_ERROR),
    })
}

/// A finished proposal's output, escaped: the approver reads it on their terminal.
fn print_output(view: &ProposalView) {
    if let Some(result) = &view.result {
        println!("  output:");
        for (stream, text) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
            for line in text.lines() {
                println!("    {stream} | {}", terminal::escape(line));
            }
        }
    }
}
