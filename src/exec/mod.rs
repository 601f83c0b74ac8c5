//! Executor: runs one already-rendered argv in a sandboxed child and captures its output.
//!
//! Invariants: the program and arguments come only from a [`RenderedArgv`] (no shell, no string
//! concatenation); the environment is cleared and rebuilt from the verb's declared env plus a
//! fixed PATH; stdin is /dev/null; the child leads its own session, so the timeout, a client that
//! goes away, or the end of the call kills the whole process group (as whoever may: a `run_as`
//! child of another uid too, see `crate::sandbox::kill`; a group that could not be killed fails
//! the call with [`ExecError::Unkillable`], never reported killed or timed out); stdout and stderr are drained
//! to the end so the child never blocks on a full pipe, but only `max_output` bytes of each are
//! kept; output is scrubbed of secrets before it leaves this module. A stream that was cut — by
//! `max_output`, the timeout, a signal that ended the child, or a failed read — is finished with
//! [`ScrubStream::finish_cut`]: its last bytes are withheld whatever they contain, and
//! `truncated`/`withheld` say so (see `crate::scrub`, "Not an oracle").
//! A streaming verb's run ([`LiveRun`]) scrubs each stream as a live stream (complete lines
//! go out as they come, see `crate::scrub`, "Live streams"), hands each scrubbed piece to its
//! caller while the child runs, and ends at the first of: the child's exit, `max_duration`,
//! `max_lines` lines of stdout and stderr together, `max_output` bytes of one stream; a bound
//! kills the process group and is reported in [`ExecOutcome::ended_by`]. What it delivered is
//! exactly what it keeps in [`Captured::bytes`].
//! Secret placeholders are resolved here and nowhere else; `${secret_file:…}` copies are sealed
//! memfds passed to this child only (`/proc/self/fd/N`) and live only for the duration of the
//! call. Path parameters are pinned again here (`crate::pinned`), all of them before anything
//! is created or started: the child gets each descriptor as `/proc/self/fd/N`, and a path that
//! resolves differently than when it was checked refuses the run. A new entry (a parameter with
//! `create = true`) is then created by this module as an empty file — only inside the profile's
//! write roots and never under a protected name — and handed over as that file, never by name.
#![forbid(unsafe_code)]

use crate::pinned::{NewFileAttributes, Pinned, PinnedPath};
use crate::policy::StreamBounds;
use crate::policy::template::{ArgPart, PathArg, RenderedArg, RenderedArgv};
use crate::protocol::{ExitInfo, OutputStream, StreamEnd};
use crate::sandbox::PreparedSandbox;
use crate::scrub::{ScrubStream, Scrubber};
use crate::secrets::{SecretCopy, SecretStore, SecretValue};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, mpsc};

/// How long, after the timeout, the output pipes may stay open before they are abandoned.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// The PATH every child gets.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything needed to run one call.
pub struct ExecRequest<'a> {
    pub argv: &'a RenderedArgv,
    pub env: &'a [(String, RenderedArg)],
    pub cwd: &'a Path,
    pub timeout: Duration,
    pub max_output: u64,
    pub sandbox: &'a PreparedSandbox,
    pub secrets: &'a SecretStore,
    pub scrubber: &'a Scrubber,
    /// Variables the daemon sets for this call alone, after the verb's env (a per-call database
    /// role's `PGUSER`/`PGPASSWORD`); a secret one is also cut out of the output.
    pub credentials: &'a [CallCredential<'a>],
    /// Bytes for the child's stdin (the approval notifier gets the proposal); /dev/null if `None`.
    pub stdin: Option<Vec<u8>>,
    /// Set for a streaming verb: its bounds (`timeout` is then ignored) and its caller's sink.
    pub live: Option<LiveRun>,
}

/// A streaming verb's run.
pub struct LiveRun {
    pub bounds: StreamBounds,
    /// Where the scrubbed output goes as it comes; `None` when the caller takes one answer.
    pub chunks: Option<mpsc::Sender<LiveChunk>>,
}

