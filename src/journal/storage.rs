//! Files of the journal besides the lines themselves: the state directory, the segment files, the
//! local key, the sealing-key state (two slots overwritten in place), the `setup-keys` init file,
//! the `verbd-seal` credential, the position hints and the daemon's lock. Every ownership or
//! permission problem is an error that says how to fix it; nothing here ever prints key material.
#![forbid(unsafe_code)]

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::keys::{KEY_BYTES, SLOT_BYTES, Slot, SlotError};
use super::{
    ARCHIVE_PREFIX, CHECKPOINT_FILE, CREDENTIAL_NAME, JOURNAL_FILE, JournalError, KEY_FILE,
    SEAL_INIT_FILE, SEAL_STATE_FILE,
};

/// Who is opening the journal files, which decides the acceptable owner.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// The daemon: every file must be owned by the effective uid.
    Writer,
    /// A reader (`verbd audit …`): the owner must be the effective uid, or the reader is root.
    Reader,
}

impl Access {
    fn accepts_owner(self, owner: u32) -> bool {
        let euid = nix::unistd::geteuid().as_raw();
        owner == euid || (self == Access::Reader && euid == 0)
    }
}

fn io_error(
    what: &'static str,
    path: &Path,
    action: &'static str,
    source: io::Error,
) -> JournalError {
    JournalError::Io {
        what,
        path: path.to_owned(),
        action,
        source,
    }
}

/// Checks the state directory: a directory owned by the effective uid or root (any owner when a
/// root reader checks) that neither group nor other can write into, since whoever can write there
/// can replace the journal or its key. The writer creates it (mode 0700) if it is missing.
pub(super) fn prepare_state_dir(dir: &Path, access: Access) -> Result<(), JournalError> {
    let state_dir_error = |reason: String| JournalError::StateDir {
        path: dir.to_owned(),
        reason,
    };
    if access == Access::Writer {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|error| io_error("state directory", dir, "create", error))?;
    }
    let metadata =
        fs::metadata(dir).map_err(|error| io_error("state directory", dir, "stat", error))?;
    if !metadata.is_dir() {
        return Err(state_dir_error("is not a directory".to_owned()));
    }
    let euid = nix::unistd::geteuid().as_raw();
    if metadata.uid() != 0 && !access.accepts_owner(metadata.uid()) {
        return Err(state_dir_error(format!(
            "is owned by uid {} but verbd runs as uid {euid}; fix: chown {euid} {}",
            metadata.uid(),
            dir.display()
        )));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(state_dir_error(format!(
            "has mode {:o}, writable by group or other, who could replace the journal; fix: chmod 700 {}",
            metadata.mode() & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

/// The kinds of file whose ownership and mode matter.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Guarded {
    /// Key material: no group/other access at all.
    Key,
    /// The journal: no group/other write (whoever can write it can truncate it).
    Journal,
}

impl Guarded {
    fn forbidden_mode(self) -> u32 {
        match self {
            Guarded::Key => 0o077,
            Guarded::Journal => 0o022,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Guarded::Key => "journal key",
            Guarded::Journal => "journal file",
        }
    }

    fn fix_for_mode(self) -> &'static str {
        match self {
            Guarded::Key => {
                "the key may have leaked: rotate it (move the journal and key aside together and \
                 restart) or, if no one else could read it, chmod 600"
            }
            Guarded::Journal => "chmod 600",
        }
    }

    fn reject(self, path: &Path, reason: String) -> JournalError {
        match self {
            Guarded::Key => JournalError::Key {
                path: path.to_owned(),
                reason,
            },
            Guarded::Journal => JournalError::File {
                path: path.to_owned(),
                reason,
            },
        }
    }
}

/// Checks an opened key or journal file: regular, acceptable owner, no forbidden mode bits.
pub(super) fn check_file(
    file: &File,
    path: &Path,
    access: Access,
    guarded: Guarded,
) -> Result<fs::Metadata, JournalError> {
    let metadata = file
        .metadata()
        .map_err(|error| io_error(guarded.what(), path, "stat", error))?;
    if !metadata.is_file() {
        return Err(guarded.reject(path, "is not a regular file".to_owned()));
    }
    if !access.accepts_owner(metadata.uid()) {
        let euid = nix::unistd::geteuid().as_raw();
        return Err(guarded.reject(
            path,
            format!(
                "is owned by uid {} but verbd runs as uid {euid}; fix: chown {euid} {} (after \
                 checking who changed it)",
                metadata.uid(),
                path.display()
            ),
        ));
    }
    let mode = metadata.mode() & 0o7777;
    if mode & guarded.forbidden_mode() != 0 {
        return Err(guarded.reject(
            path,
            format!(
                "has mode {mode:o}, which grants group or other access it must not have; fix: {} {}",
                guarded.fix_for_mode(),
                path.display()
            ),
        ));
    }
    Ok(metadata)
}

/// Reads the local key `journal.key`, or returns `None` if there is none.
pub(super) fn read_key(
    dir: &Path,
    access: Access,
) -> Result<Option<Zeroizing<[u8; KEY_BYTES]>>, JournalError> {
    let path = dir.join(KEY_FILE);
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("journal key", &path, "open", error)),
    };
    let metadata = check_file(&file, &path, access, Guarded::Key)?;
    if metadata.len() != KEY_BYTES as u64 {
        return Err(JournalError::Key {
            path,
            reason: format!(
                "holds {} bytes instead of {KEY_BYTES}; it is damaged and every record made with \
                 it is unverifiable: restore it from backup",
                metadata.len()
            ),
        });
    }
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    file.read_exact(key.as_mut())
        .map_err(|error| io_error("journal key", &path, "read", error))?;
    Ok(Some(key))
}

