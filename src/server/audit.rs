//! The journal records the daemon writes, as types. Never contains a secret value: argv and env
//! are recorded with their `${secret:…}` placeholders, output only as sizes and hashes.
#![forbid(unsafe_code)]

use crate::approvals::{Decider, Proposal};
use crate::policy::Caller;
use serde::Serialize;
use std::collections::BTreeMap;

/// The caller as recorded.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEvent {
    /// The daemon started serving.
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
        decision: String,
        reason: String,
    },
    /// A call is about to run (written and fsync'd before the child starts).
    Exec {
        caller: CallerRecord,
        /// `run` (allowed at once) or `approved` (a proposal's approved run).
        decision: String,
        verb: String,
        args: BTreeMap<String, String>,
        args_hash: String,
        argv: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
    },
    /// The result of a run.
    Result {
        verb: String,
        exec_seq: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
        exit_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        stdout: OutputRecord,
        stderr: OutputRecord,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The client went away while its call ran; the process group was killed.
    Cancelled {
        verb: String,
        exec_seq: u64,
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
    /// Found approved but never started at start: not run, needs a new proposal.
    ProposalNotStarted {
        id: u64,
    },
    /// An operator resolved an unknown outcome.
    ProposalResolved {
        id: u64,
        by: Decider,
        outcome: String,
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
