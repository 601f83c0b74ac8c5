//! The daemon: accept loop, limits, dispatch of requests to the policy, executor and journal.
//!
//! Invariants: identity comes only from SO_PEERCRED (invariant 3); a peer matching no role is
//! refused before its request is read; every decision is journaled (and fsync'd) before the
//! caller sees it, and a call whose record cannot be written is denied (fail closed, invariant 6);
//! limits are enforced without queues: too many connections or executions get `busy` at once;
//! a slow client only holds its own connection until the request timeout; a client that goes
//! away mid-call gets its child's process group killed.
#![forbid(unsafe_code)]

mod approve;
pub mod audit;
pub mod peer;
pub mod socket;

use crate::exec::{self, ExecRequest};
use crate::journal::{Appended, Journal, JournalError};
use crate::policy::{Caller, Policy, PreparedAction, PreparedCall, Refusal, Role};
use crate::protocol::{self, ParamInfo, Request, Response, RunResult, VerbInfo};
use crate::sandbox::PreparedSandbox;
use crate::scrub::Scrubber;
use crate::secrets::SecretStore;
use audit::{AuditEvent, CallerRecord, OutputRecord};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

/// A policy with everything prepared for serving: sandboxes compiled, secrets loaded.
pub struct Runtime {
    pub policy: Policy,
    pub sandboxes: BTreeMap<String, Arc<PreparedSandbox>>,
    /// The same profiles without write roots, for dry runs.
    pub dry_run_sandboxes: BTreeMap<String, Arc<PreparedSandbox>>,
    pub secrets: SecretStore,
    pub scrubber: Scrubber,
    verb_permits: BTreeMap<String, Arc<Semaphore>>,
}

/// Why a policy could not be prepared for serving.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("sandbox profile `{profile}`: {source}")]
    Sandbox {
        profile: String,
        source: crate::sandbox::SandboxError,
    },
    #[error("secrets: {0}")]
    Secrets(#[from] crate::secrets::SecretError),
    #[error("scrub patterns: {0}")]
    Scrub(#[from] crate::scrub::ScrubError),
}

impl Runtime {
    /// Prepare a compiled policy: all allocation-heavy work happens here, once.
    pub fn build(policy: Policy) -> Result<Runtime, RuntimeError> {
        let mut sandboxes = BTreeMap::new();
        let mut dry_run_sandboxes = BTreeMap::new();
        // Only profiles of verbs with a dry run need the read-only twin (each prepare walks
        // the write roots for Landlock).
        let dry_run_profiles: std::collections::BTreeSet<&str> = policy
            .verbs
            .values()
            .filter(|v| {
                matches!(
                    v.action,
                    crate::policy::VerbAction::Command {
                        dry_run: Some(_),
                        ..
                    }
                )
            })
            .map(|v| v.sandbox.as_str())
            .collect();
        for (name, spec) in &policy.sandboxes {
            let prepare = |spec: crate::sandbox::SandboxSpec| {
                PreparedSandbox::prepare(spec)
                    .map(Arc::new)
                    .map_err(|source| RuntimeError::Sandbox {
                        profile: name.clone(),
                        source,
                    })
            };
            sandboxes.insert(name.clone(), prepare(spec.clone())?);
            if !dry_run_profiles.contains(name.as_str()) {
                continue;
            }
            let read_only = crate::sandbox::SandboxSpec {
                write: Vec::new(),
                ..spec.clone()
            };
            dry_run_sandboxes.insert(name.clone(), prepare(read_only)?);
        }
        let secrets = SecretStore::load(&policy.secrets)?;
        let scrubber = Scrubber::new(&secrets, &policy.scrub_patterns, policy.scrub_builtin)?;
        let verb_permits = policy
            .verbs
            .values()
            .filter_map(|v| {
                v.max_concurrent
                    .map(|n| (v.name.clone(), Arc::new(Semaphore::new(n))))
            })
            .collect();
        Ok(Runtime {
            policy,
            sandboxes,
            dry_run_sandboxes,
            secrets,
            scrubber,
            verb_permits,
        })
    }
}

/// Settings that do not come from the policy.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub state_dir: PathBuf,
    /// The uid that started the daemon (the `@invoker` role member).
    pub invoker_uid: u32,
    /// The policy file to re-read on reload (`None` for the embedded demo).
    pub policy_path: Option<PathBuf>,
}

