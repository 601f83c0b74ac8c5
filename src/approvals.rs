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
//! - a proposal's state moves only forward, by the steps of one table ([`TRANSITIONS`]); an event
//!   that would move it any other way changes nothing and is reported as a [`Conflict`];
//! - an approval counts once per person and never the requester's; under a quorum a proposal
//!   stays pending while it collects `proposal_approval_given` records, and only the approval
//!   that completes the count (within each role's `max_per_role`) is a `proposal_approved`.
//!   [`Book::check`] refuses an approval record that would not count ([`approval_unfit`]), so
//!   the book never holds a proposal approved on fewer approvals than its quorum;
//! - a `start` event ends whatever the previous daemon left open: a proposal that was executing
//!   becomes `unknown_outcome` (never re-run automatically), one approved but never started
//!   becomes `failed` (not run), and a keyed run without an end is remembered as unknown;
//! - a run is remembered under its idempotency key from its `exec` record on; a retry with the
//!   key never runs it again, whether the first run finished, is still running, was cancelled
//!   or was interrupted.
//!
//! - the book holds live state only, whatever the history's length: an idempotency key is
//!   dropped [`IDEMPOTENCY_WINDOW`] after its call, an ended proposal [`PROPOSAL_RETENTION`] after
//!   its end (`unknown_outcome` waits for its resolution however long that takes), run history
//!   after [`RATE_HISTORY`] and beyond [`MAX_RATE_COUNT`] runs per verb and caller. Pruning is part
//!   of `apply`, driven by the records' times (at most every [`PRUNE_INTERVAL`]), so the live
//!   book, a replay from the beginning and a replay from a snapshot stay equal;
//! - the book serializes ([`Book::snapshot_state`], [`BookSnapshot`]): the daemon journals it as
//!   a state snapshot every few MiB and a restart replays from the latest one.
//!
//! In-memory reservations (an approval being journaled, a proposal id being allocated) are not
//! book state; the daemon keeps them beside the book.
#![forbid(unsafe_code)]

use crate::events::Event;
use crate::policy::units::{MAX_RATE_COUNT, Rate};
use crate::proposal::{Approval, Proposal, State};
use crate::protocol::ExitInfo;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most proposals one requester may have waiting at once (a flood of proposals is refused).
pub const MAX_PENDING_PER_REQUESTER: usize = 20;

/// How long an idempotency key is remembered.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// How far back run history is kept for rate limits (the longest period a rate may have).
pub const RATE_HISTORY: Duration = crate::policy::units::MAX_RATE_PERIOD;

/// How long an ended proposal (succeeded, failed, denied, expired, resolved) stays in the book
/// after its end, for `result`, `wait` and a retry with its idempotency key.
pub const PROPOSAL_RETENTION: Duration = IDEMPOTENCY_WINDOW;

/// The book drops what is past its retention at most this often, in record time.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// Version of [`BookSnapshot`]'s format.
pub const BOOK_SNAPSHOT_VERSION: u32 = 1;

/// What an idempotency key points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KeyTarget {
    Proposal(u64),
    /// A run without approval: the journal seq of its exec record, and how it ended.
    Run {
        exec_seq: u64,
        end: RunEnd,
    },
}

/// How a keyed run ended, as far as the journal knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub verb: String,
    pub args_hash: String,
    #[serde(with = "unix_ms_serde")]
    pub at: SystemTime,
    pub target: KeyTarget,
}

/// A time as Unix milliseconds (record times have millisecond precision, so nothing is lost).
mod unix_ms_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub fn serialize<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(super::unix_ms(*time))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SystemTime, D::Error> {
        u64::deserialize(deserializer).map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// The idempotency keys as a list (a JSON object cannot have `(uid, key)` keys).
mod keys_as_list {
    use super::KeyEntry;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Keyed<E> {
        uid: u32,
        key: String,
        entry: E,
    }

