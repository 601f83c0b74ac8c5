//! The daemon: accept loop, limits, and dispatch of each request to its handler.
//!
//! Where a request goes: [`Daemon::serve`] accepts and reads the peer's credentials from the
//! kernel (invariant 3) at once, before a byte of the request; the socket's [`admission::Pool`]
//! admits the connection or answers `busy` naming the limit (per uid, or the socket's total) —
//! at once, or after a pause once that uid is refused in a loop ([`pacing`]). `handle` reads one
//! request line (size and time limited), then looks the caller up, and — for a peer that matches
//! no role — journals the refusal and answers `denied`; a `wait` trades its connection place for a
//! parked-wait place; otherwise `dispatch` runs the request **in its own task, owned by the
//! daemon**. The connection only watches for its client hanging up: then it signals the task's
//! [`Cancel`], and the task still reaches its journaled end (a running child is killed and the
//! cancellation journaled; a file operation in progress completes and is journaled).
//!
//! Handlers: `call` (every call, with or without approval) → `call.rs`; proposals, approvals,
//! `wait`, `result`, `resolve` → `approve.rs`; every state change goes through the
//! [`ledger::Ledger`] (journal first, then the proposal book).
//!
//! Invariants: every decision is journaled (and fsync'd) before the caller sees it — except that
//! a caller's refusals past its share in a window are counted and journaled as one
//! `refusals_coalesced` record when the window ends (`refusals.rs`: a refusal acts on nothing),
//! likewise a caller's command mappings, and a command mapping is answered once its record is
//! written, its fdatasync right after (`commands.rs`: a mapping is advice that nothing acts on) —
//! and a call whose record cannot be written is denied (fail closed, invariant 6); the agent and
//! approver sockets have separate pools, and inside each every uid its own budget of connections
//! and parked waits, so one caller's flood (slow senders, `wait`s, parallel calls) costs only its
//! own budget; a call over an execution limit waits in a fair queue ([`crate::slots::FairSlots`], round
//! robin per uid) for at most `daemon.queue_timeout`, then gets `busy`; an *approved* proposal
//! waits for its slot longer (bounded, journaled) instead of being lost.
#![forbid(unsafe_code)]

pub mod admission;
mod approve;
mod call;
mod commands;
mod credentials;
pub mod identity;
pub mod idle;
pub mod ledger;
mod metrics;
pub mod pacing;
pub mod peer;
mod refusals;
pub mod socket;
pub mod streams;

use crate::approvals::{Book, Interrupted};
use crate::events::{CallerRecord, CancelCause, Event};
use crate::journal::{Appended, Journal, JournalError, format_rfc3339};
use crate::loader::{LoadError, Loader, Prepared};
use crate::policy::PreparedCall;
use crate::policy::{ApprovalScope, Caller, Role};
use crate::proposal::Proposal;
use crate::protocol::{self, ParamInfo, Request, Response, VerbInfo};
use crate::slots::FairSlots;
use admission::{Admission, Pool, PoolLimits, SocketKind};
use ledger::Ledger;
use nix::sys::socket::{
    MsgFlags, SockFlag, UnixCredentials, accept4, getsockopt, recv, send, sockopt,
};
use pacing::{Pace, Pacer};
pub use refusals::{FULL_RECORDS_PER_WINDOW, REFUSAL_WINDOW};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

/// Answers up to this size fit a Unix stream socket's default send buffer (208 KiB on Linux),
/// so writing them never waits on the peer.
const ANSWER_WRITTEN_WITHOUT_WAITING: usize = 64 * 1024;

/// A socket's accept thread ended before the daemon stopped: the socket is served no longer,
/// so the daemon stops (and systemd restarts it) instead of running deaf.
#[derive(Debug, thiserror::Error)]
#[error("the accept thread of the {kind:?} socket ended: {what}")]
pub struct AcceptStopped {
    pub kind: SocketKind,
    pub what: String,
}

/// Connections the accept thread takes under a flood before it looks at its stop pipe.
const ACCEPTS_BETWEEN_STOP_CHECKS: usize = 256;