/// The running daemon's shared state.
pub struct Daemon {
    runtime: RwLock<Arc<Runtime>>,
    journal: Arc<Mutex<Journal>>,
    book: Mutex<crate::approvals::Book>,
    exec_permits: Arc<Semaphore>,
    conn_permits: Arc<Semaphore>,
    settings: ServeSettings,
}

/// Directory (inside the state dir) for per-call secret file copies.
pub const SECRET_FILES_DIR: &str = "secret-files";

impl Daemon {
    pub fn new(
        runtime: Runtime,
        journal: Journal,
        book: crate::approvals::Book,
        settings: ServeSettings,
    ) -> Arc<Daemon> {
        let daemon_cfg = &runtime.policy.daemon;
        Arc::new(Daemon {
            exec_permits: Arc::new(Semaphore::new(daemon_cfg.max_executions)),
            conn_permits: Arc::new(Semaphore::new(daemon_cfg.max_connections)),
            runtime: RwLock::new(Arc::new(runtime)),
            journal: Arc::new(Mutex::new(journal)),
            book: Mutex::new(book),
            settings,
        })
    }

    /// The runtime in force now. Calls keep the snapshot they started with.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.read().expect("runtime lock").clone()
    }

    /// Swap in a new runtime (after it passed its checks).
    pub fn replace_runtime(&self, runtime: Runtime) {
        *self.runtime.write().expect("runtime lock") = Arc::new(runtime);
    }

    /// The proposals book (short critical sections only; never held across an await).
    pub fn book(&self) -> std::sync::MutexGuard<'_, crate::approvals::Book> {
        self.book.lock().expect("book lock")
    }

    pub fn settings(&self) -> &ServeSettings {
        &self.settings
    }

    /// Append a record and fsync it, off the async threads.
    pub async fn journal(&self, event: AuditEvent) -> Result<Appended, JournalError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || journal.lock().expect("journal lock").append(&event))
            .await
            .expect("journal task panicked")
    }

    /// Close the journal's epoch: now (`stopping`), or when it is due by time (an idle daemon's
    /// last records are then sealed within the epoch's time limit).
    pub async fn seal_journal(&self, stopping: bool) -> Result<(), JournalError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || {
            let mut journal = journal.lock().expect("journal lock");
            if stopping {
                journal.seal_now("stop")
            } else {
                journal.seal_if_due().map(|_| ())
            }
        })
        .await
        .expect("journal task panicked")
    }

    /// Number of executions running now.
    pub fn executions_in_flight(&self) -> usize {
        let max = self.runtime().policy.daemon.max_executions;
        max.saturating_sub(self.exec_permits.available_permits())
    }

    /// Re-read the policy file, prepare it, self-test it, and swap it in only if everything
    /// passes; otherwise keep serving the old one. Calls already running keep the policy they
    /// started with; pending proposals are re-checked against the new policy at approval.
    pub async fn reload(self: Arc<Self>) -> String {
        self.reload_policy().await.1
    }

    async fn reload_policy(self: Arc<Self>) -> (bool, String) {
        crate::sd::notify_reloading();
        let daemon = self.clone();
        let attempt = tokio::task::spawn_blocking(move || daemon.prepare_reload())
            .await
            .unwrap_or_else(|e| Err(format!("reload task failed: {e}")));
        let (ok, message, hash) = match attempt {
            Ok((runtime, summary)) => {
                let hash = runtime.policy.hash.clone();
                self.replace_runtime(runtime);
                (true, format!("new policy in force ({summary})"), hash)
            }
            Err(message) => (
                false,
                format!("reload refused, the old policy stays in force: {message}"),
                self.runtime().policy.hash.clone(),
            ),
        };
        if ok {
            tracing::info!("{message}");
        } else {
            tracing::error!("{message}");
        }
        let _ = self
            .journal(AuditEvent::Reload {
                ok,
                policy_hash: hash,
                message: message.clone(),
            })
            .await;
        crate::sd::notify_ready(&message);
        (ok, message)
    }

    fn prepare_reload(&self) -> Result<(Runtime, String), String> {
        let Some(path) = &self.settings.policy_path else {
            return Err(
                "the daemon serves the embedded demo policy; there is no file to re-read".into(),
            );
        };
        let mut policy = crate::policy::load_file(path).map_err(|e| e.to_string())?;
        grant_secret_file_access(&mut policy, &self.settings.state_dir.join(SECRET_FILES_DIR))
            .map_err(|e| e.to_string())?;
        let runtime = Runtime::build(policy).map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let report = crate::selftest::run(&crate::selftest::Context {
            policy: &runtime.policy,
            daemon_uid: nix::unistd::geteuid().as_raw(),
            canary_exe: exe,
            serving: None,
            state_dir: None,
            secrets: Some(&runtime.secrets),
        });
        if report.passed() {
            Ok((runtime, report.summary()))
        } else {
            let failures: Vec<String> = report
                .failures()
                .map(|c| format!("{}: {}", c.name, c.detail))
                .collect();
            Err(format!("{}: {}", report.summary(), failures.join("; ")))
        }
    }

    /// Serve connections from `listener` until `shutdown` resolves.
    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let daemon = self.clone();
                        match self.conn_permits.clone().try_acquire_owned() {
                            Ok(permit) => {
                                tokio::spawn(async move {
                                    daemon.handle(stream).await;
                                    drop(permit);
                                });
                            }
                            Err(_) => {
                                tokio::spawn(async move {
                                    let _ = write_response(
                                        stream,
                                        &Response::Busy {
                                            message: "too many connections; retry shortly".into(),
                                        },
                                    )
                                    .await;
                                });
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }

    async fn handle(self: Arc<Self>, stream: UnixStream) {
        let cred = match stream.peer_cred() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no peer credentials; dropping connection");
                return;
            }
        };
        let caller = tokio::task::spawn_blocking(move || {
            peer::caller_from_cred(cred.uid(), cred.gid(), cred.pid().unwrap_or(0))
        })
        .await
        .expect("caller lookup panicked");
        let runtime = self.runtime();
        let roles = roles_owned(&runtime.policy.roles_of(&caller, self.settings.invoker_uid));
        let record = CallerRecord::new(&caller, roles.iter().map(|r| r.name.clone()).collect());
        let (read_half, mut write_half) = stream.into_split();
        let limit = runtime.policy.daemon.max_request_bytes;
        let mut reader = BufReader::new(read_half);
        let mut line = Vec::new();
        let read = tokio::time::timeout(
            runtime.policy.daemon.request_timeout,
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
        if roles.is_empty() {
            let reason = format!(
                "uid {} ({}) matches no role in the verbd policy; ask the operator to add it to a [roles.*] table",
                caller.uid,
                caller.user.as_deref().unwrap_or("no user name")
            );
            let response = match self
                .journal(AuditEvent::ConnectRefused {
                    caller: record,
                    reason: reason.clone(),
                })
                .await
            {
                Ok(_) => Response::Denied { reason },
                Err(e) => journal_failure(&e),
            };
            let _ = write_half.write_all(&response.encode()).await;
            let _ = write_half.shutdown().await;
            return;
        }

        let response = match request {
            Err(e) => Response::Error {
                message: e.to_string(),
            },
            Ok(req) => {
                let work = self
                    .clone()
                    .dispatch(runtime.clone(), &caller, &roles, record, req);
                // Watch for the client hanging up while the call runs: dropping `work` kills the
                // child's process group (see exec::ProcessGroupGuard).
                let hangup = async {
                    let mut sink = [0u8; 512];
                    loop {
                        match reader.read(&mut sink).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => continue,
                        }
                    }
                };
                tokio::select! {
                    response = work => response,
                    _ = hangup => return,
                }
            }
        };
        let _ = write_half.write_all(&response.encode()).await;
        let _ = write_half.shutdown().await;
    }

    async fn dispatch(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        caller: &Caller,
        roles: &[Role],
        record: CallerRecord,
        request: Request,
    ) -> Response {
        let role_refs: Vec<&Role> = roles.iter().collect();
        match request {
            Request::List {} => Response::Verbs {
                verbs: runtime
                    .policy
                    .verbs_for(&role_refs)
                    .map(verb_info)
                    .collect(),
            },
            Request::Call {
                verb,
                args,
                reason,
                idempotency_key,
            } => {
                self.call(
                    runtime,
                    &role_refs,
                    record,
                    verb,
                    args,
                    reason,
                    idempotency_key,
                )
                .await
            }
            Request::Status {} => Response::Info {
                info: serde_json::json!({
                    "version": env!("CARGO_PKG_VERSION"),
                    "policy": runtime.policy.origin,
                    "policy_hash": runtime.policy.hash,
                    "caller": { "uid": caller.uid, "user": caller.user, "roles": record.roles },
                    "executions_in_flight": self.executions_in_flight(),
                }),
            },
            Request::Pending {} => self.pending(&runtime, caller, roles).await,
            Request::Approve { id, hash } => {
                self.clone().approve(runtime, caller, roles, id, hash).await
            }
            Request::Deny { id, reason } => self.deny(&runtime, caller, roles, id, reason).await,
            Request::Wait { id, timeout_ms } => {
                self.wait(&runtime, caller, roles, id, timeout_ms).await
            }
            Request::Result { id } => self.result(&runtime, caller, roles, id).await,
            Request::Resolve { id, outcome, note } => {
                self.resolve(&runtime, caller, roles, id, outcome, note)
                    .await
            }
            Request::Check { path, tool } => {
                self.check(&runtime, &role_refs, record, path, tool).await
            }
            Request::Reload {} => {
                if let Some(reason) = runtime.policy.approver_refusal(
                    caller.uid,
                    roles,
                    crate::policy::ApprovalScope::Policy,
                    None,
                ) {
                    return Response::Denied { reason };
                }
                let (ok, message) = self.clone().reload_policy().await;
                if ok {
                    Response::Info {
                        info: serde_json::json!({ "reloaded": true, "message": message }),
                    }
                } else {
                    Response::Error { message }
                }
            }
        }
    }

    async fn refuse(
        &self,
        record: CallerRecord,
        verb: &str,
        args: BTreeMap<String, serde_json::Value>,
        refusal: Refusal,
    ) -> Response {
        let (decision, response) = refusal_response(&refusal);
        match self
            .journal(AuditEvent::Refused {
                caller: record,
                verb: verb.to_string(),
                args: redact_args(args),
                decision: decision.into(),
                reason: refusal.message(),
            })
            .await
        {
            Ok(_) => response,
            Err(e) => journal_failure(&e),
        }
    }

    /// Run a prepared call: journal the decision, execute, journal the result, answer.
    pub async fn run_call(
        &self,
        runtime: &Runtime,
        record: CallerRecord,
        call: PreparedCall,
        proposal: Option<u64>,
        idempotency_key: Option<String>,
    ) -> Response {
        let verb = &runtime.policy.verbs[&call.verb];
        let requester_uid = record.uid;
        let permits = self
            .exec_permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| "verbd is running its maximum number of executions".to_string());
        let permits = permits.and_then(|global| match runtime.verb_permits.get(&verb.name) {
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Ok((global, Some(p))),
                Err(_) => Err(format!(
                    "verb `{}` is already running its maximum number of times",
                    verb.name
                )),
            },
            None => Ok((global, None)),
        });
        let _permits = match permits {
            Ok(p) => p,
            Err(why) => {
                // An approval is used once: if its run cannot start now, the proposal ends as
                // failed (not run) and needs a new proposal, rather than waiting in memory.
                if let Some(id) = proposal {
                    let _ = self.journal(AuditEvent::ProposalNotStarted { id }).await;
                    self.book().finished(id, None, true);
                    return Response::Busy {
                        message: format!(
                            "{why}; proposal {id} was not run and must be proposed again"
                        ),
                    };
                }
                return Response::Busy {
                    message: format!("{why}; retry shortly"),
                };
            }
        };
        let exec_seq = match self
            .journal(AuditEvent::Exec {
                caller: record,
                decision: if proposal.is_some() {
                    "approved"
                } else {
                    "run"
                }
                .into(),
                verb: call.verb.clone(),
                args: journaled_args(&call),
                args_hash: call.args_hash.clone(),
                argv: call.display_argv(),
                proposal,
                idempotency_key: idempotency_key.clone(),
            })
            .await
        {
            Ok(a) => a.seq,
            Err(e) => {
                if let Some(id) = proposal {
                    self.book().finished(id, None, true);
                }
                return journal_failure(&e);
            }
        };
        self.book()
            .started(&call.verb, requester_uid, proposal, SystemTime::now());
        let response = self.execute(runtime, &call, exec_seq, proposal).await;
        let failed =
            !matches!(&response, Response::Ok { result, .. } if result.exit.code == Some(0));
        let result = match &response {
            Response::Ok { result, .. } => Some(result.clone()),
            _ => None,
        };
        let mut book = self.book();
        if let Some(id) = proposal {
            book.finished(id, result, failed);
        } else if let Some(key) = &idempotency_key {
            book.remember_run(
                requester_uid,
                key,
                &call.verb,
                &call.args_hash,
                exec_seq,
                result,
            );
        }
        response
    }

    /// Run a builtin file verb (no child process: the daemon resolves beneath the roots itself).
    async fn file_verb(
        &self,
        runtime: &Runtime,
        call: &PreparedCall,
        exec_seq: u64,
        proposal: Option<u64>,
    ) -> Response {
        let verb = &runtime.policy.verbs[&call.verb];
        let crate::policy::VerbAction::File(spec) = &verb.action else {
            return Response::Error {
                message: format!("verb `{}` is not a file verb", verb.name),
            };
        };
        let spec = spec.clone();
        let args = call.args.clone();
        let started = std::time::Instant::now();
        let outcome = tokio::task::spawn_blocking(move || {
            let path = PathBuf::from(args.get("path").cloned().unwrap_or_default());
            let content = args.get("content").cloned().unwrap_or_default();
            let mode = args
                .get("mode")
                .and_then(|m| u32::from_str_radix(m, 8).ok());
            match spec.op {
                crate::files::FileOp::Write => {
                    crate::files::write_file(&spec, &path, content.as_bytes(), mode)
                        .map(FileOutcome::Written)
                }
                crate::files::FileOp::Append => {
                    crate::files::append_file(&spec, &path, content.as_bytes())
                        .map(FileOutcome::Written)
                }
                crate::files::FileOp::Read => {
                    crate::files::read_file(&spec, &path).map(FileOutcome::Read)
                }
                crate::files::FileOp::List => crate::files::list_dir(&spec, &path).map(|entries| {
                    let text: String = entries
                        .iter()
                        .map(|e| format!("{:?}\t{}\t{}\n", e.kind, e.size, e.name))
                        .collect();
                    FileOutcome::Read(text.into_bytes())
                }),
            }
        })
        .await
        .expect("file task panicked");
        let duration_ms = started.elapsed().as_millis() as u64;
        let (stdout, error) = match outcome {
            Ok(FileOutcome::Written(receipt)) => {
                if let Err(e) = self
                    .journal(AuditEvent::FileWrite {
                        verb: call.verb.clone(),
                        exec_seq,
                        path: receipt.path.display().to_string(),
                        size: receipt.size,
                        sha256: receipt.sha256.clone(),
                        created: receipt.created,
                    })
                    .await
                {
                    return journal_failure(&e);
                }
                let text = serde_json::json!({
                    "path": receipt.path,
                    "size": receipt.size,
                    "sha256": receipt.sha256,
                    "created": receipt.created,
                })
                .to_string()
                    + "\n";
                (text.into_bytes(), None)
            }
            Ok(FileOutcome::Read(bytes)) => (runtime.scrubber.scrub(&bytes), None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let captured = exec::Captured {
            total: stdout.len() as u64,
            bytes: stdout,
            truncated: false,
        };
        let empty = exec::Captured::default();
        let event = AuditEvent::Result {
            verb: call.verb.clone(),
            exec_seq,
            proposal,
            exit_code: Some(if error.is_some() { 1 } else { 0 }),
            signal: None,
            timed_out: false,
            duration_ms,
            stdout: OutputRecord::of(&captured),
            stderr: OutputRecord::of(&empty),
            error: error.clone(),
        };
        if let Err(e) = self.journal(event).await {
            return journal_failure(&e);
        }
        match error {
            // A refused path is the caller's to fix: say why, like any other refusal.
            Some(reason) => Response::Denied { reason },
            None => Response::Ok {
                result: RunResult {
                    exit: protocol::ExitInfo {
                        code: Some(0),
                        signal: None,
                        timed_out: false,
                    },
                    stdout: String::from_utf8_lossy(&captured.bytes).into_owned(),
                    stderr: String::new(),
                    stdout_truncated: false,
                    stderr_truncated: false,
                    duration_ms,
                },
                proposal,
            },
        }
    }

    /// Answer a `check` (the hook adapter): may the caller write `path`? Allowed only beneath
    /// the roots of file.write/file.append verbs the caller's roles may use, never on a
    /// protected name. Journaled.
    async fn check(
        &self,
        runtime: &Runtime,
        roles: &[&Role],
        record: CallerRecord,
        path: String,
        tool: Option<String>,
    ) -> Response {
        let roots: Vec<PathBuf> = runtime
            .policy
            .verbs_for(roles)
            .filter_map(|v| match &v.action {
                crate::policy::VerbAction::File(spec)
                    if matches!(
                        spec.op,
                        crate::files::FileOp::Write | crate::files::FileOp::Append
                    ) =>
                {
                    Some(spec.roots.clone())
                }
                _ => None,
            })
            .flatten()
            .collect();
        let verdict = if roots.is_empty() {
            Err("no file.write or file.append verb is available to your roles, so no direct write is allowed; ask the operator or use a verb".to_string())
        } else {
            crate::files::check_write(&roots, &runtime.policy.protected, Path::new(&path))
                .map_err(|e| e.to_string())
        };
        let (allowed, reason) = match verdict {
            Ok(()) => (true, format!("{path} is beneath an allowed root")),
            Err(reason) => (false, reason),
        };
        match self
            .journal(AuditEvent::Check {
                caller: record,
                path,
                tool,
                allowed,
                reason: reason.clone(),
            })
            .await
        {
            Ok(_) => Response::Check { allowed, reason },
            Err(e) => journal_failure(&e),
        }
    }

    /// Run the child for a journaled exec record, journal its result, and build the answer.
    async fn execute(
        &self,
        runtime: &Runtime,
        call: &PreparedCall,
        exec_seq: u64,
        proposal: Option<u64>,
    ) -> Response {
        let verb = &runtime.policy.verbs[&call.verb];
        let PreparedAction::Exec { argv, env, .. } = &call.action else {
            return self.file_verb(runtime, call, exec_seq, proposal).await;
        };
        let Some(sandbox) = runtime.sandboxes.get(&verb.sandbox) else {
            return Response::Error {
                message: format!("sandbox `{}` is not prepared", verb.sandbox),
            };
        };
        let secret_dir = self.settings.state_dir.join(SECRET_FILES_DIR);
        let outcome = exec::run(ExecRequest {
            argv,
            env,
            cwd: &verb.cwd,
            timeout: verb.timeout,
            max_output: verb.max_output,
            sandbox,
            secrets: &runtime.secrets,
            secret_dir: &secret_dir,
            scrubber: &runtime.scrubber,
            stdin: None,
        })
        .await;
        match outcome {
            Ok(outcome) => {
                let event = AuditEvent::Result {
                    verb: call.verb.clone(),
                    exec_seq,
                    proposal,
                    exit_code: outcome.exit.code,
                    signal: outcome.exit.signal,
                    timed_out: outcome.exit.timed_out,
                    duration_ms: outcome.duration.as_millis() as u64,
                    stdout: OutputRecord::of(&outcome.stdout),
                    stderr: OutputRecord::of(&outcome.stderr),
                    error: None,
                };
                if let Err(e) = self.journal(event).await {
                    return journal_failure(&e);
                }
                Response::Ok {
                    result: RunResult {
                        exit: outcome.exit,
                        stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
                        stderr: String::from_utf8_lossy(&outcome.stderr.bytes).into_owned(),
                        stdout_truncated: outcome.stdout.truncated,
                        stderr_truncated: outcome.stderr.truncated,
                        duration_ms: outcome.duration.as_millis() as u64,
                    },
                    proposal,
                }
            }
            Err(e) => {
                let message = e.to_string();
                let empty = exec::Captured::default();
                let event = AuditEvent::Result {
                    verb: call.verb.clone(),
                    exec_seq,
                    proposal,
                    exit_code: None,
                    signal: None,
                    timed_out: false,
                    duration_ms: 0,
                    stdout: OutputRecord::of(&empty),
                    stderr: OutputRecord::of(&empty),
                    error: Some(message.clone()),
                };
                if let Err(je) = self.journal(event).await {
                    return journal_failure(&je);
                }
                Response::Error { message }
            }
        }
    }
}

/// Arguments as journaled: file content is recorded as its size and sha256, never verbatim.
fn journaled_args(call: &PreparedCall) -> BTreeMap<String, String> {
    let mut args = call.args.clone();
    if matches!(call.action, PreparedAction::File)
        && let Some(content) = args.get_mut("content")
    {
        *content = format!(
            "<{} bytes, sha256 {}>",
            content.len(),
            crate::digest::sha256_hex(content.as_bytes())
        );
    }
    args
}

fn roles_owned(roles: &[&Role]) -> Vec<Role> {
    roles.iter().map(|r| (*r).clone()).collect()
}

enum FileOutcome {
    Written(crate::files::WriteReceipt),
    Read(Vec<u8>),
}

/// Raw (refused) arguments are journaled, but long values are cut so a hostile client cannot
/// flood the journal with one request.
fn redact_args(args: BTreeMap<String, serde_json::Value>) -> BTreeMap<String, serde_json::Value> {
    const MAX: usize = 512;
    args.into_iter()
        .map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) if s.len() > MAX => {
                    let cut = (0..=MAX)
                        .rev()
                        .find(|i| s.is_char_boundary(*i))
                        .unwrap_or(0);
                    serde_json::Value::String(format!("{}…[{} bytes]", &s[..cut], s.len()))
                }
                other => other,
            };
            (k, v)
        })
        .collect()
}

