//! What ordinary tools need to run at all under `verbd exec`, as an unprivileged uid with a
//! profile that reads only `/usr /lib /lib64 /bin /etc` and writes only its project:
//!
//! - the base set every profile gets: `/dev/null`, `/dev/zero`, `/dev/full`, `/dev/urandom`,
//!   `/dev/random` and the program's own `/proc/self` (git's temporary files need random bytes,
//!   Node and Python read `/proc/self`), while another process's `/proc/PID/environ` stays out
//!   of reach and nothing of the base set is executable or a way to write elsewhere;
//! - no noise: `ls -la` prints exactly what it prints outside (owners and groups as on the host,
//!   nothing on stderr: the name-service sockets libc tries are answered as absent, quietly);
//!   any other refused connect is reported once per path, not once per call;
//! - new files follow the caller's umask, unless the profile sets one.
use crate::common;
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AGENT: u32 = 63401;
const OTHER: u32 = 63402;

/// A project owned by the agent with entries of root and of another uid, and a policy.
fn setup(umask: Option<&str>) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = open_tempdir();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(project.join("root-owned.txt"), "root\n").unwrap();
    std::fs::write(project.join("other.txt"), "other\n").unwrap();
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(project.join("src"))
        .status()
        .unwrap();
    std::os::unix::fs::chown(project.join("other.txt"), Some(OTHER), Some(OTHER)).unwrap();
    std::os::unix::fs::chown(&project, Some(AGENT), Some(AGENT)).unwrap();
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox {
            umask: umask.map(String::from),
            ..Sandbox::new(
                &["/usr", "/lib", "/lib64", "/bin", "/etc"],
                &[project.to_str().unwrap()],
            )
        },
    );
    (dir, project, policy)
}

/// `argv` as the agent in `cwd`, under `verbd exec` (`confined`) or not, with `umask`.
fn run(policy: &Path, cwd: &Path, confined: bool, umask: u32, argv: &[&str]) -> Output {
    let mut cmd = if confined {
        let mut cmd = Command::new(BIN);
        cmd.args(["exec", "--policy"])
            .arg(policy)
            .args(["--profile", "agent", "--"])
            .args(argv);
        cmd
    } else {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]);
        cmd
    };
    cmd.current_dir(cwd)
        .uid(AGENT)
        .gid(AGENT)
        .env("LC_ALL", "C")
        .env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
        .env_remove("VERBD_EXEC_LANDLOCK_ONLY");
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask);
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ls_la_prints_exactly_what_it_prints_outside_and_nothing_on_stderr() {
    if !require_root("ls_la_prints_exactly_what_it_prints_outside_and_nothing_on_stderr") {
        return;
    }
    let (_dir, project, policy) = setup(None);
    for argv in [
        &["/bin/ls", "-la"][..],
        &["/bin/ls", "-la", "/usr", "/etc/passwd"],
        &["/usr/bin/id"],
    ] {
        let outside = run(&policy, &project, false, 0o022, argv);
        let inside = run(&policy, &project, true, 0o022, argv);
        assert!(outside.status.success(), "{}", text(&outside.stderr));
        assert!(
            inside.status.success(),
            "{argv:?}: {}",
            text(&inside.stderr)
        );
        assert_eq!(text(&inside.stdout), text(&outside.stdout), "{argv:?}");
        assert_eq!(text(&inside.stderr), "", "{argv:?}: nothing on stderr");
    }
    let listing = text(&run(&policy, &project, true, 0o022, &["/bin/ls", "-la"]).stdout);
    assert!(
        listing.contains(" root  root ") && !listing.contains("nobody"),
        "owners as on the host: {listing}"
    );
}

/// Each entry of the base set, and what stays out of reach.
const BASE: &str = r#"
import os, sys
def attempt(name, op):
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
def read(path, n=16):
    with open(path, "rb") as f:
        assert len(f.read(n)) > 0
def write(path):
    with open(path, "wb") as f:
        f.write(b"x")
attempt("urandom-read", lambda: read("/dev/urandom"))
attempt("random-read", lambda: read("/dev/random"))
attempt("zero-read", lambda: read("/dev/zero"))
attempt("null-write", lambda: write("/dev/null"))
attempt("zero-write", lambda: write("/dev/zero"))
attempt("self-status", lambda: read("/proc/self/status"))
attempt("self-maps", lambda: read("/proc/self/maps"))
attempt("self-fd-list", lambda: os.listdir("/proc/self/fd"))
attempt("meminfo", lambda: read("/proc/meminfo"))
attempt("parent-environ", lambda: read(f"/proc/{os.getppid()}/environ"))
attempt("parent-cwd", lambda: os.listdir(f"/proc/{os.getppid()}/cwd"))
attempt("proc-sys-write", lambda: write("/proc/sys/kernel/hostname"))
attempt("dev-list", lambda: os.listdir("/dev"))
attempt("dev-shm-create", lambda: write("/dev/shm/verbd-base-test"))
"#;

