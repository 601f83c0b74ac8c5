//! Credentials owned by the broker: where secret values come from, how they are held, how their
//! sources are checked, and the private per-call copies handed to children.
//!
//! Responsibility:
//! - [`SecretStore::load`] reads every declared [`SecretSource`] once, at start, before the
//!   privilege drop (as systemd's `LoadCredential=` hands a service files it could not read
//!   itself): a file, a systemd credential (`$CREDENTIALS_DIRECTORY/NAME`) or, discouraged, an
//!   environment variable of the daemon. Inline values never reach this module: the policy
//!   compiler refuses them. [`SecretStore::reload`] keeps each value whose source did not change
//!   (same inode, size, modification and change times), or which the daemon user cannot even
//!   look at, and reads again a source that changed; a changed source the daemon user cannot
//!   read is [`SecretError::ChangedUnreadable`], which refuses the reload.
//! - [`check_source`] is the self-test check for one source: the file exists, is a regular file
//!   (not a symlink), is owned by the daemon user or root and not by an agent uid, grants nothing
//!   to group/other (neither by mode bits nor by a POSIX ACL), and its directory cannot be
//!   rewritten by anyone else. [`SecretStore::check`] judges a source the daemon user cannot
//!   inspect (a root-only directory) by what it was when it was read.
//! - [`SecretCopy`] is the private copy behind `${secret_file:NAME}`.
//!
//! Invariants:
//! - A secret value lives only in a [`SecretValue`], whose bytes are wiped when it is dropped
//!   (`zeroize`). `Debug` and `Display` print `[secret]`; the bytes are reachable only through
//!   [`SecretValue::expose`], so a value cannot end up in a log or error by formatting accident.
//! - No error, warning or problem message produced here contains a secret value. They name the
//!   secret and its source (path, credential name, variable name), never the content.
//! - Files are opened with `O_NOFOLLOW` and must be regular files, so a symlink planted in place of a
//!   secret file is refused rather than followed, and a FIFO cannot block the daemon.
//! - A [`SecretCopy`] is a sealed memfd (no write, grow, shrink or new seals) that only the one
//!   child of the call inherits; it never touches a file system, so there is no secret directory
//!   and nothing for another call to list or open.
#![forbid(unsafe_code)]

use rustix::fs::{MemfdFlags, SealFlags};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use zeroize::Zeroizing;

/// Largest secret accepted from any source. A kubeconfig or a private key is a few KiB; the cap
/// keeps a mistaken path (a log file, a device) from being slurped into memory.
pub const MAX_SECRET_BYTES: u64 = 1024 * 1024;

/// Secrets shorter than this (in characters) draw a policy warning: scrubbing every occurrence of a
/// short string from output mangles unrelated text.
pub const MIN_RECOMMENDED_SECRET_CHARS: usize = 8;

/// The environment variable systemd sets to the directory holding a service's credentials.
pub const CREDENTIALS_DIRECTORY_VAR: &str = "CREDENTIALS_DIRECTORY";

/// The extended attribute that carries a file's POSIX access ACL.
const POSIX_ACL_ACCESS_XATTR: &str = "system.posix_acl_access";

/// Where a secret value comes from, as declared in `[secrets.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `file = "/etc/verbd/secrets/pg"`: the file's content, one trailing newline stripped.
    File(PathBuf),
    /// `credential = "pg"`: the systemd credential `$CREDENTIALS_DIRECTORY/pg`.
    Credential(String),
    /// `env = "VAR"`: the daemon's environment variable at start (discouraged).
    Env(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "file {}", path.display()),
            SecretSource::Credential(name) => {
                write!(
                    f,
                    "systemd credential `{name}` (${CREDENTIALS_DIRECTORY_VAR}/{name})"
                )
            }
            SecretSource::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

/// A secret's bytes, wiped from memory on drop. Formatting never shows them.
#[derive(Clone)]
pub struct SecretValue {
    bytes: Zeroizing<Vec<u8>>,
}

impl SecretValue {
    /// Takes ownership of `bytes` (no copy is made; the vector is wiped when the value drops).
    pub fn new(bytes: Vec<u8>) -> SecretValue {
        SecretValue {
            bytes: Zeroizing::new(bytes),
        }
    }

