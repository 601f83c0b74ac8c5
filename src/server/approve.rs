//! Proposals and the decisions on them: propose, notify, pending, approve, deny, wait, result,
//! resolve.
//!
//! Every decision goes through `Ledger::decide`, which reserves the proposal (so no other
//! decision on it can race), checks the event against the transition table
//! (`approvals::TRANSITIONS`), journals it and lets the book change through `Book::apply`, the
//! function replay uses; [`Daemon::undecided`] is the one answer to a decision it refused.
//! Nobody hears of a decision that is not durable.
#![forbid(unsafe_code)]

use super::ledger::Undecided;
use super::{
    Cancel, Context, Daemon, NewProposal, Run, confirm_required, journal_failure, time_of_ms,
};
use crate::approvals::{Step, unix_ms};
use crate::events::{Bounded, CallerRecord, Event, RefusalClass};
use crate::exec::{self, ExecRequest};
use crate::journal::format_rfc3339;
use crate::loader::Prepared;
use crate::policy::{ApprovalScope, Caller, Policy, PreparedAction, Role, Verb, Verdict};
use crate::proposal::{Decider, Outcome, PROPOSAL_VERSION, Proposal, RequesterRecord, State};
use crate::protocol::{ProposalView, Response};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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

fn decided(id: u64, state: State, message: String) -> Response {
    Response::Decided { id, state, message }
}

/// The approver check for a proposal of `verb` (the global approvers if it no longer exists).
fn approver_refusal(
    prepared: &Prepared,
    caller: &Caller,
    roles: &[Role],
    verb: Option<&Verb>,
    requester_uid: Option<u32>,
) -> Option<String> {
    let scope = verb.map_or(ApprovalScope::Policy, ApprovalScope::Verb);
    prepared
        .policy
        .approver_refusal(caller.uid, roles, scope, requester_uid)
}

/// The record of `by`'s approval of `p`: `proposal_approved` when it is the one approval `p`
/// needs or completes its quorum, `proposal_approval_given` when more must follow. Under a
/// quorum it counts for the first role of the quorum's (or, without `from`, of the verb's
/// approver roles, by name) that `by` holds and that has not given its `max_per_role`; why it
/// does not count otherwise. (`Book::check` checks the record again as it is journaled.)
fn approval_event(
    p: &Proposal,
    by: Decider,
    roles: &[Role],
    policy: &Policy,
    verb: &Verb,
) -> Result<Event, String> {
    let (id, hash) = (p.id, p.args_hash.clone());
    let Some(quorum) = &p.quorum else {
        return Ok(Event::ProposalApproved {
            id,
            by,
            hash,
            role: None,
        });
    };
    if p.approvals.iter().any(|a| a.uid == by.uid) {
        return Err(format!(
            "uid {} already approved proposal {id}; a second approval by the same person does not count",
            by.uid
        ));
    }
    let counted: Vec<&String> = if quorum.from.is_empty() {
        let all: std::collections::BTreeSet<&String> = policy
            .approvals
            .approvers
            .iter()
            .chain(&verb.approvers)
            .collect();
        all.into_iter().collect()
    } else {
        quorum.from.iter().collect()
    };
    let held: Vec<&String> = counted
        .into_iter()
        .filter(|name| roles.iter().any(|r| &&r.name == name))
        .collect();
    if held.is_empty() {
        return Err(format!(
            "none of your roles counts for proposal {id}'s quorum (it counts {})",
            if quorum.from.is_empty() {
                "the verb's approver roles".to_string()
            } else {
                quorum.from.join(", ")
            }
        ));
    }
    let share_left = |role: &&String| {
        quorum.max_per_role.is_none_or(|max| {
            p.approvals
                .iter()
                .filter(|a| a.role.as_ref() == Some(*role))
                .count()
                < max as usize
        })
    };
    let Some(role) = held.iter().copied().find(share_left) else {
        let names: Vec<&str> = held.iter().map(|r| r.as_str()).collect();
        return Err(format!(
            "your role(s) {} already gave max_per_role = {} approval(s) of proposal {id}; the missing approvals ({}) must come from people in other roles",
            names.join(", "),
            quorum.max_per_role.unwrap_or_default(),
            quorum.missing(p.approvals.len())
        ));
    };
    let role = role.clone();
    Ok(if p.approvals.len() + 1 >= p.approvals_needed() {
        Event::ProposalApproved {
            id,
            by,
            hash,
            role: Some(role),
        }
    } else {
        Event::ProposalApprovalGiven { id, by, hash, role }
    })
}

