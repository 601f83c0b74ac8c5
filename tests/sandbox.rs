//! The per-call sandbox, applied for real: each test spawns a real child under a prepared
//! profile and asserts what the kernel answered (errno, file contents, /proc status). Where an
//! outcome could also come from something other than the sandbox, a control run without it shows
//! the difference. Needs root (run_as, bounding set); under CI a missing precondition fails.
#[path = "common/skip.rs"]
mod skip;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use verbd::sandbox::{
    ConfinementStatus, Network, PreparedSandbox, RunAs, SandboxError, SandboxSpec, Stage,
    WriteRoots, exec_confined, spawn_failure, stage_of_spawn_error,
};

const PYTHON: &str = "/usr/bin/python3";

/// True when the test can run; fails under CI when it cannot, skips loudly otherwise.
fn privileged() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let have_python = Path::new(PYTHON).exists();
    if root && have_python {
        return true;
    }
    let why = format!("root: {root}, {PYTHON} present: {have_python}");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("sandbox tests need root and python3 under CI ({why})");
    }
    skip::announce(&format!(
        "SKIPPED sandbox test: needs root and python3 ({why})"
    ));
    false
}

fn spec(name: &str, write: &[&Path]) -> SandboxSpec {
    let mut spec = SandboxSpec::new(name);
    spec.read = ["/usr", "/lib", "/lib64", "/bin", "/etc", "/proc"]
        .iter()
        .map(PathBuf::from)
        .collect();
    spec.write = write.iter().map(|p| p.to_path_buf()).collect();
    assert_eq!(spec.umask, None);
    assert_eq!(spec.network, Network::None);
    spec
}

fn prepare(spec: SandboxSpec) -> PreparedSandbox {
    PreparedSandbox::prepare(spec).expect("profile prepares")
}

