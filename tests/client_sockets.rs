//! Clients find the packaged daemon's sockets by themselves: with no `--socket` and no
//! `VERBD_SOCKET`, an agent account reaches `/run/verbd/verbd.sock` and an approver account
//! `/run/verbd/approve.sock` (the paths `systemd/verbd.socket` and `verbd-approve.socket` bind),
//! and `verbd pending` prints approve commands that work as printed.
//!
//! The sockets are the real paths: the test runs its body again in a private mount namespace
//! with a tmpfs on `/run` and copies of `/etc/group` naming the package's groups, so nothing of
//! the host's `/run` or accounts changes. The clients are real uids with the package's
//! supplementary groups (`setpriv`), their environment cleared as `sudo -u` would.
mod common;
use common::policy::{Category, Policy, Verb};
use common::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const AGENT: u32 = 62801;
const APPROVER: u32 = 62802;
const OUTSIDER: u32 = 62803;
const AGENTS_GID: u32 = 62810;
const APPROVERS_GID: u32 = 62811;

/// Set (to the test's name) in the re-executed test binary inside its mount namespace.
const INSIDE: &str = "VERBD_TEST_PRIVATE_RUN";
const TEST: &str = "packaged_sockets_are_found_without_a_socket_flag";

/// One test, two processes: run by the harness, it runs its own binary again, filtered to
/// itself, in a private mount namespace (the body mounts over `/run`); there, with [`INSIDE`]
/// set, it runs the body. The harness skips nothing here: the outer run fails when the inner one does
/// or does not run.
#[test]
fn packaged_sockets_are_found_without_a_socket_flag() {
    if !require_root(TEST) {
        return;
    }
    if std::env::var(INSIDE).as_deref() == Ok(TEST) {
        return in_private_run();
    }
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(INSIDE, TEST)
        .output()
        .expect("run unshare");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the run in a private /run failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "the inner test did not run:\n{text}"
    );
}

/// The body, in the re-executed binary's own mount namespace.
fn in_private_run() {
    let own_ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let parent = nix::unistd::getppid();
    let parent_ns = std::fs::read_link(format!("/proc/{parent}/ns/mnt")).unwrap();
    assert_ne!(own_ns, parent_ns, "not in a mount namespace of its own");
    let dir = open_tempdir();
    mount(&["-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run"]);
    std::fs::create_dir("/run/verbd").unwrap();
    with_package_groups(dir.path());

    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, policy_text()).unwrap();
    let log = dir.path().join("daemon.log");
    let _daemon = Stopped(
        Command::new(BIN)
            .args(["serve", "--policy"])
            .arg(&policy)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let ready = (0..1000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        Path::new("/run/verbd/approve.sock").exists()
            && std::os::unix::net::UnixStream::connect("/run/verbd/verbd.sock").is_ok()
    });
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ready, "the daemon did not start:\n{}", log_text());

    // The agent account: list, then a mutating call that waits for a human.
    let list = client(AGENT, Some(AGENTS_GID), &["list"]);
    assert!(
        list.status.success() && stdout(&list).contains("stamp"),
        "agent list: {list:?}"
    );
    let call = client(AGENT, Some(AGENTS_GID), &["call", "stamp"]);
    let id = String::from_utf8_lossy(&call.stderr)
        .strip_prefix("CONFIRM_REQUIRED ")
        .and_then(|rest| rest.split(':').next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("agent call did not queue a proposal: {call:?}"));

    // The approver account: pending on the approver socket, and the approve line as printed.
    let pending = client(APPROVER, Some(APPROVERS_GID), &["pending"]);
    let listing = stdout(&pending);
    assert!(pending.status.success(), "approver pending: {pending:?}");
    let approve_line = listing
        .lines()
        .find_map(|l| l.trim().strip_prefix("approve:"))
        .unwrap_or_else(|| panic!("no approve: line in {listing}"))
        .trim()
        .to_string();
    assert!(
        !approve_line.contains("--socket"),
        "the default finds the socket, so no --socket: {approve_line}"
    );
    let words = shell_words::split(&approve_line).unwrap();
    assert_eq!(words[..2], ["verbd", "approve"]);
    assert_eq!(words[2], id);
    let words: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    let approved = client(APPROVER, Some(APPROVERS_GID), &words);
    assert!(
        approved.status.success(),
        "approve as printed: {approved:?}"
    );
    let waited = client(AGENT, Some(AGENTS_GID), &["wait", &id]);
    assert!(
        waited.status.success() && stdout(&waited).contains("stamped"),
        "agent wait: {waited:?}"
    );

    // (The approver is only in verbd-approvers: it can only have used approve.sock.) An
    // approver who gives --socket gets commands that name it.
    let call = client(AGENT, Some(AGENTS_GID), &["call", "stamp"]);
    assert!(
        String::from_utf8_lossy(&call.stderr).starts_with("CONFIRM_REQUIRED "),
        "second call: {call:?}"
    );
    let pending = client(
        APPROVER,
        Some(APPROVERS_GID),
        &["pending", "--socket", "/run/verbd/approve.sock"],
    );
    assert!(
        stdout(&pending).contains("--socket /run/verbd/approve.sock"),
        "approve line without the --socket it needs: {pending:?}"
    );

    // An account in neither group is told which socket it may not reach, and why.
    let refused = client(OUTSIDER, None, &["list"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && err.contains("/run/verbd/verbd.sock")
            && err.contains("Permission denied"),
        "outsider: {refused:?}"
    );
}

/// The daemon, stopped when the test ends (also when it fails: it holds the outer test's pipe).
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

fn policy_text() -> String {
    Policy::new()
        .allow_root()
        .socket("/run/verbd/verbd.sock")
        .socket_group("verbd-agents")
        .approver_socket("/run/verbd/approve.sock")
        .approver_socket_group("verbd-approvers")
        .agents("agent", &[AGENT])
        .humans("sre", &[APPROVER])
        .approvers(&["sre"])
        .verb(
            "stamp",
            Verb::command(Category::Mutating, "/bin/echo stamped")
                .description("a change someone approves")
                .roles(&["agent"]),
        )
        .render()
}

/// Bind a copy of /etc/group that has the package's two groups over /etc/group (this mount
/// namespace only).
fn with_package_groups(dir: &Path) {
    let host = std::fs::read_to_string("/etc/group").unwrap();
    let mut groups: String = host
        .lines()
        .filter(|l| !l.starts_with("verbd-agents:") && !l.starts_with("verbd-approvers:"))
        .map(|l| format!("{l}\n"))
        .collect();
    groups.push_str(&format!(
        "verbd-agents:x:{AGENTS_GID}:\nverbd-approvers:x:{APPROVERS_GID}:\n"
    ));
    let copy = dir.join("group");
    std::fs::write(&copy, groups).unwrap();
    mount(&["--bind", copy.to_str().unwrap(), "/etc/group"]);
}

fn mount(args: &[&str]) {
    let status = Command::new("mount").args(args).status().unwrap();
    assert!(status.success(), "mount {args:?}");
}

/// `verbd ARGS` as `uid` with `group` as its only supplementary group, with the environment an
/// account gets from `sudo -u`: no VERBD_SOCKET, no XDG_RUNTIME_DIR, a home without verbd state.
fn client(uid: u32, group: Option<u32>, args: &[&str]) -> Output {
    let groups = group.map_or("--clear-groups".to_string(), |g| format!("--groups={g}"));
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg(groups)
        .arg("--")
        .arg(BIN)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