fn may_see(ctx: &Context, p: &Proposal) -> bool {
    ctx.caller.uid == p.requester.uid
        || approver_refusal(
            &ctx.prepared,
            &ctx.caller,
            &ctx.roles,
            ctx.prepared.policy.verbs.get(&p.verb),
            None,
        )
        .is_none()
}

impl Daemon {
    /// Journal every pending proposal past its expiry as expired.
    pub(super) async fn expire_overdue(&self) {
        for id in self.ledger.overdue(SystemTime::now()) {
            let expired = self
                .ledger
                .decide(Event::ProposalExpired { id }, SystemTime::now())
                .await;
            if expired.is_ok() {
                self.count_decision(id, "expired");
            }
        }
    }

    /// The answer to a decision the ledger did not record.
    async fn undecided(&self, undecided: Undecided) -> Response {
        match undecided {
            Undecided::NotFound(id) => Response::Denied {
                reason: format!("no proposal {id}"),
            },
            Undecided::Busy(_) => Response::Busy {
                message: undecided.to_string(),
            },
            // A pending proposal the approval does not fit (it does not count): refused.
            Undecided::Unfit {
                state: State::Pending,
                ..
            } => Response::Denied {
                reason: undecided.to_string(),
            },
            Undecided::Unfit { id, state, .. } => decided(id, state, undecided.to_string()),
            Undecided::Expired(id) | Undecided::NotDue(id) => {
                self.expire_overdue().await;
                let state = self
                    .ledger
                    .read(|b| b.get(id).map(|p| p.state))
                    .unwrap_or(State::Expired);
                decided(id, state, undecided.to_string())
            }
            Undecided::Journal(e) => journal_failure(&e),
        }
    }

    /// The proposal as shown, with the run's output while this daemon keeps it.
    pub(super) fn proposal_view(&self, id: u64) -> Option<ProposalView> {
        let proposal = self.ledger.read(|b| b.get(id).cloned())?;
        let result = proposal.exec_seq.and_then(|seq| self.ledger.output(seq));
        Some(ProposalView {
            created_at: format_rfc3339(time_of_ms(proposal.created_ms)),
            expires_at: format_rfc3339(time_of_ms(proposal.expires_ms)),
            reason_is_untrusted: true,
            result,
            proposal,
        })
    }

    pub(super) async fn propose(self: Arc<Self>, ctx: &Context, new: NewProposal) -> Response {
        match self.record_proposal(ctx, &new).await {
            Ok(proposal) => {
                self.clone().announce(&ctx.prepared, proposal.id);
                confirm_required(&proposal)
            }
            Err(answer) => answer,
        }
    }

    /// A break-glass call: the proposal is journaled, then `proposal_break_glass` (the caller
    /// holds `roles`, the verb's `break_glass` roles), the notifier announces it and it runs
    /// at once, as the caller's own call.
    pub(super) async fn break_glass(
        self: Arc<Self>,
        ctx: &Context,
        new: NewProposal,
        roles: Vec<String>,
        cancel: Cancel,
    ) -> Response {
        let proposal = match self.record_proposal(ctx, &new).await {
            Ok(proposal) => proposal,
            Err(answer) => return answer,
        };
        let id = proposal.id;
        let broken = Event::ProposalBreakGlass {
            id,
            by: decider(&ctx.caller),
            roles,
        };
        if let Err(undecided) = self.ledger.decide(broken, SystemTime::now()).await {
            return self.undecided(undecided).await;
        }
        self.count_decision(id, "break_glass");
        tracing::warn!(
            id,
            verb = %proposal.verb,
            uid = ctx.caller.uid,
            "break-glass: a verb runs without approval"
        );
        self.clone().announce(&ctx.prepared, id);
        let run = Run {
            requester: ctx.record.clone(),
            call: new.call,
            proposal: Some(id),
            idempotency_key: None,
            chunks: None,
        };
        self.run(&ctx.prepared, run, cancel, None).await
    }

