//! The tamper-evident, append-only journal: every decision and result of the daemon, fsync'd
//! before the caller sees it, and the source of truth replayed at start (proposals, idempotency
//! keys). Nothing secret passes through here (callers guarantee it) and event contents are never
//! logged.
//!
//! # Files (all in the state directory, which must not be group/other writable)
//!
//! - `journal.jsonl` ([`JOURNAL_FILE`]): one record per line, mode 0600, opened `O_APPEND`.
//! - `journal.key` ([`KEY_FILE`]): 32 random bytes from `/dev/urandom`, mode 0600, created once
//!   (O_EXCL temporary file hard-linked into place, so it is complete or absent and never
//!   replaced). A key readable by group/other, or any file owned by another uid, is refused.
//! - `journal.checkpoint` ([`CHECKPOINT_FILE`]): the last verified position (see Checkpoints).
//!
//! # Record format
//!
//! Each line is exactly (no whitespace, `\n`-terminated):
//!
//! ```text
//! {"seq":N,"time":"T","prev":"P","event":E,"hmac":"H"}
//! ```
//!
//! - `seq`: 1 for the first record, +1 per record.
//! - `time`: RFC 3339 UTC with milliseconds, e.g. `2026-11-30T08:17:43.123Z`.
//! - `prev`: lowercase hex sha256 of the previous line's bytes without its newline; 64 zeros for
//!   seq 1.
//! - `event`: the caller's event, a JSON object (by convention with a `"kind"` field), written in
//!   canonical form: no whitespace, object keys sorted by UTF-8 bytes at every depth, strings and
//!   numbers as serde_json writes them.
//! - `hmac`: lowercase hex HMAC-SHA256, keyed with `journal.key`, over the *body*: the same line
//!   without `,"hmac":"H"`, i.e. `{"seq":N,"time":"T","prev":"P","event":E}`.
//!
//! A reader re-serializes every parsed line and requires the exact bytes back, so an edit is
//! caught even when it keeps the JSON meaning (`NotCanonical`) and every edit of content is caught
//! by the HMAC (`BadHmac`). [`Appended::hash`] and [`Record::hash`] are the sha256 of the line
//! (what the next record's `prev` holds), usable as a stable reference to a record.
//!
//! # Checkpoints
//!
//! `journal.checkpoint` holds one line `{"checkpoint":{"hash":..,"line":..,"offset":..,"seq":..,
//! "start":..},"hmac":..}`: record `seq` occupies bytes `start..offset` on line `line` and hashes
//! to `hash`; the HMAC (same key) covers `{"checkpoint":{..}}`. It is rewritten atomically at
//! [`Journal::open`] and every [`CHECKPOINT_INTERVAL`] appends. `open` (and [`tail`]) check that
//! the named line is still intact and the file still reaches it, then verify only the lines after
//! it, so start-up cost does not grow with the journal. [`verify`] and [`replay`] always check
//! every line and also report a checkpoint that the journal no longer matches (a truncated
//! journal). A missing checkpoint only means a full check at the next start; a checkpoint that
//! fails its HMAC or no longer matches is an error.
//!
//! # Crashes and I/O errors
//!
//! [`Journal::append`] writes the whole line with one `O_APPEND` write and `fdatasync`s before
//! returning. On any error it truncates the file back to the last complete record, so the chain
//! stays intact and a later append works once the cause (e.g. ENOSPC) is gone; if even that
//! truncation fails, appends are refused until it succeeds. A crash mid-write can leave an
//! incomplete last line (no newline). Such a line was never acknowledged to anyone, so
//! [`Journal::open`] truncates it and, as its first act, appends a
//! `{"kind":"journal_tail_repaired","line":L,"bytes":B,"sha256":S}` record naming what was cut
//! (its size and hash, never its content). Until then [`verify`] reports it as `TornTail` and
//! [`replay`]/[`tail`] refuse; call `open` before `replay` at start. While a daemon holds the
//! journal (an exclusive `flock` for the life of [`Journal`]), readers ignore an incomplete last
//! line: it is a write in progress. Every other damage is an error naming the line and seq;
//! nothing is skipped silently.
#![forbid(unsafe_code)]

mod display;
mod record;
mod scan;
mod storage;
mod time;

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Value, json};

pub use display::format_record;
pub use time::{format_rfc3339, parse_rfc3339};

use record::{JournalKey, MAX_LINE_BYTES, hex, record_body, seal, sha256};
use scan::{Keep, Position, Scan, anchor, scan};
use storage::{Access, read_checkpoint, read_key, write_checkpoint};

