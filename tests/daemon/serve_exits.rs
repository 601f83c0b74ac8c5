//! Every way `verbd serve` can fail to start ends with the exit code systemd acts on: 78
//! (`EX_CONFIG`) for a configuration error, so `RestartPreventExitStatus=78` stops the restart
//! loop instead of restarting every 2 s; a STATUS= line naming the cause; never READY; and no
//! socket file left behind. A clean stop exits 0.
use crate::common;
use crate::hostile;
use common::policy::{Category, Policy, Verb};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A policy that passes its self-test; who the daemon runs as is the test's.
fn healthy() -> Policy {
    hello_running("/bin/echo hello")
}

/// One verb, `hello`, that runs `command`.
fn hello_running(command: &str) -> Policy {
    Policy::new().humans("me", &[0]).verb(
        "hello",
        Verb::command(Category::ReadOnly, command)
            .description("hello")
            .roles(&["me"]),
    )
}

/// How one start ended.
struct Ended {
    code: Option<i32>,
    log: String,
    notify: Vec<String>,
    socket_left: bool,
}

/// Run `serve` on `policy` until it exits (it must, within 30 s).
fn serve_once(policy: &str, setup: impl FnOnce(&Path)) -> Ended {
    let dir = open_tempdir();
    setup(dir.path());
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut d = Daemon::spawn_in(
        dir,
        policy,
        &[("NOTIFY_SOCKET", notify_path.to_str().unwrap())],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not exit: {}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    };
    d.child = None;
    let mut messages = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = notify.recv(&mut buf) {
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    Ended {
        code: status.code(),
        log: d.log(),
        socket_left: std::fs::symlink_metadata(&d.socket).is_ok(),
        notify: messages,
    }
}

fn assert_config_error(ended: &Ended, log_says: &str, status_says: &str) {
    println!(
        "exit {:?}; STATUS {:?}; socket left: {}",
        ended.code, ended.notify, ended.socket_left
    );
    assert_eq!(ended.code, Some(78), "{}", ended.log);
    assert!(ended.log.contains(log_says), "{}", ended.log);
    assert!(
        ended.notify.iter().any(|m| m.contains(status_says)),
        "STATUS: {:?}",
        ended.notify
    );
    assert!(
        ended.notify.iter().all(|m| !m.contains("READY=1")),
        "READY from a failed start: {:?}",
        ended.notify
    );
    assert!(!ended.socket_left, "a failed start left its socket file");
}

#[test]
fn a_missing_daemon_user_exits_78_not_a_restart_loop() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once(
        &healthy().daemon_user("verbd-no-such-user").render(),
        |_| {},
    );
    assert_config_error(&ended, "does not exist", "daemon user");
}

#[test]
fn running_as_root_without_allow_root_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once(&healthy().render(), |_| {});
    assert_config_error(&ended, "refusing to run as root", "daemon user");
}

#[test]
fn a_root_daemon_user_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once(&healthy().daemon_user("root").render(), |_| {});
    assert_config_error(&ended, "is root", "daemon user");
}

#[test]
fn a_refused_bind_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    // A regular file where the socket goes: never removed, never bound.
    let ended = serve_once(&healthy().allow_root().render(), |dir| {
        std::fs::write(dir.join("verbd.sock"), "not a socket").unwrap();
    });
    println!("exit {:?}; STATUS {:?}", ended.code, ended.notify);
    assert_eq!(ended.code, Some(78), "{}", ended.log);
    assert!(ended.log.contains("is not a socket"), "{}", ended.log);
    assert!(ended.notify.iter().any(|m| m.contains("cannot bind")));
}

#[test]
fn an_unusable_state_dir_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once(&healthy().allow_root().render(), |dir| {
        // The state dir's path runs through a regular file.
        std::fs::write(dir.join("state"), "a file").unwrap();
    });
    assert_config_error(
        &ended,
        "cannot create the state directory",
        "state directory",
    );
}