/// The `busy` line, in one send on a refused connection whose buffer takes a short line at
/// once; dropping the stream then closes it, which ends the answer. A refusal costs no read and
/// no wake-up, however fast a flooder reconnects. A peer already gone gets nothing.
fn answer_and_close(connection: &OwnedFd, answer: &[u8]) {
    let _ = send(
        connection.as_raw_fd(),
        answer,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    );
}

/// Whether the peer of a connection not yet read has closed it (the end of the stream is all
/// that is left to read), without reading anything.
fn peer_hung_up(connection: &OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    match recv(
        connection.as_raw_fd(),
        &mut byte,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(0) => true,
        Ok(_) | Err(nix::errno::Errno::EAGAIN) => false,
        Err(_) => true,
    }
}

/// The descriptor limit (soft) of this process now; 1024, the usual default, when unknown.
fn open_files_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft)
}

/// Settings that do not come from the policy.
pub struct ServeSettings {
    pub state_dir: PathBuf,
    /// The uid that started the daemon (the `@invoker` role member).
    pub invoker_uid: u32,
    /// Re-reads the policy on reload.
    pub loader: Loader,
}

/// The running daemon's shared state.
pub struct Daemon {
    prepared: RwLock<Arc<Prepared>>,
    ledger: Ledger,
    exec_slots: Arc<FairSlots>,
    /// Streaming runs hold a slot for long: at most half of them, a quarter per caller.
    stream_places: streams::StreamPlaces,
    /// The agent socket's pool of connection places.
    agent_pool: Arc<Pool>,
    /// The approver socket's own pool: no agent takes a place an approver needs.
    approver_pool: Arc<Pool>,
    /// Paces the `busy` answers of a uid refused at accept in a loop (both sockets).
    pacer: Arc<Pacer>,
    settings: ServeSettings,
    /// Set once at shutdown, after the grace period: cancels every run still going.
    shutdown: watch::Sender<bool>,
    /// Per-caller refusal windows: past a caller's share, refusals are counted, not journaled
    /// one by one.
    refusals: refusals::Windows<crate::events::RefusalClass>,
    /// Per-caller windows of `command` requests mapped onto a verb, bounded like refusals.
    mappings: refusals::Windows<crate::events::CommandAction>,
    /// The counters `status` reports.
    counted: metrics::Counted,
    /// Connections accepted on either socket since the start, admitted or not: the activity
    /// an [`idle::IdleWatch`] looks at.
    accepted: AtomicU64,
}

/// Chunks of a streaming verb's output queued for its client before the run waits for it.
const LIVE_CHUNKS_QUEUED: usize = 16;

/// One `chunk` answer: scrubbed output of a streaming verb, lossily UTF-8.
fn chunk_frame(chunk: &crate::exec::LiveChunk) -> Vec<u8> {
    Response::Chunk {
        stream: chunk.stream,
        text: String::from_utf8_lossy(&chunk.bytes).into_owned(),
    }
    .encode()
}

/// The cancellation signal a request's task watches: its client hanging up (unless the work
/// belongs to the daemon, like an approved proposal's run) or the daemon's shutdown.
#[derive(Clone)]
pub struct Cancel {
    client: Option<watch::Receiver<bool>>,
    shutdown: watch::Receiver<bool>,
}

impl Cancel {
    /// Resolves when the work should stop, with the cause.
    pub async fn cancelled(&mut self) -> CancelCause {
        async fn fired(rx: Option<&mut watch::Receiver<bool>>) {
            if let Some(rx) = rx
                && rx.wait_for(|set| *set).await.is_ok()
            {
                return;
            }
            // Not watched, or the sender went away without a signal: never fires.
            std::future::pending().await
        }
        tokio::select! {
            () = fired(self.client.as_mut()) => CancelCause::ClientHungUp,
            () = fired(Some(&mut self.shutdown)) => CancelCause::Shutdown,
        }
    }

    /// The same signal without the client: for work that must outlive the connection.
    pub fn daemon_owned(&self) -> Cancel {
        Cancel {
            client: None,
            shutdown: self.shutdown.clone(),
        }
    }
}

