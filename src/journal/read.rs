//! Reading the journal without writing it: streaming replay (from the latest state snapshot),
//! full verification with or without the operator's verification key, the last records for
//! `audit tail`, export of exact lines, and the two operator actions that prepare a start
//! (`setup-keys`, `acknowledge-gap`).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::marker::PhantomData;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys::{Custody, EpochKey, EpochLimits, VerifyKey};
use super::record::{hex, parse_line, peek_seq};
use super::scan::{Checker, KeyRing, KeySource, Origin, SegmentReader, witness_lines};
use super::storage::{self, Access, Mark, SegmentFile};
use super::witness::{WitnessProtection, WitnessStream};
use super::{
    GAP_ACK_FILE, JournalError, Problem, ProblemKind, Record, SEAL_INIT_FILE, WITNESS_FILE,
    format_rfc3339,
};

/// The decoded state snapshot a replay starts from.
#[derive(Clone, Debug)]
pub struct Snapshot<S> {
    pub seq: u64,
    pub time: String,
    pub state: S,
}

/// A streaming replay: the snapshot (if any), then the caller's records after it, in order,
/// each one checked (chain, sequence, and MACs where a key is at hand) as it is read. The
/// journal's own records (`journal_*` kinds) are not yielded. Iteration stops at the first
/// problem; [`Replay::finish`] returns it.
pub struct Replay<S> {
    pub snapshot: Option<Snapshot<S>>,
    reader: SegmentReader,
    checker: Checker,
    error: Option<JournalError>,
    done: bool,
    dir: PathBuf,
    torn_allowed: bool,
    first: bool,
    mid_file: bool,
    _state: PhantomData<S>,
}

/// The keys a reader on this host can use: `journal.key` (local generations, v1 lines) and the
/// daemon's current key (its open epoch), when readable.
pub(super) fn host_keys(dir: &Path) -> Result<KeyRing, JournalError> {
    let mut keys = KeyRing::default();
    if let Some(key) = storage::read_key(dir, Access::Reader)? {
        keys.add_local(&key);
    }
    if let Ok(Some(slot)) = storage::read_seal_state(dir) {
        keys.set_live(slot);
    }
    Ok(keys)
}

impl<S: DeserializeOwned> Replay<S> {
    pub(super) fn open(
        dir: &Path,
        snapshot: Option<Mark>,
        daemon: bool,
    ) -> Result<Replay<S>, JournalError> {
        storage::prepare_state_dir(dir, Access::Reader)?;
        let segments = storage::list_segments(dir)?;
        if segments.is_empty() {
            return Err(JournalError::Missing {
                path: dir.join(super::JOURNAL_FILE),
            });
        }
        let keys = host_keys(dir)?;
        let torn_allowed = daemon || storage::daemon_holds_lock(dir);
        let (checker, reader, snapshot, mid_file) = match snapshot {
            Some(mark) => {
                let index = segments
                    .iter()
                    .position(|segment| segment.number == mark.segment)
                    .ok_or(JournalError::Snapshot {
                        seq: mark.seq,
                        reason: format!("its segment {} is missing", mark.segment),
                    })?;
                let segment = &segments[index];
                let file = storage::open_for_reading(&segment.path)?.ok_or_else(|| {
                    JournalError::Missing {
                        path: segment.path.clone(),
                    }
                })?;
                super::scan::check_mark(&file, &segment.path, &mark).map_err(|reason| {
                    JournalError::Snapshot {
                        seq: mark.seq,
                        reason,
                    }
                })?;
                let mut line = vec![0u8; (mark.end - mark.start) as usize];
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut line, mark.start).map_err(
                    |source| JournalError::Io {
                        what: "journal file",
                        path: segment.path.clone(),
                        action: "read",
                        source,
                    },
                )?;
                line.pop();
                let parsed = parse_line(&line, mark.segment, mark.line).map_err(|fault| {
                    JournalError::Snapshot {
                        seq: mark.seq,
                        reason: fault.message,
                    }
                })?;
                let mut event = parsed.record.event;
                let state = serde_json::from_value(event["state"].take()).map_err(|error| {
                    JournalError::Snapshot {
                        seq: mark.seq,
                        reason: error.to_string(),
                    }
                })?;
                let snapshot = Snapshot {
                    seq: mark.seq,
                    time: parsed.record.time,
                    state,
                };
                let checker = Checker::new(
                    keys,
                    Origin::After {
                        seq: mark.seq,
                        hash: mark.hash,
                    },
                    false,
                );
                let reader = SegmentReader::new(segments[index..].to_vec(), mark.end, mark.line);
                (checker, reader, Some(snapshot), true)
            }
            None => (
                Checker::new(keys, Origin::Beginning, false),
                SegmentReader::new(segments, 0, 0),
                None,
                false,
            ),
        };
        Ok(Replay {
            snapshot,
            reader,
            checker,
            error: None,
            done: false,
            dir: dir.to_owned(),
            torn_allowed,
            first: true,
            mid_file,
            _state: PhantomData,
        })
    }
}

