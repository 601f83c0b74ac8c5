//! Seccomp user-notification primitives shared by the brokers (`unix_broker` for `connect`,
//! `create_broker` for `verbd exec`'s creating calls, `ancestor_listing` for its directory
//! opens): open the calling thread's pidfd, re-validate a notification, read the caller's
//! memory, take one of its descriptors, answer a notification (with an errno, a descriptor, or
//! by letting the kernel continue), switch a broker thread's credentials (or only the effective
//! uid of the thread that kills a `run_as` child, module `kill`), and report refusals.
//!
//! A leaf: it imports nothing of the sandbox, so both brokers stand on it and neither on the
//! other's primitives.
//!
//! Invariants:
//! - every function here acts on the one notification or thread it is given; only
//!   [`continue_call`] answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`, for the ancestor listing's
//!   read-only directory opens alone, where no check of the broker's is at stake (Landlock
//!   decides on what the kernel then resolves); the connect and create brokers never let the
//!   kernel act on the caller's memory after a check;
//! - a caller re-validates with [`id_valid`] after [`pidfd_open`] and [`read_memory`], so a
//!   recycled pid is never read or acted on.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `PIDFD_THREAD` (= `O_EXCL`): a pidfd for a thread id, as seccomp reports the calling thread.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// Where refusals are reported: `verbd exec` writes them to stderr (the user sees why a program
/// failed), the daemon logs them as warnings, and the self-test's canary, whose connects are
/// meant to be refused, only at debug level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reporter {
    Stderr,
    Log,
    Expected,
}

/// The reasons `verbd exec` has printed: each refusal is reported once (the first caller's
/// pid), not on every call — `ls -l` would repeat one line per file.
static REPORTED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Is this the first time `reason` is reported? (A poisoned lock still answers.)
fn first_report(reason: &str) -> bool {
    let mut seen = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    seen.insert(reason.to_string())
}

impl Reporter {
    /// A connect the connect broker refused (module `unix_broker`).
    pub(super) fn connect_refused(self, pid: u32, reason: &str) {
        match self {
            Reporter::Stderr => {
                if first_report(reason) {
                    crate::eprintln_lossy!("verbd exec: connect refused for pid {pid}: {reason}");
                }
            }
            Reporter::Log => tracing::warn!(pid, reason, "sandboxed connect refused"),
            Reporter::Expected => {
                tracing::debug!(
                    pid,
                    reason,
                    "self-test canary: connect refused, as expected"
                );
            }
        }
    }

    /// A create, link or rename the create broker refused (module `create_broker`).
    pub(super) fn create_refused(self, pid: u32, reason: &str) {
        match self {
            Reporter::Stderr => {
                if first_report(reason) {
                    crate::eprintln_lossy!("verbd exec: create refused for pid {pid}: {reason}");
                }
            }
            Reporter::Log => tracing::warn!(pid, reason, "sandboxed create refused"),
            Reporter::Expected => {
                tracing::debug!(pid, reason, "self-test canary: create refused, as expected");
            }
        }
    }
}

/// The credentials a serving thread takes before brokering (verbs with `run_as`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadIdentity {
    pub uid: u32,
    pub gid: u32,
}

