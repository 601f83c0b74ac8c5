//! Invariant 9 with a fault injected between the steps, against a real `verbd serve`: "the exec
//! record is durable before the child starts" and "journaled before the caller hears". The
//! daemon's `test-hooks` journal fault (`VERBD_TEST_JOURNAL_FAULT`, src/test_hooks.rs) fails or
//! holds the `fdatasync` of one record kind; meanwhile the test watches the child's side effect (a
//! file in the verb's write root) and the caller's socket. Reversing either order in
//! src/server/call.rs or src/server/approve.rs makes these tests fail, and so does answering
//! those records before their fdatasync the way a command mapping is answered (the hook holds
//! the fdatasync itself, after the line is written). The one record answered once written, a
//! command mapping (advice), must survive a kill of the daemon right after its answer.
use crate::common;
use common::policy::{Category, CommandMode, Policy, Sandbox, Verb};
use common::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use verbd::protocol::Response;

const AGENT: u32 = 61801;
const SRE: u32 = 61802;

fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[0, AGENT])
        .commands("agent", CommandMode::Rewrite)
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .privileged_paths(&["@DIR@/logs"])
        .sandbox(
            "work",
            Sandbox::new(&["/usr", "/bin", "/lib", "/lib64", "/etc"], &["@DIR@/work"]),
        )
        .verb(
            "mark",
            Verb::argv(
                Category::ReadOnly,
                &["/usr/bin/touch", "@DIR@/work/sub/ran"],
            )
            .description("leave a side effect in the write root")
            .roles(&["agent"])
            .sandbox("work"),
        )
        .verb(
            "change",
            Verb::argv(
                Category::Mutating,
                &["/usr/bin/touch", "@DIR@/work/sub/changed"],
            )
            .description("a change a human approves")
            .roles(&["agent"])
            .sandbox("work"),
        )
        .verb("log-tail", Verb::log_tail(&["agent"]).sandbox("work"))
        .render()
}

/// A daemon whose journal hook is `fault` (or none), with `work/sub` ready for the verbs.
fn start(fault: Option<&str>) -> Option<Daemon> {
    if !require_root("durability_faults") {
        return None;
    }
    let dir = open_tempdir();
    std::fs::create_dir_all(dir.path().join("work/sub")).unwrap();
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    std::fs::write(
        dir.path().join("logs/app.log"),
        "1 ERROR upstream timed out\n",
    )
    .unwrap();
    let control = dir.path().join("control");
    std::fs::create_dir(&control).unwrap();
    let env_value = fault.map(|f| f.replace("@CONTROL@", control.to_str().unwrap()));
    let env: Vec<(&str, &str)> = env_value
        .as_deref()
        .map(|v| vec![("VERBD_TEST_JOURNAL_FAULT", v)])
        .unwrap_or_default();
    let d = Daemon::spawn_in(dir, &policy(), &env);
    d.wait_ready();
    d.open_socket();
    Some(d)
}

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{what}: {} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Call `verb` on another thread; the receiver gets the response.
fn call_in_background(d: &Daemon, verb: &str) -> mpsc::Receiver<Response> {
    let socket = d.socket.clone();
    let verb = verb.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let request = verbd::protocol::Request::Call {
            verb,
            args: Default::default(),
            reason: Some("durability test".into()),
            idempotency_key: None,
            stream: None,
        };
        let response = verbd::client::request(&socket, &request, Duration::from_secs(120))
            .expect("daemon answers");
        let _ = tx.send(response);
    });
    rx
}

fn kinds(d: &Daemon) -> Vec<String> {
    d.journal_events()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_string))
        .collect()
}

fn assert_journal_denial(response: &Response, kind: &str) {
    match response {
        Response::Denied { reason } => {
            assert!(
                reason.contains("the audit journal cannot be written"),
                "{reason}"
            );
            assert!(
                reason.contains(&format!(
                    "injected journal fault before the fdatasync of a `{kind}` record"
                )),
                "{reason}"
            );
            assert!(reason.contains("Nothing ran."), "{reason}");
        }
        other => panic!("expected the journal denial, got {other:?}"),
    }
}

