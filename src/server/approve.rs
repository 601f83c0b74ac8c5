//! Request handlers for calls that may need a human: proposals, approvals, idempotency, rates.
//!
//! Every state change is journaled before it is acted on or announced; the book in memory is
//! only ever a replay of the journal plus changes already journaled (see `approvals`).
#![forbid(unsafe_code)]

use super::audit::{AuditEvent, CallerRecord};
use super::{Daemon, Runtime, journal_failure};
use crate::approvals::{
    ClaimRefusal, Decider, KeyTarget, MAX_PENDING_PER_REQUESTER, PROPOSAL_VERSION, Proposal,
    RequesterRecord, State, escape_for_terminal, unix_ms,
};
use crate::exec::{self, ExecRequest};
use crate::journal::format_rfc3339;
use crate::policy::{
    ApprovalScope, Caller, PreparedAction, PreparedCall, Refusal, Role, Verb, Verdict,
};
use crate::protocol::Response;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest a `wait` may block.
const MAX_WAIT: Duration = Duration::from_secs(600);
/// Shortest hash prefix an approver must type.
const MIN_HASH_PREFIX: usize = 8;

fn decider(caller: &Caller) -> Decider {
    Decider {
        uid: caller.uid,
        user: caller.user.clone(),
    }
}

fn time_of_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The proposal as shown to approvers and requesters (JSON).
pub fn proposal_view(p: &Proposal) -> serde_json::Value {
    let mut v = serde_json::to_value(p).expect("proposals serialize");
    if let serde_json::Value::Object(map) = &mut v {
        map.insert("state".into(), p.state.as_str().into());
        map.insert(
            "created_at".into(),
            format_rfc3339(time_of_ms(p.created_ms)).into(),
        );
        map.insert(
            "expires_at".into(),
            format_rfc3339(time_of_ms(p.expires_ms)).into(),
        );
        map.insert("reason_is_untrusted".into(), true.into());
        if let Some(r) = &p.result {
            map.insert(
                "result".into(),
                serde_json::to_value(r).expect("results serialize"),
            );
        }
    }
    v
}

