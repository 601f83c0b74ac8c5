//! `verbd hook gemini-cli`: the same decisions as `verbd hook claude-code`, spoken in Gemini
//! CLI's `BeforeTool` hook protocol.
//!
//! Gemini CLI pipes `{"hook_event_name":"BeforeTool","tool_name":…,"tool_input":{…},"cwd":…}`
//! to the hook. `run_shell_command` is the shell tool (`command`, optional `dir_path`),
//! `write_file` and `replace` write a file (`file_path`). The call is read as the Claude Code
//! PreToolUse call it stands for (Bash, Write, Edit; `dir_path` joins `cwd`), decided by
//! [`claude_hook::decide`], and the answer is written back in Gemini's terms: no decision is
//! `{}` with exit 0; a rewrite is `{"hookSpecificOutput":{"hookEventName":"BeforeTool",
//! "tool_input":{…}}}` with exit 0 (Gemini merges it over the model's arguments); a denial is
//! `{"decision":"deny","reason":…}` on stdout, the reason on stderr, exit 2.
//!
//! Invariant: fails closed as the Claude Code hook does. Gemini CLI treats an exit code other
//! than 0 and 2 as a warning and runs the tool, so every failure (input that is not a
//! `BeforeTool` call, anything [`claude_hook::decide`] refuses, the hard deadline, a panic) is the
//! deny answer with exit 2.
#![forbid(unsafe_code)]

use super::claude_hook::{self, Daemon, Frontend, HookOutcome};
use crate::exit::{EXIT_HOOK_DENIED, EXIT_SUCCESS};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::Duration;

/// The `matcher` for Gemini CLI's settings: the shell tool and the two file-writing tools.
pub const HOOK_MATCHER: &str = "run_shell_command|write_file|replace";

/// Gemini CLI tool names and the Claude Code tools they stand for.
const TOOLS: &[(&str, &str)] = &[
    ("run_shell_command", "Bash"),
    ("write_file", "Write"),
    ("replace", "Edit"),
];

/// The Claude Code PreToolUse call a Gemini CLI BeforeTool call stands for, or why it is none.
fn as_pre_tool_use(stdin: &[u8]) -> Result<Vec<u8>, String> {
    if stdin.len() > claude_hook::MAX_HOOK_INPUT_BYTES {
        return Err(format!(
            "the hook input is larger than {} bytes",
            claude_hook::MAX_HOOK_INPUT_BYTES
        ));
    }
    let value: Value = serde_json::from_slice(stdin)
        .map_err(|e| format!("the hook input is not valid JSON ({e})"))?;
    let Value::Object(mut call) = value else {
        return Err("the hook input is not a JSON object".into());
    };
    match call.get("hook_event_name").and_then(Value::as_str) {
        Some("BeforeTool") => {}
        other => {
            return Err(format!(
                "the hook input is not a BeforeTool call (hook_event_name {other:?})"
            ));
        }
    }
    let tool = call
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or("the hook input has no tool_name string")?
        .to_string();
    let claude_tool = TOOLS
        .iter()
        .find(|(gemini, _)| *gemini == tool)
        .map_or(tool.as_str(), |(_, claude)| claude)
        .to_string();
    // The shell tool runs in `dir_path` (relative to the workspace `cwd`) when it names one.
    if claude_tool == "Bash"
        && let Some(Value::String(dir)) = call.get("tool_input").and_then(|i| i.get("dir_path"))
    {
        let cwd = call.get("cwd").and_then(Value::as_str).map(Path::new);
        let joined = match cwd {
            _ if Path::new(dir).is_absolute() => Some(Path::new(dir).to_path_buf()),
            Some(cwd) if cwd.is_absolute() => Some(cwd.join(dir)),
            _ => None,
        };
        match joined {
            Some(path) => {
                call.insert("cwd".into(), Value::String(path.display().to_string()));
            }
            None => {
                call.remove("cwd");
            }
        }
    }
    call.insert("hook_event_name".into(), json!("PreToolUse"));
    call.insert("tool_name".into(), Value::String(claude_tool));
    serde_json::to_vec(&call).map_err(|e| e.to_string())
}

/// The Gemini CLI BeforeTool protocol, for [`claude_hook::run`].
pub const FRONTEND: Frontend = Frontend {
    decide,
    in_runtime_terms: translate,
};

