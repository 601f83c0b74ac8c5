//! Files of the journal besides the lines themselves: the state directory, the HMAC key, the
//! checkpoint side file and the daemon's lock. Every ownership or permission problem is an error
//! that says how to fix it; nothing here ever prints key material.
#![forbid(unsafe_code)]

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::record::{JournalKey, KEY_BYTES, hex, parse_hash, seal, write_canonical};
use super::{CHECKPOINT_FILE, JournalError, KEY_FILE};

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

/// The two files whose ownership and mode matter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guarded {
    /// The HMAC key: no group/other access at all.
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
fn check_file(
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

/// Opens an existing key file, or returns `None` if there is none.
pub(super) fn read_key(dir: &Path, access: Access) -> Result<Option<JournalKey>, JournalError> {
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
    Ok(Some(JournalKey::new(&key)))
}

/// Creates the key: 32 bytes from /dev/urandom written to a fresh 0600 temporary file (O_EXCL)
/// that is then hard-linked into place, so the key file is either complete or absent and an
/// existing key is never replaced. If another process won the race, its key is used.
pub(super) fn create_key(dir: &Path) -> Result<JournalKey, JournalError> {
    let path = dir.join(KEY_FILE);
    let temporary = dir.join(format!("{KEY_FILE}.new"));
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    let urandom = Path::new("/dev/urandom");
    let mut source =
        File::open(urandom).map_err(|error| io_error("random source", urandom, "open", error))?;
    let source_type = source
        .metadata()
        .map_err(|error| io_error("random source", urandom, "stat", error))?;
    if !std::os::unix::fs::FileTypeExt::is_char_device(&source_type.file_type()) {
        return Err(JournalError::Key {
            path,
            reason: "cannot be created: /dev/urandom is not a character device".to_owned(),
        });
    }
    source
        .read_exact(key.as_mut())
        .map_err(|error| io_error("random source", urandom, "read", error))?;

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
    Ok(JournalKey::new(&key))
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| io_error("state directory", dir, "fsync", error))
}

/// Opens the journal file for the daemon: created 0600 if missing, append-only, no symlinks.
pub(super) fn open_for_append(path: &Path) -> Result<File, JournalError> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| io_error("journal file", path, "open", error))?;
    check_file(&file, path, Access::Writer, Guarded::Journal)?;
    Ok(file)
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

/// Takes the daemon's exclusive lock on the journal for as long as `file` stays open.
pub(super) fn lock_exclusive(file: &File, path: &Path) -> Result<(), JournalError> {
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(JournalError::Locked {
            path: path.to_owned(),
        }),
        Err(error) => Err(io_error("journal file", path, "lock", error.into())),
    }
}

/// Whether a live daemon holds the journal: then an incomplete last line is a write in
/// progress (or being rolled back), not a crash artefact.
pub(super) fn daemon_holds_lock(file: &File) -> bool {
    match flock(file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            // Released at once so a daemon starting now is not refused because of a reader.
            let _ = flock(file, FlockOperation::Unlock);
            false
        }
        Err(error) => error == rustix::io::Errno::WOULDBLOCK,
    }
}

/// A verified position in the journal: the record `seq` occupies bytes `start..offset`
/// (newline included) on line `line`, and its line hashes to `hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Checkpoint {
    pub(super) seq: u64,
    pub(super) line: u64,
    pub(super) start: u64,
    pub(super) offset: u64,
    pub(super) hash: [u8; 32],
}

fn checkpoint_body(checkpoint: &Checkpoint) -> String {
    let value = json!({ "checkpoint": {
        "hash": hex(&checkpoint.hash),
        "line": checkpoint.line,
        "offset": checkpoint.offset,
        "seq": checkpoint.seq,
        "start": checkpoint.start,
    }});
    let mut body = String::new();
    write_canonical(&value, &mut body);
    body
}

/// Reads and authenticates the checkpoint side file; `None` if there is none.
pub(super) fn read_checkpoint(
    dir: &Path,
    key: &JournalKey,
) -> Result<Option<Checkpoint>, JournalError> {
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
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("journal checkpoint", &path, "open", error)),
    };
    let invalid = |reason: &str| JournalError::Checkpoint {
        path: path.clone(),
        reason: format!(
            "{reason}; it was altered or damaged. Run `verbd audit verify`; if the journal \
             verifies, delete the checkpoint file and restart (the next start re-checks everything)"
        ),
    };
    let value: Value = serde_json::from_str(text.trim_end_matches('\n'))
        .map_err(|_| invalid("is not valid JSON"))?;
    let fields = value
        .get("checkpoint")
        .ok_or_else(|| invalid("has no checkpoint object"))?;
    let number = |name: &str| fields.get(name).and_then(Value::as_u64);
    let (Some(seq), Some(line), Some(start), Some(offset), Some(hash), Some(tag)) = (
        number("seq"),
        number("line"),
        number("start"),
        number("offset"),
        fields
            .get("hash")
            .and_then(Value::as_str)
            .and_then(parse_hash),
        value
            .get("hmac")
            .and_then(Value::as_str)
            .and_then(parse_hash),
    ) else {
        return Err(invalid("is missing a field"));
    };
    let checkpoint = Checkpoint {
        seq,
        line,
        start,
        offset,
        hash,
    };
    let body = checkpoint_body(&checkpoint);
    if !key.verify(body.as_bytes(), &tag) || seal(&body, &tag) != text.trim_end_matches('\n') {
        return Err(invalid("does not match its HMAC"));
    }
    if start >= offset || seq == 0 || line == 0 {
        return Err(invalid("describes an impossible position"));
    }
    Ok(Some(checkpoint))
}

/// Atomically replaces the checkpoint side file (temporary file, fsync, rename, fsync dir).
pub(super) fn write_checkpoint(
    dir: &Path,
    key: &JournalKey,
    checkpoint: &Checkpoint,
) -> Result<(), JournalError> {
    let path = dir.join(CHECKPOINT_FILE);
    let temporary: PathBuf = dir.join(format!("{CHECKPOINT_FILE}.new"));
    let body = checkpoint_body(checkpoint);
    let mut text = seal(&body, &key.tag(body.as_bytes()));
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