/// 32 bytes from /dev/urandom (refused unless it is a character device).
pub(super) fn random_key() -> Result<Zeroizing<[u8; KEY_BYTES]>, JournalError> {
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    let urandom = Path::new("/dev/urandom");
    let mut source =
        File::open(urandom).map_err(|error| io_error("random source", urandom, "open", error))?;
    let source_type = source
        .metadata()
        .map_err(|error| io_error("random source", urandom, "stat", error))?;
    if !std::os::unix::fs::FileTypeExt::is_char_device(&source_type.file_type()) {
        return Err(JournalError::Key {
            path: urandom.to_owned(),
            reason: "is not a character device, so no key can be made".to_owned(),
        });
    }
    source
        .read_exact(key.as_mut())
        .map_err(|error| io_error("random source", urandom, "read", error))?;
    Ok(key)
}

/// Creates the key: 32 bytes from /dev/urandom written to a fresh 0600 temporary file (O_EXCL)
/// that is then hard-linked into place, so the key file is either complete or absent and an
/// existing key is never replaced. If another process won the race, its key is used.
pub(super) fn create_key(dir: &Path) -> Result<Zeroizing<[u8; KEY_BYTES]>, JournalError> {
    let path = dir.join(KEY_FILE);
    let temporary = dir.join(format!("{KEY_FILE}.new"));
    let key = random_key()?;

    // A leftover from a crash between create and link holds no key anyone relies on.
    match fs::remove_file(&temporary) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("journal key", &temporary, "remove", error)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .map_err(|error| io_error("journal key", &temporary, "create", error))?;
    file.write_all(key.as_ref())
        .and_then(|()| file.sync_all())
        .map_err(|error| io_error("journal key", &temporary, "write", error))?;
    drop(file);
    let linked = fs::hard_link(&temporary, &path);
    let removed = fs::remove_file(&temporary);
    match linked {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            return read_key(dir, Access::Writer)?.ok_or_else(|| JournalError::Key {
                path: path.clone(),
                reason: "appeared and vanished while being created".to_owned(),
            });
        }
        Err(error) => return Err(io_error("journal key", &path, "link", error)),
    }
    removed.map_err(|error| io_error("journal key", &temporary, "remove", error))?;
    sync_dir(dir)?;
    Ok(key)
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| io_error("state directory", dir, "fsync", error))
}

/// Opens the journal file for reading; `None` if it does not exist.
pub(super) fn open_for_reading(path: &Path) -> Result<Option<File>, JournalError> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => {
            check_file(&file, path, Access::Reader, Guarded::Journal)?;
            Ok(Some(file))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_error("journal file", path, "open", error)),
    }
}

