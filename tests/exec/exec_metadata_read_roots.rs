//! `verbd exec` and the metadata calls on entries the agent owns in a read root, outside every
//! write root: Landlock governs no `chmod`, `chown`, `utimensat` or `FS_IOC_SETFLAGS`, so without
//! the create broker an agent could make its `~/.ssh` or `~/.bashrc` writable by anyone, mark a
//! file of a read-only directory executable, or put an edited file's mtime back.
//!
//! As a real uid that owns a home directory granted for reading only (with a project, its write
//! root, inside it), each call by its syscall number on a file and a directory of the home:
//!
//! - `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `chown`, `lchown`, `fchown`, `fchownat`,
//!   `utimensat` (by path and by descriptor), `utimes`, `utime`, `futimesat`: `EACCES`;
//! - `FS_IOC_SETFLAGS` (`chattr`), `FS_IOC_FSSETXATTR`, `FS_IOC_ENABLE_VERITY`,
//!   `FS_IOC_SET_ENCRYPTION_POLICY`: `EPERM` (the last two answer per the file system's
//!   features without `verbd exec`, so the control does not assert them);
//! - the extended attributes: `EOPNOTSUPP` (as everywhere, tests/exec/exec_metadata.rs);
//! - `truncate`: Landlock's own `EACCES`;
//!
//! in every isolation mode, and nothing about the entries changed. The same calls in the write
//! root keep working (a script made executable runs, `touch`, git's own `chmod`s), a symlink
//! swapped between a file of the write root and `~/.bashrc` during the calls never carries a
//! change out, and the unconfined control shows every attack working on the plain file system.
use crate::common;
use crate::xattr::{xattr_get, xattr_set};
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const AGENT: u32 = 63440;
const PYTHON: &str = "/usr/bin/python3";

/// `attempts.py HOME`: `name errno` per attempt on `HOME/.bashrc` and `HOME/.ssh`.
const ATTEMPTS: &str = r#"
import ctypes, fcntl, os, struct, sys
home = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(name, op):
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
def sys_call(nr, *args):
    ctypes.set_errno(0)
    if libc.syscall(ctypes.c_long(nr), *args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def b(s):
    return ctypes.c_char_p(s.encode())
AT_FDCWD = ctypes.c_int(-100)
def with_fd(path, op):
    fd = os.open(path, os.O_RDONLY)
    try:
        op(fd)
    finally:
        os.close(fd)
me, group = os.getuid(), os.getgid()
zero_timespecs = ctypes.create_string_buffer(struct.pack("<qqqq", 0, 0, 0, 0), 32)
zero_timevals = ctypes.create_string_buffer(struct.pack("<qqqq", 0, 0, 0, 0), 32)
zero_utimbuf = ctypes.create_string_buffer(struct.pack("<qq", 0, 0), 16)
for kind, target, mode in [("file", home + "/.bashrc", 0o666), ("dir", home + "/.ssh", 0o777)]:
    # 90 chmod, 91 fchmod, 268 fchmodat, 452 fchmodat2 (0x100: AT_SYMLINK_NOFOLLOW)
    attempt("chmod-" + kind, lambda: sys_call(90, b(target), mode))
    attempt("fchmod-" + kind, lambda: with_fd(target, lambda fd: sys_call(91, fd, mode)))
    attempt("fchmodat-" + kind, lambda: sys_call(268, AT_FDCWD, b(target), mode))
    attempt("fchmodat2-" + kind, lambda: sys_call(452, AT_FDCWD, b(target), mode, 0))
    attempt("fchmodat2-nofollow-" + kind, lambda: sys_call(452, AT_FDCWD, b(target), mode, 0x100))
    # 92 chown, 94 lchown, 93 fchown, 260 fchownat: to its own ids, which the kernel allows an
    # owner (and to any group it is in)
    attempt("chown-" + kind, lambda: sys_call(92, b(target), me, group))
    attempt("lchown-" + kind, lambda: sys_call(94, b(target), me, group))
    attempt("fchown-" + kind, lambda: with_fd(target, lambda fd: sys_call(93, fd, me, group)))
    attempt("fchownat-" + kind, lambda: sys_call(260, AT_FDCWD, b(target), me, group, 0))
    # 280 utimensat, 235 utimes, 132 utime, 261 futimesat: the epoch, which only an owner may set
    attempt("utimensat-" + kind, lambda: sys_call(280, AT_FDCWD, b(target), zero_timespecs, 0))
    attempt("utimensat-now-" + kind, lambda: sys_call(280, AT_FDCWD, b(target), None, 0))
    attempt("futimens-" + kind, lambda: with_fd(target, lambda fd: sys_call(280, fd, None, zero_timespecs, 0)))
    attempt("utimes-" + kind, lambda: sys_call(235, b(target), zero_timevals))
    attempt("utime-" + kind, lambda: sys_call(132, b(target), zero_utimbuf))
    attempt("futimesat-" + kind, lambda: sys_call(261, AT_FDCWD, b(target), zero_timevals))
    # 188 setxattr, 197 removexattr
    attempt("setxattr-" + kind, lambda: sys_call(188, b(target), b("user.note"), b("x"), ctypes.c_size_t(1), 0))
    attempt("removexattr-" + kind, lambda: sys_call(197, b(target), b("user.kept")))
    # chattr: FS_IOC_GETFLAGS then FS_IOC_SETFLAGS with nodump (0x40), which an owner may set;
    # FS_IOC_FSGETXATTR then FS_IOC_FSSETXATTR with the same flag (0x80: FS_XFLAG_NODUMP)
    def chattr(fd):
        flags = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, struct.pack("i", 0)))[0]
        fcntl.ioctl(fd, 0x40086602, struct.pack("i", flags | 0x40))
    def fssetxattr(fd):
        attrs = bytearray(fcntl.ioctl(fd, 0x801c581f, bytes(28)))
        attrs[0:4] = struct.pack("<I", struct.unpack("<I", attrs[0:4])[0] | 0x80)
        fcntl.ioctl(fd, 0x401c5820, bytes(attrs))
    attempt("chattr-" + kind, lambda: with_fd(target, chattr))
    attempt("fssetxattr-" + kind, lambda: with_fd(target, fssetxattr))
