//! The proposal book: every proposal, idempotency key and rate-limit run, rebuilt from the
//! journal (invariants 4 and 9).
//!
//! The journal is the source of truth and [`Book::apply`] is the only way the book changes: the
//! daemon journals an event (fsync'd) and then applies it, and replay at start applies the same
//! events in the same order with the same function. So the book in memory is always exactly the
//! replay of the journal, and nothing a client hears comes from a change that is not durable.
//! `apply` reads no clock: the time of an event is its record's time.
//!
//! Invariants:
//! - a proposal records the verb, normalized args, their canonical hash, the rendered argv with
//!   secret placeholders, the verb's fingerprint and the policy hash; approval names id + hash
//!   prefix and is checked against the *current* policy (see `server`), so changed args or a
//!   changed template never ride on an old approval;
//! - a proposal's state moves only forward (see [`State`]); an event that would move it any other
//!   way changes nothing and is reported as a [`Conflict`];
//! - a `start` event ends whatever the previous daemon left open: a proposal that was executing
//!   becomes `unknown_outcome` (never re-run automatically), one approved but never started
//!   becomes `failed` (not run), and a keyed run without an end is remembered as unknown;
//! - a run is remembered under its idempotency key from its `exec` record on; a retry with the
//!   key never runs it again, whether the first run finished, is still running, was cancelled
//!   or was interrupted.
//!
//! In-memory reservations (an approval being journaled, a proposal id being allocated) are not
//! book state; the daemon keeps them beside the book.
#![forbid(unsafe_code)]

use crate::events::Event;
use crate::policy::units::Rate;
use crate::proposal::{Proposal, State};
use crate::protocol::ExitInfo;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most proposals one requester may have waiting at once (a flood of proposals is refused).
pub const MAX_PENDING_PER_REQUESTER: usize = 20;

/// How long an idempotency key is remembered.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// How far back run history is kept for rate limits (the longest period a rate may have).
pub const RATE_HISTORY: Duration = crate::policy::units::MAX_RATE_PERIOD;

/// What an idempotency key points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyTarget {
    Proposal(u64),
    /// A run without approval: the journal seq of its exec record, and how it ended.
    Run {
        exec_seq: u64,
        end: RunEnd,
    },
}

/// How a keyed run ended, as far as the journal knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    Running,
    Finished {
        exit: ExitInfo,
        duration_ms: u64,
    },
    /// It failed to run (e.g. the sandbox could not be applied); nothing executed.
    Failed {
        error: String,
    },
    /// Killed before its end (client hang-up or shutdown): it may have partly acted.
    Cancelled,
    /// The daemon stopped while it ran (no end record): it may have partly acted.
    Interrupted,
}

/// A remembered idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub verb: String,
    pub args_hash: String,
    pub at: SystemTime,
    pub target: KeyTarget,
}

/// An event that does not fit the state it finds (it changed nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seq {seq}: {message}")]
pub struct Conflict {
    pub seq: u64,
    pub message: String,
}

/// Proposals, idempotency keys and rate-limit history.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Book {
    proposals: BTreeMap<u64, Proposal>,
    /// One past the highest proposal id ever journaled.
    next_id: u64,
    keys: BTreeMap<(u32, String), KeyEntry>,
    /// Per verb: (time, requester uid) of each execution start within [`RATE_HISTORY`].
    runs: BTreeMap<String, VecDeque<(SystemTime, u32)>>,
    /// Runs started and not ended yet: exec seq → the proposal it runs, if any.
    open_runs: BTreeMap<u64, Option<u64>>,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// What the previous daemon left open, found when the next one starts (see [`Book::interrupted`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Interrupted {
    /// Proposals that were executing: their outcome is unknown.
    pub executing: Vec<u64>,
    /// Proposals approved but never started.
    pub never_started: Vec<u64>,
}

impl Book {
    pub fn new() -> Book {
        Book {
            next_id: 1,
            ..Default::default()
        }
    }

    /// Rebuild from journal events in order: `(seq, time, event)`. Returns the book and the
    /// conflicts found (events that changed nothing because they did not fit).
    pub fn replay(
        events: impl IntoIterator<Item = (u64, SystemTime, Event)>,
    ) -> (Book, Vec<Conflict>) {
        let mut book = Book::new();
        let mut conflicts = Vec::new();
        for (seq, time, event) in events {
            if let Err(c) = book.apply(seq, time, &event) {
                conflicts.push(c);
            }
        }
        (book, conflicts)
    }

