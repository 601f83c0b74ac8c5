//! `verbd serve`: the start-up pipeline, as named steps, and the run until a signal.
//!
//! ```text
//! activation → logging → load → state dir → prepare → bind → drop privileges
//!            → journal and replay → self-test gate → start record → listen
//!            → hand back the start's pages (`sys::memory`) → run until signal
//! ```
//!
//! Each step returns a typed [`StartError`] on failure; [`StartError::exit_code`] and
//! [`StartError::status`] are the one place that maps a failure to an exit code and a systemd
//! STATUS line. A configuration error (policy, daemon user, root, bind, state dir, journal that
//! does not verify, self-test) exits 78 (`EX_CONFIG`), which the unit's
//! `RestartPreventExitStatus=78` turns into "stay down until the operator fixes it" instead of a
//! restart loop; an operating-system failure exits 71 (`EX_OSERR`); a journal that cannot be
//! written at start exits 75 (`EX_TEMPFAIL`, a restart may help once there is space). The codes
//! are [`crate::exit`]'s.
//!
//! Invariants: nothing is accepted and READY is not sent before the self-test passed (sockets are
//! bound but not listening until then, invariant 8); a start that fails after binding removes the
//! socket files it created; privileges are dropped before the journal is opened and before any
//! verb can run.
#![forbid(unsafe_code)]

use crate::approvals::{Book, BookSnapshot};
use crate::events::{self, Event};
use crate::exit::{EXIT_CONFIG, EXIT_OSERR, EXIT_SUCCESS, EXIT_TEMPFAIL};
use crate::journal::{self, Journal, JournalConfig, JournalError, Witness};
use crate::loader::{LoadError, Loader, PolicySource, Prepared, Scope};
use crate::paths;
use crate::policy::{Policy, PolicyError};
use crate::privileges::{self, PrivilegeError};
use crate::sd;
use crate::selftest::Report;
use crate::server::admission::SocketKind;
use crate::server::socket::{self, BoundSocket, SocketError};
use crate::server::{Daemon, ServeSettings};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The flags of `verbd serve`.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The policy file (`None`: the embedded demo policy).
    pub policy: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
}

/// Why `serve` did not start (or stopped abnormally).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("socket activation: {0}")]
    Activation(#[from] sd::SdError),
    #[error(
        "systemd passed a socket named {0:?}; verbd serves sockets named `agent` and `approver` (FileDescriptorName=)"
    )]
    UnknownSocketName(String),
    #[error("the policy cannot be used; not serving.\n{0}")]
    Policy(#[from] PolicyError),
    #[error("cannot create the state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot prepare the policy; not serving: {0}")]
    Prepare(#[from] LoadError),
    #[error("{0}")]
    Bind(#[from] SocketError),
    #[error("{0}")]
    Privileges(#[from] PrivilegeError),
    #[error(
        "FAIL journal: {source}\n     fix: run `verbd audit verify --state-dir {state_dir}` to find the damage; never delete records to make this pass\nverbd: the journal does not verify"
    )]
    Journal {
        state_dir: String,
        source: JournalError,
    },
    #[error(
        "FAIL journal: {source}\n     fix: the daemon (uid {uid}) cannot reach or write its state directory {state_dir}. This is not damage to the journal: every directory above the state directory must be searchable by that uid (use the default /var/lib/verbd, or a --state-dir whose parents allow it, e.g. chmod o+x on them)"
    )]
    StateDirDenied {
        state_dir: String,
        uid: u32,
        source: JournalError,
    },
    #[error("{0}")]
    Replay(#[from] events::DecodeError),
    #[error("the self-test failed (see above)")]
    SelfTest(Box<Report>),
    #[error("cannot write the journal at start: {0}")]
    JournalWrite(JournalError),
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        source: std::io::Error,
    },
}

