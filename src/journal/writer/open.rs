//! Opening the journal: the start-up check, as named steps that [`Journal::open_with`] runs in
//! order — lock (the one writer) → witness → key → migration (a v1 journal verified and closed
//! as segment 1) → tail check (from the last seal to the end: chain, sequence, epochs, MACs,
//! the witness's heads; a gap only with the operator's acknowledgement) → key plan (continue the
//! generation, or start one from `setup-keys` or the credential) → the writer → resume (roll
//! back an incomplete last line, record the acknowledged gap, seal what the last run left open,
//! start the new generation, record a repaired tail).
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::{Growth, Journal, JournalConfig, header, io_error, open_live};
use crate::journal::keys::{Custody, EpochKey, EpochLimits, Slot};
use crate::journal::read::{GapAck, read_gap_ack};
use crate::journal::record::{hex, parse_line};
use crate::journal::scan::{
    Checker, End, EpochState, KeyRing, Origin, SegmentReader, TornTail, witness_lines,
};
use crate::journal::storage::{self, Access, Hints, Mark, SealStateFile, SegmentFile};
use crate::journal::witness::{Witness, WitnessLine, WitnessProtection};
use crate::journal::{JOURNAL_FILE, JournalError, ProblemKind};

/// Most heads the start-up check reads back from the witness after the last seal (an epoch is
/// 1000 records by default; more means someone appended to the witness).
const WITNESS_TAIL_CAP: usize = 200_000;

