//! Performing one request on the create thread: opens, creates, links, removals, mode, owner and
//! time changes and renames, each refused on a protected name or entry (and, for a change of an
//! entry, outside the write roots) before it is made relative to the resolved directory.

use super::git_files::{CheckedWrite, replace_git_config};
use super::paths::{Resolved, c_string, last_errno, open_path, own_fd_path, resolve};
use super::*;

/// Performs one request on the create thread.
pub(super) fn perform(policy: &CreatePolicy, request: Request, reporter: Reporter) -> Performed {
    // SAFETY: plain syscall; this thread has its own umask (unshare(CLONE_FS) at start).
    unsafe { libc::umask(request.umask as libc::mode_t) };
    let refused = |path: &Path, rule: &str| {
        reporter.create_refused(
            request.tid,
            &format!(
                "{} is a {rule}: a new protected name is never created",
                path.display()
            ),
        );
    };
    let explained = |path: &Path, why: &str| {
        reporter.create_refused(request.tid, &format!("{}: {why}", path.display()));
    };
    let root = &request.root;
    let result = match request.operation {
        Operation::Open { place, flags, mode } => {
            let close_on_exec = flags & libc::O_CLOEXEC != 0;
            return match open(policy, root, place, flags, mode, &refused) {
                Ok(Opening::Ready(fd)) => Performed::Now(Outcome::Descriptor { fd, close_on_exec }),
                Ok(Opening::Waits(open)) => Performed::Waits {
                    open,
                    close_on_exec,
                },
                Ok(Opening::Checked(write)) => match root.try_clone() {
                    Ok(root) => Performed::Checked {
                        write,
                        root,
                        umask: request.umask,
                        close_on_exec,
                    },
                    Err(_) => Performed::Now(Outcome::Errno(libc::EMFILE)),
                },
                Err(errno) => Performed::Now(Outcome::Errno(errno)),
            };
        }
        Operation::Mkdir { place, mode } => make(policy, root, place, true, &refused, |at| {
            // SAFETY: directory fd and NUL-terminated name, alive for the call.
            unsafe { libc::mkdirat(at.directory.as_raw_fd(), at.name.as_ptr(), mode) }
        }),
        Operation::Mknod {
            place,
            mode,
            device,
        } => make(policy, root, place, false, &refused, |at| {
            // SAFETY: as above.
            unsafe {
                libc::mknodat(
                    at.directory.as_raw_fd(),
                    at.name.as_ptr(),
                    mode,
                    device as libc::dev_t,
                )
            }
        }),
        Operation::Symlink { target, place } => c_string(&target).and_then(|target| {
            make(policy, root, place, false, &refused, |at| {
                // SAFETY: NUL-terminated target and name, a directory fd, alive for the call.
                unsafe {
                    libc::symlinkat(target.as_ptr(), at.directory.as_raw_fd(), at.name.as_ptr())
                }
            })
        }),
        Operation::Link { old, new, flags } => link(policy, root, old, new, flags, &refused),
        Operation::Rename { old, new, flags } => {
            rename(policy, root, old, new, flags, &refused, &explained)
        }
        Operation::Unlink { place, flags } => unlink(policy, root, place, flags, &refused),
        Operation::Truncate { place, length } => {
            alter(
                policy,
                root,
                place,
                true,
                None,
                &refused,
                &explained,
                |target| {
                    let file = open_path(libc::AT_FDCWD, &own_fd_path(target), libc::O_WRONLY)?;
                    // SAFETY: an open fd; plain syscall.
                    if unsafe { libc::ftruncate(file.as_raw_fd(), length) } == 0 {
                        Ok(())
                    } else {
                        Err(last_errno())
                    }
                },
            )
        }
        Operation::Chown {
            place,
            uid,
            gid,
            follow,
        } => alter(
            policy,
            root,
            place,
            follow,
            None,
            &refused,
            &explained,
            |target| {
                // SAFETY: an open fd and an empty NUL-terminated path: the call acts on the file
                // the descriptor names (a symlink itself when it was opened without following).
                let rc = unsafe {
                    libc::fchownat(
                        target.as_raw_fd(),
                        c"".as_ptr(),
                        uid,
                        gid,
                        libc::AT_EMPTY_PATH,
                    )
                };
                if rc == 0 { Ok(()) } else { Err(last_errno()) }
            },
        ),
        Operation::Chmod { place, mode, flags } => {
            let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            alter(
                policy,
                root,
                place,
                follow,
                Some(mode),
                &refused,
                &explained,
                |target| {
                    if !follow && is_symlink(target) {
                        // Linux has no mode for a symlink (fchmodat2 with AT_SYMLINK_NOFOLLOW
                        // says so).
                        return Err(libc::EOPNOTSUPP);
                    }
                    let path = c_string(own_fd_path(target).as_bytes())?;
                    // SAFETY: a NUL-terminated path alive for the call; chmod follows the magic
                    // link to the file the O_PATH descriptor names.
                    if unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) } == 0 {
                        Ok(())
                    } else {
                        Err(last_errno())
                    }
                },
            )
        }
        Operation::Times {
            place,
            times,
            follow,
        } => alter(
            policy,
            root,
            place,
            follow,
            None,
            &refused,
            &explained,
            |target| {
                let path = c_string(own_fd_path(target).as_bytes())?;
                let times = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                // SAFETY: a NUL-terminated path and a null or two-element `timespec` array, alive
                // for the call; the magic link leads to the file (or the symlink itself, when it
                // was opened without following) the O_PATH descriptor names.
                if unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times, 0) } == 0 {
                    Ok(())
                } else {
                    Err(last_errno())
                }
            },
        ),
    };
    Performed::Now(Outcome::Errno(match result {
        Ok(()) => 0,
        Err(errno) => errno,
    }))
}

