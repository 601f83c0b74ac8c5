//! The daemon's side of the journal: opening it (the start-up check), appending records,
//! closing epochs with seals, rotating segments, writing state snapshots and publishing heads.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::keys::{Custody, EpochKey, EpochLimits, Slot};
use super::read::{GapAck, Replay, read_gap_ack};
use super::record::{MAX_LINE_BYTES, Strings, hex, parse_line, record_body, seal_line, sha256};
use super::scan::{Checker, End, EpochState, KeyRing, Origin, SegmentReader, witness_lines};
use super::storage::{self, Access, Hints, Mark, SealStateFile, SegmentFile};
use super::witness::{Head, Journald, Witness, WitnessLine, WitnessProtection};
use super::{
    Appended, GAP_ACK_FILE, JOURNAL_FILE, JournalError, ProblemKind, Record, format_rfc3339,
};

/// Segment size at which the live segment is closed.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes appended after which [`Journal::snapshot_due`] says a state snapshot is due.
pub const DEFAULT_SNAPSHOT_BYTES: u64 = 8 * 1024 * 1024;
/// The least distance between snapshots a configuration may ask for.
pub const MIN_SNAPSHOT_BYTES: u64 = 1024;

/// Most heads the start-up check reads back from the witness after the last seal (an epoch is
/// 1000 records by default; more means someone appended to the witness).
const WITNESS_TAIL_CAP: usize = 200_000;

/// How to open the journal.
pub struct JournalConfig {
    pub state_dir: PathBuf,
    /// The live segment is closed once it holds this many bytes.
    pub segment_bytes: u64,
    /// [`Journal::snapshot_due`] turns true after this many bytes since the last snapshot
    /// (counted across restarts; at least [`MIN_SNAPSHOT_BYTES`]).
    pub snapshot_bytes: u64,
    /// The witness, opened earlier (before a privilege drop); `None` opens it in the state
    /// directory as the current user.
    pub witness: Option<Witness>,
    /// journald's native socket; `None` publishes to journald not at all.
    pub journald_socket: Option<PathBuf>,
    /// systemd's `$CREDENTIALS_DIRECTORY`, where the `verbd-seal` credential may be.
    pub credentials_dir: Option<PathBuf>,
}

impl JournalConfig {
    /// Defaults, no journald, no credentials (tools and tests).
    pub fn new(state_dir: &Path) -> JournalConfig {
        JournalConfig {
            state_dir: state_dir.to_owned(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            snapshot_bytes: DEFAULT_SNAPSHOT_BYTES,
            witness: None,
            journald_socket: None,
            credentials_dir: None,
        }
    }

    /// For `verbd serve`: the witness opened before the privilege drop; journald at
    /// `$VERBD_JOURNALD_SOCKET` or its standard socket (when it exists); the `verbd-seal`
    /// credential from `$CREDENTIALS_DIRECTORY` (set by systemd).
    pub fn for_daemon(state_dir: &Path, witness: Witness) -> JournalConfig {
        let journald = std::env::var_os("VERBD_JOURNALD_SOCKET")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(super::JOURNALD_SOCKET));
        JournalConfig {
            witness: Some(witness),
            journald_socket: Some(journald),
            credentials_dir: std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from),
            ..JournalConfig::new(state_dir)
        }
    }
}

/// Size and growth of the journal, for `status`.
#[derive(Clone, Debug, Serialize)]
pub struct JournalStats {
    /// Segment files (closed ones plus the live one).
    pub segments: u64,
    /// Bytes in all segments.
    pub bytes: u64,
    pub live_segment_bytes: u64,
    /// The last record's seq.
    pub last_seq: u64,
    pub epoch: u64,
    /// Fingerprint of the key generation in use.
    pub key_generation: String,
    /// Where its initial key came from: `local`, `setup-keys` or `credential`.
    pub key_custody: &'static str,
    pub appended_records: u64,
    pub appended_bytes: u64,
    /// fdatasyncs that made appended records durable (fewer than the records when concurrent
    /// appends were committed as groups).
    pub record_syncs: u64,
    /// Bytes appended in the last 60 seconds.
    pub bytes_last_minute: u64,
    pub open_for: Duration,
    pub witness: WitnessProtection,
    /// journald datagrams that could not be sent.
    pub journald_failures: u64,
}

/// A record written but not yet fdatasync'd: its head (and journald entry) are published only
/// once it is durable.
struct Unsynced {
    head: Head,
    /// The journald entry, built only when journald is connected.
    record: Option<Record>,
    bytes: u64,
}

/// The writer's position at the last durable record, put back when an fdatasync fails.
#[derive(Clone, Copy)]
struct Durable {
    end: End,
    epoch_first_seq: Option<u64>,
    epoch_opened: Instant,
    epoch_records: u64,
    appended_records: u64,
    appended_bytes: u64,
    bytes_since_snapshot: u64,
}

/// Why an fdatasync of written records failed, and whether rolling them back failed too.
struct SyncFailure {
    source: std::io::Error,
    rollback: Option<std::io::Error>,
}

/// A copy of an I/O error for each record one failed fdatasync was to cover (`io::Error` is not
/// `Clone`); the OS error number survives, so ENOSPC still reads as ENOSPC.
fn duplicate(error: &std::io::Error) -> std::io::Error {
    match error.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(error.kind(), error.to_string()),
    }
}

/// Bytes appended per second over the last minute.
struct Growth {
    buckets: VecDeque<(u64, u64)>,
    opened: Instant,
}

impl Growth {
    fn add(&mut self, bytes: u64) {
        let second = self.opened.elapsed().as_secs();
        match self.buckets.back_mut() {
            Some((at, total)) if *at == second => *total += bytes,
            _ => self.buckets.push_back((second, bytes)),
        }
        while self
            .buckets
            .front()
            .is_some_and(|(at, _)| *at + 60 <= second)
        {
            self.buckets.pop_front();
        }
    }