fn confirm_required(p: &Proposal) -> Response {
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

impl Daemon {
    /// Journal every pending proposal past its expiry as expired.
    async fn expire_overdue(&self) {
        let overdue = self.book().overdue(SystemTime::now());
        for id in overdue {
            if self
                .journal(AuditEvent::ProposalExpired { id })
                .await
                .is_ok()
                && let Some(p) = self.book().get_mut(id)
                && p.state == State::Pending
            {
                p.state = State::Expired;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn call(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        roles: &[&Role],
        record: CallerRecord,
        verb: String,
        args: BTreeMap<String, serde_json::Value>,
        reason: Option<String>,
        idempotency_key: Option<String>,
    ) -> Response {
        let verdict = runtime.policy.evaluate(roles, &verb, &args);
        let call = match verdict {
            Verdict::Refuse(refusal) => return self.refuse(record, &verb, args, refusal).await,
            Verdict::Run(call) | Verdict::Propose(call) => call,
        };
        let needs_approval = runtime.policy.verbs[&call.verb].needs_approval;
        let now = SystemTime::now();
        self.expire_overdue().await;
        if let Some(key) = &idempotency_key {
            if key.is_empty() || key.len() > 200 || key.contains(['\n', '\0']) {
                return Response::Invalid {
                    param: None,
                    rule: "idempotency-key".into(),
                    message: "idempotency_key must be 1..200 characters without NUL or newline"
                        .into(),
                    missing: Vec::new(),
                };
            }
            let known = self.book().key(record.uid, key, now).cloned();
            if let Some(entry) = known {
                if entry.verb != call.verb || entry.args_hash != call.args_hash {
                    return self
                        .refuse(
                            record,
                            &verb,
                            args,
                            Refusal::Denied {
                                reason: format!(
                                    "idempotency_key {key:?} was already used with different arguments (verb `{}`); use a new key for a different action",
                                    entry.verb
                                ),
                            },
                        )
                        .await;
                }
                match entry.target {
                    KeyTarget::Proposal(id) => {
                        let book = self.book();
                        if let Some(p) = book.get(id) {
                            return if p.state == State::Pending {
                                confirm_required(p)
                            } else {
                                Response::Proposals {
                                    proposals: vec![proposal_view(p)],
                                }
                            };
                        }
                    }
                    KeyTarget::Run { .. } => {
                        if let Some(result) = entry.result {
                            return Response::Ok {
                                result,
                                proposal: None,
                            };
                        }
                        return Response::Busy {
                            message: format!(
                                "the first call with idempotency_key {key:?} is still running; ask again later"
                            ),
                        };
                    }
                }
            }
        }
        let verb_def = runtime.policy.verbs[&call.verb].clone();
        if needs_approval
            && let Some(existing) =
                self.book()
                    .pending_for(record.uid, &call.verb, &call.args_hash, now)
        {
            return confirm_required(existing);
        }
        let limited = self.book().rate_exceeded(
            &call.verb,
            record.uid,
            verb_def.rate,
            verb_def.rate_global,
            now,
        );
        if let Some(reason) = limited {
            return self
                .refuse(record, &verb, args, Refusal::Denied { reason })
                .await;
        }
        if needs_approval {
            let waiting = self.book().pending_count(record.uid);
            if waiting >= MAX_PENDING_PER_REQUESTER {
                let reason = format!(
                    "you already have {waiting} proposals waiting for a human; wait for decisions (`verbd wait ID`) before proposing more"
                );
                return self
                    .refuse(record, &verb, args, Refusal::Denied { reason })
                    .await;
            }
            self.propose(runtime, verb_def, record, call, reason, idempotency_key)
                .await
        } else {
            self.run_call(&runtime, record, call, None, idempotency_key)
                .await
        }
    }

    async fn propose(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        verb: Verb,
        record: CallerRecord,
        call: PreparedCall,
        reason: Option<String>,
        idempotency_key: Option<String>,
    ) -> Response {
        let (dry_run_argv, dry_run_output) = match &call.action {
            PreparedAction::Exec {
                dry_run: Some(dry_run),
                env,
                ..
            } => {
                let Some(sandbox) = runtime.dry_run_sandboxes.get(&verb.sandbox) else {
                    return Response::Error {
                        message: format!("sandbox `{}` is not prepared", verb.sandbox),
                    };
                };
                let secret_dir = self.settings.state_dir.join(super::SECRET_FILES_DIR);
                let outcome = exec::run(ExecRequest {
                    argv: dry_run,
                    env,
                    cwd: &verb.cwd,
                    timeout: verb.timeout,
                    max_output: verb.max_output.min(64 * 1024),
                    sandbox,
                    secrets: &runtime.secrets,
                    secret_dir: &secret_dir,
                    scrubber: &runtime.scrubber,
                    stdin: None,
                })
                .await;
                let text = match outcome {
                    Ok(o) => format!(
                        "exit {}{}\n--- stdout ---\n{}--- stderr ---\n{}",
                        o.exit
                            .code
                            .map_or_else(|| "by signal".to_string(), |c| c.to_string()),
                        if o.exit.timed_out { " (timed out)" } else { "" },
                        String::from_utf8_lossy(&o.stdout.bytes),
                        String::from_utf8_lossy(&o.stderr.bytes)
                    ),
                    Err(e) => format!("dry run could not run: {e}"),
                };
                (Some(dry_run.display()), Some(text))
            }
            _ => (None, None),
        };
        let now = SystemTime::now();
        let proposal = {
            let book = self.book();
            Proposal {
                id: book.next_id(),
                version: PROPOSAL_VERSION,
                verb: call.verb.clone(),
                description: verb.description.clone(),
                category: verb.category_label().into(),
                args: call.args.clone(),
                args_hash: call.args_hash.clone(),
                argv: call.display_argv(),
                dry_run_argv,
                dry_run_output,
                requester: RequesterRecord::from(&record),
                reason: reason.map(|r| r.chars().take(2000).collect()),
                policy_hash: runtime.policy.hash.clone(),
                verb_fingerprint: verb.fingerprint(),
                created_ms: unix_ms(now),
                expires_ms: unix_ms(now + runtime.policy.approvals.expires),
                idempotency_key,
                state: State::Pending,
                decided_by: None,
                note: None,
                exit_code: None,
                signal: None,
                result: None,
            }
        };
        // Reserve the id before the (slow) journal write so concurrent proposals differ.
        self.book().insert(proposal.clone());
        if let Err(e) = self
            .journal(AuditEvent::ProposalCreated {
                id: proposal.id,
                proposal: Box::new(proposal.clone()),
            })
            .await
        {
            if let Some(p) = self.book().get_mut(proposal.id) {
                p.state = State::Failed;
                p.note = Some("proposal could not be journaled".into());
            }
            return journal_failure(&e);
        }
        if let Some(notify) = runtime.policy.approvals.notify.clone() {
            let daemon = self.clone();
            let runtime = runtime.clone();
            let p = proposal.clone();
            tokio::spawn(async move { daemon.notify(&runtime, &notify, &p).await });
        }
        confirm_required(&proposal)
    }

    async fn notify(
        &self,
        runtime: &Runtime,
        template: &crate::policy::template::Template,
        proposal: &Proposal,
    ) {
        let id_param = crate::policy::params::Param {
            name: "id".into(),
            description: String::new(),
            kind: crate::policy::params::ParamKind::Int {
                min: 1,
                max: i64::MAX,
            },
            required: true,
            default: None,
            allow_dash: false,
        };
        let params = BTreeMap::from([("id".to_string(), id_param)]);
        let args = BTreeMap::from([("id".to_string(), proposal.id.to_string())]);
        let error = match (
            template.render(&params, &args),
            runtime
                .sandboxes
                .get(crate::policy::compile::DEFAULT_SANDBOX),
        ) {
            (Ok(argv), Some(sandbox)) => {
                let secret_dir = self.settings.state_dir.join(super::SECRET_FILES_DIR);
                let outcome = exec::run(ExecRequest {
                    argv: &argv,
                    env: &[],
                    cwd: std::path::Path::new("/"),
                    timeout: Duration::from_secs(30),
                    max_output: 64 * 1024,
                    sandbox,
                    secrets: &runtime.secrets,
                    secret_dir: &secret_dir,
                    scrubber: &runtime.scrubber,
                    stdin: Some(serde_json::to_vec(&proposal_view(proposal)).unwrap_or_default()),
                })
                .await;
                match outcome {
                    Ok(o) if o.exit.code == Some(0) => None,
                    Ok(o) => Some(format!(
                        "notifier exited with {:?} (signal {:?}): {}",
                        o.exit.code,
                        o.exit.signal,
                        String::from_utf8_lossy(&o.stderr.bytes)
                            .chars()
                            .take(500)
                            .collect::<String>()
                    )),
                    Err(e) => Some(e.to_string()),
                }
            }
            (Err(e), _) => Some(e.to_string()),
            (_, None) => Some("the default sandbox is not prepared".into()),
        };
        if let Some(error) = error {
            tracing::warn!(id = proposal.id, %error, "approval notifier failed");
            let _ = self
                .journal(AuditEvent::NotifyFailed {
                    id: proposal.id,
                    error,
                })
                .await;
        }
    }

    /// The approver check for a proposal of `verb` (the global approvers if it no longer exists).
    fn approver_refusal(
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
        verb: Option<&Verb>,
        requester_uid: Option<u32>,
    ) -> Option<String> {
        let scope = verb.map_or(ApprovalScope::Policy, ApprovalScope::Verb);
        runtime
            .policy
            .approver_refusal(caller.uid, roles, scope, requester_uid)
    }

    pub(super) async fn pending(
        &self,
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
    ) -> Response {
        if let Some(reason) =
            runtime
                .policy
                .approver_refusal(caller.uid, roles, ApprovalScope::AnyVerb, None)
        {
            return Response::Denied { reason };
        }
        self.expire_overdue().await;
        let book = self.book();
        Response::Proposals {
            proposals: book
                .all()
                .filter(|p| matches!(p.state, State::Pending | State::UnknownOutcome))
                .map(proposal_view)
                .collect(),
        }
    }

    pub(super) async fn approve(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        caller: &Caller,
        roles: &[Role],
        id: u64,
        hash: String,
    ) -> Response {
        self.expire_overdue().await;
        let by = decider(caller);
        let Some(proposal) = self.book().get(id).cloned() else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        let verb = runtime.policy.verbs.get(&proposal.verb);
        let refusal = if let Some(r) =
            Self::approver_refusal(&runtime, caller, roles, verb, Some(proposal.requester.uid))
        {
            Some(r)
        } else if hash.len() < MIN_HASH_PREFIX
            || !hash.bytes().all(|b| b.is_ascii_hexdigit())
            || !proposal.args_hash.starts_with(&hash.to_ascii_lowercase())
        {
            Some(format!(
                "hash {hash:?} does not match proposal {id} (give at least {MIN_HASH_PREFIX} hex digits of the hash `verbd pending` shows)"
            ))
        } else if proposal.state != State::Pending {
            None // answered below with the decided state
        } else {
            match verb {
                None => Some(format!(
                    "verb `{}` no longer exists in the policy; the proposal cannot run",
                    proposal.verb
                )),
                Some(v) if v.fingerprint() != proposal.verb_fingerprint => Some(format!(
                    "the policy changed verb `{}` (template, params, env or sandbox) since this proposal was made; it cannot run on the old approval. Ask the agent to propose again",
                    v.name
                )),
                Some(_) => None,
            }
        };
        if let Some(reason) = refusal {
            let _ = self
                .journal(AuditEvent::ApprovalRefused {
                    id,
                    by,
                    reason: reason.clone(),
                })
                .await;
            return Response::Denied { reason };
        }
        // Re-render from the current policy, as the requester: they must still be allowed to
        // call the verb, and it must give exactly the stored call.
        let (uid, gid, pid) = (
            proposal.requester.uid,
            proposal.requester.gid,
            proposal.requester.pid,
        );
        let requester =
            tokio::task::spawn_blocking(move || super::peer::caller_from_cred(uid, gid, pid))
                .await
                .expect("caller lookup panicked");
        let requester_roles: Vec<&Role> = runtime
            .policy
            .roles_of(&requester, self.settings.invoker_uid);
        let raw_args = crate::policy::text_args(&proposal.args);
        let call = match runtime
            .policy
            .evaluate(&requester_roles, &proposal.verb, &raw_args)
        {
            Verdict::Propose(call) | Verdict::Run(call)
                if call.args_hash == proposal.args_hash && call.display_argv() == proposal.argv =>
            {
                call
            }
            Verdict::Refuse(refusal) => {
                return Response::Denied {
                    reason: format!(
                        "under the current policy the requester's call is refused ({}); nothing ran",
                        refusal.message()
                    ),
                };
            }
            _ => {
                return Response::Denied {
                    reason: "the stored call no longer renders to the same argv under the current policy; nothing ran".into(),
                };
            }
        };
        let claimed = self
            .book()
            .claim(id, SystemTime::now(), by.clone())
            .map(|_| ());
        match claimed {
            Err(ClaimRefusal::NotFound) => {
                return Response::Denied {
                    reason: format!("no proposal {id}"),
                };
            }
            Err(ClaimRefusal::Expired) => {
                self.expire_overdue().await;
                return Response::Decided {
                    id,
                    state: State::Expired.as_str().into(),
                    message: format!("proposal {id} expired; nothing ran"),
                };
            }
            Err(ClaimRefusal::NotPending(state)) => {
                return Response::Decided {
                    id,
                    state: state.as_str().into(),
                    message: format!(
                        "proposal {id} was already decided ({}); an approval is used once",
                        state.as_str()
                    ),
                };
            }
            Ok(()) => {}
        }
        if let Err(e) = self
            .journal(AuditEvent::ProposalApproved {
                id,
                by,
                hash: proposal.args_hash.clone(),
            })
            .await
        {
            self.book().unclaim(id);
            return journal_failure(&e);
        }
        let requester = CallerRecord {
            uid: proposal.requester.uid,
            gid: u32::MAX,
            pid: proposal.requester.pid,
            user: proposal.requester.user.clone(),
            roles: Vec::new(),
        };
        // The run belongs to the daemon, not to the approver's connection.
        let daemon = self.clone();
        let task = tokio::spawn(async move {
            daemon
                .run_call(&runtime, requester, call, Some(id), None)
                .await
        });
        task.await.unwrap_or_else(|e| Response::Error {
            message: format!("execution task failed: {e}"),
        })
    }

    pub(super) async fn deny(
        &self,
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
        id: u64,
        reason: String,
    ) -> Response {
        self.expire_overdue().await;
        let Some(proposal) = self.book().get(id).cloned() else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        let verb = runtime.policy.verbs.get(&proposal.verb);
        // Denying is allowed to the requester too (withdrawing their own request).
        let refusal = if caller.uid == proposal.requester.uid {
            None
        } else {
            Self::approver_refusal(runtime, caller, roles, verb, None)
        };
        if let Some(r) = refusal {
            return Response::Denied { reason: r };
        }
        let by = decider(caller);
        {
            let mut book = self.book();
            let Some(p) = book.get_mut(id) else {
                return Response::Denied {
                    reason: format!("no proposal {id}"),
                };
            };
            if p.state != State::Pending {
                return Response::Decided {
                    id,
                    state: p.state.as_str().into(),
                    message: format!("proposal {id} was already decided"),
                };
            }
            p.state = State::Denied;
            p.decided_by = Some(by.clone());
            p.note = Some(reason.clone());
        }
        if let Err(e) = self
            .journal(AuditEvent::ProposalDenied {
                id,
                by,
                reason: reason.clone(),
            })
            .await
        {
            if let Some(p) = self.book().get_mut(id) {
                p.state = State::Pending;
                p.decided_by = None;
                p.note = None;
            }
            return journal_failure(&e);
        }
        Response::Decided {
            id,
            state: State::Denied.as_str().into(),
            message: format!("proposal {id} denied: {}", escape_for_terminal(&reason)),
        }
    }

    fn may_see(runtime: &Runtime, caller: &Caller, roles: &[Role], p: &Proposal) -> bool {
        caller.uid == p.requester.uid
            || Self::approver_refusal(
                runtime,
                caller,
                roles,
                runtime.policy.verbs.get(&p.verb),
                None,
            )
            .is_none()
    }

    pub(super) async fn result(
        &self,
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
        id: u64,
    ) -> Response {
        self.expire_overdue().await;
        let book = self.book();
        match book.get(id) {
            Some(p) if Self::may_see(runtime, caller, roles, p) => Response::Proposals {
                proposals: vec![proposal_view(p)],
            },
            _ => Response::Denied {
                reason: format!("no proposal {id} visible to you"),
            },
        }
    }

    pub(super) async fn wait(
        &self,
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
        id: u64,
        timeout_ms: u64,
    ) -> Response {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(timeout_ms).min(MAX_WAIT);
        loop {
            let response = self.result(runtime, caller, roles, id).await;
            let done = match &response {
                Response::Proposals { proposals } => proposals
                    .first()
                    .and_then(|p| p["state"].as_str())
                    .is_some_and(|s| !matches!(s, "pending" | "approved" | "executing")),
                _ => true,
            };
            if done || tokio::time::Instant::now() >= deadline {
                return response;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) async fn resolve(
        &self,
        runtime: &Runtime,
        caller: &Caller,
        roles: &[Role],
        id: u64,
        outcome: String,
        note: String,
    ) -> Response {
        let Some(proposal) = self.book().get(id).cloned() else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        if let Some(r) = Self::approver_refusal(
            runtime,
            caller,
            roles,
            runtime.policy.verbs.get(&proposal.verb),
            None,
        ) {
            return Response::Denied { reason: r };
        }
        if proposal.state != State::UnknownOutcome {
            return Response::Decided {
                id,
                state: proposal.state.as_str().into(),
                message: format!("proposal {id} is not in unknown_outcome; nothing to resolve"),
            };
        }
        if !matches!(outcome.as_str(), "succeeded" | "failed" | "not-run") {
            return Response::Invalid {
                param: Some("outcome".into()),
                rule: "enum".into(),
                message: "outcome must be succeeded, failed or not-run".into(),
                missing: Vec::new(),
            };
        }
        let by = decider(caller);
        if let Err(e) = self
            .journal(AuditEvent::ProposalResolved {
                id,
                by: by.clone(),
                outcome: outcome.clone(),
                note: note.clone(),
            })
            .await
        {
            return journal_failure(&e);
        }
        if let Some(p) = self.book().get_mut(id) {
            p.state = State::Resolved;
            p.decided_by = Some(by);
            p.note = Some(format!("{outcome}: {note}"));
        }
        Response::Decided {
            id,
            state: State::Resolved.as_str().into(),
            message: format!("proposal {id} resolved as {outcome}"),
        }
    }
}