/// Scrubbed output of a streaming verb, as delivered.
#[derive(Debug, Clone)]
pub struct LiveChunk {
    pub stream: OutputStream,
    pub bytes: Vec<u8>,
}

/// One variable of a call's own credential (see [`ExecRequest::credentials`]).
pub struct CallCredential<'a> {
    pub key: &'static str,
    pub value: &'a [u8],
    /// Cut out of the output as `[REDACTED:KEY]` (the policy's scrubber does not know it).
    pub secret: bool,
}

impl<'a> CallCredential<'a> {
    /// A secret variable.
    pub fn secret(key: &'static str, value: &'a SecretValue) -> CallCredential<'a> {
        CallCredential {
            key,
            value: value.expose(),
            secret: true,
        }
    }
}

/// What happened to the child.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub exit: ExitInfo,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
    /// The bound that ended a streaming verb's run; `None` when its child exited by itself.
    pub ended_by: Option<StreamEnd>,
    /// Each path parameter as the child saw it (`/proc/self/fd/N`) and the path it stands for:
    /// what [`with_real_paths`] puts back into text shown to a person.
    pub pinned: Vec<(String, PathBuf)>,
}

/// `text` (a program's output) with every `/proc/self/fd/N` that was a path parameter of its run
/// written as the path it stands for: a dry run that lists what it would delete shows the
/// approver `/srv/data/a.bin`, not `/proc/self/fd/5/a.bin`. Only whole descriptor numbers are
/// replaced (`/proc/self/fd/15` is not `/proc/self/fd/1` followed by `5`).
pub fn with_real_paths(text: &str, pinned: &[(String, PathBuf)]) -> String {
    const PREFIX: &str = "/proc/self/fd/";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let name = &rest[at..at + PREFIX.len() + digits];
        match pinned.iter().find(|(seen, _)| digits > 0 && seen == name) {
            Some((_, path)) => out.push_str(&path.display().to_string()),
            None => out.push_str(name),
        }
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

/// One captured, scrubbed output stream.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// Scrubbed bytes kept (at most the cap, plus redaction markers).
    pub bytes: Vec<u8>,
    /// Bytes the child wrote in total.
    pub total: u64,
    /// The stream was cut (`max_output`, timeout, signal, read error): `bytes` is not all of it.
    pub truncated: bool,
    /// Bytes kept before the cut but withheld from the caller (0 unless `truncated`).
    pub withheld: u64,
}

impl Captured {
    /// Hex sha256 of the scrubbed bytes the caller receives.
    pub fn sha256(&self) -> String {
        crate::digest::sha256_hex(&self.bytes)
    }
}

/// Why a child could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("secret `{0}` is not loaded")]
    MissingSecret(String),
    #[error("cannot create the private copy of secret `{name}`: {source}")]
    SecretCopy {
        name: String,
        source: crate::secrets::SecretError,
    },
    #[error(
        "path parameter {}: {source}; nothing was executed",
        path.display()
    )]
    PathPin {
        path: PathBuf,
        source: crate::pinned::PinError,
    },
    #[error(
        "path parameter {} now resolves to a {now}, but the call was checked (and approved, if it needed approval) when it resolved to a {was}; nothing was executed (make the call again to check the new target)",
        path.display()
    )]
    PathChanged {
        path: PathBuf,
        was: crate::pinned::Resolution,
        now: crate::pinned::Resolution,
    },
    #[error(
        "path parameter {}: {reason}; nothing was created or executed",
        path.display()
    )]
    NewFileRefused { path: PathBuf, reason: String },
    #[error("sandbox setup failed: {0}")]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("the sandbox could not be applied in the child (stage: {stage}); nothing was executed")]
    SandboxStage { stage: String },
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("waiting for the child failed: {0}")]
    Wait(std::io::Error),
    #[error(
        "the verb's process group could not be killed ({0}); it may still be running, and how it ends is unknown"
    )]
    Unkillable(crate::sandbox::kill::KillError),
}

