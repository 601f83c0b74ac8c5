//! The spawner: a small single-threaded process that forks the daemon's sandboxed children, so
//! the daemon — a multi-threaded async runtime with a large address space — never forks itself
//! on the call path.
//!
//! Forking the daemon per call copied its page tables, made every page copy-on-write for both
//! sides and, on the daemon's next writes, shot down TLB entries on the other cores; under load
//! that was most of the daemon's CPU (docs/PERFORMANCE.md). The spawner is the `verbd` binary
//! re-executed in a hidden mode ([`SPAWNER_ARG`]): its address space is a few pages, it has one
//! thread, and a fork of it is cheap.
//!
//! How a call's child starts: the daemon renders the whole order — program, argv, environment,
//! working directory and the profile's [`ChildPlan`](crate::sandbox::remote) — and sends it with
//! every descriptor the child needs (stdio, the Landlock rulesets, the connect broker's channel,
//! the pinned path parameters, the secret copies, an exec report pipe) over a socket pair with
//! `SCM_RIGHTS`. The spawner decodes it and forks with `CLONE_PARENT | CLONE_PIDFD`: the child is
//! the *daemon's* child (the daemon reaps it and gets its exit status, exactly as before), and
//! the spawner answers with the child's pid and pidfd. The child applies the per-call sandbox —
//! the same stages, in the same order, as an in-process spawn — and execs.
//!
//! The exec report pipe (one per order, close-on-exec everywhere) is the child's own line to the
//! daemon, which does not depend on the spawner: the child's first act, before any stage, is to
//! write its pid there (a native-endian `i32`; a child that cannot never execs). If a stage or
//! `execve` fails it then writes the stage's code or the errno (a second `i32`) and exits, so
//! [`Spawner::spawn`] fails as `spawn()` did. The daemon reads the report to its end (the end of
//! file comes at `execve`): the pid must be the one the spawner answered, or the spawn fails.
//!
//! Invariants:
//! - the daemon starts the spawner before its self-test and before its async runtime, and does
//!   not serve without one; the self-test's sandbox canaries run through it, so what the
//!   self-test proves is what the verbs get;
//! - the spawner has the daemon's identity and no more: the same uid and gid, the same identity
//!   guard (inherited seccomp filter, `no_new_privs`), and only the capabilities the daemon kept
//!   (none unless a profile uses `run_as`; then they are raised to its ambient set so they
//!   survive the re-exec). It dies with the daemon (`PR_SET_PDEATHSIG`);
//! - a spawner that dies is restarted at the next order; the order it held fails (its child
//!   may or may not have started; the run is journaled as failed, never retried);
//! - no child outlives a failed order unsupervised, nor stays a zombie: after any failed order
//!   the daemon reads the report until it names a pid or closes (at most
//!   `ORPHAN_REPORT_LIMIT`, 10 s; it closes once the order's and the dead spawner's copies of its
//!   write end are gone and the child, if any, has exec'd or exited). A pid there is a child the
//!   spawner forked and never answered for: the daemon's own unreaped child, so `pidfd_open` on
//!   it is race-free; it is killed with its process group, as a timed-out child is, and reaped;
//! - every kill of a child (a dropped [`Spawned`], the child of a failed order) goes through
//!   `crate::sandbox::kill`, with the order's `run_as` uid: a daemon without `CAP_KILL` still
//!   ends a child of another uid, and a kill that fails is logged, never silent;
//! - the spawner never runs anything it was not sent: it holds no policy and no secret, only
//!   what each order carries, closed once the child is forked.

use std::io::{self, PipeReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::sandbox::remote::{RemotePlan, SpawnOrder, SpawnRequest};

/// `verbd __spawner` starts the spawner; the socket to the daemon is descriptor `SOCKET_FD`.
/// Not a command for people: the daemon starts it.
pub const SPAWNER_ARG: &str = "__spawner";

/// The spawner's end of its socket, in the spawner.
const SOCKET_FD: RawFd = 3;

/// Most descriptors one order carries (the kernel's `SCM_MAX_FD`).
const MAX_FDS: usize = 253;

/// Largest order accepted (argv and environment included).
const MAX_ORDER: usize = 16 << 20;

/// Why a spawner could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnerError {
    #[error("cannot start the spawner process: {0}")]
    Start(io::Error),
    #[error("a spawner is already installed in this process")]
    AlreadyInstalled,
}

