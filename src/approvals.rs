//! Proposals for human approval: bound to exact arguments, single-use, durable (invariants 4, 9).
//!
//! The journal is the source of truth: every change of a proposal is journaled (and fsync'd)
//! before anyone is told about it, and [`Book::replay`] rebuilds all proposals, idempotency keys
//! and rate-limit history from the journal at start. There is no second store.
//!
//! Invariants:
//! - a proposal records the verb, normalized args, their canonical hash, the rendered argv with
//!   secret placeholders, the verb's fingerprint and the policy hash; approval names id + hash
//!   prefix and is checked against the *current* policy (see `server`), so changed args or a
//!   changed template never ride on an old approval;
//! - state moves only forward: pending → approved → executing → succeeded | failed, or
//!   pending → denied | expired; [`Book::claim`] is the single atomic step from pending to
//!   approved, so concurrent approvals execute once;
//! - after a restart, a proposal that was executing without an end record becomes
//!   `unknown_outcome` and is never re-run automatically; one approved but never started becomes
//!   `failed` (not run) and needs a new proposal.
#![forbid(unsafe_code)]

use crate::protocol::RunResult;
use crate::server::audit::CallerRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Version of the proposal record format.
pub const PROPOSAL_VERSION: u32 = 1;

/// Most proposals one requester may have waiting at once (a flood of proposals is refused).
pub const MAX_PENDING_PER_REQUESTER: usize = 20;

/// How long an idempotency key is remembered.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

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

    /// A state nothing will change any more without an operator.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Succeeded
                | State::Failed
                | State::Denied
                | State::Expired
                | State::UnknownOutcome
                | State::Resolved
        )
    }
}

/// Who decided, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decider {
    pub uid: u32,
    pub user: Option<String>,
}

/// A proposal as journaled and shown to approvers.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<Decider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The run's result while the daemon that ran it is up (output is not journaled).
    #[serde(skip)]
    pub result: Option<RunResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequesterRecord {
    pub uid: u32,
    /// Primary gid as the kernel reported it (group roles are re-resolved at approval).
    #[serde(default)]
    pub gid: u32,
    pub user: Option<String>,
    pub pid: i32,
}

impl From<&CallerRecord> for RequesterRecord {
    fn from(c: &CallerRecord) -> Self {
        RequesterRecord {
            uid: c.uid,
            gid: c.gid,
            user: c.user.clone(),
            pid: c.pid,
        }
    }
}

/// What an idempotency key points at.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyTarget {
    Proposal(u64),
    /// A run without approval: the journal seq of its exec record.
    Run {
        exec_seq: u64,
    },
}

#[derive(Debug, Clone)]
pub struct KeyEntry {
    pub verb: String,
    pub args_hash: String,
    pub at: SystemTime,
    pub target: KeyTarget,
    /// The outcome of a direct run, once known (exit only after a restart).
    pub result: Option<RunResult>,
}

/// Why a claim (approval) cannot proceed.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimRefusal {
    NotFound,
    NotPending(State),
    Expired,
}

/// All proposals, idempotency keys and rate-limit history.
#[derive(Debug, Default)]
pub struct Book {
    proposals: BTreeMap<u64, Proposal>,
    next_id: u64,
    keys: BTreeMap<(u32, String), KeyEntry>,
    /// Per verb: (time, requester uid) of each execution start.
    runs: BTreeMap<String, VecDeque<(SystemTime, u32)>>,
    /// exec seq → proposal id, for matching result records during replay.
    exec_of: BTreeMap<u64, u64>,
}

pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

impl Book {
    pub fn new() -> Book {
        Book {
            next_id: 1,
            ..Default::default()
        }
    }

    /// Rebuild from journal events in order. Returns the ids whose outcome is unknown (they were
    /// executing when the daemon stopped) and those approved but never started.
    pub fn replay(
        events: impl IntoIterator<Item = (u64, SystemTime, serde_json::Value)>,
    ) -> (Book, Vec<u64>, Vec<u64>) {
        let mut book = Book::new();
        for (seq, time, event) in events {
            book.apply(seq, time, &event);
        }
        let mut unknown = Vec::new();
        let mut never_started = Vec::new();
        for p in book.proposals.values_mut() {
            match p.state {
                State::Executing => {
                    p.state = State::UnknownOutcome;
                    unknown.push(p.id);
                }
                State::Approved => {
                    p.state = State::Failed;
                    p.note = Some("not executed: the daemon stopped between approval and execution; propose again".into());
                    never_started.push(p.id);
                }
                _ => {}
            }
        }
        (book, unknown, never_started)
    }