#[test]
fn the_base_set_is_there_and_nothing_beyond_it() {
    if !require_root("the_base_set_is_there_and_nothing_beyond_it") {
        return;
    }
    let (_dir, project, policy) = setup(None);
    let out = run(
        &policy,
        &project,
        true,
        0o022,
        &["/usr/bin/python3", "-c", BASE],
    );
    let stdout = text(&out.stdout);
    println!("{stdout}\n{}", text(&out.stderr));
    let errno = |name: &str| -> i32 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {stdout}"))
            .parse()
            .unwrap()
    };
    for allowed in [
        "urandom-read",
        "random-read",
        "zero-read",
        "null-write",
        "zero-write",
        "self-status",
        "self-maps",
        "self-fd-list",
        "meminfo",
    ] {
        assert_eq!(errno(allowed), 0, "{allowed}: {stdout}");
    }
    // The launcher is outside the program's Landlock domain: ptrace-mode files are refused.
    for refused in [
        "parent-environ",
        "parent-cwd",
        "proc-sys-write",
        "dev-list",
        "dev-shm-create",
    ] {
        assert_eq!(errno(refused), libc::EACCES, "{refused}: {stdout}");
    }
    assert!(!Path::new("/dev/shm/verbd-base-test").exists());
}

#[test]
fn git_starts_and_writes_objects_with_the_base_set() {
    if !require_root("git_starts_and_writes_objects_with_the_base_set") {
        return;
    }
    let (_dir, project, policy) = setup(None);
    let git = |argv: &[&str]| {
        let mut full = vec!["/usr/bin/git"];
        full.extend_from_slice(argv);
        run(&policy, &project.join("src"), true, 0o022, &full)
    };
    // A repository the human made: the agent hashes an object into it.
    let human = Command::new("git")
        .args(["init", "-q"])
        .current_dir(project.join("src"))
        .status()
        .unwrap();
    assert!(human.success());
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(project.join("src/.git"))
        .status()
        .unwrap();
    let out = git(&["hash-object", "-w", "main.rs"]);
    assert!(
        out.status.success(),
        "git needs /dev/urandom for its temporary files: {}",
        text(&out.stderr)
    );
    let id = text(&out.stdout).trim().to_string();
    assert!(
        project
            .join("src/.git/objects")
            .join(&id[..2])
            .join(&id[2..])
            .exists()
    );
}

#[test]
fn refused_connects_are_reported_once_per_path_and_name_services_not_at_all() {
    if !require_root("refused_connects_are_reported_once_per_path_and_name_services_not_at_all") {
        return;
    }
    let (_dir, project, policy) = setup(None);
    let script = r#"
import socket
for path in ["/run/other.sock", "/run/other.sock", "/run/other.sock", "/run/second.sock",
             "/var/run/nscd/socket", "/run/systemd/userdb/io.systemd.Multiplexer"]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError as e:
        print(path, e.errno)
"#;
    let out = run(
        &policy,
        &project,
        true,
        0o022,
        &["/usr/bin/python3", "-c", script],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert_eq!(
        stdout
            .matches(&format!("/run/other.sock {}", libc::EACCES))
            .count(),
        3
    );
    assert!(stdout.contains(&format!("/var/run/nscd/socket {}", libc::ENOENT)));
    assert!(stdout.contains(&format!(
        "/run/systemd/userdb/io.systemd.Multiplexer {}",
        libc::ENOENT
    )));
    assert_eq!(stderr.matches("/run/other.sock").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("/run/second.sock").count(), 1, "{stderr}");
    assert!(
        !stderr.contains("nscd") && !stderr.contains("userdb"),
        "{stderr}"
    );
    // The full account stays in --print-status.
    let status = Command::new(BIN)
        .args(["exec", "--print-status", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .output()
        .unwrap();
    let status = text(&status.stderr);
    assert!(
        status.contains("name-service sockets answered quietly as absent (ENOENT")
            && status.contains("/var/run/nscd/socket"),
        "{status}"
    );
}

/// The mode of a new file and a new directory made by the agent under `verbd exec`.
fn new_modes(policy: &Path, project: &Path, umask: u32) -> (u32, u32) {
    let name = format!("u{umask:o}");
    let file = project.join(format!("{name}.txt"));
    let dir = project.join(format!("{name}.d"));
    let out = run(
        policy,
        project,
        true,
        umask,
        &[
            "/bin/sh",
            "-c",
            "echo x > \"$1\" && mkdir \"$2\"",
            "sh",
            file.to_str().unwrap(),
            dir.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    (mode(&file), mode(&dir))
}

#[test]
fn new_files_follow_the_callers_umask_unless_the_profile_sets_one() {
    if !require_root("new_files_follow_the_callers_umask_unless_the_profile_sets_one") {
        return;
    }
    let (_dir, project, policy) = setup(None);
    assert_eq!(new_modes(&policy, &project, 0o022), (0o644, 0o755));
    assert_eq!(new_modes(&policy, &project, 0o027), (0o640, 0o750));
    let (_dir, project, policy) = setup(Some("0077"));
    assert_eq!(
        new_modes(&policy, &project, 0o022),
        (0o600, 0o700),
        "the profile's umask wins"
    );
}
