//! `verbd sh -c 'COMMAND'`: a drop-in for an agent runtime's shell tool that never runs a
//! shell. The daemon maps the command (a `command` request, as for the Claude Code hook); a
//! command that is one verb call runs as that call, its output passed through the command's own
//! client-side filters; anything else is refused with the daemon's reason (the closest verb and
//! what differs).
//!
//! Invariants: no shell runs: the filters (`grep -i error | tail -n 5`) are pure text filters
//! by the daemon's rule, and run here as argv pipelines, their words taken as the shell would
//! take them (no substitution, variable or glob can be in them, or they would not be filters);
//! a filter with a redirection other than `2>/dev/null` is refused rather than approximated.
//! Every answer but a run has the exit code `verbd call` gives it (73 confirmation required, 77
//! denied…); a run exits as the last filter did (as a shell would), or as the verb did.
#![forbid(unsafe_code)]

use super::{EXIT_DENIED, EXIT_ERROR, EXIT_SIGNAL_BASE, EXIT_UNAVAILABLE, client};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::Duration;
use verbd::policy_tools::shell::{self, RedirectOp};
use verbd::protocol::{CommandDecision, OutputStream, Request, Response, StreamAsk, VerbCall};
use verbd::terminal;

/// How long the mapping may take (it runs no verb).
const MAP_DEADLINE: Duration = Duration::from_secs(10);