impl StartError {
    /// The exit status of `serve` for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Privileges(e) if !e.is_configuration() => EXIT_OSERR,
            StartError::Os { .. } => EXIT_OSERR,
            StartError::JournalWrite(_) => EXIT_TEMPFAIL,
            StartError::Activation(_)
            | StartError::UnknownSocketName(_)
            | StartError::Policy(_)
            | StartError::StateDir { .. }
            | StartError::StateDirDenied { .. }
            | StartError::Prepare(_)
            | StartError::Bind(_)
            | StartError::Privileges(_)
            | StartError::Journal { .. }
            | StartError::Replay(_)
            | StartError::SelfTest(_) => EXIT_CONFIG,
        }
    }

    /// The STATUS= line systemd shows (`systemctl status verbd`).
    pub fn status(&self) -> String {
        match self {
            StartError::Activation(_) | StartError::UnknownSocketName(_) => {
                "sockets from systemd unusable; not serving".into()
            }
            StartError::Policy(_) => "policy invalid; not serving".into(),
            StartError::StateDir { .. } | StartError::StateDirDenied { .. } => {
                "state directory unusable; not serving".into()
            }
            StartError::Prepare(_) => "policy cannot be prepared; not serving".into(),
            StartError::Bind(_) => "cannot bind the socket; not serving".into(),
            StartError::Privileges(e) if e.is_configuration() => {
                "daemon user misconfigured; not serving".into()
            }
            StartError::Privileges(_) => "privilege drop failed; not serving".into(),
            StartError::Journal { .. } | StartError::Replay(_) => {
                "journal does not verify; not serving".into()
            }
            StartError::SelfTest(report) => report.summary(),
            StartError::JournalWrite(_) => "journal cannot be written; not serving".into(),
            StartError::Os { what, .. } => format!("{what} failed; not serving"),
        }
    }
}

/// Run `verbd serve` and return its exit status: 0 after a clean stop, else the failure's.
pub fn main(options: ServeOptions) -> u8 {
    match run(options) {
        Ok(()) => EXIT_SUCCESS,
        Err(e) => {
            if let StartError::SelfTest(report) = &e {
                crate::eprint_lossy!("{}", report.render());
            }
            crate::eprintln_lossy!("verbd: {e}\nverbd: not serving. Nothing was accepted.");
            sd::notify_status(&e.status());
            e.exit_code()
        }
    }
}

/// The pipeline. Returns after a signal stopped the daemon.
pub fn run(options: ServeOptions) -> Result<(), StartError> {
    let activated = activation()?;
    logging();
    raise_open_files_limit();
    let invoker_uid = nix::unistd::getuid().as_raw();
    let loader = Loader::new(PolicySource::from_flag(options.policy.clone()));
    let policy = loader.compile()?;
    for w in &policy.warnings {
        tracing::warn!("policy: {w}");
    }
    let state_dir = options
        .state_dir
        .clone()
        .or_else(|| policy.daemon.state_dir.clone())
        .unwrap_or_else(paths::default_state_dir);
    create_state_dir(&state_dir)?;
    // From here on the state directory is one of the daemon's private paths: no child reaches it.
    let loader = loader.with_state_dir(state_dir.clone());
    // Secrets are read here, before the privilege drop (they may be root-owned 0600).
    let prepared = loader.prepare(policy, None)?;
    for w in prepared.secrets.warnings() {
        tracing::warn!("secrets: {w}");
    }
    let sockets = bind(
        &prepared.policy,
        activated,
        options.socket.as_deref(),
        &state_dir,
    )?;
    // The witness of published journal heads is opened before the privilege drop, so a
    // root-started daemon keeps it root's (the daemon user only holds the descriptor).
    let witness = Witness::open(&state_dir).map_err(|source| StartError::Journal {
        state_dir: state_dir.display().to_string(),
        source,
    })?;
    privileges::drop_to_daemon_user(&prepared.policy, &state_dir)?;
    let (journal, book) = open_journal(&state_dir, witness)?;
    // From here on every sandboxed child — the self-test's canaries first — is forked by the
    // spawner process, never by the daemon itself (module `spawner`).
    crate::spawner::install().map_err(|e| StartError::Os {
        what: "starting the spawner process",
        source: std::io::Error::other(e.to_string()),
    })?;
    let daemon_uid = nix::unistd::geteuid().as_raw();
    let report = loader.self_test(
        &prepared.policy,
        Some(&prepared.secrets),
        daemon_uid,
        Scope::Serving {
            state_dir: &state_dir,
            socket: sockets.path(),
        },
    );
    if !report.passed() {
        return Err(StartError::SelfTest(Box::new(report)));
    }
    // The policy's and the secrets' own warnings were logged above; the self-test adds its own.
    let logged = prepared.secrets.warnings();
    for w in report
        .warnings
        .iter()
        .filter(|w| !prepared.policy.warnings.contains(w) && !logged.contains(w))
    {
        tracing::warn!("self-test: {w}");
    }
    crate::eprintln_lossy!("verbd: {}", report.summary());
    let settings = ServeSettings {
        state_dir,
        invoker_uid,
        loader,
    };
    run_until_signal(prepared, journal, book, settings, sockets, report.summary())
}