    /// Start the approval notifier for proposal `id`, if the policy has one.
    fn announce(self: Arc<Self>, prepared: &Arc<Prepared>, id: u64) {
        if let Some(notify) = prepared.policy.approvals.notify.clone() {
            let prepared = prepared.clone();
            tokio::spawn(async move { self.notify(&prepared, &notify, id).await });
        }
    }

    /// Run the dry run (if any) and journal the new proposal; the journaled proposal, or the
    /// answer when its record failed.
    async fn record_proposal(
        &self,
        ctx: &Context,
        new: &NewProposal,
    ) -> Result<Proposal, Response> {
        let prepared = &ctx.prepared;
        let call = &new.call;
        let (dry_run_argv, dry_run_output) = match &call.action {
            PreparedAction::Exec {
                dry_run: Some(dry_run),
                env,
                ..
            } => {
                let text = match prepared.dry_run_sandboxes.get(&call.limits.sandbox) {
                    Some(sandbox) => {
                        let outcome = exec::run(ExecRequest {
                            argv: dry_run,
                            env,
                            cwd: &call.limits.cwd,
                            timeout: call.limits.timeout,
                            max_output: call.limits.max_output.min(64 * 1024),
                            sandbox,
                            secrets: &prepared.secrets,
                            scrubber: &prepared.scrubber,
                            credentials: &[],
                            stdin: None,
                            live: None,
                        })
                        .await;
                        // The approver reads the paths the call names, not the descriptors
                        // the dry run got them as.
                        match outcome {
                            Ok(o) => format!(
                                "exit {}{}\n--- stdout ---\n{}--- stderr ---\n{}",
                                o.exit
                                    .code
                                    .map_or_else(|| "by signal".to_string(), |c| c.to_string()),
                                if o.exit.timed_out { " (timed out)" } else { "" },
                                dry_run_stream(&o.stdout, &o.pinned),
                                dry_run_stream(&o.stderr, &o.pinned)
                            ),
                            Err(e) => format!("dry run could not run: {e}"),
                        }
                    }
                    None => format!(
                        "dry run could not run: sandbox `{}` is not prepared",
                        call.limits.sandbox
                    ),
                };
                (Some(dry_run.display()), Some(text))
            }
            _ => (None, None),
        };
        let now = SystemTime::now();
        let proposal = Proposal {
            id: self.ledger.reserve_id(),
            version: PROPOSAL_VERSION,
            verb: call.verb.clone(),
            description: new.description.clone(),
            category: new.category.into(),
            args: call.args.clone(),
            args_hash: call.args_hash.clone(),
            argv: call.display_argv(),
            pins: call.display_pins(),
            dry_run_argv,
            dry_run_output,
            requester: RequesterRecord {
                uid: ctx.record.uid,
                gid: ctx.record.gid,
                user: ctx.record.user.clone(),
                pid: ctx.record.pid,
            },
            reason: new.reason.as_ref().map(|r| r.chars().take(2000).collect()),
            policy_hash: prepared.policy.hash.clone(),
            verb_fingerprint: new.verb_fingerprint.clone(),
            created_ms: unix_ms(now),
            expires_ms: unix_ms(now + prepared.policy.approvals.expires),
            idempotency_key: new.idempotency_key.clone(),
            state: State::Pending,
            quorum: prepared
                .policy
                .verbs
                .get(&call.verb)
                .and_then(|v| v.quorum.clone()),
            approvals: Vec::new(),
            break_glass: false,
            decided_by: None,
            note: None,
            outcome: None,
            exec_seq: None,
            exit_code: None,
            signal: None,
        };
        if let Err(e) = self
            .record(Event::ProposalCreated {
                id: proposal.id,
                proposal: Box::new(proposal.clone()),
            })
            .await
        {
            return Err(journal_failure(&e));
        }
        Ok(proposal)
    }