#[test]
fn a_failed_exec_record_denies_and_the_child_never_starts() {
    // Positive control: the same daemon without a fault runs the verb.
    let Some(control) = start(None) else { return };
    assert!(matches!(control.call("mark", &[]), Response::Ok { .. }));
    assert!(
        control.path("work/sub/ran").exists(),
        "control: the verb ran"
    );

    let Some(d) = start(Some("exec:fail")) else {
        return;
    };
    let response = d.call("mark", &[]);
    assert_journal_denial(&response, "exec");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !d.path("work/sub/ran").exists(),
        "the child ran although its exec record failed"
    );
    let kinds = kinds(&d);
    assert!(
        !kinds.iter().any(|k| k == "exec" || k == "result"),
        "{kinds:?}"
    );
}

#[test]
fn the_child_starts_only_after_its_exec_record_is_synced() {
    let Some(d) = start(Some("exec:block:@CONTROL@")) else {
        return;
    };
    let answer = call_in_background(&d, "mark");
    wait_for(
        &d.path("control/blocked.exec"),
        "the exec record's fdatasync",
    );
    // The exec record is written, its fdatasync held: nothing may have started or answered.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !d.path("work/sub/ran").exists(),
        "the child started before its exec record was durable"
    );
    assert!(
        answer.try_recv().is_err(),
        "the caller heard before the record was durable"
    );
    std::fs::write(d.path("control/release.exec"), b"").unwrap();
    let response = answer.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(matches!(response, Response::Ok { .. }), "{response:?}");
    assert!(d.path("work/sub/ran").exists(), "released: the child ran");
    let kinds = kinds(&d);
    let exec = kinds.iter().position(|k| k == "exec").expect("exec record");
    let result = kinds
        .iter()
        .position(|k| k == "result")
        .expect("result record");
    assert!(exec < result, "{kinds:?}");
}

#[test]
fn the_caller_hears_only_after_the_result_is_synced() {
    let Some(d) = start(Some("result:block:@CONTROL@")) else {
        return;
    };
    let answer = call_in_background(&d, "mark");
    wait_for(
        &d.path("control/blocked.result"),
        "the result record's fdatasync",
    );
    assert!(
        d.path("work/sub/ran").exists(),
        "the child ran before its result"
    );
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        answer.try_recv().is_err(),
        "the caller heard the result before it was durable"
    );
    std::fs::write(d.path("control/release.result"), b"").unwrap();
    let response = answer.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(matches!(response, Response::Ok { .. }), "{response:?}");
}