impl Daemon {
    pub fn new(
        prepared: Prepared,
        journal: Journal,
        book: Book,
        settings: ServeSettings,
    ) -> Arc<Daemon> {
        let daemon_cfg = &prepared.policy.daemon;
        Arc::new(Daemon {
            exec_slots: FairSlots::new(daemon_cfg.max_executions),
            stream_places: streams::StreamPlaces::new(daemon_cfg.max_executions),
            agent_pool: Pool::new(SocketKind::Agent),
            approver_pool: Pool::new(SocketKind::Approver),
            pacer: Pacer::new(pacing::held_budget(open_files_limit())),
            prepared: RwLock::new(Arc::new(prepared)),
            ledger: Ledger::new(journal, book),
            settings,
            shutdown: watch::channel(false).0,
            refusals: refusals::Windows::default(),
            mappings: refusals::Windows::default(),
            counted: metrics::Counted::default(),
            accepted: AtomicU64::new(0),
        })
    }

    /// The policy in force now. Calls keep the snapshot they started with.
    pub fn prepared(&self) -> Arc<Prepared> {
        self.prepared.read().expect("policy lock").clone()
    }

    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

    /// The journal and proposal book.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Journal an event (and apply it to the proposal book).
    pub async fn record(&self, event: Event) -> Result<Appended, JournalError> {
        self.ledger.record(event).await
    }

    /// Close the journal's epoch: now (`stopping`), or when it is due by time (an idle daemon's
    /// last records are then sealed within the epoch's time limit).
    pub async fn seal_journal(&self, stopping: bool) -> Result<(), JournalError> {
        self.ledger.seal_journal(stopping).await
    }

    /// Connections accepted on either socket since the start.
    pub fn connections_accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Number of executions running now.
    pub fn executions_in_flight(&self) -> usize {
        self.exec_slots.in_use()
    }

    /// Cancel every run still going (shutdown, after the grace period): each kills its process
    /// group and journals its cancellation.
    pub fn cancel_all(&self) {
        self.shutdown.send_replace(true);
    }

    fn cancel_for_connection(&self, client: watch::Receiver<bool>) -> Cancel {
        Cancel {
            client: Some(client),
            shutdown: self.shutdown.subscribe(),
        }
    }

    /// Re-read the policy, prepare and self-test it, and swap it in only if everything passes;
    /// otherwise keep serving the old one. Calls already running keep the policy they started
    /// with; pending proposals are re-checked against the new policy at approval.
    pub async fn reload(self: Arc<Self>) -> Result<String, String> {
        crate::sd::notify_reloading();
        let daemon = self.clone();
        let attempt = tokio::task::spawn_blocking(move || daemon.load_for_reload())
            .await
            .unwrap_or_else(|e| Err(format!("reload task failed: {e}")));
        let (outcome, hash) = match attempt {
            Ok((prepared, summary)) => {
                let hash = prepared.policy.hash.clone();
                *self.prepared.write().expect("policy lock") = Arc::new(prepared);
                (Ok(format!("new policy in force ({summary})")), hash)
            }
            Err(message) => (
                Err(format!(
                    "reload refused, the old policy stays in force: {message}"
                )),
                self.prepared().policy.hash.clone(),
            ),
        };
        let message = match &outcome {
            Ok(m) => {
                tracing::info!("{m}");
                m.clone()
            }
            Err(m) => {
                tracing::error!("{m}");
                m.clone()
            }
        };
        let _ = self
            .record(Event::Reload {
                ok: outcome.is_ok(),
                policy_hash: hash,
                message: message.clone(),
            })
            .await;
        crate::sd::notify_ready(&message);
        outcome
    }

    fn load_for_reload(&self) -> Result<(Prepared, String), String> {
        if self.settings.loader.source == crate::loader::PolicySource::Embedded {
            return Err(
                "the daemon serves the embedded demo policy; there is no file to re-read".into(),
            );
        }
        let (prepared, report) = self
            .settings
            .loader
            .load(nix::unistd::geteuid().as_raw(), &self.prepared().secrets)
            .map_err(|e: LoadError| e.to_string())?;
        for warning in prepared.secrets.warnings() {
            tracing::warn!("secrets: {warning}");
        }
        Ok((prepared, report.summary()))
    }

