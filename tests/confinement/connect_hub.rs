//! The connect hub (module `verbd::sandbox`, `connect_hub`): a daemon child that never connects
//! costs the daemon no broker thread, and a child that connects late — long after its start —
//! is still brokered: its listed socket is reached, an unlisted one is refused.
use crate::common;
use common::policy::{Category, Policy, Sandbox, Verb};
use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

/// Sleeps, then connects to the listed socket (prints what it answers) and to an unlisted one
/// (prints the errno).
const LATE: &str = r#"
import socket, sys, time
time.sleep(1.0)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"ping")
print("listed:", s.recv(16).decode())
u = socket.socket(socket.AF_UNIX)
try:
    u.connect(sys.argv[2])
    print("unlisted: connected")
except OSError as e:
    print("unlisted: errno", e.errno)
"#;

/// `quiet`, which connects nowhere, and `late`, whose profile lists one socket.
fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("me", &[0])
        .sandbox(
            "late",
            Sandbox {
                unix_sockets: Some(vec!["@DIR@/listed/s.sock".into()]),
                ..Sandbox::new(&["/usr", "/lib", "/etc", "/bin", "@DIR@/probe"], &[])
            },
        )
        .verb(
            "quiet",
            Verb::command(Category::ReadOnly, "/bin/sleep 1.5")
                .description("runs a while, connects nowhere")
                .roles(&["me"]),
        )
        .verb(
            "late",
            Verb::argv(
                Category::ReadOnly,
                &[
                    PYTHON,
                    "@DIR@/probe/late.py",
                    "@DIR@/listed/s.sock",
                    "@DIR@/unlisted/s.sock",
                ],
            )
            .description("connects late")
            .roles(&["me"])
            .sandbox("late")
            .allow_interpreter(),
        )
        .render()
}

/// The names of the daemon's threads whose name starts with `verbd-connect`.
fn broker_threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
                .map(|name| name.trim().to_string())
                .filter(|name| name.starts_with("verbd-connect"))
                .collect()
        })
        .unwrap_or_default()
}

/// Every broker thread name seen while `busy` runs on another thread, sampled every 20 ms.
fn threads_seen_during(pid: u32, busy: impl FnOnce() + Send + 'static) -> Vec<String> {
    let running = std::thread::spawn(busy);
    let mut seen = Vec::new();
    while !running.is_finished() {
        for name in broker_threads(pid) {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    running.join().unwrap();
    seen
}

#[test]
fn a_child_that_never_connects_starts_no_broker_thread_and_a_late_connect_is_brokered() {
    if !require_root("connect hub") {
        return;
    }
    let mut dir_of_daemon = None;
    let daemon = Daemon::start_with(&policy(), |dir| {
        for sub in ["probe", "listed", "unlisted"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("probe/late.py"), LATE).unwrap();
        dir_of_daemon = Some(dir.to_path_buf());
    });
    let dir = dir_of_daemon.unwrap();
    let pid = daemon.child.as_ref().unwrap().id();
    let listed = std::os::unix::net::UnixListener::bind(dir.join("listed/s.sock")).unwrap();
    let _unlisted = std::os::unix::net::UnixListener::bind(dir.join("unlisted/s.sock")).unwrap();
    let answering = std::thread::spawn(move || {
        let (mut stream, _) = listed.accept().unwrap();
        let mut ping = [0u8; 4];
        stream.read_exact(&mut ping).unwrap();
        stream.write_all(b"pong").unwrap();
    });

    let socket = daemon.socket.clone();
    let started = Instant::now();
    let seen = threads_seen_during(pid, move || {
        assert_eq!(stdout_of(&call_over(&socket, "quiet")), "");
    });
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert!(
        seen.iter().all(|name| name == "verbd-connect-h"),
        "a child that never connects got broker threads: {seen:?}"
    );

    let socket = daemon.socket.clone();
    let (sender, output) = std::sync::mpsc::channel();
    let seen = threads_seen_during(pid, move || {
        sender.send(call_over(&socket, "late")).unwrap();
    });
    let response = output.recv().unwrap();
    let out = stdout_of(&response);
    answering.join().unwrap();
    assert!(out.contains("listed: pong"), "{out}\n{response:?}");
    assert!(
        out.contains(&format!("unlisted: errno {}", libc::EACCES)),
        "{out}\n{response:?}"
    );
    assert!(
        seen.iter().any(|name| name == "verbd-connect-s"),
        "the late connect was served on a thread of its own: {seen:?}"
    );
}

fn call_over(socket: &std::path::Path, verb: &str) -> verbd::protocol::Response {
    verbd::client::request(
        socket,
        &verbd::protocol::Request::Call {
            verb: verb.into(),
            args: Default::default(),
            reason: None,
            idempotency_key: None,
            stream: None,
        },
        Duration::from_secs(30),
    )
    .unwrap()
}