    fn apply(&mut self, seq: u64, time: SystemTime, event: &serde_json::Value) {
        let kind = event["kind"].as_str().unwrap_or_default();
        let id = event["id"].as_u64();
        match kind {
            "proposal_created" => {
                if let Ok(p) = serde_json::from_value::<Proposal>(event["proposal"].clone()) {
                    self.next_id = self.next_id.max(p.id + 1);
                    if let Some(key) = &p.idempotency_key {
                        self.keys.insert(
                            (p.requester.uid, key.clone()),
                            KeyEntry {
                                verb: p.verb.clone(),
                                args_hash: p.args_hash.clone(),
                                at: time,
                                target: KeyTarget::Proposal(p.id),
                                result: None,
                            },
                        );
                    }
                    self.proposals.insert(p.id, p);
                }
            }
            "proposal_approved" => self.set_state(id, State::Approved, decider(event)),
            "proposal_denied" => {
                self.set_state(id, State::Denied, decider(event));
                if let Some(p) = id.and_then(|i| self.proposals.get_mut(&i)) {
                    p.note = event["reason"].as_str().map(String::from);
                }
            }
            "proposal_expired" => self.set_state(id, State::Expired, None),
            "proposal_unknown_outcome" => self.set_state(id, State::UnknownOutcome, None),
            "proposal_not_started" => self.set_state(id, State::Failed, None),
            "proposal_resolved" => {
                self.set_state(id, State::Resolved, decider(event));
                if let Some(p) = id.and_then(|i| self.proposals.get_mut(&i)) {
                    p.note = event["note"].as_str().map(String::from);
                }
            }
            "exec" => {
                let verb = event["verb"].as_str().unwrap_or_default().to_string();
                let uid = event["caller"]["uid"].as_u64().unwrap_or(0) as u32;
                self.runs
                    .entry(verb.clone())
                    .or_default()
                    .push_back((time, uid));
                if let Some(pid) = event["proposal"].as_u64() {
                    self.exec_of.insert(seq, pid);
                    self.set_state(Some(pid), State::Executing, None);
                } else if let Some(key) = event["idempotency_key"].as_str() {
                    self.keys.insert(
                        (uid, key.to_string()),
                        KeyEntry {
                            verb,
                            args_hash: event["args_hash"].as_str().unwrap_or_default().into(),
                            at: time,
                            target: KeyTarget::Run { exec_seq: seq },
                            result: None,
                        },
                    );
                }
            }
            "result" => {
                let exec_seq = event["exec_seq"].as_u64().unwrap_or(0);
                let exit_code = event["exit_code"].as_i64().map(|c| c as i32);
                let signal = event["signal"].as_i64().map(|s| s as i32);
                let failed = exit_code != Some(0) || event["error"].is_string();
                if let Some(pid) = self.exec_of.get(&exec_seq).copied() {
                    self.set_state(
                        Some(pid),
                        if failed {
                            State::Failed
                        } else {
                            State::Succeeded
                        },
                        None,
                    );
                    if let Some(p) = self.proposals.get_mut(&pid) {
                        p.exit_code = exit_code;
                        p.signal = signal;
                    }
                } else if let Some(entry) = self
                    .keys
                    .values_mut()
                    .find(|e| e.target == KeyTarget::Run { exec_seq })
                {
                    entry.result = Some(RunResult {
                        exit: crate::protocol::ExitInfo {
                            code: exit_code,
                            signal,
                            timed_out: event["timed_out"].as_bool().unwrap_or(false),
                        },
                        stdout: String::new(),
                        stderr: "(verbd: the output of the first run is not kept across daemon restarts)\n".into(),
                        stdout_truncated: false,
                        stderr_truncated: false,
                        duration_ms: event["duration_ms"].as_u64().unwrap_or(0),
                    });
                }
            }
            _ => {}
        }
    }

    fn set_state(&mut self, id: Option<u64>, state: State, by: Option<Decider>) {
        if let Some(p) = id.and_then(|i| self.proposals.get_mut(&i)) {
            p.state = state;
            if by.is_some() {
                p.decided_by = by;
            }
        }
    }

    /// The next proposal id (not reserved until [`Book::insert`]).
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    pub fn insert(&mut self, proposal: Proposal) {
        self.next_id = self.next_id.max(proposal.id + 1);
        if let Some(key) = &proposal.idempotency_key {
            self.keys.insert(
                (proposal.requester.uid, key.clone()),
                KeyEntry {
                    verb: proposal.verb.clone(),
                    args_hash: proposal.args_hash.clone(),
                    at: SystemTime::now(),
                    target: KeyTarget::Proposal(proposal.id),
                    result: None,
                },
            );
        }
        self.proposals.insert(proposal.id, proposal);
    }

