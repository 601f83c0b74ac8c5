//! The files that redirect git, created only with content the broker checked: a worktree's
//! `commondir` and `gitdir` and a gitlink `.git` file (the program writes into a pipe a drain
//! thread reads, checks and creates the file from), and a repository's `config` replaced by a
//! rename (only data keys added or changed).

use super::paths::{Resolved, c_string, last_errno, own_fd_path};
use super::*;

/// The largest git config file the broker reads: larger is refused.
pub(super) const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A checked file the program creates: where, and the mode it asked for.
pub(super) struct CheckedWrite {
    pub(super) kind: CheckedFile,
    pub(super) at: Resolved,
    pub(super) mode: u32,
}

/// The largest content of a checked file the broker reads; more is refused (and drained, so
/// the writer never blocks).
pub(super) const MAX_CHECKED_BYTES: usize = 4096;

/// A drain thread of a checked file, with a descriptor of its pipe's read end to see when the
/// program has closed its end.
pub(super) struct Drain {
    pub(super) hangup: OwnedFd,
    pub(super) thread: std::thread::JoinHandle<()>,
}

/// Drains not yet joined: the create thread joins those whose writer has closed before it
/// performs the next request, so a brokered call made after the program closed a checked file
/// finds it in place (git reads `gitdir` and the gitlink right after writing them); the
/// launcher joins them before it exits.
pub(super) static DRAINS: std::sync::Mutex<Vec<Drain>> = std::sync::Mutex::new(Vec::new());

/// Joins every drain whose pipe has no writer left (their file is then in place or refused).
pub(in crate::sandbox) fn settle_checked_writes() {
    let mut drains = DRAINS.lock().unwrap_or_else(|e| e.into_inner());
    let (closed, open): (Vec<Drain>, Vec<Drain>) = drains.drain(..).partition(|drain| {
        let mut poll = libc::pollfd {
            fd: drain.hangup.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, timeout 0.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready != 0 && poll.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    });
    *drains = open;
    drop(drains);
    for drain in closed {
        let _ = drain.thread.join();
    }
}

/// Starts a checked file: a pipe whose write end the program gets; a drain thread (confined as
/// this one, whose domain it inherits) reads the content to the end, checks it and creates the
/// file itself. A `commondir` is created at once with `../..`.
pub(super) fn start_checked(
    waiting: &Arc<AtomicUsize>,
    policy: &Arc<CreatePolicy>,
    write: CheckedWrite,
    root: OwnedFd,
    umask: u32,
    tid: u32,
    reporter: Reporter,
) -> Result<OwnedFd, i32> {
    let mode = write.mode & !umask & 0o644;
    if waiting
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_WAITING_OPENS).then_some(n + 1)
        })
        .is_err()
    {
        return Err(libc::EAGAIN);
    }
    let release = || {
        waiting.fetch_sub(1, Ordering::AcqRel);
    };
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: a writable array of two ints.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        release();
        return Err(last_errno());
    }
    // SAFETY: the kernel just created both fds.
    let (read, sink) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let hangup = match read.try_clone() {
        Ok(fd) => fd,
        Err(_) => {
            release();
            return Err(libc::EMFILE);
        }
    };
    if write.kind == CheckedFile::CommonDir
        && let Err(errno) = create_checked(&write.at, COMMON_DIR, mode)
    {
        release();
        return Err(errno);
    }
    let count = Arc::clone(waiting);
    let policy = Arc::clone(policy);
    let spawned = std::thread::Builder::new()
        .name("verbd-create-check".into())
        .spawn(move || {
            drain_checked(&policy, write, read, &root, mode, |why| {
                reporter.create_refused(tid, why);
            });
            count.fetch_sub(1, Ordering::AcqRel);
        });
    match spawned {
        Ok(thread) => {
            DRAINS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Drain { hangup, thread });
            Ok(sink)
        }
        Err(_) => {
            release();
            Err(libc::EAGAIN)
        }
    }
}

