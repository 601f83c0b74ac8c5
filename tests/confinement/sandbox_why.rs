//! Finding out what a sandbox denied (issue 14, item 5): Landlock ABI 7's audit records of a
//! sandboxed program's denials, where the kernel has them, for `verbd exec` and for a verb run by
//! the daemon; and `verbd sandbox why PROFILE PATH ACCESS`, whose answer is checked against what
//! a real confined child observes for the same path.
use crate::common;
use crate::hostile;

use common::policy::{Category, Policy, Sandbox, Verb, write_exec_policy};
use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const AGENT: u32 = 61765;
const PYTHON: &str = "/usr/bin/python3";

/// `python3 -c AUDIT_DAEMON`: becomes the kernel's audit daemon for the test (`AUDIT_SET` of
/// `enabled` and `pid` over netlink), prints `ready`, then prints the text of every Landlock
/// access record (`AUDIT_LANDLOCK_ACCESS`, 1423) it receives; when its stdin closes it puts the
/// previous `enabled` back and resigns. Records reach it directly: the kernel log, used when no
/// audit daemon runs, is rate-limited.
const AUDIT_DAEMON: &str = r#"
import os, select, socket, struct, sys
AUDIT_GET, AUDIT_SET, ENABLED, PID = 1000, 1001, 1, 4
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
def send(kind, payload=b""):
    s.send(struct.pack("=IHHII", 16 + len(payload), kind, 5 if payload else 1, 0, 0) + payload)
def status(enabled, pid):
    return struct.pack("=IIIIIIIIIII", ENABLED | PID, enabled, 0, pid, 0, 0, 0, 0, 0, 0, 0)
def reply(kind):
    while True:
        data = s.recv(65536)
        if struct.unpack("=IH", data[:6])[1] == kind:
            return data[16:]
send(AUDIT_GET)
before = struct.unpack("=II", reply(AUDIT_GET)[:8])[1]
send(AUDIT_SET, status(1, os.getpid()))
error = struct.unpack("=i", reply(2)[:4])[0]
if error != 0:
    sys.exit(f"cannot become the audit daemon: error {error}")
print("ready", flush=True)
try:
    while True:
        ready, _, _ = select.select([s, sys.stdin], [], [])
        if sys.stdin in ready and not sys.stdin.readline():
            break
        if s in ready:
            data = s.recv(65536)
            # Audit records' nlmsg_len counts the payload only.
            length, kind = struct.unpack("=IH", data[:6])
            if kind == 1423:
                print(data[16:16 + length].decode(errors="replace").rstrip("\0"), flush=True)
finally:
    send(AUDIT_SET, status(before, 0))
"#;

/// The test's audit daemon (see [`AUDIT_DAEMON`]); resigns on drop.
struct AuditDaemon {
    child: std::process::Child,
    records: std::sync::mpsc::Receiver<String>,
}

impl AuditDaemon {
    fn start() -> AuditDaemon {
        let mut child = Command::new(PYTHON)
            .args(["-c", AUDIT_DAEMON])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().map(Result::unwrap);
        assert_eq!(
            first.as_deref(),
            Some("ready"),
            "the test audit daemon did not start"
        );
        let (sender, records) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        AuditDaemon { child, records }
    }