    pub fn serialize<S: Serializer>(
        keys: &BTreeMap<(u32, String), KeyEntry>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(keys.iter().map(|((uid, key), entry)| Keyed {
            uid: *uid,
            key: key.clone(),
            entry,
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<(u32, String), KeyEntry>, D::Error> {
        let list = Vec::<Keyed<KeyEntry>>::deserialize(deserializer)?;
        Ok(list
            .into_iter()
            .map(|k| ((k.uid, k.key), k.entry))
            .collect())
    }
}

/// An event that does not fit the state it finds (it changed nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seq {seq}: {message}")]
pub struct Conflict {
    pub seq: u64,
    pub message: String,
}

/// A move of one proposal from state to state, named by what causes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A human approves: the one approval it needs, or the last of its quorum
    /// (`proposal_approved`).
    Approve,
    /// A human approves, short of the quorum: it counts, nothing runs (`proposal_approval_given`).
    Endorse,
    /// Its requester runs it without approval under break-glass (`proposal_break_glass`).
    BreakGlass,
    /// A human denies, or the requester withdraws (`proposal_denied`).
    Deny,
    /// Its time ran out (`proposal_expired`).
    Expire,
    /// Found executing without an end (`proposal_unknown_outcome`).
    Interrupt,
    /// Approved but never started (`proposal_not_started`).
    NotStart,
    /// An operator resolved an unknown outcome (`proposal_resolved`).
    Resolve,
    /// Its run started (`exec` naming the proposal).
    Begin,
    /// Its run ended with exit 0 (`result`).
    Succeed,
    /// Its run ended otherwise (`result`).
    Fail,
    /// Its run was killed before its end (`cancelled`).
    Cancel,
}

/// The transition table: for each step, the states it may find and the state it leaves. The
/// book applies it ([`Book::apply`]) and checks against it ([`Book::check`]); nothing else says
/// how a proposal moves. (A `start` ends what the previous daemon left open: see `apply`.)
pub const TRANSITIONS: &[(Step, &[State], State)] = &[
    (Step::Approve, &[State::Pending], State::Approved),
    (Step::Endorse, &[State::Pending], State::Pending),
    (Step::BreakGlass, &[State::Pending], State::Approved),
    (Step::Deny, &[State::Pending], State::Denied),
    (Step::Expire, &[State::Pending], State::Expired),
    (
        Step::Interrupt,
        &[State::Executing, State::UnknownOutcome],
        State::UnknownOutcome,
    ),
    (
        Step::NotStart,
        &[State::Approved, State::Failed],
        State::Failed,
    ),
    (Step::Resolve, &[State::UnknownOutcome], State::Resolved),
    (Step::Begin, &[State::Approved], State::Executing),
    (Step::Succeed, &[State::Executing], State::Succeeded),
    (Step::Fail, &[State::Executing], State::Failed),
    (Step::Cancel, &[State::Executing], State::UnknownOutcome),
];

impl Step {
    /// The states this step may find and the state it leaves, from [`TRANSITIONS`].
    pub fn row(self) -> (&'static [State], State) {
        TRANSITIONS
            .iter()
            .find(|(step, _, _)| *step == self)
            .map(|(_, from, to)| (*from, *to))
            .expect("every step has a row in TRANSITIONS")
    }
}

/// Why an event cannot move its proposal (it would change nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("no proposal {0}")]
    NoProposal(u64),
    #[error("{}", unfit_message(*id, *step, *state))]
    State { id: u64, step: Step, state: State },
    /// The approval does not count: the requester's, a second one by the same person, one
    /// beyond its role's share, or one that does not fit the quorum's count.
    #[error("{reason}")]
    Approval { id: u64, reason: String },
}

fn unfit_message(id: u64, step: Step, state: State) -> String {
    match step {
        Step::Approve | Step::Endorse | Step::BreakGlass => {
            format!("proposal {id} was already decided ({state}); an approval is used once")
        }
        Step::Deny | Step::Expire => format!("proposal {id} was already decided ({state})"),
        Step::Resolve => {
            format!("proposal {id} is {state}, not unknown_outcome; nothing to resolve")
        }
        _ => format!("proposal {id} is {state}, cannot move to {}", step.row().1),
    }
}

/// Why an approval of `p` by `uid`, counting for `role`, does not count (`None` when it does):
/// nobody approves their own request, one person counts once, an approval that completes the
/// quorum is a `proposal_approved` and one short of it a `proposal_approval_given`, and under a
/// quorum it counts for one of its roles, within that role's `max_per_role`. A break-glass is
/// the requester's own.
pub fn approval_unfit(p: &Proposal, uid: u32, role: Option<&str>, step: Step) -> Option<String> {
    let id = p.id;
    if step == Step::BreakGlass {
        return (uid != p.requester.uid).then(|| {
            format!(
                "uid {uid} did not ask for proposal {id}; break-glass is the requester's own call"
            )
        });
    }
    if uid == p.requester.uid {
        return Some("nobody approves their own request: another person must decide".into());
    }
    if p.approvals.iter().any(|a| a.uid == uid) {
        return Some(format!(
            "uid {uid} already approved proposal {id}; one person's approval counts once"
        ));
    }
    let (given, needed) = (p.approvals.len() + 1, p.approvals_needed());
    match step {
        Step::Approve if given < needed => {
            return Some(format!(
                "proposal {id} needs {needed} approvals and this is approval {given}; it cannot run yet"
            ));
        }
        Step::Endorse if given >= needed => {
            return Some(format!(
                "approval {given} of {needed} completes proposal {id}; it is recorded as its approval"
            ));
        }
        _ => {}
    }
    let quorum = p.quorum.as_ref()?;
    let Some(role) = role else {
        return Some(format!(
            "proposal {id} needs a quorum; an approval counts for one of its roles"
        ));
    };
    if !quorum.from.is_empty() && !quorum.from.iter().any(|r| r == role) {
        return Some(format!(
            "role `{role}` is not among the roles proposal {id}'s quorum counts ({})",
            quorum.from.join(", ")
        ));
    }
    if let Some(max) = quorum.max_per_role {
        let used = p
            .approvals
            .iter()
            .filter(|a| a.role.as_deref() == Some(role))
            .count();
        if used >= max as usize {
            return Some(format!(
                "role `{role}` already gave {used} approval(s) of proposal {id} (max_per_role = {max}); the rest must come from other roles"
            ));
        }
    }
    None
}

/// Proposals, idempotency keys and rate-limit history.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Book {
    proposals: BTreeMap<u64, Proposal>,
    /// One past the highest proposal id ever journaled (pruned proposals included).
    next_id: u64,
    #[serde(with = "keys_as_list")]
    keys: BTreeMap<(u32, String), KeyEntry>,
    /// Per verb and requester uid: the Unix ms of each execution start within [`RATE_HISTORY`],
    /// the latest [`MAX_RATE_COUNT`] at most.
    runs: BTreeMap<String, BTreeMap<u32, VecDeque<u64>>>,
    /// Runs started and not ended yet: exec seq → the proposal it runs, if any.
    open_runs: BTreeMap<u64, Option<u64>>,
    /// Ended proposals: id → Unix ms of the end (they are dropped [`PROPOSAL_RETENTION`] later).
    ended: BTreeMap<u64, u64>,
    /// Record time (Unix ms) from which the next event prunes.
    next_prune: u64,
    /// Per-call database roles journaled as minted and not yet as dropped: role → source. The
    /// next start drops each (`Daemon::drop_owed_credentials`).
    #[serde(default)]
    credentials_owed: BTreeMap<String, String>,
}

/// The book as a state snapshot journals it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookSnapshot {
    pub version: u32,
    pub book: Book,
}

#[derive(Serialize)]
struct BookSnapshotRef<'a> {
    version: u32,
    book: &'a Book,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// Whether a run started at `start` (Unix ms) is older than [`RATE_HISTORY`] at `now`.
fn outside_rate_history(start: u64, now: u64) -> bool {
    now.saturating_sub(start) > RATE_HISTORY.as_millis() as u64
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
        self.prune_if_due(time);
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
                        self.ended.entry(p.id).or_insert(unix_ms(time));
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
            Event::ProposalApproved { id, by, role, .. } => {
                self.check(event).map_err(|unfit| Conflict {
                    seq,
                    message: unfit.to_string(),
                })?;
                self.transition(seq, time, *id, Step::Approve)?;
                self.with(*id, |p| {
                    p.approvals.push(Approval {
                        uid: by.uid,
                        user: by.user.clone(),
                        role: role.clone(),
                    });
                    p.decided_by = Some(by.clone());
                });
                Ok(())
            }
            Event::ProposalApprovalGiven { id, by, role, .. } => {
                self.check(event).map_err(|unfit| Conflict {
                    seq,
                    message: unfit.to_string(),
                })?;
                self.transition(seq, time, *id, Step::Endorse)?;
                self.with(*id, |p| {
                    p.approvals.push(Approval {
                        uid: by.uid,
                        user: by.user.clone(),
                        role: Some(role.clone()),
                    });
                });
                Ok(())
            }
            Event::ProposalBreakGlass { id, by, .. } => {
                self.check(event).map_err(|unfit| Conflict {
                    seq,
                    message: unfit.to_string(),
                })?;
                self.transition(seq, time, *id, Step::BreakGlass)?;
                self.with(*id, |p| {
                    p.break_glass = true;
                    p.decided_by = Some(by.clone());
                });
                Ok(())
            }
            Event::ProposalDenied { id, by, reason } => {
                self.transition(seq, time, *id, Step::Deny)?;
                self.with(*id, |p| {
                    p.decided_by = Some(by.clone());
                    p.note = Some(reason.to_string());
                });
                Ok(())
            }
            Event::ProposalExpired { id } => self.transition(seq, time, *id, Step::Expire),
            Event::ProposalUnknownOutcome { id } => {
                self.transition(seq, time, *id, Step::Interrupt)
            }
            Event::ProposalNotStarted { id, reason } => {
                self.transition(seq, time, *id, Step::NotStart)?;
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
                self.transition(seq, time, *id, Step::Resolve)?;
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
                let now = unix_ms(time);
                let runs = self
                    .runs
                    .entry(verb.clone())
                    .or_default()
                    .entry(caller.uid)
                    .or_default();
                while runs.front().is_some_and(|t| outside_rate_history(*t, now))
                    || runs.len() >= MAX_RATE_COUNT as usize
                {
                    runs.pop_front();
                }
                runs.push_back(now);
                self.open_runs.insert(seq, *proposal);
                match proposal {
                    Some(id) => {
                        self.transition(seq, time, *id, Step::Begin)?;
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
                        let step = if failed { Step::Fail } else { Step::Succeed };
                        self.transition(seq, time, id, step)?;
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
                    Some(id) => self.transition(seq, time, id, Step::Cancel),
                    None => {
                        self.end_keyed_run(*exec_seq, RunEnd::Cancelled);
                        Ok(())
                    }
                }
            }
            Event::CredentialMinted { source, role, .. } => {
                self.credentials_owed.insert(role.clone(), source.clone());
                Ok(())
            }
            Event::CredentialDropped { role, .. }
            | Event::CredentialFailed {
                role, owed: false, ..
            } => {
                self.credentials_owed.remove(role);
                Ok(())
            }
            Event::Stop { .. }
            | Event::CredentialFailed { owed: true, .. }
            | Event::ConnectRefused { .. }
            | Event::Refused { .. }
            | Event::Check { .. }
            | Event::CommandMapped { .. }
            | Event::FileWrite { .. }
            | Event::ProposalQueued { .. }
            | Event::ApprovalRefused { .. }
            | Event::NotifyFailed { .. }
            | Event::RefusalsCoalesced { .. }
            | Event::CommandsCoalesced { .. }
            | Event::Reload { .. } => Ok(()),
        }
    }

