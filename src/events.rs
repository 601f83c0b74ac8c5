//! The events the daemon journals, as one typed schema used both ways: written by the daemon and
//! read back, with the same types, when the journal is replayed at start.
//!
//! Invariants:
//! - never a secret value: argv and env are recorded with their `${secret:…}` placeholders,
//!   outputs and file contents only as sizes and hashes;
//! - bounded: text a caller chose and the policy did not validate (a refused call's verb, its
//!   parameter names and values, a `check`'s path and tool, the reasons that quote them, an
//!   approver's note) is journaled as [`Bounded`] text — whole up to [`MAX_TEXT_BYTES`], else a
//!   prefix, its length and its sha256 — and a refused call's arguments as [`RefusedArgs`] (at most
//!   [`MAX_ARGS_SHOWN`] of them, the rest counted and hashed). So a record's size never follows a
//!   hostile request's: a test reads this file and refuses a new text field of an event that is
//!   neither bounded nor listed, with its reason, as validated or written by the daemon;
//! - one schema: [`Event`] is `Serialize + Deserialize`; a record this version cannot read is an
//!   error naming its seq ([`decode`]), never skipped — except the journal layer's own records
//!   (kind `journal_*`), which say nothing about proposals and are passed over by design;
//! - what an event *means* for the proposal book is decided in `approvals::Book::apply` only.
#![forbid(unsafe_code)]

use crate::policy::Caller;
use crate::proposal::{Decider, Outcome, Proposal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest caller-chosen text journaled whole, counted in bytes as the journal writes it
/// (JSON-escaped: a control character counts 6).
pub const MAX_TEXT_BYTES: usize = 512;
/// A longer text keeps this much of its beginning (escaped bytes), then `…[N bytes, sha256 H]`.
pub const TEXT_PREFIX_BYTES: usize = 160;
/// A refused call's parameter name is journaled whole up to this many bytes.
pub const MAX_PARAM_NAME_BYTES: usize = 64;
/// A refused call's parameter value (a non-string one as its JSON text) up to this many bytes.
pub const MAX_PARAM_VALUE_BYTES: usize = 256;
/// Most parameters of a refused call journaled one by one; the rest are counted and hashed.
pub const MAX_ARGS_SHOWN: usize = 16;

/// Text a caller chose, as journaled: the whole text when it takes at most a limit
/// ([`MAX_TEXT_BYTES`] unless said otherwise) as JSON, else its beginning followed by
/// `…[N bytes, sha256 H]` with the length and hash of the whole text, so the record stays
/// evidence of exactly what was sent without growing with it. Records written before bounds
/// existed read back as they are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bounded(String);

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

impl Bounded {
    /// `text` bounded by [`MAX_TEXT_BYTES`].
    pub fn new(text: &str) -> Bounded {
        Bounded::within(text, MAX_TEXT_BYTES)
    }

    /// `text` bounded by `limit` escaped bytes (at least the cut marker's size).
    pub fn within(text: &str, limit: usize) -> Bounded {
        let escaped: usize = text.chars().map(escaped_len).sum();
        if escaped <= limit {
            return Bounded(text.to_owned());
        }
        let budget = TEXT_PREFIX_BYTES.min(limit / 2);
        let mut used = 0;
        let cut = text
            .char_indices()
            .find(|(_, c)| {
                used += escaped_len(*c);
                used > budget
            })
            .map_or(text.len(), |(at, _)| at);
        Bounded(format!(
            "{}…[{} bytes, sha256 {}]",
            &text[..cut],
            text.len(),
            crate::digest::sha256_hex(text.as_bytes())
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Bounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A refused call's argument value as journaled: strings as [`Bounded`] text, numbers, booleans
/// and null as they are, an array or object as itself while its JSON text is short, else as the
/// bounded JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BoundedValue(serde_json::Value);

impl BoundedValue {
    pub fn new(value: &serde_json::Value) -> BoundedValue {
        use serde_json::Value;
        BoundedValue(match value {
            Value::String(text) => Value::String(Bounded::within(text, MAX_PARAM_VALUE_BYTES).0),
            Value::Array(_) | Value::Object(_) => {
                let text = value.to_string();
                if text.len() <= MAX_PARAM_VALUE_BYTES {
                    value.clone()
                } else {
                    Value::String(Bounded::within(&text, MAX_PARAM_VALUE_BYTES).0)
                }
            }
            scalar => scalar.clone(),
        })
    }
}

/// How many parameters of a refused call were left out of its record, and the sha256 of the
/// canonical JSON of all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OmittedArgs {
    pub count: usize,
    pub sha256: String,
}

/// A refused call's arguments as journaled: the first [`MAX_ARGS_SHOWN`] (in name order), names
/// and values bounded; the rest counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusedArgs {
    pub args: BTreeMap<Bounded, BoundedValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_omitted: Option<OmittedArgs>,
}

impl RefusedArgs {
    pub fn new(args: &BTreeMap<String, serde_json::Value>) -> RefusedArgs {
        let shown = args
            .iter()
            .take(MAX_ARGS_SHOWN)
            .map(|(name, value)| {
                (
                    Bounded::within(name, MAX_PARAM_NAME_BYTES),
                    BoundedValue::new(value),
                )
            })
            .collect();
        let args_omitted = (args.len() > MAX_ARGS_SHOWN).then(|| OmittedArgs {
            count: args.len() - MAX_ARGS_SHOWN,
            sha256: crate::digest::sha256_hex(
                serde_json::to_string(args)
                    .expect("JSON values always serialize")
                    .as_bytes(),
            ),
        });
        RefusedArgs {
            args: shown,
            args_omitted,
        }
    }
}

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

/// A class of refusal, counted per caller for coalescing (see `server::refusals`): the verb or
/// path does not matter, so varying them does not escape the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalClass {
    /// `connect_refused`: a peer that matches no role.
    ConnectRefused,
    /// `refused` with decision `denied`.
    Denied,
    /// `refused` with decision `invalid`.
    Invalid,
    /// `check` answered not allowed.
    CheckDenied,
    /// `command` answered refuse.
    CommandRefused,
    /// `approval_refused`: an approve request from someone who may not approve it.
    ApprovalRefused,
}

impl RefusalClass {
    /// The event kind a refusal of this class is journaled as one by one.
    pub fn kind(self) -> &'static str {
        match self {
            RefusalClass::ConnectRefused => "connect_refused",
            RefusalClass::Denied | RefusalClass::Invalid => "refused",
            RefusalClass::CheckDenied => "check",
            RefusalClass::CommandRefused => "command_mapped",
            RefusalClass::ApprovalRefused => "approval_refused",
        }
    }
}

/// What the daemon made of a shell command (journaled; `pass` is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    Rewrite,
    Advise,
    Refuse,
}