    /// The raw bytes, for the executor (env, argv, secret files) and the scrubber only.
    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }

    /// Length in characters when the value is UTF-8, in bytes otherwise.
    fn char_len(&self) -> usize {
        match std::str::from_utf8(&self.bytes) {
            Ok(text) => text.chars().count(),
            Err(_) => self.bytes.len(),
        }
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[secret]")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[secret]")
    }
}

/// Failure to load a secret or to make a private copy of one. Never contains a secret value.
#[derive(Debug, Error)]
pub enum SecretError {
    #[error("secret `{name}`: cannot read {origin}: {error}")]
    Read {
        name: String,
        origin: String,
        error: io::Error,
    },
    #[error("secret `{name}`: {origin} is not a regular file")]
    NotRegularFile { name: String, origin: String },
    #[error("secret `{name}`: {origin} is larger than {limit} bytes")]
    TooLarge {
        name: String,
        origin: String,
        limit: u64,
    },
    #[error("secret `{name}`: {origin} is empty")]
    Empty { name: String, origin: String },
    #[error("secret `{name}`: environment variable {var} is not set in the daemon's environment")]
    EnvMissing { name: String, var: String },
    #[error(
        "secret `{name}`: credential `{credential}` needs ${CREDENTIALS_DIRECTORY_VAR}, which is not set (run under systemd with LoadCredential=, or use `file =`)"
    )]
    NoCredentialsDirectory { name: String, credential: String },
    #[error(
        "secret `{name}`: ${CREDENTIALS_DIRECTORY_VAR} is `{}`, which is not an absolute path",
        dir.display()
    )]
    CredentialsDirectoryNotAbsolute { name: String, dir: PathBuf },
    #[error(
        "secret `{name}`: credential name `{credential}` must be a plain file name (no `/`, not `.` or `..`)"
    )]
    InvalidCredentialName { name: String, credential: String },
    #[error(
        "secret `{name}`: {origin} changed since the daemon read it, and the daemon user cannot read it ({error}); the reload is refused and the value read before stays in force. Fix: restart the daemon (it reads secrets before dropping privileges), or give the file to the daemon user (owner the daemon user, mode 0600)"
    )]
    ChangedUnreadable {
        name: String,
        origin: String,
        error: io::Error,
    },
    #[error("secret `{name}`: cannot {action} its private in-memory copy: {error}")]
    SecretCopy {
        name: String,
        action: &'static str,
        error: io::Error,
    },
}

/// All loaded secrets by name. Immutable after load; shared across request tasks.
#[derive(Debug, Default)]
pub struct SecretStore {
    values: BTreeMap<String, SecretValue>,
    /// Secret name → environment variable, for the "env is discouraged" warning.
    from_env: BTreeMap<String, String>,
    /// Secret name → the file it was read from, as it was then (files and credentials).
    origins: BTreeMap<String, Origin>,
    /// Secrets a reload kept without knowing whether their source changed, with why.
    unseen: BTreeMap<String, String>,
}

/// A file or credential secret's source as it was when read: how a reload tells whether it
/// changed, and what the self-test judges when the daemon user cannot inspect it any more.
#[derive(Debug, Clone)]
struct Origin {
    source: SecretSource,
    path: PathBuf,
    fingerprint: Fingerprint,
    facts: SourceFacts,
}