    /// Serve connections from `listener` (the socket of `kind`, non-blocking) until `shutdown`
    /// resolves.
    ///
    /// One thread of its own accepts (`accept_until_stopped`): a connection is
    /// registered with the runtime only once admitted, so a refusal is an `accept4`, a peek, a
    /// credentials lookup, one `send` and a `close` — no task, no wake-up, no epoll registration
    /// — and the accepting competes for the CPU as one thread, not as the runtime's workers.
    pub async fn serve(
        self: Arc<Self>,
        listener: std::os::unix::net::UnixListener,
        kind: SocketKind,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), AcceptStopped> {
        let pool = match kind {
            SocketKind::Agent => self.agent_pool.clone(),
            SocketKind::Approver => self.approver_pool.clone(),
        };
        let failed = |what: String| AcceptStopped { kind, what };
        let (stop_read, stop_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| failed(format!("its stop pipe could not be made: {e}")))?;
        let runtime = tokio::runtime::Handle::current();
        let daemon = self.clone();
        // Dropped when the thread ends, however it ends (a panic too).
        let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
        let acceptor = std::thread::Builder::new()
            .name(format!("verbd-accept-{kind:?}").to_lowercase())
            .spawn(move || {
                let _ended = ended_tx;
                daemon.accept_until_stopped(&listener, &pool, &stop_read, &runtime);
            })
            .map_err(|e| failed(format!("it could not be started: {e}")))?;
        tokio::select! {
            () = shutdown => {
                // The end of the pipe wakes the thread; it closes the listener as it returns.
                drop(stop_write);
                let _ = tokio::task::spawn_blocking(move || acceptor.join()).await;
                Ok(())
            }
            _ = ended => {
                let joined = tokio::task::spawn_blocking(move || acceptor.join()).await;
                Err(failed(match joined {
                    Ok(Err(panic)) => format!(
                        "it panicked: {}",
                        panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default()
                    ),
                    _ => "it stopped accepting".into(),
                }))
            }
        }
    }

    /// The accept thread's loop: every waiting connection in turn, then a `poll` on the
    /// listener and the stop pipe; under a flood that never lets the queue empty, the stop pipe
    /// is still looked at every [`ACCEPTS_BETWEEN_STOP_CHECKS`] connections.
    fn accept_until_stopped(
        self: Arc<Self>,
        listener: &std::os::unix::net::UnixListener,
        pool: &Arc<Pool>,
        stop: &OwnedFd,
        runtime: &tokio::runtime::Handle,
    ) {
        use nix::errno::Errno;
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let stopped = |timeout: PollTimeout| {
            let mut fds = [
                PollFd::new(listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, timeout) {
                Ok(_) => fds[1].any().unwrap_or(true),
                Err(Errno::EINTR) => false,
                Err(_) => true,
            }
        };
        let mut accepted = 0usize;
        loop {
            match accept4(listener, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK) {
                Ok(connection) => {
                    self.admit(connection, pool, runtime);
                    accepted += 1;
                    if accepted.is_multiple_of(ACCEPTS_BETWEEN_STOP_CHECKS)
                        && stopped(PollTimeout::ZERO)
                    {
                        return;
                    }
                }
                Err(Errno::EAGAIN) => {
                    if stopped(PollTimeout::NONE) {
                        return;
                    }
                }
                Err(Errno::EINTR | Errno::ECONNABORTED) => {}
                Err(e) => {
                    // EMFILE and the like: let descriptors free up instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    if stopped(PollTimeout::from(50u16)) {
                        return;
                    }
                }
            }
        }
    }

