//! systemd integration for `verbd serve`: readiness notifications and socket activation.
//!
//! Responsibilities:
//! - tell the service manager about the daemon's state through `$NOTIFY_SOCKET` (`READY=1` after
//!   the self-test, `STATUS=`, `RELOADING=1`, `STOPPING=1`, watchdog pings). Every function is a
//!   no-op when `NOTIFY_SOCKET` is unset, so the daemon behaves the same outside systemd;
//! - hand over the listening sockets systemd bound for the daemon (`LISTEN_FDS`, `LISTEN_PID`,
//!   `LISTEN_FDNAMES`, see sd_listen_fds(3)).
//!
//! Invariants:
//! - a notification is one datagram of `KEY=VALUE` lines, and caller text can never add a line:
//!   CR and LF in a status are replaced by spaces, so a status built from policy or request data
//!   cannot forge `READY=1` (the unit also sets `NotifyAccess=main`, so children cannot notify);
//! - only AF_UNIX `SOCK_STREAM` sockets that are already listening are adopted; any other
//!   inherited fd refuses start-up with an error naming the fd and what is wrong with it;
//! - adopted listeners are close-on-exec and non-blocking (tokio's `UnixListener::from_std`
//!   requires non-blocking: on a blocking fd it hits a `debug_assert!` in debug builds), so no verb inherits them;
//! - the `LISTEN_*` variables are removed from the environment in the same step as the fds are
//!   adopted, so a later call (or a child) never sees them and no fd is owned twice.
//!
//! This module talks to the OS directly and is one of the few places with `unsafe`: taking
//! ownership of inherited descriptor numbers and removing environment variables have no safe
//! form. Both are confined to one function each, preceded by a `SAFETY:` comment that states why
//! the precondition holds; everything else is safe code (`unsafe_code` is denied elsewhere).

#![deny(unsafe_code)]

use std::env;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
use std::time::Duration;

use nix::sys::socket::{AddressFamily, SockType, SockaddrLike, SockaddrStorage, sockopt};
use sd_notify::NotifyState;

const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const LISTEN_PID: &str = "LISTEN_PID";
const LISTEN_FDS: &str = "LISTEN_FDS";
const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";

/// Why the sockets systemd passed could not be taken over. Each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum SdError {
    /// `LISTEN_PID`, `LISTEN_FDS` or `LISTEN_FDNAMES` is malformed, or a listed fd is not open.
    #[error("invalid socket-activation environment (LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES): {0}")]
    Environment(#[source] io::Error),
    /// The variables can only be removed safely while the process has a single thread.
    #[error(
        "socket activation must be read before any thread starts, but this process has {threads} \
         threads: call verbd::sd::activated_sockets() before building the async runtime"
    )]
    ThreadsRunning {
        /// Threads found in `/proc/self/task`.
        threads: usize,
    },
    /// `/proc/self/task` could not be read, so single-threadedness cannot be shown.
    #[error("cannot count this process's threads in /proc/self/task: {0}")]
    ThreadCount(#[source] io::Error),
    /// An inherited fd is not something verbd can serve on.
    #[error(
        "inherited fd {fd} ({}) cannot be served: {reason}; verbd serves only listening \
         AF_UNIX stream sockets (ListenStream=/path with Accept=no in the .socket unit)",
        display_name(.name)
    )]
    UnsupportedSocket {
        /// The descriptor number.
        fd: RawFd,
        /// Its `FileDescriptorName=`, when systemd sent names.
        name: Option<String>,
        /// What is wrong with it.
        reason: String,
    },
    /// Switching an adopted listener to non-blocking mode failed.
    #[error("cannot make inherited socket fd {fd} ({}) non-blocking: {source}", display_name(.name))]
    NonBlocking {
        /// The descriptor number.
        fd: RawFd,
        /// Its `FileDescriptorName=`, when systemd sent names.
        name: Option<String>,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn display_name(name: &Option<String>) -> String {
    match name {
        Some(name) => format!("name {name:?}"),
        None => "unnamed".to_owned(),
    }
}

/// A listening socket received from systemd.
#[derive(Debug)]
pub struct ActivatedSocket {
    /// The socket unit's `FileDescriptorName=` (`agent`, `approver`); `None` when the manager
    /// passed no names.
    pub name: Option<String>,
    /// The listener: AF_UNIX, `SOCK_STREAM`, listening, non-blocking, close-on-exec.
    pub listener: UnixListener,
}

/// Tells the service manager that start-up is complete (`READY=1`) with a one-line `STATUS=`.
///
/// Call it only after the self-test passed and the listeners are ready to accept.
/// After a reload (see [`notify_reloading`]) call it again to mark the reload as finished.
pub fn notify_ready(status: &str) {
    let status = one_line(status);
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Updates the one-line status shown by `systemctl status verbd`.
pub fn notify_status(status: &str) {
    let status = one_line(status);
    send(&[NotifyState::Status(&status)]);
}

/// Tells the service manager that the daemon is shutting down (`STOPPING=1`).
pub fn notify_stopping() {
    send(&[NotifyState::Stopping]);
}

/// Tells the service manager that a reload started (`RELOADING=1` with `MONOTONIC_USEC=`, which
/// systemd 253+ requires for `Type=notify-reload` and older versions ignore). Follow it with
/// [`notify_ready`] once the new policy is serving, or the old one is kept.
pub fn notify_reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(error) => {
            tracing::warn!(%error, "sd_notify: CLOCK_MONOTONIC unavailable, sending RELOADING=1 alone");
            send(&[NotifyState::Reloading]);
        }
    }
}