fn command(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

fn run(sandbox: Option<&PreparedSandbox>, program: &str, args: &[&str]) -> Output {
    let mut cmd = command(program, args);
    if let Some(sandbox) = sandbox {
        sandbox.install_std(&mut cmd).unwrap();
    }
    cmd.output().expect("spawn")
}

/// Runs a Python snippet and returns its stdout, asserting it exited 0.
fn python(sandbox: Option<&PreparedSandbox>, code: &str) -> String {
    let out = run(sandbox, PYTHON, &["-c", code]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python failed: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `key=value` lines into pairs.
fn results(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value<'a>(results: &'a [(String, String)], key: &str) -> &'a str {
    results
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no result for {key} in {results:?}"))
}

/// A Python helper that runs `op` and prints `name=0` or `name=<errno>`.
const TRY: &str = r#"
import os, errno, ctypes, socket
def attempt(name, op):
    try:
        op()
        print(f"{name}=0", flush=True)
    except OSError as e:
        print(f"{name}={e.errno}", flush=True)
def write(path, data="x"):
    with open(path, "w") as f:
        f.write(data)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys(name, nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    err = ctypes.get_errno()
    if rc == 0 and name.startswith("clone"):
        os._exit(0)
    if rc > 0 and name.startswith("clone"):
        os.waitpid(rc, 0)
    print(f"{name}={0 if rc >= 0 else err}", flush=True)
"#;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// A write root shaped like a repository, and a directory outside it.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let root = base.join("repo");
    let outside = base.join("outside");
    for d in [".git/hooks", ".git/objects", ".claude", "src", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::create_dir_all(&outside).unwrap();
    for (f, content) in [
        ("README.md", "readme"),
        ("CLAUDE.md", "original memory"),
        (".git/config", "[core]"),
        (".git/hooks/pre-commit", "#!/bin/sh"),
        ("src/lib.rs", "fn main() {}"),
    ] {
        std::fs::write(root.join(f), content).unwrap();
    }
    std::fs::write(outside.join("target.txt"), "untouched").unwrap();
    // Planted before the profile is prepared: the walk must not follow it.
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    Tree {
        _dir: dir,
        root,
        outside,
    }
}

#[test]
fn split_write_roots_keep_protected_names_read_only() {
    if !privileged() {
        return;
    }
    let t = tree();
    let sandbox =
        PreparedSandbox::prepare_with(spec("fs", &[&t.root]), WriteRoots::ProtectedReadOnly)
            .expect("profile prepares");
    // Planted after preparation, inside a directory granted whole.
    std::os::unix::fs::symlink(&t.outside, t.root.join("src/late")).unwrap();
    let r = t.root.display();
    let o = t.outside.display();
    let code = format!(
        r#"{TRY}
attempt("outside", lambda: write("{o}/new.txt"))
attempt("outside_existing", lambda: write("{o}/target.txt"))
attempt("inside_modify", lambda: write("{r}/README.md", "changed"))
attempt("inside_create_sub", lambda: write("{r}/src/new.rs", "new"))
attempt("inside_create_tmp", lambda: write("{r}/tmp/scratch", "s"))
attempt("protected_modify", lambda: write("{r}/CLAUDE.md", "evil"))
attempt("protected_unlink", lambda: os.unlink("{r}/CLAUDE.md"))
attempt("protected_rename", lambda: os.rename("{r}/README.md", "{r}/CLAUDE.md"))
attempt("protected_create", lambda: write("{r}/AGENTS.md", "evil"))
attempt("protected_dir_create", lambda: write("{r}/.claude/settings.json", "{{}}"))
attempt("git_hook_modify", lambda: write("{r}/.git/hooks/pre-commit", "evil"))
attempt("git_hook_create", lambda: write("{r}/.git/hooks/post-checkout", "evil"))
attempt("git_config_modify", lambda: write("{r}/.git/config", "evil"))
attempt("git_objects_create", lambda: write("{r}/.git/objects/ab", "blob"))
attempt("symlink_escape", lambda: write("{r}/escape/target.txt", "evil"))
attempt("symlink_late", lambda: write("{r}/src/late/target.txt", "evil"))
attempt("top_level_create", lambda: write("{r}/new-top-level.txt"))
attempt("dev_null", lambda: write("/dev/null"))
attempt("read_protected", lambda: open("{r}/CLAUDE.md").read())
"#
    );
    let res = results(&python(Some(&sandbox), &code));
    let eacces = libc::EACCES.to_string();
    for key in [
        "outside",
        "outside_existing",
        "protected_modify",
        "protected_unlink",
        "protected_rename",
        "protected_create",
        "protected_dir_create",
        "git_hook_modify",
        "git_hook_create",
        "git_config_modify",
        "symlink_escape",
        "symlink_late",
        "top_level_create",
    ] {
        assert_eq!(value(&res, key), eacces, "{key} must be refused: {res:?}");
    }
    for key in [
        "inside_modify",
        "inside_create_sub",
        "inside_create_tmp",
        "git_objects_create",
        "dev_null",
        "read_protected",
    ] {
        assert_eq!(value(&res, key), "0", "{key} must work: {res:?}");
    }
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&t.root.join("CLAUDE.md")), "original memory");
    assert_eq!(read(&t.root.join(".git/config")), "[core]");
    assert_eq!(read(&t.outside.join("target.txt")), "untouched");
    assert_eq!(read(&t.root.join("README.md")), "changed");
    assert!(!t.root.join("AGENTS.md").exists());
    assert!(!t.outside.join("new.txt").exists());
}

/// Verb profiles: the write root is granted whole, so entries are created, renamed and removed
/// anywhere in it (protected names included: for verbs, typed parameters keep those), and
/// nothing outside it is writable.
#[test]
fn whole_write_roots_allow_create_rename_and_remove_anywhere_inside() {
    if !privileged() {
        return;
    }
    let t = tree();
    let sandbox = prepare(spec("fs", &[&t.root]));
    let r = t.root.display();
    let o = t.outside.display();
    let code = format!(
        r#"{TRY}
import tempfile
attempt("mktemp_top", lambda: tempfile.mkstemp(dir="{r}"))
attempt("mkdir_top", lambda: os.mkdir("{r}/new-dir"))
attempt("create_top", lambda: write("{r}/new.py", "print()"))
attempt("rename_top", lambda: os.rename("{r}/new.py", "{r}/renamed.py"))
attempt("remove_top", lambda: os.unlink("{r}/renamed.py"))
attempt("remove_dir", lambda: os.rmdir("{r}/new-dir"))
attempt("create_in_git", lambda: write("{r}/.git/index.lock"))
attempt("outside", lambda: write("{o}/new.txt"))
attempt("rename_out", lambda: os.rename("{r}/README.md", "{o}/README.md"))
attempt("symlink_escape", lambda: write("{r}/escape/target.txt", "evil"))
"#
    );
    let res = results(&python(Some(&sandbox), &code));
    for key in [
        "mktemp_top",
        "mkdir_top",
        "create_top",
        "rename_top",
        "remove_top",
        "remove_dir",
        "create_in_git",
    ] {
        assert_eq!(value(&res, key), "0", "{key} must work: {res:?}");
    }
    let eacces = libc::EACCES.to_string();
    for key in ["outside", "rename_out", "symlink_escape"] {
        assert_eq!(value(&res, key), eacces, "{key} must be refused: {res:?}");
    }
    assert!(t.root.join("README.md").exists());
    assert!(!t.outside.join("new.txt").exists());
    assert!(!t.root.join("new-dir").exists() && !t.root.join("renamed.py").exists());
}

#[test]
fn missing_paths_are_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let mut bad = spec("bad", &[]);
    bad.read.push(missing.clone());
    let err = PreparedSandbox::prepare(bad).expect_err("must fail");
    assert!(matches!(err, SandboxError::Path { .. }), "{err}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");
}