/// The daemon's handle on its spawner. A call's task talks to the spawner's socket itself — on
/// the runtime through an [`AsyncFd`], or in `poll(2)` for the blocking callers (the self-test) —
/// one order at a time under one lock, so every answer is the answer to the order
/// before it. An order once begun is finished by a task of its own: a call that goes away
/// meanwhile cannot leave its answer in the socket for the next order. Only starting a spawner
/// process goes to another thread, the *keeper*: a child's parent-death signal follows the thread
/// that started it, so that thread must live as long as the daemon (a runtime worker or a
/// blocking-pool thread need not).
pub struct Spawner {
    link: Arc<tokio::sync::Mutex<Link>>,
    pid: Arc<AtomicU32>,
}

/// The socket to the current spawner process, and the way to a new one.
struct Link {
    /// `None` before the first order and after a failure: the next order starts a spawner.
    connection: Option<Connection>,
    keeper: std::sync::mpsc::Sender<KeeperJob>,
    pid: Arc<AtomicU32>,
}

/// What the keeper thread is asked to do. Either way it first kills and reaps the spawner
/// process it started last, if that is still there.
enum KeeperJob {
    /// Start a new spawner process and answer with our end of its socket.
    Start(tokio::sync::oneshot::Sender<io::Result<Started>>),
    /// The current spawner failed; nothing more.
    Stop,
}

/// A spawner process the keeper started: our end of its socket (non-blocking) and its pid.
struct Started {
    socket: UnixStream,
    pid: u32,
}

/// One order, framed (its length, then its bytes). It owns copies of every descriptor it names,
/// so a caller that goes away (a cancelled call) cannot close one that is then reused before the
/// order is sent.
struct Order {
    framed: Vec<u8>,
    fds: Vec<OwnedFd>,
    /// The child's `run_as` uid: whom the kill of its process runs as.
    run_as: Option<u32>,
}

/// Our end of one spawner process's socket, registered with the runtime at its first use there.
struct Connection {
    // Declared before the socket, so it is deregistered before the socket closes.
    registered: Option<AsyncFd<RawFd>>,
    socket: UnixStream,
}

/// How an order waits for its socket: on the runtime, or blocking this thread in `poll(2)`.
#[derive(Clone, Copy)]
enum Mode {
    Async,
    Blocking,
}

static INSTALLED: OnceLock<Spawner> = OnceLock::new();

/// Starts this process's spawner (its keeper thread and the process); from now on
/// [`installed`] returns it. The daemon calls this once, before its self-test and its runtime.
pub fn install() -> Result<&'static Spawner, SpawnerError> {
    if INSTALLED.get().is_some() {
        return Err(SpawnerError::AlreadyInstalled);
    }
    let (keeper, jobs) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("verbd-spawner-keeper".into())
        .spawn(move || keep(jobs))
        .map_err(SpawnerError::Start)?;
    let pid = Arc::new(AtomicU32::new(0));
    let mut link = Link {
        connection: None,
        keeper,
        pid: Arc::clone(&pid),
    };
    block_on(link.start()).map_err(SpawnerError::Start)?;
    INSTALLED
        .set(Spawner {
            link: Arc::new(tokio::sync::Mutex::new(link)),
            pid,
        })
        .map_err(|_| SpawnerError::AlreadyInstalled)?;
    Ok(INSTALLED.get().expect("just installed"))
}

/// This process's spawner, if [`install`] ran (the daemon); `None` in every other process,
/// which spawns its sandboxed children itself.
pub fn installed() -> Option<&'static Spawner> {
    INSTALLED.get()
}

/// The keeper thread: starts spawner processes when asked, and kills and reaps the one before.
fn keep(jobs: std::sync::mpsc::Receiver<KeeperJob>) {
    let mut current: Option<std::process::Child> = None;
    for job in jobs {
        if let Some(mut old) = current.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        if let KeeperJob::Start(reply) = job {
            let started = start_process().map(|(socket, process)| {
                let pid = process.id();
                current = Some(process);
                Started { socket, pid }
            });
            // An order that went away drops the socket: that spawner sees its end and exits.
            let _ = reply.send(started);
        }
    }
}

/// Runs `future` to its end on this thread (the blocking callers' orders, whose socket waits
/// are `poll(2)` calls; a wait on another thread parks this one until it wakes it).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