    fn last_minute(&self) -> u64 {
        let second = self.opened.elapsed().as_secs();
        self.buckets
            .iter()
            .filter(|(at, _)| *at + 60 > second)
            .map(|(_, bytes)| bytes)
            .sum()
    }
}

/// The daemon's handle on the journal: the only writer (an exclusive `flock` on the state
/// directory). Not shared by itself; the daemon wraps it in a `Mutex`.
pub struct Journal {
    dir: PathBuf,
    _lock: File,
    live: File,
    live_path: PathBuf,
    /// Last complete record (in the live segment, or the end of the last closed one right
    /// after a rotation that could not create the new file).
    end: End,
    segment: u64,
    archived_bytes: u64,
    key: EpochKey,
    key_state: SealStateFile,
    key_state_stale: bool,
    limits: EpochLimits,
    custody: Custody,
    epoch_first_seq: Option<u64>,
    epoch_records: u64,
    epoch_opened: Instant,
    witness: Witness,
    pending_heads: VecDeque<Head>,
    journald: Option<Journald>,
    hints: Hints,
    segment_bytes: u64,
    snapshot_bytes: u64,
    bytes_since_snapshot: u64,
    rollback_pending: bool,
    live_missing: bool,
    /// Records written since the last fdatasync; their heads wait for [`Journal::commit`].
    unsynced: Vec<Unsynced>,
    /// The writer's position at the last durable record, while records are unsynced.
    durable: Option<Durable>,
    appended_records: u64,
    appended_bytes: u64,
    record_syncs: u64,
    growth: Growth,
}

fn io_error(
    what: &'static str,
    path: &Path,
    action: &'static str,
    source: std::io::Error,
) -> JournalError {
    JournalError::Io {
        what,
        path: path.to_owned(),
        action,
        source,
    }
}

/// Whether the first line of `path` is a v1 record (a journal from before sealing).
fn first_line_is_v1(path: &Path) -> Result<bool, JournalError> {
    let mut reader = SegmentReader::new(
        vec![SegmentFile {
            number: 1,
            path: path.to_owned(),
            live: true,
        }],
        0,
        0,
    );
    Ok(match reader.next_line()? {
        Some(line) => parse_line(&line.bytes, 1, 1).is_ok_and(|parsed| parsed.epoch().is_none()),
        None => false,
    })
}

/// What the start-up check found.
struct Checked {
    end: Option<End>,
    epochs: EpochState,
    torn: Option<(SegmentFile, super::scan::TornTail, u64)>,
    truncated: Option<(u64, u64, [u8; 32])>,
    witness_empty: bool,
}

/// How the key for the next records is obtained.
enum KeyPlan {
    /// Continue the journal's generation with this key (already at the right epoch).
    Continue(EpochKey, EpochLimits, Custody),
    /// Start a new generation from this `K0`; `seal_first` holds the old key when the old open
    /// epoch can still be sealed.
    Start {
        initial: Slot,
        custody: Custody,
        seal_first: Option<(EpochKey, EpochLimits, Custody)>,
    },
}

impl Journal {
    /// Opens the journal of `state_dir` with defaults (see [`JournalConfig::new`]).
    pub fn open(state_dir: &Path) -> Result<Journal, JournalError> {
        Journal::open_with(JournalConfig::new(state_dir))
    }