# FS_IOC_ENABLE_VERITY (version 1, SHA-256, 4096-byte blocks) on the file, and
# FS_IOC_SET_ENCRYPTION_POLICY (v2, AES-256-XTS / -CTS, a made-up key id) on an empty directory:
# what the kernel answers depends on the file system's features
def verity(fd):
    fcntl.ioctl(fd, 0x40806685, struct.pack("<IIIIQIIQQ", 1, 1, 4096, 0, 0, 0, 0, 0, 0) + bytes(88))
def encrypt(fd):
    fcntl.ioctl(fd, 0x800c6613, struct.pack("<BBBB4x", 2, 1, 4, 0) + bytes(16))
attempt("verity-file", lambda: with_fd(home + "/.bashrc", verity))
attempt("encrypt-dir", lambda: with_fd(home + "/empty", encrypt))
# 76 truncate: Landlock's business
attempt("truncate-file", lambda: sys_call(76, b(home + "/.bashrc"), 0))
"#;

/// `write_root.py WORK`: the same calls where the agent may write, then git.
const IN_WRITE_ROOT: &str = r##"
import os, subprocess, sys
# In the Landlock-only split only the subdirectories of a write root take new entries.
os.chdir(sys.argv[1] + "/sub")
def attempt(name, op):
    try:
        op()
        print(name, 0, flush=True)
    except OSError as e:
        print(name, e.errno, flush=True)
with open("run.sh", "w") as f:
    f.write("#!/bin/sh\necho ran\n")
attempt("chmod-x-script", lambda: os.chmod("run.sh", 0o755))
out = subprocess.run(["./run.sh"], capture_output=True, text=True).stdout.strip()
print("script-ran", 0 if out == "ran" else 1, flush=True)
attempt("fchmod", lambda: (lambda fd: (os.fchmod(fd, 0o600), os.close(fd)))(os.open("run.sh", os.O_RDONLY)))
attempt("chmod-dir", lambda: os.chmod("d", 0o700))
attempt("chown-self", lambda: os.chown("run.sh", os.getuid(), os.getgid()))
attempt("touch", lambda: os.utime("run.sh"))
attempt("utime-epoch", lambda: os.utime("run.sh", (0, 0)))
attempt("utime-dir", lambda: os.utime("d", (0, 0)))
attempt("futimens", lambda: (lambda fd: (os.utime(fd, (5, 5)), os.close(fd)))(os.open("run.sh", os.O_RDONLY)))
print("mtime-epoch", 0 if os.stat("d").st_mtime == 0 else 1, flush=True)
git = ["git", "-c", "user.name=a", "-c", "user.email=a@x"]
with open("tool.sh", "w") as f:
    f.write("#!/bin/sh\n")
