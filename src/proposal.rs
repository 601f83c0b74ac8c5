//! A proposal: a call that waits for a human, as journaled and as shown (invariant 4).
//!
//! Responsibility: the record types of the approval state machine — [`Proposal`], its [`State`],
//! who decided ([`Decider`]), who asked ([`RequesterRecord`]) and how an operator resolved an
//! unknown outcome ([`Outcome`]). The same types are journaled (inside `events::Event`), replayed,
//! and sent to clients (inside `protocol::ProposalView`), so a renamed field breaks compilation on
//! both sides instead of printing empty strings.
//!
//! How a proposal moves is decided in one place, `approvals::Book::apply`; this module only holds
//! the shapes.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the proposal record format.
pub const PROPOSAL_VERSION: u32 = 1;

/// Where a proposal stands. Moves only forward:
/// pending → approved → executing → succeeded | failed | unknown_outcome → resolved,
/// or pending → denied | expired; approved → failed when it never started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    Approved,
    Executing,
    Succeeded,
    Failed,
    Denied,
    Expired,
    UnknownOutcome,
    Resolved,
}

impl State {
    /// The wire and journal spelling (`unknown_outcome`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Executing => "executing",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Denied => "denied",
            State::Expired => "expired",
            State::UnknownOutcome => "unknown_outcome",
            State::Resolved => "resolved",
        }
    }

    /// Still moving on its own: a `wait` keeps waiting.
    pub fn is_open(self) -> bool {
        matches!(self, State::Pending | State::Approved | State::Executing)
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an operator found when resolving an `unknown_outcome` by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Succeeded,
    Failed,
    NotRun,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::NotRun => "not-run",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Outcome, String> {
        match s {
            "succeeded" => Ok(Outcome::Succeeded),
            "failed" => Ok(Outcome::Failed),
            "not-run" => Ok(Outcome::NotRun),
            other => Err(format!(
                "outcome {other:?} is not one of succeeded, failed, not-run"
            )),
        }
    }
}

/// Who decided, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decider {
    pub uid: u32,
    pub user: Option<String>,
}

/// How many distinct people must approve, from which roles (a verb's `quorum`, or its
/// category's in `[approvals.quorum]`), recorded in the proposal when it is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quorum {
    /// Distinct people (uids) whose approvals it takes; never the requester.
    pub count: u32,
    /// The roles whose approvals count, in the order an approval is attributed to them (empty:
    /// every approver role of the verb, by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<String>,
    /// At most this many of the approvals may count for one role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_role: Option<u32>,
}

/// One approval of a proposal: who gave it and the role it counts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub uid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The quorum role the approval counts for (none without a quorum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl Quorum {
    /// What is still missing after `given` approvals, as people read it: `1 more, from sre or
    /// dba, at most 1 per role`.
    pub fn missing(&self, given: usize) -> String {
        let left = (self.count as usize).saturating_sub(given);
        let mut text = format!("{left} more");
        if !self.from.is_empty() {
            text += &format!(", from {}", self.from.join(" or "));
        }
        if let Some(max) = self.max_per_role {
            text += &format!(", at most {max} per role");
        }
        text
    }
}

/// The requester as recorded in the proposal (roles are re-resolved at approval).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequesterRecord {
    pub uid: u32,
    /// Primary gid as the kernel reported it.
    #[serde(default)]
    pub gid: u32,
    pub user: Option<String>,
    pub pid: i32,
}

impl Proposal {
    /// How many approvals it takes to run: its quorum's count, or one.
    pub fn approvals_needed(&self) -> usize {
        self.quorum.as_ref().map_or(1, |q| q.count as usize)
    }
}

/// A proposal as journaled and shown to approvers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: u64,
    pub version: u32,
    pub verb: String,
    pub description: String,
    pub category: String,
    pub args: BTreeMap<String, String>,
    pub args_hash: String,
    /// Rendered argv with secrets as placeholders.
    pub argv: Vec<String>,
    /// Each path parameter and what it resolved to when the call was checked
    /// (`/srv/a.txt → file (device 259:1, inode 12)`); the run re-pins and refuses if it changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_argv: Option<Vec<String>>,
    /// Scrubbed output of the dry run (destructive verbs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_output: Option<String>,
    pub requester: RequesterRecord,
    /// The agent's reason: untrusted text, shown as such.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub policy_hash: String,
    pub verb_fingerprint: String,
    /// Unix milliseconds.
    pub created_ms: u64,
    pub expires_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub state: State,
    /// The approvals it needs beyond one person's (none: one approval runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<Quorum>,
    /// The approvals given so far, in order (journaled one by one; a restart keeps them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<Approval>,
    /// It ran without approval: a break-glass call by a role the verb names in `break_glass`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub break_glass: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<Decider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How an operator resolved an unknown outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Journal seq of the run's `exec` record, once it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}