impl<S> Replay<S> {
    fn fail(&mut self, error: JournalError) -> Option<Record> {
        self.error = Some(error);
        self.done = true;
        None
    }

    fn integrity(&mut self) -> Option<Record> {
        let problems = std::mem::take(&mut self.checker.problems);
        self.fail(JournalError::Integrity {
            path: self.dir.join(super::JOURNAL_FILE),
            problems,
        })
    }

    /// The first problem met, if any. Call it after the iteration.
    pub fn finish(self) -> Result<(), JournalError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Every remaining record, or the first problem.
    pub fn into_records(mut self) -> Result<Vec<Record>, JournalError> {
        let records: Vec<Record> = self.by_ref().collect();
        self.finish().map(|()| records)
    }
}

impl<S> Iterator for Replay<S> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        while !self.done {
            let line = match self.reader.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.done = true;
                    self.checker.finish();
                    if let Some((_, torn, _)) = self.reader.torn
                        && !self.torn_allowed
                    {
                        self.checker.problems.push(torn_problem(&torn));
                    }
                    if !self.checker.problems.is_empty() {
                        return self.integrity();
                    }
                    return None;
                }
                Err(error) => return self.fail(error),
            };
            if let Some(segment) = &line.opens_segment {
                self.checker
                    .begin_segment(segment, self.first && self.mid_file);
                self.first = false;
            }
            let parsed = self
                .checker
                .feed(&line.bytes, line.location, line.start, line.end);
            if !self.checker.problems.is_empty() {
                return self.integrity();
            }
            if let Some(parsed) = parsed
                && !parsed.kind().starts_with("journal_")
            {
                return Some(parsed.record);
            }
        }
        None
    }
}

pub(super) fn torn_problem(torn: &super::scan::TornTail) -> Problem {
    Problem {
        segment: 0,
        line: torn.line,
        seq: None,
        kind: ProblemKind::TornTail,
        message: format!(
            "incomplete last line of {} bytes (a write interrupted by a crash); the next `verbd \
             serve` start truncates it and journals the repair",
            torn.bytes
        ),
    }
}

/// Streams every record of the journal in `state_dir` from the beginning (see [`Replay`]).
pub fn replay(state_dir: &Path) -> Result<Replay<Value>, JournalError> {
    Replay::open(state_dir, None, false)
}

/// Streams the journal in `state_dir` from its latest state snapshot, decoded as `S` (from the
/// beginning when there is none), as the daemon does at start; without writing anything.
pub fn replay_from_snapshot<S: DeserializeOwned>(
    state_dir: &Path,
) -> Result<Replay<S>, JournalError> {
    let hints = storage::read_hints(state_dir)?;
    Replay::open(state_dir, hints.snapshot, false)
}

/// What to verify and with which keys.
pub struct VerifyOptions {
    /// A state directory: every segment, and its witness.
    pub state_dir: Option<PathBuf>,
    /// An exported file (`verbd audit export`), checked on its own.
    pub file: Option<PathBuf>,
    /// Verification keys printed by `setup-keys`.
    pub verify_keys: Vec<VerifyKey>,
    /// A witness file to compare with (default: the state directory's).
    pub witness: Option<PathBuf>,
}

impl VerifyOptions {
    /// Everything in `state_dir` with the keys found on this host.
    pub fn for_state_dir(state_dir: &Path) -> VerifyOptions {
        VerifyOptions {
            state_dir: Some(state_dir.to_owned()),
            file: None,
            verify_keys: Vec::new(),
            witness: None,
        }
    }
}