/// The child's whole process group (its pid: it leads its own session), whose processes run as
/// `run_as` or as the daemon. Killed when dropped, whatever path the call took (normal end,
/// timeout, or the caller's future being dropped because the client went away).
struct ProcessGroupGuard {
    pgid: i32,
    run_as: Option<u32>,
}

impl ProcessGroupGuard {
    /// `SIGKILL` to every process of the group, as whoever may (`crate::sandbox::kill`, which
    /// logs a failure).
    fn kill(&self) -> Result<(), crate::sandbox::kill::KillError> {
        crate::sandbox::kill::sigkill(crate::sandbox::kill::Target::Group(self.pgid), self.run_as)
    }
}

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        // A failure is logged by `kill`; a drop has no one else to tell.
        let _ = self.kill();
    }
}

/// Descriptors handed to one child: the pinned path parameters (one per path) and the secret
/// copies of its call. They stay open in the daemon until the child has exited.
#[derive(Default)]
struct Handed {
    secret_copies: Vec<(String, SecretCopy)>,
    paths: Vec<(PathBuf, PinnedPath)>,
}

impl Handed {
    fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.secret_copies
            .iter()
            .map(|(_, c)| c.raw_fd())
            .chain(self.paths.iter().map(|(_, pinned)| pinned.raw_fd()))
            .collect()
    }
}

fn resolve(
    arg: &RenderedArg,
    secrets: &SecretStore,
    handed: &mut Handed,
) -> Result<OsString, ExecError> {
    let mut out: Vec<u8> = Vec::new();
    for part in arg.parts() {
        match part {
            ArgPart::Text(t) => out.extend_from_slice(t.as_bytes()),
            ArgPart::Secret(name) => {
                let value = secrets
                    .get(name)
                    .ok_or_else(|| ExecError::MissingSecret(name.clone()))?;
                out.extend_from_slice(value.expose());
            }
            ArgPart::SecretFile(name) => {
                if let Some((_, copy)) = handed.secret_copies.iter().find(|(n, _)| n == name) {
                    out.extend_from_slice(copy.argv_text().as_bytes());
                    continue;
                }
                let value = secrets
                    .get(name)
                    .ok_or_else(|| ExecError::MissingSecret(name.clone()))?;
                let copy =
                    SecretCopy::create(name, value).map_err(|source| ExecError::SecretCopy {
                        name: name.clone(),
                        source,
                    })?;
                out.extend_from_slice(copy.argv_text().as_bytes());
                handed.secret_copies.push((name.clone(), copy));
            }
            ArgPart::Path(arg) => {
                let (_, pinned) = handed
                    .paths
                    .iter()
                    .find(|(path, _)| *path == arg.path)
                    .expect("every path parameter is pinned before argv is built");
                out.extend_from_slice(pinned.argv_text().as_bytes());
            }
        }
    }
    Ok(OsStr::from_bytes(&out).to_os_string())
}

/// Pins every path parameter of the call again (each path once, however often it is used),
/// compares each with what was checked, and only when all match creates the new files among
/// them. So a refused run creates nothing.
fn pin_paths<'a>(
    args: impl Iterator<Item = &'a PathArg>,
    sandbox: &PreparedSandbox,
) -> Result<Vec<(PathBuf, PinnedPath)>, ExecError> {
    let mut pinned: Vec<(PathBuf, Pinned)> = Vec::new();
    for arg in args {
        if pinned.iter().any(|(path, _)| *path == arg.path) {
            continue;
        }
        let now =
            crate::pinned::pin(&arg.root, &arg.path).map_err(|source| ExecError::PathPin {
                path: arg.path.clone(),
                source,
            })?;
        if now.resolution() != arg.resolution {
            return Err(ExecError::PathChanged {
                path: arg.path.clone(),
                was: arg.resolution,
                now: now.resolution(),
            });
        }
        pinned.push((arg.path.clone(), now));
    }
    let spec = sandbox.spec();
    for (path, entry) in &pinned {
        if let Pinned::New(_) = entry {
            may_create(spec, path)?;
        }
    }
    let attributes = NewFileAttributes {
        mode: 0o666 & !spec.umask.unwrap_or(crate::sandbox::DEFAULT_UMASK),
        owner: spec.run_as.map(|r| (r.uid, r.gid)),
    };
    pinned
        .into_iter()
        .map(|(path, entry)| match entry {
            Pinned::Existing(file) => Ok((path, file)),
            Pinned::New(entry) => entry
                .create_file(attributes)
                .map(|file| (path.clone(), file))
                .map_err(|source| ExecError::PathPin { path, source }),
        })
        .collect()
}

