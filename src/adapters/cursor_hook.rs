//! `verbd hook cursor`: Cursor's `beforeShellExecution` hook, with the decisions of `verbd hook
//! claude-code` on Bash in the terms Cursor documents.
//!
//! Cursor pipes `{"hook_event_name":"beforeShellExecution","command":…,"cwd":…,
//! "conversation_id":…,"generation_id":…,"workspace_roots":[…]}` to the hook and reads
//! `{"permission":"allow"|"deny"|"ask","user_message":…,"agent_message":…}` back; it has no
//! field to replace the command. So the call is read as the Claude Code Bash call it stands for,
//! decided by [`claude_hook::decide_as`] (journaled as `cursor Bash`), and answered: the agent's
//! own unprivileged work is `allow`; a command that stands for a verb is `deny`, the message
//! naming the `verbd call …` to run instead (the `advise` mode, whatever the role's mode says,
//! since Cursor cannot run the rewritten command); a refusal is `deny` with the daemon's reason
//! (the closest verb and what differs).
//!
//! Invariant: fails closed as the Claude Code hook does: every failure (input that is not a
//! `beforeShellExecution` call, an unreachable, erroring or slow daemon, the hard deadline, a
//! panic) is the deny answer, on stdout, with the reason on stderr and exit code 2.
#![forbid(unsafe_code)]

use super::claude_hook::{self, Daemon, Frontend, HookOutcome};
use crate::exit::{EXIT_HOOK_DENIED, EXIT_SUCCESS};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// The Claude Code PreToolUse Bash call a Cursor `beforeShellExecution` call stands for, or why
/// it is none.
fn as_pre_tool_use(stdin: &[u8]) -> Result<Vec<u8>, String> {
    if stdin.len() > claude_hook::MAX_HOOK_INPUT_BYTES {
        return Err(format!(
            "the hook input is larger than {} bytes",
            claude_hook::MAX_HOOK_INPUT_BYTES
        ));
    }
    let value: Value = serde_json::from_slice(stdin)
        .map_err(|e| format!("the hook input is not valid JSON ({e})"))?;
    let Value::Object(call) = value else {
        return Err("the hook input is not a JSON object".into());
    };
    match call.get("hook_event_name").and_then(Value::as_str) {
        Some("beforeShellExecution") => {}
        other => {
            return Err(format!(
                "the hook input is not a beforeShellExecution call (hook_event_name {other:?})"
            ));
        }
    }
    let command = call
        .get("command")
        .and_then(Value::as_str)
        .ok_or("the hook input has no command string")?;
    let mut pre_tool_use = json!({
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": { "command": command },
    });
    if let Some(cwd) = call.get("cwd").and_then(Value::as_str) {
        pre_tool_use["cwd"] = Value::String(cwd.to_string());
    }
    serde_json::to_vec(&pre_tool_use).map_err(|e| e.to_string())
}

/// Cursor's `beforeShellExecution` protocol, for [`claude_hook::run`].
pub const FRONTEND: Frontend = Frontend {
    decide,
    in_runtime_terms: translate,
};

/// Cursor's answer for a Claude Code hook outcome.
pub fn translate(outcome: HookOutcome) -> HookOutcome {
    if outcome.exit_code != i32::from(EXIT_SUCCESS) {
        return deny(outcome.stderr.trim_end());
    }
    if outcome.stdout.trim().is_empty() {
        return HookOutcome {
            exit_code: EXIT_SUCCESS.into(),
            stdout: format!("{}\n", json!({ "permission": "allow" })),
            stderr: String::new(),
        };
    }
    // A rewrite: Cursor cannot run another command, so the agent is told which one to run.
    let rewritten = serde_json::from_str::<Value>(&outcome.stdout)
        .ok()
        .and_then(|v| {
            v["hookSpecificOutput"]["updatedInput"]["command"]
                .as_str()
                .map(str::to_string)
        });
    match rewritten {
        Some(command) => deny(&format!(
            "verbd blocked this shell command: it stands for a verb; run it as `{command}` (verbd answers with the verb's output, or with CONFIRM_REQUIRED when a person must approve)"
        )),
        None => deny(
            "verbd blocked this shell command: the hook produced an answer it cannot translate; report this to the user",
        ),
    }
}

