//! The connect broker: every `connect(2)` of a sandboxed process is decided and performed outside
//! the sandbox, so a confined program reaches only the Unix sockets its profile lists.
//!
//! Why: Landlock does not govern `connect` on pathname Unix sockets, and the user's own services
//! listen on them (tmux and screen servers type into unconfined shells, D-Bus starts unconfined
//! processes, ssh-agent signs with the user's keys, the Docker socket is root). A path check at
//! start would miss sockets that appear later, so the check happens at each `connect`.
//!
//! How: the child's last seccomp filter answers `connect` with `SECCOMP_RET_USER_NOTIF`
//! (module `seccomp`); the child sends the listener fd over a socketpair (`send_listener`,
//! async-signal-safe, before `execve`); the broker (`serve`) receives each notification, copies
//! the address out of the caller's memory (`process_vm_readv`), decides on that copy
//! ([`ConnectPolicy::decide`]), takes the caller's socket (`pidfd_getfd`), connects it itself
//! — to the *listed* path, never to the caller's string — and replies with the result. Unix
//! connects are answered in turn; a TCP connect (`network = "full"` or `connect_tcp`) runs on a
//! thread of its own, since a handshake can take minutes. Under `verbd exec` the same listener
//! also carries the program's creating calls: they are read here and passed to the create
//! broker (module `create_broker`); and its directory opens, answered here by the ancestor
//! listing (module `ancestor_listing`); any other notification answers `ENOSYS`.
//!
//! Invariants:
//! - the connect broker never answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the caller's memory
//!   can change between the check and a continued syscall, so the kernel never acts on the
//!   caller's address (only the ancestor listing continues, a read-only directory open that no
//!   check of the broker decides: Landlock does);
//! - the notification is re-validated (`SECCOMP_IOCTL_NOTIF_ID_VALID`) after the memory read and
//!   the pidfd open, so a recycled pid is never read or acted on;
//! - fail closed: whatever the broker cannot establish (memory unreadable, path unresolvable,
//!   abstract address) is refused; when the broker is gone, the kernel answers `ENOSYS`;
//! - the broker connects with the credentials the caller would have had (same uid for
//!   `verbd exec`; for verbs with `run_as`, the serving thread switches its own credentials to the
//!   run-as identity first), so a server's `SO_PEERCRED` sees the caller's uid.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::RulesetCreated;

use super::Network;
use super::ancestor_listing::AncestorListing;
use super::create_broker::{CreateBroker, CreatePolicy};
use super::notify::{
    Reporter, ThreadIdentity, id_valid, pidfd_getfd, pidfd_open, read_memory, reply, take_identity,
};

/// `errno` of a refused connect: permission denied, distinct from "nobody listens"
/// (`ECONNREFUSED`) and "no such file" (`ENOENT`).
pub const REFUSED_ERRNO: i32 = libc::EACCES;

/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses with `EINVAL`.
const MAX_ADDRESS_LEN: usize = 128;
/// `sizeof(sun_path)`.
const SUN_PATH_LEN: usize = 108;
/// What a sandboxed process may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectPolicy {
    /// Pathname Unix sockets, absolute. Compared after resolving symlinks on both sides.
    pub unix_sockets: Vec<PathBuf>,
    /// Internet connects follow the profile's network mode.
    pub network: Network,
}

/// The broker's answer to one `connect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Connect the caller's socket to this address (a fresh copy, owned by the broker).
    Connect(Vec<u8>),
    /// Fail the caller's `connect` with this errno.
    Refuse { errno: i32, reason: String },
}

fn refuse(errno: i32, reason: impl Into<String>) -> Decision {
    Decision::Refuse {
        errno,
        reason: reason.into(),
    }
}

