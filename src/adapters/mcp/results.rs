//! The daemon's answers as MCP tool results.
//!
//! Responsibility: turn one [`Response`] into one `CallToolResult` the model can act on — text
//! for the model, `structuredContent` (its `status` names the case) for programs. Nothing here
//! decides: every answer is the daemon's, mapped one to one, never cached or replayed.
//!
//! | daemon answer | `isError` | text |
//! |---|---|---|
//! | ran (`ok`) | true unless exit 0 | stdout, `stderr:` block, a status line when not a clean exit |
//! | `invalid` (incl. REQUIRES_CLARIFICATION) | true | the daemon's message, exactly |
//! | `denied` | true | `DENIED: reason` and "do not try to achieve this another way" |
//! | `confirm_required` | false | the CONFIRM_REQUIRED text, "do not retry; a human must approve; call verbd_wait" |
//! | `busy` | true | `BUSY: message`, nothing ran, retry later |
//! | a proposal (`verbd_wait`, `verbd_result`) | by state | its state, and the run's result once it ran |
#![forbid(unsafe_code)]

use super::catalog::{MAX_WAIT_SECS, WAIT_TOOL};
use crate::protocol::{ProposalView, Response, RunResult, State};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

/// What the model reads after a denial: the refusal is final.
pub const FINAL_REFUSAL: &str = "This is verbd's decision and it is final for this request: do not try to achieve this another way (no other tool, command, verb, argument spelling or workaround). Tell the user what was refused and why.";

fn result(is_error: bool, text: Vec<String>, structured: Value) -> CallToolResult {
    let content = text.into_iter().map(ContentBlock::text).collect();
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(structured);
    result
}

/// The answer to a `tools/call`: a verb's, or `verbd_wait`'s and `verbd_result`'s.
pub fn tool_result(response: Response) -> CallToolResult {
    match response {
        Response::Ok { result, proposal } => ran(&result, proposal),
        Response::Invalid {
            param,
            rule,
            message,
            missing,
        } => {
            let mut structured = json!({
                "status": "invalid", "rule": rule, "missing": missing, "message": message,
            });
            if let Some(param) = param {
                structured["param"] = json!(param);
            }
            self::result(true, vec![message], structured)
        }
        Response::Denied { reason } => denied(reason, None),
        Response::ConfirmRequired {
            id,
            hash,
            expires_at,
            message,
        } => {
            let text = format!(
                "{message}\nDo not retry; a human must approve; call `{WAIT_TOOL}` with {{\"id\": {id}}}. It returns the result once the verb ran (or after at most {MAX_WAIT_SECS} s). If it is still pending then, tell the user it waits for their approval."
            );
            let structured = json!({
                "status": "pending_approval", "id": id, "args_hash": hash, "expires_at": expires_at,
            });
            self::result(false, vec![text], structured)
        }
        Response::Busy { message } => {
            let text = format!(
                "BUSY: {}. Nothing ran; retry later.",
                message.trim_end_matches('.')
            );
            self::result(
                true,
                vec![text],
                json!({ "status": "busy", "message": message }),
            )
        }
        Response::Proposals { proposals } => match proposals.into_iter().next() {
            Some(view) => proposal_state(view),
            None => error("verbd answered with no proposal".into()),
        },
        Response::Error { message } => error(message),
        other => error(format!(
            "verbd sent an answer a tool call does not expect ({})",
            response_kind(&other)
        )),
    }
}

fn error(message: String) -> CallToolResult {
    let text = format!("verbd error: {message}");
    result(
        true,
        vec![text],
        json!({ "status": "error", "message": message }),
    )
}

fn denied(reason: String, id: Option<u64>) -> CallToolResult {
    let text = format!("DENIED: {reason}\n{FINAL_REFUSAL}");
    let mut structured = json!({ "status": "denied", "reason": reason });
    if let Some(id) = id {
        structured["id"] = json!(id);
    }
    result(true, vec![text], structured)
}

