//! Pinned path parameters: what a child opens is what was validated.
//!
//! A `path` parameter is checked when the call is evaluated, but the program opens it later. A
//! name resolved twice can resolve differently the second time (a file swapped for a symlink in
//! an agent-writable directory). So the daemon resolves the name once, beneath its declared root,
//! and hands the child the open descriptor instead of the name.
//!
//! Responsibility:
//! - [`pin`] opens a path beneath a root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS)`: no component below the root may be a symlink or leave the root. An
//!   existing file or directory is opened itself (`O_PATH`, [`Pinned::Existing`]); a name that
//!   does not exist yet pins its parent directory ([`Pinned::New`]).
//! - [`NewEntry::create_file`] creates a new entry as an empty regular file, `O_CREAT | O_EXCL`
//!   beneath the pinned parent, and pins that file. Nothing that appears at the name in the
//!   meantime (a symlink, a file) is ever opened: the creation fails instead. A new entry is
//!   never handed to a child by name, because the child would resolve the name itself, and a
//!   symlink planted there after the daemon's last look would be followed.
//! - [`Resolution`] is what a path resolves to (kind, device, inode): recorded at validation,
//!   shown to approvers, and compared when the path is pinned again at run time. A different
//!   resolution refuses the run.
//! - [`PinnedPath::argv_text`] is the argv text the child sees: `/proc/self/fd/N` for a file,
//!   `/proc/self/fd/N/` for a directory.
//!
//! Invariants: the root itself is the operator's (it may be reached through symlinks; it is
//! opened as a directory); everything below it is resolved by the kernel without following any
//! symlink; only regular files with a single link and directories can be pinned (a second hard
//! link may be the name of a file from outside the root); descriptors are close-on-exec in the
//! daemon and kept open only in the one child they are passed to (`sandbox` keep-list).
//! What a child resolves *below* a pinned directory is its own lookup, confined by its sandbox's
//! Landlock roots, not by this module.
#![forbid(unsafe_code)]

use rustix::fs::{FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use rustix::io::Errno;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Beneath the directory, never through a symlink or a magic link: how this module and the
/// file verbs (`crate::files`) resolve every name below a root.
pub(crate) const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// What kind of entry a path parameter names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinKind {
    File,
    Directory,
    /// Does not exist yet; the identity is its parent directory's.
    NewEntry,
}

/// What a path resolved to: its kind and the identity (device, inode) of the pinned entry (for
/// a new entry, of its parent directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolution {
    pub kind: PinKind,
    pub device: u64,
    pub inode: u64,
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = (
            rustix::fs::major(self.device),
            rustix::fs::minor(self.device),
        );
        let what = match self.kind {
            PinKind::File => "file",
            PinKind::Directory => "directory",
            PinKind::NewEntry => "new file, created when the call runs, in the directory",
        };
        write!(f, "{what} (device {major}:{minor}, inode {})", self.inode)
    }
}

/// Why a path could not be pinned or created. Each names the path and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error("{} is not under the root {}", path.display(), root.display())]
    NotUnderRoot { path: PathBuf, root: PathBuf },
    #[error("cannot open the root {} as a directory: {errno}", root.display())]
    Root { root: PathBuf, errno: Errno },
    #[error(
        "{} passes through a symlink or leaves its root: path parameters never follow symlinks below their root (name the target itself)",
        path.display()
    )]
    Symlink { path: PathBuf },
    #[error(
        "{} does not exist and neither does its parent directory (a new entry needs an existing parent)",
        path.display()
    )]
    NoParent { path: PathBuf },
    #[error("{} is not a regular file or a directory", path.display())]
    NotFileOrDirectory { path: PathBuf },
    #[error(
        "{} has {links} hard links: another name of the same file may lie outside the root (name a file with a single link)",
        path.display()
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error(
        "{} appeared after the call was checked (something now exists at that name); nothing was created",
        path.display()
    )]
    Appeared { path: PathBuf },
    #[error("cannot open {}: {errno}", path.display())]
    Open { path: PathBuf, errno: Errno },
    #[error("cannot create {}: {errno}", path.display())]
    Create { path: PathBuf, errno: Errno },
}

/// A path resolved beneath its root: an entry that exists, or a new name in an existing
/// directory.
#[derive(Debug)]
pub enum Pinned {
    Existing(PinnedPath),
    New(NewEntry),
}