impl Link {
    /// Has the keeper start a new spawner process (stopping the current one) and connects to it.
    async fn start(&mut self) -> io::Result<()> {
        self.connection = None;
        self.pid.store(0, Ordering::Relaxed);
        let keeper_gone = || io::Error::other("the spawner keeper thread ended");
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.keeper
            .send(KeeperJob::Start(reply))
            .map_err(|_| keeper_gone())?;
        let started = answer.await.map_err(|_| keeper_gone())??;
        started.socket.set_nonblocking(true)?;
        self.pid.store(started.pid, Ordering::Relaxed);
        self.connection = Some(Connection {
            registered: None,
            socket: started.socket,
        });
        Ok(())
    }

    /// Forgets a failed spawner; the keeper kills and reaps it, and the next order starts another.
    fn drop_failed(&mut self) {
        self.connection = None;
        self.pid.store(0, Ordering::Relaxed);
        let _ = self.keeper.send(KeeperJob::Stop);
    }

    /// Sends one order and reads its answer, starting a spawner process when there is none.
    async fn deliver(&mut self, order: &Order, mode: Mode) -> io::Result<Spawned> {
        let raw: Vec<RawFd> = order.fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut attempts = 0;
        loop {
            attempts += 1;
            if self.connection.is_none() {
                self.start().await.map_err(|e| {
                    io::Error::other(format!("cannot restart the spawner process: {e}"))
                })?;
            }
            let live = self.connection.as_mut().expect("started above");
            match live.order(&order.framed, &raw, mode).await {
                Delivery::Answered(forked) => {
                    return forked.map(|mut spawned| {
                        spawned.run_as = order.run_as;
                        spawned
                    });
                }
                // It was gone before it could read a byte: nothing was forked. Start a new
                // one and send the order again, once.
                Delivery::NotDelivered(e) if attempts == 1 => {
                    tracing::warn!(error = %e, "the spawner process was gone; restarting it");
                    self.drop_failed();
                }
                Delivery::NotDelivered(e) | Delivery::Lost(e) => {
                    self.drop_failed();
                    tracing::error!(error = %e, "the spawner process failed while it held an order; it is restarted for the next call");
                    return Err(io::Error::other(format!(
                        "the spawner process failed while starting this call ({e}); whether the program started is unknown"
                    )));
                }
            }
        }
    }
}

/// A child started by the spawner, exec'd (its program runs). It is this process's child:
/// reap it with [`Spawned::wait`] or [`Spawned::try_wait`]; dropping it unreaped kills it.
pub struct Spawned {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    reaped: bool,
    /// The uid the child runs as when not the daemon's (`run_as`).
    run_as: Option<u32>,
}

impl Spawner {
    /// One order for `request` and `plan`, and the read end of the child's exec report pipe.
    fn order(request: &SpawnRequest<'_>, plan: RemotePlan) -> io::Result<(Order, PipeReader)> {
        let run_as = plan.run_as_uid();
        let (report_read, report_write) = std::io::pipe()?;
        let (bytes, raw) = crate::sandbox::remote::encode(request, report_write.as_raw_fd(), &plan);
        let fds = raw
            .iter()
            .map(|&fd| {
                // SAFETY: every descriptor in the order is open for the duration of this call:
                // the request's belong to the caller, the others to `plan` and `report_write`.
                unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
            })
            .collect::<io::Result<Vec<_>>>()?;
        let mut framed = Vec::with_capacity(4 + bytes.len());
        framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        framed.extend_from_slice(&bytes);
        Ok((
            Order {
                framed,
                fds,
                run_as,
            },
            report_read,
        ))
    }