impl ConnectPolicy {
    /// Decides on a copy of the caller's address. `cwd` is the caller's working directory, for a
    /// relative socket path.
    pub fn decide(&self, address: &[u8], cwd: &dyn Fn() -> io::Result<PathBuf>) -> Decision {
        if address.len() < 2 {
            return refuse(libc::EINVAL, "address shorter than its family field");
        }
        let family = i32::from(u16::from_ne_bytes([address[0], address[1]]));
        match family {
            libc::AF_UNIX => self.decide_unix(&address[2..], cwd),
            libc::AF_INET | libc::AF_INET6 => self.decide_inet(family, address),
            // Dissolves an association; reaches nothing.
            libc::AF_UNSPEC => Decision::Connect(address.to_vec()),
            other => refuse(
                REFUSED_ERRNO,
                format!("address family {other} is not brokered"),
            ),
        }
    }

    fn decide_unix(&self, sun_path: &[u8], cwd: &dyn Fn() -> io::Result<PathBuf>) -> Decision {
        if sun_path.is_empty() {
            return refuse(libc::EINVAL, "unnamed Unix address");
        }
        if sun_path[0] == 0 {
            return refuse(
                REFUSED_ERRNO,
                "abstract Unix sockets are not reachable through the broker (Landlock scopes them to the sandbox)",
            );
        }
        let end = sun_path
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(sun_path.len());
        let requested = Path::new(OsStr::from_bytes(&sun_path[..end]));
        let absolute = if requested.is_absolute() {
            requested.to_path_buf()
        } else {
            match cwd() {
                Ok(dir) => dir.join(requested),
                Err(e) => {
                    return refuse(
                        REFUSED_ERRNO,
                        format!("cannot read the caller's working directory: {e}"),
                    );
                }
            }
        };
        // Resolved by the broker, outside the sandbox: whether it exists (or is reachable) must
        // not change the answer for an unlisted path, or the caller could probe paths its own
        // profile cannot see. Unlisted is EACCES, always.
        let resolved = std::fs::canonicalize(&absolute).ok();
        let listed = self.unix_sockets.iter().find(|entry| {
            **entry == absolute
                || resolved.as_ref().is_some_and(|resolved| {
                    *entry == resolved
                        || std::fs::canonicalize(entry)
                            .is_ok_and(|canonical| canonical == *resolved)
                })
        });
        match listed {
            Some(entry) => match sockaddr_un(entry) {
                Some(address) => Decision::Connect(address),
                None => refuse(libc::ENAMETOOLONG, "listed socket path too long"),
            },
            // By name, never by whether it exists: the same answer on every host.
            None if is_name_service(&absolute) => refuse(
                libc::ENOENT,
                format!(
                    "name-service socket {} answered as absent (ENOENT)",
                    absolute.display()
                ),
            ),
            None => refuse(
                REFUSED_ERRNO,
                format!(
                    "Unix socket {} is not in the profile's unix_sockets",
                    absolute.display()
                ),
            ),
        }
    }

    fn decide_inet(&self, family: i32, address: &[u8]) -> Decision {
        let needed = if family == libc::AF_INET { 16 } else { 28 };
        if address.len() < needed {
            return refuse(libc::EINVAL, "Internet address too short");
        }
        let port = u16::from_be_bytes([address[2], address[3]]);
        match &self.network {
            Network::Full => Decision::Connect(address.to_vec()),
            Network::ConnectTcp(ports) if ports.contains(&port) => {
                Decision::Connect(address.to_vec())
            }
            Network::ConnectTcp(_) => refuse(
                REFUSED_ERRNO,
                format!("TCP port {port} is not in the profile's connect_tcp"),
            ),
            Network::None => refuse(REFUSED_ERRNO, "the profile has network = \"none\""),
        }
    }

    /// One line for `--print-status`.
    pub fn describe(&self) -> String {
        let quiet: Vec<&str> = NAME_SERVICE_SOCKETS.iter().map(|(path, _)| *path).collect();
        let listed: Vec<String> = self
            .unix_sockets
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "unix sockets: connect brokered; allowed: [{}]; name-service sockets answered quietly as absent (ENOENT, libc falls back to the files in /etc): [{}]; any other path refused (errno {REFUSED_ERRNO}, EACCES), each path reported once",
            listed.join(", "),
            quiet.join(", ")
        )
    }
}