impl Pinned {
    pub fn resolution(&self) -> Resolution {
        match self {
            Pinned::Existing(pinned) => pinned.resolution,
            Pinned::New(entry) => entry.resolution,
        }
    }
}

/// An open, validated file or directory, held until the child that uses it has exited.
#[derive(Debug)]
pub struct PinnedPath {
    fd: OwnedFd,
    resolution: Resolution,
}

impl PinnedPath {
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// The descriptor number the child inherits (the same number in parent and child).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What the child's argv says instead of the path.
    pub fn argv_text(&self) -> String {
        let fd = self.fd.as_raw_fd();
        if self.resolution.kind == PinKind::Directory {
            format!("/proc/self/fd/{fd}/")
        } else {
            format!("/proc/self/fd/{fd}")
        }
    }
}

/// A name that does not exist yet, in a pinned directory.
#[derive(Debug)]
pub struct NewEntry {
    parent: OwnedFd,
    name: String,
    path: PathBuf,
    resolution: Resolution,
}

/// Who owns a created file and what its mode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFileAttributes {
    /// Permission bits, set exactly (the daemon's umask does not apply).
    pub mode: u32,
    /// Owner and group; `None` keeps the daemon's.
    pub owner: Option<(u32, u32)>,
}

impl NewEntry {
    /// The path as validated.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the entry as an empty regular file (`O_CREAT | O_EXCL` beneath the pinned parent:
    /// whatever appeared at the name since, even a dangling symlink, makes this fail) and pins
    /// it.
    pub fn create_file(self, attributes: NewFileAttributes) -> Result<PinnedPath, PinError> {
        let path = self.path;
        let created = open_beneath(
            &self.parent,
            Path::new(&self.name),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| match errno {
            Errno::EXIST | Errno::LOOP => PinError::Appeared { path: path.clone() },
            errno => PinError::Create {
                path: path.clone(),
                errno,
            },
        })?;
        let creating = |errno| PinError::Create {
            path: path.clone(),
            errno,
        };
        if let Some((uid, gid)) = attributes.owner {
            rustix::fs::fchown(&created, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(creating)?;
        }
        rustix::fs::fchmod(&created, Mode::from_raw_mode(attributes.mode & 0o777))
            .map_err(creating)?;
        let resolution = identify(&created, &path)?;
        Ok(PinnedPath {
            fd: created,
            resolution,
        })
    }
}

/// Opens `path` beneath `root` without following any symlink below the root.
pub fn pin(root: &Path, path: &Path) -> Result<Pinned, PinError> {
    let relative = path
        .strip_prefix(root)
        .map_err(|_| PinError::NotUnderRoot {
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        })?;
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| PinError::Root {
        root: root.to_path_buf(),
        errno,
    })?;
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    // No O_NOFOLLOW: with O_PATH it would open a trailing symlink itself; RESOLVE_NO_SYMLINKS
    // refuses it (ELOOP) instead.
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    match open_beneath(&root_fd, relative, flags, Mode::empty()) {
        Ok(fd) => {
            let resolution = identify(&fd, path)?;
            Ok(Pinned::Existing(PinnedPath { fd, resolution }))
        }
        Err(Errno::NOENT) => {
            let name = relative
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| PinError::NoParent {
                    path: path.to_path_buf(),
                })?
                .to_string();
            let parent = match relative.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let fd = open_beneath(&root_fd, parent, flags | OFlags::DIRECTORY, Mode::empty())
                .map_err(|errno| map_errno(errno, path, true))?;
            let parent_identity = identify(&fd, path)?;
            Ok(Pinned::New(NewEntry {
                parent: fd,
                name,
                path: path.to_path_buf(),
                resolution: Resolution {
                    kind: PinKind::NewEntry,
                    ..parent_identity
                },
            }))
        }
        Err(errno) => Err(map_errno(errno, path, false)),
    }
}

/// What `path` resolves to beneath `root` now (validation and approval display).
pub fn resolve(root: &Path, path: &Path) -> Result<Resolution, PinError> {
    pin(root, path).map(|p| p.resolution())
}

fn map_errno(errno: Errno, path: &Path, for_parent: bool) -> PinError {
    let path = path.to_path_buf();
    match errno {
        Errno::LOOP | Errno::XDEV => PinError::Symlink { path },
        Errno::NOENT | Errno::NOTDIR if for_parent => PinError::NoParent { path },
        errno => PinError::Open { path, errno },
    }
}

fn open_beneath(
    root: &OwnedFd,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    openat2_restarting(root, relative, flags, mode, BENEATH)
}

