//! Wire protocol between the daemon and its clients (CLI, hook adapter, tests).
//!
//! Newline-delimited JSON over a Unix stream socket: one request line, one response line.
//! Every request carries `"v": PROTOCOL_VERSION`; a request with another version is answered
//! with `error`. Caller identity is never part of a request: the daemon takes it from the kernel
//! (SO_PEERCRED), so no field here can claim one (invariant 3). See docs/protocol.md.
#![forbid(unsafe_code)]

pub use crate::proposal::{Outcome, Proposal, State};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of this protocol; bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest request line the daemon reads (bytes, newline included).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// A request, tagged by `op`. Serialized together with `"v"` by [`encode_request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Run a verb (or propose it, when it needs approval).
    Call {
        verb: String,
        #[serde(default)]
        args: BTreeMap<String, serde_json::Value>,
        /// The agent's stated reason; stored and shown as untrusted text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
        /// The caller takes a streaming verb's output as it comes (`chunk` answers before the
        /// last), within these bounds. Absent: one answer, as from every verb.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<StreamAsk>,
    },
    /// Run a verb that needs approval without it, as a person in one of the verb's
    /// `break_glass` roles: journaled as break-glass, the notifier announces it.
    BreakGlass {
        verb: String,
        #[serde(default)]
        args: BTreeMap<String, serde_json::Value>,
        /// Why the glass is broken; stored and shown as untrusted text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The verbs the caller may use.
    List {},
    /// Would a write to `path` (already resolved by the client) be allowed for the caller?
    Check {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// A shell command the caller is about to run (`verbd hook claude-code` on Bash, `verbd sh`):
    /// is it a verb call, a privilege the caller lacks, or the caller's own work? Journaled
    /// unless the answer is `pass`.
    Command {
        command: String,
        /// The directory the command would run in, when the runtime says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// The runtime and tool that asks (`claude-code Bash`, `sh`), for the journal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// Proposals waiting for a decision (approvers only).
    Pending {},
    /// Approve proposal `id`; `hash` is a prefix of the proposal's canonical hash.
    Approve { id: u64, hash: String },
    /// Deny proposal `id`.
    Deny { id: u64, reason: String },
    /// Long-poll until proposal `id` reaches a final state or `timeout_ms` passes.
    Wait { id: u64, timeout_ms: u64 },
    /// Current state and outcome of proposal `id`.
    Result { id: u64 },
    /// Mark an `unknown_outcome` proposal as resolved by an operator.
    Resolve {
        id: u64,
        outcome: Outcome,
        note: String,
    },
    /// Re-read the policy file, self-test it and swap it in if it passes.
    Reload {},
    /// Daemon identity, policy hash and counters.
    Status {},
}

/// Serialize a request as one protocol line (with `"v"` and the trailing newline).
///
/// ```
/// use verbd::protocol::{Request, encode_request};
/// let line = encode_request(&Request::List {});
/// assert_eq!(line, b"{\"op\":\"list\",\"v\":1}\n");
/// ```
pub fn encode_request(request: &Request) -> Vec<u8> {
    let mut value = serde_json::to_value(request).expect("requests always serialize");
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("v".into(), PROTOCOL_VERSION.into());
    }
    let mut line = serde_json::to_vec(&value).expect("values always serialize");
    line.push(b'\n');
    line
}

/// Why a request line could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("request is not valid JSON: {0}")]
    Json(String),
    #[error("request must be a JSON object")]
    NotObject,
    #[error("request has no protocol version field \"v\" (this daemon speaks v{PROTOCOL_VERSION})")]
    MissingVersion,
    #[error("unsupported protocol version {0} (this daemon speaks v{PROTOCOL_VERSION})")]
    UnsupportedVersion(u64),
    #[error("malformed request: {0}")]
    Shape(String),
}