    /// Apply one journaled event: the only way the book changes.
    pub fn apply(&mut self, seq: u64, time: SystemTime, event: &Event) -> Result<(), Conflict> {
        let conflict = |message: String| Err(Conflict { seq, message });
        match event {
            Event::Start { .. } => {
                let open: Vec<(u64, Option<u64>)> =
                    std::mem::take(&mut self.open_runs).into_iter().collect();
                for (exec_seq, proposal) in open {
                    match proposal {
                        Some(id) => self.with(id, |p| {
                            if p.state == State::Executing {
                                p.state = State::UnknownOutcome;
                            }
                        }),
                        None => self.end_keyed_run(exec_seq, RunEnd::Interrupted),
                    }
                }
                for p in self.proposals.values_mut() {
                    if p.state == State::Approved {
                        p.state = State::Failed;
                        p.note = Some(NOT_STARTED_AT_RESTART.into());
                    }
                }
                Ok(())
            }
            Event::ProposalCreated { id, proposal } => {
                if *id != proposal.id || self.proposals.contains_key(id) {
                    return conflict(format!("proposal {id} created twice"));
                }
                self.next_id = self.next_id.max(id + 1);
                if let Some(key) = &proposal.idempotency_key {
                    self.keys.insert(
                        (proposal.requester.uid, key.clone()),
                        KeyEntry {
                            verb: proposal.verb.clone(),
                            args_hash: proposal.args_hash.clone(),
                            at: time,
                            target: KeyTarget::Proposal(*id),
                        },
                    );
                }
                self.proposals.insert(*id, (**proposal).clone());
                Ok(())
            }
            Event::ProposalApproved { id, by, .. } => {
                self.transition(seq, *id, &[State::Pending], State::Approved)?;
                self.with(*id, |p| p.decided_by = Some(by.clone()));
                Ok(())
            }
            Event::ProposalDenied { id, by, reason } => {
                self.transition(seq, *id, &[State::Pending], State::Denied)?;
                self.with(*id, |p| {
                    p.decided_by = Some(by.clone());
                    p.note = Some(reason.to_string());
                });
                Ok(())
            }
            Event::ProposalExpired { id } => {
                self.transition(seq, *id, &[State::Pending], State::Expired)
            }
            Event::ProposalUnknownOutcome { id } => self.transition(
                seq,
                *id,
                &[State::Executing, State::UnknownOutcome],
                State::UnknownOutcome,
            ),
            Event::ProposalNotStarted { id, reason } => {
                self.transition(seq, *id, &[State::Approved, State::Failed], State::Failed)?;
                if let Some(reason) = reason {
                    self.with(*id, |p| p.note = Some(reason.clone()));
                }
                Ok(())
            }
            Event::ProposalResolved {
                id,
                by,
                outcome,
                note,
            } => {
                self.transition(seq, *id, &[State::UnknownOutcome], State::Resolved)?;
                self.with(*id, |p| {
                    p.decided_by = Some(by.clone());
                    p.outcome = Some(*outcome);
                    p.note = Some(note.to_string());
                });
                Ok(())
            }
            Event::Exec {
                caller,
                verb,
                args_hash,
                proposal,
                idempotency_key,
                ..
            } => {
                let runs = self.runs.entry(verb.clone()).or_default();
                while runs.front().is_some_and(|(t, _)| {
                    time.duration_since(*t).unwrap_or_default() > RATE_HISTORY
                }) {
                    runs.pop_front();
                }
                runs.push_back((time, caller.uid));
                self.open_runs.insert(seq, *proposal);
                match proposal {
                    Some(id) => {
                        self.transition(seq, *id, &[State::Approved], State::Executing)?;
                        self.with(*id, |p| p.exec_seq = Some(seq));
                    }
                    None => {
                        if let Some(key) = idempotency_key {
                            self.keys.insert(
                                (caller.uid, key.clone()),
                                KeyEntry {
                                    verb: verb.clone(),
                                    args_hash: args_hash.clone(),
                                    at: time,
                                    target: KeyTarget::Run {
                                        exec_seq: seq,
                                        end: RunEnd::Running,
                                    },
                                },
                            );
                        }
                    }
                }
                Ok(())
            }
            Event::Result {
                exec_seq,
                exit_code,
                signal,
                timed_out,
                duration_ms,
                error,
                ..
            } => {
                let Some(proposal) = self.open_runs.remove(exec_seq) else {
                    return conflict(format!(
                        "result for exec seq {exec_seq}, which is not running"
                    ));
                };
                let failed = *exit_code != Some(0) || error.is_some();
                match proposal {
                    Some(id) => {
                        let to = if failed {
                            State::Failed
                        } else {
                            State::Succeeded
                        };
                        self.transition(seq, id, &[State::Executing], to)?;
                        self.with(id, |p| {
                            p.exit_code = *exit_code;
                            p.signal = *signal;
                        });
                    }
                    None => {
                        let end = match error {
                            Some(error) => RunEnd::Failed {
                                error: error.clone(),
                            },
                            None => RunEnd::Finished {
                                exit: ExitInfo {
                                    code: *exit_code,
                                    signal: *signal,
                                    timed_out: *timed_out,
                                },
                                duration_ms: *duration_ms,
                            },
                        };
                        self.end_keyed_run(*exec_seq, end);
                    }
                }
                Ok(())
            }
            Event::Cancelled { exec_seq, .. } => {
                let Some(proposal) = self.open_runs.remove(exec_seq) else {
                    return conflict(format!(
                        "cancellation of exec seq {exec_seq}, which is not running"
                    ));
                };
                match proposal {
                    Some(id) => {
                        self.transition(seq, id, &[State::Executing], State::UnknownOutcome)
                    }
                    None => {
                        self.end_keyed_run(*exec_seq, RunEnd::Cancelled);
                        Ok(())
                    }
                }
            }
            Event::Stop { .. }
            | Event::ConnectRefused { .. }
            | Event::Refused { .. }
            | Event::Check { .. }
            | Event::FileWrite { .. }
            | Event::ProposalQueued { .. }
            | Event::ApprovalRefused { .. }
            | Event::NotifyFailed { .. }
            | Event::RefusalsCoalesced { .. }
            | Event::Reload { .. } => Ok(()),
        }
    }