/// What changes when a file is rewritten, replaced, re-moded or re-owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Fingerprint {
    fn of(metadata: &std::fs::Metadata) -> Fingerprint {
        Fingerprint {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.size(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// What [`check_source`] judges about a secret file, however it was learned (from its path now,
/// or from the descriptor it was read through).
#[derive(Debug, Clone)]
struct SourceFacts {
    symlink: bool,
    regular: bool,
    owner: u32,
    mode: u32,
    /// Whether a POSIX access ACL is present (`Err`: the question could not be asked).
    acl: Result<bool, String>,
    /// The directory's owner and mode (`Err`: it could not be inspected).
    directory: Result<(u32, u32), String>,
}

impl SourceFacts {
    fn from_metadata(metadata: &std::fs::Metadata, acl: Result<bool, String>, path: &Path) -> Self {
        SourceFacts {
            symlink: metadata.file_type().is_symlink(),
            regular: metadata.file_type().is_file(),
            owner: metadata.uid(),
            mode: metadata.permissions().mode() & 0o7777,
            acl,
            directory: std::fs::metadata(directory_of(path))
                .map(|m| (m.uid(), m.permissions().mode() & 0o7777))
                .map_err(|e| e.to_string()),
        }
    }
}

fn acl_present(answer: rustix::io::Result<usize>) -> Result<bool, String> {
    match answer {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::NODATA) | Err(rustix::io::Errno::OPNOTSUPP) => Ok(false),
        Err(errno) => Err(io::Error::from(errno).to_string()),
    }
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl SecretStore {
    /// A store without secrets (a policy that declares none).
    pub fn empty() -> SecretStore {
        SecretStore::default()
    }

    /// A store from values already in memory (for embedders and tests that hold values
    /// themselves). The daemon uses [`SecretStore::load`].
    pub fn from_values(values: BTreeMap<String, SecretValue>) -> SecretStore {
        SecretStore {
            values,
            ..SecretStore::default()
        }
    }

    /// Reads every source once. A file's or credential's content has one trailing newline (`\n`
    /// or `\r\n`) stripped; an environment variable is taken as is. A missing, unreadable,
    /// non-regular, oversized or empty source is an error naming the secret and the source.
    pub fn load(sources: &BTreeMap<String, SecretSource>) -> Result<SecretStore, SecretError> {
        SecretStore::reload(sources, &SecretStore::empty())
    }

    /// [`SecretStore::load`] for a reload, keeping what `previous` read where nothing changed:
    /// a file or credential declared as before keeps its value when its source has the same
    /// inode, size, modification and change times, and when the daemon user cannot even look at
    /// it (a root-only directory: a change is then seen only by a restart, and
    /// [`SecretStore::warnings`] says so). A changed source is read again; if the daemon user
    /// cannot read it, [`SecretError::ChangedUnreadable`] refuses the reload.
    pub fn reload(
        sources: &BTreeMap<String, SecretSource>,
        previous: &SecretStore,
    ) -> Result<SecretStore, SecretError> {
        let mut store = SecretStore::empty();
        for (name, source) in sources {
            let path = match source {
                SecretSource::File(path) => path.clone(),
                SecretSource::Credential(credential) => credential_path(name, credential)?,
                SecretSource::Env(var) => {
                    store.from_env.insert(name.clone(), var.clone());
                    store.values.insert(name.clone(), read_env(name, var)?);
                    continue;
                }
            };
            let origin = source.to_string();
            let kept = previous
                .origins
                .get(name)
                .filter(|o| &o.source == source && o.path == path)
                .zip(previous.values.get(name));
            if let Some((old, value)) = kept {
                match std::fs::symlink_metadata(&path) {
                    Ok(now) if Fingerprint::of(&now) == old.fingerprint => {
                        store.keep(name, value, old);
                        if let Some(why) = previous.unseen.get(name) {
                            store.unseen.insert(name.clone(), why.clone());
                        }
                        continue;
                    }
                    Ok(_) => match read_secret_file(name, &path, &origin) {
                        Err(SecretError::Read { error, .. })
                            if error.kind() == io::ErrorKind::PermissionDenied =>
                        {
                            return Err(SecretError::ChangedUnreadable {
                                name: name.clone(),
                                origin,
                                error,
                            });
                        }
                        read => {
                            store.insert(name, source, path, read?);
                            continue;
                        }
                    },
                    Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                        store.keep(name, value, old);
                        store.unseen.insert(
                            name.clone(),
                            format!("the daemon user cannot look at {origin} ({error})"),
                        );
                        continue;
                    }
                    Err(_) => {}
                }
            }
            let read = read_secret_file(name, &path, &origin)?;
            store.insert(name, source, path, read);
        }
        Ok(store)
    }

    fn keep(&mut self, name: &str, value: &SecretValue, origin: &Origin) {
        self.values.insert(name.to_owned(), value.clone());
        self.origins.insert(name.to_owned(), origin.clone());
    }

    fn insert(
        &mut self,
        name: &str,
        source: &SecretSource,
        path: PathBuf,
        (value, fingerprint, facts): (SecretValue, Fingerprint, SourceFacts),
    ) {
        self.values.insert(name.to_owned(), value);
        self.origins.insert(
            name.to_owned(),
            Origin {
                source: source.clone(),
                path,
                fingerprint,
                facts,
            },
        );
    }

    /// The self-test check of one source, as [`check_source`]; a source the daemon user cannot
    /// inspect now (a root-only directory) but that this store read (before the privilege drop)
    /// is judged by what it was when read. `Ok` says which.
    pub fn check(
        &self,
        name: &str,
        source: &SecretSource,
        daemon_uid: u32,
        agent_uids: &[u32],
    ) -> Result<String, SecretPermissionProblem> {
        let problem = match check_source(name, source, daemon_uid, agent_uids) {
            Ok(()) => return Ok(format!("{source} is private to the daemon")),
            Err(problem) => problem,
        };
        let PermissionProblemKind::Uninspectable(why) = &problem.kind else {
            return Err(problem);
        };
        let Some(origin) = self.origins.get(name).filter(|o| &o.source == source) else {
            return Err(problem);
        };
        judge(
            name,
            &source.to_string(),
            &origin.path,
            &origin.facts,
            daemon_uid,
            agent_uids,
        )?;
        Ok(format!(
            "{source} was private to the daemon when read before the privilege drop (the daemon user cannot inspect it: {why}; a reload keeps its value, a restart reads it again)"
        ))
    }

    /// The value of secret `name`, if declared.
    pub fn get(&self, name: &str) -> Option<&SecretValue> {
        self.values.get(name)
    }

    /// Names of all loaded secrets, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// Names and values, sorted by name (for the scrubber).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &SecretValue)> {
        self.values
            .iter()
            .map(|(name, value)| (name.as_str(), value))
    }

    /// Policy warnings: short secrets (scrubbing them mangles output) and secrets taken from the
    /// daemon's environment (readable by anything that can read `/proc/PID/environ` of the daemon
    /// and inherited by careless children).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (name, why) in &self.unseen {
            warnings.push(format!(
                "secret `{name}`: {why}, so a reload cannot see a change: the value read at start stays in force until a restart"
            ));
        }
        for (name, value) in &self.values {
            if value.char_len() < MIN_RECOMMENDED_SECRET_CHARS {
                warnings.push(format!(
                    "secret `{name}` is shorter than {MIN_RECOMMENDED_SECRET_CHARS} characters; scrubbing it would mangle output"
                ));
            }
        }
        for (name, var) in &self.from_env {
            warnings.push(format!(
                "secret `{name}` comes from the daemon's environment variable {var}; env is discouraged, prefer `credential =` (systemd LoadCredential=) or a 0600 root-owned `file =`"
            ));
        }
        warnings
    }
}

