//! Invariant 9 with a fault injected between the steps, against a real `verbd serve`: "the exec
//! record is durable before the child starts" and "journaled before the caller hears". The
//! daemon's `test-hooks` journal fault (`VERBD_TEST_JOURNAL_FAULT`, src/test_hooks.rs) fails or
//! holds the `fdatasync` of one record kind; meanwhile the test watches the child's side effect (a
//! file in the verb's write root) and the caller's socket. Reversing either order in
//! src/server/call.rs or src/server/approve.rs makes these tests fail.
use crate::common;
use common::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use verbd::protocol::Response;

const AGENT: u32 = 61801;
const SRE: u32 = 61802;

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [0, 61801]
[roles.sre]
kind = "human"
uids = [61802]
[approvals]
approvers = ["sre"]

[sandbox.work]
read = ["/usr", "/bin", "/lib", "/lib64", "/etc"]
write = ["@DIR@/work"]

[verb.mark]
description = "leave a side effect in the write root"
category = "read-only"
roles = ["agent"]
sandbox = "work"
command = ["/usr/bin/touch", "@DIR@/work/sub/ran"]

[verb.change]
description = "a change a human approves"
category = "mutating"
roles = ["agent"]
sandbox = "work"
command = ["/usr/bin/touch", "@DIR@/work/sub/changed"]
"#;

/// A daemon whose journal hook is `fault` (or none), with `work/sub` ready for the verbs.
fn start(fault: Option<&str>) -> Option<Daemon> {
    if !require_root("durability_faults") {
        return None;
    }
    let dir = open_tempdir();
    std::fs::create_dir_all(dir.path().join("work/sub")).unwrap();
    let control = dir.path().join("control");
    std::fs::create_dir(&control).unwrap();
    let env_value = fault.map(|f| f.replace("@CONTROL@", control.to_str().unwrap()));
    let env: Vec<(&str, &str)> = env_value
        .as_deref()
        .map(|v| vec![("VERBD_TEST_JOURNAL_FAULT", v)])
        .unwrap_or_default();
    let d = Daemon::spawn_in(dir, POLICY, &env);
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
    let mut d = Daemon::spawn_in(dir, POLICY, &[("VERBD_TEST_JOURNAL_FAULT", &fault)]);
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