/// How often to call [`notify_watchdog`]: half of the manager's `WATCHDOG_USEC`, or `None` when
/// no watchdog is configured for this process (unset, zero, or `WATCHDOG_PID` names another).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
        .filter(|timeout| !timeout.is_zero())
        .map(|timeout| timeout / 2)
}

/// Pings the service manager's watchdog (`WATCHDOG=1`).
pub fn notify_watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// Takes over the listening sockets passed by systemd.
///
/// Returns `Ok(vec![])` when the process was not socket-activated. When `LISTEN_*` variables are
/// present they are removed from the environment whether or not `LISTEN_PID` names this process
/// (like `sd_listen_fds(unset_environment = 1)`), which requires a single-threaded process: call this first
/// thing in `serve`, before any thread or async runtime starts, or it fails with
/// [`SdError::ThreadsRunning`]. A second call returns `Ok(vec![])`.
pub fn activated_sockets() -> Result<Vec<ActivatedSocket>, SdError> {
    if env::var_os(LISTEN_PID).is_none()
        && env::var_os(LISTEN_FDS).is_none()
        && env::var_os(LISTEN_FDNAMES).is_none()
    {
        return Ok(Vec::new());
    }
    let names_sent = env::var_os(LISTEN_FDNAMES).is_some();
    // Read the variables (which also marks the fds close-on-exec) before removing them.
    let passed = passed_fds();
    let single_threaded = SingleThreaded::check()?;
    remove_activation_env(&single_threaded);
    // Own every fd before checking any, so that a refused one closes the rest on the way out.
    let adopted: Vec<(OwnedFd, Option<String>)> = passed?
        .into_iter()
        .map(|(fd, name)| {
            let name = (names_sent && !name.is_empty()).then_some(name);
            (adopt_inherited_fd(fd, &single_threaded), name)
        })
        .collect();
    adopted
        .into_iter()
        .map(|(fd, name)| into_listener(fd, name))
        .collect()
}

/// The fds passed to this process with their names. Names for another process's fds are not
/// checked: when `LISTEN_PID` names someone else there is nothing to name (sd_listen_fds(3)).
fn passed_fds() -> Result<Vec<(RawFd, String)>, SdError> {
    let for_this_process = sd_notify::listen_fds().map_err(SdError::Environment)?;
    if for_this_process.len() == 0 {
        return Ok(Vec::new());
    }
    sd_notify::listen_fds_with_names()
        .map(|fds| fds.collect())
        .map_err(SdError::Environment)
}

/// Evidence that the process had exactly one thread when it was built. It lives only inside
/// [`activated_sockets`], which starts no thread while holding it.
struct SingleThreaded(());

impl SingleThreaded {
    fn check() -> Result<Self, SdError> {
        let tasks = std::fs::read_dir("/proc/self/task").map_err(SdError::ThreadCount)?;
        let mut threads = 0;
        for task in tasks {
            task.map_err(SdError::ThreadCount)?;
            threads += 1;
        }
        if threads == 1 {
            Ok(SingleThreaded(()))
        } else {
            Err(SdError::ThreadsRunning { threads })
        }
    }
}