/// Sockets libc and systemd's NSS modules try on every user, group or host lookup (`ls -l`,
/// `id`, `getaddrinfo`), each with what it is; a directory entry (ending in `/`) covers the
/// sockets in it. Unlisted in a profile, each is answered `ENOENT`, as if the service were not
/// running, and not reported: every lookup falls back to `/etc/passwd`, `/etc/group` and
/// `/etc/hosts`, so the refusal changes nothing but the noise on the program's terminal.
pub const NAME_SERVICE_SOCKETS: &[(&str, &str)] = &[
    ("/var/run/nscd/socket", "nscd"),
    ("/run/nscd/socket", "nscd"),
    ("/run/systemd/userdb/", "systemd-userdb (nss-systemd)"),
    ("/var/run/systemd/userdb/", "systemd-userdb (nss-systemd)"),
    (
        "/run/systemd/resolve/io.systemd.Resolve",
        "systemd-resolved (nss-resolve)",
    ),
    (
        "/var/run/systemd/resolve/io.systemd.Resolve",
        "systemd-resolved (nss-resolve)",
    ),
    (
        "/run/systemd/machined/",
        "systemd-machined (nss-mymachines)",
    ),
];

/// Is `path` (absolute, as the caller named it) one of [`NAME_SERVICE_SOCKETS`]?
fn is_name_service(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    NAME_SERVICE_SOCKETS.iter().any(|(entry, _)| {
        let entry = entry.as_bytes();
        if entry.ends_with(b"/") {
            bytes.starts_with(entry)
                && !bytes[entry.len()..].contains(&b'/')
                && bytes.len() > entry.len()
        } else {
            bytes == entry
        }
    })
}

/// A `sockaddr_un` for `path`, or `None` if the path does not fit.
fn sockaddr_un(path: &Path) -> Option<Vec<u8>> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= SUN_PATH_LEN || bytes.contains(&0) {
        return None;
    }
    let mut address = Vec::with_capacity(2 + bytes.len() + 1);
    address.extend_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
    address.extend_from_slice(bytes);
    address.push(0);
    Some(address)
}

/// A control message carrying one fd (`CMSG_SPACE(sizeof(int))` on x86_64: 16 + 8).
#[repr(C)]
struct FdMessage {
    header: libc::cmsghdr,
    fd: libc::c_int,
    padding: u32,
}

/// `CMSG_LEN(sizeof(int))`.
const FD_CMSG_LEN: usize =
    std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<libc::c_int>();

/// Sends `listener` over `channel` (child side, between fork and exec). Async-signal-safe: stack
/// buffers and one `sendmsg`. Returns the errno on failure.
pub(super) fn send_listener(channel: RawFd, listener: RawFd) -> Result<(), i32> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: all-zero is a valid `cmsghdr`/`msghdr` (integers and null pointers).
    let mut control: FdMessage = unsafe { std::mem::zeroed() };
    control.header.cmsg_len = FD_CMSG_LEN;
    control.header.cmsg_level = libc::SOL_SOCKET;
    control.header.cmsg_type = libc::SCM_RIGHTS;
    control.fd = listener;
    // SAFETY: as above.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&mut control as *mut FdMessage).cast();
    message.msg_controllen = std::mem::size_of::<FdMessage>();
    // SAFETY: `message` points at `iov`, `byte` and `control`, all alive for the call.
    let sent = unsafe { libc::sendmsg(channel, &message, libc::MSG_NOSIGNAL) };
    if sent == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Receives one listener fd from `channel`; `None` at end of stream (the child died or exec'd
/// without sending, or every sender end is closed).
pub(super) fn receive_listener(channel: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: all-zero is a valid `cmsghdr`/`msghdr`.
    let mut control: FdMessage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&mut control as *mut FdMessage).cast();
    message.msg_controllen = std::mem::size_of::<FdMessage>();
    loop {
        // SAFETY: `message` points at live buffers of the stated sizes.
        let received =
            unsafe { libc::recvmsg(channel.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) };
        if received < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if received == 0 {
            return Ok(None);
        }
        break;
    }
    if message.msg_controllen < FD_CMSG_LEN
        || control.header.cmsg_level != libc::SOL_SOCKET
        || control.header.cmsg_type != libc::SCM_RIGHTS
        || control.header.cmsg_len != FD_CMSG_LEN
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the sandboxed child sent no seccomp listener",
        ));
    }
    // SAFETY: SCM_RIGHTS installed this fd in our table for us; nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(control.fd) }))
}