/// Switches the calling thread (only this thread: raw syscalls, not libc's process-wide
/// wrappers) to `identity`, with no supplementary groups.
pub(super) fn take_identity(identity: ThreadIdentity) -> io::Result<()> {
    // SAFETY: raw syscalls without pointers (setgroups with a null list of length 0).
    let results = unsafe {
        [
            libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()),
            libc::syscall(
                libc::SYS_setresgid,
                identity.gid,
                identity.gid,
                identity.gid,
            ),
            libc::syscall(
                libc::SYS_setresuid,
                identity.uid,
                identity.uid,
                identity.uid,
            ),
        ]
    };
    if results.iter().all(|&rc| rc == 0) {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Switches only the calling thread's effective uid to `uid` (a raw syscall: this thread alone;
/// its real and saved uids stay). Such a thread may signal the processes of `uid`, and they may
/// not signal it (module `kill`), unlike one that took a whole [`ThreadIdentity`].
pub(super) fn take_effective_uid(uid: u32) -> io::Result<()> {
    // SAFETY: raw syscall without pointers; -1 leaves the real and saved uids unchanged.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, u32::MAX, uid, u32::MAX) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A pidfd for the thread `tid` (seccomp reports the calling thread, not its process).
pub(super) fn pidfd_open(tid: u32) -> io::Result<OwnedFd> {
    // SAFETY: raw syscall without pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, PIDFD_THREAD) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just created this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A copy of the descriptor `target_fd` of the process behind `pidfd` (close-on-exec).
pub(super) fn pidfd_getfd(pidfd: &OwnedFd, target_fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: raw syscall without pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just installed this fd (close-on-exec) for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Is the notification `id` still pending (its caller alive and still in the call)?
pub(super) fn id_valid(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: the listener fd and a readable u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id as *const u64,
        ) == 0
    }
}

/// `len` bytes at `address` in the thread `tid`'s memory; `EFAULT` if fewer could be read.
pub(super) fn read_memory(tid: u32, address: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buffer = vec![0u8; len];
    if len == 0 {
        return Ok(buffer);
    }
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes our own writable buffer of `len` bytes; the remote range is only
    // read by the kernel, which checks it against the target's address space.
    let read = unsafe { libc::process_vm_readv(tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    if read as usize != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buffer)
}

/// `PATH_MAX`: longer paths are `ENAMETOOLONG`, as the kernel answers.
const PATH_MAX: usize = 4096;

/// A NUL-terminated string of the thread `tid`'s, read a page at a time (a string may end just
/// before an unmapped page). Errors are the errno the kernel would give: `EFAULT`,
/// `ENAMETOOLONG`.
pub(super) fn read_string(tid: u32, address: u64) -> Result<Vec<u8>, i32> {
    if address == 0 {
        return Err(libc::EFAULT);
    }
    const PAGE: u64 = 4096;
    let mut bytes = Vec::new();
    let mut at = address;
    while bytes.len() <= PATH_MAX {
        let chunk = (PAGE - at % PAGE) as usize;
        let read = read_memory(tid, at, chunk).map_err(|_| libc::EFAULT)?;
        if let Some(end) = read.iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&read[..end]);
            return if bytes.len() >= PATH_MAX {
                Err(libc::ENAMETOOLONG)
            } else {
                Ok(bytes)
            };
        }
        bytes.extend_from_slice(&read);
        at += chunk as u64;
    }
    Err(libc::ENAMETOOLONG)
}

/// Installs `fd` in the caller of notification `id` and answers the call with its number, in
/// one step (`SECCOMP_ADDFD_FLAG_SEND`); `O_CLOEXEC` in the caller when `close_on_exec`.
/// The errno on failure (`ENOENT`: the caller is gone or was interrupted).
pub(super) fn send_fd(
    listener: &OwnedFd,
    id: u64,
    fd: &OwnedFd,
    close_on_exec: bool,
) -> Result<(), i32> {
    let addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if close_on_exec {
            libc::O_CLOEXEC as u32
        } else {
            0
        },
    };
    // SAFETY: the listener fd and a readable `seccomp_notif_addfd`. With
    // `SECCOMP_ADDFD_FLAG_SEND` the kernel installs the fd and answers the syscall with its
    // number in one step.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD,
            &addfd as *const libc::seccomp_notif_addfd,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}

/// Lets the kernel perform the call of notification `id` itself
/// (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`), with every other filter and LSM check as it would
/// without the broker. Only for calls whose outcome the broker's reading of the caller's memory
/// does not decide: the ancestor listing's read-only directory opens (module
/// `ancestor_listing`), where Landlock decides whatever the caller's memory then says.
pub(super) fn continue_call(listener: &OwnedFd, id: u64) {
    let response = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: the listener fd and a readable response. A failure (ENOENT: the caller died or was
    // interrupted) needs no handling.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &response,
        )
    };
}

/// Answers the notification `id` with `-errno` (0: success).
pub(super) fn reply(listener: &OwnedFd, id: u64, errno: i32) {
    let response = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: the listener fd and a readable response. A failure (ENOENT: the caller died or was
    // interrupted) needs no handling.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &response,
        )
    };
}