    /// The proposal `event` moves and the step it takes, if it moves one.
    pub fn step_of(&self, event: &Event) -> Option<(u64, Step)> {
        match event {
            Event::ProposalApproved { id, .. } => Some((*id, Step::Approve)),
            Event::ProposalApprovalGiven { id, .. } => Some((*id, Step::Endorse)),
            Event::ProposalBreakGlass { id, .. } => Some((*id, Step::BreakGlass)),
            Event::ProposalDenied { id, .. } => Some((*id, Step::Deny)),
            Event::ProposalExpired { id } => Some((*id, Step::Expire)),
            Event::ProposalUnknownOutcome { id } => Some((*id, Step::Interrupt)),
            Event::ProposalNotStarted { id, .. } => Some((*id, Step::NotStart)),
            Event::ProposalResolved { id, .. } => Some((*id, Step::Resolve)),
            Event::Exec {
                proposal: Some(id), ..
            } => Some((*id, Step::Begin)),
            Event::Result {
                exec_seq,
                exit_code,
                error,
                ..
            } => {
                let id = (*self.open_runs.get(exec_seq)?)?;
                let failed = *exit_code != Some(0) || error.is_some();
                Some((id, if failed { Step::Fail } else { Step::Succeed }))
            }
            Event::Cancelled { exec_seq, .. } => {
                let id = (*self.open_runs.get(exec_seq)?)?;
                Some((id, Step::Cancel))
            }
            _ => None,
        }
    }