    /// Run the approval notifier with the proposal on stdin (requester-written strings escaped
    /// as `verbd pending` shows them).
    async fn notify(
        &self,
        prepared: &Prepared,
        template: &crate::policy::template::Template,
        id: u64,
    ) {
        let Some(view) = self.proposal_view(id) else {
            return;
        };
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
        let args = BTreeMap::from([("id".to_string(), id.to_string())]);
        let payload = crate::terminal::escaped_view(&view);
        let error = match (
            template.render(&params, &args, crate::policy::params::PathCheck::OnThisHost),
            prepared
                .sandboxes
                .get(&prepared.policy.approvals.notify_sandbox),
        ) {
            (Ok(argv), Some(sandbox)) => {
                let outcome = exec::run(ExecRequest {
                    argv: &argv,
                    env: &[],
                    cwd: std::path::Path::new("/"),
                    timeout: Duration::from_secs(30),
                    max_output: 64 * 1024,
                    sandbox,
                    secrets: &prepared.secrets,
                    scrubber: &prepared.scrubber,
                    credentials: &[],
                    live: None,
                    stdin: Some(serde_json::to_vec(&payload).unwrap_or_default()),
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
            (_, None) => Some(format!(
                "the notifier's sandbox `{}` is not prepared",
                prepared.policy.approvals.notify_sandbox
            )),
        };
        if let Some(error) = error {
            tracing::warn!(id, %error, "approval notifier failed");
            let error = Bounded::new(&error);
            let _ = self.record(Event::NotifyFailed { id, error }).await;
        }
    }

    pub(super) async fn pending(&self, ctx: &Context) -> Response {
        if let Some(reason) = ctx.prepared.policy.approver_refusal(
            ctx.caller.uid,
            &ctx.roles,
            ApprovalScope::AnyVerb,
            None,
        ) {
            return Response::Denied { reason };
        }
        self.expire_overdue().await;
        let ids: Vec<u64> = self.ledger.read(|b| {
            b.all()
                .filter(|p| matches!(p.state, State::Pending | State::UnknownOutcome))
                .map(|p| p.id)
                .collect()
        });
        Response::Proposals {
            proposals: ids
                .into_iter()
                .filter_map(|id| self.proposal_view(id))
                .collect(),
        }
    }

    pub(super) async fn approve(
        self: Arc<Self>,
        ctx: &Context,
        id: u64,
        hash: String,
        cancel: Cancel,
    ) -> Response {
        self.expire_overdue().await;
        let by = decider(&ctx.caller);
        let Some(proposal) = self.ledger.read(|b| b.get(id).cloned()) else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        let prepared = ctx.prepared.clone();
        let verb = prepared.policy.verbs.get(&proposal.verb);
        let approval = verb.map_or_else(
            || Err(String::new()),
            |v| approval_event(&proposal, by.clone(), &ctx.roles, &prepared.policy, v),
        );
        let refusal = if let Some(r) = approver_refusal(
            &prepared,
            &ctx.caller,
            &ctx.roles,
            verb,
            Some(proposal.requester.uid),
        ) {
            Some(r)
        } else if hash.len() < MIN_HASH_PREFIX
            || !hash.bytes().all(|b| b.is_ascii_hexdigit())
            || !proposal.args_hash.starts_with(&hash.to_ascii_lowercase())
        {
            Some(format!(
                "hash {hash:?} does not match proposal {id} (give at least {MIN_HASH_PREFIX} hex digits of the hash `verbd pending` shows)"
            ))
        } else if let Err(unfit) = self.ledger.read(|b| b.fits(id, Step::Approve)) {
            let state = proposal.state;
            return self.undecided(Undecided::Unfit { id, unfit, state }).await;
        } else {
            match verb {
                None => Some(format!(
                    "verb `{}` no longer exists in the policy; the proposal cannot run",
                    proposal.verb
                )),
                Some(v) if prepared.policy.verb_fingerprint(v) != proposal.verb_fingerprint => {
                    Some(format!(
                        "the policy changed verb `{}` (template, params, env, category, limits or sandbox) since this proposal was made; it cannot run on the old approval. Ask the agent to propose again",
                        v.name
                    ))
                }
                Some(_) => approval.as_ref().err().cloned(),
            }
        };
        if let Some(reason) = refusal {
            let event = Event::ApprovalRefused {
                id,
                by,
                reason: Bounded::new(&reason),
            };
            let _ = self
                .record_refusal(
                    &ctx.record,
                    RefusalClass::ApprovalRefused,
                    "approval_refused",
                    event,
                )
                .await;
            return Response::Denied { reason };
        }
        // Re-render from the current policy, as the requester: they must still be allowed to
        // call the verb, and it must give exactly the stored call.
        let requester = proposal.requester.clone();
        let (uid, gid, pid) = (requester.uid, requester.gid, requester.pid);
        let requester_caller = super::identity::caller_from_cred(uid, gid, pid).await;
        let requester_roles: Vec<&Role> = prepared
            .policy
            .roles_of(&requester_caller, self.settings.invoker_uid);
        let raw_args = crate::policy::text_args(&proposal.args);
        let call = match prepared
            .policy
            .evaluate(&requester_roles, &proposal.verb, &raw_args)
        {
            Verdict::Propose(p)
                if p.call.args_hash == proposal.args_hash
                    && p.call.display_argv() == proposal.argv
                    && p.call.display_pins() == proposal.pins =>
            {
                p.call
            }
            Verdict::Run(call)
                if call.args_hash == proposal.args_hash
                    && call.display_argv() == proposal.argv
                    && call.display_pins() == proposal.pins =>
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
                    reason: "the stored call no longer renders to the same argv under the current policy, or a path parameter no longer resolves to what was shown; nothing ran".into(),
                };
            }
        };
        let Ok(approval) = approval else {
            unreachable!("a refused approval was answered above")
        };
        let completes = matches!(approval, Event::ProposalApproved { .. });
        let approved = self.ledger.decide(approval, SystemTime::now()).await;
        if let Err(undecided) = approved {
            return self.undecided(undecided).await;
        }
        if !completes {
            self.count_decision(id, "approval_given");
            return self.approval_given(id);
        }
        self.count_decision(id, "approved");
        let run = Run {
            requester: CallerRecord {
                uid: requester.uid,
                gid: requester.gid,
                pid: requester.pid,
                user: requester.user.clone(),
                roles: Vec::new(),
            },
            call,
            proposal: Some(id),
            idempotency_key: None,
            chunks: None,
        };
        // The run belongs to the daemon, not to the approver's connection.
        let daemon = self.clone();
        let owned = cancel.daemon_owned();
        let (queued_tx, mut queued_rx) = tokio::sync::oneshot::channel();
        let mut task =
            tokio::spawn(async move { daemon.run(&prepared, run, owned, Some(queued_tx)).await });
        tokio::select! {
            finished = &mut task => finished.unwrap_or_else(|e| Response::Error {
                message: format!("execution task failed: {e}"),
            }),
            Ok(reason) = &mut queued_rx => Response::Queued {
                id,
                message: format!("proposal {id} approved; {reason}. `verbd wait {id}` shows the result"),
            },
        }
    }

    /// The answer to an approval short of the quorum: what it took and what is missing.
    fn approval_given(&self, id: u64) -> Response {
        let Some(p) = self.ledger.read(|b| b.get(id).cloned()) else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        let given = p.approvals.len();
        let missing = p
            .quorum
            .as_ref()
            .map(|q| q.missing(given))
            .unwrap_or_default();
        let role = p
            .approvals
            .last()
            .and_then(|a| a.role.clone())
            .unwrap_or_default();
        decided(
            id,
            p.state,
            format!(
                "approval {given} of {} recorded for proposal {id} (counts for role {role}); missing: {missing}; nothing runs until then",
                p.approvals_needed()
            ),
        )
    }

    pub(super) async fn deny(&self, ctx: &Context, id: u64, reason: String) -> Response {
        self.expire_overdue().await;
        let Some(proposal) = self.ledger.read(|b| b.get(id).cloned()) else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        // Denying is allowed to the requester too (withdrawing their own request).
        if ctx.caller.uid != proposal.requester.uid
            && let Some(r) = approver_refusal(
                &ctx.prepared,
                &ctx.caller,
                &ctx.roles,
                ctx.prepared.policy.verbs.get(&proposal.verb),
                None,
            )
        {
            return Response::Denied { reason: r };
        }
        let denied = self
            .ledger
            .decide(
                Event::ProposalDenied {
                    id,
                    by: decider(&ctx.caller),
                    reason: Bounded::new(&reason),
                },
                SystemTime::now(),
            )
            .await;
        if let Err(undecided) = denied {
            return self.undecided(undecided).await;
        }
        self.count_decision(id, "denied");
        decided(
            id,
            State::Denied,
            format!("proposal {id} denied: {}", crate::terminal::escape(&reason)),
        )
    }

    pub(super) async fn result(&self, ctx: &Context, id: u64) -> Response {
        self.expire_overdue().await;
        match self.proposal_view(id) {
            Some(view) if may_see(ctx, &view.proposal) => Response::Proposals {
                proposals: vec![view],
            },
            _ => Response::Denied {
                reason: format!("no proposal {id} visible to you"),
            },
        }
    }

    /// Block until proposal `id` leaves the open states, the timeout passes, or the client goes
    /// away. Woken by every change of the book (and by the proposal's expiry), never by polling.
    pub(super) async fn wait(
        &self,
        ctx: &Context,
        id: u64,
        timeout_ms: u64,
        mut cancel: Cancel,
    ) -> Response {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(timeout_ms).min(MAX_WAIT);
        let mut changes = self.ledger.changed();
        loop {
            changes.borrow_and_update();
            let response = self.result(ctx, id).await;
            let open = match &response {
                Response::Proposals { proposals } => proposals
                    .first()
                    .is_some_and(|p| p.proposal.state.is_open()),
                _ => false,
            };
            if !open || tokio::time::Instant::now() >= deadline {
                return response;
            }
            // A pending proposal expires without any event: wake for that too.
            let expiry = self.ledger.read(|b| {
                b.get(id)
                    .filter(|p| p.state == State::Pending)
                    .map(|p| p.expires_ms)
            });
            let wake = match expiry {
                Some(ms) => {
                    let left = Duration::from_millis(ms.saturating_sub(unix_ms(SystemTime::now())));
                    deadline.min(tokio::time::Instant::now() + left)
                }
                None => deadline,
            };
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
                _ = cancel.cancelled() => return response,
            }
        }
    }