    fn transition(&mut self, seq: u64, id: u64, from: &[State], to: State) -> Result<(), Conflict> {
        let Some(p) = self.proposals.get_mut(&id) else {
            return Err(Conflict {
                seq,
                message: format!("no proposal {id} to move to {to}"),
            });
        };
        if !from.contains(&p.state) {
            return Err(Conflict {
                seq,
                message: format!("proposal {id} is {}, cannot move to {to}", p.state),
            });
        }
        p.state = to;
        Ok(())
    }

    fn with(&mut self, id: u64, change: impl FnOnce(&mut Proposal)) {
        if let Some(p) = self.proposals.get_mut(&id) {
            change(p);
        }
    }

    fn end_keyed_run(&mut self, exec_seq: u64, end: RunEnd) {
        if let Some(entry) = self
            .keys
            .values_mut()
            .find(|e| matches!(e.target, KeyTarget::Run { exec_seq: s, .. } if s == exec_seq))
        {
            entry.target = KeyTarget::Run { exec_seq, end };
        }
    }

    /// What a `start` event will end (to journal one record per proposal for the audit trail).
    pub fn interrupted(&self) -> Interrupted {
        let mut found = Interrupted::default();
        for p in self.proposals.values() {
            match p.state {
                State::Executing => found.executing.push(p.id),
                State::Approved => found.never_started.push(p.id),
                _ => {}
            }
        }
        found
    }

    /// The lowest id no journaled proposal has.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    pub fn get(&self, id: u64) -> Option<&Proposal> {
        self.proposals.get(&id)
    }

    pub fn all(&self) -> impl Iterator<Item = &Proposal> {
        self.proposals.values()
    }

    /// Runs started and not ended.
    pub fn open_runs(&self) -> usize {
        self.open_runs.len()
    }

    /// The pending proposal of this requester for exactly this verb and args, if any.
    pub fn pending_for(
        &self,
        uid: u32,
        verb: &str,
        args_hash: &str,
        now: SystemTime,
    ) -> Option<&Proposal> {
        self.proposals.values().find(|p| {
            p.state == State::Pending
                && p.requester.uid == uid
                && p.verb == verb
                && p.args_hash == args_hash
                && p.expires_ms > unix_ms(now)
        })
    }

    /// How many proposals of this requester are waiting for a decision.
    pub fn pending_count(&self, uid: u32) -> usize {
        self.proposals
            .values()
            .filter(|p| p.state == State::Pending && p.requester.uid == uid)
            .count()
    }

    /// Pending proposals past their expiry (to be journaled as expired).
    pub fn overdue(&self, now: SystemTime) -> Vec<u64> {
        let now = unix_ms(now);
        self.proposals
            .values()
            .filter(|p| p.state == State::Pending && p.expires_ms <= now)
            .map(|p| p.id)
            .collect()
    }

    /// The earliest expiry of a pending proposal (when `overdue` will next find one).
    pub fn next_expiry(&self) -> Option<u64> {
        self.proposals
            .values()
            .filter(|p| p.state == State::Pending)
            .map(|p| p.expires_ms)
            .min()
    }

    /// Why one more run of `verb` by `uid` would exceed `per_caller` or `global` within their
    /// periods, or `None` when it may run.
    pub fn rate_exceeded(
        &self,
        verb: &str,
        uid: u32,
        per_caller: Option<Rate>,
        global: Option<Rate>,
        now: SystemTime,
    ) -> Option<String> {
        let runs = self.runs.get(verb);
        let within = |per: Duration, only: Option<u32>| {
            runs.into_iter()
                .flatten()
                .filter(|(t, u)| {
                    now.duration_since(*t).unwrap_or_default() <= per
                        && only.is_none_or(|o| o == *u)
                })
                .count()
        };
        if let Some(r) = per_caller
            && within(r.per, Some(uid)) >= r.count as usize
        {
            return Some(format!(
                "rate limit: `{verb}` may run at most {} times per {}s per caller; try again later",
                r.count,
                r.per.as_secs()
            ));
        }
        if let Some(r) = global
            && within(r.per, None) >= r.count as usize
        {
            return Some(format!(
                "rate limit: `{verb}` may run at most {} times per {}s in total; try again later",
                r.count,
                r.per.as_secs()
            ));
        }
        None
    }

    /// Look up an idempotency key of a caller (within the window).
    pub fn key(&self, uid: u32, key: &str, now: SystemTime) -> Option<&KeyEntry> {
        self.keys
            .get(&(uid, key.to_string()))
            .filter(|e| now.duration_since(e.at).unwrap_or_default() <= IDEMPOTENCY_WINDOW)
    }
}