/// The daemon creates a new file outside any sandbox, so it checks what the sandbox would: the
/// file lies inside one of the profile's write roots and its name is not protected.
fn may_create(spec: &crate::sandbox::SandboxSpec, path: &Path) -> Result<(), ExecError> {
    let refuse = |reason: String| ExecError::NewFileRefused {
        path: path.to_path_buf(),
        reason,
    };
    if !spec.write.iter().any(|root| path.starts_with(root)) {
        return Err(refuse(format!(
            "a new file may be created only inside a write root of sandbox `{}`, and this is not (a dry run has none)",
            spec.name
        )));
    }
    if let Some(hit) = spec.protected.match_path(path) {
        return Err(refuse(format!("{hit}: never created for a verb")));
    }
    Ok(())
}

/// One stream read to its end but not yet finished: whether it was cut is known only once the
/// child's fate is.
struct Capture<'a> {
    stream: ScrubStream<'a>,
    captured: Captured,
    /// A live run's stream: where its last piece goes.
    live: Option<Option<mpsc::Sender<LiveChunk>>>,
    which: OutputStream,
}

impl Capture<'_> {
    /// Finishes the stream: withholding a tail if it was cut here or by how the child ended.
    async fn finish(mut self, child_cut: bool) -> Captured {
        if let Some(mut chunks) = self.live.take() {
            if self.captured.truncated || child_cut {
                let cut = self.stream.finish_live_cut();
                self.captured.bytes.extend(cut.bytes);
                self.captured.withheld = cut.withheld;
                self.captured.truncated = true;
            } else {
                let rest = self.stream.finish();
                deliver(&mut chunks, self.which, &rest, tokio::time::Instant::now()).await;
                self.captured.bytes.extend(rest);
            }
            return self.captured;
        }
        if self.captured.truncated || child_cut {
            let cut = self.stream.finish_cut();
            self.captured.bytes.extend(cut.bytes);
            self.captured.withheld = cut.withheld;
            self.captured.truncated = true;
        } else {
            self.captured.bytes.extend(self.stream.finish());
        }
        self.captured
    }
}

async fn capture<'a, R: AsyncRead + Unpin>(
    mut reader: R,
    cap: u64,
    scrubber: &'a Scrubber,
) -> Capture<'a> {
    let mut stream = scrubber.stream();
    let mut captured = Captured::default();
    // Read into spare capacity (`read_buf`): a zeroed 64 KiB buffer per stream was a memset
    // of 128 KiB on every call.
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        let n = match reader.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => {
                // The rest of the stream is lost: a cut like any other.
                captured.truncated = true;
                break;
            }
        };
        let room = cap.saturating_sub(captured.total);
        captured.total += n as u64;
        if room == 0 {
            captured.truncated = true;
            continue; // keep draining so the child never blocks on a full pipe
        }
        let keep = (n as u64).min(room) as usize;
        if keep < n {
            captured.truncated = true;
        }
        captured.bytes.extend(stream.push(&buf[..keep]));
    }
    Capture {
        stream,
        captured,
        live: None,
        which: OutputStream::Stdout,
    }
}

/// What the two streams of one live run share: the line count, and the first bound reached.
struct LiveState {
    max_lines: Option<u64>,
    lines: AtomicU64,
    ended_by: Mutex<Option<StreamEnd>>,
    /// Wakes the reaper to kill the child once a bound is reached.
    stop: Notify,
    /// Sends a chunk at most until then (a caller that does not read must not stall the run).
    deadline: tokio::time::Instant,
}

