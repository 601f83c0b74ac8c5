//! Transparent verbs against a real daemon. Through the Claude Code hook: the real `verbd hook
//! claude-code` binary reads real PreToolUse Bash JSON, the daemon maps the command per the
//! caller's role mode (rewrite / advise / off), journals the mapping, and the rewritten command,
//! run by bash as Claude Code would, prints what the verb printed, filtered. Every failure
//! denies (exit 2). Through `verbd sh -c`: the verb runs and its output goes through the
//! command's filters, or the command is refused with the closest verb; no shell ever runs.
use crate::common;
use common::policy::{Category, CommandMode, Param, Policy, Sandbox, Verb};
use common::*;
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use verbd::adapters::claude_hook;

/// Uids from this suite's range: an agent whose role advises, one whose role is off.
const ADVISED_UID: u32 = 63301;
const OFF_UID: u32 = 63302;

/// The roles and verbs, with no role setting a `commands` mode: [`policy`] sets them.
fn roles_and_verbs() -> Policy {
    Policy::new()
        .allow_root()
        .agents("agent", &[0])
        .agents("advised", &[ADVISED_UID])
        .agents("plain", &[OFF_UID])
        .humans("sre", &[63303])
        .approvers(&["sre"])
        .privileged_programs(&["psql"])
        .privileged_paths(&["@DIR@/logs"])
        .sandbox("logs", Sandbox::logs())
        .verb(
            "log-tail",
            Verb::log_tail(&["agent", "advised", "plain"]).sandbox("logs"),
        )
        .verb(
            "service-restart",
            Verb::command(Category::Mutating, "/usr/bin/systemctl restart {unit}")
                .description("Restart a service (needs approval)")
                .roles(&["agent"])
                .param("unit", Param::one_of(&["nginx.service"])),
        )
        .verb(
            "cache-clear",
            Verb::command(Category::Destructive, "/usr/bin/rm -rf {dir}")
                .description("Empty the cache directory")
                .roles(&["agent"])
                .dry_run("/usr/bin/ls -la {dir}")
                .param("dir", Param::path(&["@DIR@/cache"])),
        )
}

/// `agent` rewrites, `advised` advises, `plain` sets no mode (off).
fn policy() -> String {
    roles_and_verbs()
        .commands("agent", CommandMode::Rewrite)
        .commands("advised", CommandMode::Advise)
        .render()
}

fn start() -> Daemon {
    let daemon = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::create_dir(dir.join("cache")).unwrap();
        let lines: String = (1..=60)
            .map(|i| {
                if i % 7 == 0 {
                    format!("{i} ERROR upstream timed out\n")
                } else {
                    format!("{i} info request served\n")
                }
            })
            .collect();
        std::fs::write(dir.join("logs/app.log"), lines).unwrap();
    });
    daemon.open_socket();
    daemon
}

/// A PreToolUse Bash call as Claude Code sends it.
fn bash_call(command: &str, cwd: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "session_id": "0b6f3d0e-1c1f-4a55-9a53-6f2f7f3c9e21",
        "transcript_path": "/home/agent/.claude/projects/-srv/0b6f3d0e.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {
            "command": command,
            "description": "Look at the application log",
            "timeout": 120000
        },
        "tool_use_id": "toolu_01Q9dJt3Wm7xYbZkP2vH4nRs"
    }))
    .unwrap()
}

/// Run the real hook binary (as `uid`, when given) with `input` on stdin.
fn hook(daemon: &Daemon, uid: Option<u32>, input: &[u8]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["hook", "claude-code", "--socket"])
        .arg(&daemon.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn decision(output: &Output) -> Value {
    serde_json::from_slice::<Value>(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })["hookSpecificOutput"]
        .clone()
}