/// What was proven about the keys and seals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SealingSummary {
    /// Key generations met: fingerprint and custody (`local`, `setup-keys`, `credential`).
    pub generations: Vec<(String, String)>,
    pub sealed_epochs: u64,
    /// Records whose MAC and epoch seal verified under a `--verify-key`.
    pub proven_with_verify_key: u64,
    /// Records whose MAC and seal verified under `journal.key` (no forward security).
    pub proven_with_local_key: u64,
    /// v1 records verified with `journal.key`.
    pub legacy_verified: u64,
    /// Records no key at hand could check.
    pub unproven: u64,
    /// Records with a valid MAC in an epoch not sealed (yet).
    pub unsealed: u64,
}

/// What the witness comparison found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WitnessSummary {
    pub path: PathBuf,
    pub protection: WitnessProtection,
    pub heads: u64,
    pub matched: u64,
    pub last_published_seq: Option<u64>,
    /// Records with no published head (written before the witness existed, or after its last
    /// head).
    pub unwitnessed: u64,
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Complete lines read.
    pub records: u64,
    pub segments: u64,
    pub first_seq: Option<u64>,
    pub last_seq: u64,
    pub problems: Vec<Problem>,
    /// Findings beyond the first 10,000 that were only counted.
    pub problems_omitted: u64,
    /// Gaps an operator acknowledged (records lost, on record).
    pub acknowledged: Vec<String>,
    pub sealing: SealingSummary,
    pub witness: Option<WitnessSummary>,
    /// Plain statements of what this check could not prove.
    pub not_proven: Vec<String>,
}

impl VerifyReport {
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty() && self.problems_omitted == 0
    }
}