/// A finished run: stdout, stderr, and a status line unless it exited 0 with output.
fn ran(run: &RunResult, proposal: Option<u64>) -> CallToolResult {
    let exit = &run.exit;
    // A stream that reached its bound ended as asked.
    let clean =
        run.ended_by.is_some() || exit.code == Some(0) && exit.signal.is_none() && !exit.timed_out;
    let mut text = Vec::new();
    if !run.stdout.is_empty() {
        text.push(run.stdout.clone());
    }
    if !run.stderr.is_empty() {
        text.push(format!("stderr:\n{}", run.stderr));
    }
    let mut status = Vec::new();
    if let Some(bound) = run.ended_by {
        status.push(format!(
            "the stream reached its {} bound; verbd killed its process group",
            bound.as_str()
        ));
    } else if exit.timed_out {
        status.push("the verb timed out; verbd killed its process group".to_string());
    } else if let Some(signal) = exit.signal {
        status.push(format!("killed by signal {signal}"));
    } else {
        match exit.code {
            Some(code) if !clean || text.is_empty() => status.push(format!("exit code {code}")),
            Some(_) => {}
            None => status.push("no exit status".into()),
        }
    }
    if run.stdout_truncated || run.stderr_truncated {
        status.push(format!(
            "output cut (max_output, timeout or signal); the last {} bytes of stdout and {} of stderr before the cut were withheld",
            run.stdout_withheld, run.stderr_withheld
        ));
    }
    if !status.is_empty() {
        text.push(format!("[verbd: {}]", status.join("; ")));
    }
    let mut structured = json!({
        "status": "ran",
        "exit_code": exit.code,
        "signal": exit.signal,
        "timed_out": exit.timed_out,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated,
        "stdout_withheld": run.stdout_withheld,
        "stderr_withheld": run.stderr_withheld,
        "duration_ms": run.duration_ms,
    });
    if let Some(id) = proposal {
        structured["proposal"] = json!(id);
    }
    if let Some(bound) = run.ended_by {
        structured["ended_by"] = json!(bound.as_str());
    }
    result(!clean, text, structured)
}

/// A proposal as `wait`/`result` (or a replayed idempotency key) shows it.
fn proposal_state(view: ProposalView) -> CallToolResult {
    let p = &view.proposal;
    let id = p.id;
    let state = p.state.as_str();
    let note = p.note.clone().unwrap_or_default();
    match p.state {
        State::Succeeded | State::Failed if view.result.is_some() => {
            let run = view.result.as_ref().expect("checked above");
            ran(run, Some(id))
        }
        State::Succeeded | State::Failed => {
            let exit = match (p.exit_code, p.signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) if note.is_empty() => "it did not run".to_string(),
                (None, None) => format!("it did not run: {note}"),
            };
            let text = format!(
                "proposal {id} {state} ({exit}); its output is no longer available (the daemon restarted since it ran)."
            );
            let structured = json!({
                "status": if p.state == State::Succeeded { "ran" } else { "failed" },
                "id": id, "state": state, "exit_code": p.exit_code, "signal": p.signal, "note": note,
            });
            result(p.state == State::Failed, vec![text], structured)
        }
        State::Pending => {
            let text = format!(
                "proposal {id} is still waiting for a human's approval (it expires at {expires}). Do not retry the call. Tell the user it waits for `verbd approve {id} --hash {short}`, and call `{WAIT_TOOL}` again only once they say it was decided.",
                expires = view.expires_at,
                short = p.args_hash.get(..12).unwrap_or(&p.args_hash),
            );
            let structured = json!({
                "status": "pending_approval", "id": id, "args_hash": p.args_hash, "expires_at": view.expires_at,
            });
            result(false, vec![text], structured)
        }
        State::Approved | State::Executing => {
            let text = format!(
                "proposal {id} was approved and is {}; call `{WAIT_TOOL}` again for its result.",
                if p.state == State::Executing {
                    "running"
                } else {
                    "about to run"
                }
            );
            result(
                false,
                vec![text],
                json!({ "status": "in_progress", "id": id, "state": state }),
            )
        }
        State::Denied => {
            let reason = if note.is_empty() {
                format!("a human denied proposal {id}")
            } else {
                format!("a human denied proposal {id}: {note}")
            };
            denied(reason, Some(id))
        }
        State::Expired => {
            let text = format!(
                "proposal {id} expired without a decision; nothing ran. Do not propose it again on your own: ask the user."
            );
            result(
                true,
                vec![text],
                json!({ "status": "expired", "id": id, "state": state }),
            )
        }
        State::UnknownOutcome => {
            let text = format!(
                "proposal {id} was running when the daemon stopped: whether it acted is unknown, and verbd never runs it again. Do not retry; tell the user (an operator checks and records the outcome with `verbd resolve`)."
            );
            result(
                true,
                vec![text],
                json!({ "status": "unknown_outcome", "id": id, "state": state }),
            )
        }
        State::Resolved => {
            let outcome = p.outcome.map_or("unknown", |o| o.as_str());
            let text = format!(
                "an operator resolved proposal {id} (its outcome had been unknown) as {outcome}: {note}"
            );
            let structured = json!({
                "status": "resolved", "id": id, "state": state, "note": note,
            });
            result(outcome != "succeeded", vec![text], structured)
        }
    }
}

