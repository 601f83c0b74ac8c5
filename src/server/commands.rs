//! `command` requests: a shell command an agent is about to run, mapped onto the verb that
//! stands for it (`policy_tools::mapping`), decided by the caller's mode, and journaled.
//!
//! Invariants: the mode is the strongest of the caller's roles (`off` unless a role sets
//! one); every answer but `pass` is journaled before it is sent (a journal that cannot be
//! written denies, like every other request), with credentials in the command text redacted —
//! every answer (rewrite, advise, refuse) as soon as its record is written, before the
//! fdatasync that follows at once, since it is advice that nothing acts on (the call the agent
//! then runs is journaled durably as every call is), or once counted;
//! refusals are journaled through the per-caller coalescing of every other refusal, and
//! mappings onto a verb through the same coalescing of their own (`refusals.rs`), so an agent
//! looping on commands, refused or mapped, cannot grow the journal without bound.
#![forbid(unsafe_code)]

use super::{Context, Daemon, journal_failure};
use crate::events::{Bounded, CommandAction, Event, RefusalClass};
use crate::policy::{CommandMode, Role};
use crate::policy_tools::coverage::redact;
use crate::policy_tools::mapping::{self, Mapping};
use crate::protocol::{CommandDecision, Response, VerbCall};

impl Daemon {
    /// Answer a `command` request for the caller in `ctx`.
    pub(super) async fn command(
        &self,
        ctx: &Context,
        command: String,
        cwd: Option<String>,
        tool: Option<String>,
    ) -> Response {
        let roles: Vec<&Role> = ctx.roles.iter().collect();
        let mode = CommandMode::of(&roles);
        if mode == CommandMode::Off {
            return Response::Command {
                decision: CommandDecision::Pass {
                    reason: Some(
                        "shell commands are not mapped for your roles (their `commands` mode is off)"
                            .into(),
                    ),
                },
            };
        }
        let policy = &ctx.prepared.policy;
        let (decision, action, verb, args, reason) =
            match mapping::map_command(policy, &roles, &command, cwd.as_deref()) {
                Mapping::Unprivileged { why } => {
                    return Response::Command {
                        decision: CommandDecision::Pass { reason: Some(why) },
                    };
                }
                Mapping::Verb(call) => {
                    let journaled = call
                        .args
                        .iter()
                        .map(|(k, v)| (k.clone(), redact(Some(&ctx.prepared.scrubber), v)))
                        .collect();
                    let verb = Some(call.verb.clone());
                    let call = VerbCall {
                        verb: call.verb,
                        args: call.args,
                        client_side: call.client_side,
                        needs_approval: call.needs_approval,
                    };
                    let (decision, action) = if mode == CommandMode::Rewrite {
                        (CommandDecision::Rewrite(call), CommandAction::Rewrite)
                    } else {
                        (CommandDecision::Advise(call), CommandAction::Advise)
                    };
                    (decision, action, verb, journaled, None)
                }
                Mapping::Refuse { reason } => {
                    let journaled = Bounded::new(&redact(Some(&ctx.prepared.scrubber), &reason));
                    (
                        CommandDecision::Refuse { reason },
                        CommandAction::Refuse,
                        None,
                        Default::default(),
                        Some(journaled),
                    )
                }
            };
        let event = Event::CommandMapped {
            caller: ctx.record.clone(),
            command: Bounded::new(&redact(Some(&ctx.prepared.scrubber), &command)),
            tool: tool.as_deref().map(Bounded::new),
            decision: action,
            verb,
            args,
            reason,
        };
        let recorded = match action {
            CommandAction::Refuse => {
                self.record_refusal(
                    &ctx.record,
                    RefusalClass::CommandRefused,
                    "command_refused",
                    event,
                )
                .await
            }
            CommandAction::Rewrite | CommandAction::Advise => {
                self.record_mapping(&ctx.record, action, event).await
            }
        };
        match recorded {
            Ok(()) => Response::Command { decision },
            Err(e) => journal_failure(&e),
        }
    }
}