/// A connected `AF_UNIX` `SOCK_SEQPACKET` pair, close-on-exec: `(broker end, child end)`.
pub(super) fn channel_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair just created both fds; each is owned once.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What `verbd exec`'s listener carries besides connects: the creating calls, for the create
/// broker, and the directory opens, for the ancestor listing.
pub(super) struct ExecBrokers {
    creates: CreateBroker,
    listing: AncestorListing,
}

/// Serves `listener` on a thread of its own until every process under its filter has exited:
/// the thread takes the run-as identity first, and with `exec` drops its effective
/// capabilities. A thread that cannot start is reported; the listener is closed then, so the
/// kernel fails every connect under it with `ENOSYS`.
pub(super) fn start_serving(
    listener: OwnedFd,
    policy: Arc<ConnectPolicy>,
    identity: Option<ThreadIdentity>,
    reporter: Reporter,
    exec: Option<ExecBrokers>,
) {
    let spawned = std::thread::Builder::new()
        .name("verbd-connect-serve".into())
        .spawn(move || {
            if let Some(identity) = identity
                && let Err(e) = take_identity(identity)
            {
                // Dropping the listener fails every connect with ENOSYS: closed.
                reporter
                    .connect_refused(0, &format!("broker cannot take the run-as identity: {e}"));
                return;
            }
            if exec.is_some()
                && let Err(e) = caps::clear(None, caps::CapSet::Effective)
            {
                reporter.connect_refused(0, &format!("broker cannot drop its capabilities: {e}"));
                return;
            }
            serve(&Arc::new(listener), &policy, reporter, exec.as_ref());
        });
    if let Err(e) = spawned {
        reporter.connect_refused(0, &format!("cannot start a broker thread: {e}"));
    }
}

/// `verbd exec` side: a thread that receives the listener from `channel` and serves it on a
/// thread of its own (module docs); returns at once (the caller waits for its child). That
/// listener's creates go to the create broker and its directory opens to the ancestor listing,
/// and the serving thread drops its effective capabilities (after taking the run-as identity):
/// what it opens and connects to on the program's behalf, it reaches with the program's own
/// rights. (A daemon child's listener is watched by the connect hub instead, module
/// `connect_hub`.)
pub(super) fn serve_in_background(
    channel: OwnedFd,
    policy: ConnectPolicy,
    identity: Option<ThreadIdentity>,
    creates: CreateBroker,
    listing: AncestorListing,
) -> io::Result<()> {
    let policy = Arc::new(policy);
    let mut exec = Some(ExecBrokers { creates, listing });
    std::thread::Builder::new()
        .name("verbd-connect-broker".into())
        .spawn(move || {
            while let Ok(Some(listener)) = receive_listener(&channel) {
                start_serving(
                    listener,
                    Arc::clone(&policy),
                    identity,
                    Reporter::Stderr,
                    exec.take(),
                );
            }
        })?;
    Ok(())
}

/// `verbd exec`'s parent after the fork: brokers for `child` and exits with its status (a
/// signal `N` becomes 128 + N, as shells report it). Terminal signals (SIGINT, SIGQUIT) reach
/// the child directly, as part of the foreground process group, so this process ignores them;
/// if it is killed, the child's parent-death signal ends the child too. The create broker
/// (module `create_broker`) is started first, confined as the child is; if it cannot be, the
/// child is killed before its program runs.
pub(super) fn run_launcher(
    channel: OwnedFd,
    child: libc::pid_t,
    policy: ConnectPolicy,
    identity: Option<ThreadIdentity>,
    creates: CreateSetup,
) -> ! {
    // SAFETY: setting the disposition of two signals to SIG_IGN; no handler code runs.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let started = CreateBroker::start(creates.policy, creates.ruleset, identity, Reporter::Stderr)
        .and_then(|brokers| {
            serve_in_background(channel, policy, identity, brokers, creates.listing)
        });
    if let Err(e) = started {
        crate::eprintln_lossy!("verbd exec: cannot start the broker: {e}");
        // SAFETY: signalling our own child, whose pid we hold and have not reaped.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a writable int.
        let rc = unsafe { libc::waitpid(child, &mut status, 0) };
        if rc == child {
            break;
        }
        if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            std::process::exit(126);
        }
    }
    // Files the program wrote last and closed are created before `verbd exec` returns.
    super::create_broker::settle_checked_writes();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code)
}

