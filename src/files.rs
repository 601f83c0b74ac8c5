//! Built-in file verbs (`file.write`, `file.append`, `file.read`, `file.list`) confined to
//! path allowlists, and the lexical write check behind the Claude Code hook's `check` op.
//!
//! Invariants (README invariant 10, writes stay inside allowlists):
//! - A path is refused before any syscall unless it is absolute, normalized (no `.`/`..`
//!   components, no repeated or trailing slash, no NUL byte) and lexically beneath one of the
//!   verb's roots (the longest matching root is used).
//! - A path naming a protected entry (see [`crate::protected`]) at any depth, matched on both
//!   the root-relative and the absolute path, is refused for every operation; nothing is touched.
//! - Resolution is race-free: the root is opened once (`O_PATH|O_DIRECTORY`, no symlinks in the
//!   root path itself), then the parent directory is opened beneath it with `openat2`
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, and every later syscall is
//!   relative to that directory fd. A symlink at any component, including the final one and one
//!   swapped in during the call, is never followed: writes replace the directory entry by
//!   `renameat`, appends and reads open with `O_NOFOLLOW` under the same resolve flags.
//! - Writes are atomic: a temp file with a random name (`O_EXCL`) in the target's directory is
//!   written, fsynced and chmodded, then renamed into place (`RENAME_NOREPLACE` for
//!   `create_only`) and the directory is fsynced. A failed write leaves no temp file behind.
//! - No file verb ever creates a file with an executable, setuid, setgid or sticky bit, and
//!   appends refuse files that have one (appending to a script would change code).
//! - Appends and reads refuse files with more than one hard link: such a file may be the same
//!   inode as a file outside the root.
//! - Every descriptor a file verb opens is close-on-exec, and reads and appends open with
//!   `O_NONBLOCK`: a FIFO, or a file under a lease another process (an agent) holds, is refused
//!   at once instead of holding the call until that process lets go.
//! - `file.list` hides protected entries (it does not reveal that `.ssh` or `CLAUDE.md` exist)
//!   and entries that are verbd's own in-flight temp files.
#![forbid(unsafe_code)]

use crate::pinned::{BENEATH, openat2_restarting};
use crate::protected::ProtectedNames;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The mode a written file gets when the policy names none.
pub const DEFAULT_MODE: u32 = 0o644;

/// Bits no file verb ever sets: any execute bit, setuid, setgid, sticky.
const FORBIDDEN_MODE_BITS: u32 = 0o7111;

/// Largest number of entries `file.list` returns.
pub const MAX_LIST_ENTRIES: usize = 10_000;

/// Prefix of the temp files a write creates next to its target.
const TEMP_PREFIX: &str = ".verbd-tmp-";

/// How many random temp names a write tries before giving up.
const TEMP_NAME_ATTEMPTS: usize = 16;

/// Which built-in file verb a spec describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    Write,
    Append,
    Read,
    List,
}

impl FileOp {
    /// The builtin name used in the policy (`file.write`, …).
    pub fn builtin_name(self) -> &'static str {
        match self {
            FileOp::Write => "file.write",
            FileOp::Append => "file.append",
            FileOp::Read => "file.read",
            FileOp::List => "file.list",
        }
    }
}

/// A file verb as the policy declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileVerbSpec {
    pub op: FileOp,
    /// Absolute, canonical directories the verb may touch beneath.
    pub roots: Vec<PathBuf>,
    /// Largest file (write, read, or file size after an append) in bytes.
    pub max_size: u64,
    /// `file.write` only: refuse to replace an existing file.
    pub create_only: bool,
    /// Modes a caller may ask for; the first is the default. Never any x/setuid/setgid/sticky bit.
    pub allowed_modes: Vec<u32>,
    pub protected: ProtectedNames,
}

/// What a write or append did, for the caller and the journal (never the content itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReceipt {
    pub path: PathBuf,
    /// Bytes written: the whole file for a write, the appended bytes for an append.
    pub size: u64,
    /// Lower-case hex sha256 of the bytes written.
    pub sha256: String,
    /// True when the file did not exist before.
    pub created: bool,
}