fn denied_reason(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let specific = decision(output);
    assert_eq!(specific["permissionDecision"], "deny", "{specific}");
    specific["permissionDecisionReason"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The command the hook rewrote the call into (exit 0, allow, the other input fields kept).
fn rewritten(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let specific = decision(output);
    assert_eq!(specific["hookEventName"], "PreToolUse");
    assert_eq!(specific["permissionDecision"], "allow", "{specific}");
    let input = &specific["updatedInput"];
    assert_eq!(input["description"], "Look at the application log");
    assert_eq!(input["timeout"], 120000);
    input["command"].as_str().unwrap().to_string()
}

/// Run a command the way Claude Code's Bash tool does.
fn run_in_bash(command: &str) -> Output {
    Command::new("/bin/bash")
        .args(["-c", command])
        .output()
        .unwrap()
}

#[test]
fn a_sudo_pipeline_is_rewritten_into_its_verb_and_prints_the_filtered_output() {
    if !require_root("a_sudo_pipeline_is_rewritten_into_its_verb_and_prints_the_filtered_output") {
        return;
    }
    let daemon = start();
    let log = daemon.path("logs/app.log");
    let original = format!(
        "cd /tmp && sudo tail -n 50 {} | grep -i error",
        log.display()
    );
    let output = hook(&daemon, None, &bash_call(&original, Path::new("/tmp")));
    let command = rewritten(&output);
    assert!(
        command.contains(" call --socket ") && command.contains(" -- log-tail "),
        "{command}"
    );
    assert!(command.ends_with(" | grep -i error"), "{command}");

    let ran = run_in_bash(&command);
    assert!(ran.status.success(), "{ran:?}");
    let expected: String = (11..=60)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("{i} ERROR upstream timed out\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), expected);

    // The daemon journaled the mapping: the command, the verb, its arguments.
    let events = daemon.journal_events();
    let mapped = events
        .iter()
        .find(|e| e["kind"] == "command_mapped")
        .expect("a command_mapped record");
    assert_eq!(mapped["decision"], "rewrite");
    assert_eq!(mapped["verb"], "log-tail");
    assert_eq!(mapped["args"]["lines"], "50");
    assert_eq!(mapped["args"]["file"], log.to_str().unwrap());
    assert_eq!(mapped["tool"], "claude-code Bash");
    assert!(
        mapped["command"]
            .as_str()
            .unwrap()
            .contains("| grep -i error"),
        "{mapped}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "exec" && e["verb"] == "log-tail"),
        "the rewritten command ran the verb"
    );
}

#[test]
fn values_are_quoted_so_the_shell_passes_each_as_one_word() {
    if !require_root("values_are_quoted_so_the_shell_passes_each_as_one_word") {
        return;
    }
    let daemon = start();
    let odd = daemon.path("logs/a log; echo INJECTED $(id).log");
    std::fs::write(&odd, "one\ntwo\n").unwrap();
    let original = format!(
        "sudo tail -n 1 {}",
        shell_words::quote(odd.to_str().unwrap())
    );
    let command = rewritten(&hook(
        &daemon,
        None,
        &bash_call(&original, Path::new("/tmp")),
    ));
    let ran = run_in_bash(&command);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "two\n", "{ran:?}");
}

#[test]
fn approvals_and_refusals_come_back_as_they_do_for_verbd_call() {
    if !require_root("approvals_and_refusals_come_back_as_they_do_for_verbd_call") {
        return;
    }
    let daemon = start();
    let command = rewritten(&hook(
        &daemon,
        None,
        &bash_call("sudo systemctl restart nginx.service", Path::new("/")),
    ));
    let ran = run_in_bash(&command);
    assert_eq!(ran.status.code(), Some(73), "{ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stderr).contains("CONFIRM_REQUIRED"),
        "{ran:?}"
    );
    assert!(
        !daemon
            .journal_events()
            .iter()
            .any(|e| e["kind"] == "exec" && e["verb"] == "service-restart"),
        "nothing ran before a human approved"
    );
}

#[test]
fn a_privileged_command_without_a_verb_is_denied_with_the_closest_verb() {
    if !require_root("a_privileged_command_without_a_verb_is_denied_with_the_closest_verb") {
        return;
    }
    let daemon = start();
    let victim = daemon.path("victim");
    std::fs::create_dir(&victim).unwrap();
    let original = format!("sudo rm -rf {}", victim.display());
    let reason = denied_reason(&hook(&daemon, None, &bash_call(&original, Path::new("/"))));
    assert!(reason.contains("`sudo`"), "{reason}");
    assert!(reason.contains("closest verb `cache-clear`"), "{reason}");
    assert!(victim.exists());

    // A path the policy names as privileged, read without sudo, beyond what the verb allows.
    let reason = denied_reason(&hook(
        &daemon,
        None,
        &bash_call("cat app.log", &daemon.path("logs")),
    ));
    assert!(reason.contains("app.log (beneath"), "{reason}");

    // A privileged program: the password the agent typed never reaches the journal.
    let reason = denied_reason(&hook(
        &daemon,
        None,
        &bash_call(
            "PGPASSWORD=hunter2-very-secret psql -h db -c 'select 1'",
            Path::new("/"),
        ),
    ));
    assert!(reason.contains("`psql`"), "{reason}");
    let journal = daemon.journal();
    assert!(journal.contains("\"decision\":\"refuse\""), "{journal}");
    assert!(!journal.contains("hunter2-very-secret"), "{journal}");
}

#[test]
fn a_command_never_reveals_what_a_path_the_caller_cannot_see_resolves_to() {
    if !require_root("a_command_never_reveals_what_a_path_the_caller_cannot_see_resolves_to") {
        return;
    }
    let daemon = start();
    // Root's private directory, which the agent (63301) cannot list or read: one name in it is
    // a link to a shell, one is a plain file, one does not exist.
    let private = daemon.path("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(
        &private,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::symlink("/bin/bash", private.join("tool")).unwrap();
    std::fs::write(private.join("data"), "x").unwrap();
    let answer = |name: &str| {
        let command = format!("sudo {} --version", private.join(name).display());
        let output = hook(
            &daemon,
            Some(63301),
            &bash_call(&command, Path::new("/tmp")),
        );
        // The answer with the asked-for name taken out: what could tell the three apart.
        let said = format!(
            "{} {}",
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout)
        );
        said.replace(name, "NAME")
    };
    let link = answer("tool");
    assert_eq!(link, answer("data"), "a link to a shell answers otherwise");
    assert_eq!(link, answer("absent"), "an existing name answers otherwise");
}

#[test]
fn the_agents_own_work_gets_no_decision() {
    if !require_root("the_agents_own_work_gets_no_decision") {
        return;
    }
    let daemon = start();
    for own in [
        "ls -la",
        "cargo test 2>&1 | tail -n 20",
        "grep -rn sudo src/",
    ] {
        let output = hook(&daemon, None, &bash_call(own, Path::new("/tmp")));
        assert_eq!(output.status.code(), Some(0), "{own}: {output:?}");
        assert!(output.stdout.is_empty(), "{own}: {output:?}");
    }
    assert!(
        !daemon.journal().contains("command_mapped"),
        "no decision, no record"
    );
}

#[test]
fn each_role_gets_its_mode() {
    if !require_root("each_role_gets_its_mode") {
        return;
    }
    let daemon = start();
    let log = daemon.path("logs/app.log");
    let original = format!("sudo tail -n 5 {}", log.display());
    let input = bash_call(&original, Path::new("/tmp"));

    // advise: denied, and the reason is the exact verbd call to make.
    let reason = denied_reason(&hook(&daemon, Some(ADVISED_UID), &input));
    let call = reason
        .split('`')
        .find(|part| part.contains(" call --socket "))
        .unwrap_or_else(|| panic!("no verbd call in {reason}"));
    assert!(call.contains("log-tail"), "{call}");
    let ran = {
        let mut command = Command::new("/bin/bash");
        command.args(["-c", call]).uid(ADVISED_UID).gid(ADVISED_UID);
        command.output().unwrap()
    };
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "56 ERROR upstream timed out\n57 info request served\n58 info request served\n59 info request served\n60 info request served\n",
        "{ran:?}"
    );

    // off: no decision, as without verbd.
    let output = hook(&daemon, Some(OFF_UID), &input);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");

    let decisions: Vec<String> = daemon
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "command_mapped")
        .map(|e| format!("{}:{}", e["caller"]["uid"], e["decision"]))
        .collect();
    assert_eq!(decisions, [format!("{ADVISED_UID}:\"advise\"")]);
}

