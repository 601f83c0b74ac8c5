//! Paths in the caller's view: the caller's own descriptors (`/dev/stdin`, `/dev/fd/N`, …), and
//! resolution beneath the caller's root with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`
//! to a directory whose name leads back to the same inode and a final component.

use super::*;

/// The descriptor number a path names when it is one of the caller's own: `/dev/stdin`,
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`.
pub(super) fn own_descriptor(path: &[u8]) -> Option<i32> {
    match path {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    let number = [
        &b"/dev/fd/"[..],
        b"/proc/self/fd/",
        b"/proc/thread-self/fd/",
    ]
    .iter()
    .find_map(|prefix| path.strip_prefix(*prefix))?;
    if number.is_empty() || !number.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(number).ok()?.parse().ok()
}

pub(super) fn timespec(seconds: i64, nanoseconds: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: seconds,
        tv_nsec: nanoseconds,
    }
}

pub(super) fn c_string(bytes: &[u8]) -> Result<CString, i32> {
    CString::new(bytes).map_err(|_| libc::EINVAL)
}

pub(super) fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `openat(dirfd, path, flags | O_CLOEXEC)` (mode 0).
pub(super) fn open_path(dirfd: RawFd, path: &str, flags: i32) -> Result<OwnedFd, i32> {
    let path = c_string(path.as_bytes())?;
    // SAFETY: `path` is NUL-terminated and alive for the call.
    let fd = unsafe { libc::openat(dirfd, path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just created this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2` beneath `root`, as the caller would resolve `path`, without magic links.
pub(in crate::sandbox) fn open_in_root(
    root: &OwnedFd,
    path: &Path,
    flags: i32,
    mode: u32,
) -> Result<OwnedFd, i32> {
    let c_path = c_string(path.as_os_str().as_bytes())?;
    // SAFETY: all-zero is a valid `open_how` (integers only).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        u64::from(mode)
    } else {
        0
    };
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // ELOOP is also the answer for a /proc magic link (`/proc/PID/root`, `/proc/self/cwd`):
    // followed here they would name this thread's process, outside the program's namespace, so
    // they are refused like any path the program may not take.
    // SAFETY: `c_path` is NUL-terminated and `how` a valid `open_how` of the size passed; both
    // outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(match last_errno() {
            libc::ELOOP => libc::EACCES,
            errno => errno,
        });
    }
    // SAFETY: the kernel just created this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `/proc/thread-self/fd/N` of one of this thread's descriptors: reopening through it is
/// checked by Landlock against this thread's (the program's) rules.
pub(super) fn own_fd_path(fd: &OwnedFd) -> String {
    format!("/proc/thread-self/fd/{}", fd.as_raw_fd())
}

/// A resolved final component: its directory and name, and the whole path.
pub(super) struct Resolved {
    pub(super) directory: OwnedFd,
    /// The last component, with a trailing `/` kept where the caller gave one.
    pub(super) name: CString,
    /// The absolute path, as the caller sees it.
    pub(super) path: PathBuf,
}

impl Resolved {
    /// Does the entry exist (not following a final symlink), and is it a directory / a FIFO?
    pub(super) fn stat(&self) -> Option<libc::stat> {
        // SAFETY: all-zero is a valid `stat` buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: directory fd, NUL-terminated name and a writable stat buffer, all alive.
        let rc = unsafe {
            libc::fstatat(
                self.directory.as_raw_fd(),
                self.name.as_ptr(),
                &mut stat,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        (rc == 0).then_some(stat)
    }

    pub(super) fn is_dir(&self) -> bool {
        self.stat()
            .is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
    }
}

/// Splits `path` into its directory and last component and opens the directory beneath the
/// caller's root; checks that the directory's name leads back to the same inode, so the
/// protected check sees the real location.
pub(super) fn resolve(root: &OwnedFd, path: &Path) -> Result<Resolved, i32> {
    let bytes = path.as_os_str().as_bytes();
    let trimmed = {
        let mut end = bytes.len();
        while end > 1 && bytes[end - 1] == b'/' {
            end -= 1;
        }
        &bytes[..end]
    };
    let (directory, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => return Err(libc::ENOENT),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(libc::EEXIST);
    }
    let directory = open_in_root(
        root,
        Path::new(OsStr::from_bytes(directory)),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )?;
    let located = std::fs::read_link(own_fd_path(&directory)).map_err(|_| libc::EACCES)?;
    if !located.is_absolute() || !same_inode(&directory, &located) {
        return Err(libc::EACCES);
    }
    let mut shown = name.to_vec();
    if trimmed.len() < bytes.len() {
        shown.push(b'/');
    }
    Ok(Resolved {
        directory,
        name: c_string(&shown)?,
        path: located.join(OsStr::from_bytes(name)),
    })
}

/// Does `path`, resolved beneath the caller's root, name the same inode as `fd`?
pub(super) fn same_inode(fd: &OwnedFd, path: &Path) -> bool {
    let Ok(by_path) = std::fs::metadata(path) else {
        return false;
    };
    // SAFETY: all-zero is a valid `stat` buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open fd and a writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return false;
    }
    use std::os::unix::fs::MetadataExt;
    by_path.dev() == stat.st_dev && by_path.ino() == stat.st_ino
}
