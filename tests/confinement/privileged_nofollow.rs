//! Root's file operations at start-up never follow what the daemon user planted (issue 12.4).
//!
//! The state dir is writable by the daemon user, and `serve`, started as root, gives it and its
//! entries to that user before dropping privileges. The attack: from an earlier run, the daemon
//! user leaves a symlink or a hard link in the state dir naming a root-owned file elsewhere (or
//! replaces the state dir by a symlink), hoping root's chown follows it at the next start and
//! hands the file over. Each case must end the start with a configuration error naming the entry
//! (exit 78, so systemd does not restart into it) and leave the target root's. Positive control:
//! an ordinary root-owned file in the state dir is given to the daemon user.
use crate::common;
use common::policy::{Category, Policy, Verb};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// An account that exists on every Debian system and is not root.
const DAEMON_USER: &str = "nobody";

/// `hello`, for root as a human, from a daemon that drops to `nobody`.
fn policy() -> String {
    Policy::new()
        .daemon_user(DAEMON_USER)
        .humans("me", &[0])
        .verb(
            "hello",
            Verb::command(Category::ReadOnly, "/bin/echo hello")
                .description("hello")
                .roles(&["me"]),
        )
        .render()
}

fn daemon_uid() -> u32 {
    nix::unistd::User::from_name(DAEMON_USER)
        .unwrap()
        .unwrap_or_else(|| panic!("no {DAEMON_USER} account"))
        .uid
        .as_raw()
}

/// Runs `serve` once with `plant` applied to the temp dir first; returns (exit code, log).
fn start_with(plant: impl FnOnce(&Path)) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = open_tempdir();
    plant(dir.path());
    let mut d = Daemon::spawn_in(dir, &policy(), &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            // The positive control may get past the drop and serve: that is fine here.
            let _ = d.child.as_mut().unwrap().kill();
            let _ = d.child.as_mut().unwrap().wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    d.child = None;
    let log = d.log();
    // Keep the temp dir alive for the caller's checks.
    let dir = std::mem::replace(&mut d.dir, open_tempdir());
    (code, log, dir)
}

fn root_owned_target(dir: &Path) -> std::path::PathBuf {
    let target = dir.join("roots-file");
    std::fs::write(&target, b"root's\n").unwrap();
    target
}

fn assert_refused(code: Option<i32>, log: &str, says: &str, target: &Path) {
    println!("exit {code:?}; log: {}", log.lines().last().unwrap_or(""));
    assert_eq!(code, Some(78), "{log}");
    assert!(log.contains(says), "{log}");
    assert!(
        log.contains("refusing to change its owner as root"),
        "{log}"
    );
    assert_eq!(
        std::fs::symlink_metadata(target).unwrap().uid(),
        0,
        "root's chown followed a planted link and gave away {}",
        target.display()
    );
}

#[test]
fn a_symlink_planted_in_the_state_dir_is_refused_not_followed() {
    if !require_root("a_symlink_planted_in_the_state_dir_is_refused_not_followed") {
        return;
    }
    let mut target = None;
    let (code, log, dir) = start_with(|dir| {
        let t = root_owned_target(dir);
        std::fs::create_dir(dir.join("state")).unwrap();
        std::os::unix::fs::symlink(&t, dir.join("state/journal.key.old")).unwrap();
        target = Some(t);
    });
    assert_refused(code, &log, "is a symlink", &target.unwrap());
    drop(dir);
}

#[test]
fn a_hard_link_planted_in_the_state_dir_is_refused_not_chowned() {
    if !require_root("a_hard_link_planted_in_the_state_dir_is_refused_not_chowned") {
        return;
    }
    let mut target = None;
    let (code, log, dir) = start_with(|dir| {
        let t = root_owned_target(dir);
        std::fs::create_dir(dir.join("state")).unwrap();
        std::fs::hard_link(&t, dir.join("state/leftover")).unwrap();
        target = Some(t);
    });
    assert_refused(code, &log, "hard links", &target.unwrap());
    drop(dir);
}

#[test]
fn a_state_dir_replaced_by_a_symlink_is_refused() {
    if !require_root("a_state_dir_replaced_by_a_symlink_is_refused") {
        return;
    }
    let mut target = None;
    let (code, log, dir) = start_with(|dir| {
        let elsewhere = dir.join("roots-dir");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("state")).unwrap();
        target = Some(elsewhere);
    });
    let target = target.unwrap();
    println!("exit {code:?}; log: {}", log.lines().last().unwrap_or(""));
    assert_ne!(code, Some(0), "{log}");
    assert!(log.contains("state"), "{log}");
    assert_eq!(
        std::fs::symlink_metadata(&target).unwrap().uid(),
        0,
        "root's chown followed the state dir symlink: {log}"
    );
    drop(dir);
}

#[test]
fn positive_control_an_ordinary_state_dir_is_given_to_the_daemon_user() {
    if !require_root("positive_control_an_ordinary_state_dir_is_given_to_the_daemon_user") {
        return;
    }
    let (code, log, dir) = start_with(|dir| {
        std::fs::create_dir(dir.join("state")).unwrap();
        std::fs::write(dir.join("state/leftover"), b"root-owned, one link\n").unwrap();
    });
    println!("exit {code:?}");
    let uid = daemon_uid();
    assert_eq!(
        std::fs::metadata(dir.path().join("state")).unwrap().uid(),
        uid,
        "{log}"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("state/leftover"))
            .unwrap()
            .uid(),
        uid,
        "{log}"
    );
}

/// The default socket is `state_dir/verbd.sock`, bound by root before the drop: giving the
/// state dir away must leave it alone (it once refused it as "a Socket, not a file or
/// directory", so `verbd serve` as root without `--socket` never served). The socket stays
/// root's and is never chowned; the daemon serves on it.
#[test]
fn the_default_socket_in_the_state_dir_survives_the_privilege_drop() {
    if !require_root("the_default_socket_in_the_state_dir_survives_the_privilege_drop") {
        return;
    }
    let dir = open_tempdir();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, self::policy()).unwrap();
    let state = dir.path().join("state");
    let log = dir.path().join("daemon.log");
    let mut child = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--state-dir")
        .arg(&state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let socket = state.join("verbd.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("verbd: serving") {
            break text;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("serve exited {status}: {text}");
        }
        assert!(Instant::now() < deadline, "never served: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(text.contains(&socket.display().to_string()), "{text}");
    let call = std::process::Command::new(BIN)
        .args(["call", "--socket"])
        .arg(&socket)
        .arg("hello")
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        String::from_utf8_lossy(&call.stdout),
        "hello\n",
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
    assert_eq!(
        std::fs::metadata(&state).unwrap().uid(),
        daemon_uid(),
        "the state dir is the daemon user's"
    );
}
