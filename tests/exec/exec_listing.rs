//! The ancestor listing of `verbd exec`, as an unprivileged uid with a real `ls`, in every mode
//! (brokered, user + mount namespace, Landlock-only):
//!
//! - the directories above the profile's roots (`/`, the temporary home's parents, the agent's
//!   home above its project) list exactly as outside: nothing on stderr, the same entry names;
//! - every other directory outside the roots stays unlistable (`/var`, another user's home, a
//!   sibling of the project in the agent's own home), also reached through a symlink, `..`,
//!   `/proc/self/root`, an `O_PATH` descriptor, a listed ancestor's descriptor or working
//!   directory, and while the program swaps a symlink or rewrites the path in its memory under
//!   the broker: whatever opens, its device and inode are an ancestor's;
//! - writing, creating or `O_TMPFILE` opens of an ancestor give no descriptor, and the one a
//!   listing gives is a mount of the program's own namespace (its read-only binds hold);
//! - `--print-status` and `verbd sandbox why --exec` name the ancestors.
use crate::common;
use common::policy::{NetworkMode, Sandbox, write_exec_policy};
use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AGENT: u32 = 63601;
const OTHER: u32 = 63602;
const PYTHON: &str = "/usr/bin/python3";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Brokered,
    MountNamespace,
    LandlockOnly,
}

const MODES: [Mode; 3] = [Mode::Brokered, Mode::MountNamespace, Mode::LandlockOnly];

/// `TMP/home/{agent/{proj,sibling},other}`: the agent's project (the only write root, nothing of
/// the home readable), a sibling directory in its home and another user's home, each with a
/// file whose name must not leak; symlinks the attacks use, in the project.
struct Layout {
    _dir: tempfile::TempDir,
    home: PathBuf,
    agent_home: PathBuf,
    proj: PathBuf,
    sibling: PathBuf,
    other: PathBuf,
    policy: PathBuf,
}

fn layout() -> Layout {
    let dir = open_tempdir();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let home = base.join("home");
    let agent_home = home.join("agent");
    let proj = agent_home.join("proj");
    let sibling = agent_home.join("sibling");
    let other = home.join("other");
    for d in [&proj.join("work"), &sibling, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(sibling.join("sibling-secret-name"), "").unwrap();
    std::fs::write(other.join("other-secret-name"), "").unwrap();
    std::fs::write(proj.join("attacks.py"), ATTACKS).unwrap();
    // A protected entry: a read-only bind mount in the mount namespace.
    std::fs::write(proj.join("CLAUDE.md"), "rules\n").unwrap();
    for (link, target) in [
        ("l-var", Path::new("/var")),
        ("l-other", other.as_path()),
        ("l-sibling", Path::new("../sibling")),
        ("l-root", Path::new("/")),
    ] {
        std::os::unix::fs::symlink(target, proj.join(link)).unwrap();
    }
    for d in [&agent_home, &proj, &proj.join("work"), &sibling] {
        std::os::unix::fs::chown(d, Some(AGENT), Some(AGENT)).unwrap();
    }
    std::os::unix::fs::chown(&other, Some(OTHER), Some(OTHER)).unwrap();
    let policy = base.join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox {
            network: Some(NetworkMode::None),
            ..Sandbox::new(
                &["/usr", "/lib", "/lib64", "/bin", "/etc"],
                &[proj.to_str().unwrap()],
            )
        },
    );
    Layout {
        _dir: dir,
        home,
        agent_home,
        proj,
        sibling,
        other,
        policy,
    }
}