/// The kind of a listed directory entry (symlinks are reported, never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of `file.list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    pub name: String,
    pub kind: EntryKind,
    /// Size in bytes as `lstat` reports it.
    pub size: u64,
}

/// Why a file verb refused or failed. Every message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("invalid file verb configuration: {0}")]
    InvalidSpec(String),
    #[error("this verb is {actual}, it cannot perform {requested}")]
    WrongOp {
        actual: &'static str,
        requested: &'static str,
    },
    #[error("path {path:?} is not absolute: give the full path beneath one of the allowed roots")]
    NotAbsolute { path: PathBuf },
    #[error(
        "path {path:?} is not in normal form ({problem}): write it without `.` or `..` components, repeated or trailing slashes, or NUL bytes"
    )]
    NotNormalized {
        path: PathBuf,
        problem: &'static str,
    },
    #[error("path {} is outside the allowed roots ({}): write beneath one of them", path.display(), display_paths(roots))]
    NotUnderRoot { path: PathBuf, roots: Vec<PathBuf> },
    #[error("path {} resolves outside its root {}: use a path that stays beneath the root", path.display(), root.display())]
    Escape { path: PathBuf, root: PathBuf },
    #[error("{} is a symbolic link: file verbs never follow symlinks; use the real path of the file", component.display())]
    Symlink { component: PathBuf },
    #[error("path {} is or is inside the {rule}: files that tools run or obey, agent memory and settings, keys and verbd's own files are never written by file verbs; choose another path", path.display())]
    Protected { path: PathBuf, rule: String },
    #[error("{size} bytes is more than this verb's limit of {max} bytes: make the content smaller")]
    TooLarge { size: u64, max: u64 },
    #[error("{} already exists and this verb only creates new files: choose a new name", path.display())]
    Exists { path: PathBuf },
    #[error("{} does not exist (or one of its parent directories does not): file verbs do not create directories", path.display())]
    NotFound { path: PathBuf },
    #[error("{} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("{} is not a regular file", path.display())]
    NotARegularFile { path: PathBuf },
    #[error(
        "mode {mode:#o} is not allowed: allowed modes are {}",
        display_modes(allowed)
    )]
    ModeNotAllowed { mode: u32, allowed: Vec<u32> },
    #[error("{} is executable (mode {mode:#o}): file verbs never modify executable files", path.display())]
    ExecutableTarget { path: PathBuf, mode: u32 },
    #[error("{} has {links} hard links and may be the same file as one outside the root: file verbs refuse hard-linked files", path.display())]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{} is under a lease another process holds (opening it would wait for that process): try again once it releases the file", path.display())]
    Leased { path: PathBuf },
    #[error("{} has more than {max} entries: list a subdirectory instead", path.display())]
    TooManyEntries { path: PathBuf, max: usize },
    #[error("{operation} {} failed: {source}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn display_modes(modes: &[u32]) -> String {
    modes
        .iter()
        .map(|m| format!("{m:#o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl FileVerbSpec {
    /// Check the spec as the policy loader must before the verb is offered: roots absolute,
    /// canonical (no symlink anywhere in them), existing directories, not protected themselves;
    /// a positive size cap; modes present and free of x/setuid/setgid/sticky bits.
    pub fn validate(&self) -> Result<(), FileError> {
        if self.roots.is_empty() {
            return Err(FileError::InvalidSpec(
                "a file verb needs at least one root".into(),
            ));
        }
        for root in &self.roots {
            check_normalized(root).map_err(|e| {
                FileError::InvalidSpec(format!(
                    "root {} must be an absolute, normalized path ({e})",
                    root.display()
                ))
            })?;
            let canonical = std::fs::canonicalize(root).map_err(|e| {
                FileError::InvalidSpec(format!("root {} is not usable: {e}", root.display()))
            })?;
            if &canonical != root {
                return Err(FileError::InvalidSpec(format!(
                    "root {} goes through a symlink (it resolves to {}): name the real directory",
                    root.display(),
                    canonical.display()
                )));
            }
            if !canonical.is_dir() {
                return Err(FileError::InvalidSpec(format!(
                    "root {} is not a directory",
                    root.display()
                )));
            }
            if let Some(hit) = self.protected.match_path(root) {
                return Err(FileError::InvalidSpec(format!(
                    "root {} is inside the {hit}",
                    root.display()
                )));
            }
        }
        if self.max_size == 0 {
            return Err(FileError::InvalidSpec("max_size must be positive".into()));
        }
        if self.allowed_modes.is_empty() {
            return Err(FileError::InvalidSpec(
                "allowed_modes must list at least one mode (default 0o644)".into(),
            ));
        }
        for &mode in &self.allowed_modes {
            if mode & FORBIDDEN_MODE_BITS != 0 || mode > 0o7777 {
                return Err(FileError::InvalidSpec(format!(
                    "mode {mode:#o} has an execute, setuid, setgid or sticky bit (or is not a mode); file verbs never set those"
                )));
            }
        }
        Ok(())
    }

    fn require_op(&self, requested: FileOp) -> Result<(), FileError> {
        if self.op == requested {
            Ok(())
        } else {
            Err(FileError::WrongOp {
                actual: self.op.builtin_name(),
                requested: requested.builtin_name(),
            })
        }
    }
}

/// A path split into its root and the normalized remainder beneath it.
struct Located<'a> {
    root: &'a Path,
    /// Relative to `root`; empty when the path is the root itself.
    relative: PathBuf,
}

