//! Reading the journal back: one pass over the lines from a verified starting position, checking
//! each line (shape, canonical form, HMAC) and then the relations between authentic records
//! (sequence numbers and hash chain), so that every edit, deletion, insertion and reordering is
//! named by line and seq. Classification rules:
//!
//! - A line that fails to parse, is not canonical or fails its HMAC is reported once
//!   (`BadJson`, `NotCanonical`, `BadHmac`) and takes no part in the relation checks: a chain
//!   break it causes in its successor is a consequence, not a second finding.
//! - Among authentic records, a seq seen before is a duplicate; a seq lower than the previous
//!   authentic line's is a reordering (a swap of two records is one finding, on the second line).
//! - Seqs absent from every line (authentic or claimed by a faulty line) are deleted records,
//!   reported as one `MissingSeq` per gap on the line where the gap ends.
//! - Each authentic record's `prev` must be the hash of the authentic record with the seq before
//!   it, wherever that record sits; a mismatch is `BrokenChain`.
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::record::{JournalKey, MAX_LINE_BYTES, ZERO_HASH, check_line, hex, sha256};
use super::storage::Checkpoint;
use super::{JournalError, Problem, ProblemKind, Record};

/// A verified position: everything before `offset` (a line boundary) has been checked.
#[derive(Clone, Copy, Debug)]
pub(super) struct Position {
    /// Byte offset just after the last complete line.
    pub(super) offset: u64,
    /// Number of lines before `offset`.
    pub(super) line: u64,
    /// Seq of the last record before `offset` (0 when there is none).
    pub(super) seq: u64,
    /// sha256 of the last line before `offset` (all zero when there is none).
    pub(super) hash: [u8; 32],
    /// Byte offset where that last line starts.
    pub(super) last_start: u64,
}

impl Position {
    pub(super) const ORIGIN: Position = Position {
        offset: 0,
        line: 0,
        seq: 0,
        hash: ZERO_HASH,
        last_start: 0,
    };

    pub(super) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            seq: self.seq,
            line: self.line,
            start: self.last_start,
            offset: self.offset,
            hash: self.hash,
        }
    }
}

/// Bytes after the last newline: a write that never completed.
#[derive(Clone, Copy, Debug)]
pub(super) struct TornTail {
    pub(super) line: u64,
    pub(super) bytes: u64,
    pub(super) sha256: [u8; 32],
}

/// How many verified records a scan hands back.
#[derive(Clone, Copy)]
pub(super) enum Keep {
    All,
    Last(usize),
}

pub(super) struct Scan {
    pub(super) records: VecDeque<Record>,
    /// Complete lines read by this scan.
    pub(super) lines: u64,
    pub(super) problems: Vec<Problem>,
    /// Position after the last complete line; its seq and hash are the last line's when that
    /// line is authentic (always the case when `problems` is empty).
    pub(super) end: Position,
    pub(super) torn: Option<TornTail>,
    /// First authentic occurrence of each seq: (line, hash).
    pub(super) authentic: HashMap<u64, (u64, [u8; 32])>,
}

impl Scan {
    pub(super) fn highest_seq(&self) -> u64 {
        self.authentic.keys().copied().max().unwrap_or(0)
    }
}

/// `Read` over a file at an explicit position (pread), leaving the file's own offset alone.
struct PositionedReader<'a> {
    file: &'a File,
    position: u64,
}

impl Read for PositionedReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let count = self.file.read_at(buffer, self.position)?;
        self.position += count as u64;
        Ok(count)
    }
}

struct AuthenticEntry {
    line: u64,
    seq: u64,
    prev: [u8; 32],
}