    /// Starts one sandboxed child: sends the order, waits for the fork, then for the child's
    /// `execve`. Fails with the stage's code as the raw OS error when a sandbox stage failed
    /// (`crate::sandbox::spawn_failure` decodes it) and with the errno when `execve` did.
    pub async fn spawn(&self, request: &SpawnRequest<'_>, plan: RemotePlan) -> io::Result<Spawned> {
        use tokio::io::AsyncReadExt;
        let (order, report) = Self::order(request, plan)?;
        let mut report = tokio::net::unix::pipe::Receiver::from_owned_fd(report.into())?;
        let link = Arc::clone(&self.link);
        let run_as = order.run_as;
        // A task of its own (on this worker, right after this one yields): dropping this call
        // cannot stop an order half sent, an answer half read or the search for the child of a
        // lost order. A call that went away drops the child it would have got, which kills and
        // reaps it.
        let (mut spawned, mut report) = tokio::spawn(async move {
            let delivered = link.lock_owned().await.deliver(&order, Mode::Async).await;
            // Before the report is read: the order holds a copy of its pipe's write end.
            drop(order);
            match delivered {
                Ok(spawned) => Ok((spawned, report)),
                Err(e) => {
                    let reported =
                        tokio::time::timeout(ORPHAN_REPORT_LIMIT, first_word(&mut report)).await;
                    end_orphan(
                        reported.unwrap_or_else(|_| Err(orphan_report_timeout())),
                        run_as,
                    );
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| io::Error::other(format!("the spawner order was lost: {e}")))??;
        let mut words = Vec::with_capacity(8);
        report.read_to_end(&mut words).await?;
        exec_report(&mut spawned, &words)?;
        Ok(spawned)
    }

    /// [`spawn`](Self::spawn), blocking this thread (not for async contexts).
    pub fn spawn_blocking(
        &self,
        request: &SpawnRequest<'_>,
        plan: RemotePlan,
    ) -> io::Result<Spawned> {
        let (order, mut report) = Self::order(request, plan)?;
        let run_as = order.run_as;
        let delivered = block_on(self.link.blocking_lock().deliver(&order, Mode::Blocking));
        // The order's copies go now: among them the report pipe's write end, whose closing in
        // the child at `execve` is what the reads below wait for.
        drop(order);
        let mut spawned = match delivered {
            Ok(spawned) => spawned,
            Err(e) => {
                end_orphan(
                    first_word_blocking(&mut report, ORPHAN_REPORT_LIMIT),
                    run_as,
                );
                return Err(e);
            }
        };
        let mut words = Vec::with_capacity(8);
        report.read_to_end(&mut words)?;
        exec_report(&mut spawned, &words)?;
        Ok(spawned)
    }

    /// Runs a child to its end and collects its output, like `Command::output` (the self-test's
    /// canary; blocking). stdin is `/dev/null`.
    pub fn output(
        &self,
        request: &SpawnRequest<'_>,
        plan: RemotePlan,
    ) -> io::Result<std::process::Output> {
        let (stdout_read, stdout_write) = std::io::pipe()?;
        let (stderr_read, stderr_write) = std::io::pipe()?;
        let stdin = std::fs::File::open("/dev/null")?;
        let request = SpawnRequest {
            stdio: [
                stdin.as_raw_fd(),
                stdout_write.as_raw_fd(),
                stderr_write.as_raw_fd(),
            ],
            ..*request
        };
        let mut child = self.spawn_blocking(&request, plan)?;
        drop((stdin, stdout_write, stderr_write));
        let read_all = |mut pipe: std::io::PipeReader| {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).map(|_| bytes)
        };
        let (stdout, stderr) = std::thread::scope(|scope| {
            let stderr = scope.spawn(|| read_all(stderr_read));
            let stdout = read_all(stdout_read);
            (
                stdout,
                stderr.join().expect("reading a pipe does not panic"),
            )
        });
        let status = child.wait_blocking()?;
        Ok(std::process::Output {
            status,
            stdout: stdout?,
            stderr: stderr?,
        })
    }

    /// The spawner process's pid (`None` between a failure and its restart).
    pub fn pid(&self) -> Option<u32> {
        match self.pid.load(Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }
}

/// What the exec report pipe said, read to its end: the child's pid alone (the program runs), or
/// its pid and the code of why it ended before `execve` (the child is reaped then). A report
/// without a pid is a child that ended (was killed) before its first step: it ran nothing, and
/// is reaped. A pid other than the spawner's answer fails the spawn (and `spawned`, dropped,
/// is killed).
fn exec_report(spawned: &mut Spawned, report: &[u8]) -> io::Result<()> {
    let word = |at: usize| i32::from_ne_bytes(report[at..at + 4].try_into().expect("4 bytes"));
    if report.len() >= 4 && word(0) != spawned.pid {
        tracing::error!(
            reported = word(0),
            answered = spawned.pid,
            "a child's exec report names another pid than the spawner's answer; killing it"
        );
        return Err(io::Error::other(
            "the child's exec report contradicts the spawner's answer",
        ));
    }
    match report.len() {
        4 => Ok(()),
        0 | 8 => {
            // The child has ended (it writes a code just before it exits) or is ending.
            let _ = spawned.wait_blocking();
            Err(match report.len() {
                0 => {
                    io::Error::other("the child ended before its first step; nothing was executed")
                }
                _ => io::Error::from_raw_os_error(word(4)),
            })
        }
        _ => Err(io::Error::other("the child's exec report was cut short")),
    }
}

/// The longest the daemon waits, after a failed order, for its exec report to name a child or
/// close: it closes once the order's and the failed spawner's copies of its write end are gone
/// and the child, if any, has exec'd or exited.
const ORPHAN_REPORT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

fn orphan_report_timeout() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the exec report of a failed order neither named a child nor closed within {} s",
            ORPHAN_REPORT_LIMIT.as_secs()
        ),
    )
}