impl LiveState {
    fn ended_by(&self) -> Option<StreamEnd> {
        *self.ended_by.lock().expect("live state lock")
    }

    /// Records `bound` unless one was already reached, and stops the child.
    fn end(&self, bound: StreamEnd) {
        self.ended_by
            .lock()
            .expect("live state lock")
            .get_or_insert(bound);
        self.stop.notify_one();
    }

    /// How much of `data` is within the line bound; reaching it ends the run.
    fn within_lines<'d>(&self, data: &'d [u8]) -> &'d [u8] {
        let Some(max_lines) = self.max_lines else {
            return data;
        };
        let newlines = data.iter().filter(|&&b| b == b'\n').count() as u64;
        let before = self.lines.fetch_add(newlines, Ordering::SeqCst);
        if before + newlines < max_lines {
            return data;
        }
        self.end(StreamEnd::MaxLines);
        let allowed = max_lines.saturating_sub(before) as usize;
        if allowed == 0 {
            return &[];
        }
        let end = data
            .iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'\n')
            .nth(allowed - 1)
            .map_or(data.len(), |(at, _)| at + 1);
        &data[..end]
    }
}

/// Reads one stream of a live run: scrubs it as a live stream and delivers what may go, until
/// the stream ends; after a bound, the rest is read and dropped (so the child never blocks).
async fn capture_live<'a, R: AsyncRead + Unpin>(
    mut reader: R,
    which: OutputStream,
    cap: u64,
    scrubber: &'a Scrubber,
    live: &LiveState,
    chunks: Option<mpsc::Sender<LiveChunk>>,
) -> Capture<'a> {
    let mut stream = scrubber.live_stream();
    let mut captured = Captured::default();
    let mut chunks = chunks;
    // Read into spare capacity (`read_buf`): a zeroed 64 KiB buffer per stream was a memset
    // of 128 KiB on every call.
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        let n = match reader.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => {
                captured.truncated = true;
                break;
            }
        };
        let room = cap.saturating_sub(captured.total);
        captured.total += n as u64;
        if live.ended_by().is_some() {
            captured.truncated = true;
            continue;
        }
        let mut data = &buf[..n];
        if data.len() as u64 >= room {
            data = &data[..room as usize];
            live.end(StreamEnd::MaxOutput);
        }
        let data = live.within_lines(data);
        let emitted = stream.push(data);
        deliver(&mut chunks, which, &emitted, live.deadline).await;
        captured.bytes.extend(emitted);
    }
    Capture {
        stream,
        captured,
        live: Some(chunks),
        which,
    }
}

/// Hands `bytes` to the caller's sink; a sink that stays full until the run's deadline (or
/// whose caller went away) gets nothing more.
async fn deliver(
    chunks: &mut Option<mpsc::Sender<LiveChunk>>,
    stream: OutputStream,
    bytes: &[u8],
    deadline: tokio::time::Instant,
) {
    let (Some(sink), false) = (chunks.as_ref(), bytes.is_empty()) else {
        return;
    };
    let chunk = LiveChunk {
        stream,
        bytes: bytes.to_vec(),
    };
    let sent = tokio::time::timeout_at(deadline + PIPE_GRACE, sink.send(chunk)).await;
    if !matches!(sent, Ok(Ok(()))) {
        *chunks = None;
    }
}

