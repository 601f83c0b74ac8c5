//! The spawner process (module `verbd::spawner`): the daemon's sandboxed children are forked by a
//! small single-threaded process, never by the daemon; it has the daemon's identity and nothing
//! more; a spawner that dies is restarted, and the call it held ends as failed with its outcome
//! unknown — never run twice, always journaled, the journal still verifying.
use crate::common;
use common::*;
use std::time::Duration;
use verbd::protocol::{Request, Response};

const POLICY: &str = r#"
version = 1
[daemon]
user = "nobody"
[roles.me]
uids = [0]

[verb.hello]
description = "says hello"
category = "read-only"
roles = ["me"]
command = "/bin/echo hello {n}"
params.n = { type = "int", min = 0, max = 1000000 }
"#;

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out
}

/// The daemon's spawner: its one child whose command line is `… __spawner`.
fn spawner_of(daemon: &Daemon) -> Option<u32> {
    let pid = daemon.child.as_ref().unwrap().id();
    children(pid).into_iter().find(|child| {
        std::fs::read(format!("/proc/{child}/cmdline"))
            .map(|c| c.split(|b| *b == 0).any(|arg| arg == b"__spawner"))
            .unwrap_or(false)
    })
}

fn status_field(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn hello(daemon: &Daemon, n: u32) -> Response {
    daemon.call("hello", &[("n", &n.to_string())])
}

#[test]
fn the_daemon_runs_its_children_through_a_single_threaded_spawner_with_its_identity() {
    if !require_root("spawner identity") {
        return;
    }
    let daemon = Daemon::start(POLICY);
    let spawner = spawner_of(&daemon).expect("the daemon has a spawner process");
    let daemon_pid = daemon.child.as_ref().unwrap().id();
    assert_eq!(status_field(spawner, "Threads"), "1");
    for field in [
        "Uid",
        "Gid",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
    ] {
        assert_eq!(
            status_field(spawner, field),
            status_field(daemon_pid, field),
            "{field}: the spawner has exactly the daemon's"
        );
    }
    // A stopped spawner holds the call: the daemon does not fork the child itself.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let socket = daemon.socket.clone();
    let held = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &Request::Call {
                verb: "hello".into(),
                args: [("n".to_string(), serde_json::Value::from("1"))]
                    .into_iter()
                    .collect(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
    });
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !held.is_finished(),
        "the call ran while the spawner was stopped"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    assert_eq!(stdout_of(&held.join().unwrap().unwrap()), "hello 1\n");
}

#[test]
fn a_killed_spawner_is_restarted_and_the_call_it_held_fails_once_and_is_journaled() {
    if !require_root("spawner restart") {
        return;
    }
    let daemon = Daemon::start(POLICY);
    let first = spawner_of(&daemon).unwrap();
    let kill = |pid: u32, signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap()
    };
    // Killed while idle: the next call finds it gone before sending a byte and restarts it.
    kill(first, nix::sys::signal::Signal::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(stdout_of(&hello(&daemon, 2)), "hello 2\n");
    let second = spawner_of(&daemon).expect("a new spawner");
    assert_ne!(second, first);
    // Killed while it holds an order (stopped, so the order waits unread in its socket).
    kill(second, nix::sys::signal::Signal::SIGSTOP);
    let socket = daemon.socket.clone();
    let held = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &Request::Call {
                verb: "hello".into(),
                args: [("n".to_string(), serde_json::Value::from("3"))]
                    .into_iter()
                    .collect(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    kill(second, nix::sys::signal::Signal::SIGKILL);
    match held.join().unwrap().unwrap() {
        Response::Error { message } => assert!(
            message.contains("spawner") && message.contains("unknown"),
            "{message}"
        ),
        other => panic!("the held call should fail with its outcome unknown: {other:?}"),
    }
    assert_eq!(stdout_of(&hello(&daemon, 4)), "hello 4\n");
    let third = spawner_of(&daemon).expect("restarted again");
    assert!(third != first && third != second);
    // Every call journaled exactly once with its end; the journal verifies.
    let events = daemon.journal_events();
    let execs: Vec<_> = events.iter().filter(|e| e["kind"] == "exec").collect();
    let results: Vec<_> = events.iter().filter(|e| e["kind"] == "result").collect();
    assert_eq!(execs.len(), 3, "{events:#?}");
    assert_eq!(results.len(), 3, "{events:#?}");
    let failed: Vec<_> = results.iter().filter(|r| !r["error"].is_null()).collect();
    assert_eq!(failed.len(), 1, "only the held call failed: {results:#?}");
    let verify = daemon.cli(&[
        "audit",
        "verify",
        "--state-dir",
        daemon.state.to_str().unwrap(),
    ]);
    assert!(verify.status.success(), "{verify:?}");
}
