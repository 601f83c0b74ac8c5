//! The ancestor listing of `verbd exec`: the directories above the profile's read and write
//! roots (`/`, `/home`, `/home/user` for a root `/home/user/proj`) can be listed, exactly those
//! directories and nothing beneath them that no root covers, so `ls -la /` prints what it
//! prints outside.
//!
//! Why: Landlock's `ReadDir` right is hierarchical — granted on `/`, it would let the program
//! list every directory of the machine — so nothing grants it above a root, and `opendir("/")`
//! fails with `EACCES` although every name in it can be `stat`ed (Landlock does not govern
//! `stat`).
//!
//! How: the program's last seccomp filter (module `seccomp`, `exec_program`) answers `open` and
//! `openat` of a directory to list (`O_DIRECTORY` without `O_PATH` and without any flag the
//! create broker takes) with `SECCOMP_RET_USER_NOTIF`. The connect broker's thread (module
//! `unix_broker`) hands each such notification here, and this module, on that thread:
//!
//! 1. copies the path out of the caller's memory; a relative one is joined to the caller's
//!    working directory or directory descriptor as the kernel names it (`/proc/TID/cwd`,
//!    `/proc/TID/fd/N`);
//! 2. opens it itself, read-only, beneath the caller's root (`/proc/TID/root`, which carries its
//!    mount namespace) with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`: `..` and
//!    absolute symlinks stay in the caller's view, `/proc` magic links are never followed, and
//!    the descriptor is one of the caller's mounts, never one of the launcher's namespace;
//! 3. compares the device and inode of *that descriptor* with the ancestors', taken when the
//!    profile was applied; only when they match is that same descriptor installed in the caller
//!    (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SEND`, `O_CLOEXEC` as asked);
//! 4. in every other case — another directory, any flag but `O_DIRECTORY`, `O_NONBLOCK`,
//!    `O_CLOEXEC`, `O_NOCTTY`, `O_LARGEFILE`, `O_NOFOLLOW`, a path it cannot read or open —
//!    answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel performs the call as if the broker
//!    did not exist, and Landlock decides.
//!
//! Invariants:
//! - the only descriptor ever handed over is a directory whose device and inode are an
//!   ancestor's, opened by this module read-only with `O_DIRECTORY` beneath the caller's root:
//!   what the caller reads through it is the names of that directory. Renaming, symlinks, `..`,
//!   bind mounts and a caller that changes its path while this module reads it can change
//!   *which* ancestor is listed, never make it another directory: the check is on the
//!   descriptor handed over, not on a name;
//! - `CONTINUE` is safe here and only here: no check of this module is at stake in it, the
//!   kernel resolves the caller's (possibly changed) path under the caller's Landlock domain;
//! - the answer for a non-ancestor does not depend on what this module found (every failure
//!   continues), so the broker is no oracle for paths the profile cannot see;
//! - the opens use the serving thread's credentials: the caller's uid (or the profile's
//!   `run_as`) without effective capabilities (`unix_broker` drops them for `verbd exec`), so a
//!   directory the caller could not read is not listed either;
//! - through the descriptor the program can do what it could with the directory's path: open
//!   beneath it (Landlock checks every open against the path reached, wherever the walk began),
//!   and nothing the create broker does not judge (it resolves a descriptor's path beneath the
//!   caller's root, as for any path).

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::create_broker::open_in_root;
use super::notify;

/// Open flags a listing may carry besides `O_RDONLY` (0): anything else continues in the
/// kernel. `O_LARGEFILE` is the kernel's own on 64-bit (`0o100000`, 0 in libc's headers).
const LISTING_FLAGS: i32 = libc::O_DIRECTORY
    | libc::O_NONBLOCK
    | libc::O_CLOEXEC
    | libc::O_NOCTTY
    | libc::O_NOFOLLOW
    | 0o100000;

/// The ancestors of a profile's roots, as device and inode, with their paths for the status.
#[derive(Debug, Clone, Default)]
pub struct AncestorListing {
    /// Each ancestor: its path (canonical) and `(st_dev, st_ino)`.
    ancestors: Vec<(PathBuf, (u64, u64))>,
}

impl AncestorListing {
    /// The strict ancestors of every read and write root of `spec` (made canonical; a root that
    /// does not resolve is skipped, as preparing the profile refuses it anyway). A directory
    /// that is itself a root, or inside one, is listed by Landlock and left out.
    pub fn of(spec: &super::SandboxSpec) -> AncestorListing {
        let roots: Vec<PathBuf> = spec
            .read
            .iter()
            .chain(&spec.write)
            .filter_map(|root| std::fs::canonicalize(root).ok())
            .collect();
        let mut ancestors: Vec<(PathBuf, (u64, u64))> = Vec::new();
        for root in &roots {
            for dir in root.ancestors().skip(1) {
                if roots.iter().any(|other| dir.starts_with(other))
                    || ancestors.iter().any(|(seen, _)| seen == dir)
                {
                    continue;
                }
                if let Ok(meta) = std::fs::metadata(dir)
                    && meta.is_dir()
                {
                    ancestors.push((dir.to_path_buf(), (meta.dev(), meta.ino())));
                }
            }
        }
        ancestors.sort();
        AncestorListing { ancestors }
    }

    /// Is `path` (canonical) one of the ancestors, by name? For `verbd sandbox why --exec`.
    pub fn names(&self, path: &Path) -> bool {
        self.ancestors.iter().any(|(dir, _)| dir == path)
    }

    fn holds(&self, stat: &libc::stat) -> bool {
        stat.st_mode & libc::S_IFMT == libc::S_IFDIR
            && self
                .ancestors
                .iter()
                .any(|(_, inode)| *inode == (stat.st_dev, stat.st_ino))
    }