#[allow(unsafe_code)]
fn remove_activation_env(_proof: &SingleThreaded) {
    // SAFETY: `std::env::remove_var` is unsound only when another thread reads or writes the
    // environment at the same time. `_proof` shows this process had exactly one thread, and that
    // thread has started none since (see `SingleThreaded`), so nothing can race with it.
    unsafe {
        env::remove_var(LISTEN_PID);
        env::remove_var(LISTEN_FDS);
        env::remove_var(LISTEN_FDNAMES);
    }
}

#[allow(unsafe_code)]
fn adopt_inherited_fd(fd: RawFd, _proof: &SingleThreaded) -> OwnedFd {
    // SAFETY: `fd` comes from sd_notify::listen_fds, which returns 3..3+LISTEN_FDS only when
    // LISTEN_PID names this process, and which has just succeeded in fcntl(F_GETFD/F_SETFD) on
    // it, so it is open. The service manager passed these descriptors to this process for it to
    // own; nothing else in verbd refers to them by number. The variables describing them were
    // removed (single-threaded, `_proof`) before this call, so no later call can adopt the same
    // number again: this `OwnedFd` is the only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn into_listener(fd: OwnedFd, name: Option<String>) -> Result<ActivatedSocket, SdError> {
    let raw = fd.as_raw_fd();
    let unsupported = |reason: String, name: &Option<String>| SdError::UnsupportedSocket {
        fd: raw,
        name: name.clone(),
        reason,
    };
    let socket_type = match nix::sys::socket::getsockopt(&fd, sockopt::SockType) {
        Ok(socket_type) => socket_type,
        Err(nix::errno::Errno::ENOTSOCK) => {
            return Err(unsupported("it is not a socket".to_owned(), &name));
        }
        Err(errno) => {
            return Err(unsupported(
                format!("getsockopt(SO_TYPE) failed: {errno}"),
                &name,
            ));
        }
    };
    let address = nix::sys::socket::getsockname::<SockaddrStorage>(raw)
        .map_err(|errno| unsupported(format!("getsockname failed: {errno}"), &name))?;
    match address.family() {
        Some(AddressFamily::Unix) => {}
        Some(family) => {
            return Err(unsupported(
                format!("its address family is {family:?}, not Unix"),
                &name,
            ));
        }
        None => {
            return Err(unsupported(
                "its address family is unknown".to_owned(),
                &name,
            ));
        }
    }
    if socket_type != SockType::Stream {
        return Err(unsupported(
            format!("its type is {socket_type:?}, not Stream"),
            &name,
        ));
    }
    let listening = nix::sys::socket::getsockopt(&fd, sockopt::AcceptConn).map_err(|errno| {
        unsupported(format!("getsockopt(SO_ACCEPTCONN) failed: {errno}"), &name)
    })?;
    if !listening {
        return Err(unsupported(
            "it is not listening (a connection passed by Accept=yes?)".to_owned(),
            &name,
        ));
    }
    let listener = UnixListener::from(fd);
    if let Err(source) = listener.set_nonblocking(true) {
        return Err(SdError::NonBlocking {
            fd: raw,
            name,
            source,
        });
    }
    Ok(ActivatedSocket { name, listener })
}

/// Replaces CR and LF so the text stays one `STATUS=` line.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// Sends one datagram with one line per state, best effort: a failure is logged, never fatal
/// (systemd then notices a missing READY=1 or watchdog ping by its own timeouts).
fn send(states: &[NotifyState<'_>]) {
    let Some(target) = env::var_os(NOTIFY_SOCKET).filter(|target| !target.is_empty()) else {
        return;
    };
    let message: String = states.iter().map(|state| format!("{state}\n")).collect();
    if let Err(error) = send_datagram(&target, message.as_bytes()) {
        tracing::warn!(%error, socket = ?target, "sd_notify: could not notify the service manager");
    }
}

/// `NOTIFY_SOCKET` is a file system path or, with a leading `@`, an abstract socket name.
fn send_datagram(target: &OsStr, message: &[u8]) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match target.as_bytes().split_first() {
        Some((b'@', abstract_name)) => {
            socket.connect_addr(&SocketAddr::from_abstract_name(abstract_name)?)?
        }
        _ => socket.connect(target)?,
    }
    let sent = socket.send(message)?;
    if sent == message.len() {
        Ok(())
    } else {
        let len = message.len();
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {len} bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_cannot_add_a_line() {
        assert_eq!(one_line("reloaded\nREADY=1\r\nX"), "reloaded READY=1  X");
        assert_eq!(one_line("plain"), "plain");
    }
}