/// What was being done to a per-call database role when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialAction {
    Mint,
    Drop,
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
        reason: Bounded,
    },
    /// A call was refused before anything ran.
    Refused {
        caller: CallerRecord,
        verb: Bounded,
        #[serde(flatten)]
        args: RefusedArgs,
        decision: RefusalKind,
        reason: Bounded,
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
        /// The bound that ended a streaming verb's run (its child killed); absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ended_by: Option<crate::protocol::StreamEnd>,
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
        path: Bounded,
        tool: Option<Bounded>,
        allowed: bool,
        reason: Bounded,
    },
    /// A `command` request (a shell command an agent was about to run) and what the daemon made
    /// of it: `rewrite` or `advise` with the verb and its arguments, or `refuse` with the reason.
    /// Credentials in the command text are redacted.
    CommandMapped {
        caller: CallerRecord,
        command: Bounded,
        tool: Option<Bounded>,
        decision: CommandAction,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verb: Option<String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        args: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Bounded>,
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
    /// A human approved: the proposal is consumed. Under a quorum this is the approval that
    /// completes it (the moment the quorum is reached), and `role` the role it counts for.
    ProposalApproved {
        id: u64,
        by: Decider,
        hash: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
    },
    /// One approval of a proposal that needs a quorum, short of it: it counts (for `role`),
    /// nothing runs yet.
    ProposalApprovalGiven {
        id: u64,
        by: Decider,
        hash: String,
        role: String,
    },
    /// A break-glass call: the requester, in one of the verb's `break_glass` roles (`roles`),
    /// runs it without approval.
    ProposalBreakGlass {
        id: u64,
        by: Decider,
        roles: Vec<String>,
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
        reason: Bounded,
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
        note: Bounded,
    },
    /// An approval attempt that was refused (who tried and why).
    ApprovalRefused {
        id: u64,
        by: Decider,
        reason: Bounded,
    },
    /// The approval notifier failed; the proposal stands.
    NotifyFailed {
        id: u64,
        error: Bounded,
    },
    /// Refusals of one class for one caller that were answered but not journaled one by one,
    /// because the caller had had its share of full records in the window: their count and
    /// the times of the first and the last (the caller is the last one's).
    RefusalsCoalesced {
        caller: CallerRecord,
        class: RefusalClass,
        count: u64,
        first: String,
        last: String,
        window_seconds: u64,
    },
    /// `command` requests of one caller that mapped onto a verb (`decision` `rewrite` or
    /// `advise`) and were answered but not journaled one by one, because the caller had had its
    /// share of full `command_mapped` records in the window: their count and the times of the
    /// first and the last (the caller is the last one's). The calls they led to are journaled
    /// as every call is.
    CommandsCoalesced {
        caller: CallerRecord,
        decision: CommandAction,
        count: u64,
        first: String,
        last: String,
        window_seconds: u64,
    },
    /// A per-call database role is about to be created for the run `exec_seq` (journaled
    /// before `CREATE ROLE`, so a crash after it leaves a name the next start drops). Names the
    /// role, never its password.
    CredentialMinted {
        source: String,
        role: String,
        verb: String,
        exec_seq: u64,
        valid_seconds: u64,
    },
    /// The role is gone: dropped when its call ended, or by the next start (`at_start`).
    CredentialDropped {
        source: String,
        role: String,
        at_start: bool,
    },
    /// Minting or dropping a role failed. A failed mint fails its call (nothing ran); a role that
    /// may exist stays owed (`owed`), and the next start drops it.
    CredentialFailed {
        source: String,
        role: String,
        action: CredentialAction,
        error: Bounded,
        /// The role may exist and is owed a drop (`false`: a mint that certainly created
        /// nothing).
        owed: bool,
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

    /// Text fields of [`Event`] that are not [`Bounded`], each with why its size does not follow
    /// a caller's request. A new text field must be `Bounded` or be listed here with its reason.
    const UNBOUNDED_TEXT_FIELDS: &[(&str, &str)] = &[
        ("Start.version", "the daemon's own version"),
        ("Start.policy", "the policy's path, the operator's"),
        ("Start.policy_hash", "a hash"),
        ("Stop.reason", "written by the daemon"),
        ("Exec.verb", "a verb the policy declares"),
        (
            "Exec.args",
            "validated by the policy (each value within its type's length limit); file content as size and hash",
        ),
        ("Exec.args_hash", "a hash"),
        (
            "Exec.argv",
            "rendered by the daemon from validated arguments",
        ),
        (
            "Exec.idempotency_key",
            "at most 200 characters, checked before anything",
        ),
        ("Result.verb", "a verb the policy declares"),
        (
            "Result.error",
            "written by the daemon (a file error names a validated path, at most 4096 bytes)",
        ),
        ("Cancelled.verb", "a verb the policy declares"),
        ("CommandMapped.verb", "a verb the policy declares"),
        (
            "CommandMapped.args",
            "validated by the policy (each value within its type's length limit)",
        ),
        ("FileWrite.verb", "a verb the policy declares"),
        ("FileWrite.path", "a validated path, at most 4096 bytes"),
        ("FileWrite.sha256", "a hash"),
        ("ProposalApproved.hash", "a hash"),
        ("ProposalApproved.role", "a role the policy declares"),
        ("ProposalApprovalGiven.hash", "a hash"),
        ("ProposalApprovalGiven.role", "a role the policy declares"),
        ("ProposalBreakGlass.roles", "roles the policy declares"),
        ("ProposalQueued.reason", "written by the daemon"),
        ("ProposalNotStarted.reason", "written by the daemon"),
        ("RefusalsCoalesced.first", "a time the daemon writes"),
        ("RefusalsCoalesced.last", "a time the daemon writes"),
        ("CommandsCoalesced.first", "a time the daemon writes"),
        ("CommandsCoalesced.last", "a time the daemon writes"),
        ("CredentialMinted.source", "a source the policy declares"),
        (
            "CredentialMinted.role",
            "a role name the daemon generates (26 bytes)",
        ),
        ("CredentialMinted.verb", "a verb the policy declares"),
        ("CredentialDropped.source", "a source the policy declares"),
        (
            "CredentialDropped.role",
            "a role name the daemon generates (26 bytes)",
        ),
        (
            "CredentialFailed.source",
            "a source the policy declares (or declared when the role was minted)",
        ),
        (
            "CredentialFailed.role",
            "a role name the daemon generates (26 bytes)",
        ),
        ("Reload.policy_hash", "a hash"),
        (
            "Reload.message",
            "the loader's report on the operator's policy",
        ),
    ];

    /// Reads `pub enum Event` in this file: every `Variant.field` whose type holds a `String`.
    fn text_fields_in_source() -> Vec<(String, String)> {
        let source = include_str!("events.rs");
        let body = source
            .split("pub enum Event {")
            .nth(1)
            .and_then(|rest| rest.split("\n}\n").next())
            .expect("the Event enum in events.rs");
        let mut variant = String::new();
        let mut found = Vec::new();
        for line in body.lines() {
            let trimmed = line.trim();
            if line.starts_with("    ") && !line.starts_with("     ") {
                if let Some(name) = trimmed.strip_suffix(" {") {
                    variant = name.to_string();
                }
                continue;
            }
            if let Some((field, ty)) = trimmed.split_once(": ")
                && !field.starts_with("//")
                && !field.starts_with('#')
            {
                found.push((
                    format!("{variant}.{field}"),
                    ty.trim_end_matches(',').to_string(),
                ));
            }
        }
        found
    }

    #[test]
    fn every_text_field_of_an_event_is_bounded_or_listed_with_its_reason() {
        let fields = text_fields_in_source();
        assert!(
            fields.iter().any(|(f, _)| f == "Refused.verb")
                && fields.iter().any(|(f, _)| f == "Check.path"),
            "the source reader finds the fields: {fields:?}"
        );
        for (field, ty) in &fields {
            let text = ty.contains("String") || ty.contains("str");
            let listed = UNBOUNDED_TEXT_FIELDS.iter().any(|(f, _)| f == field);
            assert!(
                !text || listed,
                "{field}: {ty} is unbounded text in a journaled event; use `Bounded` (or list it in UNBOUNDED_TEXT_FIELDS with the reason its size cannot follow a request)"
            );
        }
        for (listed, _) in UNBOUNDED_TEXT_FIELDS {
            assert!(
                fields
                    .iter()
                    .any(|(f, ty)| f == listed && (ty.contains("String") || ty.contains("str"))),
                "{listed} is listed as unbounded text but is not a text field (remove it)"
            );
        }
    }

    #[test]
    fn a_long_text_keeps_a_prefix_its_length_and_its_hash() {
        let short = "x".repeat(MAX_TEXT_BYTES);
        assert_eq!(Bounded::new(&short).as_str(), short);
        let long = "é".repeat(10_000);
        let bounded = Bounded::new(&long);
        let expected_tail = format!(
            "…[20000 bytes, sha256 {}]",
            crate::digest::sha256_hex(long.as_bytes())
        );
        assert!(bounded.as_str().ends_with(&expected_tail), "{bounded}");
        assert!(bounded.as_str().starts_with("éé"), "{bounded}");
        // Control characters count as the journal writes them (6 bytes each).
        let controls = "\u{1}".repeat(200);
        let written = serde_json::to_string(&Bounded::new(&controls)).unwrap();
        assert!(written.len() <= MAX_TEXT_BYTES, "{} bytes", written.len());
        assert!(written.contains("[200 bytes, sha256"), "{written}");
    }

    #[test]
    fn the_largest_refused_record_a_caller_can_cause_stays_within_8_kib() {
        // Every bounded field at its worst: control characters (6 bytes each once written).
        let worst = "\u{1}".repeat(5_000);
        let args: BTreeMap<String, serde_json::Value> = (0..100)
            .map(|n| {
                (
                    format!("{worst}{n}"),
                    serde_json::Value::String(worst.clone()),
                )
            })
            .collect();
        let event = Event::Refused {
            caller: CallerRecord {
                uid: u32::MAX,
                gid: u32::MAX,
                pid: i32::MIN,
                user: Some("u".repeat(32)),
                roles: vec!["agent".into()],
            },
            verb: Bounded::new(&worst),
            args: RefusedArgs::new(&args),
            decision: RefusalKind::Invalid,
            reason: Bounded::new(&worst),
        };
        let written = serde_json::to_string(&event).unwrap();
        assert!(written.len() <= 7 * 1024, "{} bytes", written.len());
        let read: Event = serde_json::from_str(&written).unwrap();
        assert_eq!(read, event);
        let Event::Refused { args, .. } = read else {
            unreachable!()
        };
        assert_eq!(args.args.len(), MAX_ARGS_SHOWN);
        assert_eq!(args.args_omitted.unwrap().count, 100 - MAX_ARGS_SHOWN);
    }

    #[test]
    fn a_refused_record_of_an_earlier_version_still_reads() {
        let old = serde_json::json!({
            "kind": "refused",
            "caller": {"uid": 1, "gid": 1, "pid": 1, "user": null, "roles": []},
            "verb": "v".repeat(5000),
            "args": {"p": [1, 2, 3], "q": "x".repeat(5000)},
            "decision": "denied",
            "reason": "r",
        });
        assert!(matches!(decode(1, &old), Ok(Some(Event::Refused { .. }))));
    }

    #[test]
    fn events_round_trip_and_unknown_kinds_are_named() {
        let event = Event::ProposalResolved {
            id: 3,
            by: Decider {
                uid: 5,
                user: Some("op".into()),
            },
            outcome: Outcome::NotRun,
            note: Bounded::new("checked by hand"),
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