/// Takes the daemon's exclusive lock (on the state directory itself, so it survives segment
/// rotation) for as long as the returned handle stays open.
pub(super) fn lock_exclusive(dir: &Path) -> Result<File, JournalError> {
    let handle =
        File::open(dir).map_err(|error| io_error("state directory", dir, "open", error))?;
    match flock(&handle, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(handle),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(JournalError::Locked {
            path: dir.join(JOURNAL_FILE),
        }),
        Err(error) => Err(io_error("state directory", dir, "lock", error.into())),
    }
}

/// Whether a live daemon holds the journal: then an incomplete last line is a write in
/// progress (or being rolled back), not a crash artefact.
pub(super) fn daemon_holds_lock(dir: &Path) -> bool {
    let Ok(handle) = File::open(dir) else {
        return false;
    };
    match flock(&handle, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            // Released at once so a daemon starting now is not refused because of a reader.
            let _ = flock(&handle, FlockOperation::Unlock);
            false
        }
        Err(error) => error == rustix::io::Errno::WOULDBLOCK,
    }
}

/// One segment file. The live segment is `journal.jsonl`; closed ones are
/// `journal-NNNNNN.jsonl`, numbered from 1 without gaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SegmentFile {
    /// The number in the file name; for the live segment, one more than the last archive.
    pub(super) number: u64,
    pub(super) path: PathBuf,
    pub(super) live: bool,
}

pub(super) fn archive_name(number: u64) -> String {
    format!("{ARCHIVE_PREFIX}{number:06}.jsonl")
}

/// The segment files in order: archives by number, then the live segment if it exists. An
/// archive name that does not parse is an error (something foreign in the state directory).
pub(super) fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>, JournalError> {
    let mut archives = Vec::new();
    let entries =
        fs::read_dir(dir).map_err(|error| io_error("state directory", dir, "list", error))?;
    for entry in entries {
        let entry = entry.map_err(|error| io_error("state directory", dir, "list", error))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(ARCHIVE_PREFIX) else {
            continue;
        };
        let number = rest
            .strip_suffix(".jsonl")
            .filter(|digits| digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u64>().ok())
            .filter(|number| *number >= 1);
        match number {
            Some(number) => archives.push(SegmentFile {
                number,
                path: entry.path(),
                live: false,
            }),
            None if rest.ends_with(".new") => {}
            None => {
                return Err(JournalError::File {
                    path: entry.path(),
                    reason: format!(
                        "looks like a journal segment but is not named {ARCHIVE_PREFIX}NNNNNN.jsonl; \
                         move it out of the state directory"
                    ),
                });
            }
        }
    }
    archives.sort_by_key(|segment| segment.number);
    let live_number = archives.last().map_or(1, |last| last.number + 1);
    let live = dir.join(JOURNAL_FILE);
    if fs::symlink_metadata(&live).is_ok() {
        archives.push(SegmentFile {
            number: live_number,
            path: live,
            live: true,
        });
    }
    Ok(archives)
}

/// The daemon's sealing-key state file: two slots, each written in place. A new state goes into
/// the slot not holding the current one and is made durable; then the old slot is overwritten
/// with zeros and made durable, so the previous key is not left in the file. A crash between the
/// two leaves two valid slots; the higher serial wins.
pub(super) struct SealStateFile {
    file: File,
    path: PathBuf,
    current_slot: Option<usize>,
    serial: u64,
}

fn read_slots(file: &File, path: &Path) -> Result<[Option<Slot>; 2], JournalError> {
    use std::os::unix::fs::FileExt;
    let mut bytes = Zeroizing::new([0u8; 2 * SLOT_BYTES]);
    let length = file
        .metadata()
        .map_err(|error| io_error("sealing key", path, "stat", error))?
        .len();
    if length != 0 && length != (2 * SLOT_BYTES) as u64 {
        return Err(JournalError::Key {
            path: path.to_owned(),
            reason: format!(
                "holds {length} bytes instead of {}; it was damaged or replaced",
                2 * SLOT_BYTES
            ),
        });
    }
    if length == 0 {
        return Ok([None, None]);
    }
    file.read_exact_at(bytes.as_mut(), 0)
        .map_err(|error| io_error("sealing key", path, "read", error))?;
    let mut slots = [None, None];
    let mut damage = None;
    for (index, slot) in slots.iter_mut().enumerate() {
        match Slot::decode(&bytes[index * SLOT_BYTES..(index + 1) * SLOT_BYTES]) {
            Ok(decoded) => *slot = Some(decoded),
            Err(SlotError::Empty) => {}
            Err(SlotError::Damaged(reason)) => damage = Some(reason),
        }
    }
    if slots.iter().all(Option::is_none)
        && let Some(reason) = damage
    {
        return Err(JournalError::Key {
            path: path.to_owned(),
            reason: format!(
                "{reason}; the sealing key is lost. The journal up to now still verifies with \
                 the verification key; run `verbd audit setup-keys` to start a new key generation"
            ),
        });
    }
    Ok(slots)
}