pub(super) fn place_path(place: Place) -> Result<PathBuf, i32> {
    match place {
        Place::Path(path) => Ok(path),
        // Only `open`, `linkat`'s old path reopen a descriptor; a new name needs a path.
        Place::Descriptor(_) => Err(libc::EEXIST),
    }
}

pub(super) fn open(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    flags: i32,
    mode: u32,
    refused: &dyn Fn(&Path, &str),
) -> Result<Opening, i32> {
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    // A protected file is never opened for writing, whatever name or link leads to it.
    let written_protected = |fd: &OwnedFd| -> Result<(), i32> {
        if !writes {
            return Ok(());
        }
        match std::fs::read_link(own_fd_path(fd)) {
            Ok(located) => match policy.protected(&located) {
                Some(rule) => {
                    refused_write(&located, &rule, refused);
                    Err(libc::EACCES)
                }
                None => Ok(()),
            },
            Err(_) => Err(libc::EACCES),
        }
    };
    let path = match place {
        // The caller's own descriptor exists: reopening it creates nothing.
        Place::Descriptor(fd) => {
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            written_protected(&fd)?;
            return open_path(libc::AT_FDCWD, &own_fd_path(&fd), flags & !CREATING)
                .map(Opening::Ready);
        }
        Place::Path(path) => path,
    };
    let at = resolve(root, &path)?;
    if let Some(rule) = policy.protected(&at.path) {
        if at.stat().is_some() {
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            if writes {
                refused_write(&at.path, &rule, refused);
                return Err(libc::EACCES);
            }
            // Exists and is only read: opens as the mounts and Landlock allow.
            return open_at(&at, flags & !CREATING, 0);
        }
        let creates_to_write =
            flags & libc::O_CREAT != 0 && flags & libc::O_ACCMODE == libc::O_WRONLY;
        if creates_to_write
            && let Some(kind) = policy.git_place(&at.path).and_then(GitPlace::checked_file)
        {
            return Ok(Opening::Checked(CheckedWrite { kind, at, mode }));
        }
        refused(&at.path, &rule);
        return Err(libc::EACCES);
    }
    match open_at(&at, flags | libc::O_NOFOLLOW, mode) {
        Err(libc::ELOOP) if flags & libc::O_NOFOLLOW == 0 => {
            // A symlink in the last place: open what it leads to, never create through it.
            if flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            let target = open_in_root(root, &at.path, libc::O_PATH, 0).map_err(|errno| {
                if errno == libc::ENOENT {
                    refused(&at.path, "dangling symlink");
                    libc::EACCES
                } else {
                    errno
                }
            })?;
            written_protected(&target)?;
            open_path(libc::AT_FDCWD, &own_fd_path(&target), flags & !CREATING).map(Opening::Ready)
        }
        other => other,
    }
}

/// An open that is done, or that must wait on a thread of its own: opening a FIFO waits for
/// the other end, which may come through this broker too; or the creation of a file whose
/// content is checked ([`CheckedFile`]).
pub(super) enum Opening {
    Ready(OwnedFd),
    Waits(Box<dyn FnOnce() -> Result<OwnedFd, i32> + Send>),
    Checked(CheckedWrite),
}

