//! The tamper-evident, append-only, forward-secure journal: every decision and result of the
//! daemon, fsync'd before the caller sees it, and the source of truth replayed at start
//! (proposals, idempotency keys). Nothing secret passes through here (callers guarantee it) and
//! event contents are never logged. The full design and its reasons are in docs/audit.md.
//!
//! # Files (all in the state directory, which must not be group/other writable)
//!
//! - `journal.jsonl` ([`JOURNAL_FILE`]): the live segment, mode 0600, opened `O_APPEND`.
//!   Closed segments are `journal-NNNNNN.jsonl`, numbered from 1. A segment closes when it
//!   reaches [`JournalConfig::segment_bytes`]; the chain, the sequence numbers and the epochs run
//!   on across segments, and every segment after the first begins with a `journal_segment`
//!   header record.
//! - `journal.sealkey` ([`SEAL_STATE_FILE`]): the current epoch key `K(e)`, two 128-byte slots
//!   overwritten in place (see `storage::SealStateFile`); the previous key is zeroed on disk and in
//!   memory when an epoch is sealed.
//! - `journal.sealkey.init` ([`SEAL_INIT_FILE`]): an initial key `K0` from `verbd audit
//!   setup-keys`, consumed (zeroed and removed) at the next start. The systemd credential
//!   `verbd-seal` ([`CREDENTIAL_NAME`]) is the alternative source.
//! - `journal.key` ([`KEY_FILE`]): only for journals without set-up keys: their `K0`, kept so
//!   `audit verify` can check every MAC on this host (which proves nothing against whoever can
//!   read the state directory; `verify` says so). It is also the static HMAC key of v1 journals.
//! - `journal.witness` ([`WITNESS_FILE`]): the published heads (see `witness`).
//! - `journal.checkpoint` ([`CHECKPOINT_FILE`]): where the last seal and the last state snapshot
//!   are, so a start reads one epoch, not the history. A hint: checked against the segment.
//! - `journal.gap-ack` ([`GAP_ACK_FILE`]): an operator's acknowledgement of lost records.
//!
//! # Record format
//!
//! Each line is exactly (no whitespace, `\n`-terminated):
//!
//! ```text
//! {"seq":N,"time":"T","prev":"P","epoch":K,"event":E,"mac":"H"}
//! ```
//!
//! - `seq`: 1 for the first record, +1 per record, across segments.
//! - `time`: RFC 3339 UTC with milliseconds, e.g. `2026-11-30T08:17:43.123Z`.
//! - `prev`: lowercase hex sha256 of the previous line's bytes without its newline; 64 zeros for
//!   seq 1.
//! - `epoch`: the key epoch the record was written in (0, 1, 2, … within a key generation).
//! - `event`: the caller's event, a JSON object (by convention with a `"kind"` field), written in
//!   canonical form: no whitespace, object keys sorted by UTF-8 bytes at every depth, strings and
//!   numbers as serde_json writes them, except that U+0085, U+2028 and U+2029 in a string are
//!   `\u` escapes (line breaks to some readers: a caller's text cannot cut an exported record in
//!   two); a record written before that, with them raw, is canonical in that legacy form. Kinds
//!   starting with `journal_` are the journal's own.
//! - `mac`: lowercase hex HMAC-SHA256 under `M(K)`, the MAC key of epoch `K` (see `keys`), over
//!   the *body*: the same line without `,"mac":"H"`.
//!
//! Journals written before forward-secure sealing (v1: `"hmac"` under the static `journal.key`,
//! no `epoch`) are migrated at the first start: the file is verified, closed as segment 1, and
//! the chain continues in segment 2.
//!
//! # Epochs and seals
//!
//! An epoch closes after `epoch_records` records or `epoch_seconds` seconds (defaults 1000 and
//! 900, chosen at `setup-keys`), at a segment rotation, at every start and at a clean stop: the
//! daemon appends `{"kind":"journal_seal","epoch":K,"first_seq":F,"records":R,"reason":…}`
//! (MAC'd with `M(K)`), then evolves the key. A verifier holding `K0` proves every sealed epoch;
//! without it, `verify` checks the chain, the epochs' order and the witness, and says what it
//! cannot prove.
//!
//! # Crashes and I/O errors
//!
//! [`Journal::append`] writes the whole line with one `O_APPEND` write and `fdatasync`s before
//! returning; then it publishes the new head. [`Journal::append_group`] writes several lines
//! and covers them all with one `fdatasync` before publishing any head or returning any result
//! ([`GroupCommit`] gathers concurrent appenders into such groups): a record is never reported,
//! published or applied before it is durable — except that [`GroupCommit::append_written`]
//! (advice nothing acts on) hears of its record once written, the group's fdatasync following
//! at once under the same lock; it is still published and applied only once durable. On any error it truncates the file back to the last
//! complete record, so the chain stays intact and a later append works once the cause (e.g.
//! ENOSPC) is gone; if even that truncation fails, appends are refused until it succeeds. A head
//! that could not be published is retried before the next append, which is refused while it
//! fails. A crash mid-write can leave an incomplete last line (no newline). Such a line was never
//! acknowledged to anyone, so [`Journal::open`] truncates it and appends a
//! `{"kind":"journal_tail_repaired","line":L,"bytes":B,"sha256":S}` record naming what was cut
//! (its size and hash, never its content). While a daemon holds the journal (an exclusive
//! `flock` on the state directory for the life of [`Journal`]), readers ignore an incomplete last
//! line: it is a write in progress. Every other damage is an error naming the segment, line and
//! seq; nothing is skipped silently.
#![forbid(unsafe_code)]

