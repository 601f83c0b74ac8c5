//! `verbd exec` and the metadata calls that change who may write or execute a file, each by its
//! syscall number, as an unprivileged agent, in every isolation mode:
//!
//! - extended attributes, the whole family (`setxattr`, `lsetxattr`, `fsetxattr`, `setxattrat`,
//!   `removexattr`, `lremovexattr`, `fremovexattr`, `removexattrat`): a POSIX ACL
//!   (`system.posix_acl_access`, `…_default`) would make a hook executable or a memory file
//!   writable by another uid where `chmod` is refused. Answered `EOPNOTSUPP` on every path, as
//!   by a file system without extended attributes (`security.*`, `user.*` too);
//! - `chmod`, `fchmod`, `fchmodat`, `fchmodat2` (with and without `AT_SYMLINK_NOFOLLOW`),
//!   `chown`, `lchown`, `fchown`, `fchownat`: refused on protected entries (`EACCES`),
//!   performed elsewhere;
//! - `chattr +i` / `+a` (`FS_IOC_SETFLAGS`): the broker filter refuses every inode flag change
//!   (`EPERM`), before the kernel would (no `CAP_LINUX_IMMUTABLE`) or the read-only bind of the
//!   mount namespace (`EROFS`);
//! - `utimensat` on a protected entry: refused (`EACCES`); elsewhere in a write root performed,
//!   and a tracked file changed with its mtime put back is still a change to the human's
//!   `git status` (git records the ctime too). Outside the write roots: tests/
//!   exec_metadata_read_roots.rs.
//!
//! The unconfined control, the same agent without `verbd exec`, shows the ACL and `chown`
//! attacks work on the plain file system.
use crate::common;
use crate::xattr::{xattr_get, xattr_set};
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const AGENT: u32 = 63410;
const OTHER: u32 = 63411;
const PYTHON: &str = "/usr/bin/python3";

/// `metadata.py PROJECT OTHER_UID`: `name errno` per attempt.
const ATTEMPTS: &str = r#"
import ctypes, fcntl, os, struct, sys
os.chdir(sys.argv[1])
other = int(sys.argv[2])
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
# POSIX ACL xattr: version 2, then (tag u16, perm u16, id u32): the owner rwx, `other` rwx,
# the group r, the mask rwx, everybody else rw.
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in [
    (0x01, 7, 0xffffffff), (0x02, 7, other), (0x04, 4, 0xffffffff), (0x10, 7, 0xffffffff),
    (0x20, 6, 0xffffffff)])
ACL = "system.posix_acl_access"
HOOK = ".git/hooks/pre-commit"
MEMORY = "CLAUDE.md"
PLAIN = "src/plain.txt"
def with_fd(path, op):
    fd = os.open(path, os.O_RDONLY)
    try:
        op(fd)
    finally:
        os.close(fd)
def setxattrat(path, name, value):
    # struct xattr_args { u64 value; u32 size; u32 flags; }
    buf = ctypes.create_string_buffer(value)
    args = struct.pack("<QII", ctypes.addressof(buf), len(value), 0)
    sys_call(463, AT_FDCWD, b(path), ctypes.c_uint(0), b(name), ctypes.c_char_p(args), ctypes.c_size_t(len(args)))