/// `openat` of the resolved name (a FIFO's open is left to a thread, see [`Opening`]).
pub(super) fn open_at(at: &Resolved, flags: i32, mode: u32) -> Result<Opening, i32> {
    let is_fifo = at
        .stat()
        .is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFIFO);
    let run = move |directory: RawFd, name: &CString| {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                directory,
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            Err(last_errno())
        } else {
            // SAFETY: the kernel just created this fd.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    if !is_fifo {
        return run(at.directory.as_raw_fd(), &at.name).map(Opening::Ready);
    }
    let directory = at.directory.try_clone().map_err(|_| libc::EMFILE)?;
    let name = at.name.clone();
    Ok(Opening::Waits(Box::new(move || {
        run(directory.as_raw_fd(), &name)
    })))
}

/// `mkdir`, `mknod`, `symlink`: a protected name answers `EEXIST` if it exists, else `EACCES`;
/// a directory git makes for a new repository (`.git`, `.git/hooks`, `.git/info`) is made.
pub(super) fn make(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    directory: bool,
    refused: &dyn Fn(&Path, &str),
    create: impl FnOnce(&Resolved) -> libc::c_int,
) -> Result<(), i32> {
    let at = resolve(root, &place_path(place)?)?;
    if let Some(rule) = policy.protected(&at.path) {
        if at.stat().is_some() {
            return Err(libc::EEXIST);
        }
        let git_directory = directory
            && policy
                .git_place(&at.path)
                .is_some_and(GitPlace::is_directory);
        if !git_directory {
            refused(&at.path, &rule);
            return Err(libc::EACCES);
        }
    }
    if create(&at) == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

pub(super) fn link(
    policy: &CreatePolicy,
    root: &OwnedFd,
    old: Place,
    new: Place,
    flags: i32,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let new = resolve(root, &place_path(new)?)?;
    if let Some(rule) = policy.protected(&new.path) {
        if new.stat().is_some() {
            return Err(libc::EEXIST);
        }
        refused(&new.path, &rule);
        return Err(libc::EACCES);
    }
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    // The file the new name will lead to, opened O_PATH: whatever name or link reached it, a
    // protected entry never gets a second name (through which it could be written).
    let source = match old {
        Place::Descriptor(fd) if flags & libc::AT_EMPTY_PATH != 0 => fd,
        // Without AT_SYMLINK_FOLLOW the kernel would link the /proc link itself: across devices.
        Place::Descriptor(_) if !follow => return Err(libc::EXDEV),
        Place::Descriptor(fd) => fd,
        Place::Path(path) => {
            let resolve_flags = if follow {
                libc::O_PATH
            } else {
                libc::O_PATH | libc::O_NOFOLLOW
            };
            open_in_root(root, &path, resolve_flags, 0)?
        }
    };
    let located = std::fs::read_link(own_fd_path(&source)).map_err(|_| libc::EACCES)?;
    if let Some(rule) = policy.protected(&located) {
        refused(&located, &rule);
        return Err(libc::EACCES);
    }
    // The O_PATH descriptor (or the caller's own) names the file itself: link it by its /proc
    // path, following that one magic link and nothing else.
    let source_path = c_string(own_fd_path(&source).as_bytes())?;
    // SAFETY: a NUL-terminated path, a directory fd and a NUL-terminated name, alive for the
    // call.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source_path.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if linked == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Reports a refused write, removal or mode change of a protected entry.
pub(super) fn refused_write(path: &Path, rule: &str, refused: &dyn Fn(&Path, &str)) {
    refused(path, &format!("{rule}, kept unchanged"));
}

/// `unlink`, `rmdir`: never a protected entry, never a mount point of the program's namespace.
pub(super) fn unlink(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    flags: i32,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let Place::Path(path) = place else {
        return Err(libc::EACCES);
    };
    let at = resolve(root, &path)?;
    if let Some(rule) = policy.protected(&at.path) {
        let removes_a_directory = flags & libc::AT_REMOVEDIR != 0 && at.is_dir();
        if removes_a_directory && has_entries(&at) {
            // What the kernel answers, and nothing would change: git removes the empty
            // directories above a file it deleted, up to `.git`, and stops here.
            return Err(libc::ENOTEMPTY);
        }
        let place = policy.git_place(&at.path);
        // An empty directory git makes for a new repository holds nothing to keep.
        let empty_git_directory = removes_a_directory && place.is_some_and(GitPlace::is_directory);
        // A linked worktree's `commondir` and `gitdir`, a gitlink file (`git worktree remove`,
        // `prune`): without them git obeys nothing the agent wrote — the name comes back only
        // with checked content.
        let checked_file = flags & libc::AT_REMOVEDIR == 0
            && !at.is_dir()
            && place.and_then(GitPlace::checked_file).is_some();
        if !empty_git_directory && !checked_file {
            refused_write(&at.path, &rule, refused);
            return Err(libc::EACCES);
        }
    }
    if at
        .stat()
        .is_some_and(|s| policy.mount_points.contains(&(s.st_dev, s.st_ino)))
    {
        return Err(libc::EBUSY);
    }
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    if unsafe { libc::unlinkat(at.directory.as_raw_fd(), at.name.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Does the directory `at` names hold any entry? (Unreadable: taken as not empty.)
pub(super) fn has_entries(at: &Resolved) -> bool {
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    let fd = unsafe {
        libc::openat(
            at.directory.as_raw_fd(),
            at.name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return true;
    }
    // SAFETY: the kernel just created this fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    std::fs::read_dir(own_fd_path(&fd)).map_or(true, |mut entries| entries.next().is_some())
}

/// `truncate`, `chmod`, `chown`, `utimensat` and kin: the file they act on (following a final
/// symlink when `follow`), opened `O_PATH` beneath the caller's root, must lie in a write root
/// (Landlock governs none of these calls but `truncate`: outside, an owner could make its
/// `~/.ssh` world-writable or put back a time) and must not be protected; then `change` acts on
/// that descriptor. A descriptor that names no file (a pipe, a socket: its link is no path) is
/// in no directory tree and changes nothing another program reads.
#[allow(clippy::too_many_arguments)]
pub(super) fn alter(
    policy: &CreatePolicy,
    root: &OwnedFd,
    place: Place,
    follow: bool,
    config_chmod: Option<u32>,
    refused: &dyn Fn(&Path, &str),
    explained: &dyn Fn(&Path, &str),
    change: impl FnOnce(&OwnedFd) -> Result<(), i32>,
) -> Result<(), i32> {
    let target = match place {
        Place::Descriptor(fd) => fd,
        Place::Path(path) => {
            let flags = if follow {
                libc::O_PATH
            } else {
                libc::O_PATH | libc::O_NOFOLLOW
            };
            open_in_root(root, &path, flags, 0)?
        }
    };
    let located = std::fs::read_link(own_fd_path(&target)).map_err(|_| libc::EACCES)?;
    if located.is_absolute() && !policy.in_write_root(&located) {
        explained(
            &located,
            "outside every write root: its mode, owner, times and size are kept unchanged",
        );
        return Err(libc::EACCES);
    }
    if let Some(rule) = policy.protected(&located) {
        // git probes whether the file system keeps the executable bit by flipping it on its
        // config (`git init`): a mode that lets no other uid write is harmless there.
        let harmless_config_mode = config_chmod.is_some_and(|mode| mode & 0o7022 == 0)
            && policy.git_place(&located) == Some(GitPlace::Config);
        if !harmless_config_mode {
            refused_write(&located, &rule, refused);
            return Err(libc::EACCES);
        }
    }
    change(&target)
}

/// Does the descriptor (an `O_PATH` one opened without following) name a symlink?
pub(super) fn is_symlink(fd: &OwnedFd) -> bool {
    // SAFETY: all-zero is a valid `stat` buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open fd and a writable stat buffer.
    unsafe {
        libc::fstat(fd.as_raw_fd(), &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

/// `rename`: refused when either name is protected, or when a directory would be moved to or
/// from a name that leads to protected entries (`.git`, `.config`).
pub(super) fn rename(
    policy: &CreatePolicy,
    root: &OwnedFd,
    old: Place,
    new: Place,
    flags: u32,
    refused: &dyn Fn(&Path, &str),
    explained: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    let old = resolve(root, &place_path(old)?)?;
    let new = resolve(root, &place_path(new)?)?;
    if let Some(rule) = policy.protected(&old.path) {
        refused(&old.path, &rule);
        return Err(libc::EACCES);
    }
    if let Some(rule) = policy.protected(&new.path) {
        if flags == 0 && policy.git_place(&new.path) == Some(GitPlace::Config) {
            return replace_git_config(&old, &new, explained);
        }
        refused(&new.path, &rule);
        return Err(libc::EACCES);
    }
    for side in [&old, &new] {
        if side
            .stat()
            .is_some_and(|s| policy.mount_points.contains(&(s.st_dev, s.st_ino)))
        {
            return Err(libc::EBUSY);
        }
    }
    let moves_a_directory = old.is_dir() || (flags & libc::RENAME_EXCHANGE != 0 && new.is_dir());
    if moves_a_directory {
        for side in [&old, &new] {
            if policy.leads_to_protected(&side.path) {
                refused(&side.path, "name that leads to protected entries");
                return Err(libc::EACCES);
            }
        }
    }
    // SAFETY: directory fds and NUL-terminated names alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            old.directory.as_raw_fd(),
            old.name.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
            flags,
        )
    };
    if rc == 0 { Ok(()) } else { Err(last_errno()) }
}