for name, args in [("git-init", ["init", "-q", "repo"]),
                   ("git-add", ["-C", "repo", "add", "."]),
                   ("git-commit", ["-C", "repo", "commit", "-qm", "x"])]:
    if name == "git-add":
        os.rename("tool.sh", "repo/tool.sh")
        os.chmod("repo/tool.sh", 0o755)
    r = subprocess.run(git + args, capture_output=True, text=True)
    print(name, r.returncode, flush=True)
    if r.returncode:
        print(r.stderr, file=sys.stderr)
r = subprocess.run(["git", "-C", "repo", "ls-files", "-s"], capture_output=True, text=True)
print("git-mode", 0 if r.stdout.startswith("100755") else 1, flush=True)
"##;

/// `race.py WORK HOME`: one thread swaps `link` between a file of the write root and the home's
/// `.bashrc`, the other changes the mode and times through `link`; `changed N` counts the calls
/// performed.
const RACE: &str = r#"
import os, sys, threading
os.chdir(sys.argv[1] + "/sub")
targets = ["mine.txt", sys.argv[2] + "/.bashrc"]
with open("mine.txt", "w") as f:
    f.write("mine\n")
os.symlink(targets[0], "link")
done = threading.Event()
def swap():
    i = 0
    while not done.is_set():
        os.symlink(targets[i % 2], "next")
        os.replace("next", "link")
        i += 1
swapper = threading.Thread(target=swap)
swapper.start()
changed = 0
for i in range(1500):
    for op in (lambda: os.chmod("link", 0o666), lambda: os.utime("link", (0, 0))):
        try:
            op()
            changed += 1
        except OSError:
            pass
done.set()
swapper.join()
print("changed", changed, flush=True)
"#;

struct Layout {
    _dir: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    policy: PathBuf,
}

fn layout() -> Layout {
    let dir = open_tempdir();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(tools.join("attempts.py"), ATTEMPTS).unwrap();
    std::fs::write(tools.join("write_root.py"), IN_WRITE_ROOT).unwrap();
    std::fs::write(tools.join("race.py"), RACE).unwrap();
    let home = dir.path().join("home");
    let work = home.join("work");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join("empty")).unwrap();
    std::fs::create_dir_all(work.join("sub/d")).unwrap();
    std::fs::write(home.join(".bashrc"), "alias ls=ls\n").unwrap();
    std::fs::set_permissions(home.join(".bashrc"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(home.join(".ssh"), std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in [".bashrc", ".ssh"] {
        xattr_set(&home.join(entry), "user.kept", b"human");
    }
    let status = Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&home)
        .status()
        .unwrap();
    assert!(status.success());
    // A fixed mtime to find changed.
    for entry in [".bashrc", ".ssh"] {
        set_mtime(&home.join(entry), 1_000_000_000);
    }
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox::new(
            &[
                "/usr",
                "/lib",
                "/lib64",
                "/bin",
                "/etc",
                tools.to_str().unwrap(),
                home.to_str().unwrap(),
            ],
            &[work.to_str().unwrap()],
        ),
    );
    Layout {
        _dir: dir,
        home,
        work,
        policy,
    }
}

fn set_mtime(path: &Path, seconds: i64) {
    let file = std::fs::File::open(path).unwrap();
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds as u64);
    file.set_times(
        std::fs::FileTimes::new()
            .set_accessed(time)
            .set_modified(time),
    )
    .unwrap();
}

/// The inode flags (`FS_IOC_GETFLAGS`).
fn inode_flags(path: &Path) -> i32 {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let mut flags: libc::c_int = 0;
    // SAFETY: an open fd and a writable int, as FS_IOC_GETFLAGS expects.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), 0x8008_6601, &mut flags) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    flags
}