/// Refuse paths that are relative or not in normal form, without any syscall.
fn check_normalized(path: &Path) -> Result<(), FileError> {
    let bytes = path.as_os_str().as_bytes();
    let refuse = |problem| {
        Err(FileError::NotNormalized {
            path: path.to_path_buf(),
            problem,
        })
    };
    if bytes.contains(&0) {
        return refuse("it contains a NUL byte");
    }
    if bytes.first() != Some(&b'/') {
        return Err(FileError::NotAbsolute {
            path: path.to_path_buf(),
        });
    }
    if bytes == b"/" {
        return Ok(());
    }
    for segment in bytes[1..].split(|&b| b == b'/') {
        match segment {
            b"" => return refuse("it has a repeated or trailing slash"),
            b"." => return refuse("it has a `.` component"),
            b".." => return refuse("it has a `..` component"),
            _ => {}
        }
    }
    Ok(())
}

/// Lexical checks shared by every operation: normal form, a root, protected names (for
/// `writing`, entry-only names such as `.git` too; reads are refused only beneath protected
/// subtrees).
fn locate<'a>(
    roots: &'a [PathBuf],
    protected: &ProtectedNames,
    path: &Path,
    writing: bool,
) -> Result<Located<'a>, FileError> {
    check_normalized(path)?;
    let root = roots
        .iter()
        .filter(|root| path.starts_with(root))
        .max_by_key(|root| root.components().count())
        .ok_or_else(|| FileError::NotUnderRoot {
            path: path.to_path_buf(),
            roots: roots.to_vec(),
        })?;
    let relative = path
        .strip_prefix(root)
        .expect("starts_with was checked")
        .to_path_buf();
    for candidate in [relative.as_path(), path] {
        let hit = if writing {
            protected.match_path(candidate)
        } else {
            protected.match_subtree(candidate)
        };
        if let Some(hit) = hit {
            return Err(FileError::Protected {
                path: path.to_path_buf(),
                rule: hit.to_string(),
            });
        }
    }
    Ok(Located { root, relative })
}