/// Checks every record and reports each edited, deleted, inserted, reordered or re-formatted
/// record by segment, line and seq, every epoch that is not sealed as it should be, and every
/// published head the journal no longer matches. `Err` only when the journal cannot be read at
/// all (missing, unreadable, bad permissions).
pub fn verify(options: &VerifyOptions) -> Result<VerifyReport, JournalError> {
    let mut keys = match &options.state_dir {
        Some(dir) => {
            storage::prepare_state_dir(dir, Access::Reader)?;
            host_keys(dir)?
        }
        None => KeyRing::default(),
    };
    for key in &options.verify_keys {
        keys.add_k0(key.k0(), KeySource::Operator);
    }
    let strict = keys.has_operator_key();
    let (segments, origin) = match (&options.state_dir, &options.file) {
        (_, Some(file)) => {
            let segment = SegmentFile {
                number: 1,
                path: file.clone(),
                live: false,
            };
            let first = SegmentReader::new(vec![segment.clone()], 0, 0)
                .next_line()?
                .and_then(|line| peek_seq(&line.bytes));
            let origin = if first.unwrap_or(1) == 1 {
                Origin::Beginning
            } else {
                Origin::Unknown
            };
            (vec![segment], origin)
        }
        (Some(dir), None) => {
            let segments = storage::list_segments(dir)?;
            if segments.is_empty() {
                return Err(JournalError::Missing {
                    path: dir.join(super::JOURNAL_FILE),
                });
            }
            (segments, Origin::Beginning)
        }
        (None, None) => {
            return Err(JournalError::Missing {
                path: PathBuf::from("(nothing to verify)"),
            });
        }
    };
    let witness_path = options
        .witness
        .clone()
        .or_else(|| options.state_dir.as_ref().map(|dir| dir.join(WITNESS_FILE)));
    let mut witness_protection = None;
    let mut checker = Checker::new(keys, origin, strict);
    if let Some(path) = &witness_path
        && let Some(stream) = WitnessStream::open(path)?
    {
        let daemon_uid = options
            .state_dir
            .as_deref()
            .and_then(|dir| fs::metadata(dir).ok())
            .map_or(u32::MAX, |metadata| metadata.uid());
        witness_protection = Some(stream.protection(daemon_uid));
        checker = checker.with_witness(witness_lines(stream));
    }
    let daemon_running = options
        .state_dir
        .as_deref()
        .is_some_and(storage::daemon_holds_lock);
    let segment_count = segments.len() as u64;
    let mut reader = SegmentReader::new(segments, 0, 0);
    while let Some(line) = reader.next_line()? {
        if let Some(segment) = &line.opens_segment
            && options.file.is_none()
        {
            checker.begin_segment(segment, false);
        }
        checker.feed(&line.bytes, line.location, line.start, line.end);
    }
    checker.finish();
    if let Some((_, torn, _)) = &reader.torn
        && !daemon_running
    {
        checker.problems.push(torn_problem(torn));
    }
    let tally = checker.tally.clone();
    let mut problems = std::mem::take(&mut checker.problems);
    let generations: Vec<(String, String)> = tally.generations.clone();
    if strict && tally.unproven > 0 {
        problems.push(Problem {
            segment: 0,
            line: 0,
            seq: None,
            kind: ProblemKind::NotProven,
            message: format!(
                "{} record(s) could not be checked with the given verification key(s): they \
                 belong to a key generation none of them opens (generations in this journal: {})",
                tally.unproven,
                describe_generations(&generations)
            ),
        });
    }
    let mut not_proven = Vec::new();
    if !strict {
        let sealed_generations = generations
            .iter()
            .filter(|(_, custody)| custody != Custody::Local.as_str())
            .count();
        if tally.unproven > 0 || sealed_generations > 0 {
            not_proven.push(format!(
                "{} record(s) are sealed with forward-secure keys whose verification key was not \
                 given: without `--verify-key` the chain and the witness are checked, but not \
                 who wrote the records. Someone who held the sealing key at the time could have \
                 rewritten them and re-chained the rest",
                tally.unproven
            ));
        }
    }
    if tally.proven_local > 0 {
        not_proven.push(format!(
            "{} record(s) were checked with journal.key, which is kept in the state directory: \
             this proves nothing against anyone who could read it. Set up forward-secure \
             sealing with `verbd audit setup-keys`",
            tally.proven_local
        ));
    }
    if tally.unsealed > 0 && !strict {
        not_proven.push(format!(
            "{} record(s) are in an epoch that is not sealed yet{}",
            tally.unsealed,
            if daemon_running {
                " (the daemon is running; it seals at the next epoch boundary and when it stops)"
            } else {
                ""
            }
        ));
    }
    let witness = match (witness_path, witness_protection) {
        (Some(path), Some(protection)) => {
            if tally.witness_heads == 0 {
                not_proven.push(format!(
                    "the witness {} holds no heads: records cut off the end cannot be detected",
                    path.display()
                ));
            } else if protection != WitnessProtection::AppendOnly {
                not_proven.push(format!(
                    "the witness {} is {}: records cut off the end are detected only as long as \
                     the witness itself was not rewritten",
                    path.display(),
                    protection.describe()
                ));
            }
            Some(WitnessSummary {
                path,
                protection,
                heads: tally.witness_heads,
                matched: tally.witness_matched,
                last_published_seq: tally.witness_last,
                unwitnessed: tally.unwitnessed,
            })
        }
        (Some(path), None) => {
            not_proven.push(format!(
                "no witness at {}: records cut off the end cannot be detected",
                path.display()
            ));
            None
        }
        (None, _) => {
            not_proven.push(
                "no witness given (`--witness FILE`): records cut off the end cannot be detected"
                    .to_owned(),
            );
            None
        }
    };
    if matches!(origin, Origin::Unknown) {
        not_proven.push(format!(
            "the file begins at seq {}: nothing before it, and not the link to it, is checked",
            tally.first_seq.unwrap_or_default()
        ));
    }
    Ok(VerifyReport {
        records: tally.lines,
        segments: segment_count,
        first_seq: tally.first_seq,
        last_seq: tally.last_seq,
        problems,
        problems_omitted: tally.problems_omitted,
        acknowledged: tally.acknowledged,
        sealing: SealingSummary {
            generations,
            sealed_epochs: tally.sealed_epochs,
            proven_with_verify_key: tally.proven_operator,
            proven_with_local_key: tally.proven_local,
            legacy_verified: tally.legacy_verified,
            unproven: tally.unproven,
            unsealed: tally.unsealed,
        },
        witness,
        not_proven,
    })
}