/// The first word of an exec report (the child's pid), or `None` at end of file before it.
async fn first_word(report: &mut tokio::net::unix::pipe::Receiver) -> io::Result<Option<i32>> {
    use tokio::io::AsyncReadExt;
    let mut word = [0u8; 4];
    let mut have = 0;
    while have < word.len() {
        match report.read(&mut word[have..]).await? {
            0 => return Ok(None),
            read => have += read,
        }
    }
    Ok(Some(i32::from_ne_bytes(word)))
}

/// [`first_word`], blocking this thread at most `limit`.
fn first_word_blocking(
    report: &mut PipeReader,
    limit: std::time::Duration,
) -> io::Result<Option<i32>> {
    let deadline = std::time::Instant::now() + limit;
    let mut word = [0u8; 4];
    let mut have = 0;
    while have < word.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(orphan_report_timeout());
        }
        let mut poll_fd = libc::pollfd {
            fd: report.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd on the stack, for the duration of the call.
        if unsafe { libc::poll(&mut poll_fd, 1, timeout) } < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
            continue;
        }
        if poll_fd.revents == 0 {
            continue;
        }
        match report.read(&mut word[have..]) {
            Ok(0) => return Ok(None),
            Ok(read) => have += read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(i32::from_ne_bytes(word)))
}

/// After a failed order: ends the child its exec report named, if any. The spawner may have
/// forked it and died before it answered; then the child runs unsupervised (no deadline, its
/// output unread) and, once it exits, would stay this process's zombie for good. It is this
/// process's own unreaped child (`CLONE_PARENT`; nothing here waits for a child it does not
/// know), so its pid still names it: it is killed as a timed-out call's child is — itself, then
/// its whole process group, as whoever may (it runs as `run_as` once past that stage) — and
/// reaped, on a thread of the runtime's blocking pool when there is one.
fn end_orphan(reported: io::Result<Option<i32>>, run_as: Option<u32>) {
    let pid = match reported {
        Ok(Some(pid)) => pid,
        // End of file before a pid: no child was forked (or one ended before its first step).
        Ok(None) => return,
        Err(e) => {
            tracing::error!(error = %e, "cannot learn whether a failed spawner order left a child; a child may run unsupervised");
            return;
        }
    };
    let orphan = match Spawned::adopt(pid, run_as) {
        Ok(orphan) => orphan,
        Err(e) => {
            tracing::error!(pid, error = %e, "cannot take hold of the child of a failed spawner order; it may run unsupervised");
            return;
        }
    };
    // Itself, then its descendants, if it exec'd and forked: the group it leads (setsid).
    // Before its `setsid` there is no such group, and no descendant either. A failure is logged
    // by `sigkill`; the child is then reaped when it ends.
    let killed = orphan.kill();
    let group_killed =
        crate::sandbox::kill::sigkill(crate::sandbox::kill::Target::Group(pid), run_as);
    if killed.is_ok() && group_killed.is_ok() {
        tracing::warn!(
            pid,
            "killed the child of an order the failed spawner never answered"
        );
    }
    // Dropped unreaped: reaped.
    drop(orphan);
}