/// Run the call. Returns after the child exited (or was killed) and both pipes are drained.
pub async fn run(req: ExecRequest<'_>) -> Result<ExecOutcome, ExecError> {
    let path_args = req
        .argv
        .args()
        .iter()
        .chain(req.env.iter().map(|(_, value)| value))
        .flat_map(RenderedArg::parts)
        .filter_map(|part| match part {
            ArgPart::Path(arg) => Some(arg),
            _ => None,
        });
    let mut handed = Handed {
        paths: pin_paths(path_args, req.sandbox)?,
        ..Handed::default()
    };
    let mut args = Vec::with_capacity(req.argv.args().len());
    for arg in req.argv.args() {
        args.push(resolve(arg, req.secrets, &mut handed)?);
    }
    let mut env: Vec<(OsString, OsString)> = vec![("PATH".into(), CHILD_PATH.into())];
    for (key, value) in req.env {
        let value = resolve(value, req.secrets, &mut handed)?;
        env.retain(|(name, _)| name.as_os_str() != OsStr::new(key));
        env.push((key.into(), value));
    }
    for credential in req.credentials {
        env.retain(|(name, _)| name.as_os_str() != OsStr::new(credential.key));
        env.push((
            credential.key.into(),
            OsStr::from_bytes(credential.value).to_os_string(),
        ));
    }
    let spawn_error = |source: std::io::Error| match crate::sandbox::stage_of_spawn_error(&source) {
        Some(stage) => ExecError::SandboxStage {
            stage: stage.to_string(),
        },
        None => ExecError::Spawn {
            program: req.argv.program().to_path_buf(),
            source,
        },
    };
    let started = Instant::now();
    let mut child = match crate::spawner::installed() {
        Some(spawner) => spawn_through(spawner, &req, &args, &env, &handed)
            .await
            .map_err(|e| match e {
                Through::Io(source) => spawn_error(source),
                Through::Sandbox(e) => ExecError::Sandbox(e),
            })?,
        None => {
            let mut cmd = tokio::process::Command::new(req.argv.program());
            cmd.args(&args)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .current_dir(req.cwd)
                .stdin(if req.stdin.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            req.sandbox.install_keeping(&mut cmd, handed.raw_fds())?;
            Child::InProcess(cmd.spawn().map_err(spawn_error)?)
        }
    };
    // The child called setsid(), so its pid is its process group id.
    let group = ProcessGroupGuard {
        pgid: child.id() as i32,
        run_as: req.sandbox.spec().run_as.map(|r| r.uid),
    };
    if let (Some(data), Some(mut pipe)) = (req.stdin, child.take_stdin()) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = pipe.write_all(&data).await;
        });
    }
    let (stdout, stderr) = child.take_output();
    let scrubber = req.scrubber;
    let cap = req.max_output;
    let kill_group = || group.kill().map_err(ExecError::Unkillable);
    let timeout = req
        .live
        .as_ref()
        .map_or(req.timeout, |live| live.bounds.max_duration);
    let deadline = tokio::time::Instant::now() + timeout;
    let live = req.live.map(|run| {
        let state = LiveState {
            max_lines: run.bounds.max_lines,
            lines: AtomicU64::new(0),
            ended_by: Mutex::new(None),
            stop: Notify::new(),
            deadline,
        };
        (state, run.chunks)
    });
    let reap = async {
        let stop = async {
            match &live {
                Some((state, _)) => state.stop.notified().await,
                None => std::future::pending().await,
            }
        };
        let waited = tokio::select! {
            status = child.wait() => Some(status),
            () = tokio::time::sleep_until(deadline) => None,
            () = stop => None,
        };
        // The leader is gone, out of time or past a bound: kill its whole group so every pipe
        // closes. A group that survives ends the call as failed, never as killed or timed out.
        if let Err(e) = kill_group() {
            return (Err(e), false);
        }
        match waited {
            Some(status) => (status.map_err(ExecError::Wait), false),
            None => {
                let timed_out = match &live {
                    Some((state, _)) => {
                        state.end(StreamEnd::MaxDuration);
                        false
                    }
                    None => true,
                };
                (child.wait().await.map_err(ExecError::Wait), timed_out)
            }
        }
    };
    // Output captured before a timeout is kept. Daemon children cannot leave their process
    // group (setsid/setpgid are denied), so the pipes close once the group is killed; the
    // grace below only guards against a descriptor passed to some other process.
    let work = async {
        match &live {
            Some((state, chunks)) => {
                tokio::join!(
                    capture_live(
                        stdout,
                        OutputStream::Stdout,
                        cap,
                        scrubber,
                        state,
                        chunks.clone()
                    ),
                    capture_live(
                        stderr,
                        OutputStream::Stderr,
                        cap,
                        scrubber,
                        state,
                        chunks.clone()
                    ),
                    reap
                )
            }
            None => tokio::join!(
                capture(stdout, cap, scrubber),
                capture(stderr, cap, scrubber),
                reap
            ),
        }
    };
    let (stdout, stderr, (status, timed_out)) =
        match tokio::time::timeout_at(deadline + PIPE_GRACE, work).await {
            Ok((out, err, (status, timed_out))) => {
                let status = status?;
                // Killed by the timeout, a bound or any signal: the child may have been
                // mid-write.
                let bound = live.as_ref().and_then(|(state, _)| state.ended_by());
                let child_cut = timed_out || bound.is_some() || status.signal().is_some();
                (
                    out.finish(child_cut).await,
                    err.finish(child_cut).await,
                    (status, timed_out),
                )
            }
            Err(_) => {
                kill_group()?;
                if let Some((state, _)) = &live {
                    state.end(StreamEnd::MaxDuration);
                }
                let status = child.wait().await.map_err(ExecError::Wait)?;
                let abandoned = Captured {
                    truncated: true,
                    ..Captured::default()
                };
                (abandoned.clone(), abandoned, (status, live.is_none()))
            }
        };
    let ended_by = live.as_ref().and_then(|(state, _)| state.ended_by());
    let (mut stdout, mut stderr) = (stdout, stderr);
    for credential in req.credentials.iter().filter(|c| c.secret) {
        let label = format!("[REDACTED:{}]", credential.key);
        cut_out(&mut stdout.bytes, credential.value, label.as_bytes());
        cut_out(&mut stderr.bytes, credential.value, label.as_bytes());
    }
    let pinned = handed
        .paths
        .iter()
        .map(|(path, file)| {
            let seen = file.argv_text();
            (seen.trim_end_matches('/').to_string(), path.clone())
        })
        .collect();
    drop(handed);
    Ok(ExecOutcome {
        exit: ExitInfo {
            code: status.code(),
            signal: status.signal(),
            timed_out,
        },
        stdout,
        stderr,
        duration: started.elapsed(),
        ended_by,
        pinned,
    })
}