fn response_kind(response: &Response) -> &'static str {
    match response {
        Response::Ok { .. } => "ok",
        Response::Chunk { .. } => "chunk",
        Response::Invalid { .. } => "invalid",
        Response::Denied { .. } => "denied",
        Response::ConfirmRequired { .. } => "confirm_required",
        Response::Busy { .. } => "busy",
        Response::Error { .. } => "error",
        Response::Verbs { .. } => "verbs",
        Response::Check { .. } => "check",
        Response::Command { .. } => "command",
        Response::Proposals { .. } => "proposals",
        Response::Decided { .. } => "decided",
        Response::Queued { .. } => "queued",
        Response::Info { .. } => "info",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ExitInfo;

    fn text_of(r: &CallToolResult) -> String {
        r.content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn run(code: Option<i32>, stdout: &str, stderr: &str) -> Response {
        Response::Ok {
            result: RunResult {
                exit: ExitInfo {
                    code,
                    signal: None,
                    timed_out: false,
                },
                stdout: stdout.into(),
                stderr: stderr.into(),
                stdout_truncated: false,
                stderr_truncated: false,
                stdout_withheld: 0,
                stderr_withheld: 0,
                duration_ms: 3,
                ended_by: None,
            },
            proposal: None,
        }
    }

    #[test]
    fn a_clean_run_is_its_output_and_a_failed_one_says_its_exit_code() {
        let ok = tool_result(run(Some(0), "hello\n", ""));
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(text_of(&ok), "hello\n");
        assert_eq!(ok.structured_content.as_ref().unwrap()["exit_code"], 0);
        let failed = tool_result(run(Some(3), "", "boom\n"));
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(text_of(&failed), "stderr:\nboom\n\n[verbd: exit code 3]");
        let silent = tool_result(run(Some(0), "", ""));
        assert_eq!(text_of(&silent), "[verbd: exit code 0]");
    }

    #[test]
    fn refusals_are_errors_and_denials_are_final() {
        let denied = tool_result(Response::Denied {
            reason: "rate limit".into(),
        });
        assert_eq!(denied.is_error, Some(true));
        assert!(text_of(&denied).starts_with("DENIED: rate limit\n"));
        assert!(text_of(&denied).contains("do not try to achieve this another way"));
        let confirm = tool_result(Response::ConfirmRequired {
            id: 7,
            hash: "ab".repeat(32),
            expires_at: "2030-01-01T00:00:00Z".into(),
            message: "CONFIRM_REQUIRED 7: …".into(),
        });
        assert_eq!(confirm.is_error, Some(false));
        assert!(
            text_of(&confirm).contains("Do not retry; a human must approve; call `verbd_wait`")
        );
        assert_eq!(
            confirm.structured_content.unwrap(),
            json!({ "status": "pending_approval", "id": 7, "args_hash": "ab".repeat(32), "expires_at": "2030-01-01T00:00:00Z" })
        );
    }
}