const DENIED_SYSCALLS_PY: &str = r#"
sys("ptrace", 101, 16, 0x7ffffff0, 0, 0)              # PTRACE_ATTACH to no such pid
sys("mount", 165, 0, 0, 0, 0, 0)
sys("unshare", 272, 0)
sys("setns", 308, -1, 0)
sys("bpf", 321, 9999, 0, 0)
sys("keyctl", 250, 9999, 0, 0, 0, 0)
sys("add_key", 248, 0, 0, 0, 0, 0)
sys("io_uring_setup", 425, 0, 0)
sys("perf_event_open", 298, 0, 0, -1, -1, 0)
sys("userfaultfd", 323, 0)
sys("process_vm_readv", 310, os.getpid(), 0, 0, 0, 0, 0)
sys("clone_newuts", 56, 0x04000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUTS | SIGCHLD
sys("clone3", 435, 0, 0)
sys("x32_getpid", 0x40000000 + 39)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("fork=0", flush=True)
"#;

#[test]
fn denied_syscalls_return_eperm_and_clone3_enosys() {
    if !privileged() {
        return;
    }
    let sandbox = prepare(spec("syscalls", &[]));
    let code = format!("{TRY}{DENIED_SYSCALLS_PY}");
    let confined = results(&python(Some(&sandbox), &code));
    let control = results(&python(None, &code));
    let eperm = libc::EPERM.to_string();
    for key in [
        "ptrace",
        "mount",
        "unshare",
        "setns",
        "bpf",
        "keyctl",
        "add_key",
        "io_uring_setup",
        "perf_event_open",
        "userfaultfd",
        "process_vm_readv",
        "clone_newuts",
        "x32_getpid",
    ] {
        assert_eq!(value(&confined, key), eperm, "{key}: {confined:?}");
        assert_ne!(
            value(&control, key),
            eperm,
            "{key} without the sandbox must not be EPERM, or the test proves nothing"
        );
    }
    assert_eq!(value(&confined, "clone3"), libc::ENOSYS.to_string());
    assert_ne!(value(&control, "clone3"), libc::ENOSYS.to_string());
    assert_eq!(value(&confined, "fork"), "0", "plain fork still works");
}

const SOCKETS_PY: &str = r#"
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
attempt("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
attempt("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
attempt("socketpair", lambda: [s.close() for s in socket.socketpair()])
"#;

#[test]
fn network_none_allows_only_unix_sockets_and_full_allows_inet() {
    if !privileged() {
        return;
    }
    let code = format!("{TRY}{SOCKETS_PY}");
    let none = results(&python(Some(&prepare(spec("net-none", &[]))), &code));
    let mut full_spec = spec("net-full", &[]);
    full_spec.network = Network::Full;
    let full = results(&python(Some(&prepare(full_spec)), &code));
    let eperm = libc::EPERM.to_string();
    for key in ["inet", "inet6", "netlink"] {
        assert_eq!(
            value(&none, key),
            eperm,
            "{key} with network none: {none:?}"
        );
        assert_eq!(value(&full, key), "0", "{key} with network full: {full:?}");
    }
    for key in ["unix", "socketpair"] {
        assert_eq!(value(&none, key), "0", "{key}: {none:?}");
        assert_eq!(value(&full, key), "0", "{key}: {full:?}");
    }
}

fn status_of(sandbox: &PreparedSandbox) -> ConfinementStatus {
    let out = run(Some(sandbox), "/bin/cat", &["/proc/self/status"]);
    assert!(out.status.success(), "{out:?}");
    ConfinementStatus::parse(&String::from_utf8_lossy(&out.stdout), "child")
}

#[test]
fn child_status_shows_no_new_privs_seccomp_and_no_capabilities() {
    if !privileged() {
        return;
    }
    let status = status_of(&prepare(spec("status", &[])));
    assert!(status.no_new_privs, "{status}");
    assert_eq!(status.seccomp_mode, 2, "{status}");
    assert_eq!(status.seccomp_filters, 3, "{status}");
    assert_eq!(
        (
            status.cap_eff,
            status.cap_prm,
            status.cap_bnd,
            status.cap_inh,
            status.cap_amb
        ),
        (0, 0, 0, 0, 0),
        "{status}"
    );
    assert!(status.landlock_abi >= 6, "{status}");
}

#[test]
fn kept_capabilities_survive_exec_as_root_and_as_run_as_user() {
    if !privileged() {
        return;
    }
    let bind = 1u64 << caps::Capability::CAP_NET_BIND_SERVICE.index();
    let mut keep = spec("keep", &[]);
    keep.keep_capabilities = vec![caps::Capability::CAP_NET_BIND_SERVICE];
    let status = status_of(&prepare(keep.clone()));
    assert_eq!(
        (status.cap_eff, status.cap_prm, status.cap_bnd),
        (bind, bind, bind),
        "{status}"
    );
    keep.run_as = Some(RunAs {
        uid: 61010,
        gid: 61010,
    });
    let status = status_of(&prepare(keep));
    assert_eq!(status.uid, 61010, "{status}");
    assert_eq!((status.cap_eff, status.cap_amb), (bind, bind), "{status}");
}

#[test]
fn run_as_switches_uid_gid_and_clears_supplementary_groups() {
    if !privileged() {
        return;
    }
    let mut s = spec("run-as", &[]);
    s.run_as = Some(RunAs {
        uid: 61001,
        gid: 61002,
    });
    let out = run(Some(&prepare(s)), "/bin/cat", &["/proc/self/status"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
    };
    assert_eq!(line("Uid:"), ["61001"; 4], "{text}");
    assert_eq!(line("Gid:"), ["61002"; 4], "{text}");
    assert!(line("Groups:").is_empty(), "{text}");
    // The test process itself has supplementary groups only if root has any; the child has none.
    let status = ConfinementStatus::parse(&text, "child");
    assert_eq!((status.cap_eff, status.cap_prm, status.cap_bnd), (0, 0, 0));
}

#[test]
fn rlimits_contain_a_large_allocation() {
    if !privileged() {
        return;
    }
    let code = r#"
import mmap
try:
    m = mmap.mmap(-1, 10 * 1024**3)
    m.close()
    print("alloc=0")
except OSError as e:
    print(f"alloc={e.errno}")
"#;
    let confined = results(&python(Some(&prepare(spec("as", &[]))), code));
    assert_eq!(value(&confined, "alloc"), libc::ENOMEM.to_string());
    let control = results(&python(None, code));
    assert_eq!(
        value(&control, "alloc"),
        "0",
        "control must be able to map 10 GiB"
    );
}

#[test]
fn rlimits_contain_a_fork_bomb() {
    if !privileged() {
        return;
    }
    let mut s = spec("bomb", &[]);
    s.run_as = Some(RunAs {
        uid: 61003,
        gid: 61003,
    });
    s.rlimits.processes = 16;
    let sandbox = prepare(s);
    // Every process forks until the kernel refuses; the first one reports how it ended.
    let code = r#"
import os, time
first = os.getpid()
forks = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        if os.getpid() == first:
            print(f"forks={forks}", flush=True)
            print(f"errno={e.errno}", flush=True)
            os._exit(0)
        time.sleep(30)
        os._exit(0)
    if pid == 0:
        forks = 0
    else:
        forks += 1
    if forks > 1000:
        print("uncontained=1", flush=True)
        os._exit(1)
"#;
    let mut cmd = command(PYTHON, &["-c", code]);
    cmd.stdout(Stdio::piped());
    sandbox.install_std(&mut cmd).unwrap();
    let mut child = cmd.spawn().unwrap();
    let pgid = child.id() as libc::pid_t;
    let status = child.wait().unwrap();
    // SAFETY: kill takes plain integers; the group is the child's own session (setsid).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let res = results(&stdout);
    assert!(status.success(), "{status:?} {stdout}");
    assert_eq!(value(&res, "errno"), libc::EAGAIN.to_string(), "{stdout}");
    let forks: u32 = value(&res, "forks").parse().unwrap();
    assert!(forks < 16, "{stdout}");
    // This process lives on and can still spawn.
    assert!(run(None, "/bin/true", &[]).status.success());
}

#[test]
fn sandboxed_child_cannot_signal_the_parent_or_a_sibling() {
    if !privileged() {
        return;
    }
    let sandbox = prepare(spec("signals", &[]));
    let mut sibling = command("/bin/sleep", &["30"]);
    sandbox.install_std(&mut sibling).unwrap();
    let mut sibling = sibling.spawn().unwrap();
    let code = format!(
        r#"{TRY}
import signal
attempt("parent", lambda: os.kill({parent}, 0))
attempt("sibling", lambda: os.kill({sibling}, signal.SIGTERM))
pid = os.fork()
if pid == 0:
    time_to_die = __import__("time").sleep(30)
    os._exit(0)
attempt("own_child", lambda: os.kill(pid, signal.SIGKILL))
os.waitpid(pid, 0)
"#,
        parent = std::process::id(),
        sibling = sibling.id()
    );
    let confined = results(&python(Some(&sandbox), &code));
    let control = results(&python(None, &code.replace("signal.SIGTERM", "0")));
    let eperm = libc::EPERM.to_string();
    assert_eq!(value(&confined, "parent"), eperm, "{confined:?}");
    assert_eq!(value(&confined, "sibling"), eperm, "{confined:?}");
    assert_eq!(value(&confined, "own_child"), "0", "{confined:?}");
    assert_eq!(value(&control, "parent"), "0");
    assert_eq!(value(&control, "sibling"), "0");
    assert!(
        sibling.try_wait().unwrap().is_none(),
        "the sibling must still run"
    );
    sibling.kill().unwrap();
    sibling.wait().unwrap();
}

#[test]
fn a_failing_stage_prevents_exec_and_is_named() {
    if !privileged() {
        return;
    }
    let t = tree();
    let marker = t.root.join("tmp/ran");
    for stage in Stage::ALL {
        let sandbox = prepare(spec("broken", &[&t.root])).fail_stage_for_test(stage);
        let mut cmd = command("/usr/bin/touch", &[marker.to_str().unwrap()]);
        sandbox.install_std(&mut cmd).unwrap();
        let err = cmd.spawn().expect_err("spawn must fail");
        assert_eq!(stage_of_spawn_error(&err), Some(stage), "{err}");
        let failure = spawn_failure(&err).unwrap();
        assert_eq!(failure.errno, libc::ECANCELED);
        assert!(failure.to_string().contains(stage.name()), "{failure}");
        assert!(!marker.exists(), "the program ran despite a failed {stage}");
    }
    // The same sandbox without the forced failure does run the program.
    let sandbox = prepare(spec("fine", &[&t.root]));
    let mut cmd = command("/usr/bin/touch", &[marker.to_str().unwrap()]);
    sandbox.install_std(&mut cmd).unwrap();
    assert!(cmd.status().unwrap().success());
    assert!(marker.exists());
}

#[test]
fn a_command_spawned_twice_is_confined_both_times() {
    if !privileged() {
        return;
    }
    let sandbox = prepare(spec("twice", &[]));
    let mut cmd = command("/bin/cat", &["/proc/self/status"]);
    sandbox.install_std(&mut cmd).unwrap();
    for _ in 0..2 {
        let out = cmd.output().unwrap();
        let status = ConfinementStatus::parse(&String::from_utf8_lossy(&out.stdout), "child");
        assert_eq!(
            (status.seccomp_mode, status.no_new_privs),
            (2, true),
            "{status}"
        );
    }
}

#[test]
fn a_real_stage_failure_is_reported() {
    if !privileged() {
        return;
    }
    // Keeping a capability needs it in the parent's permitted set; dropping it first in a
    // pre_exec that runs before ours makes the capset stage fail for real.
    let mut keep = spec("keep-missing", &[]);
    keep.keep_capabilities = vec![caps::Capability::CAP_NET_BIND_SERVICE];
    let sandbox = prepare(keep);
    let mut cmd = command("/bin/true", &[]);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the hook only calls capset-based `caps::drop`, which does not allocate on success.
        unsafe {
            cmd.pre_exec(|| {
                let cap = caps::Capability::CAP_NET_BIND_SERVICE;
                caps::drop(None, caps::CapSet::Effective, cap)
                    .and_then(|()| caps::drop(None, caps::CapSet::Permitted, cap))
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
            });
        }
    }
    sandbox.install_std(&mut cmd).unwrap();
    let err = cmd.status().expect_err("spawn must fail");
    let failure = spawn_failure(&err).unwrap_or_else(|| panic!("not a sandbox stage: {err}"));
    assert_eq!(failure.stage, Stage::Caps, "{failure}");
    assert_eq!(failure.errno, libc::EPERM, "{failure}");
}

#[test]
fn tokio_install_confines_the_same_way() {
    if !privileged() {
        return;
    }
    let sandbox = prepare(spec("tokio", &[]));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let mut cmd = tokio::process::Command::new("/bin/cat");
        cmd.arg("/proc/self/status").env_clear();
        sandbox.install(&mut cmd).unwrap();
        cmd.output().await.unwrap()
    });
    let status = ConfinementStatus::parse(&String::from_utf8_lossy(&out.stdout), "child");
    assert_eq!((status.seccomp_mode, status.no_new_privs), (2, true));
    assert_eq!(status.cap_eff, 0);
}

#[test]
fn exec_confined_refuses_a_multithreaded_process() {
    if !privileged() {
        return;
    }
    let sandbox = prepare(spec("threads", &[]));
    let _helper = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(2)));
    let err = exec_confined(&sandbox, Path::new("/bin/true"), &[], false)
        .err()
        .unwrap();
    assert!(matches!(err, SandboxError::NotSingleThreaded(_)), "{err}");
}