fn describe_generations(generations: &[(String, String)]) -> String {
    if generations.is_empty() {
        return "none recorded in the checked range".to_owned();
    }
    generations
        .iter()
        .map(|(fingerprint, custody)| format!("{fingerprint} ({custody})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The last `n` records, verified: from the last seal when that covers `n` records, otherwise
/// the whole journal. Any problem is an error.
pub fn tail(state_dir: &Path, n: usize) -> Result<Vec<Record>, JournalError> {
    storage::prepare_state_dir(state_dir, Access::Reader)?;
    let segments = storage::list_segments(state_dir)?;
    if segments.is_empty() {
        return Err(JournalError::Missing {
            path: state_dir.join(super::JOURNAL_FILE),
        });
    }
    let hints = storage::read_hints(state_dir).unwrap_or_default();
    let torn_allowed = storage::daemon_holds_lock(state_dir);
    if let Some(mark) = hints.anchor
        && let Some(index) = segments
            .iter()
            .position(|segment| segment.number == mark.segment)
        && let Ok((records, clean)) =
            tail_from(state_dir, &segments[index..], Some(mark), n, torn_allowed)
        && clean
        && records.len() >= n
    {
        return Ok(records.into());
    }
    let (records, clean) = tail_from(state_dir, &segments, None, n, torn_allowed)?;
    debug_assert!(clean);
    Ok(records.into())
}

fn tail_from(
    dir: &Path,
    segments: &[SegmentFile],
    mark: Option<Mark>,
    n: usize,
    torn_allowed: bool,
) -> Result<(VecDeque<Record>, bool), JournalError> {
    let keys = host_keys(dir)?;
    let (origin, offset, lines) = match mark {
        Some(mark) => (
            Origin::After {
                seq: mark.seq,
                hash: mark.hash,
            },
            mark.end,
            mark.line,
        ),
        None => (Origin::Beginning, 0, 0),
    };
    let mut checker = Checker::new(keys, origin, false);
    let mut reader = SegmentReader::new(segments.to_vec(), offset, lines);
    let mut records = VecDeque::new();
    let mut first = true;
    while let Some(line) = reader.next_line()? {
        if let Some(segment) = &line.opens_segment {
            checker.begin_segment(segment, first && mark.is_some());
            first = false;
        }
        if let Some(parsed) = checker.feed(&line.bytes, line.location, line.start, line.end) {
            if records.len() == n {
                records.pop_front();
            }
            if n > 0 {
                records.push_back(parsed.record);
            }
        }
    }
    checker.finish();
    if let Some((_, torn, _)) = &reader.torn
        && !torn_allowed
    {
        checker.problems.push(torn_problem(torn));
    }
    if !checker.problems.is_empty() {
        if mark.is_some() {
            return Ok((records, false));
        }
        return Err(JournalError::Integrity {
            path: dir.join(super::JOURNAL_FILE),
            problems: checker.problems,
        });
    }
    Ok((records, true))
}

/// What [`export`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    pub lines: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub bytes: u64,
}

/// Writes the exact lines of every segment, in order, from the first record with seq ≥ `since`
/// (JSON lines, one record per line, byte for byte as journaled), so `audit verify --file`
/// checks the copy offline. An incomplete last line is left out.
pub fn export(
    state_dir: &Path,
    since: u64,
    out: &mut dyn Write,
    out_name: &Path,
) -> Result<ExportSummary, JournalError> {
    storage::prepare_state_dir(state_dir, Access::Reader)?;
    let segments = storage::list_segments(state_dir)?;
    if segments.is_empty() {
        return Err(JournalError::Missing {
            path: state_dir.join(super::JOURNAL_FILE),
        });
    }
    let mut reader = SegmentReader::new(segments, 0, 0);
    let mut summary = ExportSummary {
        lines: 0,
        first_seq: None,
        last_seq: None,
        bytes: 0,
    };
    let mut started = false;
    let write_error = |source: io::Error| JournalError::Export {
        path: out_name.to_owned(),
        source,
    };
    while let Some(line) = reader.next_line()? {
        let seq = peek_seq(&line.bytes);
        if !started && seq.is_some_and(|seq| seq >= since) {
            started = true;
        }
        if !started {
            continue;
        }
        out.write_all(&line.bytes).map_err(write_error)?;
        out.write_all(b"\n").map_err(write_error)?;
        summary.lines += 1;
        summary.bytes += line.bytes.len() as u64 + 1;
        if let Some(seq) = seq {
            summary.first_seq.get_or_insert(seq);
            summary.last_seq = Some(seq);
        }
    }
    out.flush().map_err(write_error)?;
    Ok(summary)
}

/// What [`setup_keys`] made. The verification key is for the operator to store off the host.
pub struct SetupKeys {
    pub verify_key: VerifyKey,
    pub fingerprint: String,
    /// Where the initial sealing key was written.
    pub written_to: PathBuf,
    pub epoch_records: u64,
    pub epoch_seconds: u64,
}

/// Makes a new key generation: a random `K0`, written as the initial sealing key either into
/// the state directory (`journal.sealkey.init`, owned by the directory's owner, consumed at the
/// next start) or, with `credential_out`, to a file to encrypt with `systemd-creds` for the
/// `verbd-seal` credential. Returns the verification key, which is shown once and kept nowhere.
pub fn setup_keys(
    state_dir: &Path,
    credential_out: Option<&Path>,
    epoch_records: u64,
    epoch_seconds: u64,
) -> Result<SetupKeys, JournalError> {
    if epoch_records == 0 || epoch_seconds == 0 {
        return Err(JournalError::Key {
            path: state_dir.join(SEAL_INIT_FILE),
            reason: "cannot be made with an epoch of zero records or seconds".to_owned(),
        });
    }
    let k0 = storage::random_key()?;
    let limits = EpochLimits {
        records: epoch_records,
        seconds: epoch_seconds,
    };
    let slot = EpochKey::initial(&k0).to_slot(limits, Custody::SetupKeys, 0);
    let written_to = match credential_out {
        Some(path) => {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|source| JournalError::Io {
                    what: "credential file",
                    path: path.to_owned(),
                    action: "create",
                    source,
                })?;
            file.write_all(slot.encode().as_ref())
                .and_then(|()| file.sync_all())
                .map_err(|source| JournalError::Io {
                    what: "credential file",
                    path: path.to_owned(),
                    action: "write",
                    source,
                })?;
            path.to_owned()
        }
        None => {
            let metadata = fs::metadata(state_dir).map_err(|source| JournalError::Io {
                what: "state directory",
                path: state_dir.to_owned(),
                action: "stat",
                source,
            })?;
            storage::prepare_state_dir(state_dir, Access::Reader)?;
            storage::write_init(state_dir, &slot, (metadata.uid(), metadata.gid()))?
        }
    };
    let verify_key = VerifyKey::from_k0(&k0);
    Ok(SetupKeys {
        fingerprint: verify_key.fingerprint(),
        verify_key,
        written_to,
        epoch_records,
        epoch_seconds,
    })
}

/// An operator's acknowledgement that records `from..=to` are lost.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GapAck {
    pub(super) from: u64,
    pub(super) to: u64,
    /// The witnessed hash of record `to`.
    pub(super) hash: String,
    pub(super) reason: String,
    pub(super) by_uid: u32,
    pub(super) time: String,
    /// Not a cut tail but a lost witness: `from` = `to` = the journal's last seq, `hash` its
    /// hash. Records cut before it cannot be named; the operator says so on record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) witness_lost: bool,
}