/// The note of an approved proposal that never started because the daemon stopped.
pub const NOT_STARTED_AT_RESTART: &str =
    "not executed: the daemon stopped between approval and execution; propose again";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{CallerRecord, RunDecision};
    use crate::proposal::{Decider, PROPOSAL_VERSION, RequesterRecord};

    fn proposal(id: u64) -> Proposal {
        Proposal {
            id,
            version: PROPOSAL_VERSION,
            verb: "scale".into(),
            description: String::new(),
            category: "mutating".into(),
            args: BTreeMap::new(),
            args_hash: "ab".repeat(32),
            argv: vec!["/bin/true".into()],
            pins: Vec::new(),
            dry_run_argv: None,
            dry_run_output: None,
            requester: RequesterRecord {
                uid: 1000,
                gid: 1000,
                user: None,
                pid: 1,
            },
            reason: None,
            policy_hash: String::new(),
            verb_fingerprint: String::new(),
            created_ms: 0,
            expires_ms: u64::MAX,
            idempotency_key: None,
            state: State::Pending,
            decided_by: None,
            note: None,
            outcome: None,
            exec_seq: None,
            exit_code: None,
            signal: None,
        }
    }

    fn exec(proposal: Option<u64>) -> Event {
        Event::Exec {
            caller: CallerRecord {
                uid: 1000,
                gid: 1000,
                pid: 1,
                user: None,
                roles: vec![],
            },
            decision: RunDecision::Approved,
            verb: "scale".into(),
            args: BTreeMap::new(),
            args_hash: "ab".repeat(32),
            argv: vec![],
            proposal,
            idempotency_key: None,
        }
    }

    #[test]
    fn a_start_ends_an_interrupted_run_as_unknown_outcome() {
        let now = SystemTime::now();
        let by = Decider { uid: 5, user: None };
        let events = vec![
            (
                1,
                now,
                Event::ProposalCreated {
                    id: 7,
                    proposal: Box::new(proposal(7)),
                },
            ),
            (
                2,
                now,
                Event::ProposalApproved {
                    id: 7,
                    by,
                    hash: "ab".repeat(32),
                },
            ),
            (3, now, exec(Some(7))),
        ];
        let (mut book, conflicts) = Book::replay(events);
        assert!(conflicts.is_empty(), "{conflicts:?}");
        assert_eq!(book.interrupted().executing, vec![7]);
        let start = Event::Start {
            version: String::new(),
            policy: String::new(),
            policy_hash: String::new(),
            pid: 1,
            uid: 0,
        };
        book.apply(4, now, &start).unwrap();
        assert_eq!(book.get(7).unwrap().state, State::UnknownOutcome);
        assert_eq!(book.next_id(), 8);
        assert_eq!(book.open_runs(), 0);
    }

    #[test]
    fn an_event_that_does_not_fit_changes_nothing() {
        let now = SystemTime::now();
        let mut book = Book::new();
        book.apply(
            1,
            now,
            &Event::ProposalCreated {
                id: 1,
                proposal: Box::new(proposal(1)),
            },
        )
        .unwrap();
        book.apply(2, now, &Event::ProposalExpired { id: 1 })
            .unwrap();
        let before = book.clone();
        let by = Decider { uid: 5, user: None };
        let err = book
            .apply(
                3,
                now,
                &Event::ProposalApproved {
                    id: 1,
                    by,
                    hash: String::new(),
                },
            )
            .unwrap_err();
        assert!(err.message.contains("expired"), "{err}");
        assert_eq!(book, before);
    }
}