/// What git writes in a linked worktree's `commondir`: the repository it belongs to.
pub(super) const COMMON_DIR: &[u8] = b"../..\n";

/// Reads what the program writes to a checked file, checks it, and creates the file (a
/// `commondir` only compares: it was made at the start).
pub(super) fn drain_checked(
    policy: &CreatePolicy,
    write: CheckedWrite,
    read: OwnedFd,
    root: &OwnedFd,
    mode: u32,
    report: impl Fn(&str),
) {
    use std::io::Read;
    let mut content = Vec::new();
    let mut file = std::fs::File::from(read);
    let mut chunk = [0u8; 4096];
    let mut too_long = false;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if content.len() + n <= MAX_CHECKED_BYTES => {
                content.extend_from_slice(&chunk[..n]);
            }
            Ok(_) => too_long = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                too_long = true;
                break;
            }
        }
    }
    let at = &write.at;
    let refuse = |why: &str| report(&format!("{}: refused: {why}", at.path.display()));
    let verdict = if too_long {
        Err(format!("more than {MAX_CHECKED_BYTES} bytes"))
    } else {
        check_content(policy, write.kind, at, root, &content)
    };
    match (write.kind, verdict) {
        (CheckedFile::CommonDir, Ok(())) => {}
        (CheckedFile::CommonDir, Err(why)) => {
            refuse(&format!("{why}; it holds `../..`, the repository itself"));
        }
        (_, Err(why)) => refuse(&format!("{why}; the file was not created")),
        (_, Ok(())) => {
            if let Err(errno) = create_checked(at, &content, mode) {
                refuse(&format!(
                    "cannot create it: {}",
                    io::Error::from_raw_os_error(errno)
                ));
            }
        }
    }
}

/// Is `content` what a checked file of `kind` may hold?
pub(super) fn check_content(
    policy: &CreatePolicy,
    kind: CheckedFile,
    at: &Resolved,
    root: &OwnedFd,
    content: &[u8],
) -> Result<(), String> {
    // git strips the line's end when it reads these files.
    let line = content.strip_suffix(b"\n").unwrap_or(content);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() || line.iter().any(|&b| b == b'\n' || b == b'\r' || b == 0) {
        return Err("not one line".into());
    }
    match kind {
        CheckedFile::CommonDir => {
            if line == b"../.." {
                Ok(())
            } else {
                Err("a commondir other than `../..`".into())
            }
        }
        CheckedFile::WorktreeLocation => {
            if line.starts_with(b"/") && line.ends_with(b"/.git") {
                Ok(())
            } else {
                Err("a worktree location other than the absolute path of a `.git`".into())
            }
        }
        CheckedFile::Gitlink => {
            let Some(target) = line.strip_prefix(b"gitdir: ") else {
                return Err("a gitlink other than `gitdir: PATH`".into());
            };
            let target = Path::new(OsStr::from_bytes(target));
            let target = match at.path.parent() {
                Some(directory) if target.is_relative() => directory.join(target),
                _ => target.to_path_buf(),
            };
            let located = open_in_root(root, &target, libc::O_PATH | libc::O_DIRECTORY, 0)
                .ok()
                .and_then(|fd| std::fs::read_link(own_fd_path(&fd)).ok());
            match located {
                Some(located) if policy.is_gitlink_target(&located) => Ok(()),
                _ => Err(
                    "a gitlink to anything but a linked worktree's (`.git/worktrees/NAME`) or a submodule's (`.git/modules/NAME`) git directory in a write root"
                        .into(),
                ),
            }
        }
    }
}