/// Forks; the (single-threaded) child redirects stderr to `stderr_path`, optionally drops to
/// an unprivileged uid, and calls `exec_confined`. Exit 99 means exec_confined returned an error
/// other than `expected_error`, 0 means it returned exactly that error.
fn fork_exec_confined(
    sandbox: &PreparedSandbox,
    program: &str,
    args: &[&str],
    stderr_path: &Path,
    unprivileged_uid: Option<u32>,
    expected_error: Option<fn(&SandboxError) -> bool>,
) -> std::process::ExitStatus {
    let stderr_file = std::fs::File::create(stderr_path).unwrap();
    use std::os::fd::AsRawFd;
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    // SAFETY: the child only redirects stderr, changes ids with raw syscalls, calls exec_confined
    // (which allocates: tolerated in a test, glibc resets its allocator locks in the child) and
    // exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: both descriptors are valid.
        unsafe { libc::dup2(stderr_file.as_raw_fd(), 2) };
        if let Some(uid) = unprivileged_uid {
            // SAFETY: raw id syscalls; a uid change without KEEPCAPS clears every capability.
            let dropped = unsafe {
                libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
                    && libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
                    && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
            };
            if !dropped {
                // SAFETY: terminates the child.
                unsafe { libc::_exit(98) };
            }
        }
        let Err(err) = exec_confined(sandbox, Path::new(program), &args, true);
        let code = match expected_error {
            Some(expected) if expected(&err) => 0,
            _ => {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "exec_confined failed: {err}");
                99
            }
        };
        // SAFETY: terminates the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    std::process::ExitStatus::from_raw(status)
}