/// How many TCP connects of one sandboxed process tree the broker performs at once, each on a
/// thread of its own; one more answers `EAGAIN` at once, so a program cannot make the broker
/// (the daemon, or the `verbd exec` launcher) start threads without bound.
pub const MAX_CONCURRENT_TCP_CONNECTS: usize = 64;

/// A counting limit on concurrent TCP connect threads.
#[derive(Debug, Clone)]
struct ConnectSlots {
    in_use: Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

/// One slot, given back on drop.
struct ConnectSlot(Arc<std::sync::atomic::AtomicUsize>);

impl ConnectSlots {
    fn new(limit: usize) -> ConnectSlots {
        ConnectSlots {
            in_use: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            limit,
        }
    }

    fn try_take(&self) -> Option<ConnectSlot> {
        use std::sync::atomic::Ordering;
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectSlot(Arc::clone(&self.in_use)))
    }
}

impl Drop for ConnectSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Is this notification an `open`/`openat` that neither creates, writes nor truncates? The
/// broker filter sends those only for a directory to list (module `seccomp`).
fn is_directory_open(data: &libc::seccomp_data) -> bool {
    let flags = match i64::from(data.nr) {
        libc::SYS_open => data.args[1],
        libc::SYS_openat => data.args[2],
        _ => return false,
    } as i32;
    flags & (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) == 0
}

/// What `verbd exec`'s create broker is started with.
pub(super) struct CreateSetup {
    pub policy: CreatePolicy,
    /// A clone of the child's Landlock ruleset, for the create thread.
    pub ruleset: RulesetCreated,
    /// The directories above the roots the program may list.
    pub listing: AncestorListing,
}

/// Serves one listener until every process under its filter has exited (`POLLHUP`): connects
/// here, and with `exec` directory opens here too (the ancestor listing) and creates on the
/// create broker's thread; anything else `ENOSYS`.
fn serve(
    listener: &Arc<OwnedFd>,
    policy: &ConnectPolicy,
    reporter: Reporter,
    exec: Option<&ExecBrokers>,
) {
    let tcp_slots = ConnectSlots::new(MAX_CONCURRENT_TCP_CONNECTS);
    loop {
        let mut poll = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, -1) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if poll.revents & libc::POLLIN == 0 {
            // POLLHUP: no task uses the filter any more.
            return;
        }
        // SAFETY: all-zero is a valid `seccomp_notif` (integers only); RECV requires it zeroed.
        let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the listener fd and a writable notification of the kernel's size.
        let rc = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notification,
            )
        };
        if rc != 0 {
            match io::Error::last_os_error().raw_os_error() {
                // The caller died before we read, or a signal: keep serving.
                Some(libc::ENOENT) | Some(libc::EINTR) => continue,
                _ => return,
            }
        }
        if notification.data.nr != libc::SYS_connect as i32 {
            let now = match exec {
                Some(exec) if is_directory_open(&notification.data) => {
                    exec.listing.answer(listener, &notification);
                    None
                }
                Some(exec) => exec.creates.submit(listener, &notification),
                None => Some(libc::ENOSYS),
            };
            if let Some(errno) = now {
                reply(listener, notification.id, errno);
            }
            continue;
        }
        match handle(listener, &notification, policy, reporter) {
            Answer::Now(errno) => reply(listener, notification.id, errno),
            Answer::Gone => {}
            Answer::Connect { socket, target } if is_internet(&target) => {
                // A TCP handshake can take minutes: connect on a thread of its own, so the
                // caller's other connects are not held behind it — up to the limit.
                let id = notification.id;
                let Some(slot) = tcp_slots.try_take() else {
                    reporter.connect_refused(
                        notification.pid,
                        &format!(
                            "more than {MAX_CONCURRENT_TCP_CONNECTS} TCP connects at once: EAGAIN"
                        ),
                    );
                    reply(listener, id, libc::EAGAIN);
                    continue;
                };
                let spawned = listener.try_clone().and_then(|listener| {
                    std::thread::Builder::new()
                        .name("verbd-connect-tcp".into())
                        .spawn(move || {
                            let _slot = slot;
                            reply(&listener, id, connect(&socket, &target))
                        })
                });
                if spawned.is_err() {
                    reply(listener, id, libc::EAGAIN);
                }
            }
            Answer::Connect { socket, target } => {
                reply(listener, notification.id, connect(&socket, &target));
            }
        }
    }
}