fn newest(slots: [Option<Slot>; 2]) -> Option<(usize, Slot)> {
    let [first, second] = slots;
    match (first, second) {
        (Some(a), Some(b)) if b.serial > a.serial => Some((1, b)),
        (Some(a), _) => Some((0, a)),
        (None, Some(b)) => Some((1, b)),
        (None, None) => None,
    }
}

impl SealStateFile {
    /// Opens (creating, empty) the daemon's state file and returns the current slot, if any.
    pub(super) fn open(dir: &Path) -> Result<(SealStateFile, Option<Slot>), JournalError> {
        let path = dir.join(SEAL_STATE_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|error| io_error("sealing key", &path, "open", error))?;
        check_file(&file, &path, Access::Writer, Guarded::Key)?;
        let current = newest(read_slots(&file, &path)?);
        let (current_slot, serial) = match &current {
            Some((index, slot)) => (Some(*index), slot.serial),
            None => (None, 0),
        };
        Ok((
            SealStateFile {
                file,
                path,
                current_slot,
                serial,
            },
            current.map(|(_, slot)| slot),
        ))
    }

    /// Stores `slot` (its serial is set here) and erases the previous one from the file.
    pub(super) fn store(&mut self, mut slot: Slot) -> Result<(), JournalError> {
        use std::os::unix::fs::FileExt;
        let target = match self.current_slot {
            Some(0) => 1,
            _ => 0,
        };
        self.serial += 1;
        slot.serial = self.serial;
        let encoded = slot.encode();
        let write = |offset: usize, bytes: &[u8]| {
            self.file
                .write_all_at(bytes, offset as u64)
                .and_then(|()| self.file.sync_data())
                .map_err(|error| io_error("sealing key", &self.path, "write", error))
        };
        write(target * SLOT_BYTES, encoded.as_ref())?;
        let old = 1 - target;
        write(old * SLOT_BYTES, &[0u8; SLOT_BYTES])?;
        self.current_slot = Some(target);
        Ok(())
    }
}

/// Reads the daemon's current sealing state without opening it for writing (for `verify` run
/// on the host by root or the daemon user). `None` if there is none.
pub(super) fn read_seal_state(dir: &Path) -> Result<Option<Slot>, JournalError> {
    let path = dir.join(SEAL_STATE_FILE);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("sealing key", &path, "open", error)),
    };
    check_file(&file, &path, Access::Reader, Guarded::Key)?;
    Ok(newest(read_slots(&file, &path)?).map(|(_, slot)| slot))
}

/// Reads one slot from a single-slot file (the init file or the credential).
fn read_single_slot(path: &Path, access: Option<Access>) -> Result<Option<Slot>, JournalError> {
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("initial sealing key", path, "open", error)),
    };
    if let Some(access) = access {
        check_file(&file, path, access, Guarded::Key)?;
    }
    let mut bytes = Zeroizing::new(Vec::with_capacity(SLOT_BYTES + 1));
    (&mut file)
        .take(SLOT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| io_error("initial sealing key", path, "read", error))?;
    match Slot::decode(&bytes) {
        Ok(slot) if slot.epoch == 0 => Ok(Some(slot)),
        Ok(_) => Err(JournalError::Key {
            path: path.to_owned(),
            reason: "is not an initial key (epoch 0); make a new one with `verbd audit setup-keys`"
                .to_owned(),
        }),
        Err(SlotError::Empty) => Ok(None),
        Err(SlotError::Damaged(reason)) => Err(JournalError::Key {
            path: path.to_owned(),
            reason: format!("{reason}; make a new one with `verbd audit setup-keys`"),
        }),
    }
}

/// The initial key `setup-keys` left in the state directory, if any.
pub(super) fn read_init(dir: &Path) -> Result<Option<Slot>, JournalError> {
    read_single_slot(&dir.join(SEAL_INIT_FILE), Some(Access::Writer))
}