/// Scans `file` from the verified position `start` to its current end.
pub(super) fn scan(
    file: &File,
    path: &Path,
    start: Position,
    key: &JournalKey,
    keep: Keep,
) -> Result<Scan, JournalError> {
    let read_error = |source: io::Error| JournalError::Io {
        what: "journal file",
        path: path.to_owned(),
        action: "read",
        source,
    };
    let length = file.metadata().map_err(read_error)?.len();
    let mut reader = BufReader::with_capacity(
        256 * 1024,
        PositionedReader {
            file,
            position: start.offset,
        }
        .take(length.saturating_sub(start.offset)),
    );

    let mut scan = Scan {
        records: VecDeque::new(),
        lines: 0,
        problems: Vec::new(),
        end: start,
        torn: None,
        authentic: HashMap::new(),
    };
    let mut entries: Vec<AuthenticEntry> = Vec::new();
    let mut claimed_by_faulty: Vec<(u64, u64)> = Vec::new();
    let mut previous_authentic: Option<(u64, u64)> =
        (start.seq > 0).then_some((start.line, start.seq));
    let mut buffer = Vec::new();

    loop {
        buffer.clear();
        let count = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .map_err(read_error)?;
        if count == 0 {
            break;
        }
        let line = scan.end.line + 1;
        if buffer.last() != Some(&b'\n') {
            if count > MAX_LINE_BYTES {
                scan.problems.push(Problem {
                    line,
                    seq: None,
                    kind: ProblemKind::BadJson,
                    message: format!(
                        "line is longer than {MAX_LINE_BYTES} bytes; the journal never writes \
                         such a line, so the rest of the file was not examined"
                    ),
                });
            } else {
                scan.torn = Some(TornTail {
                    line,
                    bytes: count as u64,
                    sha256: sha256(&buffer),
                });
            }
            break;
        }
        let content = &buffer[..count - 1];
        let hash = sha256(content);
        scan.lines += 1;
        match check_line(content, line, key) {
            Ok(checked) => {
                let seq = checked.record.seq;
                scan.end.seq = seq;
                if let Some((first_line, _)) = scan.authentic.get(&seq) {
                    scan.problems.push(Problem {
                        line,
                        seq: Some(seq),
                        kind: ProblemKind::DuplicateOrOutOfOrder,
                        message: format!(
                            "record seq {seq} also appears at line {first_line}: a copy was \
                             inserted (duplicate)"
                        ),
                    });
                } else {
                    if seq <= start.seq {
                        scan.problems.push(Problem {
                            line,
                            seq: Some(seq),
                            kind: ProblemKind::DuplicateOrOutOfOrder,
                            message: format!(
                                "record seq {seq} comes after the checkpointed record seq {} \
                                 (line {}): records were reordered or re-inserted",
                                start.seq, start.line
                            ),
                        });
                    } else if let Some((previous_line, previous_seq)) = previous_authentic
                        && seq < previous_seq
                    {
                        scan.problems.push(Problem {
                            line,
                            seq: Some(seq),
                            kind: ProblemKind::DuplicateOrOutOfOrder,
                            message: format!(
                                "record seq {seq} comes after record seq {previous_seq} \
                                 (line {previous_line}): records were reordered"
                            ),
                        });
                    }
                    scan.authentic.insert(seq, (line, hash));
                    entries.push(AuthenticEntry {
                        line,
                        seq,
                        prev: checked.prev,
                    });
                }
                previous_authentic = Some((line, seq));
                match keep {
                    Keep::All => scan.records.push_back(checked.record),
                    Keep::Last(0) => {}
                    Keep::Last(limit) => {
                        if scan.records.len() == limit {
                            scan.records.pop_front();
                        }
                        scan.records.push_back(checked.record);
                    }
                }
            }
            Err(fault) => {
                if let Some(seq) = fault.seq {
                    claimed_by_faulty.push((seq, line));
                }
                scan.problems.push(Problem {
                    line,
                    seq: fault.seq,
                    kind: fault.kind,
                    message: fault.message,
                });
            }
        }
        scan.end.last_start = scan.end.offset;
        scan.end.offset += count as u64;
        scan.end.line = line;
        scan.end.hash = hash;
    }

    let chain_problems = check_chain(&scan, &entries, &start);
    scan.problems.extend(chain_problems);
    let missing = find_missing(&scan, &claimed_by_faulty, &start);
    scan.problems.extend(missing);
    scan.problems.sort_by_key(|problem| problem.line);
    Ok(scan)
}