#[test]
fn commands_mode_is_every_agent_roles_default_and_a_role_of_its_own_keeps_its_own() {
    // `[commands] mode = "rewrite"` in a fragment appended to a policy whose roles set no mode
    // (the way an operator turns transparent verbs on for a whole site): the agent role without
    // a mode of its own is rewritten; a role that says `off` stays off.
    if !require_root(
        "commands_mode_is_every_agent_roles_default_and_a_role_of_its_own_keeps_its_own",
    ) {
        return;
    }
    let policy = roles_and_verbs()
        .commands("advised", CommandMode::Off)
        .commands_mode(CommandMode::Rewrite)
        .render();
    assert!(!policy.contains("\"advise\""), "{policy}");
    let daemon = Daemon::start_with(&policy, |dir| {
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::write(dir.join("logs/app.log"), "1 ok\n2 ERROR a\n3 ERROR b\n").unwrap();
    });
    daemon.open_socket();
    let log = daemon.path("logs/app.log");
    let input = bash_call(
        &format!("sudo tail -n 3 {} | grep -c ERROR", log.display()),
        Path::new("/tmp"),
    );
    // roles.agent (uid 0) sets no mode: the policy-wide `rewrite` applies.
    let command = rewritten(&hook(&daemon, None, &input));
    assert!(
        command.contains("log-tail") && command.ends_with("| grep -c ERROR"),
        "{command}"
    );
    let ran = run_in_bash(&command);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "2\n", "{ran:?}");
    // roles.advised now says `off` itself: no decision, whatever `[commands] mode` says.
    let output = hook(&daemon, Some(ADVISED_UID), &input);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    // roles.plain sets nothing either: it is an agent role, so it is rewritten too.
    let command = rewritten(&hook(&daemon, Some(OFF_UID), &input));
    assert!(command.contains("log-tail"), "{command}");
}