/// The journal file's name in the state directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// The HMAC key file's name in the state directory.
pub const KEY_FILE: &str = "journal.key";
/// The checkpoint side file's name in the state directory.
pub const CHECKPOINT_FILE: &str = "journal.checkpoint";
/// Appends between two checkpoints.
pub const CHECKPOINT_INTERVAL: u64 = 1000;

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
    #[error("journal event must serialize to a JSON object")]
    NotAnObject,
    #[error("journal event could not be serialized: {0}")]
    Serialize(#[source] serde_json::Error),
    #[error("journal record of {size} bytes exceeds the limit of {MAX_LINE_BYTES} bytes")]
    TooLarge { size: usize },
}

impl JournalError {
    /// The OS error behind a failed append or read (e.g. ENOSPC), if there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            JournalError::Io { source, .. }
            | JournalError::Write { source, .. }
            | JournalError::RollbackFailed { source, .. } => Some(source),
            _ => None,
        }
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
    /// The HMAC does not match: the record was edited, or forged without the key.
    BadHmac,
    /// An authentic record whose `prev` is not the hash of the record before it.
    BrokenChain,
    /// Sequence numbers absent from the journal: records were deleted.
    MissingSeq,
    /// A seq seen twice, or lower than the line before it: records inserted or reordered.
    DuplicateOrOutOfOrder,
    /// An incomplete last line (no newline): a write interrupted by a crash.
    TornTail,
    /// The checkpoint side file fails its HMAC or names a line that changed.
    BadCheckpoint,
    /// The journal ends before a record the checkpoint saw: records were cut off the end.
    Truncated,
}

/// One finding of [`verify`]. `line` is 1-based; 0 means the finding is about the checkpoint
/// file rather than a line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub line: u64,
    pub seq: Option<u64>,
    pub kind: ProblemKind,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.seq) {
            (0, _) => write!(f, "checkpoint: {}", self.message),
            (line, Some(seq)) => write!(f, "line {line} (seq {seq}): {}", self.message),
            (line, None) => write!(f, "line {line}: {}", self.message),
        }
    }
}

/// The outcome of [`verify`]: how many lines were read and everything wrong with them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub records: u64,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One verified record as read back from the journal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub seq: u64,
    pub time: String,
    pub prev: String,
    pub event: Value,
    pub hmac: String,
    /// 1-based line number in the journal file.
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

/// The daemon's handle on the journal: the only writer (enforced with an exclusive `flock`).
/// Not shared by itself; the daemon wraps it in a `Mutex`.
pub struct Journal {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    key: JournalKey,
    /// Last complete record: its seq, line, hash and byte range.
    end: Position,
    appends_since_checkpoint: u64,
    /// A failed append could not be rolled back; the file may hold a partial line past `end`.
    rollback_pending: bool,
}

impl Journal {
    /// Opens (creating on first start) the journal in `state_dir`, verifies it from the last
    /// checkpoint to the end, repairs an incomplete last line (see the module docs) and writes a
    /// fresh checkpoint.
    pub fn open(state_dir: &Path) -> Result<Journal, JournalError> {
        storage::prepare_state_dir(state_dir, Access::Writer)?;
        let path = state_dir.join(JOURNAL_FILE);
        let file = storage::open_for_append(&path)?;
        storage::lock_exclusive(&file, &path)?;
        let length = file
            .metadata()
            .map_err(|source| JournalError::Io {
                what: "journal file",
                path: path.clone(),
                action: "stat",
                source,
            })?
            .len();
        let key = match read_key(state_dir, Access::Writer)? {
            Some(key) => key,
            None if length == 0 => storage::create_key(state_dir)?,
            None => {
                return Err(JournalError::Key {
                    path: state_dir.join(KEY_FILE),
                    reason: format!(
                        "is missing but {} holds records that only it can verify; restore the key \
                         from backup (or move the journal aside to start a new one)",
                        path.display()
                    ),
                });
            }
        };
        let checkpoint_path = state_dir.join(CHECKPOINT_FILE);
        let start = match read_checkpoint(state_dir, &key)? {
            Some(checkpoint) => anchor(&file, &path, &checkpoint_path, &checkpoint)?,
            None => Position::ORIGIN,
        };
        let scanned = scan(&file, &path, start, &key, Keep::Last(0))?;
        if !scanned.problems.is_empty() {
            return Err(JournalError::Integrity {
                path,
                problems: scanned.problems,
            });
        }
        let mut journal = Journal {
            dir: state_dir.to_owned(),
            path,
            file,
            key,
            end: scanned.end,
            appends_since_checkpoint: 0,
            rollback_pending: false,
        };
        if let Some(torn) = scanned.torn {
            journal.roll_back().map_err(|source| JournalError::Io {
                what: "journal file",
                path: journal.path.clone(),
                action: "truncate the incomplete last line",
                source,
            })?;
            journal.append(&json!({
                "kind": "journal_tail_repaired",
                "line": torn.line,
                "bytes": torn.bytes,
                "sha256": hex(&torn.sha256),
            }))?;
        }
        if journal.end.seq > 0 && journal.end.offset != start.offset {
            journal.write_checkpoint();
        }
        Ok(journal)
    }

