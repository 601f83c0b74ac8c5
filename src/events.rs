//! The events the daemon journals, as one typed schema used both ways: written by the daemon and
//! read back, with the same types, when the journal is replayed at start.
//!
//! Invariants:
//! - never a secret value: argv and env are recorded with their `${secret:…}` placeholders,
//!   outputs and file contents only as sizes and hashes;
//! - one schema: [`Event`] is `Serialize + Deserialize`; a record this version cannot read is an
//!   error naming its seq ([`decode`]), never skipped — except the journal layer's own records
//!   (kind `journal_*`), which say nothing about proposals and are passed over by design;
//! - what an event *means* for the proposal book is decided in `approvals::Book::apply` only.
#![forbid(unsafe_code)]

use crate::policy::Caller;
use crate::proposal::{Decider, Outcome, Proposal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The caller as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerRecord {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
    pub user: Option<String>,
    pub roles: Vec<String>,
}

impl CallerRecord {
    pub fn new(caller: &Caller, roles: Vec<String>) -> Self {
        CallerRecord {
            uid: caller.uid,
            gid: caller.gid,
            pid: caller.pid,
            user: caller.user.clone(),
            roles,
        }
    }
}

/// Output of one stream as recorded: sizes and hash, never content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRecord {
    pub bytes: u64,
    pub kept: u64,
    pub truncated: bool,
    pub sha256: String,
}

impl OutputRecord {
    pub fn of(captured: &crate::exec::Captured) -> Self {
        OutputRecord {
            bytes: captured.total,
            kept: captured.bytes.len() as u64,
            truncated: captured.truncated,
            sha256: captured.sha256(),
        }
    }
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunDecision {
    /// Allowed at once.
    Run,
    /// A proposal's approved run.
    Approved,
}

/// How a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    Denied,
    Invalid,
}

/// Why a run was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelCause {
    /// The client closed its connection while its call ran.
    ClientHungUp,
    /// The daemon stopped and the run outlived the shutdown grace period.
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The daemon started serving. Runs left open by the previous daemon end here (see
    /// `approvals::Book::apply`).
    Start {
        version: String,
        policy: String,
        policy_hash: String,
        pid: u32,
        uid: u32,
    },
    /// The daemon stopped.
    Stop {
        reason: String,
        in_flight: usize,
    },
    /// A connection whose peer matches no role.
    ConnectRefused {
        caller: CallerRecord,
        reason: String,
    },
    /// A call was refused before anything ran.
    Refused {
        caller: CallerRecord,
        verb: String,
        args: BTreeMap<String, serde_json::Value>,
        decision: RefusalKind,
        reason: String,
    },
    /// A call is about to run (written and fsync'd before the child starts).
    Exec {
        caller: CallerRecord,
        decision: RunDecision,
        verb: String,
        args: BTreeMap<String, String>,
        args_hash: String,
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
    },
    /// The result of a run.
    Result {
        verb: String,
        exec_seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
        exit_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        stdout: OutputRecord,
        stderr: OutputRecord,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A run was stopped before its end: its process group was killed. Whatever it did before
    /// is unknown, so a proposal's run ends as `unknown_outcome` and an idempotency key remembers
    /// the cancellation (a retry never runs it again).
    Cancelled {
        verb: String,
        exec_seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
        cause: CancelCause,
        duration_ms: u64,
    },
    /// A `check` request (hook adapter) and its answer.
    Check {
        caller: CallerRecord,
        path: String,
        tool: Option<String>,
        allowed: bool,
        reason: String,
    },
    /// A file verb wrote: path, size and hash of the content (never the content).
    FileWrite {
        verb: String,
        exec_seq: u64,
        path: String,
        size: u64,
        sha256: String,
        created: bool,
    },
    /// A proposal was created (journaled before the agent hears `CONFIRM_REQUIRED`).
    ProposalCreated {
        id: u64,
        proposal: Box<Proposal>,
    },
    /// A human approved: the proposal is consumed.
    ProposalApproved {
        id: u64,
        by: Decider,
        hash: String,
    },
    /// An approved proposal waits for an execution slot (all were busy); it runs once one frees,
    /// or ends as not started when none frees in time.
    ProposalQueued {
        id: u64,
        reason: String,
    },
    ProposalDenied {
        id: u64,
        by: Decider,
        reason: String,
    },
    ProposalExpired {
        id: u64,
    },
    /// Found executing without an end record at start: never re-run.
    ProposalUnknownOutcome {
        id: u64,
    },
    /// Approved but never started (the daemon stopped, or no execution slot freed in time): not
    /// run, needs a new proposal.
    ProposalNotStarted {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An operator resolved an unknown outcome.
    ProposalResolved {
        id: u64,
        by: Decider,
        outcome: Outcome,
        note: String,
    },
    /// An approval attempt that was refused (who tried and why).
    ApprovalRefused {
        id: u64,
        by: Decider,
        reason: String,
    },
    /// The approval notifier failed; the proposal stands.
    NotifyFailed {
        id: u64,
        error: String,
    },
    /// A reload attempt and its outcome.
    Reload {
        ok: bool,
        policy_hash: String,
        message: String,
    },
}

/// A journal record this version cannot read as an [`Event`].
#[derive(Debug, thiserror::Error)]
#[error(
    "journal record seq {seq} ({kind}) cannot be read by this verbd version: {message}; run the verbd version that wrote it, or report the record"
)]
pub struct DecodeError {
    pub seq: u64,
    pub kind: String,
    pub message: String,
}

/// Read one record's event. `Ok(None)` for the journal layer's own records (`journal_*` kinds,
/// e.g. `journal_tail_repaired`), which carry no daemon state.
pub fn decode(seq: u64, event: &serde_json::Value) -> Result<Option<Event>, DecodeError> {
    let kind = event["kind"].as_str().unwrap_or("no kind");
    if kind.starts_with("journal_") {
        return Ok(None);
    }
    Event::deserialize(event)
        .map(Some)
        .map_err(|e| DecodeError {
            seq,
            kind: kind.to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_unknown_kinds_are_named() {
        let event = Event::ProposalResolved {
            id: 3,
            by: Decider {
                uid: 5,
                user: Some("op".into()),
            },
            outcome: Outcome::NotRun,
            note: "checked by hand".into(),
        };
        let value = serde_json::to_value(&event).unwrap();
        assert_eq!(value["kind"], "proposal_resolved");
        assert_eq!(value["outcome"], "not-run");
        assert_eq!(decode(9, &value).unwrap(), Some(event));
        let repaired = serde_json::json!({"kind": "journal_tail_repaired", "line": 3});
        assert_eq!(decode(10, &repaired).unwrap(), None);
        let unknown = serde_json::json!({"kind": "proposal_teleported", "id": 1});
        let err = decode(11, &unknown).unwrap_err().to_string();
        assert!(
            err.contains("seq 11") && err.contains("proposal_teleported"),
            "{err}"
        );
    }
}