/// Sockets handed over by systemd, taken first: it edits the environment, which is only safe
/// while the process has one thread.
fn activation() -> Result<Vec<sd::ActivatedSocket>, StartError> {
    Ok(sd::activated_sockets()?)
}

/// Log lines go to stderr, in colour only on a terminal and unless `NO_COLOR` is set
/// (no-color.org): a file or journald gets plain text. A stderr nobody reads any more loses the
/// lines, never the daemon.
fn logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(crate::terminal::stderr_wants_colour())
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VERBD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// The soft descriptor limit raised to the hard one (systemd starts services at 1024 of 524288):
/// the daemon never uses `select`, and an eighth of the limit is the budget of refused
/// connections it may hold for a paced `busy` (`server::pacing`). The verbs' children get their
/// own limit from the sandbox.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "cannot raise the descriptor limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the descriptor limit"),
    }
}

/// The state dir, created if missing, then made 0700 through a descriptor that did not follow a
/// symlink (`privileges::prepare_state_dir`).
fn create_state_dir(state_dir: &Path) -> Result<(), StartError> {
    std::fs::create_dir_all(state_dir).map_err(|source| StartError::StateDir {
        path: state_dir.to_path_buf(),
        source,
    })?;
    privileges::prepare_state_dir(state_dir).map_err(|e| StartError::StateDir {
        path: state_dir.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Sockets bound by this process (removed again if the start fails) or adopted from systemd,
/// each with the kind that selects its connection pool.
struct Sockets {
    bound: Vec<(BoundSocket, SocketKind)>,
    adopted: Vec<(UnixListener, SocketKind)>,
    /// The agent socket's path when bound here.
    agent_path: Option<PathBuf>,
}

impl Sockets {
    fn path(&self) -> Option<&Path> {
        self.agent_path.as_deref()
    }

    /// Start accepting: only after the self-test passed.
    fn listen(mut self) -> Result<Listeners, StartError> {
        let mut listeners = std::mem::take(&mut self.adopted);
        let mut paths = Vec::new();
        for (socket, kind) in std::mem::take(&mut self.bound) {
            paths.push(socket.path.clone());
            match socket.listen() {
                Ok(listener) => listeners.push((listener, kind)),
                Err(e) => {
                    remove_sockets(&paths);
                    return Err(e.into());
                }
            }
        }
        Ok(Listeners {
            listeners,
            owned_paths: paths,
            agent_path: self.agent_path.take(),
        })
    }
}

impl Drop for Sockets {
    /// A start that failed after binding leaves no socket file behind.
    fn drop(&mut self) {
        let paths: Vec<PathBuf> = self.bound.iter().map(|(s, _)| s.path.clone()).collect();
        remove_sockets(&paths);
    }
}

fn remove_sockets(paths: &[PathBuf]) {
    for path in paths {
        let _ = std::fs::remove_file(path);
    }
}

/// Listening sockets; the paths of those bound here are removed when the daemon stops.
struct Listeners {
    listeners: Vec<(UnixListener, SocketKind)>,
    owned_paths: Vec<PathBuf>,
    agent_path: Option<PathBuf>,
}

fn bind(
    policy: &Policy,
    activated: Vec<sd::ActivatedSocket>,
    socket_flag: Option<&Path>,
    state_dir: &Path,
) -> Result<Sockets, StartError> {
    let mut sockets = Sockets {
        bound: Vec::new(),
        adopted: Vec::new(),
        agent_path: None,
    };
    if !activated.is_empty() {
        for socket in activated {
            let kind = match socket.name.as_deref() {
                None | Some("agent") | Some("verbd.socket") => SocketKind::Agent,
                Some("approver") | Some("verbd-approve.socket") => SocketKind::Approver,
                Some(other) => return Err(StartError::UnknownSocketName(other.to_string())),
            };
            sockets.adopted.push((socket.listener, kind));
        }
        return Ok(sockets);
    }
    let daemon = &policy.daemon;
    let path = socket_flag
        .map(Path::to_path_buf)
        .or_else(|| daemon.socket.clone())
        .unwrap_or_else(|| paths::socket_path_in(state_dir));
    sockets.bound.push((
        socket::bind(&path, daemon.socket_mode, daemon.socket_group.as_deref())?,
        SocketKind::Agent,
    ));
    sockets.agent_path = Some(path);
    if let Some(approver) = &daemon.approver_socket {
        sockets.bound.push((
            socket::bind(
                approver,
                daemon.socket_mode,
                daemon.approver_socket_group.as_deref(),
            )?,
            SocketKind::Approver,
        ));
    }
    Ok(sockets)
}

/// Open the journal as the daemon user (who keeps appending to it; opening compares the journal
/// with the last head published to the witness and verifies it since the last seal) and rebuild
/// the proposal book from the latest state snapshot and the records after it, streamed: time and
/// memory follow the live state, never the history. A snapshot this version cannot read is
/// passed over loudly for a replay of every record (slower, same book). A journal that does not
/// verify, is missing records the witness saw, or holds a record this version cannot read stops
/// the start: nothing is served on a broken or shortened record.
pub fn open_journal(state_dir: &Path, witness: Witness) -> Result<(Journal, Book), StartError> {
    open_journal_with(JournalConfig::for_daemon(state_dir, witness))
}

/// [`open_journal`] with the journal's settings given (tests snapshot more often).
pub fn open_journal_with(config: JournalConfig) -> Result<(Journal, Book), StartError> {
    let state_dir = &config.state_dir.clone();
    let broken = |source: JournalError| {
        // Only the directory itself: an unreadable journal file inside it stays a journal
        // problem (its owner, the daemon's uid, could have made it so).
        let denied = matches!(
            &source,
            JournalError::Io { what: "state directory", source: error, .. }
                if error.kind() == std::io::ErrorKind::PermissionDenied
        );
        if denied {
            StartError::StateDirDenied {
                state_dir: state_dir.display().to_string(),
                uid: nix::unistd::geteuid().as_raw(),
                source,
            }
        } else {
            StartError::Journal {
                state_dir: state_dir.display().to_string(),
                source,
            }
        }
    };
    let journal = Journal::open_with(config).map_err(broken)?;
    let from_snapshot = match journal.replay::<BookSnapshot>() {
        Ok(mut records) => match records
            .snapshot
            .take()
            .map(|s| (s.seq, Book::from_snapshot(s.state)))
        {
            Some((seq, Err(reason))) => {
                tracing::warn!(seq, %reason, "the journal's state snapshot is unreadable; replaying every record");
                None
            }
            Some((_, Ok(book))) => Some((book, records)),
            None => None,
        },
        Err(JournalError::Snapshot { seq, reason }) => {
            tracing::warn!(seq, %reason, "the journal's state snapshot is unreadable; replaying every record");
            None
        }
        Err(source) => return Err(broken(source)),
    };
    match from_snapshot {
        Some((mut book, records)) => {
            apply_records(&mut book, records, state_dir)?;
            Ok((journal, book))
        }
        None => {
            let mut book = Book::new();
            apply_records(&mut book, journal.replay_all().map_err(broken)?, state_dir)?;
            Ok((journal, book))
        }
    }
}

/// Apply the replayed records to `book` in order; the first problem of the replay stops it.
fn apply_records<S>(
    book: &mut Book,
    mut records: journal::Replay<S>,
    state_dir: &Path,
) -> Result<(), StartError> {
    for record in records.by_ref() {
        if let Some(event) = events::decode(record.seq, &record.event)? {
            let time = journal::parse_rfc3339(&record.time).unwrap_or(std::time::UNIX_EPOCH);
            if let Err(conflict) = book.apply(record.seq, time, &event) {
                tracing::error!(%conflict, "journal replay: an event did not fit the proposal book");
            }
        }
    }
    records.finish().map_err(|source| StartError::Journal {
        state_dir: state_dir.display().to_string(),
        source,
    })
}

fn os(what: &'static str) -> impl FnOnce(std::io::Error) -> StartError {
    move |source| StartError::Os { what, source }
}

/// Journal the start, listen, and serve until SIGTERM or SIGINT; SIGHUP reloads. Then stop accepting, let running verbs finish
/// within the grace period, cancel the rest (journaled), and journal the stop.
fn run_until_signal(
    prepared: Prepared,
    journal: Journal,
    book: Book,
    settings: ServeSettings,
    sockets: Sockets,
    summary: String,
) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(os("starting the async runtime"))?;
    let mut owned_paths = Vec::new();
    let result = runtime.block_on(serve_async(
        prepared,
        journal,
        book,
        settings,
        sockets,
        summary,
        &mut owned_paths,
    ));
    runtime.shutdown_timeout(Duration::from_secs(2));
    remove_sockets(&owned_paths);
    result
}

async fn serve_async(
    prepared: Prepared,
    journal: Journal,
    book: Book,
    settings: ServeSettings,
    sockets: Sockets,
    summary: String,
    owned_paths: &mut Vec<PathBuf>,
) -> Result<(), StartError> {
    let origin = prepared.policy.origin.clone();
    let grace = prepared.policy.daemon.shutdown_grace;
    let state_dir = settings.state_dir.clone();
    let interrupted = book.interrupted();
    // The stop and reload signals are caught from here on, before the start record and the
    // listen: a SIGTERM that arrives once the socket accepts (or while the start record is
    // written) stops the daemon the graceful way, never by the signal's default action.
    let mut signals = StopSignals::install()?;
    let daemon = Daemon::new(prepared, journal, book, settings);
    daemon
        .record_start(interrupted)
        .await
        .map_err(StartError::JournalWrite)?;
    // Roles a killed daemon minted and never dropped: dropped now, beside serving (a database
    // that does not answer must not keep the daemon from starting; each failure is journaled).
    let sweeper = daemon.clone();
    tokio::spawn(async move { sweeper.drop_owed_credentials().await });
    // Listen only now: a daemon that cannot write its start record never accepts anyone.
    let listeners = sockets.listen()?;
    owned_paths.clone_from(&listeners.owned_paths);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut serving = Vec::new();
    // A socket no longer served (its accept thread ended) stops the daemon, loudly.
    let (deaf_tx, mut deaf) = tokio::sync::mpsc::channel(2);
    for (listener, kind) in listeners.listeners {
        let mut rx = stop_rx.clone();
        let deaf_tx = deaf_tx.clone();
        let serve = daemon.clone().serve(listener, kind, async move {
            let _ = rx.wait_for(|stop| *stop).await;
        });
        serving.push(tokio::spawn(async move {
            if let Err(stopped) = serve.await {
                let _ = deaf_tx.send(stopped).await;
            }
        }));
    }
    drop(deaf_tx);
    match &listeners.agent_path {
        Some(path) => crate::eprintln_lossy!(
            "verbd: serving {origin} on {} (state dir {})",
            path.display(),
            state_dir.display()
        ),
        None => crate::eprintln_lossy!(
            "verbd: serving {origin} on sockets from systemd (state dir {})",
            state_dir.display()
        ),
    }
    sd::notify_ready(&format!("serving {origin}; {summary}"));
    release_pages("start");
    // After a quiet spell, the pages the calls before it touched go back too.
    let idle = daemon.clone();
    tokio::spawn(async move {
        let mut watch =
            crate::server::idle::IdleWatch::new(idle.connections_accepted(), Instant::now());
        let mut tick = tokio::time::interval(crate::server::idle::IDLE_CHECK_INTERVAL);
        loop {
            tick.tick().await;
            if watch.release_due(
                idle.connections_accepted(),
                idle.executions_in_flight() > 0,
                Instant::now(),
            ) {
                release_pages("calls before a quiet spell");
            }
        }
    });
    // An idle daemon still closes its journal epoch within its time limit.
    let sealer = daemon.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        loop {
            tick.tick().await;
            if let Err(e) = sealer.seal_journal(false).await {
                tracing::error!(error = %e, "journal epoch could not be sealed; calls are denied until it can");
            }
        }
    });
    // Coalesced refusals and mappings are journaled within a second of their window's end.
    let flusher = daemon.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            flusher.flush_coalesced(false).await;
        }
    });
    if let Some(interval) = sd::watchdog_interval() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                sd::notify_watchdog();
            }
        });
    }
    let (reason, deaf) = tokio::select! {
        reason = signals.wait_for_stop(&daemon) => (reason, None),
        Some(stopped) = deaf.recv() => {
            tracing::error!("{stopped}; stopping");
            ("a socket was no longer served", Some(stopped))
        }
    };
    sd::notify_stopping();
    let _ = stop_tx.send(true);
    for task in serving {
        let _ = task.await;
    }
    // Let running verbs finish up to the grace period; then cancel the rest (each kills its
    // process group and journals the cancellation) and give them a moment to record it.
    let deadline = tokio::time::Instant::now() + grace;
    while daemon.executions_in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let in_flight = daemon.executions_in_flight();
    if in_flight > 0 {
        daemon.cancel_all();
        let recorded = tokio::time::Instant::now() + Duration::from_secs(5);
        while daemon.executions_in_flight() > 0 && tokio::time::Instant::now() < recorded {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    daemon.flush_coalesced(true).await;
    let _ = daemon
        .record(Event::Stop {
            reason: if in_flight > 0 {
                format!(
                    "{reason}; killed {in_flight} running verb(s) after the {}s grace period",
                    grace.as_secs()
                )
            } else {
                reason.to_string()
            },
            in_flight,
        })
        .await;
    if let Err(e) = daemon.seal_journal(true).await {
        tracing::error!(error = %e, "the journal's last epoch could not be sealed");
    }
    crate::eprintln_lossy!("verbd: stopped ({reason})");
    match deaf {
        None => Ok(()),
        Some(stopped) => Err(StartError::Os {
            what: "serving a socket",
            source: std::io::Error::other(stopped),
        }),
    }
}

/// Hands back the pages the start-up or a reload touched — the policy compiler, the self-test,
/// the argument parser — or the calls before a quiet spell (`sys::memory`): what the next call
/// uses comes back on its own.
fn release_pages(after: &str) {
    match crate::sys::memory::release_clean_pages() {
        Ok(released) => tracing::debug!(
            mappings = released.mappings,
            kib = released.kib,
            "released the pages the {after} touched"
        ),
        Err(e) => tracing::warn!(error = %e, "could not release the pages the {after} touched"),
    }
}

/// SIGTERM, SIGINT (stop) and SIGHUP (reload), caught by the runtime once installed.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<Self, StartError> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind| signal(kind).map_err(os("installing signal handlers"));
        Ok(Self {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// Reload on each SIGHUP until SIGTERM or SIGINT; a signal that came before the call counts.
    async fn wait_for_stop(&mut self, daemon: &std::sync::Arc<Daemon>) -> &'static str {
        loop {
            tokio::select! {
                _ = self.term.recv() => break "SIGTERM",
                _ = self.int.recv() => break "SIGINT",
                _ = self.hup.recv() => match daemon.clone().reload().await {
                    Ok(message) | Err(message) => {
                        tracing::info!("reload: {message}");
                        release_pages("reload");
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_start_failure_maps_to_one_exit_code_and_status() {
        let io = || std::io::Error::from_raw_os_error(libc::EACCES);
        let cases: Vec<(StartError, u8, &str)> = vec![
            (
                StartError::UnknownSocketName("x".into()),
                EXIT_CONFIG,
                "sockets from systemd",
            ),
            (
                StartError::StateDir {
                    path: "/x".into(),
                    source: io(),
                },
                EXIT_CONFIG,
                "state directory",
            ),
            (
                StartError::Bind(SocketError::NotASocket("/x".into())),
                EXIT_CONFIG,
                "cannot bind",
            ),
            (
                StartError::Privileges(PrivilegeError::NoSuchUser("verbd".into())),
                EXIT_CONFIG,
                "daemon user",
            ),
            (
                StartError::Privileges(PrivilegeError::RootRefused),
                EXIT_CONFIG,
                "daemon user",
            ),
            (
                StartError::Privileges(PrivilegeError::UserIsRoot("root".into())),
                EXIT_CONFIG,
                "daemon user",
            ),
            (
                StartError::Privileges(PrivilegeError::Syscall {
                    what: "setresuid",
                    source: io(),
                }),
                EXIT_OSERR,
                "privilege drop",
            ),
            (
                StartError::Os {
                    what: "starting the async runtime",
                    source: io(),
                },
                EXIT_OSERR,
                "async runtime",
            ),
            (
                StartError::JournalWrite(JournalError::NotAnObject),
                EXIT_TEMPFAIL,
                "journal cannot be written",
            ),
        ];
        for (error, code, status) in cases {
            assert_eq!(error.exit_code(), code, "{error}");
            assert!(
                error.status().contains(status),
                "{error}: {}",
                error.status()
            );
            assert!(!error.status().contains('\n'));
        }
    }
}