    /// The peer's credentials from the kernel, then its uid's place in `pool`: served, or
    /// answered `busy` with the limit it hit, before anything of its request is read.
    fn admit(
        self: &Arc<Self>,
        connection: OwnedFd,
        pool: &Arc<Pool>,
        runtime: &tokio::runtime::Handle,
    ) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        // Connected and closed before a byte (a flooder's churn): nothing to read, nobody to
        // answer; no place, no task, no lookup.
        if peer_hung_up(&connection) {
            return;
        }
        let cred = match getsockopt(&connection, sockopt::PeerCredentials) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no peer credentials; dropping connection");
                return;
            }
        };
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::after_accept(cred.uid());
        let limits = PoolLimits::of(pool.kind(), &self.prepared().policy.daemon);
        match pool.admit(cred.uid(), &limits) {
            Ok(admission) => {
                let daemon = self.clone();
                runtime.spawn(async move {
                    let stream = std::os::unix::net::UnixStream::from(connection);
                    match UnixStream::from_std(stream) {
                        Ok(stream) => daemon.handle(stream, cred, admission).await,
                        Err(e) => tracing::warn!(error = %e, "cannot register a connection"),
                    }
                });
            }
            Err(refused) => {
                tracing::debug!(uid = cred.uid(), %refused, "connection refused as busy");
                self.counted.connection_busy();
                let answer = Response::Busy {
                    message: refused.to_string(),
                }
                .encode();
                match self.pacer.pace(cred.uid(), Instant::now()) {
                    Pace::AtOnce => answer_and_close(&connection, &answer),
                    Pace::Held(place) => {
                        runtime.spawn(async move {
                            tokio::time::sleep(pacing::HOLD).await;
                            // The held place first: a peer that reconnects the moment it hears
                            // is then never counted twice (held never exceeds its sockets).
                            drop(place);
                            answer_and_close(&connection, &answer);
                        });
                    }
                }
            }
        }
    }

    async fn handle(
        self: Arc<Self>,
        stream: UnixStream,
        cred: UnixCredentials,
        mut admission: Admission,
    ) {
        // One policy snapshot for the whole request: its limits, then its roles. The line is
        // read first: a connection closed, silent or too large costs no user-database lookup.
        let prepared = self.prepared();
        let limit = prepared.policy.daemon.max_request_bytes;
        let request_timeout = prepared.policy.daemon.request_timeout;
        let (read_half, mut write_half) = stream.into_split();
        let mut reader = BufReader::new(read_half);
        let mut line = Vec::new();
        let read = tokio::time::timeout(
            request_timeout,
            (&mut reader)
                .take(limit as u64 + 1)
                .read_until(b'\n', &mut line),
        )
        .await;
        let request = match read {
            Err(_) => return, // silent or slow client: its own connection only
            Ok(Err(_)) | Ok(Ok(0)) => return,
            Ok(Ok(_)) if line.len() > limit || !line.ends_with(b"\n") && line.len() >= limit => {
                let _ = write_half
                    .write_all(
                        &Response::Error {
                            message: format!("request larger than {limit} bytes"),
                        }
                        .encode(),
                    )
                    .await;
                return;
            }
            Ok(Ok(_)) => protocol::decode_request(&line),
        };
        let caller = identity::caller_from_cred(cred.uid(), cred.gid(), cred.pid()).await;
        let ctx = self.context_under(prepared, caller);
        // The request was read (a refusal is journaled with who asked); a peer matching no role
        // gets nothing else.
        if ctx.roles.is_empty() {
            let response = self.refuse_connection(&ctx).await;
            let _ = write_half.write_all(&response.encode()).await;
            let _ = write_half.shutdown().await;
            return;
        }
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                let response = Response::Error {
                    message: e.to_string(),
                };
                let _ = write_half.write_all(&response.encode()).await;
                let _ = write_half.shutdown().await;
                return;
            }
        };
        // A `wait` may block for minutes: it gives its connection place back for a parked one.
        if matches!(request, Request::Wait { .. }) {
            let limits = PoolLimits::of(admission.kind(), &ctx.prepared.policy.daemon);
            if let Err(refused) = admission.park_for_wait(&limits) {
                let response = Response::Busy {
                    message: refused.to_string(),
                };
                let _ = write_half.write_all(&response.encode()).await;
                let _ = write_half.shutdown().await;
                return;
            }
        }
        let (hung_up, client) = watch::channel(false);
        let cancel = self.cancel_for_connection(client);
        // A caller that asked for `stream` gets a streaming verb's output as `chunk` answers
        // before the last one.
        let (chunks, mut delivered) = match &request {
            Request::Call {
                stream: Some(_), ..
            } => {
                let (sink, delivered) = mpsc::channel(LIVE_CHUNKS_QUEUED);
                (Some(sink), Some(delivered))
            }
            _ => (None, None),
        };
        let write_timeout = ctx.prepared.policy.daemon.request_timeout;
        let mut task = tokio::spawn(self.clone().dispatch(ctx, request, cancel, chunks));
        // The client must not send anything after its line: any byte, the end of the stream or an
        // error means it is gone.
        let hangup = async {
            let mut sink = [0u8; 512];
            loop {
                match reader.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        };
        tokio::pin!(hangup);
        let response = loop {
            tokio::select! {
                finished = &mut task => break finished.unwrap_or_else(|e| Response::Error {
                    message: format!("request task failed: {e}"),
                }),
                () = &mut hangup => {
                    // The task keeps running to its journaled end; it only learns it may stop.
                    hung_up.send_replace(true);
                    return;
                }
                Some(chunk) = async {
                    match delivered.as_mut() {
                        Some(delivered) => delivered.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    // A client that does not read its chunks is treated as gone.
                    let written = tokio::time::timeout(
                        write_timeout,
                        write_half.write_all(&chunk_frame(&chunk)),
                    )
                    .await;
                    if !matches!(written, Ok(Ok(()))) {
                        hung_up.send_replace(true);
                        return;
                    }
                }
            }
        };
        // Chunks the run queued before it ended go before its answer.
        if let Some(delivered) = &mut delivered {
            while let Ok(chunk) = delivered.try_recv() {
                let written =
                    tokio::time::timeout(write_timeout, write_half.write_all(&chunk_frame(&chunk)))
                        .await;
                if !matches!(written, Ok(Ok(()))) {
                    return;
                }
            }
        }
        // The caller's place must be free before it can act on the answer: a client that
        // reconnects the moment it hears must never meet its own finished connection (32
        // one-at-a-time clients of one uid got `busy` answers from that race: the write wakes
        // the client, which can run before this task does again). An answer that fits the
        // socket's send buffer is written without waiting on the peer, so its place goes
        // first; a larger one keeps its place until written (a peer that does not read must
        // not hold unbounded output outside every limit).
        let encoded = response.encode();
        let place_while_writing =
            (encoded.len() > ANSWER_WRITTEN_WITHOUT_WAITING).then_some(admission);
        // A peer that never reads must not hold its task forever.
        let _ = tokio::time::timeout(
            self.prepared().policy.daemon.request_timeout,
            write_half.write_all(&encoded),
        )
        .await;
        drop(place_while_writing);
        let _ = write_half.shutdown().await;
    }

    /// Who `caller` is under the policy in force now.
    fn context(&self, caller: Caller) -> Context {
        self.context_under(self.prepared(), caller)
    }

    /// Who `caller` is under `prepared`.
    fn context_under(&self, prepared: Arc<Prepared>, caller: Caller) -> Context {
        let roles: Vec<Role> = prepared
            .policy
            .roles_of(&caller, self.settings.invoker_uid)
            .into_iter()
            .cloned()
            .collect();
        let record = CallerRecord::new(&caller, roles.iter().map(|r| r.name.clone()).collect());
        Context {
            prepared,
            caller,
            roles,
            record,
        }
    }

    /// The answer to a peer matching no role (journaled).
    async fn refuse_connection(&self, ctx: &Context) -> Response {
        let reason = format!(
            "uid {} ({}) matches no role in the verbd policy; ask the operator to add it to a [roles.*] table",
            ctx.caller.uid,
            ctx.caller.user.as_deref().unwrap_or("no user name")
        );
        let event = Event::ConnectRefused {
            caller: ctx.record.clone(),
            reason: crate::events::Bounded::new(&reason),
        };
        match self
            .record_refusal(
                &ctx.record,
                crate::events::RefusalClass::ConnectRefused,
                "connect_refused",
                event,
            )
            .await
        {
            Ok(()) => Response::Denied { reason },
            Err(e) => journal_failure(&e),
        }
    }

    /// Answer one request from `caller` in-process, exactly as a connection would have it
    /// answered (the socket path adds only reading the line and the peer's credentials).
    /// `hung_up` set to true is the client going away.
    pub async fn respond(
        self: Arc<Self>,
        caller: Caller,
        request: Request,
        hung_up: watch::Receiver<bool>,
    ) -> Response {
        let ctx = self.context(caller);
        if ctx.roles.is_empty() {
            return self.refuse_connection(&ctx).await;
        }
        let cancel = self.cancel_for_connection(hung_up);
        self.dispatch(ctx, request, cancel, None).await
    }

    /// The first records of a daemon's life: `start`, which ends whatever the previous daemon
    /// left open (see `approvals::Book::apply`), then one record per proposal it ended, naming
    /// each in the audit trail.
    pub async fn record_start(&self, interrupted: Interrupted) -> Result<(), JournalError> {
        let prepared = self.prepared();
        self.record(Event::Start {
            version: env!("CARGO_PKG_VERSION").into(),
            policy: prepared.policy.origin.clone(),
            policy_hash: prepared.policy.hash.clone(),
            pid: std::process::id(),
            uid: nix::unistd::getuid().as_raw(),
        })
        .await?;
        for id in interrupted.executing {
            tracing::warn!(
                id,
                "proposal was executing when the daemon stopped: unknown outcome, not re-run"
            );
            self.record(Event::ProposalUnknownOutcome { id }).await?;
        }
        for id in interrupted.never_started {
            self.record(Event::ProposalNotStarted { id, reason: None })
                .await?;
        }
        Ok(())
    }

    async fn dispatch(
        self: Arc<Self>,
        ctx: Context,
        request: Request,
        cancel: Cancel,
        chunks: Option<mpsc::Sender<crate::exec::LiveChunk>>,
    ) -> Response {
        match request {
            Request::List {} => {
                let roles: Vec<&Role> = ctx.roles.iter().collect();
                Response::Verbs {
                    verbs: ctx
                        .prepared
                        .policy
                        .verbs_for(&roles)
                        .map(verb_info)
                        .collect(),
                }
            }
            Request::Call {
                verb,
                args,
                reason,
                idempotency_key,
                stream,
            } => {
                let started = std::time::Instant::now();
                let label = self.verb_label(&ctx, &verb).to_string();
                let response = self
                    .clone()
                    .call(
                        &ctx,
                        call::CallRequest {
                            verb,
                            args,
                            reason,
                            idempotency_key,
                            break_glass: false,
                            stream,
                            chunks,
                        },
                        cancel,
                    )
                    .await;
                self.counted.call(&label, &response, started.elapsed());
                response
            }
            Request::BreakGlass { verb, args, reason } => {
                let started = std::time::Instant::now();
                let label = self.verb_label(&ctx, &verb).to_string();
                let response = self
                    .clone()
                    .call(
                        &ctx,
                        call::CallRequest {
                            verb,
                            args,
                            reason,
                            idempotency_key: None,
                            break_glass: true,
                            stream: None,
                            chunks: None,
                        },
                        cancel,
                    )
                    .await;
                self.counted.call(&label, &response, started.elapsed());
                response
            }
            Request::Status {} => self.status(&ctx).await,
            Request::Pending {} => self.pending(&ctx).await,
            Request::Approve { id, hash } => self.approve(&ctx, id, hash, cancel).await,
            Request::Deny { id, reason } => self.deny(&ctx, id, reason).await,
            Request::Wait { id, timeout_ms } => self.wait(&ctx, id, timeout_ms, cancel).await,
            Request::Result { id } => self.result(&ctx, id).await,
            Request::Resolve { id, outcome, note } => self.resolve(&ctx, id, outcome, note).await,
            Request::Check { path, tool } => self.check(&ctx, path, tool).await,
            Request::Command { command, cwd, tool } => self.command(&ctx, command, cwd, tool).await,
            Request::Reload {} => {
                if let Some(reason) = ctx.prepared.policy.approver_refusal(
                    ctx.caller.uid,
                    &ctx.roles,
                    ApprovalScope::Policy,
                    None,
                ) {
                    return Response::Denied { reason };
                }
                match self.clone().reload().await {
                    Ok(message) => Response::Info {
                        info: serde_json::json!({ "reloaded": true, "message": message }),
                    },
                    Err(message) => Response::Error { message },
                }
            }
        }
    }
}