/// `openat2`, restarted when a signal interrupts it. EAGAIN is not retried: the names resolved
/// here (validated `path` parameters) and by the file verbs (`files::check_normalized`) never
/// hold a `..` component, so the kernel's scoped lookup cannot report a rename race (and would
/// fail the call, not loop, if one did); the EAGAIN an `O_NONBLOCK` open meets on a file under
/// a lease lasts until the lease holder lets go: an answer, not a race.
pub(crate) fn openat2_restarting<Fd: AsFd>(
    dirfd: Fd,
    path: &Path,
    oflags: OFlags,
    mode: Mode,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    loop {
        match rustix::fs::openat2(dirfd.as_fd(), path, oflags, mode, resolve) {
            Err(Errno::INTR) => {}
            other => return other,
        }
    }
}

fn identify(fd: &OwnedFd, path: &Path) -> Result<Resolution, PinError> {
    let stat = rustix::fs::fstat(fd).map_err(|errno| PinError::Open {
        path: path.to_path_buf(),
        errno,
    })?;
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile if stat.st_nlink > 1 => {
            return Err(PinError::HardLinked {
                path: path.to_path_buf(),
                links: stat.st_nlink,
            });
        }
        FileType::RegularFile => PinKind::File,
        FileType::Directory => PinKind::Directory,
        _ => {
            return Err(PinError::NotFileOrDirectory {
                path: path.to_path_buf(),
            });
        }
    };
    Ok(Resolution {
        kind,
        device: stat.st_dev,
        inode: stat.st_ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_entry(root: &Path, rel: &str) -> NewEntry {
        match pin(root, &root.join(rel)).unwrap() {
            Pinned::New(entry) => entry,
            Pinned::Existing(p) => panic!("{rel} exists: {:?}", p.resolution()),
        }
    }

    #[test]
    fn kinds_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("lnk")).unwrap();
        std::os::unix::fs::symlink("f", root.join("inner")).unwrap();
        assert_eq!(resolve(&root, &root.join("f")).unwrap().kind, PinKind::File);
        assert_eq!(
            resolve(&root, &root.join("d")).unwrap().kind,
            PinKind::Directory
        );
        assert_eq!(resolve(&root, &root).unwrap().kind, PinKind::Directory);
        assert_eq!(
            resolve(&root, &root.join("d/new")).unwrap().kind,
            PinKind::NewEntry
        );
        for bad in ["lnk/new", "lnk/passwd", "inner", "lnk"] {
            assert!(
                matches!(
                    resolve(&root, &root.join(bad)),
                    Err(PinError::Symlink { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            resolve(&root, &root.join("nope/new")),
            Err(PinError::NoParent { .. })
        ));
    }

    #[test]
    fn a_second_hard_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        assert_eq!(resolve(&root, &root.join("f")).unwrap().kind, PinKind::File);
        std::fs::hard_link(root.join("f"), root.join("g")).unwrap();
        for name in ["f", "g"] {
            assert_eq!(
                resolve(&root, &root.join(name)),
                Err(PinError::HardLinked {
                    path: root.join(name),
                    links: 2
                })
            );
        }
    }

    #[test]
    fn a_new_file_is_created_exactly_once_and_never_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        let attributes = NewFileAttributes {
            mode: 0o640,
            owner: None,
        };
        let created = new_entry(&root, "d/new").create_file(attributes).unwrap();
        assert_eq!(created.resolution().kind, PinKind::File);
        assert_eq!(
            created.argv_text(),
            format!("/proc/self/fd/{}", created.raw_fd())
        );
        let meta = std::fs::metadata(root.join("d/new")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o640
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&meta),
            created.resolution().inode
        );

        // Something appears at the name between the check and the creation.
        let raced = new_entry(&root, "d/later");
        std::os::unix::fs::symlink("/etc/passwd", root.join("d/later")).unwrap();
        assert_eq!(
            raced.create_file(attributes).unwrap_err(),
            PinError::Appeared {
                path: root.join("d/later")
            }
        );
        let dangling = new_entry(&root, "d/dangling");
        std::os::unix::fs::symlink(root.join("d/nowhere"), root.join("d/dangling")).unwrap();
        assert!(matches!(
            dangling.create_file(attributes),
            Err(PinError::Appeared { .. })
        ));
        assert!(
            !root.join("d/nowhere").exists(),
            "created through a symlink"
        );
    }
}