/// `argv` as the agent in its project, under `verbd exec` in `mode` or unconfined.
fn run(layout: &Layout, mode: Option<Mode>, argv: &[&str]) -> Output {
    let mut cmd = match mode {
        Some(mode) => {
            let mut cmd = Command::new(BIN);
            cmd.arg("exec");
            match mode {
                Mode::Brokered => {}
                Mode::MountNamespace => {
                    cmd.arg("--mount-namespace");
                }
                Mode::LandlockOnly => {
                    cmd.arg("--landlock-only");
                }
            }
            cmd.arg("--policy")
                .arg(&layout.policy)
                .args(["--profile", "agent", "--"])
                .args(argv);
            cmd
        }
        None => {
            let mut cmd = Command::new(argv[0]);
            cmd.args(&argv[1..]);
            cmd
        }
    };
    cmd.current_dir(&layout.proj)
        .uid(AGENT)
        .gid(AGENT)
        .env("LC_ALL", "C")
        .env_remove("VERBD_EXEC_MOUNT_NAMESPACE")
        .env_remove("VERBD_EXEC_LANDLOCK_ONLY");
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The entry names of an `ls -la` listing (owners, sizes and link counts left out: a mount
/// namespace shows `nobody`, and `/proc`'s link count follows the processes running).
fn names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|line| !line.starts_with("total "))
        .map(|line| {
            line.split_whitespace()
                .skip(8)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn the_ancestors_of_the_roots_list_as_outside_in_every_mode() {
    if !require_root("the_ancestors_of_the_roots_list_as_outside_in_every_mode") {
        return;
    }
    let layout = layout();
    let ancestors = [
        "/".to_string(),
        layout.home.display().to_string(),
        layout.agent_home.display().to_string(),
        "..".to_string(),
    ];
    for mode in MODES {
        for dir in &ancestors {
            let argv = ["/bin/ls", "-la", dir.as_str()];
            let outside = run(&layout, None, &argv);
            let inside = run(&layout, Some(mode), &argv);
            assert!(outside.status.success(), "{}", text(&outside.stderr));
            assert_eq!(text(&outside.stderr), "");
            assert_eq!(
                text(&inside.stderr),
                "",
                "{mode:?} ls -la {dir}: nothing on stderr"
            );
            assert!(inside.status.success(), "{mode:?} ls -la {dir}");
            let listed = names(&text(&inside.stdout));
            assert_eq!(
                listed,
                names(&text(&outside.stdout)),
                "{mode:?} ls -la {dir}"
            );
            assert!(listed.len() > 2, "{mode:?} {dir}: {listed:?}");
        }
        let home = names(&text(
            &run(&layout, Some(mode), &["/bin/ls", "-la", &ancestors[1]]).stdout,
        ));
        assert!(
            home.contains(&"agent".to_string()) && home.contains(&"other".to_string()),
            "{mode:?}: {home:?}"
        );
        if mode == Mode::MountNamespace {
            // The namespace is really there (under CI=true the host must offer it).
            let root = text(&run(&layout, Some(mode), &["/bin/ls", "-la", "/"]).stdout);
            assert!(
                root.contains(" nobody "),
                "the host must offer user namespaces here: {root}"
            );
        }
    }
}

#[test]
fn other_directories_outside_the_roots_stay_unlistable() {
    if !require_root("other_directories_outside_the_roots_stay_unlistable") {
        return;
    }
    let layout = layout();
    let refused = [
        PathBuf::from("/var"),
        layout.other.clone(),
        layout.sibling.clone(),
    ];
    for dir in &refused {
        let dir = dir.to_str().unwrap();
        let outside = run(&layout, None, &["/bin/ls", "-la", dir]);
        assert!(
            outside.status.success(),
            "{dir} lists outside: {}",
            text(&outside.stderr)
        );
        for mode in MODES {
            let inside = run(&layout, Some(mode), &["/bin/ls", "-la", dir]);
            let stderr = text(&inside.stderr);
            assert!(
                stderr.contains("cannot open directory") && stderr.contains("Permission denied"),
                "{mode:?} ls -la {dir}: {stderr}"
            );
            assert_eq!(inside.status.code(), Some(2), "{mode:?} {dir}");
            let stdout = text(&inside.stdout);
            assert!(
                !stdout.contains("secret-name"),
                "{mode:?} {dir} leaked: {stdout}"
            );
        }
    }
}

/// Each attack prints `name errno` (0: it worked); a race prints `name leaks opened refused`.
const ATTACKS: &str = r#"
import ctypes, os, sys, threading
home, agent_home, other, sibling = sys.argv[1:5]
ancestors = {(s.st_dev, s.st_ino) for s in map(os.stat, ["/", os.path.dirname(os.path.dirname(home)), os.path.dirname(home), home, agent_home])}
def attempt(name, op):
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
D = os.O_RDONLY | os.O_DIRECTORY
for name, path in [
    ("symlink-var", "l-var"), ("symlink-other", "l-other"), ("symlink-sibling", "l-sibling"),
    ("symlink-root", "l-root"),
    ("dotdot-var", "/tmp/../var"), ("dotdot-other", agent_home + "/proj/../../other"),
    ("dotdot-relative", "../../other"), ("dotdot-sibling", "../sibling"),
    ("proc-root-var", "/proc/self/root/var"), ("proc-cwd-other", "/proc/self/cwd/../../other"),
    ("proc-fd-var", "/proc/self/fd/%d" % os.open("/var", os.O_PATH | os.O_DIRECTORY)),
]:
    attempt(name, lambda: os.listdir(path))
opath = os.open(other, os.O_PATH | os.O_DIRECTORY)
attempt("opath-dot", lambda: os.open(".", D, dir_fd=opath))
attempt("opath-list", lambda: os.listdir(opath))
root = os.open("/", D)
attempt("root-fd-var", lambda: os.open("var", D, dir_fd=root))
attempt("root-fd-other", lambda: os.open(other.lstrip("/"), D, dir_fd=root))
home_fd = os.open(agent_home, D | os.O_NOFOLLOW)
attempt("home-fd-sibling", lambda: os.open("sibling", D | os.O_NOFOLLOW, dir_fd=home_fd))
attempt("home-fd-sibling-follow", lambda: os.open("sibling", D, dir_fd=home_fd))
here = os.getcwd()
os.chdir("/")
attempt("cwd-root-var", lambda: os.listdir("var"))
attempt("cwd-root-dot", lambda: os.listdir("."))
os.chdir(here)
attempt("write-root", lambda: os.open("/", os.O_WRONLY | os.O_DIRECTORY))
attempt("rdwr-home", lambda: os.open(home, os.O_RDWR | os.O_DIRECTORY))
attempt("creat-home", lambda: os.open(home + "/made-by-agent", D | os.O_CREAT, 0o755))
attempt("tmpfile-home", lambda: os.open(home, os.O_RDONLY | os.O_TMPFILE))
attempt("tmpfile-rw-home", lambda: os.open(home, os.O_RDWR | os.O_TMPFILE))
# The ancestor's descriptor is one of the program's own mounts: through it, the protected entry
# is the read-only bind of the mount namespace, as by its path (in the other modes neither is).
claude = os.path.join(os.getcwd(), "CLAUDE.md")
print("ns-view-path", os.statvfs(claude).f_flag & os.ST_RDONLY, flush=True)
via_root = os.open(claude.lstrip("/"), os.O_RDONLY, dir_fd=root)
print("ns-view-ancestor-fd", os.fstatvfs(via_root).f_flag & os.ST_RDONLY, flush=True)

def race(name, flip, open_once, rounds=3000):
    stop = threading.Event()
    def flipper():
        i = 0
        while not stop.is_set():
            flip(i)
            i += 1
    t = threading.Thread(target=flipper)
    t.start()
    leaks = opened = refused = 0
    for _ in range(rounds):
        fd = open_once()
        if fd < 0:
            refused += 1
            continue
        s = os.fstat(fd)
        if (s.st_dev, s.st_ino) in ancestors:
            opened += 1
        else:
            leaks += 1
            print("LEAK", name, sorted(os.listdir(fd)), flush=True)
        os.close(fd)
    stop.set()
    t.join()
    print(name, leaks, opened, refused, flush=True)

def swap_symlink(i):
    target = "/" if i % 2 == 0 else other
    try:
        os.symlink(target, "work/next")
        os.replace("work/next", "work/flip")
    except OSError:
        pass
os.symlink("/", "work/flip")
def open_flip():
    try:
        return os.open("work/flip", D)
    except OSError:
        return -1
race("race-symlink", swap_symlink, open_flip)

libc = ctypes.CDLL(None, use_errno=True)
libc.openat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
long_path = other.encode() + b"\0"
buf = ctypes.create_string_buffer(long_path, len(long_path) + 8)
short = ctypes.create_string_buffer(b"/\0", 2)
longb = ctypes.create_string_buffer(long_path, len(long_path))
addr = ctypes.addressof(buf)
def rewrite(i):
    if i % 2 == 0:
        ctypes.memmove(addr, short, 2)
    else:
        ctypes.memmove(addr, longb, len(long_path))
raw = ctypes.cast(buf, ctypes.c_char_p)
race("race-memory", rewrite, lambda: libc.openat(-100, raw, D | os.O_CLOEXEC), rounds=6000)
"#;

fn attacks(layout: &Layout, mode: Mode) -> Vec<(String, Vec<i64>)> {
    let argv = [
        PYTHON,
        "attacks.py",
        layout.home.to_str().unwrap(),
        layout.agent_home.to_str().unwrap(),
        layout.other.to_str().unwrap(),
        layout.sibling.to_str().unwrap(),
    ];
    // A fresh project state per mode: the symlink race leaves its link behind.
    let _ = std::fs::remove_file(layout.proj.join("work/flip"));
    let _ = std::fs::remove_file(layout.proj.join("work/next"));
    let out = run(layout, Some(mode), &argv);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    println!("{mode:?}:\n{stdout}\n{stderr}");
    assert!(out.status.success(), "{mode:?}: {stdout}\n{stderr}");
    assert!(!stdout.contains("LEAK"), "{mode:?}: {stdout}");
    stdout
        .lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next().unwrap().to_string();
            (name, fields.map(|f| f.parse().unwrap()).collect())
        })
        .collect()
}

#[test]
fn no_attack_lists_a_directory_that_is_no_ancestor() {
    if !require_root("no_attack_lists_a_directory_that_is_no_ancestor") {
        return;
    }
    let layout = layout();
    let eacces = i64::from(libc::EACCES);
    for mode in MODES {
        let results = attacks(&layout, mode);
        let result = |name: &str| -> Vec<i64> {
            results
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{mode:?}: no {name} in {results:?}"))
                .1
                .clone()
        };
        for refused in [
            "symlink-var",
            "symlink-other",
            "symlink-sibling",
            "dotdot-var",
            "dotdot-other",
            "dotdot-relative",
            "dotdot-sibling",
            "proc-root-var",
            "proc-cwd-other",
            "proc-fd-var",
            "opath-dot",
            "root-fd-var",
            "root-fd-other",
            "home-fd-sibling",
            "home-fd-sibling-follow",
            "cwd-root-var",
        ] {
            assert_eq!(result(refused), vec![eacces], "{mode:?}: {refused}");
        }
        // An ancestor reached through a symlink or as the working directory lists, as outside.
        assert_eq!(result("symlink-root"), vec![0], "{mode:?}");
        assert_eq!(result("cwd-root-dot"), vec![0], "{mode:?}");
        // Nothing lists through an O_PATH descriptor; nothing opens an ancestor to write.
        for no_descriptor in [
            "opath-list",
            "write-root",
            "rdwr-home",
            "creat-home",
            "tmpfile-home",
            "tmpfile-rw-home",
        ] {
            assert_ne!(result(no_descriptor), vec![0], "{mode:?}: {no_descriptor}");
        }
        assert!(!layout.home.join("made-by-agent").exists(), "{mode:?}");
        let read_only = i64::from(mode == Mode::MountNamespace);
        assert_eq!(result("ns-view-path"), vec![read_only], "{mode:?}");
        assert_eq!(
            result("ns-view-ancestor-fd"),
            vec![read_only],
            "{mode:?}: the ancestor's descriptor must be a mount of the program's namespace"
        );
        // The races ran both ways and nothing but an ancestor ever opened.
        for race in ["race-symlink", "race-memory"] {
            let counts = result(race);
            assert_eq!(counts[0], 0, "{mode:?} {race}: leaks");
            assert!(
                counts[1] > 0 && counts[2] > 0,
                "{mode:?} {race}: the race must both open the ancestor and be refused: {counts:?}"
            );
        }
    }
}

#[test]
fn print_status_and_sandbox_why_name_the_ancestors() {
    if !require_root("print_status_and_sandbox_why_name_the_ancestors") {
        return;
    }
    let layout = layout();
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--print-status", "--policy"])
        .arg(&layout.policy)
        .args(["--profile", "agent", "--", "/bin/true"])
        .current_dir(&layout.proj)
        .uid(AGENT)
        .gid(AGENT);
    let out = cmd.output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let listing = stderr
        .lines()
        .find(|line| line.starts_with("listing: the ancestors of the read and write roots"))
        .unwrap_or_else(|| panic!("no listing line: {stderr}"));
    let named = format!("{}]", layout.agent_home.display());
    assert!(
        listing.contains("[/, ") && listing.contains(&named),
        "{listing}"
    );
    assert!(
        !listing.contains("/var") && !listing.contains("/proj"),
        "{listing}"
    );

    let why = |path: &Path| {
        let out = Command::new(BIN)
            .args(["sandbox", "why", "--exec", "--policy"])
            .arg(&layout.policy)
            .arg("agent")
            .arg(path)
            .arg("read")
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout))
    };
    let (code, stdout) = why(&layout.home);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("allowed by the ancestor listing of `verbd exec`")
            && stdout.contains(listing),
        "{stdout}"
    );
    let (code, stdout) = why(&layout.other);
    assert_ne!(code, Some(0), "{stdout}");
    assert!(stdout.contains("DENIED"), "{stdout}");
}