/// What an acknowledgement covers (see [`acknowledge_gap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acknowledged {
    /// Records `from..=to` were published to the witness and are gone from the journal.
    MissingRecords { from: u64, to: u64 },
    /// The witness holds no heads while the journal ends at seq `last`: the witness was
    /// deleted or replaced, and what was cut before `last` cannot be named.
    WitnessLost { last: u64 },
}

/// Reads the acknowledgement file. It counts only if root wrote it (or, for a daemon that runs
/// as an ordinary user with an unprotected witness, that user): the daemon's uid, which an
/// intruder may hold, must not be able to excuse its own deletions.
pub(super) fn read_gap_ack(
    dir: &Path,
    protection: WitnessProtection,
) -> Result<Option<GapAck>, JournalError> {
    let path = dir.join(GAP_ACK_FILE);
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(JournalError::Io {
                what: "gap acknowledgement",
                path,
                action: "open",
                source,
            });
        }
    };
    let owner = file
        .metadata()
        .map_err(|source| JournalError::Io {
            what: "gap acknowledgement",
            path: path.clone(),
            action: "stat",
            source,
        })?
        .uid();
    let euid = nix::unistd::geteuid().as_raw();
    let trusted = owner == 0 || (owner == euid && protection == WitnessProtection::Unprotected);
    if !trusted {
        return Err(JournalError::File {
            path,
            reason: format!(
                "is owned by uid {owner}: only root may acknowledge lost records (the daemon's \
                 own uid could otherwise excuse its own deletions)"
            ),
        });
    }
    let mut text = String::new();
    (&mut file)
        .take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|source| JournalError::Io {
            what: "gap acknowledgement",
            path: path.clone(),
            action: "read",
            source,
        })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|error| JournalError::File {
            path,
            reason: format!("is not a gap acknowledgement ({error})"),
        })
}