    /// Appends one record (see the module docs for its format) and fdatasyncs before returning.
    /// On any I/O error the file is truncated back to the last complete record, seq and prev stay
    /// unchanged, and the error is returned; a later append works once the cause is gone.
    pub fn append<E: Serialize>(&mut self, event: &E) -> Result<Appended, JournalError> {
        if self.rollback_pending {
            self.roll_back().map_err(|source| JournalError::Io {
                what: "journal file",
                path: self.path.clone(),
                action: "roll back an earlier partial record",
                source,
            })?;
        }
        let actual = self
            .file
            .metadata()
            .map_err(|source| JournalError::Io {
                what: "journal file",
                path: self.path.clone(),
                action: "stat",
                source,
            })?
            .len();
        if actual != self.end.offset {
            return Err(JournalError::ModifiedExternally {
                path: self.path.clone(),
                expected: self.end.offset,
                actual,
            });
        }
        let Value::Object(event) = serde_json::to_value(event).map_err(JournalError::Serialize)?
        else {
            return Err(JournalError::NotAnObject);
        };

        let seq = self.end.seq + 1;
        let time = format_rfc3339(SystemTime::now());
        let body = record_body(seq, &time, &hex(&self.end.hash), &event);
        let line = seal(&body, &self.key.tag(body.as_bytes()));
        if line.len() + 1 > MAX_LINE_BYTES {
            return Err(JournalError::TooLarge {
                size: line.len() + 1,
            });
        }
        let mut bytes = line.into_bytes();
        let hash = sha256(&bytes);
        bytes.push(b'\n');

        let written = (&self.file)
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data());
        if let Err(source) = written {
            return Err(match self.roll_back() {
                Ok(()) => JournalError::Write {
                    path: self.path.clone(),
                    source,
                },
                Err(rollback) => {
                    self.rollback_pending = true;
                    JournalError::RollbackFailed {
                        path: self.path.clone(),
                        source,
                        rollback,
                    }
                }
            });
        }
        self.end = Position {
            offset: self.end.offset + bytes.len() as u64,
            line: self.end.line + 1,
            seq,
            hash,
            last_start: self.end.offset,
        };
        self.appends_since_checkpoint += 1;
        if self.appends_since_checkpoint >= CHECKPOINT_INTERVAL {
            self.write_checkpoint();
        }
        Ok(Appended {
            seq,
            hash: hex(&hash),
            time,
        })
    }

    /// The journal file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Truncates the file to the end of the last complete record and makes that durable.
    fn roll_back(&mut self) -> io::Result<()> {
        self.file.set_len(self.end.offset)?;
        self.file.sync_data()?;
        self.rollback_pending = false;
        Ok(())
    }

    /// Records the current end as the checkpoint. A failure costs only start-up time (the next
    /// start verifies more), never a record, so it is logged and retried at the next append.
    fn write_checkpoint(&mut self) {
        match write_checkpoint(&self.dir, &self.key, &self.end.checkpoint()) {
            Ok(()) => self.appends_since_checkpoint = 0,
            Err(error) => tracing::warn!(%error, "journal checkpoint not written; will retry"),
        }
    }
}

/// An opened journal for reading: state directory checked, key loaded.
struct Reader {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    key: JournalKey,
}

impl Reader {
    fn open(state_dir: &Path) -> Result<Reader, JournalError> {
        storage::prepare_state_dir(state_dir, Access::Reader)?;
        let path = state_dir.join(JOURNAL_FILE);
        let file = storage::open_for_reading(&path)?
            .ok_or_else(|| JournalError::Missing { path: path.clone() })?;
        let key = read_key(state_dir, Access::Reader)?.ok_or_else(|| JournalError::Key {
            path: state_dir.join(KEY_FILE),
            reason: "is missing, so the journal cannot be verified; restore it from backup"
                .to_owned(),
        })?;
        Ok(Reader {
            dir: state_dir.to_owned(),
            path,
            file,
            key,
        })
    }

