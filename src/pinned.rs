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
//!   existing file or directory is opened itself (`O_PATH`); a name that does not exist yet pins
//!   its parent directory, and the child creates the entry by name relative to that descriptor.
//! - [`Resolution`] is what a path resolves to (kind, device, inode): recorded at validation,
//!   shown to approvers, and compared when the path is pinned again at run time. A different
//!   resolution refuses the run.
//! - [`PinnedPath::argv_text`] is the argv text the child sees: `/proc/self/fd/N` for a file,
//!   `/proc/self/fd/N/` for a directory, `/proc/self/fd/N/NAME` for a new entry.
//!
//! Invariants: the root itself is the operator's (it may be reached through symlinks; it is
//! opened as a directory); everything below it is resolved by the kernel without following any
//! symlink; descriptors are close-on-exec in the daemon and kept open only in the one child they
//! are passed to (`sandbox` keep-list); only regular files and directories can be pinned.
#![forbid(unsafe_code)]

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// How often an `openat2` that raced a concurrent rename (EAGAIN) is retried.
const RESOLVE_RETRIES: usize = 8;

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
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
            PinKind::NewEntry => "new entry in the directory",
        };
        write!(f, "{what} (device {major}:{minor}, inode {})", self.inode)
    }
}

/// Why a path could not be pinned. Each names the path and what to do.
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
    #[error("cannot open {}: {errno}", path.display())]
    Open { path: PathBuf, errno: Errno },
}

/// An open, validated path parameter, held until the child that uses it has exited.
#[derive(Debug)]
pub struct PinnedPath {
    fd: OwnedFd,
    /// The new entry's name, relative to `fd` (a directory).
    entry: Option<String>,
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
        match (&self.entry, self.resolution.kind) {
            (Some(name), _) => format!("/proc/self/fd/{fd}/{name}"),
            (None, PinKind::Directory) => format!("/proc/self/fd/{fd}/"),
            (None, _) => format!("/proc/self/fd/{fd}"),
        }
    }
}

/// Opens `path` beneath `root` without following any symlink below the root.
pub fn pin(root: &Path, path: &Path) -> Result<PinnedPath, PinError> {
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
    match open_beneath(&root_fd, relative, flags) {
        Ok(fd) => {
            let resolution = identify(&fd, path)?;
            Ok(PinnedPath {
                fd,
                entry: None,
                resolution,
            })
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
            let fd = open_beneath(&root_fd, parent, flags | OFlags::DIRECTORY)
                .map_err(|errno| map_errno(errno, path, true))?;
            let parent_identity = identify(&fd, path)?;
            Ok(PinnedPath {
                fd,
                entry: Some(name),
                resolution: Resolution {
                    kind: PinKind::NewEntry,
                    ..parent_identity
                },
            })
        }
        Err(errno) => Err(map_errno(errno, path, false)),
    }
}

/// What `path` resolves to beneath `root` now (validation and approval display).
pub fn resolve(root: &Path, path: &Path) -> Result<Resolution, PinError> {
    pin(root, path).map(|p| p.resolution)
}

fn map_errno(errno: Errno, path: &Path, for_parent: bool) -> PinError {
    let path = path.to_path_buf();
    match errno {
        Errno::LOOP | Errno::XDEV => PinError::Symlink { path },
        Errno::NOENT | Errno::NOTDIR if for_parent => PinError::NoParent { path },
        errno => PinError::Open { path, errno },
    }
}

fn open_beneath(root: &OwnedFd, relative: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(root, relative, flags, Mode::empty(), BENEATH) {
            Err(Errno::AGAIN) if attempts < RESOLVE_RETRIES => attempts += 1,
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
        let new = pin(&root, &root.join("d/new")).unwrap();
        assert_eq!(new.resolution().kind, PinKind::NewEntry);
        assert!(new.argv_text().ends_with("/new"));
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
}