/// What [`handle`] leaves to do for one notification.
enum Answer {
    /// Reply with this errno (0 = success).
    Now(i32),
    /// The notification is no longer valid (the caller is gone): no reply.
    Gone,
    /// Connect the caller's socket (already taken) to `target`, then reply.
    Connect { socket: OwnedFd, target: Vec<u8> },
}

fn is_internet(address: &[u8]) -> bool {
    address.len() >= 2
        && matches!(
            i32::from(u16::from_ne_bytes([address[0], address[1]])),
            libc::AF_INET | libc::AF_INET6
        )
}

/// Decides one `connect` and, when allowed, takes the caller's socket.
fn handle(
    listener: &OwnedFd,
    notification: &libc::seccomp_notif,
    policy: &ConnectPolicy,
    reporter: Reporter,
) -> Answer {
    let now_or_gone = |errno| {
        if id_valid(listener, notification.id) {
            Answer::Now(errno)
        } else {
            Answer::Gone
        }
    };
    let data = &notification.data;
    if data.nr != libc::SYS_connect as i32 {
        return Answer::Now(libc::ENOSYS);
    }
    let socket_fd = data.args[0] as i32;
    let address_len = data.args[2] as usize;
    if address_len > MAX_ADDRESS_LEN {
        return Answer::Now(libc::EINVAL);
    }
    let tid = notification.pid;
    let pidfd = match pidfd_open(tid) {
        Ok(fd) => fd,
        Err(_) => return now_or_gone(libc::ESRCH),
    };
    if !id_valid(listener, notification.id) {
        return Answer::Gone;
    }
    let address = match read_memory(tid, data.args[1], address_len) {
        Ok(bytes) => bytes,
        Err(e) => {
            reporter.connect_refused(tid, &format!("cannot read the address: {e}"));
            return now_or_gone(libc::EFAULT);
        }
    };
    if !id_valid(listener, notification.id) {
        return Answer::Gone;
    }
    let cwd = || std::fs::read_link(format!("/proc/{tid}/cwd"));
    match policy.decide(&address, &cwd) {
        Decision::Refuse { errno, reason } => {
            if errno == REFUSED_ERRNO {
                reporter.connect_refused(tid, &reason);
            }
            Answer::Now(errno)
        }
        Decision::Connect(target) => match pidfd_getfd(&pidfd, socket_fd) {
            Ok(socket) => Answer::Connect { socket, target },
            Err(e) => Answer::Now(e.raw_os_error().unwrap_or(libc::EBADF)),
        },
    }
}

