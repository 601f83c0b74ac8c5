//! The README's quick start, as a normal login user: a real unprivileged uid (no capabilities,
//! a full bounding set it cannot drop) runs `verbd serve` with no flags on the embedded demo
//! policy, then the README's client commands and `audit verify` on the default state dir.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// A uid with no account and no privileges, as an ordinary user.
const USER: u32 = 62700;

/// `verbd ARGS` as the user, with only the environment a login shell would give it.
fn as_user(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .current_dir(home)
        .uid(USER)
        .gid(USER);
    cmd
}

fn run(home: &Path, args: &[&str]) -> Output {
    as_user(home, args).stdin(Stdio::null()).output().unwrap()
}

struct Serving {
    child: Child,
    log: PathBuf,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn readme_quick_start_works_for_an_unprivileged_user() {
    if !common::require_root("quickstart_user (needs root to become an unprivileged uid)") {
        return;
    }
    let dir = common::open_tempdir();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(USER), Some(USER)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let log = dir.path().join("serve.log");

    // `cargo run --release -- serve`: no flags.
    let child = as_user(&home, &["serve"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut serving = Serving { child, log };
    let state = home.join(".local/state/verbd");
    let socket = state.join("verbd.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = serving.child.try_wait() {
            panic!(
                "`verbd serve` as uid {USER} exited ({status}) instead of serving:\n{}",
                std::fs::read_to_string(&serving.log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "`verbd serve` as uid {USER} did not start:\n{}",
            std::fs::read_to_string(&serving.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", serving.child.id())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![USER.to_string(); 4],
        "the daemon runs as the user"
    );
    let log = std::fs::read_to_string(&serving.log).unwrap();
    assert!(log.contains("self-test passed"), "{log}");

    let list = run(&home, &["list"]);
    assert!(list.status.success(), "list: {}", text(&list));
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("echo"),
        "{}",
        text(&list)
    );

    let hello = run(&home, &["call", "echo", "text=hello"]);
    assert!(hello.status.success(), "call echo: {}", text(&hello));
    assert_eq!(String::from_utf8_lossy(&hello.stdout).trim(), "hello");

    let refused = run(&home, &["call", "echo", "text=$(id)"]);
    assert_eq!(refused.status.code(), Some(65), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("does not match the pattern"),
        "{}",
        text(&refused)
    );

    let missing = run(&home, &["call", "echo"]);
    let answer = format!(
        "{}{}",
        String::from_utf8_lossy(&missing.stdout),
        String::from_utf8_lossy(&missing.stderr)
    );
    assert!(
        answer.contains("REQUIRES_CLARIFICATION: missing required parameters: text"),
        "{}",
        text(&missing)
    );

    let verify = run(
        &home,
        &["audit", "verify", "--state-dir", state.to_str().unwrap()],
    );
    assert!(verify.status.success(), "audit verify: {}", text(&verify));
    assert!(
        String::from_utf8_lossy(&verify.stdout).contains("chain and MACs intact"),
        "{}",
        text(&verify)
    );

    // The offline self-test the operator runs says the same as the daemon's.
    let selftest = run(&home, &["selftest"]);
    assert!(selftest.status.success(), "selftest: {}", text(&selftest));
    let report = String::from_utf8_lossy(&selftest.stdout).to_string()
        + &String::from_utf8_lossy(&selftest.stderr);
    assert!(
        report.contains(
            " kept (the daemon has no CAP_SETPCAP to empty it); inert: no_new_privs, permitted/effective/inheritable/ambient empty"
        ) || report.contains("capabilities: all sets empty"),
        "{report}"
    );
}