    /// Whether `event` fits the proposal it moves as the book stands ([`TRANSITIONS`]): what
    /// [`Book::apply`] would refuse as a [`Conflict`], refused before it is journaled.
    /// An approval must also count: see [`approval_unfit`].
    pub fn check(&self, event: &Event) -> Result<(), Unfit> {
        let Some((id, step)) = self.step_of(event) else {
            return Ok(());
        };
        self.fits(id, step)?;
        let (by, role) = match event {
            Event::ProposalApproved { by, role, .. } => (by, role.as_deref()),
            Event::ProposalApprovalGiven { by, role, .. } => (by, Some(role.as_str())),
            Event::ProposalBreakGlass { by, .. } => (by, None),
            _ => return Ok(()),
        };
        let p = self.proposals.get(&id).ok_or(Unfit::NoProposal(id))?;
        match approval_unfit(p, by.uid, role, step) {
            Some(reason) => Err(Unfit::Approval { id, reason }),
            None => Ok(()),
        }
    }

    /// Whether proposal `id` is in a state `step` may find ([`TRANSITIONS`]).
    pub fn fits(&self, id: u64, step: Step) -> Result<(), Unfit> {
        let p = self.proposals.get(&id).ok_or(Unfit::NoProposal(id))?;
        let (from, _) = step.row();
        if from.contains(&p.state) {
            Ok(())
        } else {
            Err(Unfit::State {
                id,
                step,
                state: p.state,
            })
        }
    }

