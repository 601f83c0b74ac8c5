//! Root-owned secret files with a daemon started as root that drops to `daemon.user`: secrets
//! are read before the privilege drop (as systemd's `LoadCredential=` hands them over), kept
//! across `verbd reload` unless their source changed and the daemon user can read it, and a
//! changed source the daemon user cannot read refuses the reload loudly, the old value in force.
//! Both layouts: a root-only directory, and a directory the daemon user owns.
//!
//! The daemon user exists only in a private copy of /etc/passwd and /etc/group, bind-mounted in
//! the daemon's own mount namespace. Verbs see the secret only as a private copy; the test reads
//! its sha256 (the output never carries the value).

use crate::common;
use crate::common::digest::sha256_hex;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

const DAEMON: u32 = 62740;
const FIRST: &str = "first-secret-value-for-the-reload-test";
const SECOND: &str = "second-secret-value-for-the-reload-test";

const POLICY: &str = r#"
version = 1
[daemon]
user = "verbd-secrets-test"
socket = "@DIR@/verbd.sock"
state_dir = "@DIR@/state"
shutdown_grace = "1s"
[roles.me]
kind = "human"
uids = [0]
[approvals]
approvers = ["me"]
[secrets.db]
file = "@SECRET@"
[sandbox.default]
read = ["/usr", "/lib", "/etc", "/bin", "/proc"]
network = "none"
[verb.digest]
description = "the sha256 of the secret (never the secret)"
category = "read-only"
roles = ["me"]
command = "/usr/bin/sha256sum ${secret_file:db}"
"#;

struct Daemon {
    child: Option<Child>,
    dir: PathBuf,
    policy: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, secret: &Path) -> Daemon {
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            POLICY
                .replace("@DIR@", dir.to_str().unwrap())
                .replace("@SECRET@", secret.to_str().unwrap()),
        )
        .unwrap();
        let mut daemon = Daemon {
            child: None,
            dir: dir.to_path_buf(),
            policy,
        };
        daemon.spawn();
        daemon
    }

    fn spawn(&mut self) {
        let passwd = self.dir.join("passwd");
        let group = self.dir.join("group");
        let mut users = std::fs::read_to_string("/etc/passwd").unwrap();
        users.push_str(&format!(
            "verbd-secrets-test:x:{DAEMON}:{DAEMON}::/nonexistent:/usr/sbin/nologin\n"
        ));
        let mut groups = std::fs::read_to_string("/etc/group").unwrap();
        groups.push_str(&format!("verbd-secrets-test:x:{DAEMON}:\n"));
        std::fs::write(&passwd, users).unwrap();
        std::fs::write(&group, groups).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("serve.log"))
            .unwrap();
        // Only the harness uses a shell: to bind the account files in the daemon's namespace.
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(&passwd)
            .arg(&group)
            .arg(BIN)
            .arg("serve")
            .arg("--policy")
            .arg(&self.policy)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let socket = self.dir.join("verbd.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                panic!("the daemon did not serve ({status}):\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no socket:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("VERBD_SOCKET", self.dir.join("verbd.sock"))
            .output()
            .unwrap()
    }

    /// The sha256 the verb reports for the secret value in force.
    fn digest(&self) -> String {
        let out = self.cli(&["call", "digest"]);
        assert!(out.status.success(), "{out:?}\n{}", self.log());
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn reload(&self) -> Output {
        self.cli(&["reload"])
    }

    /// The journal's reload events: (ok, message).
    fn reloads(&self) -> Vec<(bool, String)> {
        std::fs::read_to_string(self.dir.join("state/journal.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("event").cloned())
            .filter(|e| e["kind"] == "reload")
            .map(|e| {
                (
                    e["ok"].as_bool().unwrap(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `dir/secrets/db`, root-owned 0600, in a directory owned by `dir_owner` with mode 0700.
fn secret_in(dir: &Path, dir_owner: u32) -> PathBuf {
    let secrets = dir.join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::os::unix::fs::chown(&secrets, Some(dir_owner), Some(dir_owner)).unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = secrets.join("db");
    write_root_only(&secret, FIRST);
    secret
}

/// Rewrites the secret in place, as root, keeping it root's and 0600.
fn write_root_only(path: &Path, value: &str) {
    std::fs::write(path, format!("{value}\n")).unwrap();
    std::os::unix::fs::chown(path, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn root_only_directory_secret_is_read_before_the_drop_and_kept_across_reloads() {
    if !common::require_root("secrets_reload (root, daemon.user)") {
        return;
    }
    let dir = common::open_tempdir();
    let secret = secret_in(dir.path(), 0);
    // Serving at all: the self-test judged the source by what it was when read as root (the
    // daemon user cannot look into the directory).
    let mut daemon = Daemon::start(dir.path(), &secret);
    assert!(
        daemon.log().contains("self-test passed"),
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.digest(), sha256_hex(FIRST));

    let out = daemon.reload();
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert_eq!(daemon.digest(), sha256_hex(FIRST));

    // The daemon user cannot look into the directory: a change is seen only by a restart, and
    // the reload says so.
    write_root_only(&secret, SECOND);
    let out = daemon.reload();
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert_eq!(daemon.digest(), sha256_hex(FIRST));
    assert!(
        daemon
            .log()
            .contains("so a reload cannot see a change: the value read at start stays in force until a restart"),
        "{}",
        daemon.log()
    );
    daemon.stop();
    daemon.spawn();
    assert_eq!(daemon.digest(), sha256_hex(SECOND));
}

#[test]
fn daemon_owned_directory_secret_is_kept_and_a_changed_unreadable_one_refuses_the_reload() {
    if !common::require_root("secrets_reload (root, daemon.user)") {
        return;
    }
    let dir = common::open_tempdir();
    let secret = secret_in(dir.path(), DAEMON);
    let daemon = Daemon::start(dir.path(), &secret);
    assert_eq!(daemon.digest(), sha256_hex(FIRST));

    // Unchanged: the value read as root stays; nothing is read again.
    let out = daemon.reload();
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert_eq!(daemon.digest(), sha256_hex(FIRST));

    // Changed, and still root's 0600: the daemon user cannot read it. Refused, with the reason
    // and the fix, journaled; the old value stays in force.
    write_root_only(&secret, SECOND);
    let out = daemon.reload();
    let answer = text(&out);
    assert!(!out.status.success(), "{answer}");
    for needle in [
        "secret `db`: file",
        "changed since the daemon read it, and the daemon user cannot read it (Permission denied",
        "the reload is refused and the value read before stays in force",
        "Fix: restart the daemon",
    ] {
        assert!(answer.contains(needle), "{needle}: {answer}");
    }
    assert!(!answer.contains(SECOND) && !answer.contains(FIRST));
    let (ok, message) = daemon.reloads().last().cloned().unwrap();
    assert!(
        !ok && message.contains("changed since the daemon read it"),
        "{message}"
    );
    assert_eq!(daemon.digest(), sha256_hex(FIRST));

    // Changed and readable by the daemon user: read again.
    std::os::unix::fs::chown(&secret, Some(DAEMON), Some(DAEMON)).unwrap();
    let out = daemon.reload();
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert_eq!(daemon.digest(), sha256_hex(SECOND));
}