#[test]
fn a_failed_result_record_is_reported_never_an_ok() {
    let Some(d) = start(Some("result:fail")) else {
        return;
    };
    match d.call("mark", &[]) {
        Response::Ok { .. } => panic!("an unjournaled result was answered as ok"),
        Response::Error { message } => assert!(
            message.contains("injected journal fault before the fdatasync of a `result` record"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_proposal_is_journaled_before_the_agent_hears_confirm_required() {
    // Failing record: the agent is denied, never told CONFIRM_REQUIRED; nothing is pending.
    let Some(d) = start(Some("proposal_created:fail")) else {
        return;
    };
    let out = d.cli_as(AGENT, &["call", "--json", "change"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("CONFIRM_REQUIRED"), "{text}");
    assert!(
        text.contains("injected journal fault before the fdatasync of a `proposal_created` record"),
        "{text}"
    );
    let pending = d.cli_as(SRE, &["pending", "--json"]);
    assert_eq!(pending.status.code(), Some(0), "{pending:?}");
    let listed: serde_json::Value = serde_json::from_slice(&pending.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");

    // Held record: no answer while the fdatasync is held; CONFIRM_REQUIRED after release.
    let Some(d) = start(Some("proposal_created:block:@CONTROL@")) else {
        return;
    };
    let answer = call_in_background(&d, "change");
    wait_for(
        &d.path("control/blocked.proposal_created"),
        "the proposal record's fdatasync",
    );
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        answer.try_recv().is_err(),
        "CONFIRM_REQUIRED before the proposal was durable"
    );
    std::fs::write(d.path("control/release.proposal_created"), b"").unwrap();
    match answer.recv_timeout(Duration::from_secs(60)).unwrap() {
        Response::ConfirmRequired { message, .. } => {
            assert!(message.starts_with("CONFIRM_REQUIRED "), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !d.path("work/sub/changed").exists(),
        "nothing ran before approval"
    );
}

#[test]
fn a_sigterm_while_the_start_record_is_written_stops_the_daemon_gracefully() {
    // SIGTERM arrives before the daemon listens (its `start` record held before the fdatasync):
    // the daemon must catch it, not die of the signal's default action, and stop the graceful
    // way once the record is durable: exit 0, a `stop` record after the `start`, socket removed.
    if !require_root("durability_faults") {
        return;
    }
    let dir = open_tempdir();
    std::fs::create_dir_all(dir.path().join("work/sub")).unwrap();
    let control = dir.path().join("control");
    std::fs::create_dir(&control).unwrap();
    let fault = format!("start:block:{}", control.display());
    let mut d = Daemon::spawn_in(dir, &policy(), &[("VERBD_TEST_JOURNAL_FAULT", &fault)]);
    wait_for(&control.join("blocked.start"), "the held start record");
    let pid = d.child.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // Give a default action time to act before the record is released.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(control.join("release.start"), b"").unwrap();
    let mut child = d.child.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(0),
        "the daemon ended by {status:?}, not by its own stop; log:\n{log}"
    );
    let kinds = kinds(&d);
    assert_eq!(
        kinds.iter().filter(|k| *k == "start").count(),
        1,
        "{kinds:?}"
    );
    let stop = kinds.iter().position(|k| k == "stop");
    let start = kinds.iter().position(|k| k == "start");
    assert!(stop > start, "no stop record after the start: {kinds:?}");
    assert!(!d.socket.exists(), "the socket file was left behind");
    assert!(log.contains("stopped (SIGTERM)"), "{log}");
}

/// `verbd audit verify` on the daemon's state directory: exit code and output.
fn verify(d: &Daemon) -> (i32, String) {
    let out = std::process::Command::new(BIN)
        .args(["audit", "verify", "--state-dir"])
        .arg(&d.state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Send a `command` request (a Bash call that maps onto `log-tail`) on another thread.
fn command_in_background(d: &Daemon) -> mpsc::Receiver<Response> {
    let command = format!(
        "sudo tail -n 5 {} | grep -i error",
        d.path("logs/app.log").display()
    );
    shell_command_in_background(d, command)
}

/// A privileged command no verb stands for: refused, with the closest verb named.
fn refused_command_in_background(d: &Daemon) -> mpsc::Receiver<Response> {
    let command = format!("sudo rm -rf {}", d.path("logs").display());
    shell_command_in_background(d, command)
}

fn shell_command_in_background(d: &Daemon, command: String) -> mpsc::Receiver<Response> {
    let socket = d.socket.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let request = verbd::protocol::Request::Command {
            command,
            cwd: Some("/".into()),
            tool: Some("claude-code Bash".into()),
        };
        let response = verbd::client::request(&socket, &request, Duration::from_secs(120))
            .expect("daemon answers");
        let _ = tx.send(response);
    });
    rx
}

fn assert_rewritten(response: &Response) {
    match response {
        Response::Command {
            decision: verbd::protocol::CommandDecision::Rewrite(call),
        } => assert_eq!(call.verb, "log-tail"),
        other => panic!("expected a rewrite onto log-tail, got {other:?}"),
    }
}

#[test]
fn a_command_mapping_is_answered_once_written_and_a_kill_of_the_daemon_keeps_it() {
    let Some(mut d) = start(Some("command_mapped:block:@CONTROL@")) else {
        return;
    };
    let answer = command_in_background(&d);
    wait_for(
        &d.path("control/blocked.command_mapped"),
        "the mapping record's fdatasync",
    );
    // Its line is written and its fdatasync held: the agent has its answer meanwhile.
    let response = answer.recv_timeout(Duration::from_secs(10)).expect(
        "no answer while the mapping's fdatasync was held: a mapping waits for its fdatasync again",
    );
    assert_rewritten(&response);
    // The daemon is killed before that fdatasync.
    d.kill9();
    let mapped: Vec<serde_json::Value> = d
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "command_mapped")
        .collect();
    assert_eq!(mapped.len(), 1, "the answered mapping is in the journal");
    assert_eq!(mapped[0]["decision"], "rewrite", "{}", mapped[0]);
    assert_eq!(mapped[0]["verb"], "log-tail", "{}", mapped[0]);
    assert_eq!(mapped[0]["caller"]["uid"], 0, "{}", mapped[0]);
    let (code, out) = verify(&d);
    assert_eq!(code, 0, "the journal verifies after the kill:\n{out}");
    // A new daemon opens it (its start-up check), keeps the record and chains after it.
    d.respawn();
    assert!(matches!(d.call("mark", &[]), Response::Ok { .. }));
    d.stop();
    let kinds = kinds(&d);
    let mapped = kinds.iter().position(|k| k == "command_mapped");
    let exec = kinds.iter().position(|k| k == "exec");
    assert!(
        mapped.is_some() && mapped < exec,
        "the mapping stays, before the next call: {kinds:?}"
    );
    let (code, out) = verify(&d);
    assert_eq!(code, 0, "the journal verifies after the restart:\n{out}");
}

#[test]
fn a_refused_command_is_answered_once_written_and_a_kill_of_the_daemon_keeps_it() {
    let Some(mut d) = start(Some("command_mapped:block:@CONTROL@")) else {
        return;
    };
    let answer = refused_command_in_background(&d);
    wait_for(
        &d.path("control/blocked.command_mapped"),
        "the refused command's record fdatasync",
    );
    let response = answer.recv_timeout(Duration::from_secs(10)).expect(
        "no answer while the refusal's fdatasync was held: a refused command waits for it again",
    );
    match &response {
        Response::Command {
            decision: verbd::protocol::CommandDecision::Refuse { reason },
        } => assert!(!reason.is_empty(), "the refusal gives its reason"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    d.kill9();
    let refused: Vec<serde_json::Value> = d
        .journal_events()
        .into_iter()
        .filter(|e| e["kind"] == "command_mapped")
        .collect();
    assert_eq!(refused.len(), 1, "the answered refusal is in the journal");
    assert_eq!(refused[0]["decision"], "refuse", "{}", refused[0]);
    let (code, out) = verify(&d);
    assert_eq!(code, 0, "the journal verifies after the kill:\n{out}");
}

#[test]
fn a_mapping_whose_fdatasync_fails_was_answered_and_is_logged_lost_nothing_else() {
    // The mapping was answered once written; its fdatasync then fails and it is rolled back
    // with what that fdatasync covered. The daemon never reported it durable; it says it lost
    // it, and the next records (a call) are durable as ever.
    let Some(mut d) = start(Some("command_mapped:fail")) else {
        return;
    };
    let response = command_in_background(&d)
        .recv_timeout(Duration::from_secs(30))
        .unwrap();
    assert_rewritten(&response);
    assert!(matches!(d.call("mark", &[]), Response::Ok { .. }));
    assert!(d.path("work/sub/ran").exists(), "the call ran");
    d.stop();
    let kinds = kinds(&d);
    assert!(!kinds.iter().any(|k| k == "command_mapped"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "exec"), "{kinds:?}");
    let log = d.log();
    assert!(
        log.contains("a record answered once written is lost"),
        "the loss is logged:\n{log}"
    );
    let (code, out) = verify(&d);
    assert_eq!(code, 0, "the journal verifies:\n{out}");
}