fn refusal_response(refusal: &Refusal) -> (&'static str, Response) {
    match refusal {
        Refusal::NotAvailable { .. } | Refusal::Headless { .. } | Refusal::Denied { .. } => (
            "denied",
            Response::Denied {
                reason: refusal.message(),
            },
        ),
        Refusal::Missing { params } => (
            "invalid",
            Response::Invalid {
                param: None,
                rule: "missing".into(),
                message: refusal.message(),
                missing: params.clone(),
            },
        ),
        Refusal::UnknownParam { param, .. } => (
            "invalid",
            Response::Invalid {
                param: Some(param.clone()),
                rule: "unknown-parameter".into(),
                message: refusal.message(),
                missing: Vec::new(),
            },
        ),
        Refusal::Invalid(r) => (
            "invalid",
            Response::Invalid {
                param: Some(r.param.clone()),
                rule: r.rule.into(),
                message: refusal.message(),
                missing: Vec::new(),
            },
        ),
    }
}

/// The answer when the journal cannot be written: denied, nothing ran (fail closed).
pub fn journal_failure(e: &JournalError) -> Response {
    tracing::error!(error = %e, "journal write failed; denying");
    Response::Denied {
        reason: format!(
            "the audit journal cannot be written ({e}); verbd denies every call it cannot record. Nothing ran."
        ),
    }
}

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
            })
            .collect(),
    }
}