/// For the hook's `check` op: would a write to this absolute path be allowed under these roots?
/// Lexical only (the caller has already resolved symlinks); `Ok(())` or the reason.
pub fn check_write(
    roots: &[PathBuf],
    protected: &ProtectedNames,
    path: &Path,
) -> Result<(), FileError> {
    let located = locate(roots, protected, path, true)?;
    if located.relative.as_os_str().is_empty() {
        return Err(FileError::NotARegularFile {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// An open root plus the path it was opened from (for messages).
struct OpenRoot<'a> {
    fd: OwnedFd,
    located: Located<'a>,
    full: PathBuf,
}

impl OpenRoot<'_> {
    /// Open the root directory itself, refusing a symlink anywhere in its path.
    fn open<'a>(located: Located<'a>, full: &Path) -> Result<OpenRoot<'a>, FileError> {
        let fd = openat2_restarting(
            rustix::fs::CWD,
            located.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|errno| FileError::Io {
            operation: "opening the root",
            path: located.root.to_path_buf(),
            source: errno.into(),
        })?;
        Ok(OpenRoot {
            fd,
            located,
            full: full.to_path_buf(),
        })
    }

    /// Open `relative` (a directory beneath the root, or `.`) for reading, beneath the root.
    fn open_dir(&self, relative: &Path) -> Result<OwnedFd, FileError> {
        let target = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        openat2_restarting(
            &self.fd,
            target,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        )
        .map_err(|errno| self.resolve_error(errno, relative, "opening the directory of"))
    }

    /// The parent directory fd and the final name of the located path.
    fn open_parent(&self) -> Result<(OwnedFd, &OsStr), FileError> {
        let relative = &self.located.relative;
        let name = relative
            .file_name()
            .ok_or_else(|| FileError::NotARegularFile {
                path: self.full.clone(),
            })?;
        let parent = relative.parent().unwrap_or(Path::new(""));
        Ok((self.open_dir(parent)?, name))
    }

    /// Turn a resolution errno into a reason: which component is a symlink, an escape, a
    /// missing entry.
    fn resolve_error(&self, errno: Errno, relative: &Path, operation: &'static str) -> FileError {
        match errno {
            Errno::LOOP => FileError::Symlink {
                component: self.find_symlink(relative),
            },
            Errno::XDEV => FileError::Escape {
                path: self.full.clone(),
                root: self.located.root.to_path_buf(),
            },
            Errno::NOENT => FileError::NotFound {
                path: self.full.clone(),
            },
            Errno::NOTDIR => FileError::NotADirectory {
                path: self.located.root.join(relative),
            },
            other => FileError::Io {
                operation,
                path: self.full.clone(),
                source: other.into(),
            },
        }
    }

    /// After an ELOOP, name the first component of `relative` that is a symlink (diagnostic
    /// only: the refusal already happened). Falls back to the whole path if it changed since.
    fn find_symlink(&self, relative: &Path) -> PathBuf {
        let mut prefix = PathBuf::new();
        for component in relative.components() {
            prefix.push(component);
            let is_link = rustix::fs::statat(&self.fd, &prefix, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
                .unwrap_or(false);
            if is_link {
                return self.located.root.join(&prefix);
            }
        }
        self.located.root.join(relative)
    }
}

fn io_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl Fn(std::io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        operation,
        path: path.to_path_buf(),
        source,
    }
}

fn errno_error<'a>(operation: &'static str, path: &'a Path) -> impl Fn(Errno) -> FileError + 'a {
    move |errno| FileError::Io {
        operation,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

/// A temp file name no one can predict from outside the process.
fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    format!("{TEMP_PREFIX}{:016x}", hasher.finish())
}

/// What an `lstat` of the final name found.
enum Existing {
    Missing,
    RegularFile,
}

fn inspect_target(parent: &OwnedFd, name: &OsStr, full: &Path) -> Result<Existing, FileError> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(Existing::Missing),
        Err(errno) => Err(errno_error("inspecting", full)(errno)),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(Existing::RegularFile),
            FileType::Symlink => Err(FileError::Symlink {
                component: full.to_path_buf(),
            }),
            _ => Err(FileError::NotARegularFile {
                path: full.to_path_buf(),
            }),
        },
    }
}