    pub fn get(&self, id: u64) -> Option<&Proposal> {
        self.proposals.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Proposal> {
        self.proposals.get_mut(&id)
    }

    pub fn all(&self) -> impl Iterator<Item = &Proposal> {
        self.proposals.values()
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

    /// The one atomic step from pending to approved. The caller holds the book's lock, journals
    /// the approval, and calls [`Book::unclaim`] if that fails.
    pub fn claim(
        &mut self,
        id: u64,
        now: SystemTime,
        by: Decider,
    ) -> Result<&Proposal, ClaimRefusal> {
        let p = self.proposals.get_mut(&id).ok_or(ClaimRefusal::NotFound)?;
        if p.state != State::Pending {
            return Err(ClaimRefusal::NotPending(p.state));
        }
        if p.expires_ms <= unix_ms(now) {
            return Err(ClaimRefusal::Expired);
        }
        p.state = State::Approved;
        p.decided_by = Some(by);
        Ok(p)
    }

    /// Undo a claim whose journal record could not be written.
    pub fn unclaim(&mut self, id: u64) {
        if let Some(p) = self.proposals.get_mut(&id)
            && p.state == State::Approved
        {
            p.state = State::Pending;
            p.decided_by = None;
        }
    }

    /// Record the start of a run (rate limits) and, for proposals, the executing state.
    pub fn started(&mut self, verb: &str, uid: u32, proposal: Option<u64>, now: SystemTime) {
        self.runs
            .entry(verb.to_string())
            .or_default()
            .push_back((now, uid));
        self.set_state(proposal, State::Executing, None);
    }

    /// Record the end of a proposal's run.
    pub fn finished(&mut self, id: u64, result: Option<RunResult>, failed: bool) {
        if let Some(p) = self.proposals.get_mut(&id) {
            p.state = if failed {
                State::Failed
            } else {
                State::Succeeded
            };
            if let Some(r) = &result {
                p.exit_code = r.exit.code;
                p.signal = r.exit.signal;
            }
            p.result = result;
        }
    }

    /// Would one more run of `verb` by `uid` exceed `per_caller` or `global` within their periods?
    pub fn rate_exceeded(
        &mut self,
        verb: &str,
        uid: u32,
        per_caller: Option<crate::policy::units::Rate>,
        global: Option<crate::policy::units::Rate>,
        now: SystemTime,
    ) -> Option<String> {
        let runs = self.runs.entry(verb.to_string()).or_default();
        let longest = [per_caller, global]
            .iter()
            .flatten()
            .map(|r| r.per)
            .max()
            .unwrap_or_default();
        while runs
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t).unwrap_or_default() > longest)
        {
            runs.pop_front();
        }
        let within = |per: Duration, only: Option<u32>| {
            runs.iter()
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

    /// Remember a direct run under a key.
    pub fn remember_run(
        &mut self,
        uid: u32,
        key: &str,
        verb: &str,
        args_hash: &str,
        exec_seq: u64,
        result: Option<RunResult>,
    ) {
        self.keys.insert(
            (uid, key.to_string()),
            KeyEntry {
                verb: verb.to_string(),
                args_hash: args_hash.to_string(),
                at: SystemTime::now(),
                target: KeyTarget::Run { exec_seq },
                result,
            },
        );
    }
}

fn decider(event: &serde_json::Value) -> Option<Decider> {
    serde_json::from_value(event["by"].clone()).ok()
}

/// Escape control characters so hostile text cannot forge a terminal view.
pub fn escape_for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c) =>
            {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            exit_code: None,
            signal: None,
            result: None,
        }
    }

    #[test]
    fn claim_is_single_use() {
        let mut book = Book::new();
        book.insert(proposal(1));
        let by = Decider { uid: 5, user: None };
        assert!(book.claim(1, SystemTime::now(), by.clone()).is_ok());
        assert_eq!(
            book.claim(1, SystemTime::now(), by).unwrap_err(),
            ClaimRefusal::NotPending(State::Approved)
        );
    }

    #[test]
    fn replay_marks_interrupted_runs_unknown() {
        let created = serde_json::json!({"kind": "proposal_created", "proposal": proposal(7)});
        let approved = serde_json::json!({"kind": "proposal_approved", "id": 7, "by": {"uid": 5, "user": null}});
        let exec = serde_json::json!({"kind": "exec", "verb": "scale", "caller": {"uid": 1000}, "proposal": 7});
        let now = SystemTime::now();
        let (book, unknown, _) =
            Book::replay([(1, now, created), (2, now, approved), (3, now, exec)]);
        assert_eq!(unknown, vec![7]);
        assert_eq!(book.get(7).unwrap().state, State::UnknownOutcome);
        assert_eq!(book.next_id(), 8);
    }

    #[test]
    fn escapes_control_characters() {
        assert_eq!(
            escape_for_terminal("a\x1b[2Jb\nc\u{202e}"),
            "a\\u{1b}[2Jb\\nc\\u{202e}"
        );
    }
}
