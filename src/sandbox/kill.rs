//! Killing a child of the daemon, or its process group, as whoever may: the one way the daemon
//! sends `SIGKILL` to what it started — at a timeout or a stream bound, at the end of a call,
//! when its caller goes away, and to the child of a failed spawner order.
//!
//! A daemon that keeps only `CAP_SETUID`/`CAP_SETGID`/`CAP_SETPCAP` for `run_as` (no
//! `CAP_KILL`) may not signal a child that runs as another uid: `kill(2)`, `killpg` and
//! `pidfd_send_signal` answer `EPERM`. It is not given `CAP_KILL`, which would let it signal
//! every process of the host. Instead [`sigkill`] first signals as the daemon (enough for root,
//! and for a child of the daemon's own uid or one that has not switched yet); on `EPERM`, for a
//! child whose `run_as` uid it is told, it signals from a short-lived thread that first sets its
//! *effective* uid alone to that uid (a raw `setresuid(-1, uid, -1)`, this thread only; the
//! identity guard allows exactly the `run_as` ids). The kernel lets a sender whose effective uid
//! is the target's real uid signal it; the thread's real and saved uids stay the daemon's, so the
//! child, whose ids are all the `run_as` uid, may not signal that thread even without the
//! Landlock signal scope that already keeps it from signalling outside its domain (a `SIGKILL`
//! to one thread would end the whole daemon). The thread ends right after the signal.
//!
//! Invariants:
//! - every `SIGKILL` to a verb's child or process group in the daemon goes through [`sigkill`];
//! - a signal that could not be delivered is an error, logged here (no caller can forget to) and
//!   returned, so no caller reports a group killed that was not; `ESRCH` (nothing left to
//!   signal) is success;
//! - only the process behind a pidfd, or a process group above 1, is ever signalled: never
//!   group 0 (the daemon's own) or -1 (every process).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What [`sigkill`] signals.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// One child, through its pidfd (never a process that reused its pid); `pid` names it in
    /// messages.
    Process { pid: i32, pidfd: BorrowedFd<'a> },
    /// Every process of the group a child leads (its pid: daemon children start a session).
    Group(i32),
}

impl std::fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Process { pid, .. } => write!(f, "child {pid}"),
            Target::Group(pgid) => write!(f, "process group {pgid}"),
        }
    }
}

/// A `SIGKILL` that was not delivered: the target may still run.
#[derive(Debug, thiserror::Error)]
#[error("cannot SIGKILL {target}{}: {source}", as_uid(*.run_as))]
pub struct KillError {
    target: String,
    run_as: Option<u32>,
    source: io::Error,
}

/// Test hook (feature `test-hooks`, listed in `crate::test_hooks`): with this variable set, every
/// kill is sent as the daemon only, never from a thread that takes the child's `run_as` uid.
#[cfg(feature = "test-hooks")]
pub const KILL_AS_DAEMON_ONLY_ENV: &str = "VERBD_TEST_KILL_AS_DAEMON_ONLY";

fn as_uid(run_as: Option<u32>) -> String {
    run_as.map_or_else(String::new, |uid| format!(" (run_as uid {uid})"))
}

/// Sends `SIGKILL` to `target`, whose processes run as `run_as` (the profile's uid) or as the
/// daemon. Blocks only for the life of a signalling thread, when one is needed.
pub fn sigkill(target: Target<'_>, run_as: Option<u32>) -> Result<(), KillError> {
    let take_uid = run_as;
    #[cfg(feature = "test-hooks")]
    let take_uid = take_uid.filter(|_| std::env::var_os(KILL_AS_DAEMON_ONLY_ENV).is_none());
    let sent = match (send(target), take_uid) {
        (Err(e), Some(uid)) if e.raw_os_error() == Some(libc::EPERM) => send_as(uid, target),
        (sent, _) => sent,
    };
    match sent {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        Err(source) => {
            let error = KillError {
                target: target.to_string(),
                run_as,
                source,
            };
            tracing::error!(%error, "a child of the daemon could not be killed; it may still be running");
            Err(error)
        }
    }
}

/// [`send`] from a thread of its own whose effective uid is `uid`.
fn send_as(uid: u32, target: Target<'_>) -> io::Result<()> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("verbd-kill".into())
            .spawn_scoped(scope, || {
                super::notify::take_effective_uid(uid)?;
                send(target)
            })?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the signalling thread panicked")))
    })
}

fn send(target: Target<'_>) -> io::Result<()> {
    match target {
        Target::Group(pgid) if pgid <= 1 => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        )),
        Target::Group(pgid) => nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .map_err(io::Error::from),
        Target::Process { pidfd, .. } => {
            // SAFETY: pidfd_send_signal on a pidfd borrowed for the call; no pointers (null
            // info).
            let sent = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                )
            };
            if sent == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_zero_and_one_are_never_signalled() {
        for pgid in [-1, 0, 1] {
            let error = sigkill(Target::Group(pgid), None).unwrap_err();
            assert!(error.to_string().contains("refusing to signal"), "{error}");
        }
    }

    #[test]
    fn a_child_that_has_ended_is_no_error() {
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id() as i32;
        // A pidfd of an exited (reaped) child: nothing is left to signal.
        // SAFETY: pidfd_open without pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a new descriptor nothing else owns.
        let pidfd =
            unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        child.wait().unwrap();
        use std::os::fd::AsFd;
        sigkill(
            Target::Process {
                pid,
                pidfd: pidfd.as_fd(),
            },
            None,
        )
        .unwrap();
    }
}