fn choose_mode(spec: &FileVerbSpec, mode: Option<u32>) -> Result<u32, FileError> {
    let mode = match mode {
        Some(mode) => mode,
        None => spec.allowed_modes.first().copied().unwrap_or(DEFAULT_MODE),
    };
    if mode & FORBIDDEN_MODE_BITS != 0 || mode > 0o7777 || !spec.allowed_modes.contains(&mode) {
        return Err(FileError::ModeNotAllowed {
            mode,
            allowed: spec.allowed_modes.clone(),
        });
    }
    Ok(mode)
}

fn check_size(size: usize, max: u64) -> Result<u64, FileError> {
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    if size > max {
        return Err(FileError::TooLarge { size, max });
    }
    Ok(size)
}

/// `file.write`: create or atomically replace `path` with `content`.
pub fn write_file(
    spec: &FileVerbSpec,
    path: &Path,
    content: &[u8],
    mode: Option<u32>,
) -> Result<WriteReceipt, FileError> {
    spec.require_op(FileOp::Write)?;
    let located = locate(&spec.roots, &spec.protected, path, true)?;
    let size = check_size(content.len(), spec.max_size)?;
    let mode = choose_mode(spec, mode)?;
    let root = OpenRoot::open(located, path)?;
    let (parent, name) = root.open_parent()?;
    let existed = matches!(inspect_target(&parent, name, path)?, Existing::RegularFile);
    if existed && spec.create_only {
        return Err(FileError::Exists {
            path: path.to_path_buf(),
        });
    }

    let (temp_fd, temp) = create_temp(&parent, path)?;
    let placed = fill_temp(temp_fd, content, mode, path)
        .and_then(|()| rename_into_place(spec.create_only, &parent, &temp, name, path));
    if placed.is_err() {
        // Best effort: the temp file is ours and carries no content anyone relies on.
        let _ = rustix::fs::unlinkat(&parent, temp.as_str(), AtFlags::empty());
    }
    placed?;
    rustix::fs::fsync(&parent).map_err(errno_error("syncing the directory of", path))?;
    Ok(WriteReceipt {
        path: path.to_path_buf(),
        size,
        sha256: crate::digest::sha256_hex(content),
        created: !existed,
    })
}

fn create_temp(parent: &OwnedFd, full: &Path) -> Result<(OwnedFd, String), FileError> {
    for _ in 0..TEMP_NAME_ATTEMPTS {
        let name = temp_name();
        match openat2_restarting(
            parent,
            Path::new(&name),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            BENEATH,
        ) {
            Ok(fd) => return Ok((fd, name)),
            Err(Errno::EXIST) => continue,
            Err(errno) => return Err(errno_error("creating a temp file next to", full)(errno)),
        }
    }
    Err(FileError::Io {
        operation: "creating a temp file next to",
        path: full.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    })
}

/// Write, chmod and fsync the temp file (the mode is set on the fd: the umask plays no part).
fn fill_temp(temp_fd: OwnedFd, content: &[u8], mode: u32, full: &Path) -> Result<(), FileError> {
    let mut file = File::from(temp_fd);
    file.write_all(content)
        .map_err(io_error("writing a temp file for", full))?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
        .map_err(errno_error("setting the mode of", full))?;
    file.sync_all()
        .map_err(io_error("syncing a temp file for", full))?;
    Ok(())
}

/// Move the finished temp file over `name` (never over an existing file when `create_only`).
fn rename_into_place(
    create_only: bool,
    parent: &OwnedFd,
    temp: &str,
    name: &OsStr,
    full: &Path,
) -> Result<(), FileError> {
    let flags = if create_only {
        RenameFlags::NOREPLACE
    } else {
        RenameFlags::empty()
    };
    match rustix::fs::renameat_with(parent, temp, parent, name, flags) {
        Ok(()) => Ok(()),
        Err(Errno::EXIST) if create_only => Err(FileError::Exists {
            path: full.to_path_buf(),
        }),
        Err(Errno::ISDIR) => Err(FileError::NotARegularFile {
            path: full.to_path_buf(),
        }),
        Err(errno) => Err(errno_error("renaming into place", full)(errno)),
    }
}