#[test]
fn exec_confined_works_unprivileged_and_refuses_run_as_there() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let stderr_path = dir.path().join("stderr");
    let sandbox = prepare(spec("unprivileged", &[]));
    // unshare(0) is a no-op that succeeds without seccomp; EPERM proves the filter.
    let program = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.unshare(0)
sys.exit(0 if rc == -1 and ctypes.get_errno() == 1 and os.getuid() == 61030 else 3)
"#;
    let status = fork_exec_confined(
        &sandbox,
        PYTHON,
        &["-c", program],
        &stderr_path,
        Some(61030),
        None,
    );
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("seccomp: mode 2 (filter), 3 filters"),
        "{stderr}"
    );
    assert!(stderr.contains("no_new_privs: 1"), "{stderr}");
    assert!(stderr.contains("uid=61030"), "{stderr}");

    let mut with_run_as = spec("unprivileged-run-as", &[]);
    with_run_as.run_as = Some(RunAs {
        uid: 61031,
        gid: 61031,
    });
    let status = fork_exec_confined(
        &prepare(with_run_as),
        "/bin/true",
        &[],
        &stderr_path,
        Some(61030),
        Some(|e| matches!(e, SandboxError::RunAsNeedsPrivilege(_))),
    );
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn exec_confined_confines_a_shell_script_the_same_way() {
    if !privileged() {
        return;
    }
    let t = tree();
    let sandbox =
        PreparedSandbox::prepare_with(spec("agent", &[&t.root]), WriteRoots::ProtectedReadOnly)
            .expect("profile prepares");
    let results_path = t.root.join("tmp/results");
    let script = t.root.join("tmp/agent.sh");
    let r = t.root.display();
    let o = t.outside.display();
    std::fs::write(
        &script,
        format!(
            r#"set -u
out={res}
check() {{ if "$@" 2>/dev/null; then echo "$name=ok" >> $out; else echo "$name=denied" >> $out; fi; }}
put() {{ (echo "$1" > "$2") 2>/dev/null; }}
name=outside check put x {o}/new.txt
name=inside check put x {r}/src/new.rs
name=memory check put evil {r}/CLAUDE.md
name=memory_create check put evil {r}/AGENTS.md
name=hook check put evil {r}/.git/hooks/pre-commit
name=unshare check {py} -c 'import ctypes,sys; l=ctypes.CDLL(None, use_errno=True); sys.exit(0 if l.unshare(0)==0 else 1)'
name=inet check {py} -c 'import socket; socket.socket()'
"#,
            res = results_path.display(),
            py = PYTHON
        ),
    )
    .unwrap();
    let stderr_path = t.root.join("tmp/stderr");
    let status = fork_exec_confined(
        &sandbox,
        "sh",
        &[script.to_str().unwrap()],
        &stderr_path,
        None,
        None,
    );
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("seccomp: mode 2 (filter), 3 filters"),
        "{stderr}"
    );
    assert!(stderr.contains("no_new_privs: 1"), "{stderr}");
    assert!(stderr.contains("eff=0000000000000000"), "{stderr}");
    let res = results(&std::fs::read_to_string(&results_path).unwrap());
    for (key, want) in [
        ("outside", "denied"),
        ("inside", "ok"),
        ("memory", "denied"),
        ("memory_create", "denied"),
        ("hook", "denied"),
        ("unshare", "denied"),
        ("inet", "denied"),
    ] {
        assert_eq!(value(&res, key), want, "{key}: {res:?}");
    }
    assert_eq!(
        std::fs::read_to_string(t.root.join("CLAUDE.md")).unwrap(),
        "original memory"
    );
}