async fn write_response(mut stream: UnixStream, response: &Response) -> std::io::Result<()> {
    stream.write_all(&response.encode()).await?;
    stream.shutdown().await
}

/// Verbs that take `${secret_file:…}` need to read their private copy: give the profiles they
/// use read access to the secret-file directory (and search access to others when a profile
/// runs its children as another uid). Other profiles never see the directory.
pub fn grant_secret_file_access(policy: &mut Policy, secret_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let uses_secret_file = |verb: &crate::policy::Verb| match &verb.action {
        crate::policy::VerbAction::Command { template, dry_run } => template
            .elements()
            .chain(dry_run.iter().flat_map(|d| d.elements()))
            .map(|(e, _)| e)
            .chain(verb.env.iter().map(|(_, e)| e))
            .any(|e| {
                e.pieces()
                    .iter()
                    .any(|p| matches!(p, crate::policy::template::Piece::SecretFile(_)))
            }),
        crate::policy::VerbAction::File(_) => false,
    };
    let profiles: Vec<String> = policy
        .verbs
        .values()
        .filter(|v| uses_secret_file(v))
        .map(|v| v.sandbox.clone())
        .collect();
    let mut other_uid = false;
    for name in profiles {
        if let Some(spec) = policy.sandboxes.get_mut(&name) {
            if !spec.read.iter().any(|r| secret_dir.starts_with(r)) {
                spec.read.push(secret_dir.to_path_buf());
            }
            other_uid |= spec.run_as.is_some();
        }
    }
    let mode = if other_uid { 0o711 } else { 0o700 };
    std::fs::set_permissions(secret_dir, std::fs::Permissions::from_mode(mode))
}

/// Where `serve` puts its state when neither flag nor policy says.
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/verbd");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| Path::new(d).is_absolute()) {
        return PathBuf::from(dir).join("verbd");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/verbd"),
        None => PathBuf::from("/tmp").join(format!("verbd-{}", nix::unistd::getuid())),
    }
}

/// Where clients look when neither `--socket` nor `VERBD_SOCKET` says: the socket `serve`
/// uses by default.
pub fn default_socket_path() -> PathBuf {
    socket_path_in(&default_state_dir())
}

/// The socket `serve` uses when neither flag nor policy says: `$XDG_RUNTIME_DIR/verbd.sock`,
/// else inside its state dir.
pub fn socket_path_in(state_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_absolute()) {
        Some(dir) => PathBuf::from(dir).join("verbd.sock"),
        None => state_dir.join("verbd.sock"),
    }
}