fn check_chain(scan: &Scan, entries: &[AuthenticEntry], start: &Position) -> Vec<Problem> {
    let mut problems = Vec::new();
    for entry in entries {
        let expected = if entry.seq == start.seq + 1 {
            Some((start.line, start.hash))
        } else {
            entry
                .seq
                .checked_sub(1)
                .and_then(|previous| scan.authentic.get(&previous).copied())
        };
        if let Some((previous_line, previous_hash)) = expected
            && previous_hash != entry.prev
        {
            let predecessor = if previous_line == 0 {
                "the start of the journal (all zeros)".to_owned()
            } else {
                format!(
                    "record seq {} at line {previous_line} ({})",
                    entry.seq - 1,
                    hex(&previous_hash)
                )
            };
            problems.push(Problem {
                line: entry.line,
                seq: Some(entry.seq),
                kind: ProblemKind::BrokenChain,
                message: format!(
                    "record seq {} does not chain to {predecessor}: its prev is {}",
                    entry.seq,
                    hex(&entry.prev)
                ),
            });
        }
    }
    problems
}

fn find_missing(scan: &Scan, claimed_by_faulty: &[(u64, u64)], start: &Position) -> Vec<Problem> {
    let highest = scan.highest_seq();
    let mut accounted: Vec<(u64, u64)> = scan
        .authentic
        .iter()
        .map(|(seq, (line, _))| (*seq, *line))
        .chain(claimed_by_faulty.iter().copied())
        .filter(|(seq, _)| *seq > start.seq && *seq <= highest)
        .collect();
    accounted.sort_unstable();
    accounted.dedup_by_key(|(seq, _)| *seq);

    let mut problems = Vec::new();
    let mut expected = start.seq + 1;
    for (seq, line) in accounted {
        if seq > expected {
            let range = if seq - expected == 1 {
                format!("record seq {expected} is")
            } else {
                format!("records seq {expected} to {} are", seq - 1)
            };
            problems.push(Problem {
                line,
                seq: Some(expected),
                kind: ProblemKind::MissingSeq,
                message: format!("{range} missing before record seq {seq} (deleted)"),
            });
        }
        expected = seq + 1;
    }
    problems
}

/// Checks that the checkpoint still describes the journal: the line it names is intact and the
/// file still reaches it. Returns the position just after that line.
pub(super) fn anchor(
    file: &File,
    path: &Path,
    checkpoint_path: &Path,
    checkpoint: &Checkpoint,
) -> Result<Position, JournalError> {
    let read_error = |source: io::Error| JournalError::Io {
        what: "journal file",
        path: path.to_owned(),
        action: "read",
        source,
    };
    let length = file.metadata().map_err(read_error)?.len();
    let damaged = |reason: String| JournalError::Checkpoint {
        path: checkpoint_path.to_owned(),
        reason: format!(
            "{reason}. Run `verbd audit verify` to see what changed; the daemon refuses to start \
             on a journal that lost or changed records"
        ),
    };
    if length < checkpoint.offset {
        return Err(damaged(format!(
            "records seq {} (line {}) and earlier ended at byte {}, but the journal is now {length} \
             bytes: records were removed",
            checkpoint.seq, checkpoint.line, checkpoint.offset
        )));
    }
    let span = usize::try_from(checkpoint.offset - checkpoint.start)
        .ok()
        .filter(|span| *span <= MAX_LINE_BYTES + 1)
        .ok_or_else(|| damaged("describes a line longer than any record".to_owned()))?;
    let mut line = vec![0u8; span];
    file.read_exact_at(&mut line, checkpoint.start)
        .map_err(read_error)?;
    if line.pop() != Some(b'\n') || sha256(&line) != checkpoint.hash {
        return Err(damaged(format!(
            "line {} (record seq {}) no longer matches the checkpoint: it was altered or the \
             journal was rewritten",
            checkpoint.line, checkpoint.seq
        )));
    }
    Ok(Position {
        offset: checkpoint.offset,
        line: checkpoint.line,
        seq: checkpoint.seq,
        hash: checkpoint.hash,
        last_start: checkpoint.start,
    })
}