/// `verbd sh -c COMMAND`
pub fn run(socket: &Path, command: &str) -> anyhow::Result<ExitCode> {
    let request = Request::Command {
        command: command.to_string(),
        cwd: std::env::current_dir()
            .ok()
            .and_then(|d| d.to_str().map(str::to_string)),
        tool: Some("sh".into()),
    };
    let response = match verbd::client::request(socket, &request, MAP_DEADLINE) {
        Ok(response) => response,
        Err(e) => {
            eprintln!("verbd sh: {e}");
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    let decision = match response {
        Response::Command { decision } => decision,
        other => return Ok(client::report(&other)),
    };
    match decision {
        CommandDecision::Rewrite(call) => run_call(socket, &call),
        CommandDecision::Advise(call) => refuse(&format!(
            "this command stands for verb `{}`; run `{}`",
            call.verb,
            verbd::adapters::claude_hook::verb_call_command(Path::new("verbd"), socket, &call)
        )),
        CommandDecision::Refuse { reason } => refuse(&reason),
        CommandDecision::Pass { reason } => refuse(&format!(
            "verbd sh runs only commands that are a verb call, and this one is not: {}",
            reason.as_deref().unwrap_or("it maps to no verb")
        )),
    }
}

fn refuse(reason: &str) -> anyhow::Result<ExitCode> {
    eprintln!("verbd sh: denied: {}", terminal::escape(reason));
    Ok(ExitCode::from(EXIT_DENIED))
}

/// Run the verb call, a streaming verb's output printed as it comes (as `verbd call` prints
/// it); pipe its stdout through the filters when there are any, chunk by chunk.
fn run_call(socket: &Path, call: &VerbCall) -> anyhow::Result<ExitCode> {
    let filters = match call.client_side.as_deref().map(filter_argvs).transpose() {
        Ok(filters) => filters.unwrap_or_default(),
        Err(why) => return refuse(&why),
    };
    let request = Request::Call {
        verb: call.verb.clone(),
        args: verbd::policy::text_args(&call.args),
        reason: None,
        idempotency_key: None,
        // The verb's own bounds; a verb that does not stream answers once, as always.
        stream: Some(StreamAsk::default()),
    };
    if filters.is_empty() {
        return client::send(socket, &request, None, false);
    }
    let mut pipeline = Pipeline::new(&filters);
    let mut printed_stdout = String::new();
    let mut printed_stderr = String::new();
    let answer = verbd::client::request_streaming(
        socket,
        &request,
        client::CALL_DEADLINE,
        &mut |stream, text| {
            match stream {
                OutputStream::Stdout => {
                    printed_stdout.push_str(text);
                    pipeline.feed(text.as_bytes());
                }
                OutputStream::Stderr => {
                    printed_stderr.push_str(text);
                    let _ = std::io::stderr().write_all(text.as_bytes());
                }
            }
            // The first filter stopped reading (`| head -n 5` has its lines): hang up, which
            // ends the verb's run as a shell's producer ends on its broken pipe.
            if pipeline.stopped_reading() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    );
    let response = match answer {
        Ok(response) => response,
        Err(verbd::client::ClientError::Stopped) => return pipeline.finish(),
        Err(e) => {
            eprintln!("verbd sh: {e}");
            pipeline.finish()?;
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    let Response::Ok { result, .. } = response else {
        pipeline.finish()?;
        return Ok(client::report(&response));
    };
    let stderr = client::not_yet_printed(&result.stderr, &printed_stderr);
    let _ = std::io::stderr().write_all(stderr.as_bytes());
    pipeline.feed(client::not_yet_printed(&result.stdout, &printed_stdout).as_bytes());
    client::print_run_notes(&result);
    pipeline.finish()
}

/// The filters of one `verbd sh` call: started with the verb's first output, or at its end
/// (an answer that ran nothing starts none), then fed chunk by chunk.
struct Pipeline<'a> {
    filters: &'a [Filter],
    state: PipelineState,
}

enum PipelineState {
    NotStarted,
    Running {
        /// `None` once the first filter stopped reading (`head -1`): the rest is dropped.
        stdin: Option<ChildStdin>,
        children: Vec<Child>,
    },
    /// A filter could not start: the exit code a shell gives that (127 not found, else 126).
    Failed(u8),
}

impl<'a> Pipeline<'a> {
    fn new(filters: &'a [Filter]) -> Self {
        Pipeline {
            filters,
            state: PipelineState::NotStarted,
        }
    }

    /// Give `text` to the first filter, starting the filters first if they are not running.
    fn feed(&mut self, text: &[u8]) {
        if matches!(self.state, PipelineState::NotStarted) {
            self.state = spawn_filters(self.filters);
        }
        if let PipelineState::Running { stdin, .. } = &mut self.state
            && let Some(pipe) = stdin
            && pipe.write_all(text).and_then(|()| pipe.flush()).is_err()
        {
            // A filter that stops reading early closes the pipe: not an error.
            *stdin = None;
        }
    }

    /// Whether the first filter runs and has stopped reading its input.
    fn stopped_reading(&self) -> bool {
        matches!(self.state, PipelineState::Running { stdin: None, .. })
    }

    /// Close the first filter's input and wait for every filter: the last one's status, as a
    /// shell gives it. Filters that never started (the call ran nothing) give 0.
    fn finish(self) -> anyhow::Result<ExitCode> {
        let children = match self.state {
            PipelineState::NotStarted => return Ok(ExitCode::SUCCESS),
            PipelineState::Failed(code) => return Ok(ExitCode::from(code)),
            PipelineState::Running { stdin, children } => {
                drop(stdin);
                children
            }
        };
        let mut status = None;
        for mut child in children {
            status = Some(child.wait()?);
        }
        use std::os::unix::process::ExitStatusExt;
        Ok(match status {
            Some(s) if s.code().is_some() => {
                ExitCode::from(s.code().unwrap_or(0).clamp(0, 255) as u8)
            }
            Some(s) => {
                ExitCode::from((EXIT_SIGNAL_BASE + s.signal().unwrap_or(0)).clamp(0, 255) as u8)
            }
            None => ExitCode::from(EXIT_ERROR),
        })
    }
}

/// One filter stage: its argv, its assignments, whether its stderr goes to /dev/null.
struct Filter {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    quiet: bool,
}

/// The filters' argvs, as the shell would split them.
fn filter_argvs(text: &str) -> Result<Vec<Filter>, String> {
    let pipelines = shell::parse(text).map_err(|e| format!("the filters cannot be read: {e}"))?;
    let [pipeline] = pipelines.as_slice() else {
        return Err("the filters are not one pipeline".into());
    };
    pipeline
        .stages
        .iter()
        .map(|stage| {
            let mut quiet = false;
            for redirect in &stage.redirects {
                let to_null = matches!(redirect.op, RedirectOp::Write | RedirectOp::Append)
                    && redirect.fd == Some(2)
                    && redirect.target.text == "/dev/null";
                if !to_null {
                    return Err(format!(
                        "verbd sh applies no {} to a filter; drop it",
                        redirect.describe()
                    ));
                }
                quiet = true;
            }
            if stage.words.is_empty() {
                return Err("an empty filter".into());
            }
            Ok(Filter {
                argv: stage.words.iter().map(|w| w.text.clone()).collect(),
                env: stage
                    .assignments
                    .iter()
                    .map(|(name, value)| (name.clone(), value.text.clone()))
                    .collect(),
                quiet,
            })
        })
        .collect()
}

/// Start the filters, each reading the one before; the first reads a pipe of ours.
fn spawn_filters(filters: &[Filter]) -> PipelineState {
    let mut children: Vec<Child> = Vec::new();
    let mut previous: Option<std::process::ChildStdout> = None;
    for (index, filter) in filters.iter().enumerate() {
        let last = index + 1 == filters.len();
        let mut command = Command::new(&filter.argv[0]);
        command
            .args(&filter.argv[1..])
            .envs(filter.env.iter().map(|(k, v)| (k, v)))
            .stdin(match previous.take() {
                Some(out) => Stdio::from(out),
                None => Stdio::piped(),
            })
            .stdout(if last {
                Stdio::inherit()
            } else {
                Stdio::piped()
            });
        if filter.quiet {
            command.stderr(Stdio::null());
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                eprintln!("verbd sh: {}: {e}", terminal::escape(&filter.argv[0]));
                // The filters already started see the end of their input and exit.
                for mut started in children {
                    drop(started.stdin.take());
                    let _ = started.wait();
                }
                return PipelineState::Failed(if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                });
            }
        };
        previous = child.stdout.take();
        children.push(child);
    }
    let stdin = children.first_mut().and_then(|c| c.stdin.take());
    PipelineState::Running { stdin, children }
}