    /// One line for `--print-status` and `verbd sandbox why --exec`.
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self
            .ancestors
            .iter()
            .map(|(dir, _)| dir.display().to_string())
            .collect();
        format!(
            "listing: the ancestors of the read and write roots can be listed (their entry names only, nothing beneath them that no root covers): [{}]",
            shown.join(", ")
        )
    }

    /// Answers one notification of a directory open: the ancestor's descriptor, or the kernel
    /// continues. Always answers.
    pub(super) fn answer(&self, listener: &OwnedFd, notification: &libc::seccomp_notif) {
        let id = notification.id;
        match self.open_ancestor(notification.pid, &notification.data) {
            Some((fd, close_on_exec)) if notify::id_valid(listener, id) => {
                match notify::send_fd(listener, id, &fd, close_on_exec) {
                    Ok(()) | Err(libc::ENOENT) => {}
                    // The caller's descriptor table is full, as the kernel would answer.
                    Err(errno) => notify::reply(listener, id, errno),
                }
            }
            _ => notify::continue_call(listener, id),
        }
    }

    /// The ancestor the call `open`/`openat` names, opened by this thread beneath the caller's
    /// root, with whether the caller asked for `O_CLOEXEC`; `None` for anything else.
    fn open_ancestor(&self, tid: u32, data: &libc::seccomp_data) -> Option<(OwnedFd, bool)> {
        if self.ancestors.is_empty() {
            return None;
        }
        let (dirfd, address, flags) = match i64::from(data.nr) {
            libc::SYS_open => (libc::AT_FDCWD, data.args[0], data.args[1] as i32),
            libc::SYS_openat => (data.args[0] as i32, data.args[1], data.args[2] as i32),
            _ => return None,
        };
        if flags & libc::O_DIRECTORY == 0 || flags & !LISTING_FLAGS != 0 {
            return None;
        }
        let path = notify::read_string(tid, address).ok()?;
        let absolute = match path.first() {
            None => return None,
            Some(b'/') => PathBuf::from(OsStr::from_bytes(&path)),
            Some(_) => {
                let base = if dirfd == libc::AT_FDCWD {
                    format!("/proc/{tid}/cwd")
                } else {
                    format!("/proc/{tid}/fd/{dirfd}")
                };
                if self.is_entry_of_another_directory(&base, &path, flags) {
                    return None;
                }
                let base = std::fs::read_link(base).ok()?;
                // A deleted directory, or a descriptor that is no directory (`pipe:[…]`): the
                // kernel answers.
                if !base.is_absolute() || base.as_os_str().as_bytes().ends_with(b" (deleted)") {
                    return None;
                }
                base.join(OsStr::from_bytes(&path))
            }
        };
        let root = open_in_root_of(tid)?;
        let fd = open_in_root(&root, &absolute, flags & !libc::O_CLOEXEC, 0).ok()?;
        let stat = fstat(&fd)?;
        self.holds(&stat)
            .then_some((fd, flags & libc::O_CLOEXEC != 0))
    }
}

impl AncestorListing {
    /// The walkers' fast path (`find`, `du`, `rm -r` open each subdirectory by its one name,
    /// relative to its parent's descriptor, with `O_NOFOLLOW`): such a name is an entry of the
    /// directory `base` (`/proc/TID/fd/N` or `/proc/TID/cwd`), not a symlink; if that directory
    /// is no ancestor, the entry is none either — every directory above an ancestor is one, or
    /// lies in a root, where Landlock lists it anyway. Only ever answers "continue" sooner: a
    /// `false` goes through the whole resolution.
    fn is_entry_of_another_directory(&self, base: &str, name: &[u8], flags: i32) -> bool {
        if flags & libc::O_NOFOLLOW == 0 || name.contains(&b'/') || name == b"." || name == b".." {
            return false;
        }
        match std::fs::metadata(base) {
            Ok(meta) => !self
                .ancestors
                .iter()
                .any(|(_, inode)| *inode == (meta.dev(), meta.ino())),
            Err(_) => false,
        }
    }
}

/// The caller's root directory (carrying its mount namespace).
fn open_in_root_of(tid: u32) -> Option<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/{tid}/root")).ok()?;
    // SAFETY: `path` is NUL-terminated and alive for the call.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just created this fd.
    Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> Option<libc::stat> {
    // SAFETY: all-zero is a valid `stat` buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open fd and a writable stat buffer.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } == 0).then_some(stat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ancestors_are_those_above_every_root_and_no_root_itself() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["a/b/read", "a/write", "a/b/read/inner"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        let mut spec = super::super::SandboxSpec::new("t");
        spec.read = vec![base.join("a/b/read"), base.join("a/b/read/inner")];
        spec.write = vec![base.join("a/write")];
        let listing = AncestorListing::of(&spec);
        for ancestor in [Path::new("/"), &base, &base.join("a"), &base.join("a/b")] {
            assert!(listing.names(ancestor), "{}", ancestor.display());
        }
        for not in [
            base.join("a/b/read"),
            base.join("a/b/read/inner"),
            base.join("a/write"),
            base.join("a/other"),
        ] {
            assert!(!listing.names(&not), "{}", not.display());
        }
        let stat_of = |p: &Path| {
            let fd = open_in_root_of(std::process::id()).unwrap();
            let fd = open_in_root(&fd, p, libc::O_DIRECTORY, 0).unwrap();
            fstat(&fd).unwrap()
        };
        assert!(listing.holds(&stat_of(&base.join("a/b"))));
        assert!(!listing.holds(&stat_of(&base.join("a/b/read"))));
        assert!(
            listing
                .describe()
                .contains(&base.join("a/b").display().to_string())
        );
    }
}