/// Decode one request line (without or with its trailing newline).
pub fn decode_request(line: &[u8]) -> Result<Request, DecodeError> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| DecodeError::Json(e.to_string()))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(DecodeError::NotObject);
    };
    match map.remove("v") {
        None => return Err(DecodeError::MissingVersion),
        Some(v) => match v.as_u64() {
            Some(n) if n == u64::from(PROTOCOL_VERSION) => {}
            Some(n) => return Err(DecodeError::UnsupportedVersion(n)),
            None => return Err(DecodeError::Shape("\"v\" must be an integer".into())),
        },
    }
    serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|e| DecodeError::Shape(e.to_string()))
}

/// A caller's wish to take a verb's output as it comes, and its own bounds: at most the
/// verb's (asking for more is `invalid`, rule `stream-bound`); absent, the verb's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamAsk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lines: Option<u64>,
}

/// Which output stream a chunk is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// Which bound of a streaming verb ended its run (the child was killed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    /// `max_duration` passed.
    MaxDuration,
    /// `max_lines` lines were delivered.
    MaxLines,
    /// `max_output` bytes of one stream were delivered.
    MaxOutput,
}

impl StreamEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            StreamEnd::MaxDuration => "max_duration",
            StreamEnd::MaxLines => "max_lines",
            StreamEnd::MaxOutput => "max_output",
        }
    }
}

/// How a finished child ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code when the child exited normally.
    pub code: Option<i32>,
    /// Signal number when the child was killed by a signal.
    pub signal: Option<i32>,
    /// True when verbd killed the process group because the verb's timeout passed.
    #[serde(default)]
    pub timed_out: bool,
}

/// The result of running a verb.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub exit: ExitInfo,
    /// Scrubbed stdout, lossily decoded as UTF-8.
    pub stdout: String,
    /// Scrubbed stderr, lossily decoded as UTF-8.
    pub stderr: String,
    /// The stream was cut (`max_output`, timeout, a signal, a read error) and is incomplete.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Where a stream was cut, its last bytes before the cut are withheld whatever they contain
    /// (so a cut can never end inside a secret); this many.
    #[serde(default)]
    pub stdout_withheld: u64,
    #[serde(default)]
    pub stderr_withheld: u64,
    pub duration_ms: u64,
    /// A streaming verb's run that a bound ended (its child killed); absent when the child
    /// exited by itself, and for every verb that does not stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<StreamEnd>,
}

/// One parameter of a verb as `list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamInfo {
    pub name: String,
    /// The type and its constraints, e.g. `int 1..=5000` or `enum(web|workers)`.
    pub kind: String,
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of the values (`type`, and `enum`, `minimum`/`maximum`, `pattern`,
    /// `maxLength` where they apply): a description for clients such as `verbd mcp`; the daemon
    /// validates every value itself. Absent from daemons older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
}

/// One verb as `list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerbInfo {
    pub name: String,
    pub description: String,
    pub category: String,
    /// True when a call creates a proposal for a human instead of running at once.
    pub needs_approval: bool,
    pub params: Vec<ParamInfo>,
}

/// A proposal as `pending`, `result` and `wait` show it: the journaled record plus its times in
/// RFC 3339 and, while the daemon that ran it is up, the run's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalView {
    #[serde(flatten)]
    pub proposal: Proposal,
    pub created_at: String,
    pub expires_at: String,
    /// Always true: `reason`, `args` and outputs come from the requester; show them escaped.
    pub reason_is_untrusted: bool,
    /// The run's output (not journaled, so absent after a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
}

/// The verb call that stands for a whole shell command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerbCall {
    pub verb: String,
    pub args: BTreeMap<String, String>,
    /// Pure text filters to apply to the verb's output (`grep -i error | tail -n 5`), verbatim
    /// from the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_side: Option<String>,
    /// The call creates a proposal for a human (`CONFIRM_REQUIRED`) instead of running.
    pub needs_approval: bool,
}