#[test]
fn bash_calls_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-daemon.sock");
    let input = bash_call("ls -la", Path::new("/tmp"));
    let daemon_down = claude_hook::decide(
        &input,
        claude_hook::Daemon {
            socket: &missing,
            verbd: Path::new(BIN),
        },
        std::time::Duration::from_secs(5),
    );
    assert_eq!(daemon_down.exit_code, 2, "{daemon_down:?}");
    assert!(
        daemon_down.stdout.contains("verbd is not running"),
        "{daemon_down:?}"
    );

    for junk in [
        &br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{}}"#[..],
        br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":7}}"#,
        b"{\"tool_name\":\"Bash\",",
    ] {
        let outcome = claude_hook::decide(
            junk,
            claude_hook::Daemon {
                socket: &missing,
                verbd: Path::new(BIN),
            },
            std::time::Duration::from_secs(5),
        );
        assert_eq!(outcome.exit_code, 2, "{outcome:?}");
    }
}

/// A BeforeTool call for the shell tool as Gemini CLI sends it.
fn gemini_shell_call(command: &str, cwd: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "session_id": "e3b1f0c2-55aa-4c1e-9d0f-2b7a8c9d1e3f",
        "transcript_path": "/home/agent/.gemini/tmp/chats/session-e3b1f0c2.json",
        "cwd": cwd,
        "hook_event_name": "BeforeTool",
        "timestamp": "2026-12-06T05:40:00.000Z",
        "tool_name": "run_shell_command",
        "tool_input": {
            "command": command,
            "description": "Look at the application log"
        }
    }))
    .unwrap()
}