mod display;
mod follow;
mod group;
mod keys;
mod read;
mod record;
mod scan;
mod storage;
mod time;
mod witness;
mod writer;

use std::io;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

pub use display::format_record;
pub use follow::Follower;
pub use group::GroupCommit;
pub use keys::{DEFAULT_EPOCH_RECORDS, DEFAULT_EPOCH_SECONDS, VerifyKey};
pub use read::{
    Acknowledged, ExportSummary, Replay, SealingSummary, SetupKeys, Snapshot, VerifyOptions,
    VerifyReport, WitnessSummary, acknowledge_gap, export, replay, replay_from_snapshot,
    setup_keys, tail, verify,
};
pub use time::{format_rfc3339, parse_rfc3339};
pub use witness::{JOURNALD_SOCKET, Witness, WitnessProtection, message_id};
pub use writer::{Journal, JournalConfig, JournalStats, MIN_SNAPSHOT_BYTES};

use record::MAX_LINE_BYTES;

/// The live segment's name in the state directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// Closed segments are named this, then six or more digits, then `.jsonl`.
pub const ARCHIVE_PREFIX: &str = "journal-";
/// The local key (journals without set-up keys; v1 journals).
pub const KEY_FILE: &str = "journal.key";
/// The current sealing key state.
pub const SEAL_STATE_FILE: &str = "journal.sealkey";
/// An initial sealing key from `setup-keys`, waiting for the next start.
pub const SEAL_INIT_FILE: &str = "journal.sealkey.init";
/// The published heads.
pub const WITNESS_FILE: &str = "journal.witness";
/// Where the last seal and snapshot are.
pub const CHECKPOINT_FILE: &str = "journal.checkpoint";
/// An operator's acknowledgement of lost records, consumed at the next start.
pub const GAP_ACK_FILE: &str = "journal.gap-ack";
/// Files in the state directory that must stay root's when a root-started daemon hands the
/// directory to its user: the witness (so the daemon user cannot rewrite it) and an operator's
/// gap acknowledgement (so the daemon user cannot forge one).
pub const ROOT_OWNED_FILES: [&str; 2] = [WITNESS_FILE, GAP_ACK_FILE];
/// The systemd credential holding an initial sealing key.
pub const CREDENTIAL_NAME: &str = "verbd-seal";