    fn transition(
        &mut self,
        seq: u64,
        time: SystemTime,
        id: u64,
        step: Step,
    ) -> Result<(), Conflict> {
        let (_, to) = step.row();
        self.fits(id, step).map_err(|unfit| Conflict {
            seq,
            message: match unfit {
                Unfit::NoProposal(_) => format!("no proposal {id} to move to {to}"),
                Unfit::State { state, .. } => {
                    format!("proposal {id} is {state}, cannot move to {to}")
                }
                Unfit::Approval { reason, .. } => reason,
            },
        })?;
        if let Some(p) = self.proposals.get_mut(&id) {
            p.state = to;
        }
        if !to.is_open() && to != State::UnknownOutcome {
            self.ended.entry(id).or_insert(unix_ms(time));
        }
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

    /// Drops what is past its retention, when the record time says it is due.
    fn prune_if_due(&mut self, time: SystemTime) {
        let now = unix_ms(time);
        if now < self.next_prune {
            return;
        }
        self.next_prune = now + PRUNE_INTERVAL.as_millis() as u64;
        self.keys
            .retain(|_, e| time.duration_since(e.at).unwrap_or_default() <= IDEMPOTENCY_WINDOW);
        let retention = PROPOSAL_RETENTION.as_millis() as u64;
        let expired: Vec<u64> = self
            .ended
            .iter()
            .filter(|(_, ended)| now.saturating_sub(**ended) > retention)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.ended.remove(&id);
            self.proposals.remove(&id);
        }
        for callers in self.runs.values_mut() {
            for times in callers.values_mut() {
                while times.front().is_some_and(|t| outside_rate_history(*t, now)) {
                    times.pop_front();
                }
            }
            callers.retain(|_, times| !times.is_empty());
        }
        self.runs.retain(|_, callers| !callers.is_empty());
    }

    /// The book as a state snapshot ([`BookSnapshot`]) for the journal.
    pub fn snapshot_state(&self) -> serde_json::Value {
        serde_json::to_value(BookSnapshotRef {
            version: BOOK_SNAPSHOT_VERSION,
            book: self,
        })
        .expect("the book always serializes")
    }

    /// The book of a state snapshot, if this version can read it.
    pub fn from_snapshot(snapshot: BookSnapshot) -> Result<Book, String> {
        if snapshot.version != BOOK_SNAPSHOT_VERSION {
            return Err(format!(
                "book snapshot version {} (this verbd reads version {BOOK_SNAPSHOT_VERSION})",
                snapshot.version
            ));
        }
        Ok(snapshot.book)
    }

    /// How much the book holds: proposals, idempotency keys, remembered runs (for `status`).
    pub fn sizes(&self) -> (usize, usize, usize) {
        let runs = self
            .runs
            .values()
            .flat_map(|callers| callers.values())
            .map(VecDeque::len)
            .sum();
        (self.proposals.len(), self.keys.len(), runs)
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
    /// Per-call database roles minted and not dropped: (role, source).
    pub fn credentials_owed(&self) -> impl Iterator<Item = (&str, &str)> {
        self.credentials_owed
            .iter()
            .map(|(role, source)| (role.as_str(), source.as_str()))
    }

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
        let now = unix_ms(now);
        let runs = self.runs.get(verb);
        // Each caller's latest MAX_RATE_COUNT runs are kept, and no rate counts more: a count
        // from a full history is at least the limit, so it is refused either way.
        let within = |per: Duration, only: Option<u32>| {
            let since = now.saturating_sub(per.as_millis() as u64);
            runs.into_iter()
                .flatten()
                .filter(|(uid, _)| only.is_none_or(|o| o == **uid))
                .map(|(_, times)| times.iter().filter(|t| **t >= since).count())
                .sum::<usize>()
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
mod tests;