/// The daemon's answer to a `command` request, tagged by `action`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CommandDecision {
    /// Run this verb call instead of the command (the caller's mode is `rewrite`).
    Rewrite(VerbCall),
    /// Do not run the command; this verb call stands for it (the caller's mode is `advise`).
    Advise(VerbCall),
    /// Do not run the command: it needs a privilege the caller does not have and is no verb
    /// call. `reason` names the closest verb and what differs.
    Refuse { reason: String },
    /// No decision: the caller's own unprivileged work, or the caller's mode is `off`;
    /// `reason` says why it is no verb call (`verbd sh` refuses it with that).
    Pass {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A response, tagged by `status`. Every response also carries `"v"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Response {
    /// Output of a streaming verb as it comes, scrubbed (only to a caller that asked for
    /// `stream`); the last answer to the call follows.
    Chunk { stream: OutputStream, text: String },
    /// The verb ran (whatever its exit code).
    Ok {
        #[serde(flatten)]
        result: RunResult,
        /// Present when the run was an approved proposal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposal: Option<u64>,
    },
    /// An argument was refused; nothing ran. `message` is what the caller should read.
    Invalid {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        param: Option<String>,
        rule: String,
        message: String,
        /// Missing required parameters (`rule` is then `missing`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        missing: Vec<String>,
    },
    /// The caller may not do this; nothing ran.
    Denied { reason: String },
    /// A human must approve first. `message` begins with `CONFIRM_REQUIRED <id>`.
    ConfirmRequired {
        id: u64,
        hash: String,
        expires_at: String,
        message: String,
    },
    /// A limit on concurrent work was reached; nothing ran. Retry later.
    Busy { message: String },
    /// The daemon could not do what was asked; nothing ran unless the message says so.
    Error { message: String },
    /// Answer to `list`.
    Verbs { verbs: Vec<VerbInfo> },
    /// Answer to `check`: allowed or not, with the reason.
    Check { allowed: bool, reason: String },
    /// Answer to `command`.
    Command { decision: CommandDecision },
    /// Answer to `pending`, `result` and `wait`.
    Proposals { proposals: Vec<ProposalView> },
    /// Answer to `approve`/`deny`/`resolve` when no execution result is returned: the
    /// proposal's state after the request.
    Decided {
        id: u64,
        state: State,
        message: String,
    },
    /// Answer to `approve` when the approval is recorded but every execution slot is busy: the
    /// run waits for one (bounded, journaled) and `wait`/`result` show its outcome.
    Queued { id: u64, message: String },
    /// Answer to `reload` and `status`.
    Info { info: serde_json::Value },
}

impl Response {
    /// Serialize as one protocol line with `"v"` and the trailing newline.
    pub fn encode(&self) -> Vec<u8> {
        let mut value = serde_json::to_value(self).expect("responses always serialize");
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("v".into(), PROTOCOL_VERSION.into());
        }
        let mut line = serde_json::to_vec(&value).expect("values always serialize");
        line.push(b'\n');
        line
    }

    /// Decode one response line.
    pub fn decode(line: &[u8]) -> Result<Response, DecodeError> {
        let value: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| DecodeError::Json(e.to_string()))?;
        let serde_json::Value::Object(mut map) = value else {
            return Err(DecodeError::NotObject);
        };
        map.remove("v");
        serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| DecodeError::Shape(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_with_version() {
        let req = Request::Call {
            verb: "echo".into(),
            args: [("text".to_string(), serde_json::json!("hi"))].into(),
            reason: None,
            idempotency_key: None,
            stream: None,
        };
        let line = encode_request(&req);
        assert!(line.ends_with(b"\n"));
        assert_eq!(decode_request(&line).unwrap(), req);
    }

    #[test]
    fn identity_fields_are_refused() {
        let err = decode_request(br#"{"v":1,"op":"list","uid":0}"#).unwrap_err();
        assert!(matches!(err, DecodeError::Shape(_)), "{err:?}");
    }

    #[test]
    fn version_is_required_and_checked() {
        assert_eq!(
            decode_request(br#"{"op":"list"}"#),
            Err(DecodeError::MissingVersion)
        );
        assert_eq!(
            decode_request(br#"{"v":2,"op":"list"}"#),
            Err(DecodeError::UnsupportedVersion(2))
        );
    }
}