# 188 setxattr, 189 lsetxattr, 190 fsetxattr, 197 removexattr, 198 lremovexattr,
# 199 fremovexattr, 463 setxattrat, 466 removexattrat
attempt("setxattr-acl-hook", lambda: sys_call(188, b(HOOK), b(ACL), ctypes.c_char_p(acl), ctypes.c_size_t(len(acl)), 0))
attempt("lsetxattr-acl-memory", lambda: sys_call(189, b(MEMORY), b(ACL), ctypes.c_char_p(acl), ctypes.c_size_t(len(acl)), 0))
attempt("fsetxattr-acl-memory", lambda: with_fd(MEMORY, lambda fd: sys_call(190, fd, b(ACL), ctypes.c_char_p(acl), ctypes.c_size_t(len(acl)), 0)))
attempt("setxattr-default-acl-hooks-dir", lambda: sys_call(188, b(".git/hooks"), b("system.posix_acl_default"), ctypes.c_char_p(acl), ctypes.c_size_t(len(acl)), 0))
attempt("setxattrat-acl-hook", lambda: setxattrat(HOOK, ACL, acl))
attempt("setxattr-user-memory", lambda: sys_call(188, b(MEMORY), b("user.note"), b("x"), ctypes.c_size_t(1), 0))
attempt("setxattr-security-plain", lambda: sys_call(188, b(PLAIN), b("security.note"), b("x"), ctypes.c_size_t(1), 0))
attempt("setxattr-acl-plain", lambda: sys_call(188, b(PLAIN), b(ACL), ctypes.c_char_p(acl), ctypes.c_size_t(len(acl)), 0))
attempt("removexattr-memory", lambda: sys_call(197, b(MEMORY), b("user.kept")))
attempt("lremovexattr-memory", lambda: sys_call(198, b(MEMORY), b("user.kept")))
attempt("fremovexattr-memory", lambda: with_fd(MEMORY, lambda fd: sys_call(199, fd, b("user.kept"))))
attempt("removexattrat-memory", lambda: sys_call(466, AT_FDCWD, b(MEMORY), ctypes.c_uint(0), b("user.kept")))
# 90 chmod, 91 fchmod, 268 fchmodat, 452 fchmodat2 (flags 0x100: AT_SYMLINK_NOFOLLOW)
attempt("chmod-hook", lambda: sys_call(90, b(HOOK), 0o755))
attempt("fchmod-hook", lambda: with_fd(HOOK, lambda fd: sys_call(91, fd, 0o755)))
attempt("fchmodat-hook", lambda: sys_call(268, AT_FDCWD, b(HOOK), 0o755))
attempt("fchmodat2-hook", lambda: sys_call(452, AT_FDCWD, b(HOOK), 0o755, 0))
attempt("fchmodat2-nofollow-memory", lambda: sys_call(452, AT_FDCWD, b(MEMORY), 0o666, 0x100))
attempt("fchmodat2-plain", lambda: sys_call(452, AT_FDCWD, b(PLAIN), 0o640, 0))
# 92 chown, 94 lchown, 93 fchown, 260 fchownat: to the agent's own uid and gid (the kernel lets
# an owner do that; it would let it change the group to any group it is in)
me, group = os.getuid(), os.getgid()
attempt("chown-memory", lambda: sys_call(92, b(MEMORY), me, group))
attempt("lchown-memory", lambda: sys_call(94, b(MEMORY), me, group))
attempt("fchown-memory", lambda: with_fd(MEMORY, lambda fd: sys_call(93, fd, me, group)))
attempt("fchownat-hook", lambda: sys_call(260, AT_FDCWD, b(HOOK), me, group, 0))
attempt("fchownat-plain", lambda: sys_call(260, AT_FDCWD, b(PLAIN), me, group, 0))
# chattr: FS_IOC_GETFLAGS / FS_IOC_SETFLAGS, immutable (0x10) and append-only (0x20)
def chattr(path, flag):
    def op(fd):
        flags = struct.unpack("l", fcntl.ioctl(fd, 0x80086601, struct.pack("l", 0)))[0]
        fcntl.ioctl(fd, 0x40086602, struct.pack("l", flags | flag))
    with_fd(path, op)
attempt("chattr-immutable-memory", lambda: chattr(MEMORY, 0x10))
attempt("chattr-append-hook", lambda: chattr(HOOK, 0x20))
# 280 utimensat: brokered, refused on a protected entry
attempt("utimensat-memory", lambda: os.utime(MEMORY, (0, 0)))
"#;

fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = open_tempdir();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::write(dir.path().join("tools/metadata.py"), ATTEMPTS).unwrap();
    let repo = dir.path().join("project");
    std::fs::create_dir_all(repo.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::write(repo.join("CLAUDE.md"), "memory\n").unwrap();
    std::fs::write(repo.join("src/plain.txt"), "plain\n").unwrap();
    for file in [".git/hooks/pre-commit", "CLAUDE.md", "src/plain.txt"] {
        std::fs::set_permissions(repo.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // An attribute of the human's own, which the removals aim at.
    xattr_set(&repo.join("CLAUDE.md"), "user.kept", b"human");
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&repo)
        .status()
        .unwrap();
    let policy = dir.path().join("policy.toml");
    let tools = dir.path().join("tools");
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
            ],
            &[repo.to_str().unwrap()],
        ),
    );
    (dir, repo, policy)
}

/// The isolation asked for: `None` is the default.
fn attempts(repo: &Path, policy: &Path, confined: Option<Option<&str>>) -> Vec<(String, i32)> {
    let script = policy.with_file_name("tools").join("metadata.py");
    let program = [
        PYTHON.to_string(),
        script.display().to_string(),
        repo.display().to_string(),
        OTHER.to_string(),
    ];
    let mut cmd = match confined {
        Some(mode) => {
            let mut cmd = Command::new(BIN);
            cmd.args(["exec", "--policy"])
                .arg(policy)
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
    cmd.uid(AGENT).gid(AGENT).current_dir("/");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
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

const XATTR_CALLS: &[&str] = &[
    "setxattr-acl-hook",
    "lsetxattr-acl-memory",
    "fsetxattr-acl-memory",
    "setxattr-default-acl-hooks-dir",
    "setxattrat-acl-hook",
    "setxattr-user-memory",
    "setxattr-security-plain",
    "setxattr-acl-plain",
    "removexattr-memory",
    "lremovexattr-memory",
    "fremovexattr-memory",
    "removexattrat-memory",
];

const PROTECTED_MODE_AND_OWNER_CALLS: &[&str] = &[
    "chmod-hook",
    "fchmod-hook",
    "fchmodat-hook",
    "fchmodat2-hook",
    "fchmodat2-nofollow-memory",
    "chown-memory",
    "lchown-memory",
    "fchown-memory",
    "fchownat-hook",
];

#[test]
fn unconfined_the_acl_and_chown_attacks_work() {
    if !require_root("unconfined_the_acl_and_chown_attacks_work") {
        return;
    }
    let (_dir, repo, policy) = project();
    let lines = attempts(&repo, &policy, None);
    for name in [
        "setxattr-acl-hook",
        "lsetxattr-acl-memory",
        "setxattrat-acl-hook",
        "setxattr-user-memory",
        "removexattr-memory",
        "fchmodat2-hook",
        "chown-memory",
        "fchownat-hook",
        "utimensat-memory",
    ] {
        assert_eq!(errno_of(&lines, name), 0, "{name}: {lines:?}");
    }
    assert!(
        xattr_get(
            &repo.join(".git/hooks/pre-commit"),
            "system.posix_acl_access"
        )
        .is_some(),
        "the ACL was set"
    );
    for name in ["chattr-immutable-memory", "chattr-append-hook"] {
        assert_eq!(errno_of(&lines, name), libc::EPERM, "{name}: {lines:?}");
    }
}

#[test]
fn under_verbd_exec_no_metadata_call_widens_a_protected_entry_in_any_mode() {
    if !require_root("under_verbd_exec_no_metadata_call_widens_a_protected_entry_in_any_mode") {
        return;
    }
    for mode in [
        None,
        Some(verbd::sandbox::MOUNT_NAMESPACE_ENV),
        Some(verbd::sandbox::LANDLOCK_ONLY_ENV),
    ] {
        let (_dir, repo, policy) = project();
        let lines = attempts(&repo, &policy, Some(mode));
        for name in XATTR_CALLS {
            assert_eq!(
                errno_of(&lines, name),
                libc::EOPNOTSUPP,
                "{mode:?} {name}: {lines:?}"
            );
        }
        for name in PROTECTED_MODE_AND_OWNER_CALLS {
            assert_eq!(
                errno_of(&lines, name),
                libc::EACCES,
                "{mode:?} {name}: {lines:?}"
            );
        }
        // The broker filter refuses every inode flag change, before the kernel (no
        // CAP_LINUX_IMMUTABLE) or the mount namespace's read-only bind would.
        for name in ["chattr-immutable-memory", "chattr-append-hook"] {
            assert_eq!(
                errno_of(&lines, name),
                libc::EPERM,
                "{mode:?} {name}: {lines:?}"
            );
        }
        assert_eq!(
            errno_of(&lines, "utimensat-memory"),
            libc::EACCES,
            "{mode:?}: {lines:?}"
        );
        // Performed where nothing is protected (in the Landlock-only split `src` is granted
        // whole, so the plain file is writable there too).
        for name in ["fchmodat2-plain", "fchownat-plain"] {
            assert_eq!(errno_of(&lines, name), 0, "{mode:?} {name}: {lines:?}");
        }
        let mode_of = |p: &str| {
            std::fs::metadata(repo.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode_of(".git/hooks/pre-commit"), 0o644, "{mode:?}");
        assert_eq!(mode_of("CLAUDE.md"), 0o644, "{mode:?}");
        assert_eq!(mode_of("src/plain.txt"), 0o640, "{mode:?}");
        for (file, acl) in [
            (".git/hooks/pre-commit", "system.posix_acl_access"),
            ("CLAUDE.md", "system.posix_acl_access"),
            (".git/hooks", "system.posix_acl_default"),
            ("src/plain.txt", "system.posix_acl_access"),
        ] {
            assert_eq!(xattr_get(&repo.join(file), acl), None, "{mode:?} {file}");
        }
        assert_eq!(
            xattr_get(&repo.join("CLAUDE.md"), "user.kept").as_deref(),
            Some(&b"human"[..]),
            "{mode:?}"
        );
        assert_eq!(xattr_get(&repo.join("CLAUDE.md"), "user.note"), None);
        let memory = std::fs::metadata(repo.join("CLAUDE.md")).unwrap();
        assert_eq!((memory.uid(), memory.gid()), (AGENT, AGENT));
        assert_eq!(
            std::fs::read_to_string(repo.join("CLAUDE.md")).unwrap(),
            "memory\n"
        );
    }
}

#[test]
fn a_restored_mtime_does_not_hide_a_change_from_the_humans_git() {
    if !require_root("a_restored_mtime_does_not_hide_a_change_from_the_humans_git") {
        return;
    }
    let (_dir, repo, policy) = project();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "-c",
                "user.name=h",
                "-c",
                "user.email=h@x",
            ])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    std::fs::remove_dir_all(repo.join(".git")).unwrap();
    git(&["init", "-q"]);
    git(&["add", "src/plain.txt"]);
    git(&["commit", "-qm", "human"]);
    Command::new("chown")
        .args(["-R", &format!("{AGENT}:{AGENT}")])
        .arg(&repo)
        .status()
        .unwrap();
    // Let the index entry stop being "racily clean" before the agent's change.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Same size, then the old atime and mtime put back to the nanosecond.
    let script = r#"
import os, sys
path = sys.argv[1]
st = os.stat(path)
with open(path, "r+") as f:
    f.write("PLAIN\n")
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
after = os.stat(path)
print("restored", after.st_mtime_ns == st.st_mtime_ns and after.st_size == st.st_size)
"#;
    let out = Command::new(BIN)
        .args(["exec", "--policy"])
        .arg(&policy)
        .args(["--profile", "agent", "--", PYTHON, "-c", script])
        .arg(repo.join("src/plain.txt"))
        .uid(AGENT)
        .gid(AGENT)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("restored True"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        git(&["status", "--porcelain", "--untracked-files=no"]),
        " M src/plain.txt\n"
    );
    assert!(git(&["diff"]).contains("+PLAIN"));
}