/// Who is asking, under which policy: fixed for the whole request.
pub(crate) struct Context {
    pub prepared: Arc<Prepared>,
    pub caller: Caller,
    pub roles: Vec<Role>,
    pub record: CallerRecord,
}

impl Context {
    fn role_refs(&self) -> Vec<&Role> {
        self.roles.iter().collect()
    }
}

/// One run to perform: a prepared call, who asked, and what it belongs to.
pub(crate) struct Run {
    pub requester: CallerRecord,
    pub call: PreparedCall,
    pub proposal: Option<u64>,
    pub idempotency_key: Option<String>,
    /// Where a streaming verb's output goes as it comes (its caller asked for `stream`).
    pub chunks: Option<tokio::sync::mpsc::Sender<crate::exec::LiveChunk>>,
}

/// What a new proposal is made of (from `Verdict::Propose` and the request).
pub(crate) struct NewProposal {
    pub call: PreparedCall,
    pub description: String,
    pub category: &'static str,
    pub verb_fingerprint: String,
    pub reason: Option<String>,
    pub idempotency_key: Option<String>,
}

/// The answer to a call that created (or found) a pending proposal.
pub(crate) fn confirm_required(p: &Proposal) -> Response {
    let expires_at = format_rfc3339(time_of_ms(p.expires_ms));
    Response::ConfirmRequired {
        id: p.id,
        hash: p.args_hash.clone(),
        expires_at: expires_at.clone(),
        message: format!(
            "CONFIRM_REQUIRED {id}: `{verb}` is a {cat} action and needs a human's approval. Do not retry or rephrase this call (the same call returns the same proposal). A person approves it with `verbd approve {id} --hash {short}`; wait for the decision with `verbd wait {id}`. The proposal expires at {expires_at}.",
            id = p.id,
            verb = p.verb,
            cat = p.category,
            short = &p.args_hash[..12],
        ),
    }
}