/// Block the command in Cursor's terms: `permission` `deny` with the reason for the user and
/// the agent, the reason on stderr, exit 2.
pub fn deny(reason: &str) -> HookOutcome {
    let body = json!({
        "permission": "deny",
        "user_message": reason,
        "agent_message": reason,
    });
    HookOutcome {
        exit_code: EXIT_HOOK_DENIED.into(),
        stdout: format!("{body}\n"),
        stderr: format!("{reason}\n"),
    }
}

/// Decide one Cursor `beforeShellExecution` call, as [`claude_hook::decide`] does for Bash.
pub fn decide(stdin: &[u8], daemon: Daemon<'_>, deadline: Duration) -> HookOutcome {
    match as_pre_tool_use(stdin) {
        Ok(call) => translate(claude_hook::decide_as(
            &call,
            daemon,
            deadline,
            claude_hook::Runtime::Cursor,
        )),
        Err(why) => deny(&format!("verbd blocked this shell command: {why}")),
    }
}

/// The `hooks.json` snippet for `verbd hook cursor --print-settings` (`~/.cursor/hooks.json`,
/// or `.cursor/hooks.json` in a project): a `beforeShellExecution` command hook whose timeout
/// (seconds) is above the hook's own deadline, so its deny answer always arrives first, and
/// `failClosed`, so a Cursor that knows the key blocks the command when the hook cannot answer.
pub fn settings_snippet(verbd_binary: &Path, socket: Option<&Path>, deadline: Duration) -> String {
    let mut words = vec![
        verbd_binary.to_string_lossy().into_owned(),
        "hook".into(),
        "cursor".into(),
    ];
    if let Some(socket) = socket {
        words.push("--socket".into());
        words.push(socket.to_string_lossy().into_owned());
    }
    let deadline_secs = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
    let snippet = json!({
        "version": 1,
        "hooks": {
            "beforeShellExecution": [{
                "command": shell_words::join(&words),
                "timeout": deadline_secs + 5,
                "failClosed": true,
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
        let input = br#"{"conversation_id":"c","generation_id":"g","hook_event_name":"beforeShellExecution","workspace_roots":["/srv/app"],"command":"sudo systemctl status nginx","cwd":"/srv/app"}"#;
        let call: Value = serde_json::from_slice(&as_pre_tool_use(input).unwrap()).unwrap();
        assert_eq!(call["hook_event_name"], "PreToolUse");
        assert_eq!(call["tool_name"], "Bash");
        assert_eq!(call["cwd"], "/srv/app");
        assert_eq!(call["tool_input"]["command"], "sudo systemctl status nginx");
    }

    #[test]
    fn anything_but_a_shell_call_is_denied() {
        for input in [
            &br#"{"hook_event_name":"beforeMCPExecution","command":"ls"}"#[..],
            br#"{"hook_event_name":"beforeShellExecution"}"#,
            br#"{"hook_event_name":"beforeShellExecution","command":7}"#,
            br#"{"command":"ls"}"#,
            b"[]",
            b"",
        ] {
            let err = as_pre_tool_use(input).unwrap_err();
            assert_eq!(deny(&err).exit_code, 2, "{err}");
        }
    }

    #[test]
    fn a_rewrite_becomes_a_denial_naming_the_verb_call() {
        let rewrite = HookOutcome {
            exit_code: 0,
            stdout: json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "allow", "updatedInput": {"command": "verbd call -- v 'a=b'"}}})
            .to_string(),
            stderr: String::new(),
        };
        let answer = translate(rewrite);
        assert_eq!(answer.exit_code, 2);
        let body: Value = serde_json::from_str(&answer.stdout).unwrap();
        assert_eq!(body["permission"], "deny");
        assert!(
            body["agent_message"]
                .as_str()
                .unwrap()
                .contains("run it as `verbd call -- v 'a=b'`"),
            "{body}"
        );
        let pass = translate(HookOutcome {
            exit_code: 0,
            stdout: String::new(),
            stderr: String::new(),
        });
        assert_eq!(
            (pass.exit_code, pass.stdout.as_str()),
            (0, "{\"permission\":\"allow\"}\n")
        );
    }
}