/// Starts a spawner process: this binary again, in spawner mode, with one end of a socket pair as
/// descriptor 3 and the capabilities this process holds in its ambient set. Returns our end and
/// the process. Runs on the keeper thread (the spawner's parent-death signal follows it).
fn start_process() -> io::Result<(UnixStream, std::process::Child)> {
    let (ours, theirs) = UnixStream::pair()?;
    let kept = permitted_capabilities()?;
    let their_fd = theirs.as_raw_fd();
    let mut command = Command::new("/proc/self/exe");
    command
        .arg(SPAWNER_ARG)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    #[cfg(feature = "test-hooks")]
    crate::test_hooks::pass_to_spawner(&mut command);
    // SAFETY: the closure runs raw syscalls only (dup2, fcntl, capset, prctl) on values
    // computed before the fork; it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            if their_fd == SOCKET_FD {
                if libc::fcntl(SOCKET_FD, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(their_fd, SOCKET_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            raise_ambient(kept)?;
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let process = command.spawn()?;
    drop(theirs);
    Ok((ours, process))
}

impl Connection {
    /// Sends one framed order and reads the answer.
    async fn order(&mut self, framed: &[u8], fds: &[RawFd], mode: Mode) -> Delivery {
        let sent = match self
            .io(mode, Interest::WRITABLE, |socket| {
                send_with_fds(socket.as_raw_fd(), framed, fds)
            })
            .await
        {
            Ok(sent) => sent,
            Err(e) => return Delivery::NotDelivered(e),
        };
        match self.finish_order(&framed[sent..], mode).await {
            Ok(answer) => Delivery::Answered(answer),
            Err(e) => Delivery::Lost(e),
        }
    }

    async fn finish_order(&mut self, rest: &[u8], mode: Mode) -> io::Result<io::Result<Spawned>> {
        let mut written = 0;
        while written < rest.len() {
            written += self
                .io(mode, Interest::WRITABLE, |mut socket| {
                    socket.write(&rest[written..])
                })
                .await?;
        }
        let mut answer = [0u8; 8];
        let (received, pidfd) = self
            .io(mode, Interest::READABLE, |socket| {
                receive_with_fds(socket.as_raw_fd(), &mut answer, 1)
            })
            .await?;
        let mut have = received;
        while have < answer.len() {
            let read = self
                .io(mode, Interest::READABLE, |mut socket| {
                    socket.read(&mut answer[have..])
                })
                .await?;
            if read == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the spawner closed its socket",
                ));
            }
            have += read;
        }
        let errno = i32::from_le_bytes(answer[..4].try_into().expect("4 bytes"));
        let pid = i32::from_le_bytes(answer[4..].try_into().expect("4 bytes"));
        if errno != 0 {
            return Ok(Err(io::Error::from_raw_os_error(errno)));
        }
        match pidfd.into_iter().next() {
            Some(pidfd) => Ok(Ok(Spawned {
                pid,
                pidfd,
                reaped: false,
                run_as: None,
            })),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the spawner answered without a pidfd",
            )),
        }
    }

    /// Runs `op` on the (non-blocking) socket until it does not answer `WouldBlock`, waiting for
    /// `interest` in between: on the runtime (the socket is registered at its first use there),
    /// or in `poll(2)`.
    async fn io<T>(
        &mut self,
        mode: Mode,
        interest: Interest,
        mut op: impl FnMut(&UnixStream) -> io::Result<T>,
    ) -> io::Result<T> {
        let Connection { registered, socket } = self;
        match mode {
            Mode::Async => {
                if registered.is_none() {
                    // SAFETY: the socket is owned by this connection, which drops the
                    // registration before it (field order) and does not close it meanwhile.
                    *registered = Some(unsafe {
                        AsyncFd::register_with_interest(
                            socket.as_raw_fd(),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                    }?);
                }
                let registered = registered.as_ref().expect("registered above");
                registered.async_io(interest, |_| op(socket)).await
            }
            Mode::Blocking => loop {
                match op(socket) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        wait_for(socket.as_raw_fd(), interest)?
                    }
                    result => return result,
                }
            },
        }
    }
}