    /// Opens (creating on first start) the journal and runs the start-up check: from the last
    /// seal to the end, the chain, sequence, epochs, MACs of the open epoch, and the heads
    /// published to the witness. Records missing from the end are refused
    /// ([`JournalError::MissingRecords`]) unless an operator acknowledged exactly that gap.
    /// Then it repairs an incomplete last line, seals the epoch the last run left open, and
    /// starts a new key generation when `setup-keys` (or the credential) provided one.
    pub fn open_with(config: JournalConfig) -> Result<Journal, JournalError> {
        let dir = config.state_dir.clone();
        storage::prepare_state_dir(&dir, Access::Writer)?;
        let lock = storage::lock_exclusive(&dir)?;
        let witness = match config.witness {
            Some(witness) => witness,
            None => Witness::open(&dir)?,
        };
        let local_key = storage::read_key(&dir, Access::Writer)?;
        let mut migrated_torn = None;
        let mut migrated_from_v1 = false;
        let mut segments = storage::list_segments(&dir)?;
        if let Some(live) = segments.iter().find(|segment| segment.live)
            && first_line_is_v1(&live.path)?
        {
            migrated_from_v1 = true;
            if segments.len() > 1 {
                return Err(JournalError::File {
                    path: live.path.clone(),
                    reason: "holds v1 records but closed segments exist: it does not belong here"
                        .to_owned(),
                });
            }
            migrated_torn = migrate_v1(&dir, &live.path, local_key.as_deref())?;
            segments = storage::list_segments(&dir)?;
        }
        let hints = storage::read_hints(&dir)?;
        let (key_state, state_slot) = SealStateFile::open(&dir)?;
        let checked = check_tail(
            &dir,
            &segments,
            &hints,
            local_key.as_deref(),
            &state_slot,
            &witness,
        )?;

        let live_path = dir.join(JOURNAL_FILE);
        let end = checked.end.unwrap_or(End {
            segment: segments.first().map_or(1, |segment| segment.number),
            line: 0,
            offset: 0,
            seq: 0,
            hash: [0u8; 32],
            last_start: 0,
        });
        let live_exists = segments.iter().any(|segment| segment.live);
        let segment = if live_exists {
            segments.last().map_or(1, |segment| segment.number)
        } else {
            segments.last().map_or(1, |segment| segment.number + 1)
        };
        let ack = match checked.truncated {
            Some((from, to, hash)) => {
                let ack = read_gap_ack(&dir, witness.protection())?;
                match ack {
                    Some(ack) if ack.from == from && ack.to == to && ack.hash == hex(&hash) => {
                        Some(ack)
                    }
                    _ => {
                        return Err(JournalError::MissingRecords {
                            path: live_path,
                            dir,
                            from,
                            to,
                            end: from - 1,
                            hash: hex(&hash),
                        });
                    }
                }
            }
            // A journal with records and a witness with no heads: the witness was deleted (the
            // daemon's uid can unlink a root-owned file in its own state directory) or replaced,
            // and whatever was cut off the end with it cannot be detected. A v1 journal (written
            // before heads were published) starts this way legitimately, but the daemon's uid
            // can also write one (it holds `journal.key`): where the witness protects against
            // that uid, a v1 journal needs the acknowledgement too.
            None if checked.witness_empty
                && end.seq > 0
                && (!migrated_from_v1
                    || witness.protection() != WitnessProtection::Unprotected) =>
            {
                match read_gap_ack(&dir, witness.protection())? {
                    Some(ack)
                        if ack.witness_lost && ack.to == end.seq && ack.hash == hex(&end.hash) =>
                    {
                        Some(ack)
                    }
                    _ => {
                        return Err(JournalError::WitnessLost {
                            path: witness.path().to_owned(),
                            dir,
                            end: end.seq,
                            hash: hex(&end.hash),
                        });
                    }
                }
            }
            None => None,
        };
        if ack.is_some() && !live_exists {
            return Err(JournalError::File {
                path: live_path,
                reason: "is missing and so are records before it: restore the segment files from \
                         a backup before acknowledging the gap"
                    .to_owned(),
            });
        }
        let initial = storage::read_init(&dir)?;
        let credential = match &config.credentials_dir {
            Some(credentials) => storage::read_credential(credentials)?,
            None => None,
        };
        let plan = plan_keys(
            &dir,
            ack.is_some(),
            &checked.epochs,
            state_slot,
            local_key,
            initial.is_some(),
            initial.or(credential),
        )?;

        let live = open_live(&live_path, !live_exists)?;
        let live_length = live
            .metadata()
            .map_err(|source| io_error("journal file", &live_path, "stat", source))?
            .len();
        let archived_bytes: u64 = segments
            .iter()
            .filter(|segment| !segment.live)
            .filter_map(|segment| fs::metadata(&segment.path).ok())
            .map(|metadata| metadata.len())
            .sum();
        // Bytes a restart replays now (after the latest snapshot): a daemon that restarts
        // often still snapshots once that much history piled up across its runs.
        let bytes_since_snapshot: u64 = segments
            .iter()
            .filter_map(|segment| {
                let length = if segment.live {
                    live_length
                } else {
                    fs::metadata(&segment.path).ok()?.len()
                };
                match hints.snapshot {
                    Some(mark) if segment.number < mark.segment => None,
                    Some(mark) if segment.number == mark.segment => {
                        Some(length.saturating_sub(mark.end))
                    }
                    _ => Some(length),
                }
            })
            .sum();
        let (key, limits, custody) = match &plan {
            KeyPlan::Continue(key, limits, custody) => (key.duplicate(), *limits, *custody),
            KeyPlan::Start {
                seal_first: Some((key, limits, custody)),
                ..
            } => (key.duplicate(), *limits, *custody),
            KeyPlan::Start {
                initial, custody, ..
            } => (initial.epoch_key(), initial.limits, *custody),
        };
        // The key can be ahead of the journal only across an acknowledged gap (a lost seal):
        // the records of the old open epoch then stay unsealed, on record as lost.
        let key_ahead = checked.epochs.epoch.is_some_and(|epoch| {
            key.epoch()
                > if checked.epochs.sealed {
                    epoch + 1
                } else {
                    epoch
                }
        });
        let open_epoch_records = if checked.epochs.sealed || key_ahead {
            0
        } else {
            checked.epochs.records
        };
        let mut journal = Journal {
            dir: dir.clone(),
            _lock: lock,
            live,
            live_path: live_path.clone(),
            end: if live_exists && end.segment == segment {
                end
            } else {
                End {
                    segment,
                    line: 0,
                    offset: 0,
                    last_start: 0,
                    ..end
                }
            },
            segment,
            archived_bytes,
            key,
            key_state,
            key_state_stale: matches!(plan, KeyPlan::Continue(..)),
            limits,
            custody,
            epoch_first_seq: checked.epochs.first_seq.filter(|_| !key_ahead),
            epoch_records: open_epoch_records,
            epoch_opened: Instant::now(),
            witness,
            pending_heads: VecDeque::new(),
            journald: config
                .journald_socket
                .as_deref()
                .and_then(Journald::connect),
            hints,
            segment_bytes: config.segment_bytes.max(4096),
            snapshot_bytes: config.snapshot_bytes.max(MIN_SNAPSHOT_BYTES),
            bytes_since_snapshot,
            rollback_pending: false,
            live_missing: false,
            unsynced: Vec::new(),
            durable: None,
            appended_records: 0,
            appended_bytes: 0,
            record_syncs: 0,
            growth: Growth {
                buckets: VecDeque::new(),
                opened: Instant::now(),
            },
        };
        if live_exists && live_length != journal.end.offset {
            // An incomplete last line: roll it back before anything is appended.
            journal.roll_back().map_err(|source| {
                io_error(
                    "journal file",
                    &live_path,
                    "truncate the incomplete last line",
                    source,
                )
            })?;
        }
        if let Some(ack) = ack {
            journal.acknowledge(&ack)?;
        }
        // A new segment begins with its header; a new key generation's first record can be it.
        let needs_header = segment > 1 && journal.end.line == 0;
        let generation_opens_segment = matches!(
            plan,
            KeyPlan::Start {
                seal_first: None,
                ..
            }
        ) && needs_header;
        if needs_header && !generation_opens_segment {
            journal.write_event(&header(segment), None)?;
        }
        if journal.key_state_stale {
            journal.store_key()?;
        }
        match plan {
            KeyPlan::Continue(..) => {
                if journal.epoch_records > 0 {
                    journal.seal("start")?;
                }
            }
            KeyPlan::Start {
                initial,
                custody,
                seal_first,
            } => {
                if seal_first.is_some() && journal.epoch_records > 0 {
                    journal.seal("rekey")?;
                }
                journal.start_generation(
                    &initial,
                    custody,
                    generation_opens_segment.then_some(segment),
                )?;
                if custody == Custody::SetupKeys {
                    storage::erase_init(&dir)?;
                }
            }
        }
        let torn = checked.torn.map(|(_, torn, _)| torn).or(migrated_torn);
        if let Some(torn) = torn {
            journal.append(&json!({
                "kind": "journal_tail_repaired",
                "line": torn.line,
                "bytes": torn.bytes,
                "sha256": hex(&torn.sha256),
            }))?;
        }
        journal.witness.sync().ok();
        Ok(journal)
    }