/// Runs `script ARG` as the agent; `confined` is the isolation asked for (`None`: the default),
/// or `None` at the outer level for no `verbd exec` at all.
fn run(
    layout: &Layout,
    script: &str,
    args: &[&Path],
    confined: Option<Option<&str>>,
) -> Vec<(String, i32)> {
    let mut program = vec![
        PYTHON.to_string(),
        layout
            .policy
            .with_file_name("tools")
            .join(script)
            .display()
            .to_string(),
    ];
    program.extend(args.iter().map(|arg| arg.display().to_string()));
    let mut cmd = match confined {
        Some(mode) => {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--policy"])
                .arg(&layout.policy)
                .args(["--profile", "agent", "--"])
                .args(&program);
            if let Some(variable) = mode {
                cmd.env(variable, "1");
            }
            cmd
        }
        None => {
            let mut cmd = Command::new(&program[0]);
            cmd.args(&program[1..]);
            cmd
        }
    };
    cmd.uid(AGENT)
        .gid(AGENT)
        .current_dir("/")
        .env("HOME", &layout.home);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!(
        "{confined:?} {script}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
    stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, errno)| (name.to_string(), errno.parse().unwrap()))
        .collect()
}

fn errno_of(lines: &[(String, i32)], name: &str) -> i32 {
    lines
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, e)| *e)
        .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
}

const KINDS: [&str; 2] = ["file", "dir"];

/// Refused with `EACCES` by the broker outside the write roots.
const MODE_OWNER_TIME_CALLS: &[&str] = &[
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "lchown",
    "fchown",
    "fchownat",
    "utimensat",
    "utimensat-now",
    "futimens",
    "utimes",
    "utime",
    "futimesat",
];

#[test]
fn unconfined_the_agent_changes_what_it_owns_in_its_home() {
    if !require_root("unconfined_the_agent_changes_what_it_owns_in_its_home") {
        return;
    }
    let layout = layout();
    let lines = run(&layout, "attempts.py", &[&layout.home], None);
    for kind in KINDS {
        for call in
            MODE_OWNER_TIME_CALLS
                .iter()
                .chain(&["chattr", "fssetxattr", "setxattr", "removexattr"])
        {
            let name = format!("{call}-{kind}");
            assert_eq!(errno_of(&lines, &name), 0, "{name}: {lines:?}");
        }
    }
    assert_eq!(errno_of(&lines, "truncate-file"), 0);
    let bashrc = std::fs::metadata(layout.home.join(".bashrc")).unwrap();
    assert_eq!(bashrc.mode() & 0o7777, 0o666);
    assert_eq!(
        std::fs::metadata(layout.home.join(".ssh")).unwrap().mtime(),
        0
    );
    assert_ne!(inode_flags(&layout.home.join(".ssh")) & 0x40, 0);
}