/// Blocks in `poll(2)` until `socket` is ready for `interest` (or hung up).
fn wait_for(socket: RawFd, interest: Interest) -> io::Result<()> {
    let events = if interest.is_readable() {
        libc::POLLIN
    } else {
        libc::POLLOUT
    };
    let mut poll_fd = libc::pollfd {
        fd: socket,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd on the stack, for the duration of the call.
        if unsafe { libc::poll(&mut poll_fd, 1, -1) } >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// What became of one order.
enum Delivery {
    /// The spawner answered: the forked child, or the errno of why it could not fork.
    Answered(io::Result<Spawned>),
    /// Not one byte reached a live spawner: nothing was forked.
    NotDelivered(io::Error),
    /// The spawner took the order and then failed: a child may have started.
    Lost(io::Error),
}

impl Spawned {
    /// Takes hold of child `pid` of this process, known from its exec report alone. Refused
    /// unless `pid` is a child of this process not yet reaped (then nothing can have reused
    /// its pid).
    fn adopt(pid: libc::pid_t, run_as: Option<u32>) -> io::Result<Spawned> {
        if pid <= 0 {
            return Err(io::Error::other(format!("reported pid {pid}")));
        }
        // SAFETY: pidfd_open without pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pidfd_open returned a new descriptor nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // SAFETY: all-zero is a valid siginfo_t.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on the pidfd just opened, `info` valid for the call; WNOWAIT leaves
        // the child unreaped. ECHILD: not our child.
        let ours = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if ours != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Spawned {
            pid,
            pidfd,
            reaped: false,
            run_as,
        })
    }

    /// Sends `SIGKILL` to the child (through its pidfd: never to a process that reused its pid),
    /// as whoever may; a failure is logged there.
    fn kill(&self) -> Result<(), crate::sandbox::kill::KillError> {
        use std::os::fd::AsFd;
        crate::sandbox::kill::sigkill(
            crate::sandbox::kill::Target::Process {
                pid: self.pid,
                pidfd: self.pidfd.as_fd(),
            },
            self.run_as,
        )
    }

    /// The child's pid (its process group id too: daemon children start their own session).
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Reaps the child if it has exited.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.reaped {
            return Err(io::Error::other("the child was already reaped"));
        }
        self.reap(libc::WNOHANG)
    }

    /// Waits for the child's exit, blocking this thread.
    pub fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.reap(0)? {
                return Ok(status);
            }
        }
    }

    /// Waits for the child's exit on the async runtime (its pidfd becomes readable).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        // SAFETY: the pidfd is owned by `self`, which outlives this registration (dropped at
        // the end of this function) and does not close it meanwhile.
        let readable = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                self.pidfd.as_raw_fd(),
                tokio::io::Interest::READABLE,
            )
        }?;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            let mut ready = readable.readable().await?;
            ready.clear_ready();
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        let mut status = 0;
        loop {
            // SAFETY: waits for this process's own child (CLONE_PARENT made it ours), not yet
            // reaped (`reaped` is false), so its pid is still its own; `status` is a valid int.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            if rc == self.pid {
                self.reaped = true;
                return Ok(Some(ExitStatus::from_raw(status)));
            }
            if rc == 0 {
                return Ok(None);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

impl Drop for Spawned {
    /// A child dropped before it was reaped (its call was cancelled) is killed and reaped.
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // A failure is logged by `kill`; the child is then reaped when it ends.
        let _ = self.kill();
        let pid = self.pid;
        let reap = move || {
            let mut status = 0;
            // SAFETY: as in `reap`: our own unreaped child, killed just above.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
                && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
            {}
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap)),
            Err(_) => reap(),
        }
    }
}