/// Creates the checked file `at` names with `content` and `mode` (exclusively, not through a
/// symlink).
pub(super) fn create_checked(at: &Resolved, content: &[u8], mode: u32) -> Result<(), i32> {
    use std::io::Write;
    // SAFETY: directory fd and NUL-terminated name, alive for the call.
    let fd = unsafe {
        libc::openat(
            at.directory.as_raw_fd(),
            at.name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: the kernel just created this fd.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    use std::os::unix::fs::PermissionsExt;
    file.write_all(content)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
        .map_err(|_| libc::EIO)
}

/// A rename onto a repository's `config` (`git config`, `git init`, `git clone` write the new
/// file as `config.lock` and rename it): the new content is read once, checked (module
/// `git_config`: only data keys added or changed), and written by this thread to a fresh file
/// it renames into place; the program's file is then removed, as the rename would have. The
/// program never holds a descriptor on what becomes the config, so it cannot change it after
/// the check (this thread performs one request at a time: the fresh file cannot be opened by
/// the program in between).
pub(super) fn replace_git_config(
    old: &Resolved,
    new: &Resolved,
    refused: &dyn Fn(&Path, &str),
) -> Result<(), i32> {
    use std::io::{Read, Write};
    let refuse = |reason: String| {
        refused(&new.path, &reason);
        Err(libc::EACCES)
    };
    let read_regular = |at: &Resolved| -> Result<(Vec<u8>, u32), i32> {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                at.directory.as_raw_fd(),
                at.name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: the kernel just created this fd.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let meta = file.metadata().map_err(|_| libc::EIO)?;
        if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
            return Err(libc::EACCES);
        }
        let mut bytes = Vec::new();
        Read::by_ref(&mut file)
            .take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| libc::EIO)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(libc::EACCES);
        }
        use std::os::unix::fs::PermissionsExt;
        Ok((bytes, meta.permissions().mode()))
    };
    let (content, mode) = match read_regular(old) {
        Ok(read) => read,
        Err(libc::ENOENT) => return Err(libc::ENOENT),
        Err(_) => {
            return refuse(
                "refused: a git config replacement that is not a regular file of at most 1 MiB"
                    .into(),
            );
        }
    };
    let existing = match new.stat() {
        None => Vec::new(),
        Some(_) => match read_regular(new) {
            Ok((bytes, _)) => bytes,
            Err(_) => return refuse("refused: a git config that is not a regular file".into()),
        },
    };
    if let Err(refusal) = crate::sandbox::git_config::check_replacement(&existing, &content) {
        return refuse(format!("refused: {refusal}; the config is kept unchanged"));
    }
    // A fresh name beside the config, made exclusively.
    let fresh_name =
        |n: u32| c_string(format!(".verbd-config-{}-{n}", std::process::id()).as_bytes());
    let mut attempt = 0;
    let (fresh, fresh_fd) = loop {
        let name = fresh_name(attempt)?;
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        let fd = unsafe {
            libc::openat(
                new.directory.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just created this fd.
            break (name, unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let errno = last_errno();
        if errno != libc::EEXIST || attempt > 16 {
            return Err(errno);
        }
        attempt += 1;
    };
    let remove_fresh = || {
        // SAFETY: directory fd and NUL-terminated name, alive for the call.
        unsafe { libc::unlinkat(new.directory.as_raw_fd(), fresh.as_ptr(), 0) };
    };
    let mut file = std::fs::File::from(fresh_fd);
    let written = file.write_all(&content).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        // No group or other write: the mode git gave its lock file, never wider.
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o755))
    });
    drop(file);
    if written.is_err() {
        remove_fresh();
        return Err(libc::EIO);
    }
    // SAFETY: directory fds and NUL-terminated names alive for the call.
    let renamed = unsafe {
        libc::renameat(
            new.directory.as_raw_fd(),
            fresh.as_ptr(),
            new.directory.as_raw_fd(),
            new.name.as_ptr(),
        )
    };
    if renamed != 0 {
        let errno = last_errno();
        remove_fresh();
        return Err(errno);
    }
    // SAFETY: directory fd and NUL-terminated name alive for the call.
    unsafe { libc::unlinkat(old.directory.as_raw_fd(), old.name.as_ptr(), 0) };
    Ok(())
}
