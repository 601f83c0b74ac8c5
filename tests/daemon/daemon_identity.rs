//! Root + `daemon.user` + a `run_as` profile: `policy/example.toml`'s own PostgreSQL set-up
//! (its `[daemon]`, its secrets, the narrowed PostgreSQL pack and its `run_as = { user =
//! "postgres" }` profile) served by a daemon started as root, with real uids: the daemon user
//! `verbd` and the agent and approver accounts exist only in a private copy of /etc/passwd and
//! /etc/group, bind-mounted in the daemon's own mount namespace.
//!
//! The daemon keeps CAP_SETUID/CAP_SETGID/CAP_SETPCAP for `run_as` and nothing else, runs under
//! its identity guard (no_new_privs, seccomp), a verb of the profile runs as `postgres`, and a
//! reload cannot widen the ids the guard allows.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

const DAEMON: u32 = 62710;
const AGENTS: u32 = 62711;
const APPROVERS: u32 = 62712;
const AGENT: u32 = 62720;
const APPROVER: u32 = 62721;
/// A uid the start policy never names: a reload must not make the daemon able to take it.
const STRANGER: u32 = 62730;

struct Serving {
    child: Child,
    log: PathBuf,
}

impl Serving {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
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

/// The example policy with its sockets and state dir moved into `dir`, only its PostgreSQL
/// include, and one verb that prints the identity a child of the `run_as` profile gets.
fn example_postgres_policy(dir: &Path, run_as: &str) -> String {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/example.toml"))
            .unwrap();
    let start = example.find("include = [").unwrap();
    let end = start + example[start..].find("\n]\n").unwrap() + 3;
    let postgres = example[start..end]
        .lines()
        .find(|l| l.contains("packs/postgresql.toml"))
        .unwrap();
    let mut policy = format!(
        "{}include = [\n{postgres}\n]\n{}",
        &example[..start],
        &example[end..]
    );
    for (from, to) in [
        ("/run/verbd/verbd.sock", dir.join("verbd.sock")),
        ("/run/verbd/approve.sock", dir.join("approve.sock")),
        (
            "\"/var/lib/verbd\"",
            PathBuf::from(format!("\"{}\"", dir.join("state").display())),
        ),
        ("run_as = { user = \"postgres\" }", PathBuf::from(run_as)),
    ] {
        assert!(policy.contains(from), "example.toml no longer has {from}");
        policy = policy.replace(from, to.to_str().unwrap());
    }
    policy.push_str(
        r#"
[verb.whoami-run-as]
description = "The identity of a child of the run_as profile"
category = "read-only"
roles = ["agent"]
sandbox = "pack-psql-local"
command = "/usr/bin/id"
"#,
    );
    policy
}

/// Copies of /etc/passwd and /etc/group with the package's accounts and the test's people.
fn accounts(dir: &Path) -> (PathBuf, PathBuf) {
    let passwd = dir.join("passwd");
    let group = dir.join("group");
    let mut users = std::fs::read_to_string("/etc/passwd").unwrap();
    users.push_str(&format!(
        "verbd:x:{DAEMON}:{DAEMON}:verbd:/nonexistent:/usr/sbin/nologin\n\
         dc-agent:x:{AGENT}:{AGENTS}::/nonexistent:/usr/sbin/nologin\n\
         dc-approver:x:{APPROVER}:{APPROVERS}::/nonexistent:/usr/sbin/nologin\n"
    ));
    let mut groups = std::fs::read_to_string("/etc/group").unwrap();
    groups.push_str(&format!(
        "verbd:x:{DAEMON}:\nverbd-agents:x:{AGENTS}:dc-agent\nverbd-approvers:x:{APPROVERS}:dc-approver\n"
    ));
    std::fs::write(&passwd, users).unwrap();
    std::fs::write(&group, groups).unwrap();
    (passwd, group)
}

fn serve(dir: &Path, policy: &Path, credentials: &Path) -> Serving {
    let (passwd, group) = accounts(dir);
    let log = dir.join("serve.log");
    // Only the test harness uses a shell: to bind the account files in the daemon's namespace.
    let child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(r#"mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@""#)
        .arg("sh")
        .arg(&passwd)
        .arg(&group)
        .arg(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(policy)
        .env("CREDENTIALS_DIRECTORY", credentials)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let serving = Serving { child, log };
    let socket = dir.join("verbd.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut serving = serving;
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = serving.child.try_wait() {
            panic!(
                "the example's PostgreSQL set-up did not serve ({status}):\n{}",
                serving.log()
            );
        }
        assert!(Instant::now() < deadline, "no socket:\n{}", serving.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    serving
}

fn cli_as(uid: u32, gid: u32, socket: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .env("VERBD_SOCKET", socket)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap()
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} missing"))
        .trim()
        .to_string()
}

#[test]
fn the_example_postgres_set_up_serves_as_verbd_with_only_the_run_as_path() {
    if !common::require_root("daemon_identity (root, daemon.user, run_as)") {
        return;
    }
    let Some(postgres) = nix::unistd::User::from_name("postgres").ok().flatten() else {
        common::skip::skip_or_fail(
            "daemon_identity",
            "no `postgres` account (install the postgresql package)",
        );
        return;
    };
    let dir = common::open_tempdir();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/packs"),
        dir.path().join("packs"),
    )
    .unwrap();
    // systemd hands LoadCredential= files to the service user in a private directory.
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("pg_password"), "pg-password-for-the-test").unwrap();
    std::fs::write(credentials.join("kubeconfig"), "apiVersion: v1\n").unwrap();
    for entry in ["", "pg_password", "kubeconfig"] {
        let path = credentials.join(entry);
        std::os::unix::fs::chown(&path, Some(DAEMON), Some(DAEMON)).unwrap();
        let mode = if entry.is_empty() { 0o700 } else { 0o400 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        example_postgres_policy(dir.path(), "run_as = { user = \"postgres\" }"),
    )
    .unwrap();

    let serving = serve(dir.path(), &policy, &credentials);
    assert!(
        serving.log().contains("self-test passed"),
        "{}",
        serving.log()
    );

    // The daemon is verbd, holds exactly CAP_SETGID, CAP_SETUID and CAP_SETPCAP (bits 6, 7, 8),
    // nothing inheritable or ambient, and runs under no_new_privs and its seccomp guard.
    let pid = serving.child.id();
    for field in ["Uid", "Gid"] {
        assert_eq!(
            status_field(pid, field)
                .split_whitespace()
                .collect::<Vec<_>>(),
            vec![DAEMON.to_string(); 4],
            "{field}"
        );
    }
    for (field, want) in [
        ("CapPrm", "00000000000001c0"),
        ("CapEff", "00000000000001c0"),
        ("CapBnd", "00000000000001c0"),
        ("CapInh", "0000000000000000"),
        ("CapAmb", "0000000000000000"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ] {
        assert_eq!(status_field(pid, field), want, "{field}");
    }

    // The run_as path works: a verb of the profile runs as postgres, with no groups but its own.
    let socket = dir.path().join("verbd.sock");
    let out = cli_as(AGENT, AGENTS, &socket, &["call", "whoami-run-as"]);
    assert!(out.status.success(), "{out:?}\n{}", serving.log());
    let id = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        id.starts_with(&format!(
            "uid={}(postgres) gid={}",
            postgres.uid, postgres.gid
        )),
        "{id}"
    );

    // A reload that names a uid the daemon did not start with is refused, loudly and with the
    // fix; the old policy keeps serving.
    std::fs::write(
        &policy,
        example_postgres_policy(
            dir.path(),
            &format!("run_as = {{ user = \"{STRANGER}\", group = \"{STRANGER}\" }}"),
        ),
    )
    .unwrap();
    let approve = dir.path().join("approve.sock");
    let out = cli_as(APPROVER, APPROVERS, &approve, &["reload"]);
    let answer =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{answer}");
    assert!(
        answer.contains(&format!(
            "run_as uid {STRANGER} gid {STRANGER} is not one this daemon may switch to"
        )) && answer.contains("restart the daemon"),
        "{answer}\n{}",
        serving.log()
    );
    let out = cli_as(AGENT, AGENTS, &socket, &["call", "whoami-run-as"]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(&format!("uid={}(postgres)", postgres.uid)),
        "{out:?}"
    );
}