/// Open an existing regular file beneath the root without following any symlink, and refuse
/// hard-linked files.
fn open_existing(
    root: &OpenRoot<'_>,
    parent: &OwnedFd,
    name: &OsStr,
    oflags: OFlags,
    create_mode: Option<u32>,
) -> Result<(File, bool), FileError> {
    let full = &root.full;
    let base = oflags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let (fd, created) = match create_mode {
        None => (
            openat2_restarting(parent, Path::new(name), base, Mode::empty(), BENEATH),
            false,
        ),
        Some(mode) => {
            match openat2_restarting(
                parent,
                Path::new(name),
                base | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(mode),
                BENEATH,
            ) {
                Err(Errno::EXIST) => (
                    openat2_restarting(parent, Path::new(name), base, Mode::empty(), BENEATH),
                    false,
                ),
                other => (other, true),
            }
        }
    };
    let fd = fd.map_err(|errno| match errno {
        Errno::LOOP => FileError::Symlink {
            component: full.clone(),
        },
        Errno::NOENT => FileError::NotFound { path: full.clone() },
        Errno::ISDIR => FileError::NotARegularFile { path: full.clone() },
        Errno::AGAIN => FileError::Leased { path: full.clone() },
        other => errno_error("opening", full)(other),
    })?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(io_error("inspecting", full))?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotARegularFile { path: full.clone() });
    }
    if meta.nlink() > 1 {
        return Err(FileError::HardLinked {
            path: full.clone(),
            links: meta.nlink(),
        });
    }
    Ok((file, created))
}

/// `file.append`: append `content` to `path`, creating it (with the default mode) if missing.
/// The cap applies to the file's size after the append.
pub fn append_file(
    spec: &FileVerbSpec,
    path: &Path,
    content: &[u8],
) -> Result<WriteReceipt, FileError> {
    spec.require_op(FileOp::Append)?;
    let located = locate(&spec.roots, &spec.protected, path, true)?;
    let size = check_size(content.len(), spec.max_size)?;
    let create_mode = choose_mode(spec, None)?;
    let root = OpenRoot::open(located, path)?;
    let (parent, name) = root.open_parent()?;
    let (mut file, created) = open_existing(
        &root,
        &parent,
        name,
        OFlags::WRONLY | OFlags::APPEND,
        Some(create_mode),
    )?;
    if created {
        // fchmod: the umask may have narrowed the create mode; set exactly the allowed one.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(create_mode))
            .map_err(errno_error("setting the mode of", path))?;
    }
    let meta = file.metadata().map_err(io_error("inspecting", path))?;
    let mode = meta.mode() & 0o7777;
    if mode & FORBIDDEN_MODE_BITS != 0 {
        return Err(FileError::ExecutableTarget {
            path: path.to_path_buf(),
            mode,
        });
    }
    let total = meta.len().saturating_add(size);
    if total > spec.max_size {
        return Err(FileError::TooLarge {
            size: total,
            max: spec.max_size,
        });
    }
    file.write_all(content)
        .map_err(io_error("appending to", path))?;
    file.sync_all().map_err(io_error("syncing", path))?;
    if created {
        rustix::fs::fsync(&parent).map_err(errno_error("syncing the directory of", path))?;
    }
    Ok(WriteReceipt {
        path: path.to_path_buf(),
        size,
        sha256: crate::digest::sha256_hex(content),
        created,
    })
}