    /// Appends one record (see the module docs for its format) and fdatasyncs before returning,
    /// then publishes the new head. Closes the epoch first when it is due, and the segment when
    /// it is full. On any I/O error the file is truncated back to the last complete record, seq
    /// and prev stay unchanged, and the error is returned; a later append works once the cause
    /// is gone.
    pub fn append<E: Serialize>(&mut self, event: &E) -> Result<Appended, JournalError> {
        self.append_group(std::slice::from_ref(event))
            .pop()
            .expect("append_group answers every event")
    }

    /// Appends `events` in order as one group (group commit): each is written as by
    /// [`Journal::append`], and one fdatasync makes them all durable before any result is
    /// returned or any head published. A seal or rotation due in between first commits the
    /// records before it. Each event gets its own result, in order: a record that fails does
    /// not fail its neighbours, except that a failed fdatasync fails every record it was to
    /// cover (they are rolled back, and the writer's position with them).
    pub fn append_group<E: Serialize>(
        &mut self,
        events: &[E],
    ) -> Vec<Result<Appended, JournalError>> {
        let mut results = Vec::with_capacity(events.len());
        let mut covered = Vec::new();
        for event in events {
            match self.stage(event, &mut results, &mut covered) {
                Ok(appended) => {
                    covered.push(results.len());
                    results.push(Ok(appended));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        self.settle(&mut results, &mut covered);
        results
    }

    /// Writes one record of a group without syncing; a seal or rotation due first commits the
    /// records `covered` so far.
    fn stage<E: Serialize>(
        &mut self,
        event: &E,
        results: &mut [Result<Appended, JournalError>],
        covered: &mut Vec<usize>,
    ) -> Result<Appended, JournalError> {
        let Value::Object(event) = serde_json::to_value(event).map_err(JournalError::Serialize)?
        else {
            return Err(JournalError::NotAnObject);
        };
        self.prepare()?;
        if let Some(reason) = self.epoch_due() {
            self.settle(results, covered);
            self.seal(reason)?;
        }
        if self.live_missing || self.end.offset >= self.segment_bytes {
            self.settle(results, covered);
            self.rotate()?;
        }
        self.write_unsynced(&event, None)
    }

    /// Commits the records `covered`; if the fdatasync fails, each of them gets its error.
    fn settle(&mut self, results: &mut [Result<Appended, JournalError>], covered: &mut Vec<usize>) {
        if let Err(failure) = self.commit() {
            for &index in covered.iter() {
                results[index] = Err(self.sync_error(&failure));
            }
        }
        covered.clear();
    }

    /// Closes the epoch if it is older than its time limit (call it periodically: an idle
    /// daemon's last records are then sealed within `epoch_seconds`).
    pub fn seal_if_due(&mut self) -> Result<bool, JournalError> {
        if self.epoch_records == 0 || self.epoch_due().is_none() {
            return Ok(false);
        }
        self.prepare()?;
        self.seal("time")?;
        Ok(true)
    }

    /// Closes the open epoch now (at a clean stop), so every record is sealed.
    pub fn seal_now(&mut self, reason: &'static str) -> Result<(), JournalError> {
        if self.epoch_records == 0 {
            return Ok(());
        }
        self.prepare()?;
        self.seal(reason)?;
        self.witness.sync().map_err(|source| JournalError::Witness {
            path: self.witness.path().to_owned(),
            source,
        })
    }

    /// Whether enough has been appended since the last snapshot that the layer above should
    /// write one ([`Journal::write_snapshot`]); restart reads from the latest snapshot on.
    pub fn snapshot_due(&self) -> bool {
        self.bytes_since_snapshot >= self.snapshot_bytes
    }

    /// Appends a snapshot of the live state (`{"kind":"journal_snapshot","state":…}`) and
    /// records where it is, so [`Journal::replay`] starts from it.
    pub fn write_snapshot<S: Serialize>(&mut self, state: &S) -> Result<Appended, JournalError> {
        let state = serde_json::to_value(state).map_err(JournalError::Serialize)?;
        let appended = self.append(&json!({"kind": "journal_snapshot", "state": state}))?;
        self.hints.snapshot = Some(self.end.mark());
        self.bytes_since_snapshot = 0;
        self.write_hints();
        Ok(appended)
    }

    /// Streams the records after the latest snapshot (all records if there is none), with the
    /// snapshot itself decoded as `S`. Memory is bounded whatever the history's length.
    pub fn replay<S: DeserializeOwned>(&self) -> Result<Replay<S>, JournalError> {
        Replay::open(&self.dir, self.hints.snapshot, true)
    }

    /// Streams every record from the beginning (for a layer above without snapshots).
    pub fn replay_all(&self) -> Result<Replay<Value>, JournalError> {
        Replay::open(&self.dir, None, true)
    }

    /// The live segment's path.
    pub fn path(&self) -> &Path {
        &self.live_path
    }

    /// Size and growth, for `status`.
    pub fn stats(&self) -> JournalStats {
        JournalStats {
            segments: self.segment,
            bytes: self.archived_bytes + self.end.offset,
            live_segment_bytes: self.end.offset,
            last_seq: self.end.seq,
            epoch: self.key.epoch(),
            key_generation: hex(self.key.fingerprint()),
            key_custody: self.custody.as_str(),
            appended_records: self.appended_records,
            appended_bytes: self.appended_bytes,
            record_syncs: self.record_syncs,
            bytes_last_minute: self.growth.last_minute(),
            open_for: self.growth.opened.elapsed(),
            witness: self.witness.protection(),
            journald_failures: self.journald.as_ref().map_or(0, Journald::failures),
        }
    }

    fn epoch_due(&self) -> Option<&'static str> {
        if self.epoch_records >= self.limits.records {
            Some("count")
        } else if self.epoch_records > 0
            && self.epoch_opened.elapsed() >= Duration::from_secs(self.limits.seconds)
        {
            Some("time")
        } else {
            None
        }
    }

    /// Everything that must hold before a record may be written: no partial record left, the
    /// file as the daemon left it, earlier heads published, the key state stored.
    fn prepare(&mut self) -> Result<(), JournalError> {
        if self.rollback_pending {
            self.roll_back().map_err(|source| {
                io_error(
                    "journal file",
                    &self.live_path,
                    "roll back an earlier partial record",
                    source,
                )
            })?;
        }
        while let Some(head) = self.pending_heads.front() {
            self.witness
                .publish(head)
                .map_err(|source| JournalError::Witness {
                    path: self.witness.path().to_owned(),
                    source,
                })?;
            self.pending_heads.pop_front();
        }
        if self.key_state_stale {
            self.store_key()?;
        }
        if self.live_missing {
            return Ok(());
        }
        let actual = self
            .live
            .metadata()
            .map_err(|source| io_error("journal file", &self.live_path, "stat", source))?
            .len();
        if actual != self.end.offset {
            return Err(JournalError::ModifiedExternally {
                path: self.live_path.clone(),
                expected: self.end.offset,
                actual,
            });
        }
        Ok(())
    }

    /// Builds, MACs, writes and fdatasyncs one line; then publishes its head. `seq` overrides
    /// the next seq (only for an acknowledged gap). The journal's own records (seals, headers,
    /// keys) go this way, never in the middle of a group's unsynced records.
    fn write_event(
        &mut self,
        event: &Map<String, Value>,
        seq: Option<u64>,
    ) -> Result<Appended, JournalError> {
        debug_assert!(self.unsynced.is_empty(), "a group was not committed first");
        let appended = self.write_unsynced(event, seq)?;
        self.commit().map_err(|failure| self.sync_error(&failure))?;
        Ok(appended)
    }

    /// Builds, MACs and writes one line, not yet durable: [`Journal::commit`] syncs it and
    /// publishes its head. A failed write is rolled back at once.
    fn write_unsynced(
        &mut self,
        event: &Map<String, Value>,
        seq: Option<u64>,
    ) -> Result<Appended, JournalError> {
        let seq = seq.unwrap_or(self.end.seq + 1);
        let time = format_rfc3339(SystemTime::now());
        let epoch = self.key.epoch();
        let body = record_body(
            seq,
            &time,
            &hex(&self.end.hash),
            Some(epoch),
            event,
            Strings::NoLineSeparators,
        );
        let tag = self.key.tag(body.as_bytes());
        let line = seal_line(&body, "mac", &tag);
        if line.len() + 1 > MAX_LINE_BYTES {
            return Err(JournalError::TooLarge {
                size: line.len() + 1,
            });
        }
        let mut bytes = line.into_bytes();
        let hash = sha256(&bytes);
        bytes.push(b'\n');
        let written = (&self.live).write_all(&bytes);
        #[cfg(feature = "test-hooks")]
        let written = written.and_then(|()| crate::test_hooks::before_journal_sync(event));
        if let Err(source) = written {
            return Err(match self.roll_back() {
                Ok(()) => JournalError::Write {
                    path: self.live_path.clone(),
                    source,
                },
                Err(rollback) => {
                    self.rollback_pending = true;
                    JournalError::RollbackFailed {
                        path: self.live_path.clone(),
                        source,
                        rollback,
                    }
                }
            });
        }
        if self.durable.is_none() {
            self.durable = Some(Durable {
                end: self.end,
                epoch_first_seq: self.epoch_first_seq,
                epoch_opened: self.epoch_opened,
                epoch_records: self.epoch_records,
                appended_records: self.appended_records,
                appended_bytes: self.appended_bytes,
                bytes_since_snapshot: self.bytes_since_snapshot,
            });
        }
        let previous = self.end.hash;
        self.end = End {
            segment: self.segment,
            line: self.end.line + 1,
            offset: self.end.offset + bytes.len() as u64,
            seq,
            hash,
            last_start: self.end.offset,
        };
        if self.epoch_records == 0 {
            self.epoch_first_seq = Some(seq);
            self.epoch_opened = Instant::now();
        }
        self.epoch_records += 1;
        self.appended_records += 1;
        self.appended_bytes += bytes.len() as u64;
        self.bytes_since_snapshot += bytes.len() as u64;
        let record = self.journald.is_some().then(|| Record {
            seq,
            time: time.clone(),
            prev: hex(&previous),
            epoch: Some(epoch),
            event: Value::Object(event.clone()),
            mac: hex(&tag),
            segment: self.segment,
            line: self.end.line,
            hash: hex(&hash),
        });
        self.unsynced.push(Unsynced {
            head: Head {
                seq,
                epoch: Some(epoch),
                hash,
            },
            record,
            bytes: bytes.len() as u64,
        });
        Ok(Appended {
            seq,
            hash: hex(&hash),
            time,
        })
    }

    /// Makes every record written since the last commit durable with one fdatasync, then
    /// publishes their heads in order. If the fdatasync fails, the file is truncated back to the
    /// last durable record and the writer's position put back: none of them was written.
    fn commit(&mut self) -> Result<(), SyncFailure> {
        let Some(durable) = self.durable.take() else {
            return Ok(());
        };
        let synced = if self.rollback_pending {
            self.roll_back()
        } else {
            self.live.sync_data()
        };
        if let Err(source) = synced {
            self.unsynced.clear();
            self.end = durable.end;
            self.epoch_first_seq = durable.epoch_first_seq;
            self.epoch_opened = durable.epoch_opened;
            self.epoch_records = durable.epoch_records;
            self.appended_records = durable.appended_records;
            self.appended_bytes = durable.appended_bytes;
            self.bytes_since_snapshot = durable.bytes_since_snapshot;
            let rollback = self.roll_back().err();
            self.rollback_pending = rollback.is_some();
            return Err(SyncFailure { source, rollback });
        }
        self.record_syncs += 1;
        for unsynced in std::mem::take(&mut self.unsynced) {
            self.growth.add(unsynced.bytes);
            self.publish(unsynced.head, unsynced.record);
        }
        Ok(())
    }

    /// The error each record covered by a failed fdatasync gets.
    fn sync_error(&self, failure: &SyncFailure) -> JournalError {
        let path = self.live_path.clone();
        let source = duplicate(&failure.source);
        match &failure.rollback {
            None => JournalError::Write { path, source },
            Some(rollback) => JournalError::RollbackFailed {
                path,
                source,
                rollback: duplicate(rollback),
            },
        }
    }

    fn publish(&mut self, head: Head, record: Option<Record>) {
        if self.witness.publish(&head).is_err() {
            self.pending_heads.push_back(head);
        }
        if let (Some(journald), Some(record)) = (&mut self.journald, record) {
            journald.publish(&record);
        }
    }

    /// Appends the seal of the open epoch, then evolves the key (overwriting it in memory) and
    /// stores the new one (overwriting the old slot on disk).
    fn seal(&mut self, reason: &'static str) -> Result<(), JournalError> {
        let epoch = self.key.epoch();
        let mut event = Map::new();
        event.insert("kind".into(), "journal_seal".into());
        event.insert("epoch".into(), epoch.into());
        event.insert(
            "first_seq".into(),
            self.epoch_first_seq.unwrap_or(self.end.seq + 1).into(),
        );
        event.insert("records".into(), (self.epoch_records + 1).into());
        event.insert("reason".into(), reason.into());
        event.insert("generation".into(), hex(self.key.fingerprint()).into());
        self.write_event(&event, None)?;
        self.key.evolve();
        self.epoch_records = 0;
        self.epoch_first_seq = None;
        self.key_state_stale = true;
        self.hints.anchor = Some(self.end.mark());
        self.write_hints();
        let _ = self.witness.sync();
        self.store_key()
    }

    fn store_key(&mut self) -> Result<(), JournalError> {
        self.key_state
            .store(self.key.to_slot(self.limits, self.custody, 0))?;
        self.key_state_stale = false;
        Ok(())
    }

    /// `journal_keys` in epoch 0 of the new key, sealed at once so `K0` itself is never stored.
    fn start_generation(
        &mut self,
        initial: &Slot,
        custody: Custody,
        opens_segment: Option<u64>,
    ) -> Result<(), JournalError> {
        self.key = initial.epoch_key();
        self.limits = initial.limits;
        self.custody = custody;
        self.epoch_records = 0;
        self.epoch_first_seq = None;
        let mut event = Map::new();
        event.insert("kind".into(), "journal_keys".into());
        event.insert("fingerprint".into(), hex(self.key.fingerprint()).into());
        event.insert("custody".into(), custody.as_str().into());
        event.insert("epoch_records".into(), self.limits.records.into());
        event.insert("epoch_seconds".into(), self.limits.seconds.into());
        if let Some(segment) = opens_segment {
            event.insert("segment".into(), segment.into());
        }
        self.write_event(&event, None)?;
        self.seal("keys")
    }

    fn acknowledge(&mut self, ack: &GapAck) -> Result<(), JournalError> {
        if ack.witness_lost {
            return self.acknowledge_witness_lost(ack);
        }
        let mut event = Map::new();
        event.insert("kind".into(), "journal_gap_acknowledged".into());
        event.insert("from".into(), ack.from.into());
        event.insert("to".into(), ack.to.into());
        event.insert("witnessed_hash".into(), ack.hash.clone().into());
        event.insert("by_uid".into(), ack.by_uid.into());
        event.insert("reason".into(), ack.reason.clone().into());
        self.write_event(&event, Some(ack.to + 1))?;
        let path = self.dir.join(GAP_ACK_FILE);
        fs::remove_file(&path)
            .map_err(|source| io_error("gap acknowledgement", &path, "remove", source))?;
        tracing::warn!(
            from = ack.from,
            to = ack.to,
            "journal records acknowledged as lost by an operator; the gap is on record"
        );
        Ok(())
    }

    /// The operator's word that the witness was lost with the journal ending at `ack.to`: an
    /// ordinary record after it (nothing is missing that anyone can name), whose head starts
    /// the new witness.
    fn acknowledge_witness_lost(&mut self, ack: &GapAck) -> Result<(), JournalError> {
        let mut event = Map::new();
        event.insert("kind".into(), "journal_witness_lost_acknowledged".into());
        event.insert("last_seq".into(), ack.to.into());
        event.insert("last_hash".into(), ack.hash.clone().into());
        event.insert("by_uid".into(), ack.by_uid.into());
        event.insert("reason".into(), ack.reason.clone().into());
        self.write_event(&event, None)?;
        let path = self.dir.join(GAP_ACK_FILE);
        fs::remove_file(&path)
            .map_err(|source| io_error("gap acknowledgement", &path, "remove", source))?;
        tracing::warn!(
            last_seq = ack.to,
            "an operator acknowledged the loss of the journal witness; records cut before seq {} \
             cannot be detected, and this is on record",
            ack.to + 1
        );
        Ok(())
    }

    /// Closes the live segment (sealing its epoch) and starts the next one with its header.
    fn rotate(&mut self) -> Result<(), JournalError> {
        if !self.live_missing {
            if self.epoch_records > 0 {
                self.seal("rotation")?;
            }
            let archive = self.dir.join(storage::archive_name(self.segment));
            fs::rename(&self.live_path, &archive).map_err(|source| {
                io_error("journal file", &self.live_path, "close the segment", source)
            })?;
            storage::sync_dir(&self.dir)?;
            self.archived_bytes += self.end.offset;
            self.live_missing = true;
        }
        self.live = open_live(&self.live_path, true)?;
        self.live_missing = false;
        self.segment += 1;
        self.end = End {
            segment: self.segment,
            line: 0,
            offset: 0,
            last_start: 0,
            ..self.end
        };
        self.write_event(&header(self.segment), None).map(|_| ())
    }

    /// Truncates the live file to the end of the last complete record and makes that durable.
    fn roll_back(&mut self) -> std::io::Result<()> {
        self.live.set_len(self.end.offset)?;
        self.live.sync_data()?;
        self.rollback_pending = false;
        Ok(())
    }

    /// Records where the last seal and snapshot are. A failure costs only start-up time.
    fn write_hints(&mut self) {
        if let Err(error) = storage::write_hints(&self.dir, &self.hints) {
            tracing::warn!(%error, "journal checkpoint not written; the next start reads more");
        }
    }
}

fn header(segment: u64) -> Map<String, Value> {
    let mut event = Map::new();
    event.insert("kind".into(), "journal_segment".into());
    event.insert("segment".into(), segment.into());
    event
}

/// Opens the live segment for appending: created 0600 when `create` (never replacing one),
/// no symlinks, owned by the daemon, not group/other writable.
fn open_live(path: &Path, create: bool) -> Result<File, JournalError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if create {
        options.create_new(true);
    }
    let file = options
        .open(path)
        .map_err(|source| io_error("journal file", path, "open", source))?;
    storage::check_file(&file, path, Access::Writer, storage::Guarded::Journal)?;
    if create {
        storage::sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(file)
}

/// Verifies a v1 journal completely with `journal.key` and closes it as segment 1. Returns an
/// incomplete last line it cut (to be journaled).
fn migrate_v1(
    dir: &Path,
    path: &Path,
    key: Option<&[u8; 32]>,
) -> Result<Option<super::scan::TornTail>, JournalError> {
    let Some(key) = key else {
        return Err(JournalError::Key {
            path: dir.join(super::KEY_FILE),
            reason: format!(
                "is missing but {} holds records that only it can verify; restore the key from \
                 backup (or move the journal aside to start a new one)",
                path.display()
            ),
        });
    };
    let mut keys = KeyRing::default();
    keys.add_local(key);
    let segment = SegmentFile {
        number: 1,
        path: path.to_owned(),
        live: true,
    };
    let mut checker = Checker::new(keys, Origin::Beginning, false);
    let mut reader = SegmentReader::new(vec![segment], 0, 0);
    while let Some(line) = reader.next_line()? {
        checker.feed(&line.bytes, line.location, line.start, line.end);
    }
    checker.finish();
    if !checker.problems.is_empty() {
        return Err(JournalError::Integrity {
            path: path.to_owned(),
            problems: checker.problems,
        });
    }
    let torn = reader.torn.take();
    if let Some((_, _, offset)) = &torn {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|source| io_error("journal file", path, "open", source))?;
        file.set_len(*offset)
            .and_then(|()| file.sync_data())
            .map_err(|source| {
                io_error(
                    "journal file",
                    path,
                    "truncate the incomplete last line",
                    source,
                )
            })?;
    }
    let archive = dir.join(storage::archive_name(1));
    fs::rename(path, &archive)
        .map_err(|source| io_error("journal file", path, "close the v1 journal", source))?;
    storage::sync_dir(dir)?;
    tracing::info!(
        archive = %archive.display(),
        "v1 journal verified and closed as segment 1; the chain continues with forward-secure sealing"
    );
    Ok(torn.map(|(_, torn, _)| torn))
}

/// The start-up check (see [`Journal::open_with`]).
fn check_tail(
    dir: &Path,
    segments: &[SegmentFile],
    hints: &Hints,
    local_key: Option<&[u8; 32]>,
    state: &Option<Slot>,
    witness: &Witness,
) -> Result<Checked, JournalError> {
    let checkpoint_error = |reason: String| JournalError::Checkpoint {
        path: dir.join(super::CHECKPOINT_FILE),
        reason: format!(
            "{reason}. Run `verbd audit verify` to see what changed; the daemon refuses to start \
             on a journal that lost or changed records"
        ),
    };
    // The checkpoint is a hint: when it no longer matches, everything is checked from the
    // beginning, which names exactly what changed (and what is missing).
    let anchored = hints.anchor.and_then(|mark| {
        let index = segments
            .iter()
            .position(|segment| segment.number == mark.segment)?;
        let segment = &segments[index];
        let file = storage::open_for_reading(&segment.path).ok().flatten()?;
        match check_mark_prev(&file, &segment.path, &mark) {
            Ok(prev) => Some((
                Origin::After {
                    seq: mark.seq - 1,
                    hash: prev,
                },
                index,
                mark.start,
                mark.line - 1,
            )),
            Err(reason) => {
                tracing::warn!("{}", checkpoint_error(reason));
                None
            }
        }
    });
    let (origin, start_index, start_offset, lines_before) =
        anchored.unwrap_or((Origin::Beginning, 0, 0, 0));
    let mut keys = KeyRing::default();
    if let Some(key) = local_key {
        keys.add_local(key);
    }
    if let Some(slot) = state {
        keys.set_live(slot.duplicate());
    }
    let witness_feed: Box<dyn Iterator<Item = WitnessLine>> = match origin {
        Origin::After { seq, .. } => {
            let (entries, garbage) = witness.tail_after(seq, WITNESS_TAIL_CAP)?;
            let lines: Vec<WitnessLine> = (0..garbage)
                .map(|_| WitnessLine::Garbage(0))
                .chain(entries.into_iter().map(WitnessLine::Head))
                .collect();
            Box::new(lines.into_iter())
        }
        _ => match super::witness::WitnessStream::open(witness.path())? {
            Some(stream) => witness_lines(stream),
            None => Box::new(std::iter::empty()),
        },
    };
    let seed = EpochState {
        generation: state.as_ref().map(|slot| slot.fingerprint),
        ..EpochState::default()
    };
    let mut checker = Checker::new(keys, origin, false)
        .with_epochs(seed)
        .with_witness(witness_feed);
    let mut reader =
        SegmentReader::new(segments[start_index..].to_vec(), start_offset, lines_before);
    let mut first = true;
    while let Some(line) = reader.next_line()? {
        if let Some(segment) = &line.opens_segment {
            checker.begin_segment(segment, first && matches!(origin, Origin::After { .. }));
            first = false;
        }
        checker.feed(&line.bytes, line.location, line.start, line.end);
    }
    checker.finish();
    let truncated = checker.tally.truncated;
    let witness_empty = checker.tally.witness_heads == 0;
    let problems: Vec<_> = checker
        .problems
        .into_iter()
        .filter(|problem| problem.kind != ProblemKind::Truncated)
        .collect();
    if !problems.is_empty() {
        return Err(JournalError::Integrity {
            path: dir.join(JOURNAL_FILE),
            problems,
        });
    }
    Ok(Checked {
        end: checker.end,
        epochs: checker.epochs,
        torn: reader.torn,
        truncated,
        witness_empty,
    })
}

/// [`super::scan::check_mark`], returning the `prev` of the marked line.
fn check_mark_prev(file: &File, path: &Path, mark: &Mark) -> Result<[u8; 32], String> {
    super::scan::check_mark(file, path, mark)?;
    let mut line = vec![0u8; (mark.end - mark.start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut line, mark.start)
        .map_err(|error| error.to_string())?;
    line.pop();
    parse_line(&line, mark.segment, mark.line)
        .map(|parsed| parsed.prev)
        .map_err(|fault| fault.message)
}

/// Decides where the key for the next records comes from (see docs/audit.md, "Key custody").
fn plan_keys(
    dir: &Path,
    acknowledged_gap: bool,
    epochs: &EpochState,
    state: Option<Slot>,
    local_key: Option<zeroize::Zeroizing<[u8; 32]>>,
    from_init_file: bool,
    fresh: Option<Slot>,
) -> Result<KeyPlan, JournalError> {
    let expected_epoch = |slot_epoch: u64| match epochs.epoch {
        Some(epoch) if epochs.sealed => epoch + 1,
        Some(epoch) => epoch,
        None => slot_epoch,
    };
    let state_path = dir.join(super::SEAL_STATE_FILE);
    let continuing = match (epochs.generation, state) {
        (Some(generation), Some(slot)) => {
            if slot.fingerprint != generation {
                return Err(JournalError::Key {
                    path: state_path,
                    reason: format!(
                        "belongs to key generation {} but the journal's is {}: the key or the \
                         journal was replaced",
                        hex(&slot.fingerprint),
                        hex(&generation)
                    ),
                });
            }
            // Records lost in an acknowledged gap may have held seals: the key is then ahead.
            let expected = expected_epoch(slot.epoch);
            if slot.epoch > expected && !acknowledged_gap {
                return Err(JournalError::Key {
                    path: state_path,
                    reason: format!(
                        "is at epoch {} but the journal's last epoch is {}: the journal is older \
                         than its key (was an older copy put back?). Run `verbd audit verify`",
                        slot.epoch,
                        epochs.epoch.unwrap_or_default()
                    ),
                });
            }
            let mut key = slot.epoch_key();
            key.advance_to(expected);
            Some((key, slot.limits, slot.custody))
        }
        (Some(generation), None) => {
            let from_k0 = |k0: &[u8; 32], custody| {
                let mut key = EpochKey::initial(k0);
                (key.fingerprint() == &generation).then(|| {
                    key.advance_to(expected_epoch(0));
                    (key, EpochLimits::default(), custody)
                })
            };
            let resumed = local_key
                .as_deref()
                .and_then(|k0| from_k0(k0, Custody::Local))
                .or_else(|| {
                    fresh
                        .as_ref()
                        .filter(|_| !from_init_file)
                        .and_then(|slot| from_k0(&slot.key, Custody::Credential))
                });
            if resumed.is_none() && fresh.is_none() {
                return Err(JournalError::Key {
                    path: state_path,
                    reason: format!(
                        "is missing, so key generation {} cannot be continued. The records so far \
                         still verify with its verification key; run `verbd audit setup-keys` to \
                         start a new generation",
                        hex(&generation)
                    ),
                });
            }
            resumed
        }
        (None, Some(slot)) => Some((slot.epoch_key(), slot.limits, slot.custody)),
        (None, None) => None,
    };
    if let Some(fresh) = fresh {
        let fresh_generation = fresh.fingerprint;
        let already_current = continuing
            .as_ref()
            .is_some_and(|(key, _, _)| key.fingerprint() == &fresh_generation);
        if already_current {
            if from_init_file {
                return Err(JournalError::Key {
                    path: dir.join(super::SEAL_INIT_FILE),
                    reason: "holds the key generation already in use; remove it".to_owned(),
                });
            }
            tracing::warn!(
                "the systemd credential verbd-seal still holds the initial key of the generation in use; \
                 remove it (see docs/systemd.md): whoever can read it can forge every epoch"
            );
        } else if from_init_file || continuing.is_none() {
            let custody = if from_init_file {
                Custody::SetupKeys
            } else {
                Custody::Credential
            };
            return Ok(KeyPlan::Start {
                initial: fresh,
                custody,
                seal_first: continuing,
            });
        }
    }
    match continuing {
        Some((key, limits, custody)) => Ok(KeyPlan::Continue(key, limits, custody)),
        None => {
            // No key set up: a local generation, its K0 kept in journal.key.
            let k0 = match local_key {
                Some(key) => key,
                None => storage::create_key(dir)?,
            };
            let key = EpochKey::initial(&k0);
            Ok(KeyPlan::Start {
                initial: key.to_slot(EpochLimits::default(), Custody::Local, 0),
                custody: Custody::Local,
                seal_first: None,
            })
        }
    }
}