/// Everything that can go wrong. Each message names the file and, where one exists, the fix.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal state directory {path} {reason}")]
    StateDir { path: PathBuf, reason: String },
    #[error("{what} {path}: {action} failed: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("journal key {path} {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("journal file {path} {reason}")]
    File { path: PathBuf, reason: String },
    #[error("no journal at {path} (has `verbd serve` run with this state directory?)")]
    Missing { path: PathBuf },
    #[error(
        "journal {path} is in use by another process (is another `verbd serve` running with this \
         state directory?)"
    )]
    Locked { path: PathBuf },
    #[error("journal checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    #[error("journal {path} failed verification: {}", summarize(.problems))]
    Integrity {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error(
        "journal {path} is missing {}: the last head published to the witness is seq {to} (hash \
         {hash}) but the journal ends at seq {end}. Records were cut off the end or an older copy \
         of the journal was put back. Not serving. Investigate (`verbd audit verify`); to serve \
         again with the gap on record, run `verbd audit acknowledge-gap --state-dir {dir} \
         --reason TEXT` as root",
        seq_range(*.from, *.to)
    )]
    MissingRecords {
        path: PathBuf,
        dir: PathBuf,
        from: u64,
        to: u64,
        end: u64,
        hash: String,
    },
    #[error(
        "journal witness {path} holds no heads, but the journal has records up to seq {end} \
         (hash {hash}): the witness was deleted or replaced, and records cut off the end with \
         it cannot be detected. Not serving. Restore the witness from a backup if there is one; \
         otherwise investigate (`verbd audit verify`) and, to serve again with the loss on \
         record, run `verbd audit acknowledge-gap --state-dir {dir} --reason TEXT` as root"
    )]
    WitnessLost {
        path: PathBuf,
        dir: PathBuf,
        end: u64,
        hash: String,
    },
    #[error(
        "journal {path} changed behind the daemon's back (expected {expected} bytes, found \
         {actual}); refusing to append: run `verbd audit verify` and restart the daemon"
    )]
    ModifiedExternally {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    #[error(
        "cannot append to journal {path}: {source}; the journal was rolled back to its last \
         complete record"
    )]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot append to journal {path}: {source}; rolling the partial record back also failed \
         ({rollback}), so appends are refused until a rollback succeeds"
    )]
    RollbackFailed {
        path: PathBuf,
        #[source]
        source: io::Error,
        rollback: io::Error,
    },
    #[error(
        "cannot publish the journal head to the witness {path}: {source}; appends are refused \
         until it can be written (the last record is durable)"
    )]
    Witness {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("journal event must serialize to a JSON object")]
    NotAnObject,
    #[error("journal event could not be serialized: {0}")]
    Serialize(#[source] serde_json::Error),
    #[error("journal record of {size} bytes exceeds the limit of {MAX_LINE_BYTES} bytes")]
    TooLarge { size: usize },
    #[error("journal snapshot at seq {seq} cannot be read back: {reason}")]
    Snapshot { seq: u64, reason: String },
    #[error("journal export to {path}: {source}")]
    Export {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl JournalError {
    /// The OS error behind a failed append or read (e.g. ENOSPC), if there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            JournalError::Io { source, .. }
            | JournalError::Write { source, .. }
            | JournalError::RollbackFailed { source, .. }
            | JournalError::Witness { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// "record seq N" or "records seq A to B".
fn seq_range(from: u64, to: u64) -> String {
    if from == to {
        format!("record seq {from}")
    } else {
        format!("records seq {from} to {to}")
    }
}

fn summarize(problems: &[Problem]) -> String {
    match problems {
        [] => "no details".to_owned(),
        [only] => only.to_string(),
        [first, rest @ ..] => format!(
            "{first} (and {} more problem(s); `verbd audit verify` lists them all)",
            rest.len()
        ),
    }
}

/// What kind of damage a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Not a well-formed record (invalid JSON, missing or mistyped field).
    BadJson,
    /// Same content as an authentic record but re-formatted (whitespace, key order, escapes).
    NotCanonical,
    /// The MAC does not match under the key of the record's own epoch: the record was edited,
    /// forged without the key, or re-made with another epoch's key.
    BadHmac,
    /// An authentic record whose `prev` is not the hash of the record before it.
    BrokenChain,
    /// Sequence numbers absent from the journal: records were deleted.
    MissingSeq,
    /// A seq seen twice, or lower than the line before it: records inserted or reordered.
    DuplicateOrOutOfOrder,
    /// An incomplete last line (no newline): a write interrupted by a crash.
    TornTail,
    /// The checkpoint file names a position the journal no longer matches.
    BadCheckpoint,
    /// Records published to the witness are missing from the end of the journal.
    Truncated,
    /// A record's published head differs from the record: rewritten after it was written.
    WitnessMismatch,
    /// The witness holds lines that are not heads, or goes backwards.
    WitnessDamaged,
    /// A segment file is missing, or does not begin with its header.
    MissingSegment,
    /// A record's epoch does not fit where it stands (epochs skipped, went backwards, or a
    /// record moved between epochs).
    EpochOrder,
    /// An epoch that ended without its seal, or (with a verification key) the open last epoch.
    Unsealed,
    /// A seal that does not describe its epoch.
    BadSeal,
    /// Records of a key generation no given key can check, when a key was required.
    NotProven,
}

/// One finding of [`verify`]. `line` is 1-based within segment `segment`; line 0 means the
/// finding is about the segment, the checkpoint or the witness rather than a line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub segment: u64,
    pub line: u64,
    pub seq: Option<u64>,
    pub kind: ProblemKind,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match (self.segment, self.line) {
            (_, 0) => String::new(),
            (0 | 1, line) => format!("line {line}"),
            (segment, line) => format!("segment {segment} line {line}"),
        };
        match (place.is_empty(), self.seq) {
            (true, _) => write!(f, "{}", self.message),
            (false, Some(seq)) => write!(f, "{place} (seq {seq}): {}", self.message),
            (false, None) => write!(f, "{place}: {}", self.message),
        }
    }
}

/// One verified record as read back from the journal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub seq: u64,
    pub time: String,
    pub prev: String,
    /// The key epoch (`None` for a v1 record).
    pub epoch: Option<u64>,
    pub event: Value,
    pub mac: String,
    /// The segment the record is in.
    pub segment: u64,
    /// 1-based line number in its segment file.
    pub line: u64,
    /// sha256 of the line (the next record's `prev`).
    pub hash: String,
}

/// What [`Journal::append`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    /// sha256 of the written line, hex.
    pub hash: String,
    /// The record's `time` field.
    pub time: String,
}