    /// Checks every line, plus the checkpoint and the tail, and returns the scan with all
    /// problems (an incomplete last line counts unless a daemon is writing it right now).
    fn full_scan(&self, keep: Keep) -> Result<Scan, JournalError> {
        let mut scanned = scan(&self.file, &self.path, Position::ORIGIN, &self.key, keep)?;
        if let Some(torn) = scanned.torn
            && !storage::daemon_holds_lock(&self.file)
        {
            scanned.problems.push(Problem {
                line: torn.line,
                seq: None,
                kind: ProblemKind::TornTail,
                message: format!(
                    "incomplete last line of {} bytes (a write interrupted by a crash); the next \
                     `verbd serve` start truncates it and journals the repair",
                    torn.bytes
                ),
            });
        }
        if let Some(problem) = self.check_checkpoint(&scanned) {
            scanned.problems.push(problem);
        }
        Ok(scanned)
    }

    fn check_checkpoint(&self, scanned: &Scan) -> Option<Problem> {
        let checkpoint = match read_checkpoint(&self.dir, &self.key) {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => return None,
            Err(error) => {
                return Some(Problem {
                    line: 0,
                    seq: None,
                    kind: ProblemKind::BadCheckpoint,
                    message: error.to_string(),
                });
            }
        };
        match scanned.authentic.get(&checkpoint.seq) {
            Some(&(line, hash)) if line == checkpoint.line && hash == checkpoint.hash => None,
            Some(&(line, _)) => Some(Problem {
                line,
                seq: Some(checkpoint.seq),
                kind: ProblemKind::BadCheckpoint,
                message: format!(
                    "the checkpoint recorded seq {} at line {} with hash {}, which this line no \
                     longer matches: the journal was rewritten",
                    checkpoint.seq,
                    checkpoint.line,
                    hex(&checkpoint.hash)
                ),
            }),
            None if scanned.highest_seq() < checkpoint.seq => Some(Problem {
                line: scanned.end.line + 1,
                seq: Some(checkpoint.seq),
                kind: ProblemKind::Truncated,
                message: format!(
                    "the journal ends at seq {} but the checkpoint saw seq {} at line {}: records \
                     were cut off the end",
                    scanned.highest_seq(),
                    checkpoint.seq,
                    checkpoint.line
                ),
            }),
            // The checkpointed record is absent in the middle: already reported as missing.
            None => None,
        }
    }
}

/// Full verified replay, for rebuilding state at start (after [`Journal::open`], which repairs an
/// incomplete last line): every record in order. Any problem is an error naming line and seq.
pub fn replay(state_dir: &Path) -> Result<Vec<Record>, JournalError> {
    let reader = Reader::open(state_dir)?;
    let scanned = reader.full_scan(Keep::All)?;
    if !scanned.problems.is_empty() {
        return Err(JournalError::Integrity {
            path: reader.path,
            problems: scanned.problems,
        });
    }
    Ok(scanned.records.into())
}

/// Checks every record and reports each edited, deleted, inserted, reordered or re-formatted
/// record by line and seq (see `scan` for how findings are classified). `Err` only when the
/// journal cannot be read at all (missing, unreadable, bad permissions).
pub fn verify(state_dir: &Path) -> Result<VerifyReport, JournalError> {
    let reader = Reader::open(state_dir)?;
    let scanned = reader.full_scan(Keep::Last(0))?;
    Ok(VerifyReport {
        records: scanned.lines,
        problems: scanned.problems,
    })
}

/// The last `n` records, verified: the lines since the checkpoint are checked as at start-up;
/// when they are fewer than `n`, the whole journal is. Any problem is an error.
pub fn tail(state_dir: &Path, n: usize) -> Result<Vec<Record>, JournalError> {
    let reader = Reader::open(state_dir)?;
    let checkpoint_path = state_dir.join(CHECKPOINT_FILE);
    if let Some(checkpoint) = read_checkpoint(state_dir, &reader.key)? {
        let start = anchor(&reader.file, &reader.path, &checkpoint_path, &checkpoint)?;
        let scanned = scan(
            &reader.file,
            &reader.path,
            start,
            &reader.key,
            Keep::Last(n),
        )?;
        let torn_is_crash = scanned.torn.is_some() && !storage::daemon_holds_lock(&reader.file);
        if scanned.problems.is_empty() && !torn_is_crash && scanned.records.len() >= n {
            return Ok(scanned.records.into());
        }
    }
    let scanned = reader.full_scan(Keep::Last(n))?;
    if !scanned.problems.is_empty() {
        return Err(JournalError::Integrity {
            path: reader.path,
            problems: scanned.problems,
        });
    }
    Ok(scanned.records.into())
}