/// `file.read`: the content of `path`, refused when larger than the cap.
pub fn read_file(spec: &FileVerbSpec, path: &Path) -> Result<Vec<u8>, FileError> {
    spec.require_op(FileOp::Read)?;
    let located = locate(&spec.roots, &spec.protected, path, false)?;
    let root = OpenRoot::open(located, path)?;
    let (parent, name) = root.open_parent()?;
    let (file, _) = open_existing(&root, &parent, name, OFlags::RDONLY, None)?;
    let len = file.metadata().map_err(io_error("inspecting", path))?.len();
    if len > spec.max_size {
        return Err(FileError::TooLarge {
            size: len,
            max: spec.max_size,
        });
    }
    // Read at most one byte past the cap, so a file growing during the read is still refused.
    let mut content = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(spec.max_size.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(io_error("reading", path))?;
    check_size(content.len(), spec.max_size)?;
    Ok(content)
}

/// `file.list`: the entries of directory `path`, sorted by name. Protected entries and verbd's
/// temp files are hidden; symlinks are reported as such and never followed.
pub fn list_dir(spec: &FileVerbSpec, path: &Path) -> Result<Vec<DirEntryInfo>, FileError> {
    spec.require_op(FileOp::List)?;
    let located = locate(&spec.roots, &spec.protected, path, false)?;
    let root = OpenRoot::open(located, path)?;
    let relative = root.located.relative.clone();
    let dir_fd = root.open_dir(&relative)?;
    let dir = rustix::fs::Dir::read_from(&dir_fd).map_err(errno_error("listing", path))?;
    let mut entries = Vec::new();
    for entry in dir {
        let entry = entry.map_err(errno_error("listing", path))?;
        let raw_name = entry.file_name().to_bytes();
        if raw_name == b"." || raw_name == b".." || raw_name.starts_with(TEMP_PREFIX.as_bytes()) {
            continue;
        }
        let name = OsStr::from_bytes(raw_name);
        // Hidden: protected subtrees. An entry-only name (`.git`) is listed; it may not be
        // written, but its existence is no secret.
        if spec.protected.match_subtree(&relative.join(name)).is_some() {
            continue;
        }
        let st = match rustix::fs::statat(&dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed between readdir and lstat: it is no longer an entry.
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(errno_error("inspecting an entry of", path)(errno)),
        };
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        if entries.len() == MAX_LIST_ENTRIES {
            return Err(FileError::TooManyEntries {
                path: path.to_path_buf(),
                max: MAX_LIST_ENTRIES,
            });
        }
        entries.push(DirEntryInfo {
            name: String::from_utf8_lossy(raw_name).into_owned(),
            kind,
            size: u64::try_from(st.st_size).unwrap_or(0),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_form_is_checked_before_any_syscall() {
        for (path, ok) in [
            ("/srv/notes/a.txt", true),
            ("/", true),
            ("srv/notes", false),
            ("/srv//notes", false),
            ("/srv/notes/", false),
            ("/srv/./notes", false),
            ("/srv/notes/..", false),
            ("/srv/../etc", false),
        ] {
            assert_eq!(check_normalized(Path::new(path)).is_ok(), ok, "{path}");
        }
        let nul = Path::new(OsStr::from_bytes(b"/srv/a\0b"));
        assert!(matches!(
            check_normalized(nul),
            Err(FileError::NotNormalized { .. })
        ));
    }

    #[test]
    fn longest_root_wins_and_protection_checks_both_forms() {
        let roots = vec![PathBuf::from("/srv"), PathBuf::from("/srv/notes")];
        let p = ProtectedNames::builtin();
        let located = locate(&roots, &p, Path::new("/srv/notes/a/b"), true).unwrap();
        assert_eq!(located.root, Path::new("/srv/notes"));
        assert_eq!(located.relative, Path::new("a/b"));
        assert!(matches!(
            check_write(
                &roots,
                &p,
                Path::new("/srv/notes/sub/.git/hooks/pre-commit")
            ),
            Err(FileError::Protected { .. })
        ));
        assert!(matches!(
            check_write(&roots, &p, Path::new("/srvx/a")),
            Err(FileError::NotUnderRoot { .. })
        ));
        assert!(check_write(&roots, &p, Path::new("/srv/notes/a.md")).is_ok());
    }

    #[test]
    fn modes_with_forbidden_bits_are_refused() {
        let spec = FileVerbSpec {
            op: FileOp::Write,
            roots: vec![PathBuf::from("/")],
            max_size: 10,
            create_only: false,
            allowed_modes: vec![0o644, 0o600],
            protected: ProtectedNames::builtin(),
        };
        assert_eq!(choose_mode(&spec, None).unwrap(), 0o644);
        assert_eq!(choose_mode(&spec, Some(0o600)).unwrap(), 0o600);
        for bad in [0o755, 0o4644, 0o640, 0o1644] {
            assert!(choose_mode(&spec, Some(bad)).is_err(), "{bad:o}");
        }
    }

    #[test]
    fn a_spec_that_skipped_validation_still_never_sets_a_forbidden_mode() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let spec = |allowed_modes: Vec<u32>| FileVerbSpec {
            op: FileOp::Write,
            roots: vec![root.clone()],
            max_size: 10,
            create_only: false,
            allowed_modes,
            protected: ProtectedNames::builtin(),
        };
        // The loader refuses both; `choose_mode` does not rely on it having run.
        let unchecked = spec(vec![0o755, 0o100644]);
        for bad in [0o755, 0o100644] {
            assert!(
                matches!(
                    choose_mode(&unchecked, Some(bad)),
                    Err(FileError::ModeNotAllowed { .. })
                ),
                "{bad:o}"
            );
            assert!(
                matches!(spec(vec![bad]).validate(), Err(FileError::InvalidSpec(_))),
                "{bad:o}"
            );
        }
        assert!(spec(vec![0o644]).validate().is_ok());
    }

    #[test]
    fn temp_names_cannot_be_guessed_and_are_hidden_by_their_prefix() {
        let names: std::collections::HashSet<String> = (0..1000).map(|_| temp_name()).collect();
        assert_eq!(names.len(), 1000, "temp names repeat");
        for name in &names {
            assert!(name.starts_with(TEMP_PREFIX), "{name}");
            assert_eq!(name.len(), TEMP_PREFIX.len() + 16, "{name}");
        }
    }

    #[test]
    fn every_descriptor_a_file_verb_opens_is_close_on_exec() {
        use rustix::io::FdFlags;
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        let roots = vec![root.clone()];
        let protected = ProtectedNames::builtin();
        let target = root.join("a.txt");
        let located = locate(&roots, &protected, &target, true).unwrap();
        let open_root = OpenRoot::open(located, &target).unwrap();
        // The root itself: a path-only handle on a directory.
        let root_flags = rustix::fs::fcntl_getfl(&open_root.fd).unwrap();
        assert!(root_flags.contains(OFlags::PATH), "{root_flags:?}");
        let (parent, name) = open_root.open_parent().unwrap();
        let (temp, temp_name) = create_temp(&parent, &target).unwrap();
        let (existing, _) = open_existing(&open_root, &parent, name, OFlags::RDONLY, None).unwrap();
        let listed = open_root.open_dir(Path::new("")).unwrap();
        for (what, flags) in [
            ("root", rustix::io::fcntl_getfd(&open_root.fd).unwrap()),
            ("parent", rustix::io::fcntl_getfd(&parent).unwrap()),
            ("temp file", rustix::io::fcntl_getfd(&temp).unwrap()),
            ("existing file", rustix::io::fcntl_getfd(&existing).unwrap()),
            (
                "listed directory",
                rustix::io::fcntl_getfd(&listed).unwrap(),
            ),
        ] {
            assert!(
                flags.contains(FdFlags::CLOEXEC),
                "the {what} fd survives exec"
            );
        }
        std::fs::remove_file(root.join(temp_name)).unwrap();
        // A root that is not a directory is refused when it is opened.
        let file_root = vec![target.clone()];
        let inside = target.join("x");
        let located = locate(&file_root, &protected, &inside, false).unwrap();
        assert!(OpenRoot::open(located, &inside).is_err());
    }
}