/// The state dir exists but its parent is not searchable by the daemon user (a root-owned 0700
/// temp dir): the start ends with 78 and says what is wrong and how to fix it — not "the
/// journal does not verify … find the damage", which sent an operator hunting for tampering.
#[test]
fn a_state_dir_the_daemon_user_cannot_reach_exits_78_and_says_so() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once(&healthy().daemon_user("nobody").render(), |dir| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    });
    println!("exit {:?}; log: {}", ended.code, ended.log);
    assert_eq!(ended.code, Some(78), "{}", ended.log);
    assert!(
        ended
            .log
            .contains("cannot reach or write its state directory"),
        "{}",
        ended.log
    );
    assert!(
        ended.log.contains("not damage to the journal"),
        "{}",
        ended.log
    );
    assert!(!ended.log.contains("find the damage"), "{}", ended.log);
}

#[test]
fn an_invalid_policy_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    let ended = serve_once("version = 1\n[daemon]\nallow_root = tru\n", |_| {});
    assert_config_error(&ended, "policy.toml:3:", "policy invalid");
}

#[test]
fn a_failed_self_test_exits_78_and_removes_its_socket() {
    if !require_root("serve exits") {
        return;
    }
    // The binary cannot be checked (it does not exist): the self-test fails after the bind.
    let policy = hello_running("/nonexistent/echo hello")
        .allow_root()
        .render();
    let ended = serve_once(&policy, |_| {});
    assert_config_error(&ended, "FAIL", "FAIL");
}

#[test]
fn an_unknown_socket_from_systemd_exits_78() {
    if !require_root("serve exits") {
        return;
    }
    let dir = open_tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, healthy().allow_root().render()).unwrap();
    let socket = dir.path().join("activated.sock");
    let mut child = Command::new("/usr/bin/systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=bogus")
        .arg(BIN)
        .args(["serve", "--policy"])
        .arg(&policy)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first connection starts the daemon.
    let _ = std::os::unix::net::UnixStream::connect(&socket);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    println!("exit {:?}", status.code());
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(log.contains("bogus"), "{log}");
}

#[test]
fn a_clean_stop_exits_0_and_removes_its_socket() {
    if !require_root("serve exits") {
        return;
    }
    let mut d = Daemon::start(&healthy().allow_root().render());
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    let status = d.stop().unwrap();
    println!("exit {:?}", status.code());
    assert_eq!(status.code(), Some(0), "{}", d.log());
    assert!(!d.socket.exists(), "socket left after a clean stop");
}

/// A socket's accept thread that ends (here: a panic injected when uid 61201 connects) leaves
/// the socket unserved. The daemon must not run on deaf: it stops — journaled, socket removed —
/// and exits 71 (`EX_OSERR`), which systemd's `Restart=on-failure` restarts.
#[test]
fn an_accept_thread_that_ends_stops_the_daemon_with_71() {
    if !require_root("serve exits") {
        return;
    }
    let dir = open_tempdir();
    let mut d = Daemon::spawn_in(
        dir,
        &healthy().allow_root().render(),
        &[("VERBD_TEST_ACCEPT_PANIC_UID", "61201")],
    );
    d.wait_ready();
    d.open_socket();
    assert_eq!(stdout_of(&d.call("hello", &[])), "hello\n");
    let answers = hostile::requests_as(61201, &d.socket, &[hostile::call("hello", &[])]);
    assert_eq!(
        answers[0], None,
        "the connection that broke the thread got an answer"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon kept running without its accept thread: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    d.child = None;
    let log = d.log();
    println!("exit {:?}; {log}", status.code());
    assert_eq!(status.code(), Some(71), "{log}");
    assert!(
        log.contains("the accept thread of the Agent socket ended: it panicked: test hook"),
        "{log}"
    );
    assert!(!d.socket.exists(), "socket left behind");
    let stop = d
        .journal_events()
        .into_iter()
        .rfind(|e| e["kind"] == "stop")
        .expect("a stop record");
    assert_eq!(stop["reason"], "a socket was no longer served", "{stop}");
}