pub(crate) fn time_of_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The answer when a record cannot be written before acting: denied, nothing ran (fail closed).
pub fn journal_failure(e: &JournalError) -> Response {
    tracing::error!(error = %e, "journal write failed; denying");
    Response::Denied {
        reason: format!(
            "the audit journal cannot be written ({e}); verbd denies every call it cannot record. Nothing ran."
        ),
    }
}

/// The answer when a run's end cannot be journaled: it ran, its record is missing.
fn end_not_journaled(e: &JournalError) -> Response {
    tracing::error!(error = %e, "journal write of a run's end failed");
    Response::Error {
        message: format!(
            "the verb ran, but its result could not be journaled ({e}); it counts as an unknown outcome. verbd denies new calls until the journal can be written."
        ),
    }
}

/// A verb as `list` shows it.
pub fn verb_info(verb: &crate::policy::Verb) -> VerbInfo {
    VerbInfo {
        name: verb.name.clone(),
        description: verb.description.clone(),
        category: verb.category_label().into(),
        needs_approval: verb.needs_approval,
        params: verb
            .params
            .values()
            .map(|p| ParamInfo {
                name: p.name.clone(),
                kind: p.kind.describe(),
                required: p.required && p.default.is_none(),
                default: p.default.clone(),
                description: p.description.clone(),
                schema: Some(p.json_schema()),
            })
            .collect(),
    }
}