/// Run the real `verbd hook gemini-cli` with `input` on stdin.
fn gemini_hook(socket: &Path, input: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(["hook", "gemini-cli", "--socket"])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn gemini_cli_shell_calls_are_rewritten_denied_or_left_alone_in_its_terms() {
    if !require_root("gemini_cli_shell_calls_are_rewritten_denied_or_left_alone_in_its_terms") {
        return;
    }
    let daemon = start();
    let log = daemon.path("logs/app.log");
    let original = format!("sudo tail -n 50 {} | grep -i error", log.display());
    let output = gemini_hook(
        &daemon.socket,
        &gemini_shell_call(&original, Path::new("/tmp")),
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["hookSpecificOutput"]["hookEventName"], "BeforeTool");
    let input = &answer["hookSpecificOutput"]["tool_input"];
    assert_eq!(input["description"], "Look at the application log");
    let command = input["command"].as_str().unwrap();
    assert!(command.contains(" -- log-tail "), "{command}");
    let ran = run_in_bash(command);
    let expected: String = (11..=60)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("{i} ERROR upstream timed out\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), expected, "{ran:?}");
    let mapped = daemon
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "command_mapped")
        .expect("a command_mapped record");
    assert_eq!(mapped["tool"], "gemini-cli Bash", "{mapped}");

    // A privileged command with no verb: Gemini's deny, exit 2, the reason on stderr too.
    let victim = daemon.path("victim");
    std::fs::create_dir(&victim).unwrap();
    let output = gemini_hook(
        &daemon.socket,
        &gemini_shell_call(&format!("sudo rm -rf {}", victim.display()), Path::new("/")),
    );
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["decision"], "deny", "{answer}");
    let reason = answer["reason"].as_str().unwrap();
    assert!(reason.contains("closest verb `cache-clear`"), "{reason}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("closest verb `cache-clear`"));

    // The agent's own work: `{}`, exit 0.
    let output = gemini_hook(
        &daemon.socket,
        &gemini_shell_call("ls -la", Path::new("/tmp")),
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "{}\n");

    // A daemon that is down, or input that is not a BeforeTool call: deny, exit 2.
    let missing = daemon.path("no-daemon.sock");
    for input in [
        gemini_shell_call("ls -la", Path::new("/tmp")),
        br#"{"hook_event_name":"AfterTool","tool_name":"run_shell_command","tool_input":{"command":"ls"}}"#.to_vec(),
        b"{\"tool_name\":".to_vec(),
    ] {
        let output = gemini_hook(&missing, &input);
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(answer["decision"], "deny", "{answer}");
    }
}

/// A beforeShellExecution call as Cursor sends it (its hooks documentation's fields).
fn cursor_shell_call(command: &str, cwd: &Path) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "conversation_id": "668320d2-2fd8-4888-b33c-2a466fec86e7",
        "generation_id": "490b90b7-a2ce-4c2c-bb76-cb77b125df2f",
        "model": "claude-4-sonnet",
        "hook_event_name": "beforeShellExecution",
        "cursor_version": "2.0.77",
        "workspace_roots": ["/srv/app"],
        "user_email": "agent@example.com",
        "command": command,
        "cwd": cwd,
    }))
    .unwrap()
}