#[test]
fn under_verbd_exec_nothing_outside_the_write_roots_is_re_moded_re_owned_or_re_timed() {
    if !require_root(
        "under_verbd_exec_nothing_outside_the_write_roots_is_re_moded_re_owned_or_re_timed",
    ) {
        return;
    }
    for mode in [
        None,
        Some(verbd::sandbox::MOUNT_NAMESPACE_ENV),
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV),
    ] {
        let layout = layout();
        let before: Vec<_> = [".bashrc", ".ssh"]
            .iter()
            .map(|e| std::fs::metadata(layout.home.join(e)).unwrap())
            .collect();
        let lines = run(&layout, "attempts.py", &[&layout.home], Some(mode));
        for kind in KINDS {
            for call in MODE_OWNER_TIME_CALLS {
                let name = format!("{call}-{kind}");
                assert_eq!(
                    errno_of(&lines, &name),
                    libc::EACCES,
                    "{mode:?} {name}: {lines:?}"
                );
            }
            for call in ["chattr", "fssetxattr"] {
                let name = format!("{call}-{kind}");
                assert_eq!(
                    errno_of(&lines, &name),
                    libc::EPERM,
                    "{mode:?} {name}: {lines:?}"
                );
            }
            for call in ["setxattr", "removexattr"] {
                let name = format!("{call}-{kind}");
                assert_eq!(
                    errno_of(&lines, &name),
                    libc::EOPNOTSUPP,
                    "{mode:?} {name}: {lines:?}"
                );
            }
        }
        assert_eq!(errno_of(&lines, "truncate-file"), libc::EACCES, "{mode:?}");
        for name in ["verity-file", "encrypt-dir"] {
            assert_eq!(
                errno_of(&lines, name),
                libc::EPERM,
                "{mode:?} {name}: {lines:?}"
            );
        }
        for (entry, was) in [".bashrc", ".ssh"].iter().zip(&before) {
            let path = layout.home.join(entry);
            let now = std::fs::metadata(&path).unwrap();
            assert_eq!(now.mode(), was.mode(), "{mode:?} {entry}");
            assert_eq!((now.uid(), now.gid()), (AGENT, AGENT), "{mode:?} {entry}");
            assert_eq!(now.mtime(), 1_000_000_000, "{mode:?} {entry}");
            assert_eq!(now.atime(), 1_000_000_000, "{mode:?} {entry}");
            // No change at all: chown to the same ids would still have moved the ctime.
            assert_eq!(
                (now.ctime(), now.ctime_nsec()),
                (was.ctime(), was.ctime_nsec()),
                "{mode:?} {entry}"
            );
            assert_eq!(inode_flags(&path) & 0x40, 0, "{mode:?} {entry}");
            assert_eq!(
                xattr_get(&path, "user.kept").as_deref(),
                Some(&b"human"[..])
            );
            assert_eq!(xattr_get(&path, "user.note"), None);
        }
        assert_eq!(
            std::fs::read_to_string(layout.home.join(".bashrc")).unwrap(),
            "alias ls=ls\n"
        );
    }
}

#[test]
fn in_the_write_root_modes_owners_and_times_still_change() {
    if !require_root("in_the_write_root_modes_owners_and_times_still_change") {
        return;
    }
    for mode in [
        None,
        Some(verbd::sandbox::MOUNT_NAMESPACE_ENV),
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV),
    ] {
        let layout = layout();
        let lines = run(&layout, "write_root.py", &[&layout.work], Some(mode));
        for name in [
            "chmod-x-script",
            "script-ran",
            "fchmod",
            "chmod-dir",
            "chown-self",
            "touch",
            "utime-epoch",
            "utime-dir",
            "futimens",
            "mtime-epoch",
            "git-init",
            "git-add",
            "git-commit",
            "git-mode",
        ] {
            assert_eq!(errno_of(&lines, name), 0, "{mode:?} {name}: {lines:?}");
        }
        let script = std::fs::metadata(layout.work.join("sub/run.sh")).unwrap();
        assert_eq!(script.mode() & 0o777, 0o600, "{mode:?}");
        assert_eq!(script.mtime(), 5, "{mode:?}");
    }
}

#[test]
fn a_symlink_swapped_during_the_call_never_lets_a_change_out_of_the_write_root() {
    if !require_root("a_symlink_swapped_during_the_call_never_lets_a_change_out_of_the_write_root")
    {
        return;
    }
    for mode in [
        None,
        Some(verbd::sandbox::MOUNT_NAMESPACE_ENV),
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV),
    ] {
        let layout = layout();
        let bashrc = layout.home.join(".bashrc");
        let was = std::fs::metadata(&bashrc).unwrap();
        let lines = run(
            &layout,
            "race.py",
            &[&layout.work, &layout.home],
            Some(mode),
        );
        // Both outcomes seen: the calls that met the write root's file were performed.
        let changed = errno_of(&lines, "changed");
        assert!(changed > 0 && changed < 3000, "{mode:?}: {changed}");
        let now = std::fs::metadata(&bashrc).unwrap();
        assert_eq!(now.mode(), was.mode(), "{mode:?}");
        assert_eq!(now.mtime(), 1_000_000_000, "{mode:?}");
        assert_eq!(
            (now.ctime(), now.ctime_nsec()),
            (was.ctime(), was.ctime_nsec()),
            "{mode:?}"
        );
        let mine = std::fs::metadata(layout.work.join("sub/mine.txt")).unwrap();
        assert_eq!(mine.mode() & 0o777, 0o666, "{mode:?}");
    }
}