    /// The first Landlock record that contains every needle, within 10 s.
    fn record(&self, needles: &[&str]) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.records.recv_timeout(left) {
                Ok(line) if needles.iter().all(|n| line.contains(n)) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for AuditDaemon {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn exec_policy(dir: &Path) -> std::path::PathBuf {
    let policy = dir.join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox::new(
            &["/usr", "/lib", "/lib64", "/bin", "/etc"],
            &[dir.join("repo").to_str().unwrap()],
        ),
    );
    policy
}

/// `peek`, which reads a file its profile `narrow` does not.
fn verb_policy() -> String {
    Policy::new()
        .allow_root()
        .agents("agent", &[AGENT])
        .sandbox(
            "narrow",
            Sandbox::new(&["/usr", "/lib", "/lib64", "/bin"], &[]),
        )
        .verb(
            "peek",
            Verb::command(Category::ReadOnly, "/bin/cat @DIR@/verb-denied.txt")
                .description("read a file outside the profile")
                .roles(&["agent"])
                .sandbox("narrow"),
        )
        .render()
}

#[test]
fn landlock_denials_are_audited_for_verbd_exec_and_for_verbs() {
    if !require_root("landlock_denials_are_audited_for_verbd_exec_and_for_verbs") {
        return;
    }
    let dir = open_tempdir();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    let policy = exec_policy(dir.path());
    let denied = dir.path().join("denied-by-landlock.txt");
    std::fs::write(&denied, "outside every root").unwrap();
    let status = Command::new(BIN)
        .args(["exec", "--print-status", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&status.stderr).into_owned();
    println!("{stderr}");
    let kernel_abi: i32 = stderr
        .split("(kernel ABI ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kernel ABI in {stderr}"));
    if kernel_abi < 7 {
        // Nothing to log on this kernel: the status says so instead of claiming it.
        assert!(
            stderr.contains("Landlock denials are not logged"),
            "{stderr}"
        );
        skip::announce(&format!(
            "landlock_denials_are_audited: kernel Landlock ABI {kernel_abi} has no audit logging; checked that --print-status says so"
        ));
        return;
    }
    assert!(
        stderr.contains("Landlock denials are logged to the kernel audit log"),
        "{stderr}"
    );
    let audit = AuditDaemon::start();

    let out = Command::new(BIN)
        .args(["exec", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", "/bin/cat"])
        .arg(&denied)
        .uid(AGENT)
        .gid(AGENT)
        .current_dir("/")
        .output()
        .unwrap();
    println!("exec: {}", text(&out));
    assert!(!out.status.success(), "{}", text(&out));
    let path = format!("path=\"{}\"", denied.display());
    let line = audit
        .record(&["blockers=fs.read_file", &path])
        .unwrap_or_else(|| panic!("no Landlock audit record naming {path}"));
    println!("audit: {line}");

    // A verb run by the daemon: its denial is in the audit log too.
    let daemon = Daemon::start_with(&verb_policy(), |dir| {
        std::fs::write(dir.join("verb-denied.txt"), "not for the verb").unwrap();
    });
    daemon.open_socket();
    let answers = hostile::requests_as(AGENT, &daemon.socket, &[hostile::call("peek", &[])]);
    let response = hostile::decode(&answers[0]);
    println!("verb: {response:?}");
    assert!(
        matches!(&response, verbd::protocol::Response::Ok { result, .. } if result.exit.code == Some(1)),
        "{response:?}"
    );
    let path = format!("path=\"{}\"", daemon.path("verb-denied.txt").display());
    let line = audit
        .record(&["blockers=fs.read_file", &path])
        .unwrap_or_else(|| panic!("no Landlock audit record naming {path}"));
    println!("audit: {line}");
}

/// `verbd sandbox why …` (with the variable `mode` names set, if any): (exit code, stdout).
fn why(mode: Option<&str>, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["sandbox", "why"]).args(args);
    if let Some(variable) = mode {
        cmd.env(variable, "1");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("why {args:?}: {}", text(&out));
    (out.status.code(), stdout)
}

/// What a real confined child of `verbd exec` observes: `name 0` or `name errno` per attempt.
const OBSERVE: &str = r#"
import os, sys
def attempt(name, op):
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
repo = sys.argv[1]
def write(path):
    with open(path, "a") as f:
        f.write("x")
attempt("memory-write", lambda: write(repo + "/CLAUDE.md"))
attempt("memory-remove", lambda: os.unlink(repo + "/CLAUDE.md"))
attempt("new-top-level", lambda: write(repo + "/new.py"))
attempt("new-in-src", lambda: write(repo + "/src/new.rs"))
attempt("protected-name-in-src", lambda: write(repo + "/src/AGENTS.md"))
attempt("read-hostname", lambda: open("/etc/hostname").read())
"#;

/// In every mode of `verbd exec` (the default, `VERBD_EXEC_MOUNT_NAMESPACE`,
/// `VERBD_EXEC_LANDLOCK_ONLY`), each answer of `sandbox why --exec` matches what a real
/// confined child observed for the same access (a write's second check, removing, for
/// `memory-remove`).
#[test]
fn sandbox_why_agrees_with_a_real_confined_child() {
    if !require_root("sandbox_why_agrees_with_a_real_confined_child") {
        return;
    }
    for mode in [
        None,
        Some(verbd::sandbox::MOUNT_NAMESPACE_ENV),
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV),
    ] {
        why_agrees_in_one_mode(mode);
    }
}

fn why_agrees_in_one_mode(mode: Option<&str>) {
    let dir = open_tempdir();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("CLAUDE.md"), "memory").unwrap();
    let policy = exec_policy(dir.path());
    let policy_arg = policy.to_str().unwrap();
    let mut exec = Command::new(BIN);
    exec.args([
        "exec",
        "--policy",
        policy_arg,
        "--profile",
        "agent",
        "--",
        PYTHON,
        "-c",
    ])
    .arg(OBSERVE)
    .arg(&repo)
    .stdout(Stdio::piped());
    if let Some(variable) = mode {
        exec.env(variable, "1");
    }
    let mut child = exec.spawn().unwrap();
    let observed: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .collect();
    assert!(child.wait().unwrap().success());
    println!("observed ({mode:?}): {observed:?}");
    let outcome = |name: &str| -> bool {
        observed
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {observed:?}"))
            == "0"
    };
    let path = |rel: &str| repo.join(rel).to_str().unwrap().to_string();
    let exec_args = |target: &str, access: &str| -> (Option<i32>, String) {
        why(
            mode,
            &["--exec", "--policy", policy_arg, "agent", target, access],
        )
    };
    for (name, target, access) in [
        ("memory-write", path("CLAUDE.md"), "write"),
        ("new-top-level", path("new.py"), "write"),
        ("new-in-src", path("src/new.rs"), "write"),
        // Refused by the create broker in both modes, so it does not exist afterwards.
        ("protected-name-in-src", path("src/AGENTS.md"), "write"),
        ("read-hostname", "/etc/hostname".to_string(), "read"),
    ] {
        // The child ran before `why`, so a file it created exists now: ask about a fresh name.
        let asked = if name.starts_with("new-") {
            format!("{target}.fresh")
        } else {
            target
        };
        let (code, stdout) = exec_args(&asked, access);
        let allowed = outcome(name);
        assert_eq!(
            code == Some(0),
            allowed,
            "{name}: child allowed={allowed}\n{stdout}"
        );
        assert!(
            stdout.contains(if allowed { "ALLOWED" } else { "DENIED" }),
            "{stdout}"
        );
    }
    let (_, memory) = exec_args(&path("CLAUDE.md"), "write");
    let remove = memory
        .lines()
        .find(|l| l.contains("remove or replace it"))
        .unwrap_or_else(|| panic!("{memory}"));
    assert_eq!(
        remove.contains(": allowed by"),
        outcome("memory-remove"),
        "{memory}"
    );
    let (_, agents) = exec_args(&path("src/AGENTS.md"), "write");
    assert!(
        agents.contains("the create broker of `verbd exec`: a new protected name `agents.md`"),
        "{agents}"
    );
    assert!(!outcome("protected-name-in-src"));
    match mode {
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV) => {
            assert!(memory.contains("Landlock-only split"), "{memory}");
            assert!(memory.contains("protected name `claude.md`"), "{memory}");
        }
        Some(_) => {
            assert!(memory.contains("user + mount namespace"), "{memory}");
            assert!(memory.contains("read-only bind mount of"), "{memory}");
        }
        None => {
            assert!(
                memory.contains("no namespace, write roots whole"),
                "{memory}"
            );
            assert!(
                memory
                    .contains("the create broker of `verbd exec`: the protected name `claude.md`"),
                "{memory}"
            );
        }
    }

    // As the daemon builds the profile: the write root is whole, the policy is private.
    let (code, memory) = why(
        mode,
        &["--policy", policy_arg, "agent", &path("CLAUDE.md"), "write"],
    );
    assert_eq!(code, Some(0), "{memory}");
    assert!(memory.contains("granted whole"), "{memory}");
    let (code, private) = why(mode, &["--policy", policy_arg, "agent", policy_arg, "read"]);
    assert_eq!(code, Some(1), "{private}");
    assert!(private.contains("private path of the daemon"), "{private}");
}

/// `sandbox why --exec` says what the agent may connect to, as `--print-status` does.
#[test]
fn sandbox_why_exec_says_which_sockets_the_agent_may_connect_to() {
    let dir = open_tempdir();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    let policy = exec_policy(dir.path());
    let (code, stdout) = why(
        None,
        &[
            "--exec",
            "--policy",
            policy.to_str().unwrap(),
            "agent",
            "/usr",
            "read",
        ],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let connect = stdout
        .lines()
        .find(|line| line.starts_with("connect: unix sockets: connect brokered; allowed: ["))
        .unwrap_or_else(|| panic!("no connect line: {stdout}"));
    assert!(
        connect.contains(".sock") && connect.contains("name-service sockets"),
        "{connect}"
    );
    assert!(
        stdout.lines().any(|line| line.starts_with("network: none")),
        "{stdout}"
    );
}