/// Run the real `verbd hook cursor` with `input` on stdin.
fn cursor_hook(socket: &Path, input: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(["hook", "cursor", "--socket"])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Cursor cannot rewrite a command: a command that stands for a verb is denied with the `verbd
/// call` to run (which, run, prints the verb's output filtered), a privileged one with the
/// closest verb, the agent's own work is allowed, and every failure denies; all in Cursor's
/// `permission` terms, each denial with exit 2.
#[test]
fn cursor_shell_calls_are_denied_with_the_verb_to_call_or_allowed() {
    if !require_root("cursor_shell_calls_are_denied_with_the_verb_to_call_or_allowed") {
        return;
    }
    let daemon = start();
    let log = daemon.path("logs/app.log");
    let denied = |output: &Output| -> String {
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(answer["permission"], "deny", "{answer}");
        let message = answer["agent_message"].as_str().unwrap().to_string();
        assert_eq!(answer["user_message"], message.as_str());
        assert!(String::from_utf8_lossy(&output.stderr).contains(&message));
        message
    };

    let original = format!("sudo tail -n 50 {} | grep -i error", log.display());
    let message = denied(&cursor_hook(
        &daemon.socket,
        &cursor_shell_call(&original, Path::new("/tmp")),
    ));
    let command = message
        .split_once("run it as `")
        .and_then(|(_, rest)| rest.split_once("` (verbd answers"))
        .map(|(command, _)| command)
        .unwrap_or_else(|| panic!("no verbd call in {message}"));
    assert!(command.contains(" -- log-tail "), "{command}");
    let ran = run_in_bash(command);
    let expected: String = (11..=60)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("{i} ERROR upstream timed out\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&ran.stdout), expected, "{ran:?}");
    let mapped = daemon
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "command_mapped")
        .expect("a command_mapped record");
    assert_eq!(mapped["tool"], "cursor Bash", "{mapped}");

    // A privileged command with no verb: the closest verb.
    let victim = daemon.path("victim");
    std::fs::create_dir(&victim).unwrap();
    let message = denied(&cursor_hook(
        &daemon.socket,
        &cursor_shell_call(&format!("sudo rm -rf {}", victim.display()), Path::new("/")),
    ));
    assert!(message.contains("closest verb `cache-clear`"), "{message}");
    assert!(victim.exists());

    // The agent's own work: allowed, exit 0.
    let output = cursor_hook(
        &daemon.socket,
        &cursor_shell_call("ls -la", Path::new("/tmp")),
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"permission\":\"allow\"}\n"
    );

    // A daemon that is down, or input that is not a beforeShellExecution call: deny.
    let missing = daemon.path("no-daemon.sock");
    let not_a_shell_call = br#"{"hook_event_name":"beforeMCPExecution","tool_name":"q","tool_input":"{}","command":"npx mcp"}"#;
    for (socket, input) in [
        (&missing, cursor_shell_call("ls -la", Path::new("/tmp"))),
        (&daemon.socket, not_a_shell_call.to_vec()),
        (&daemon.socket, b"{\"command\":".to_vec()),
        (&daemon.socket, Vec::new()),
    ] {
        denied(&cursor_hook(socket, &input));
    }
}

/// `verbd sh -c COMMAND` against the daemon.
fn sh(daemon: &Daemon, command: &str) -> Output {
    Command::new(BIN)
        .args(["sh", "--socket"])
        .arg(&daemon.socket)
        .args(["-c", command])
        .current_dir("/tmp")
        .output()
        .unwrap()
}

#[test]
fn verbd_sh_runs_the_verb_and_the_filters_without_a_shell() {
    if !require_root("verbd_sh_runs_the_verb_and_the_filters_without_a_shell") {
        return;
    }
    let daemon = start();
    let log = daemon.path("logs/app.log");
    let output = sh(
        &daemon,
        &format!(
            "sudo tail -n 50 {} | grep -i error | LC_ALL=C tail -n 2",
            log.display()
        ),
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "49 ERROR upstream timed out\n56 ERROR upstream timed out\n"
    );
    let events = daemon.journal_events();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "command_mapped" && e["tool"] == "sh" && e["verb"] == "log-tail"),
        "{events:?}"
    );

    // The filters' exit status is the command's, as in a shell (`grep -c` found nothing: 1).
    let output = sh(
        &daemon,
        &format!("tail -n 3 {} | grep -c ERROR", log.display()),
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "0\n");

    // Without filters: the verb's output as `verbd call` prints it.
    let output = sh(&daemon, &format!("sudo tail -n 1 {}", log.display()));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "60 info request served\n",
        "{output:?}"
    );
}

#[test]
fn verbd_sh_refuses_everything_that_is_not_a_verb_call() {
    if !require_root("verbd_sh_refuses_everything_that_is_not_a_verb_call") {
        return;
    }
    let daemon = start();
    let marker = daemon.path("ran");
    let victim = daemon.path("victim");
    std::fs::create_dir(&victim).unwrap();
    let log = daemon.path("logs/app.log");
    let cases = [
        (
            format!("touch {}", marker.display()),
            "no verb runs `touch`",
        ),
        (
            format!("sudo rm -rf {}", victim.display()),
            "closest verb `cache-clear`",
        ),
        (
            format!(
                "sudo tail -n 5 {} | grep x > {}",
                log.display(),
                marker.display()
            ),
            "not a pure text filter",
        ),
        (
            format!(
                "sudo tail -n 5 {}; touch {}",
                log.display(),
                marker.display()
            ),
            "run it as a command of its own",
        ),
        (
            format!("sudo tail -n 5 $(touch {})", marker.display()),
            "substitution",
        ),
    ];
    for (command, fragment) in cases {
        let output = sh(&daemon, &command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(77), "{command}: {output:?}");
        assert!(stderr.contains(fragment), "{command}: {stderr}");
    }
    assert!(!marker.exists(), "verbd sh never runs a shell");
    assert!(victim.exists());

    // A verb that needs approval answers as `verbd call` does.
    let output = sh(&daemon, "sudo systemctl restart nginx.service");
    assert_eq!(output.status.code(), Some(73), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("CONFIRM_REQUIRED"));
}