/// `$CREDENTIALS_DIRECTORY/credential`, validated.
fn credential_path(name: &str, credential: &str) -> Result<PathBuf, SecretError> {
    if credential.is_empty()
        || credential == "."
        || credential == ".."
        || credential.contains('/')
        || credential.contains('\0')
    {
        return Err(SecretError::InvalidCredentialName {
            name: name.to_owned(),
            credential: credential.to_owned(),
        });
    }
    let dir = std::env::var_os(CREDENTIALS_DIRECTORY_VAR).ok_or_else(|| {
        SecretError::NoCredentialsDirectory {
            name: name.to_owned(),
            credential: credential.to_owned(),
        }
    })?;
    let dir = PathBuf::from(dir);
    if !dir.is_absolute() {
        return Err(SecretError::CredentialsDirectoryNotAbsolute {
            name: name.to_owned(),
            dir,
        });
    }
    Ok(dir.join(credential))
}

/// Reads a secret file without following a final symlink and without blocking on a FIFO, with
/// what it was (through the descriptor read) and its fingerprint.
fn read_secret_file(
    name: &str,
    path: &Path,
    origin: &str,
) -> Result<(SecretValue, Fingerprint, SourceFacts), SecretError> {
    let read_error = |error: io::Error| SecretError::Read {
        name: name.to_owned(),
        origin: origin.to_owned(),
        error,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.file_type().is_file() {
        return Err(SecretError::NotRegularFile {
            name: name.to_owned(),
            origin: origin.to_owned(),
        });
    }
    if metadata.len() > MAX_SECRET_BYTES {
        return Err(too_large(name, origin));
    }
    // Reserve the whole size up front so the buffer is not reallocated (leaving an unwiped copy
    // behind) while reading.
    let capacity = usize::try_from(metadata.len()).unwrap_or(0) + 1;
    let mut bytes = Zeroizing::new(Vec::with_capacity(capacity));
    (&file)
        .take(MAX_SECRET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_SECRET_BYTES {
        return Err(too_large(name, origin));
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(SecretError::Empty {
            name: name.to_owned(),
            origin: origin.to_owned(),
        });
    }
    let acl = acl_present(rustix::fs::fgetxattr_query(&file, POSIX_ACL_ACCESS_XATTR));
    Ok((
        SecretValue {
            bytes: move_into_exact(bytes),
        },
        Fingerprint::of(&metadata),
        SourceFacts::from_metadata(&metadata, acl, path),
    ))
}

/// Moves the bytes into a vector of exactly their length (the old buffer is wiped on drop).
fn move_into_exact(bytes: Zeroizing<Vec<u8>>) -> Zeroizing<Vec<u8>> {
    if bytes.capacity() == bytes.len() {
        return bytes;
    }
    let mut exact = Zeroizing::new(Vec::with_capacity(bytes.len()));
    exact.extend_from_slice(&bytes);
    exact
}

fn too_large(name: &str, origin: &str) -> SecretError {
    SecretError::TooLarge {
        name: name.to_owned(),
        origin: origin.to_owned(),
        limit: MAX_SECRET_BYTES,
    }
}

fn read_env(name: &str, var: &str) -> Result<SecretValue, SecretError> {
    let value = std::env::var_os(var).ok_or_else(|| SecretError::EnvMissing {
        name: name.to_owned(),
        var: var.to_owned(),
    })?;
    if value.is_empty() {
        return Err(SecretError::Empty {
            name: name.to_owned(),
            origin: format!("environment variable {var}"),
        });
    }
    if value.len() as u64 > MAX_SECRET_BYTES {
        return Err(too_large(name, &format!("environment variable {var}")));
    }
    Ok(SecretValue::new(value.as_bytes().to_vec()))
}

/// What is wrong with a secret source, found by [`check_source`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PermissionProblemKind {
    #[error("does not exist")]
    Missing,
    #[error("cannot be inspected ({0})")]
    Uninspectable(String),
    #[error("is a symlink (the daemon does not follow symlinks for secrets)")]
    Symlink,
    #[error("is not a regular file")]
    NotRegularFile,
    #[error("is owned by uid {uid}, which is an agent uid")]
    OwnedByAgent { uid: u32 },
    #[error("is owned by uid {uid}, neither root nor the daemon user (uid {daemon_uid})")]
    ForeignOwner { uid: u32, daemon_uid: u32 },
    #[error("has mode {mode:04o}, which grants access to group or other")]
    GroupOrOtherAccess { mode: u32 },
    #[error("carries a POSIX ACL (system.posix_acl_access), which may grant others access")]
    PosixAcl,
    #[error("is in directory {} owned by uid {uid}, which is an agent uid", dir.display())]
    DirectoryOwnedByAgent { dir: PathBuf, uid: u32 },
    #[error("is in directory {} owned by uid {uid}, neither root nor the daemon user", dir.display())]
    DirectoryForeignOwner { dir: PathBuf, uid: u32 },
    #[error("is in directory {} with mode {mode:04o}, writable by group or other without the sticky bit", dir.display())]
    DirectoryWritableByOthers { dir: PathBuf, mode: u32 },
    #[error("needs ${CREDENTIALS_DIRECTORY_VAR}, which is not set")]
    NoCredentialsDirectory,
    #[error("needs ${CREDENTIALS_DIRECTORY_VAR} to be an absolute path")]
    CredentialsDirectoryNotAbsolute,
    #[error("has an invalid credential name (must be a plain file name)")]
    InvalidCredentialName,
}

/// A self-test failure for one secret source: which secret, which source, why, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("secret `{name}` ({origin}) {kind}; fix: {fix}")]
pub struct SecretPermissionProblem {
    pub name: String,
    pub origin: String,
    pub kind: PermissionProblemKind,
    pub fix: String,
}

/// Self-test check for one source. A file (or credential file) must exist, be a regular file and
/// not a symlink, be owned by `daemon_uid` or root and by no uid in `agent_uids`, have no
/// group/other permission bits (`mode & 0o077 == 0`), carry no POSIX access ACL, and sit in a
/// directory owned by root or the daemon user that group/other cannot write (unless sticky).
/// An environment source passes; [`SecretStore::warnings`] reports that env is discouraged.
pub fn check_source(
    name: &str,
    source: &SecretSource,
    daemon_uid: u32,
    agent_uids: &[u32],
) -> Result<(), SecretPermissionProblem> {
    let origin = source.to_string();
    let problem = |kind: PermissionProblemKind, fix: String| SecretPermissionProblem {
        name: name.to_owned(),
        origin: origin.clone(),
        kind,
        fix,
    };
    let path = match source {
        SecretSource::Env(_) => return Ok(()),
        SecretSource::File(path) => path.clone(),
        SecretSource::Credential(credential) => match credential_path(name, credential) {
            Ok(path) => path,
            Err(SecretError::NoCredentialsDirectory { .. }) => {
                return Err(problem(
                    PermissionProblemKind::NoCredentialsDirectory,
                    "run verbd under systemd with LoadCredential= for this credential, or declare `file =` instead".to_owned(),
                ));
            }
            Err(SecretError::CredentialsDirectoryNotAbsolute { .. }) => {
                return Err(problem(
                    PermissionProblemKind::CredentialsDirectoryNotAbsolute,
                    format!("set ${CREDENTIALS_DIRECTORY_VAR} to an absolute path"),
                ));
            }
            Err(_) => {
                return Err(problem(
                    PermissionProblemKind::InvalidCredentialName,
                    "name the credential with a plain file name".to_owned(),
                ));
            }
        },
    };
    let shown = path.display();
    let metadata = match std::fs::symlink_metadata(&path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(problem(
                PermissionProblemKind::Missing,
                format!(
                    "create {shown} with mode 0600, owned by root (install -m 0600 -o root -g root SOURCE {shown})"
                ),
            ));
        }
        Err(error) => {
            return Err(problem(
                PermissionProblemKind::Uninspectable(error.to_string()),
                format!("make {shown} accessible to the daemon"),
            ));
        }
    };
    let acl = acl_present(rustix::fs::lgetxattr_query(&path, POSIX_ACL_ACCESS_XATTR));
    let facts = SourceFacts::from_metadata(&metadata, acl, &path);
    judge(name, &origin, &path, &facts, daemon_uid, agent_uids)
}