/// Connects `socket` to `address`; the errno (0 on success), as the caller's `connect` would
/// have returned it (`EINPROGRESS` on a non-blocking socket, for one).
fn connect(socket: &OwnedFd, address: &[u8]) -> i32 {
    // SAFETY: `address` is a readable buffer of its length; the kernel copies it.
    let rc = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            address.as_ptr().cast(),
            address.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        0
    } else {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(path: &str) -> Vec<u8> {
        sockaddr_un(Path::new(path)).unwrap()
    }

    fn no_cwd() -> io::Result<PathBuf> {
        Err(io::Error::from_raw_os_error(libc::ESRCH))
    }

    #[test]
    fn only_listed_paths_are_connected_and_to_the_listed_path() {
        let dir = tempfile::tempdir().unwrap();
        let listed = dir.path().join("ok.sock");
        let other = dir.path().join("other.sock");
        let _a = std::os::unix::net::UnixListener::bind(&listed).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(&other).unwrap();
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&listed, &link).unwrap();
        let policy = ConnectPolicy {
            unix_sockets: vec![listed.clone()],
            network: Network::None,
        };
        let want = sockaddr_un(&listed).unwrap();
        for path in [&listed, &link] {
            assert_eq!(
                policy.decide(&unix(path.to_str().unwrap()), &no_cwd),
                Decision::Connect(want.clone())
            );
        }
        let relative = unix("ok.sock");
        let cwd = || Ok(dir.path().to_path_buf());
        assert_eq!(policy.decide(&relative, &cwd), Decision::Connect(want));
        match policy.decide(&unix(other.to_str().unwrap()), &no_cwd) {
            Decision::Refuse { errno, .. } => assert_eq!(errno, REFUSED_ERRNO),
            d => panic!("{d:?}"),
        }
        // No existence oracle: a missing path, or one below a file, answers like any unlisted
        // socket.
        for absent in ["/nonexistent/x.sock", "/etc/passwd/x.sock"] {
            assert_eq!(
                policy.decide(&unix(absent), &no_cwd),
                refuse(
                    REFUSED_ERRNO,
                    format!("Unix socket {absent} is not in the profile's unix_sockets")
                )
            );
        }
        let mut abstract_address = unix("/x");
        abstract_address[2] = 0;
        assert!(matches!(
            policy.decide(&abstract_address, &no_cwd),
            Decision::Refuse {
                errno: REFUSED_ERRNO,
                ..
            }
        ));
    }

    #[test]
    fn name_service_sockets_are_absent_by_name_and_nothing_else_is() {
        let policy = ConnectPolicy {
            unix_sockets: Vec::new(),
            network: Network::None,
        };
        for quiet in [
            "/var/run/nscd/socket",
            "/run/nscd/socket",
            "/run/systemd/userdb/io.systemd.Multiplexer",
            "/run/systemd/userdb/io.systemd.DynamicUser",
            "/run/systemd/resolve/io.systemd.Resolve",
        ] {
            match policy.decide(&unix(quiet), &no_cwd) {
                Decision::Refuse { errno, .. } => assert_eq!(errno, libc::ENOENT, "{quiet}"),
                d => panic!("{quiet}: {d:?}"),
            }
        }
        for loud in [
            "/run/systemd/userdb",
            "/run/systemd/userdb/sub/x",
            "/run/nscd/socket2",
            "/run/dbus/system_bus_socket",
            "/run/systemd/resolve/io.systemd.Resolve/x",
        ] {
            match policy.decide(&unix(loud), &no_cwd) {
                Decision::Refuse { errno, .. } => assert_eq!(errno, REFUSED_ERRNO, "{loud}"),
                d => panic!("{loud}: {d:?}"),
            }
        }
    }

    #[test]
    fn tcp_connect_slots_stop_at_the_limit_and_come_back_on_drop() {
        let slots = ConnectSlots::new(2);
        let first = slots.try_take().expect("one");
        let second = slots.try_take().expect("two");
        assert!(slots.try_take().is_none(), "a third is over the limit");
        drop(first);
        let third = slots.try_take().expect("a slot given back is reused");
        assert!(slots.try_take().is_none());
        drop((second, third));
        assert_eq!(slots.in_use.load(std::sync::atomic::Ordering::Acquire), 0);
    }

    #[test]
    fn internet_connects_follow_the_network_mode() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&5432u16.to_be_bytes());
        let policy = |network| ConnectPolicy {
            unix_sockets: vec![],
            network,
        };
        assert!(matches!(
            policy(Network::None).decide(&v4, &no_cwd),
            Decision::Refuse { .. }
        ));
        assert!(matches!(
            policy(Network::ConnectTcp(vec![5432])).decide(&v4, &no_cwd),
            Decision::Connect(_)
        ));
        assert!(matches!(
            policy(Network::ConnectTcp(vec![6443])).decide(&v4, &no_cwd),
            Decision::Refuse { .. }
        ));
        assert!(matches!(
            policy(Network::Full).decide(&v4, &no_cwd),
            Decision::Connect(_)
        ));
    }
}