/// Replaces every occurrence of `value` in `bytes` with `label` (a per-call credential, which the
/// policy's scrubber does not know).
fn cut_out(bytes: &mut Vec<u8>, value: &[u8], label: &[u8]) {
    if value.is_empty() || bytes.len() < value.len() {
        return;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(value) {
            out.extend_from_slice(label);
            at += value.len();
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    *bytes = out;
}

/// A started child: spawned by the daemon's spawner process, or forked here (every process
/// without a spawner: `verbd` tools, tests).
enum Child {
    Spawned {
        child: crate::spawner::Spawned,
        stdin: Option<tokio::net::unix::pipe::Sender>,
        stdout: Option<tokio::net::unix::pipe::Receiver>,
        stderr: Option<tokio::net::unix::pipe::Receiver>,
    },
    InProcess(tokio::process::Child),
}

type Output = std::pin::Pin<Box<dyn AsyncRead + Send>>;

impl Child {
    fn id(&self) -> u32 {
        match self {
            Child::Spawned { child, .. } => child.id(),
            // A child that was spawned and not yet waited for has its pid.
            Child::InProcess(child) => child.id().unwrap_or(0),
        }
    }

    fn take_stdin(&mut self) -> Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>> {
        match self {
            Child::Spawned { stdin, .. } => stdin.take().map(|p| Box::new(p) as _),
            Child::InProcess(child) => child.stdin.take().map(|p| Box::new(p) as _),
        }
    }

    fn take_output(&mut self) -> (Output, Output) {
        match self {
            Child::Spawned { stdout, stderr, .. } => (
                Box::pin(stdout.take().expect("stdout is piped")),
                Box::pin(stderr.take().expect("stderr is piped")),
            ),
            Child::InProcess(child) => (
                Box::pin(child.stdout.take().expect("stdout is piped")),
                Box::pin(child.stderr.take().expect("stderr is piped")),
            ),
        }
    }

    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Child::Spawned { child, .. } => child.wait().await,
            Child::InProcess(child) => child.wait().await,
        }
    }
}