/// [`check_source`]'s verdict on what a secret file is (or was when read).
fn judge(
    name: &str,
    origin: &str,
    path: &Path,
    facts: &SourceFacts,
    daemon_uid: u32,
    agent_uids: &[u32],
) -> Result<(), SecretPermissionProblem> {
    let problem = |kind: PermissionProblemKind, fix: String| SecretPermissionProblem {
        name: name.to_owned(),
        origin: origin.to_owned(),
        kind,
        fix,
    };
    let shown = path.display();
    if facts.symlink {
        return Err(problem(
            PermissionProblemKind::Symlink,
            format!("point the policy at the real file instead of the symlink {shown}"),
        ));
    }
    if !facts.regular {
        return Err(problem(
            PermissionProblemKind::NotRegularFile,
            format!("replace {shown} with a regular file"),
        ));
    }
    let owner = facts.owner;
    if agent_uids.contains(&owner) {
        return Err(problem(
            PermissionProblemKind::OwnedByAgent { uid: owner },
            format!("chown root:root {shown}"),
        ));
    }
    if owner != 0 && owner != daemon_uid {
        return Err(problem(
            PermissionProblemKind::ForeignOwner {
                uid: owner,
                daemon_uid,
            },
            format!("chown root:root {shown}"),
        ));
    }
    let mode = facts.mode;
    if mode & 0o077 != 0 {
        return Err(problem(
            PermissionProblemKind::GroupOrOtherAccess { mode },
            format!("chmod 0600 {shown}"),
        ));
    }
    match &facts.acl {
        Ok(false) => {}
        Ok(true) => {
            return Err(problem(
                PermissionProblemKind::PosixAcl,
                format!("setfacl -b {shown}"),
            ));
        }
        Err(why) => {
            return Err(problem(
                PermissionProblemKind::Uninspectable(why.clone()),
                format!("make the extended attributes of {shown} readable to the daemon"),
            ));
        }
    }
    check_directory(path, &facts.directory, daemon_uid, agent_uids)
        .map_err(|(kind, fix)| problem(kind, fix))
}