/// Gemini CLI's answer for a Claude Code hook outcome.
pub fn translate(outcome: HookOutcome) -> HookOutcome {
    if outcome.exit_code != i32::from(EXIT_SUCCESS) {
        let reason = outcome.stderr.trim_end().to_string();
        return deny(&reason);
    }
    if outcome.stdout.trim().is_empty() {
        return HookOutcome {
            exit_code: EXIT_SUCCESS.into(),
            stdout: "{}\n".into(),
            stderr: String::new(),
        };
    }
    let updated: Option<Map<String, Value>> = serde_json::from_str::<Value>(&outcome.stdout)
        .ok()
        .and_then(|v| v["hookSpecificOutput"]["updatedInput"].as_object().cloned());
    match updated {
        Some(tool_input) => {
            let body = json!({
                "hookSpecificOutput": {
                    "hookEventName": "BeforeTool",
                    "tool_input": tool_input,
                }
            });
            HookOutcome {
                exit_code: EXIT_SUCCESS.into(),
                stdout: format!("{body}\n"),
                stderr: String::new(),
            }
        }
        None => deny(
            "verbd blocked this tool call: the hook produced an answer it cannot translate; report this to the user",
        ),
    }
}

/// Block the tool call in Gemini CLI's terms: deny JSON, the reason on stderr, exit 2.
pub fn deny(reason: &str) -> HookOutcome {
    let body = json!({ "decision": "deny", "reason": reason });
    HookOutcome {
        exit_code: EXIT_HOOK_DENIED.into(),
        stdout: format!("{body}\n"),
        stderr: format!("{reason}\n"),
    }
}

/// Decide one Gemini CLI BeforeTool call, as [`claude_hook::decide`] does for Claude Code.
pub fn decide(stdin: &[u8], daemon: Daemon<'_>, deadline: Duration) -> HookOutcome {
    match as_pre_tool_use(stdin) {
        Ok(call) => translate(claude_hook::decide_as(
            &call,
            daemon,
            deadline,
            claude_hook::Runtime::GeminiCli,
        )),
        Err(why) => deny(&format!("verbd blocked this tool call: {why}")),
    }
}

/// The `settings.json` snippet for `verbd hook gemini-cli --print-settings`: a BeforeTool
/// command hook on the shell and file-writing tools, its timeout (milliseconds) above the
/// hook's own deadline so the deny answer always arrives first.
pub fn settings_snippet(verbd_binary: &Path, socket: Option<&Path>, deadline: Duration) -> String {
    let mut words = vec![
        verbd_binary.to_string_lossy().into_owned(),
        "hook".into(),
        "gemini-cli".into(),
    ];
    if let Some(socket) = socket {
        words.push("--socket".into());
        words.push(socket.to_string_lossy().into_owned());
    }
    let snippet = json!({
        "hooks": {
            "BeforeTool": [{
                "matcher": HOOK_MATCHER,
                "hooks": [{
                    "name": "verbd",
                    "type": "command",
                    "command": shell_words::join(&words),
                    "timeout": deadline.as_millis() as u64 + 5_000,
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
    fn a_shell_call_reads_as_bash_in_its_directory() {
        let input = br#"{"session_id":"s","transcript_path":"/tmp/t.json","cwd":"/srv/app","hook_event_name":"BeforeTool","timestamp":"2026-01-01T00:00:00Z","tool_name":"run_shell_command","tool_input":{"command":"ls","dir_path":"sub"}}"#;
        let call: Value = serde_json::from_slice(&as_pre_tool_use(input).unwrap()).unwrap();
        assert_eq!(call["hook_event_name"], "PreToolUse");
        assert_eq!(call["tool_name"], "Bash");
        assert_eq!(call["cwd"], "/srv/app/sub");
        assert_eq!(call["tool_input"]["command"], "ls");
    }

    #[test]
    fn anything_but_a_before_tool_call_is_denied() {
        for input in [
            &br#"{"hook_event_name":"AfterTool","tool_name":"run_shell_command","tool_input":{"command":"ls"}}"#[..],
            br#"{"tool_name":"run_shell_command","tool_input":{"command":"ls"}}"#,
            b"[]",
            b"",
        ] {
            let err = as_pre_tool_use(input).unwrap_err();
            let outcome = deny(&err);
            assert_eq!(outcome.exit_code, 2, "{err}");
        }
    }

    #[test]
    fn answers_are_written_in_gemini_terms() {
        let pass = translate(HookOutcome {
            exit_code: 0,
            stdout: String::new(),
            stderr: String::new(),
        });
        assert_eq!((pass.exit_code, pass.stdout.as_str()), (0, "{}\n"));
        let refused = translate(HookOutcome {
            exit_code: 2,
            stdout: "{}".into(),
            stderr: "no\n".into(),
        });
        assert_eq!(refused.exit_code, 2);
        let body: Value = serde_json::from_str(&refused.stdout).unwrap();
        assert_eq!(body, json!({"decision": "deny", "reason": "no"}));
    }
}