/// The capabilities in this process's permitted set, as a mask.
fn permitted_capabilities() -> io::Result<u64> {
    let mut mask = 0u64;
    for cap in caps::read(None, caps::CapSet::Permitted).map_err(io::Error::other)? {
        mask |= 1u64 << cap.index();
    }
    Ok(mask)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Makes the capabilities in `mask` (all permitted) inheritable and ambient, so they survive
/// `execve` of the spawner. Nothing to do for an empty mask. Async-signal-safe.
fn raise_ambient(mask: u64) -> io::Result<()> {
    if mask == 0 {
        return Ok(());
    }
    let header = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let (low, high) = (mask as u32, (mask >> 32) as u32);
    let data = [
        CapData {
            effective: low,
            permitted: low,
            inheritable: low,
        },
        CapData {
            effective: high,
            permitted: high,
            inheritable: high,
        },
    ];
    // SAFETY: header and the two data words (version 3 layout) are valid for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for cap in (0..64u32).filter(|cap| mask & (1 << cap) != 0) {
        // SAFETY: prctl without pointers.
        let raised = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE,
                libc::c_ulong::from(cap),
                0,
                0,
            )
        };
        if raised != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `sendmsg` of `bytes` with `fds` attached; returns how many bytes went (the rest is written
/// plainly: the descriptors travel with the first byte).
fn send_with_fds(socket: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other(format!(
            "a child cannot be handed more than {MAX_FDS} descriptors"
        )));
    }
    let mut control = vec![0u8; cmsg_space(fds.len())];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    if !fds.is_empty() {
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = control.len();
        // SAFETY: `control` is CMSG_SPACE(n ints) bytes, so the first header and its data fit.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&message);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(header).cast::<RawFd>(),
                fds.len(),
            );
        }
    }
    loop {
        // SAFETY: `message` points at `iov`, `bytes` and `control`, alive for the call.
        let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `recvmsg` into `buffer`, accepting at most `max_fds` descriptors (close-on-exec). Returns the
/// bytes read (0: end of stream) and the descriptors.
fn receive_with_fds(
    socket: RawFd,
    buffer: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = vec![0u8; cmsg_space(max_fds)];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = control.len();
    let received = loop {
        // SAFETY: `message` points at live buffers of the stated sizes.
        let n = unsafe { libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walks the control headers recvmsg filled in, within `msg_controllen`.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let count = ((*header).cmsg_len - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    // SCM_RIGHTS installed each descriptor for us; nothing else owns it.
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    if message.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("too many descriptors in one order"));
    }
    Ok((received, fds))
}

fn cmsg_space(fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE((fds.max(1) * std::mem::size_of::<RawFd>()) as u32) as usize }
}

/// The spawner process (`verbd __spawner`): serves orders on descriptor 3 until the daemon closes
/// it. Returns the exit status.
pub fn serve_process() -> u8 {
    // SAFETY: descriptor 3 was set up by the daemon for this process alone; if it is not a
    // socket, the first recvmsg fails and the spawner exits.
    let socket = unsafe { OwnedFd::from_raw_fd(SOCKET_FD) };
    // Ours alone, and not for the children; and a name `ps` shows (not `exe`).
    // SAFETY: fcntl without pointers; PR_SET_NAME reads a NUL-terminated string of ≤ 16 bytes.
    unsafe {
        libc::fcntl(SOCKET_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_NAME, c"verbd-spawner".as_ptr(), 0, 0, 0);
    }
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let (bytes, fds) = match receive_order(&socket, &mut buffer) {
            Ok(Some(order)) => order,
            Ok(None) => return 0,
            Err(_) => return 1,
        };
        let answer = match SpawnOrder::decode(&bytes, fds) {
            Ok(mut order) => fork_child(&mut order),
            Err(_) => Err(libc::EINVAL),
        };
        let (errno, pid, pidfd) = match answer {
            Ok((pid, pidfd)) => {
                #[cfg(feature = "test-hooks")]
                crate::test_hooks::spawner_forked(pid);
                (0, pid, Some(pidfd))
            }
            Err(errno) => (errno, 0, None),
        };
        let mut reply = [0u8; 8];
        reply[..4].copy_from_slice(&errno.to_le_bytes());
        reply[4..].copy_from_slice(&pid.to_le_bytes());
        let fds: Vec<RawFd> = pidfd.iter().map(AsRawFd::as_raw_fd).collect();
        match send_with_fds(socket.as_raw_fd(), &reply, &fds) {
            Ok(8) => {}
            _ => return 1,
        }
    }
}

/// One framed order and its descriptors; `None` at end of stream.
fn receive_order(
    socket: &OwnedFd,
    buffer: &mut [u8],
) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let (received, fds) = receive_with_fds(socket.as_raw_fd(), buffer, MAX_FDS)?;
    if received == 0 {
        return Ok(None);
    }
    let mut stream = std::fs::File::from(socket.try_clone()?);
    let mut framed = buffer[..received].to_vec();
    if framed.len() < 4 {
        let mut rest = vec![0u8; 4 - framed.len()];
        stream.read_exact(&mut rest)?;
        framed.extend_from_slice(&rest);
    }
    let len = u32::from_le_bytes(framed[..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_ORDER {
        return Err(io::Error::other("order too large"));
    }
    let have = framed.len() - 4;
    if have > len {
        return Err(io::Error::other("more bytes than the order announced"));
    }
    let mut order = framed.split_off(4);
    order.resize(len, 0);
    stream.read_exact(&mut order[have..])?;
    Ok(Some((order, fds)))
}

/// Forks the order's child (the daemon's child, with a pidfd here); the child never returns.
fn fork_child(order: &mut SpawnOrder) -> Result<(libc::pid_t, OwnedFd), i32> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: a fork-style clone (no new stack, no shared memory) of this single-threaded
    // process; `pidfd` is a valid int for CLONE_PIDFD to fill. The child only runs
    // `exec_in_child`, which execs or exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::CLONE_PIDFD) as libc::c_ulong
                | libc::SIGCHLD as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            &mut pidfd as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_int>(),
            0usize,
        )
    };
    if pid < 0 {
        return Err(crate::sandbox::remote::last_errno());
    }
    if pid == 0 {
        order.exec_in_child();
    }
    // SAFETY: CLONE_PIDFD installed this descriptor for us; nothing else owns it.
    Ok((pid as libc::pid_t, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}