#[test]
fn rlimits_umask_and_closed_descriptors_reach_the_child() {
    if !privileged() {
        return;
    }
    let mut s = spec("limits", &[]);
    s.rlimits.cpu_seconds = 77;
    s.rlimits.file_size_bytes = 1 << 20;
    s.rlimits.open_files = 99;
    s.umask = Some(0o027);
    let sandbox = prepare(s);
    // A descriptor the parent leaks without CLOEXEC must not reach the program.
    let leaked = std::fs::File::open("/etc/hostname").unwrap();
    use std::os::fd::IntoRawFd;
    let leaked_fd = leaked.into_raw_fd();
    // SAFETY: clears FD_CLOEXEC on a descriptor this test owns.
    unsafe { libc::fcntl(leaked_fd, libc::F_SETFD, 0) };
    let code = format!(
        r#"
import os, resource
for name in ["CPU", "FSIZE", "NOFILE", "CORE"]:
    soft, hard = resource.getrlimit(getattr(resource, "RLIMIT_" + name))
    print(f"{{name}}={{soft}},{{hard}}")
print(f"umask={{os.umask(0):o}}")
try:
    os.fstat({leaked_fd})
    print("leaked=open")
except OSError:
    print("leaked=closed")
"#
    );
    let res = results(&python(Some(&sandbox), &code));
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(leaked_fd) };
    assert_eq!(value(&res, "CPU"), "77,77");
    assert_eq!(value(&res, "FSIZE"), "1048576,1048576");
    assert_eq!(value(&res, "NOFILE"), "99,99");
    assert_eq!(value(&res, "CORE"), "0,0");
    assert_eq!(value(&res, "umask"), "27");
    assert_eq!(value(&res, "leaked"), "closed");
}

