//! The daemon's side of the journal: opening it (the start-up check, in [`open`]), appending
//! records, closing epochs with seals, rotating segments, writing state snapshots and publishing
//! heads.
#![forbid(unsafe_code)]

mod open;

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
use super::read::{GapAck, Replay};
use super::record::{MAX_LINE_BYTES, Strings, hex, record_body, seal_line, sha256};
use super::scan::End;
use super::storage::{self, Access, Hints, SealStateFile};
use super::witness::{Head, Journald, Witness, WitnessProtection};
use super::{Appended, GAP_ACK_FILE, JournalError, Record, format_rfc3339};

/// Segment size at which the live segment is closed.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes appended after which [`Journal::snapshot_due`] says a state snapshot is due.
pub const DEFAULT_SNAPSHOT_BYTES: u64 = 8 * 1024 * 1024;
/// The least distance between snapshots a configuration may ask for.
pub const MIN_SNAPSHOT_BYTES: u64 = 1024;

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
    /// The event's kind, for the journal fault hook before the fdatasync.
    #[cfg(feature = "test-hooks")]
    kind: String,
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

impl Journal {
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
        self.append_group_telling(events, |_, _| {})
    }

    /// [`Journal::append_group`], calling `written(index, appended)` for each record as soon as
    /// its line is written (in the page cache, chained, MAC'd) and before the fdatasync that
    /// will cover it: for a caller that may act on a record that is written but not yet
    /// durable. Its head is still published only once it is durable, and the final result (in
    /// the returned vector) is an error if that fdatasync fails: the record is then rolled back
    /// with the others it was to cover.
    pub fn append_group_telling<E: Serialize>(
        &mut self,
        events: &[E],
        mut written: impl FnMut(usize, &Appended),
    ) -> Vec<Result<Appended, JournalError>> {
        let mut results = Vec::with_capacity(events.len());
        let mut covered = Vec::new();
        for event in events {
            match self.stage(event, &mut results, &mut covered) {
                Ok(appended) => {
                    written(results.len(), &appended);
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
        if let Err(source) = (&self.live).write_all(&bytes) {
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
            #[cfg(feature = "test-hooks")]
            kind: event
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
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
            #[cfg(feature = "test-hooks")]
            let hooked = self
                .unsynced
                .iter()
                .try_for_each(|unsynced| crate::test_hooks::before_journal_sync(&unsynced.kind));
            #[cfg(not(feature = "test-hooks"))]
            let hooked = Ok(());
            hooked.and_then(|()| self.live.sync_data())
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