/// Why the spawner could not start a child.
enum Through {
    Io(std::io::Error),
    Sandbox(crate::sandbox::SandboxError),
}

impl From<std::io::Error> for Through {
    fn from(e: std::io::Error) -> Self {
        Through::Io(e)
    }
}

/// Starts the child through the daemon's spawner: the pipes are made here, their child ends and
/// the handed descriptors go with the order.
async fn spawn_through(
    spawner: &crate::spawner::Spawner,
    req: &ExecRequest<'_>,
    args: &[OsString],
    env: &[(OsString, OsString)],
    handed: &Handed,
) -> Result<Child, Through> {
    use std::os::fd::{AsRawFd, OwnedFd};
    let plan = req.sandbox.remote_plan().map_err(Through::Sandbox)?;
    let (stdin_read, stdin_write): (OwnedFd, Option<OwnedFd>) = match req.stdin {
        Some(_) => {
            let (read, write) = std::io::pipe()?;
            (read.into(), Some(write.into()))
        }
        None => (std::fs::File::open("/dev/null")?.into(), None),
    };
    let (stdout_read, stdout_write) = std::io::pipe()?;
    let (stderr_read, stderr_write) = std::io::pipe()?;
    let program = req.argv.program().as_os_str().as_bytes();
    let argv: Vec<Vec<u8>> = std::iter::once(program.to_vec())
        .chain(args.iter().map(|a| a.as_bytes().to_vec()))
        .collect();
    let env: Vec<Vec<u8>> = env
        .iter()
        .map(|(name, value)| {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            entry
        })
        .collect();
    let keep = handed.raw_fds();
    let request = crate::sandbox::remote::SpawnRequest {
        program,
        argv: &argv,
        env: &env,
        cwd: req.cwd.as_os_str().as_bytes(),
        stdio: [
            stdin_read.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        keep_fds: &keep,
    };
    let child = spawner.spawn(&request, plan).await?;
    drop((stdin_read, stdout_write, stderr_write));
    Ok(Child::Spawned {
        child,
        stdin: stdin_write
            .map(tokio::net::unix::pipe::Sender::from_owned_fd)
            .transpose()?,
        stdout: Some(tokio::net::unix::pipe::Receiver::from_owned_fd(
            stdout_read.into(),
        )?),
        stderr: Some(tokio::net::unix::pipe::Receiver::from_owned_fd(
            stderr_read.into(),
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_call_credential_is_cut_out_of_output() {
        let mut bytes = b"PGPASSWORD=abcABC123 and abcABC123abcABC123.".to_vec();
        cut_out(&mut bytes, b"abcABC123", b"[REDACTED:PGPASSWORD]");
        assert_eq!(
            bytes,
            b"PGPASSWORD=[REDACTED:PGPASSWORD] and [REDACTED:PGPASSWORD][REDACTED:PGPASSWORD]."
        );
    }

    #[test]
    fn descriptors_of_path_parameters_are_shown_as_their_paths_and_nothing_else() {
        let pinned = vec![
            ("/proc/self/fd/5".to_string(), PathBuf::from("/srv/data")),
            ("/proc/self/fd/1".to_string(), PathBuf::from("/srv/one")),
        ];
        let shown = with_real_paths(
            "/proc/self/fd/5/a.bin\n/proc/self/fd/15/x /proc/self/fd/1 /proc/self/fd/ /proc/self/fd/7",
            &pinned,
        );
        assert_eq!(
            shown,
            "/srv/data/a.bin\n/proc/self/fd/15/x /srv/one /proc/self/fd/ /proc/self/fd/7"
        );
    }
}