/// A profile's limit above what the child inherits is lowered to the inherited hard limit, never
/// raised above it. The child sets each limit without reading it first; a process with
/// `CAP_SYS_RESOURCE` may raise its hard limit, and then lowers it back to the inherited one, a
/// process without it is refused and falls back to reading first (where root lacks
/// `CAP_SYS_RESOURCE`, as in some containers, that second path is the one this test runs).
#[test]
fn a_limit_above_the_inherited_hard_limit_is_lowered_to_it_not_raised() {
    if !privileged() {
        return;
    }
    let mut s = spec("limits-above-hard", &[]);
    s.rlimits.cpu_seconds = 77;
    s.rlimits.file_size_bytes = 1 << 20;
    let sandbox = prepare(s);
    let code = r#"
import resource
for name in ["CPU", "FSIZE"]:
    soft, hard = resource.getrlimit(getattr(resource, "RLIMIT_" + name))
    print(f"{name}={soft},{hard}")
"#;
    let mut cmd = command(PYTHON, &["-c", code]);
    use std::os::unix::process::CommandExt;
    // SAFETY: runs before the sandbox's own pre_exec: two setrlimit calls on stack values.
    unsafe {
        cmd.pre_exec(|| {
            for (resource, hard) in [(libc::RLIMIT_CPU, 50), (libc::RLIMIT_FSIZE, 4096)] {
                let limit = libc::rlimit {
                    rlim_cur: hard,
                    rlim_max: hard,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    sandbox.install_std(&mut cmd).unwrap();
    let out = cmd.output().expect("spawn");
    assert!(out.status.success(), "{out:?}");
    let res = results(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        value(&res, "CPU"),
        "50,50",
        "the inherited hard limit holds"
    );
    assert_eq!(
        value(&res, "FSIZE"),
        "4096,4096",
        "the inherited hard limit holds"
    );
}