/// The initial key systemd passed as the credential `verbd-seal`, if any.
pub(super) fn read_credential(credentials_dir: &Path) -> Result<Option<Slot>, JournalError> {
    read_single_slot(&credentials_dir.join(CREDENTIAL_NAME), None)
}

/// Overwrites the init file with zeros, makes that durable, and removes it.
pub(super) fn erase_init(dir: &Path) -> Result<(), JournalError> {
    let path = dir.join(SEAL_INIT_FILE);
    let erase = || -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        file.write_all(&[0u8; SLOT_BYTES])?;
        file.sync_data()?;
        fs::remove_file(&path)
    };
    erase().map_err(|error| io_error("initial sealing key", &path, "erase", error))?;
    sync_dir(dir)
}

/// Writes the init file for the next daemon start: 0600, owned by `owner` (the state
/// directory's owner, i.e. the daemon user), never replacing an existing one.
pub(super) fn write_init(
    dir: &Path,
    slot: &Slot,
    owner: (u32, u32),
) -> Result<PathBuf, JournalError> {
    let path = dir.join(SEAL_INIT_FILE);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|error| {
            if error.kind() == io::ErrorKind::AlreadyExists {
                JournalError::Key {
                    path: path.clone(),
                    reason: "already exists: an initial key is waiting for the next daemon start; \
                             start the daemon, or remove the file to make a new key"
                        .to_owned(),
                }
            } else {
                io_error("initial sealing key", &path, "create", error)
            }
        })?;
    file.write_all(slot.encode().as_ref())
        .and_then(|()| file.sync_all())
        .map_err(|error| io_error("initial sealing key", &path, "write", error))?;
    std::os::unix::fs::fchown(&file, Some(owner.0), Some(owner.1))
        .map_err(|error| io_error("initial sealing key", &path, "chown", error))?;
    sync_dir(dir)?;
    Ok(path)
}

/// A position in the journal: record `seq` occupies bytes `start..end` (newline included) of
/// segment `segment`, on line `line`, and its line hashes to `hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub(super) segment: u64,
    pub(super) line: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) seq: u64,
    #[serde(with = "hash_hex")]
    pub(super) hash: [u8; 32],
}

mod hash_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(hash: &[u8; 32], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::super::record::hex(hash))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(deserializer)?;
        super::super::record::parse_hash(&text)
            .ok_or_else(|| serde::de::Error::custom("not 64 lowercase hex digits"))
    }
}

/// Where the daemon can resume without reading history: the last verified end (`anchor`) and
/// the latest state snapshot. Only a hint: every mark is checked against the segment before it
/// is used, and a missing file only costs a longer start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Hints {
    pub(super) anchor: Option<Mark>,
    pub(super) snapshot: Option<Mark>,
}

pub(super) fn read_hints(dir: &Path) -> Result<Hints, JournalError> {
    let path = dir.join(CHECKPOINT_FILE);
    let mut text = String::new();
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file
            .take(4096)
            .read_to_string(&mut text)
            .map_err(|error| io_error("journal checkpoint", &path, "read", error))?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Hints::default()),
        Err(error) => return Err(io_error("journal checkpoint", &path, "open", error)),
    };
    serde_json::from_str(&text).map_err(|error| JournalError::Checkpoint {
        path,
        reason: format!(
            "is not a valid checkpoint ({error}); it was altered or damaged. Run `verbd audit \
             verify`; if the journal verifies, delete the checkpoint file and restart"
        ),
    })
}

/// Atomically replaces the hints file (temporary file, fsync, rename, fsync dir).
pub(super) fn write_hints(dir: &Path, hints: &Hints) -> Result<(), JournalError> {
    let path = dir.join(CHECKPOINT_FILE);
    let temporary: PathBuf = dir.join(format!("{CHECKPOINT_FILE}.new"));
    let mut text = serde_json::to_string(hints).map_err(JournalError::Serialize)?;
    text.push('\n');
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .map_err(|error| io_error("journal checkpoint", &temporary, "create", error))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(|error| io_error("journal checkpoint", &temporary, "write", error))?;
    fs::rename(&temporary, &path)
        .map_err(|error| io_error("journal checkpoint", &path, "rename", error))?;
    sync_dir(dir)
}