const SITE: &str = "tests/data/transparent/site.toml";
const CORPUS_READ_ONLY: &str = "tests/data/transparent/corpus-read-only.txt";
const CORPUS_CHANGES: &str = "tests/data/transparent/corpus-changes-and-secrets.txt";

/// `verbd policy coverage` of a corpus file against the site's policy, as JSON.
fn coverage(corpus: &str) -> Value {
    let output = Command::new(BIN)
        .args([
            "policy", "coverage", SITE, "--from", corpus, "--format", "json",
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("coverage of {corpus}: {e}: {output:?}"))
}

#[test]
fn the_corpus_is_covered_without_an_unsafe_verb() {
    let lines = |f: &str| std::fs::read_to_string(f).unwrap().lines().count();
    assert!(lines(CORPUS_READ_ONLY) + lines(CORPUS_CHANGES) >= 500);
    let read_only = coverage(CORPUS_READ_ONLY);
    let summary = &read_only["summary"];
    let (covered, commands) = (
        summary["covered"].as_u64().unwrap(),
        summary["commands"].as_u64().unwrap(),
    );
    assert!(
        covered * 100 >= commands * 95,
        "{covered}/{commands} read-only commands covered: {summary}"
    );
    assert_eq!(summary["dangerous_without_approval"], 0, "{summary}");
    // The README reports this figure; it must be the one measured here.
    let percent = covered as f64 * 100.0 / commands as f64;
    let claim = format!("**{covered} of {commands} read-only commands ({percent:.1} %)**");
    let readme = std::fs::read_to_string("README.md").unwrap();
    assert!(readme.contains(&claim), "README.md must report {claim}");
    let changes = coverage(CORPUS_CHANGES);
    assert_eq!(
        changes["summary"]["dangerous_without_approval"], 0,
        "{}",
        changes["summary"]
    );
    for command in changes["commands"].as_array().unwrap() {
        if command["status"] == "covered" {
            assert_eq!(
                command["needs_approval"], true,
                "a change or a secret read runs without a human: {command}"
            );
        }
    }
}

/// The site's agent (tests/data/transparent/site.toml).
const SITE_AGENT_UID: u32 = 63304;

/// A directory under /usr (which every pack's sandbox may read and run from), removed on drop.
struct FakePrograms(std::path::PathBuf);

impl Drop for FakePrograms {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The site's policy, loadable on this host: includes by absolute path, and every program a
/// pack names that this host lacks replaced by a copy of `echo` of the same name in `bin` (the
/// mapping goes by program name; an echo run prints the argv the verb built).
fn site_policy_for_this_host(bin: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(SITE)).unwrap();
    let program = regex::Regex::new(r#"(?m)^(?:command|dry_run) = "(/[^ "]+)"#).unwrap();
    let include = regex::Regex::new(
        r#"(?m)^  (\{ path = )?"\.\./\.\./\.\./policy/packs/([a-z]+)\.toml"(.*?)( \})?,$"#,
    )
    .unwrap();
    include
        .replace_all(&text, |c: &regex::Captures| {
            let pack = root.join(format!("policy/packs/{}.toml", &c[2]));
            let pack_text = std::fs::read_to_string(&pack).unwrap();
            let mut fakes: Vec<String> = Vec::new();
            for found in program.captures_iter(&pack_text) {
                let path = Path::new(&found[1]);
                let name = path.file_name().unwrap().to_str().unwrap();
                if !path.exists() && !fakes.iter().any(|f| f.starts_with(&format!("\"{name}\""))) {
                    let fake = bin.join(name);
                    std::fs::copy("/usr/bin/echo", &fake).unwrap();
                    fakes.push(format!("\"{name}\" = \"{}\"", fake.display()));
                }
            }
            let narrowing = c.get(3).map_or("", |m| m.as_str());
            let programs = if fakes.is_empty() {
                String::new()
            } else {
                format!(", programs = {{ {} }}", fakes.join(", "))
            };
            format!(
                "  {{ path = \"{}\"{narrowing}{programs} }},",
                pack.display()
            )
        })
        .into_owned()
}

#[test]
fn corpus_lines_are_rewritten_through_the_hook_as_coverage_maps_them() {
    if !require_root("corpus_lines_are_rewritten_through_the_hook_as_coverage_maps_them") {
        return;
    }
    let dir = open_tempdir();
    let fakes = FakePrograms(std::path::PathBuf::from(format!(
        "/usr/local/lib/verbd-test-fakes-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&fakes.0).unwrap();
    let policy = site_policy_for_this_host(&fakes.0).replace(
        "[roles.agent]",
        "[daemon]\nallow_root = true\n\n[roles.agent]",
    );
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("pg_password"), "corpus-pg-password").unwrap();
    std::fs::write(
        credentials.join("kubeconfig"),
        "apiVersion: v1\nkind: Config\n",
    )
    .unwrap();
    for name in ["pg_password", "kubeconfig"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            credentials.join(name),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    let daemon = Daemon::spawn_in(
        dir,
        &policy,
        &[("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap())],
    );
    daemon.wait_ready();
    daemon.open_socket();
    // The real hook binary, as the site's agent.
    let decide = |line: &str| {
        let output = hook(
            &daemon,
            Some(SITE_AGENT_UID),
            &bash_call(line, Path::new("/srv")),
        );
        claude_hook::HookOutcome {
            exit_code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    };

    // A report names its recorded line as `file:N`; the hook gets the whole line (`cd DIR && …`).
    let line_of = |corpus: &str, command: &Value| -> String {
        let number: usize = command["source"]
            .as_str()
            .and_then(|s| s.rsplit(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        std::fs::read_to_string(corpus)
            .unwrap()
            .lines()
            .nth(number - 1)
            .unwrap()
            .to_string()
    };
    // Every third covered line (each is a hook process of its own), and every line of the changes.
    let mut rewritten = 0;
    let covered: Vec<Value> = coverage(CORPUS_READ_ONLY)["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "covered")
        .cloned()
        .collect();
    for command in covered.iter().step_by(3) {
        let line = &line_of(CORPUS_READ_ONLY, command);
        let expected = claude_hook::verb_call_command(
            Path::new(BIN),
            &daemon.socket,
            &verbd::protocol::VerbCall {
                verb: command["verb"].as_str().unwrap().into(),
                args: serde_json::from_value(command["args"].clone()).unwrap(),
                client_side: command["client_side"].as_str().map(str::to_string),
                needs_approval: command["needs_approval"].as_bool().unwrap(),
            },
        );
        let outcome = decide(line);
        assert_eq!(outcome.exit_code, 0, "{line}: {outcome:?}");
        let body: Value = serde_json::from_str(&outcome.stdout)
            .unwrap_or_else(|e| panic!("{line}: {e}: {outcome:?}"));
        assert_eq!(
            body["hookSpecificOutput"]["updatedInput"]["command"], expected,
            "{line}"
        );
        rewritten += 1;
    }
    assert!(rewritten >= 140, "{rewritten} corpus lines rewritten");

    // Changes and secret reads: never rewritten into a verb that runs at once.
    let changes = coverage(CORPUS_CHANGES);
    let mut denied = 0;
    for command in changes["commands"].as_array().unwrap() {
        let line = &line_of(CORPUS_CHANGES, command);
        let outcome = decide(line);
        match outcome.exit_code {
            2 => denied += 1,
            0 if outcome.stdout.is_empty() => {}
            0 => assert_eq!(command["needs_approval"], true, "{line}: {outcome:?}"),
            _ => panic!("{line}: {outcome:?}"),
        }
    }
    assert!(denied >= 40, "{denied} of the changes denied");

    // Rewritten commands run the verb: the same output as the command itself.
    for line in ["uname -r", "nproc", "sudo hostname"] {
        let outcome = decide(line);
        let body: Value = serde_json::from_str(&outcome.stdout).unwrap();
        let command = body["hookSpecificOutput"]["updatedInput"]["command"]
            .as_str()
            .unwrap();
        let through_verb = Command::new("/bin/bash")
            .args(["-c", command])
            .uid(SITE_AGENT_UID)
            .gid(SITE_AGENT_UID)
            .output()
            .unwrap();
        let direct = run_in_bash(line.trim_start_matches("sudo "));
        assert_eq!(
            through_verb.stdout, direct.stdout,
            "{line}: {through_verb:?}"
        );
    }
}
