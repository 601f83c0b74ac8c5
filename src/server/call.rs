//! Calls: from the policy's verdict to a journaled run (or a proposal, or a refusal).
//!
//! `call` evaluates the request against the policy once; the [`Verdict`] carries everything the
//! rest needs (the rendered argv or the prepared file operation, and the verb's limits), so the
//! verb is never looked up by name again. Then, in order: idempotency key, rate limit, and either
//! a proposal (`approve.rs`) or `run`.
//!
//! `run` is the one way anything executes: take an execution slot, journal `exec` (fsync'd), run,
//! journal the end (`result`, or `cancelled` when the client hung up or the daemon stopped; a
//! file write also journals `file_write`), answer. Every run that was journaled as started is
//! journaled as ended, whether or not its client is still there.
#![forbid(unsafe_code)]

use super::{
    Cancel, Context, Daemon, NewProposal, Run, confirm_required, end_not_journaled, journal_failure,
};
use crate::approvals::{KeyEntry, KeyTarget, MAX_PENDING_PER_REQUESTER, RunEnd};
use crate::events::{
    Bounded, CancelCause, Event, OutputRecord, RefusalClass, RefusalKind, RefusedArgs, RunDecision,
};
use crate::exec::{self, Captured, ExecRequest};
use crate::files::{FileOp, WriteReceipt};
use crate::loader::Prepared;
use crate::policy::params::ParamRejection;
use crate::policy::{
    CallLimits, FileCall, PreparedAction, PreparedCall, Refusal, RoleKind, Verdict,
};
use crate::proposal::State;
use crate::protocol::{ExitInfo, Response, RunResult, StreamAsk};
use crate::slots::{FairSlots, Lane, Slot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Longest an approved proposal waits for an execution slot before it ends as not started.
pub const APPROVED_RUN_SLOT_WAIT: Duration = Duration::from_secs(600);

/// A `call` request's fields.
pub(super) struct CallRequest {
    pub verb: String,
    pub args: BTreeMap<String, serde_json::Value>,
    pub reason: Option<String>,
    pub idempotency_key: Option<String>,
    /// Run without approval under the verb's `break_glass` (`verbd call --break-glass`).
    pub break_glass: bool,
    /// The caller takes a streaming verb's output as it comes, within these bounds.
    pub stream: Option<StreamAsk>,
    /// Where that output goes (set with `stream`).
    pub chunks: Option<tokio::sync::mpsc::Sender<crate::exec::LiveChunk>>,
}

/// How a run ended, before it is journaled.
enum Ended {
    /// It ran (or failed to start): the `result` record to write, and the answer.
    Finished {
        result: Box<Event>,
        response: Response,
    },
    Cancelled(CancelCause),
    /// Cancelled, and answered otherwise than the usual way (a drop that failed after it).
    CancelledAnswered(CancelCause, Response),
}

impl Ended {
    /// The same end, with `response` as the caller's answer (the journal records stay).
    fn answered_with(self, response: Response) -> Ended {
        match self {
            Ended::Finished { result, .. } => Ended::Finished { result, response },
            Ended::Cancelled(cause) | Ended::CancelledAnswered(cause, _) => {
                Ended::CancelledAnswered(cause, response)
            }
        }
    }
}

/// The end of a journaled run whose child never started (`message` says why).
fn not_started(
    call: &PreparedCall,
    exec_seq: u64,
    proposal: Option<u64>,
    message: String,
) -> Ended {
    let empty = Captured::default();
    Ended::Finished {
        result: Box::new(Event::Result {
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
            ended_by: None,
        }),
        response: Response::Error { message },
    }
}

/// The caller's roles that `verb` names in `break_glass`, or why the caller may not break glass:
/// an agent role never does, and only a role the verb names does.
fn break_glass_roles(ctx: &Context, verb: &str) -> Result<Vec<String>, String> {
    let named = ctx
        .prepared
        .policy
        .verbs
        .get(verb)
        .map(|v| v.break_glass.clone())
        .unwrap_or_default();
    let agent_roles: Vec<&str> = ctx
        .roles
        .iter()
        .filter(|r| r.kind == RoleKind::Agent)
        .map(|r| r.name.as_str())
        .collect();
    if !agent_roles.is_empty() {
        return Err(format!(
            "break-glass refused: uid {} is in an agent role ({}); agent identities never run a verb without approval",
            ctx.caller.uid,
            agent_roles.join(", ")
        ));
    }
    if named.is_empty() {
        return Err(format!(
            "break-glass refused: verb `{verb}` names no break_glass roles; it runs only when approved (call it without --break-glass to propose it)"
        ));
    }
    let held: Vec<String> = ctx
        .roles
        .iter()
        .filter(|r| named.contains(&r.name))
        .map(|r| r.name.clone())
        .collect();
    if held.is_empty() {
        return Err(format!(
            "break-glass refused: verb `{verb}` may be run without approval only by roles {}, and yours are not among them (call it without --break-glass to propose it)",
            named.join(", ")
        ));
    }
    Ok(held)
}

impl Daemon {
    pub(super) async fn call(
        self: Arc<Self>,
        ctx: &Context,
        request: CallRequest,
        cancel: Cancel,
    ) -> Response {
        let verdict = ctx
            .prepared
            .policy
            .evaluate(&ctx.role_refs(), &request.verb, &request.args);
        let (mut call, proposed) = match verdict {
            Verdict::Refuse(refusal) => return self.refuse(ctx, &request, refusal).await,
            Verdict::Run(call) => (call, None),
            Verdict::Propose(proposed) => {
                let facts = (
                    proposed.description,
                    proposed.category,
                    proposed.verb_fingerprint,
                );
                (proposed.call, Some(facts))
            }
        };
        if let Some(ask) = &request.stream
            && let Err(rejection) = lower_stream_bounds(&call.verb, &mut call.limits, ask)
        {
            return self
                .refuse(ctx, &request, Refusal::Invalid(rejection))
                .await;
        }
        let now = SystemTime::now();
        self.expire_overdue().await;
        let uid = ctx.record.uid;
        if let Some(key) = &request.idempotency_key {
            if key.is_empty() || key.len() > 200 || key.contains(['\n', '\0']) {
                return Response::Invalid {
                    param: None,
                    rule: "idempotency-key".into(),
                    message: "idempotency_key must be 1..200 characters without NUL or newline"
                        .into(),
                    missing: Vec::new(),
                };
            }
            if let Some(entry) = self.ledger.read(|b| b.key(uid, key, now).cloned()) {
                return self
                    .idempotent_reply(ctx, &request, &call, key, entry)
                    .await;
            }
            if !self.ledger.reserve_key(uid, key, now) {
                return Response::Busy {
                    message: format!(
                        "another call with idempotency_key {key:?} is starting; ask again shortly"
                    ),
                };
            }
        }
        let answer = self
            .clone()
            .call_once_per_key(ctx, &request, call, proposed, now, cancel)
            .await;
        if let Some(key) = &request.idempotency_key {
            self.ledger.release_key(uid, key);
        }
        answer
    }

    /// The part of `call` that runs while the idempotency key (if any) is reserved.
    async fn call_once_per_key(
        self: Arc<Self>,
        ctx: &Context,
        request: &CallRequest,
        call: PreparedCall,
        proposed: Option<(String, &'static str, String)>,
        now: SystemTime,
        cancel: Cancel,
    ) -> Response {
        let uid = ctx.record.uid;
        if proposed.is_some()
            && !request.break_glass
            && let Some(existing) = self.ledger.read(|b| {
                b.pending_for(uid, &call.verb, &call.args_hash, now)
                    .cloned()
            })
        {
            return confirm_required(&existing);
        }
        let limited = self.ledger.read(|b| {
            b.rate_exceeded(
                &call.verb,
                uid,
                call.limits.rate,
                call.limits.rate_global,
                now,
            )
        });
        if let Some(reason) = limited {
            return self.refuse(ctx, request, Refusal::Denied { reason }).await;
        }
        match proposed {
            Some((description, category, verb_fingerprint)) if request.break_glass => {
                let roles = match break_glass_roles(ctx, &call.verb) {
                    Ok(roles) => roles,
                    Err(reason) => {
                        return self.refuse(ctx, request, Refusal::Denied { reason }).await;
                    }
                };
                let new = NewProposal {
                    call,
                    description,
                    category,
                    verb_fingerprint,
                    reason: request.reason.clone(),
                    idempotency_key: None,
                };
                self.break_glass(ctx, new, roles, cancel).await
            }
            Some((description, category, verb_fingerprint)) => {
                let waiting = self.ledger.read(|b| b.pending_count(uid));
                if waiting >= MAX_PENDING_PER_REQUESTER {
                    let reason = format!(
                        "you already have {waiting} proposals waiting for a human; wait for decisions (`verbd wait ID`) before proposing more"
                    );
                    return self.refuse(ctx, request, Refusal::Denied { reason }).await;
                }
                self.propose(
                    ctx,
                    NewProposal {
                        call,
                        description,
                        category,
                        verb_fingerprint,
                        reason: request.reason.clone(),
                        idempotency_key: request.idempotency_key.clone(),
                    },
                )
                .await
            }
            None => {
                let run = Run {
                    requester: ctx.record.clone(),
                    call,
                    proposal: None,
                    idempotency_key: request.idempotency_key.clone(),
                    chunks: request.chunks.clone(),
                };
                self.run(&ctx.prepared, run, cancel, None).await
            }
        }
    }

    /// A retry with a known idempotency key: the first call's outcome, never a second run.
    async fn idempotent_reply(
        &self,
        ctx: &Context,
        request: &CallRequest,
        call: &PreparedCall,
        key: &str,
        entry: KeyEntry,
    ) -> Response {
        if entry.verb != call.verb || entry.args_hash != call.args_hash {
            let reason = format!(
                "idempotency_key {key:?} was already used with different arguments (verb `{}`); use a new key for a different action",
                entry.verb
            );
            return self.refuse(ctx, request, Refusal::Denied { reason }).await;
        }
        match entry.target {
            KeyTarget::Proposal(id) => match self.proposal_view(id) {
                Some(view) if view.proposal.state == State::Pending => {
                    confirm_required(&view.proposal)
                }
                Some(view) => Response::Proposals {
                    proposals: vec![view],
                },
                None => Response::Error {
                    message: format!("proposal {id} of idempotency_key {key:?} is unknown"),
                },
            },
            KeyTarget::Run { exec_seq, end } => match end {
                RunEnd::Running => Response::Busy {
                    message: format!(
                        "the first call with idempotency_key {key:?} is still running; ask again later"
                    ),
                },
                RunEnd::Finished { exit, duration_ms } => Response::Ok {
                    result: self.ledger.output(exec_seq).unwrap_or(RunResult {
                        exit,
                        stdout: String::new(),
                        stderr: "(verbd: the output of the first run is not kept across daemon restarts)\n".into(),
                        stdout_truncated: false,
                        stderr_truncated: false,
                        stdout_withheld: 0,
                        stderr_withheld: 0,
                        duration_ms,
                        ended_by: None,
                    }),
                    proposal: None,
                },
                RunEnd::Failed { error } => Response::Error {
                    message: format!(
                        "the first call with idempotency_key {key:?} did not run: {error}"
                    ),
                },
                RunEnd::Cancelled => Response::Denied {
                    reason: format!(
                        "the first call with idempotency_key {key:?} was cancelled while it ran (its client hung up, or the daemon stopped) and may have partly acted; it never runs twice under one key: check its effect, then use a new key"
                    ),
                },
                RunEnd::Interrupted => Response::Denied {
                    reason: format!(
                        "the daemon stopped while the first call with idempotency_key {key:?} ran, so its outcome is unknown; it never runs twice under one key: check its effect, then use a new key"
                    ),
                },
            },
        }
    }

    pub(super) async fn refuse(
        &self,
        ctx: &Context,
        request: &CallRequest,
        refusal: Refusal,
    ) -> Response {
        let (decision, response) = refusal_response(&refusal);
        let class = match decision {
            RefusalKind::Denied => RefusalClass::Denied,
            RefusalKind::Invalid => RefusalClass::Invalid,
        };
        let event = Event::Refused {
            caller: ctx.record.clone(),
            verb: Bounded::new(&request.verb),
            args: RefusedArgs::new(&request.args),
            decision,
            reason: Bounded::new(&refusal.message()),
        };
        let rule = super::metrics::refusal_rule(&refusal);
        match self.record_refusal(&ctx.record, class, rule, event).await {
            Ok(()) => response,
            Err(e) => journal_failure(&e),
        }
    }

    /// Run a prepared call to its journaled end, once it has its execution slots (`slots`).
    pub(super) async fn run(
        &self,
        prepared: &Prepared,
        run: Run,
        mut cancel: Cancel,
        queued: Option<tokio::sync::oneshot::Sender<String>>,
    ) -> Response {
        // A direct call of a streaming verb needs a stream place first (an approved run was
        // decided by a human and is bounded by the approvals).
        let _stream_place = match (&run.call.limits.stream, run.proposal) {
            (Some(_), None) => match self.stream_places.take(run.requester.uid) {
                Ok(place) => Some(place),
                Err(refused) => {
                    return Response::Busy {
                        message: refused.to_string(),
                    };
                }
            },
            _ => None,
        };
        let _slots = match self.slots(prepared, &run, &mut cancel, queued).await {
            Ok(slots) => slots,
            Err(response) => return response,
        };
        let Run {
            requester,
            call,
            proposal,
            idempotency_key,
            chunks,
        } = run;
        let keyed = idempotency_key.is_some();
        let exec_seq = match self
            .record(Event::Exec {
                caller: requester,
                decision: if proposal.is_some() {
                    RunDecision::Approved
                } else {
                    RunDecision::Run
                },
                verb: call.verb.clone(),
                args: journaled_args(&call),
                args_hash: call.args_hash.clone(),
                argv: call.display_argv(),
                proposal,
                idempotency_key,
            })
            .await
        {
            Ok(appended) => appended.seq,
            Err(e) => return journal_failure(&e),
        };
        let started = Instant::now();
        let ended = match &call.action {
            PreparedAction::Exec { .. } => {
                match self.mint_credential(prepared, &call, exec_seq).await {
                    Err(message) => not_started(&call, exec_seq, proposal, message),
                    Ok(lease) => {
                        let credentials = lease.as_ref().map(|l| l.env());
                        let ended = tokio::select! {
                            ended = self.execute(
                                prepared,
                                &call,
                                exec_seq,
                                proposal,
                                credentials.as_ref().map_or(&[][..], |c| &c[..]),
                                chunks,
                            ) => ended,
                            // Dropping the execution kills the child's process group.
                            cause = cancel.cancelled() => Ended::Cancelled(cause),
                        };
                        match lease {
                            Some(lease) => match self.drop_credential(lease).await {
                                Ok(()) => ended,
                                Err(message) => ended.answered_with(Response::Error {
                                    message: format!("the verb ran, but {message}"),
                                }),
                            },
                            None => ended,
                        }
                    }
                }
            }
            // A file operation cannot be interrupted halfway: it completes and is journaled.
            PreparedAction::File(file) => {
                match self
                    .file_verb(prepared, &call, file, exec_seq, proposal)
                    .await
                {
                    Ok(ended) => ended,
                    Err(e) => return end_not_journaled(&e),
                }
            }
        };
        match ended {
            Ended::Finished { result, response } => {
                if let Err(e) = self.record(*result).await {
                    return end_not_journaled(&e);
                }
                if let Response::Ok { result, .. } = &response
                    && (proposal.is_some() || keyed)
                {
                    self.ledger.keep_output(exec_seq, result.clone());
                }
                response
            }
            Ended::CancelledAnswered(cause, response) => {
                let event = Event::Cancelled {
                    verb: call.verb.clone(),
                    exec_seq,
                    proposal,
                    cause,
                    duration_ms: started.elapsed().as_millis() as u64,
                };
                if let Err(e) = self.record(event).await {
                    return end_not_journaled(&e);
                }
                response
            }
            Ended::Cancelled(cause) => {
                let event = Event::Cancelled {
                    verb: call.verb.clone(),
                    exec_seq,
                    proposal,
                    cause,
                    duration_ms: started.elapsed().as_millis() as u64,
                };
                if let Err(e) = self.record(event).await {
                    return end_not_journaled(&e);
                }
                tracing::info!(verb = %call.verb, exec_seq, ?cause, "run cancelled");
                Response::Error {
                    message: "the run was cancelled; its process group was killed".into(),
                }
            }
        }
    }

    /// The verb's own slot (with `max_concurrent`) and the global execution slot, taken in
    /// that order. Over a limit, a direct call waits in its caller's lane for at most
    /// `daemon.queue_timeout` (`busy` after it; nothing journaled, nothing ran), leaving the
    /// queue if its client hangs up; an approved proposal's run journals `proposal_queued`, says
    /// so once through `queued` and waits up to [`APPROVED_RUN_SLOT_WAIT`] in the lane of
    /// approved runs.
    async fn slots(
        &self,
        prepared: &Prepared,
        run: &Run,
        cancel: &mut Cancel,
        queued: Option<tokio::sync::oneshot::Sender<String>>,
    ) -> Result<(Slot, Option<Slot>), Response> {
        let verb = &run.call.verb;
        let own_slots = prepared.verb_permits.get(verb).cloned();
        let own_now = own_slots.as_ref().map(FairSlots::try_take);
        if !matches!(own_now, Some(None))
            && let Some(global) = self.exec_slots.try_take()
        {
            return Ok((global, own_now.flatten()));
        }
        drop(own_now);
        let verb_limit = |slots: &FairSlots| {
            format!(
                "verb `{verb}` is already running its maximum of {} (max_concurrent)",
                slots.capacity()
            )
        };
        let global_limit = format!(
            "verbd is running its maximum of {} executions (daemon.max_executions)",
            self.exec_slots.capacity()
        );
        let (lane, wait) = match run.proposal {
            None => (
                Lane::Caller(run.requester.uid),
                prepared.policy.daemon.queue_timeout,
            ),
            Some(id) => {
                // An approval is never lost to a transient limit: the run waits for a slot.
                let busy_reason = match &own_slots {
                    Some(own) if own.in_use() >= own.capacity() => verb_limit(own),
                    _ => global_limit.clone(),
                };
                let reason = format!(
                    "{busy_reason}; the approved run waits for a slot (at most {}s)",
                    APPROVED_RUN_SLOT_WAIT.as_secs()
                );
                if let Err(e) = self
                    .record(Event::ProposalQueued {
                        id,
                        reason: reason.clone(),
                    })
                    .await
                {
                    return Err(journal_failure(&e));
                }
                if let Some(queued) = queued {
                    let _ = queued.send(reason);
                }
                (Lane::Approved, APPROVED_RUN_SLOT_WAIT)
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        let global_slots = self.exec_slots.clone();
        let acquire = async {
            let own = match &own_slots {
                Some(own) => match own.take(lane, deadline).await {
                    Some(slot) => Some(slot),
                    None => return Err(verb_limit(own)),
                },
                None => None,
            };
            match global_slots.take(lane, deadline).await {
                Some(global) => Ok((global, own)),
                None => Err(global_limit.clone()),
            }
        };
        let outcome = tokio::select! {
            acquired = acquire => acquired.map_err(Some),
            _ = cancel.cancelled() => Err(None),
        };
        let full = match outcome {
            Ok(slots) => return Ok(slots),
            Err(full) => full,
        };
        let Some(id) = run.proposal else {
            return Err(match full {
                Some(limit) => Response::Busy {
                    message: format!(
                        "{limit}, and none freed within {wait:?} (daemon.queue_timeout); retry shortly"
                    ),
                },
                None => Response::Error {
                    message:
                        "the call was cancelled while it waited for an execution slot; nothing ran"
                            .into(),
                },
            });
        };
        let why = match full {
            Some(_) => format!(
                "not executed: no execution slot freed within {}s of the approval; propose again",
                APPROVED_RUN_SLOT_WAIT.as_secs()
            ),
            None => {
                "not executed: the daemon stopped before an execution slot freed; propose again"
                    .to_string()
            }
        };
        let response = Response::Error {
            message: format!("proposal {id}: {why}"),
        };
        match self
            .record(Event::ProposalNotStarted {
                id,
                reason: Some(why),
            })
            .await
        {
            Ok(_) => Err(response),
            Err(e) => Err(journal_failure(&e)),
        }
    }

    /// Run the child of a journaled exec record; the `result` record and answer for its end.
    async fn execute(
        &self,
        prepared: &Prepared,
        call: &PreparedCall,
        exec_seq: u64,
        proposal: Option<u64>,
        credentials: &[crate::exec::CallCredential<'_>],
        chunks: Option<tokio::sync::mpsc::Sender<crate::exec::LiveChunk>>,
    ) -> Ended {
        let PreparedAction::Exec { argv, env, .. } = &call.action else {
            unreachable!("execute is only called for argv actions");
        };
        let outcome = match prepared.sandboxes.get(&call.limits.sandbox) {
            Some(sandbox) => exec::run(ExecRequest {
                argv,
                env,
                cwd: &call.limits.cwd,
                timeout: call.limits.timeout,
                max_output: call.limits.max_output,
                sandbox,
                secrets: &prepared.secrets,
                scrubber: &prepared.scrubber,
                credentials,
                stdin: None,
                live: call
                    .limits
                    .stream
                    .map(|bounds| exec::LiveRun { bounds, chunks }),
            })
            .await
            .map_err(|e| e.to_string()),
            None => Err(format!("sandbox `{}` is not prepared", call.limits.sandbox)),
        };
        match outcome {
            Ok(outcome) => {
                let result = RunResult {
                    exit: outcome.exit.clone(),
                    stdout: String::from_utf8_lossy(&outcome.stdout.bytes).into_owned(),
                    stderr: String::from_utf8_lossy(&outcome.stderr.bytes).into_owned(),
                    stdout_truncated: outcome.stdout.truncated,
                    stderr_truncated: outcome.stderr.truncated,
                    stdout_withheld: outcome.stdout.withheld,
                    stderr_withheld: outcome.stderr.withheld,
                    duration_ms: outcome.duration.as_millis() as u64,
                    ended_by: outcome.ended_by,
                };
                Ended::Finished {
                    result: Box::new(Event::Result {
                        verb: call.verb.clone(),
                        exec_seq,
                        proposal,
                        exit_code: outcome.exit.code,
                        signal: outcome.exit.signal,
                        timed_out: outcome.exit.timed_out,
                        duration_ms: result.duration_ms,
                        stdout: OutputRecord::of(&outcome.stdout),
                        stderr: OutputRecord::of(&outcome.stderr),
                        error: None,
                        ended_by: outcome.ended_by,
                    }),
                    response: Response::Ok { result, proposal },
                }
            }
            Err(message) => not_started(call, exec_seq, proposal, message),
        }
    }

    /// Run a built-in file operation (no child: the daemon resolves beneath the roots itself).
    /// A write journals `file_write` before the end record is built.
    async fn file_verb(
        &self,
        prepared: &Prepared,
        call: &PreparedCall,
        file: &FileCall,
        exec_seq: u64,
        proposal: Option<u64>,
    ) -> Result<Ended, crate::journal::JournalError> {
        let started = Instant::now();
        let op = file.clone();
        let outcome = tokio::task::spawn_blocking(move || file_operation(&op))
            .await
            .expect("file task panicked");
        let duration_ms = started.elapsed().as_millis() as u64;
        let (stdout, error) = match outcome {
            Ok(FileOutcome::Written(receipt)) => {
                self.record(Event::FileWrite {
                    verb: call.verb.clone(),
                    exec_seq,
                    path: receipt.path.display().to_string(),
                    size: receipt.size,
                    sha256: receipt.sha256.clone(),
                    created: receipt.created,
                })
                .await?;
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
            Ok(FileOutcome::Read(bytes)) => (prepared.scrubber.scrub(&bytes), None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let captured = Captured {
            total: stdout.len() as u64,
            bytes: stdout,
            truncated: false,
            withheld: 0,
        };
        let result = Box::new(Event::Result {
            verb: call.verb.clone(),
            exec_seq,
            proposal,
            exit_code: Some(if error.is_some() { 1 } else { 0 }),
            signal: None,
            timed_out: false,
            duration_ms,
            stdout: OutputRecord::of(&captured),
            stderr: OutputRecord::of(&Captured::default()),
            error: error.clone(),
            ended_by: None,
        });
        let response = match error {
            // A refused path is the caller's to fix: say why, like any other refusal.
            Some(reason) => Response::Denied { reason },
            None => Response::Ok {
                result: RunResult {
                    exit: ExitInfo {
                        code: Some(0),
                        signal: None,
                        timed_out: false,
                    },
                    stdout: String::from_utf8_lossy(&captured.bytes).into_owned(),
                    stderr: String::new(),
                    stdout_truncated: false,
                    stderr_truncated: false,
                    stdout_withheld: 0,
                    stderr_withheld: 0,
                    duration_ms,
                    ended_by: None,
                },
                proposal,
            },
        };
        Ok(Ended::Finished { result, response })
    }

    /// Answer a `check` (the hook adapter): may the caller write `path`? Allowed only beneath
    /// the roots of file.write/file.append verbs the caller's roles may use, never on a
    /// protected name. Journaled.
    pub(super) async fn check(
        &self,
        ctx: &Context,
        path: String,
        tool: Option<String>,
    ) -> Response {
        let policy = &ctx.prepared.policy;
        let roots: Vec<PathBuf> = policy
            .verbs_for(&ctx.role_refs())
            .filter_map(|v| match &v.action {
                crate::policy::VerbAction::File(spec)
                    if matches!(spec.op, FileOp::Write | FileOp::Append) =>
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
            crate::files::check_write(&roots, &policy.protected, Path::new(&path))
                .map_err(|e| e.to_string())
        };
        let (allowed, reason) = match verdict {
            Ok(()) => (true, format!("{path} is beneath an allowed root")),
            Err(reason) => (false, reason),
        };
        let event = Event::Check {
            caller: ctx.record.clone(),
            path: Bounded::new(&path),
            tool: tool.as_deref().map(Bounded::new),
            allowed,
            reason: Bounded::new(&reason),
        };
        let recorded = if allowed {
            self.record(event).await.map(|_| ())
        } else {
            self.record_refusal(
                &ctx.record,
                RefusalClass::CheckDenied,
                "check_denied",
                event,
            )
            .await
        };
        match recorded {
            Ok(()) => Response::Check { allowed, reason },
            Err(e) => journal_failure(&e),
        }
    }
}

enum FileOutcome {
    Written(WriteReceipt),
    Read(Vec<u8>),
}

fn file_operation(file: &FileCall) -> Result<FileOutcome, crate::files::FileError> {
    let spec = &file.spec;
    match spec.op {
        FileOp::Write => crate::files::write_file(spec, &file.path, &file.content, file.mode)
            .map(FileOutcome::Written),
        FileOp::Append => {
            crate::files::append_file(spec, &file.path, &file.content).map(FileOutcome::Written)
        }
        FileOp::Read => crate::files::read_file(spec, &file.path).map(FileOutcome::Read),
        FileOp::List => crate::files::list_dir(spec, &file.path).map(|entries| {
            let text: String = entries
                .iter()
                .map(|e| format!("{:?}\t{}\t{}\n", e.kind, e.size, e.name))
                .collect();
            FileOutcome::Read(text.into_bytes())
        }),
    }
}

/// A streaming call's bounds: the verb's, lowered where the caller asked (never raised). A
/// caller that asks for bounds of a verb that does not stream is refused; one that asks for
/// none gets the verb's (and one answer from a verb that does not stream).
fn lower_stream_bounds(
    verb: &str,
    limits: &mut CallLimits,
    ask: &StreamAsk,
) -> Result<(), ParamRejection> {
    let refuse = |param: &str, message: String| ParamRejection {
        param: param.into(),
        rule: "stream-bound",
        message,
    };
    let Some(bounds) = &mut limits.stream else {
        return match (ask.max_duration_ms, ask.max_lines) {
            (None, None) => Ok(()),
            _ => Err(refuse(
                "stream",
                format!("verb `{verb}` does not stream, so it takes no stream bounds"),
            )),
        };
    };
    if let Some(ms) = ask.max_duration_ms {
        let asked = Duration::from_millis(ms);
        if ms == 0 || asked > bounds.max_duration {
            return Err(refuse(
                "stream.max_duration_ms",
                format!(
                    "{ms} is not within 1..={} (the verb's stream.max_duration)",
                    bounds.max_duration.as_millis()
                ),
            ));
        }
        bounds.max_duration = asked;
    }
    if let Some(lines) = ask.max_lines {
        let most = bounds.max_lines.unwrap_or(u64::MAX);
        if lines == 0 || lines > most {
            return Err(refuse(
                "stream.max_lines",
                format!("{lines} is not within 1..={most} (the verb's stream.max_lines)"),
            ));
        }
        bounds.max_lines = Some(lines);
    }
    limits.timeout = bounds.max_duration;
    Ok(())
}

/// Arguments as journaled: file content is recorded as its size and sha256, never verbatim.
fn journaled_args(call: &PreparedCall) -> BTreeMap<String, String> {
    let mut args = call.args.clone();
    if matches!(call.action, PreparedAction::File(_))
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

fn refusal_response(refusal: &Refusal) -> (RefusalKind, Response) {
    match refusal {
        Refusal::NotAvailable { .. } | Refusal::Headless { .. } | Refusal::Denied { .. } => (
            RefusalKind::Denied,
            Response::Denied {
                reason: refusal.message(),
            },
        ),
        Refusal::Missing { params } => (
            RefusalKind::Invalid,
            Response::Invalid {
                param: None,
                rule: "missing".into(),
                message: refusal.message(),
                missing: params.clone(),
            },
        ),
        Refusal::UnknownParam { param, .. } => (
            RefusalKind::Invalid,
            Response::Invalid {
                param: Some(param.clone()),
                rule: "unknown-parameter".into(),
                message: refusal.message(),
                missing: Vec::new(),
            },
        ),
        Refusal::Invalid(r) => (
            RefusalKind::Invalid,
            Response::Invalid {
                param: Some(r.param.clone()),
                rule: r.rule.into(),
                message: refusal.message(),
                missing: Vec::new(),
            },
        ),
    }
}