/// The directory holding a secret must not let anyone else swap the file.
fn check_directory(
    path: &Path,
    directory: &Result<(u32, u32), String>,
    daemon_uid: u32,
    agent_uids: &[u32],
) -> Result<(), (PermissionProblemKind, String)> {
    let dir = directory_of(path);
    let (owner, mode) = directory.clone().map_err(|error| {
        (
            PermissionProblemKind::Uninspectable(error),
            format!("make {} accessible to the daemon", dir.display()),
        )
    })?;
    let shown = dir.display().to_string();
    if agent_uids.contains(&owner) {
        return Err((
            PermissionProblemKind::DirectoryOwnedByAgent { dir, uid: owner },
            format!("chown root:root {shown}"),
        ));
    }
    if owner != 0 && owner != daemon_uid {
        return Err((
            PermissionProblemKind::DirectoryForeignOwner { dir, uid: owner },
            format!("chown root:root {shown}"),
        ));
    }
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky {
        return Err((
            PermissionProblemKind::DirectoryWritableByOthers { dir, mode },
            format!("chmod go-w {shown}"),
        ));
    }
    Ok(())
}

/// The private copy of one secret for one call (`${secret_file:NAME}`): an anonymous memory
/// file (`memfd_create`, close-on-exec), sealed against any change, passed to that call's child
/// alone as `/proc/self/fd/N`. It has no name in any file system, so no other process can open
/// it by path; reaching it through `/proc/PID/fd` needs ptrace access to the child, which
/// Landlock denies between sandboxed calls. Closed (and gone) when the call ends.
#[derive(Debug)]
pub struct SecretCopy {
    fd: OwnedFd,
}