/// Finds the records missing from the end of the journal (published to the witness but gone),
/// or a witness that holds no heads for a journal that has records, and writes an
/// acknowledgement the next start journals before it serves again. `None` when there is
/// nothing to acknowledge.
pub fn acknowledge_gap(
    state_dir: &Path,
    reason: &str,
) -> Result<Option<Acknowledged>, JournalError> {
    let report = verify(&VerifyOptions::for_state_dir(state_dir))?;
    let truncated = report
        .problems
        .iter()
        .find(|problem| problem.kind == ProblemKind::Truncated);
    let witness_empty = report
        .witness
        .as_ref()
        .is_some_and(|witness| witness.heads == 0);
    let (ack, acknowledged) = match truncated {
        Some(truncated) => {
            let from = truncated.seq.unwrap_or_default();
            let to = report
                .witness
                .as_ref()
                .and_then(|witness| witness.last_published_seq)
                .unwrap_or(from);
            let hash = witness_hash(&state_dir.join(WITNESS_FILE), to)?;
            (
                gap_ack(from, to, hash, reason, false),
                Acknowledged::MissingRecords { from, to },
            )
        }
        None if witness_empty && report.last_seq > 0 => {
            let last = tail(state_dir, 1)?
                .pop()
                .filter(|record| record.seq == report.last_seq)
                .ok_or_else(|| JournalError::File {
                    path: state_dir.join(super::JOURNAL_FILE),
                    reason: "changed while it was read: run the command again".to_owned(),
                })?;
            (
                gap_ack(last.seq, last.seq, last.hash, reason, true),
                Acknowledged::WitnessLost { last: last.seq },
            )
        }
        None => return Ok(None),
    };
    let path = state_dir.join(GAP_ACK_FILE);
    let text = serde_json::to_string(&ack).map_err(JournalError::Serialize)?;
    // Root writes in the daemon user's directory: whatever is under the name (a hard link to
    // a file of root's elsewhere, say) is unlinked, never opened, and a new file is made.
    match fs::remove_file(&path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            return Err(JournalError::Io {
                what: "gap acknowledgement",
                path,
                action: "remove the old",
                source: error,
            });
        }
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|source| JournalError::Io {
            what: "gap acknowledgement",
            path: path.clone(),
            action: "create",
            source,
        })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| JournalError::Io {
            what: "gap acknowledgement",
            path: path.clone(),
            action: "write",
            source,
        })?;
    Ok(Some(acknowledged))
}

fn gap_ack(from: u64, to: u64, hash: String, reason: &str, witness_lost: bool) -> GapAck {
    GapAck {
        from,
        to,
        hash,
        reason: reason.to_owned(),
        by_uid: nix::unistd::getuid().as_raw(),
        time: format_rfc3339(SystemTime::now()),
        witness_lost,
    }
}

/// The hash the witness published for `seq` (its last head for that seq).
fn witness_hash(path: &Path, seq: u64) -> Result<String, JournalError> {
    let mut found = None;
    if let Some(mut stream) = WitnessStream::open(path)? {
        while let Ok(Some(line)) = stream.next_line() {
            if let super::witness::WitnessLine::Head(entry) = line
                && entry.head.seq == seq
            {
                found = Some(hex(&entry.head.hash));
            }
        }
    }
    found.ok_or_else(|| JournalError::File {
        path: path.to_owned(),
        reason: format!("holds no head for seq {seq}"),
    })
}