/// What the start-up check found.
struct Checked {
    end: Option<End>,
    epochs: EpochState,
    torn: Option<(SegmentFile, TornTail, u64)>,
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

/// The segments after a v1 journal (if any) was migrated, and what the migration cut.
struct Migration {
    segments: Vec<SegmentFile>,
    /// An incomplete last line the migration cut (to be journaled).
    torn: Option<TornTail>,
    from_v1: bool,
}

/// What the checks before the writer established: the locked directory, its witness, its
/// segments and hints, the key state file and where the next record goes.
struct Found {
    dir: PathBuf,
    lock: File,
    witness: Witness,
    segments: Vec<SegmentFile>,
    hints: Hints,
    key_state: SealStateFile,
    tail: Tail,
}

/// Where the next record goes.
struct Tail {
    /// The last complete record, or the start of the first segment.
    end: End,
    live_path: PathBuf,
    live_exists: bool,
    /// The live segment's number (the one to create when none is live).
    segment: u64,
}

impl Tail {
    fn after(dir: &Path, segments: &[SegmentFile], end: Option<End>) -> Tail {
        let end = end.unwrap_or(End {
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
        Tail {
            end,
            live_path: dir.join(JOURNAL_FILE),
            live_exists,
            segment,
        }
    }
}

impl KeyPlan {
    /// The key the next records are sealed with first: the continued one, the old one while its
    /// open epoch is sealed, or the new generation's first.
    fn current_key(&self) -> (EpochKey, EpochLimits, Custody) {
        match self {
            KeyPlan::Continue(key, limits, custody) => (key.duplicate(), *limits, *custody),
            KeyPlan::Start {
                seal_first: Some((key, limits, custody)),
                ..
            } => (key.duplicate(), *limits, *custody),
            KeyPlan::Start {
                initial, custody, ..
            } => (initial.epoch_key(), initial.limits, *custody),
        }
    }
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
    pub fn open_with(mut config: JournalConfig) -> Result<Journal, JournalError> {
        let dir = config.state_dir.clone();
        // Lock: the one writer.
        storage::prepare_state_dir(&dir, Access::Writer)?;
        let lock = storage::lock_exclusive(&dir)?;
        // Witness: opened earlier (before a privilege drop), or here as the current user.
        let witness = match config.witness.take() {
            Some(witness) => witness,
            None => Witness::open(&dir)?,
        };
        // Key: `journal.key`, which a local generation and a v1 journal need.
        let local_key = storage::read_key(&dir, Access::Writer)?;
        let migration = migrate_if_v1(&dir, local_key.as_deref())?;
        // Tail check.
        let hints = storage::read_hints(&dir)?;
        let (key_state, state_slot) = SealStateFile::open(&dir)?;
        let checked = check_tail(
            &dir,
            &migration.segments,
            &hints,
            local_key.as_deref(),
            &state_slot,
            &witness,
        )?;
        let tail = Tail::after(&dir, &migration.segments, checked.end);
        let ack = gap_acknowledgement(&dir, &checked, &tail, &witness, migration.from_v1)?;
        // Key plan.
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
        // The writer, then what the start writes.
        let live_exists = tail.live_exists;
        let found = Found {
            dir,
            lock,
            witness,
            segments: migration.segments,
            hints,
            key_state,
            tail,
        };
        let (mut journal, live_length) = Journal::at_tail(found, &checked.epochs, &config, &plan)?;
        if live_exists && live_length != journal.end.offset {
            journal.roll_back_torn_line()?;
        }
        if let Some(ack) = ack {
            journal.acknowledge(&ack)?;
        }
        journal.resume_keys(plan)?;
        let torn = checked.torn.map(|(_, torn, _)| torn).or(migration.torn);
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

    /// The writer at the checked tail under the key plan, before anything is written, and the
    /// live segment's length. (Past the few values it works out, its length is the [`Journal`]
    /// it fills in.)
    fn at_tail(
        found: Found,
        epochs: &EpochState,
        config: &JournalConfig,
        plan: &KeyPlan,
    ) -> Result<(Journal, u64), JournalError> {
        let Found {
            dir,
            lock,
            witness,
            segments,
            hints,
            key_state,
            tail,
        } = found;
        let live = open_live(&tail.live_path, !tail.live_exists)?;
        let live_length = live
            .metadata()
            .map_err(|source| io_error("journal file", &tail.live_path, "stat", source))?
            .len();
        let (archived_bytes, bytes_since_snapshot) = segment_bytes(&segments, live_length, &hints);
        let (key, limits, custody) = plan.current_key();
        // The key can be ahead of the journal only across an acknowledged gap (a lost seal):
        // the records of the old open epoch then stay unsealed, on record as lost.
        let key_ahead = epochs
            .epoch
            .is_some_and(|epoch| key.epoch() > if epochs.sealed { epoch + 1 } else { epoch });
        let open_epoch_records = if epochs.sealed || key_ahead {
            0
        } else {
            epochs.records
        };
        let segment = tail.segment;
        let journal = Journal {
            dir,
            _lock: lock,
            live,
            live_path: tail.live_path,
            end: if tail.live_exists && tail.end.segment == segment {
                tail.end
            } else {
                End {
                    segment,
                    line: 0,
                    offset: 0,
                    last_start: 0,
                    ..tail.end
                }
            },
            segment,
            archived_bytes,
            key,
            key_state,
            key_state_stale: matches!(plan, KeyPlan::Continue(..)),
            limits,
            custody,
            epoch_first_seq: epochs.first_seq.filter(|_| !key_ahead),
            epoch_records: open_epoch_records,
            epoch_opened: Instant::now(),
            witness,
            pending_heads: Default::default(),
            journald: config
                .journald_socket
                .as_deref()
                .and_then(crate::journal::witness::Journald::connect),
            hints,
            segment_bytes: config.segment_bytes.max(4096),
            snapshot_bytes: config.snapshot_bytes.max(super::MIN_SNAPSHOT_BYTES),
            bytes_since_snapshot,
            rollback_pending: false,
            live_missing: false,
            unsynced: Vec::new(),
            durable: None,
            appended_records: 0,
            appended_bytes: 0,
            record_syncs: 0,
            growth: Growth {
                buckets: Default::default(),
                opened: Instant::now(),
            },
        };
        Ok((journal, live_length))
    }

    /// An incomplete last line: rolled back before anything is appended.
    fn roll_back_torn_line(&mut self) -> Result<(), JournalError> {
        self.roll_back().map_err(|source| {
            io_error(
                "journal file",
                &self.live_path,
                "truncate the incomplete last line",
                source,
            )
        })
    }

    /// The start's writes under the key plan: a new segment's header, the key state, the seal
    /// of the epoch the last run left open, and the new generation (whose first record can be
    /// the new segment's header).
    fn resume_keys(&mut self, plan: KeyPlan) -> Result<(), JournalError> {
        let segment = self.segment;
        let needs_header = segment > 1 && self.end.line == 0;
        let generation_opens_segment = matches!(
            plan,
            KeyPlan::Start {
                seal_first: None,
                ..
            }
        ) && needs_header;
        if needs_header && !generation_opens_segment {
            self.write_event(&header(segment), None)?;
        }
        if self.key_state_stale {
            self.store_key()?;
        }
        match plan {
            KeyPlan::Continue(..) => {
                if self.epoch_records > 0 {
                    self.seal("start")?;
                }
            }
            KeyPlan::Start {
                initial,
                custody,
                seal_first,
            } => {
                if seal_first.is_some() && self.epoch_records > 0 {
                    self.seal("rekey")?;
                }
                self.start_generation(
                    &initial,
                    custody,
                    generation_opens_segment.then_some(segment),
                )?;
                if custody == Custody::SetupKeys {
                    storage::erase_init(&self.dir)?;
                }
            }
        }
        Ok(())
    }
}

/// The segments of `dir`; a live segment of v1 records is verified with `journal.key` and
/// closed as segment 1 first (it must then be the only segment).
fn migrate_if_v1(dir: &Path, local_key: Option<&[u8; 32]>) -> Result<Migration, JournalError> {
    let segments = storage::list_segments(dir)?;
    let Some(live) = segments.iter().find(|segment| segment.live) else {
        return Ok(Migration {
            segments,
            torn: None,
            from_v1: false,
        });
    };
    if !first_line_is_v1(&live.path)? {
        return Ok(Migration {
            segments,
            torn: None,
            from_v1: false,
        });
    }
    if segments.len() > 1 {
        return Err(JournalError::File {
            path: live.path.clone(),
            reason: "holds v1 records but closed segments exist: it does not belong here"
                .to_owned(),
        });
    }
    let torn = migrate_v1(dir, &live.path, local_key)?;
    Ok(Migration {
        segments: storage::list_segments(dir)?,
        torn,
        from_v1: true,
    })
}

/// The operator's acknowledgement the tail needs, if it needs one: records cut off the end, or a
/// journal whose witness lost its heads. Without a matching acknowledgement the start is
/// refused; with one, the live segment must be there.
fn gap_acknowledgement(
    dir: &Path,
    checked: &Checked,
    tail: &Tail,
    witness: &Witness,
    migrated_from_v1: bool,
) -> Result<Option<GapAck>, JournalError> {
    let end = &tail.end;
    let ack = match checked.truncated {
        Some((from, to, hash)) => {
            let ack = read_gap_ack(dir, witness.protection())?;
            match ack {
                Some(ack) if ack.from == from && ack.to == to && ack.hash == hex(&hash) => {
                    Some(ack)
                }
                _ => {
                    return Err(JournalError::MissingRecords {
                        path: tail.live_path.clone(),
                        dir: dir.to_owned(),
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
            && (!migrated_from_v1 || witness.protection() != WitnessProtection::Unprotected) =>
        {
            match read_gap_ack(dir, witness.protection())? {
                Some(ack)
                    if ack.witness_lost && ack.to == end.seq && ack.hash == hex(&end.hash) =>
                {
                    Some(ack)
                }
                _ => {
                    return Err(JournalError::WitnessLost {
                        path: witness.path().to_owned(),
                        dir: dir.to_owned(),
                        end: end.seq,
                        hash: hex(&end.hash),
                    });
                }
            }
        }
        None => None,
    };
    if ack.is_some() && !tail.live_exists {
        return Err(JournalError::File {
            path: tail.live_path.clone(),
            reason: "is missing and so are records before it: restore the segment files from \
                     a backup before acknowledging the gap"
                .to_owned(),
        });
    }
    Ok(ack)
}

/// Bytes in the closed segments, and bytes a restart replays now (after the latest snapshot):
/// a daemon that restarts often still snapshots once that much history piled up across its
/// runs.
fn segment_bytes(segments: &[SegmentFile], live_length: u64, hints: &Hints) -> (u64, u64) {
    let archived_bytes: u64 = segments
        .iter()
        .filter(|segment| !segment.live)
        .filter_map(|segment| fs::metadata(&segment.path).ok())
        .map(|metadata| metadata.len())
        .sum();
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
    (archived_bytes, bytes_since_snapshot)
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

/// Verifies a v1 journal completely with `journal.key` and closes it as segment 1. Returns an
/// incomplete last line it cut (to be journaled).
fn migrate_v1(
    dir: &Path,
    path: &Path,
    key: Option<&[u8; 32]>,
) -> Result<Option<TornTail>, JournalError> {
    let Some(key) = key else {
        return Err(JournalError::Key {
            path: dir.join(crate::journal::KEY_FILE),
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
    let (origin, start_index, start_offset, lines_before) = anchor(dir, segments, hints);
    let mut keys = KeyRing::default();
    if let Some(key) = local_key {
        keys.add_local(key);
    }
    if let Some(slot) = state {
        keys.set_live(slot.duplicate());
    }
    let witness_feed = witness_feed(witness, origin)?;
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

/// Where the check starts: after the checkpoint's mark when it still matches, from the
/// beginning otherwise (origin, index of the first segment, its offset, lines before it).
fn anchor(dir: &Path, segments: &[SegmentFile], hints: &Hints) -> (Origin, usize, u64, u64) {
    let checkpoint_error = |reason: String| JournalError::Checkpoint {
        path: dir.join(crate::journal::CHECKPOINT_FILE),
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
    anchored.unwrap_or((Origin::Beginning, 0, 0, 0))
}

/// The witness's heads the check compares with the records: those after the mark (at most
/// [`WITNESS_TAIL_CAP`]), or the whole witness when the check starts from the beginning.
fn witness_feed(
    witness: &Witness,
    origin: Origin,
) -> Result<Box<dyn Iterator<Item = WitnessLine>>, JournalError> {
    let feed: Box<dyn Iterator<Item = WitnessLine>> = match origin {
        Origin::After { seq, .. } => {
            let (entries, garbage) = witness.tail_after(seq, WITNESS_TAIL_CAP)?;
            let lines: Vec<WitnessLine> = (0..garbage)
                .map(|_| WitnessLine::Garbage(0))
                .chain(entries.into_iter().map(WitnessLine::Head))
                .collect();
            Box::new(lines.into_iter())
        }
        _ => match crate::journal::witness::WitnessStream::open(witness.path())? {
            Some(stream) => witness_lines(stream),
            None => Box::new(std::iter::empty()),
        },
    };
    Ok(feed)
}

/// [`crate::journal::scan::check_mark`], returning the `prev` of the marked line.
fn check_mark_prev(file: &File, path: &Path, mark: &Mark) -> Result<[u8; 32], String> {
    crate::journal::scan::check_mark(file, path, mark)?;
    let mut line = vec![0u8; (mark.end - mark.start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut line, mark.start)
        .map_err(|error| error.to_string())?;
    line.pop();
    parse_line(&line, mark.segment, mark.line)
        .map(|parsed| parsed.prev)
        .map_err(|fault| fault.message)
}

/// The key that continues the journal's generation, at the epoch the journal is at: from the
/// key state, or (without one) from `journal.key` or the credential (`credential`: the fresh
/// slot when it came from the credential, not from `setup-keys`); `None` when the journal has no
/// generation yet and there is no key state. `fresh_given`: a new generation is on offer, so a
/// generation that cannot be continued is no error.
fn continuing_key(
    dir: &Path,
    acknowledged_gap: bool,
    epochs: &EpochState,
    state: Option<Slot>,
    local_key: Option<&[u8; 32]>,
    (credential, fresh_given): (Option<&Slot>, bool),
) -> Result<Option<(EpochKey, EpochLimits, Custody)>, JournalError> {
    let expected_epoch = |slot_epoch: u64| match epochs.epoch {
        Some(epoch) if epochs.sealed => epoch + 1,
        Some(epoch) => epoch,
        None => slot_epoch,
    };
    let state_path = dir.join(crate::journal::SEAL_STATE_FILE);
    Ok(match (epochs.generation, state) {
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
                .and_then(|k0| from_k0(k0, Custody::Local))
                .or_else(|| credential.and_then(|slot| from_k0(&slot.key, Custody::Credential)));
            if resumed.is_none() && !fresh_given {
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
    })
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
    let continuing = continuing_key(
        dir,
        acknowledged_gap,
        epochs,
        state,
        local_key.as_deref(),
        (fresh.as_ref().filter(|_| !from_init_file), fresh.is_some()),
    )?;
    if let Some(fresh) = fresh {
        let fresh_generation = fresh.fingerprint;
        let already_current = continuing
            .as_ref()
            .is_some_and(|(key, _, _)| key.fingerprint() == &fresh_generation);
        if already_current {
            if from_init_file {
                return Err(JournalError::Key {
                    path: dir.join(crate::journal::SEAL_INIT_FILE),
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