impl SecretCopy {
    /// Copies `value` into a new sealed memory file.
    pub fn create(name: &str, value: &SecretValue) -> Result<SecretCopy, SecretError> {
        let fail = |action: &'static str, errno: rustix::io::Errno| SecretError::SecretCopy {
            name: name.to_owned(),
            action,
            error: io::Error::from(errno),
        };
        let fd = rustix::fs::memfd_create(
            "verbd-secret",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| fail("create", e))?;
        let mut written = 0;
        while written < value.expose().len() {
            written +=
                rustix::io::write(&fd, &value.expose()[written..]).map_err(|e| fail("write", e))?;
        }
        rustix::fs::fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(|e| fail("seal", e))?;
        Ok(SecretCopy { fd })
    }

    /// The descriptor number the child inherits.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What the child's argv or env says: a path only this child can open.
    pub fn argv_text(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_formats_as_placeholder() {
        let value = SecretValue::new(b"hunter2-hunter2".to_vec());
        assert_eq!(format!("{value}"), "[secret]");
        assert_eq!(format!("{value:?}"), "[secret]");
        assert_eq!(value.expose(), b"hunter2-hunter2");
    }

    #[test]
    fn credential_names_must_be_plain() {
        for bad in ["", ".", "..", "a/b", "/etc/shadow"] {
            assert!(matches!(
                credential_path("x", bad),
                Err(SecretError::InvalidCredentialName { .. })
            ));
        }
    }

    #[test]
    fn short_secret_warns_and_long_does_not() {
        let mut values = BTreeMap::new();
        values.insert("short".to_owned(), SecretValue::new(b"abc".to_vec()));
        values.insert("long".to_owned(), SecretValue::new(b"abcdefghij".to_vec()));
        let warnings = SecretStore::from_values(values).warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("`short`"));
        assert!(warnings[0].contains("shorter than 8"));
    }
}