    pub(super) async fn resolve(
        &self,
        ctx: &Context,
        id: u64,
        outcome: Outcome,
        note: String,
    ) -> Response {
        let Some(proposal) = self.ledger.read(|b| b.get(id).cloned()) else {
            return Response::Denied {
                reason: format!("no proposal {id}"),
            };
        };
        if let Some(r) = approver_refusal(
            &ctx.prepared,
            &ctx.caller,
            &ctx.roles,
            ctx.prepared.policy.verbs.get(&proposal.verb),
            None,
        ) {
            return Response::Denied { reason: r };
        }
        let resolved = self
            .ledger
            .decide(
                Event::ProposalResolved {
                    id,
                    by: decider(&ctx.caller),
                    outcome,
                    note: Bounded::new(&note),
                },
                SystemTime::now(),
            )
            .await;
        if let Err(undecided) = resolved {
            return self.undecided(undecided).await;
        }
        decided(
            id,
            State::Resolved,
            format!("proposal {id} resolved as {outcome}"),
        )
    }
}

/// One stream of a dry run as the approver reads it: the paths the call names rather than the
/// descriptors the dry run got them as, and, when the stream was cut (the preview's cap, the
/// timeout), a last line saying so — a cut list of what a call would do must never read as the
/// whole list.
fn dry_run_stream(stream: &exec::Captured, pinned: &[(String, std::path::PathBuf)]) -> String {
    let mut text = exec::with_real_paths(&String::from_utf8_lossy(&stream.bytes), pinned);
    if stream.truncated {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[cut: the dry run wrote {} bytes; the rest is not shown]\n",
            stream.total
        ));
    }
    text
}
