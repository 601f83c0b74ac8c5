//! The Landlock filesystem template of a sandbox profile, built once in the parent.
//!
//! Read roots get read and execute access, except the daemon's private paths
//! ([`SandboxSpec::private`]: the policy and its includes, secret sources,
//! `$CREDENTIALS_DIRECTORY`, the state directory), which no child may read or write whatever its
//! profile says. A read root that contains one is **split around it**: along the path from the
//! root to each private path, every directory gets at most `ReadDir` (its names can be listed,
//! unless a private directory lies beneath it: `ReadDir` would hold for that one too) and each
//! of its other entries gets its own read grant; the private entry gets nothing. Symlinks
//! met on the way get nothing (a link's target is judged on its own, as with a whole grant,
//! where a target outside the root was never readable either). Entries created later in a split
//! directory are not readable until the profile is prepared again (a reload). A read root inside
//! a private path, and a write root that contains or lies inside one, are refused.
//!
//! Write roots are granted one of two ways ([`WriteRoots`]):
//!
//! - **whole** (verbs, and `verbd exec` in a mount namespace): the root with every filesystem
//!   right, so entries can be created, renamed and removed anywhere in it, as in any Landlock or
//!   bwrap sandbox. A verb's protected names are kept by its typed parameters (a path parameter
//!   never names a protected entry, `Policy::validate_args`) and by the file verbs; `verbd exec`
//!   adds read-only bind mounts over the protected entries;
//! - **split** around protected entries (`verbd exec` where the host offers no user namespace),
//!   described below.
//!
//! Landlock can only add access, never subtract it, and a rule on a directory covers everything
//! beneath it. To keep protected names (see [`crate::protected`]) inside a write root both
//! unmodifiable and uncreatable without user namespaces, a split write root gets read access on
//! the root directory itself only, and each existing entry gets its own grant:
//!
//! - a protected entry gets nothing beyond the read access of its parent (readable, not
//!   writable, not removable, not replaceable);
//! - a symlink gets nothing (its target is judged on its own; a link planted later that points
//!   outside the roots gives no write either, because Landlock checks the resolved inode);
//! - a regular file (or other non-directory) gets file access (read, write, truncate);
//! - a subdirectory is granted whole, unless the walk finds a protected entry inside it within
//!   [`SPLIT_DEPTH`] levels of the root, or the directory is a prefix of a multi-component rule
//!   (`.git` for `.git/hooks`) or an ancestor of a protected absolute path: then it is split the
//!   same way (so `.git/objects` is writable whole while `.git/hooks` and `.git/config` are not).
//!
//! Trade-offs of the split (documented for operators):
//! - new entries cannot be created, and existing ones cannot be removed or renamed, directly in a
//!   write root or in any split directory (e.g. `.git` itself: `git commit` cannot create
//!   `.git/index.lock`). Tools that need scratch space should use an existing subdirectory of the
//!   root (granted whole), e.g. `TMPDIR=<root>/tmp`;
//! - inside a directory granted whole, protected names created later, or existing deeper than the
//!   walk, are covered only by the file verbs and the agent hook, not by Landlock;
//! - the template binds to inodes at build time: rebuild it (reload the policy) when a write root
//!   gains or loses entries that must be writable.
//!
//! `verbd exec` adds the git directories it followed out of a write root's `.git` file (module
//! `git_dirs`): a linked worktree's own git directory and its repository's `objects`, `refs`
//! and `logs` with every right but execute, the repository's directory read-only.
//!
//! Invariants: every configured path must exist (a missing one is an error naming it, never a
//! silent skip); write roots may not be protected themselves nor nested in one another; the ABI is
//! pinned with `HardRequirement`, so an older kernel fails here, in the parent, not in a child.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::git_dirs::GitLink;
use super::{SandboxError, SandboxSpec};
use crate::protected::ProtectedNames;

/// The Landlock ABI the sandbox requires: V6 (Linux 6.12) adds the signal and abstract-socket
/// scopes. Every restriction verbd relies on is in V6; V7 only adds audit logging, which is used
/// where the kernel has it ([`DenialLog`]) and never required.
pub const PINNED_ABI: ABI = ABI::V6;

/// Where Landlock denials of a sandboxed program are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialLog {
    /// Landlock ABI ≥ 7 (Linux 6.15): the domain is created with `log_new_exec`
    /// (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`), so denials *after* `execve` — the verb's
    /// program's own — go to the kernel audit log (`AUDIT_LANDLOCK_ACCESS` records naming the
    /// access and the path, once the audit subsystem is enabled: auditd, or `audit=1`).
    Audit,
    /// An older kernel: denials are not logged. The sandbox is the same.
    Unavailable { kernel_abi: i32 },
}

impl DenialLog {
    /// The first Landlock ABI with audit logging.
    pub const FIRST_ABI: i32 = 7;

    /// What the running kernel offers.
    pub fn of_kernel() -> DenialLog {
        let kernel_abi = super::landlock_kernel_abi();
        if kernel_abi >= Self::FIRST_ABI {
            DenialLog::Audit
        } else {
            DenialLog::Unavailable { kernel_abi }
        }
    }
}

impl std::fmt::Display for DenialLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DenialLog::Audit => f.write_str(
                "Landlock denials are logged to the kernel audit log (ABI 7 log_new_exec)",
            ),
            DenialLog::Unavailable { kernel_abi } => write!(
                f,
                "Landlock denials are not logged (kernel Landlock ABI {kernel_abi}; logging needs ABI 7, Linux 6.15)"
            ),
        }
    }
}

/// How a [`BASE_SET`] entry is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseAccess {
    /// Read and write (a character device), never execute.
    ReadWrite,
    /// Read (and list), never execute or write.
    Read,
}

/// One entry every profile gets, whatever its roots say.
#[derive(Debug, Clone, Copy)]
pub struct BaseEntry {
    pub path: &'static str,
    pub access: BaseAccess,
    pub why: &'static str,
}

/// What every profile gets, because ordinary programs do not start without it: git needs
/// `/dev/urandom` for its temporary files, Node, Python and cargo read their own `/proc/self`
/// (limits, memory maps, the number of CPUs) and random bytes at start, and an interactive
/// program opens `/dev/tty`. None of it is a daemon's private path: `/proc/PID` of any other
/// process is out of reach for the sensitive files (`environ`, `fd`, `mem`, `cwd`, `root`),
/// because Landlock refuses ptrace-mode access from a sandbox to processes outside it.
/// Entries missing on the host are left out. `/dev/shm`, `/dev/pts/*` and `/sys` are not in it.
pub const BASE_SET: &[BaseEntry] = &[
    BaseEntry {
        path: "/dev/null",
        access: BaseAccess::ReadWrite,
        why: "the empty device",
    },
    BaseEntry {
        path: "/dev/zero",
        access: BaseAccess::ReadWrite,
        why: "zero bytes",
    },
    BaseEntry {
        path: "/dev/full",
        access: BaseAccess::ReadWrite,
        why: "the full device",
    },
    BaseEntry {
        path: "/dev/random",
        access: BaseAccess::ReadWrite,
        why: "random bytes",
    },
    BaseEntry {
        path: "/dev/urandom",
        access: BaseAccess::ReadWrite,
        why: "random bytes (git's temporary files, every TLS library)",
    },
    BaseEntry {
        path: "/dev/tty",
        access: BaseAccess::ReadWrite,
        why: "the caller's own controlling terminal",
    },
    BaseEntry {
        path: "/proc",
        access: BaseAccess::Read,
        why: "a program's own /proc/self; other processes' sensitive files stay out of reach (Landlock ptrace scoping)",
    },
];

/// How many directory levels below a write root the walk looks for protected entries (the root's
/// own entries are level 1).
pub const SPLIT_DEPTH: usize = 3;

/// The most directory entries one write root's walk may visit before the profile is refused as
/// too broad (narrow the write root instead).
pub const WALK_ENTRY_LIMIT: usize = 100_000;

/// How a profile's write roots are granted (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRoots {
    /// Each write root whole: create, rename and remove anywhere in it.
    Whole,
    /// Split around the protected entries existing at build time: those stay read-only, and
    /// nothing can be created at the top of a root or in a split directory.
    ProtectedReadOnly,
}

/// One grant of the template.
struct Grant {
    path: PathBuf,
    access: BitFlags<AccessFs>,
    origin: Origin,
}

/// The profile entry a grant comes from (shown by `verbd sandbox why`). Each holds the root's
/// canonical path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    ReadRoot(PathBuf),
    /// An entry of a read root split around the daemon's private paths.
    ReadRootSplit(PathBuf),
    WriteRoot(PathBuf),
    /// An entry of a write root split around protected names.
    WriteRootSplit(PathBuf),
    /// An entry of [`BASE_SET`], with why every program gets it.
    Base(&'static str),
    /// A git directory `verbd exec` followed from the write root's `.git` file (module
    /// `git_dirs`).
    FollowedGitDir(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::ReadRoot(root) => write!(f, "read root {}", root.display()),
            Origin::ReadRootSplit(root) => write!(
                f,
                "read root {} (split around the daemon's private paths)",
                root.display()
            ),
            Origin::WriteRoot(root) => write!(f, "write root {} (granted whole)", root.display()),
            Origin::WriteRootSplit(root) => write!(
                f,
                "write root {} (split around protected names)",
                root.display()
            ),
            Origin::Base(why) => write!(f, "the base set of every profile ({why})"),
            Origin::FollowedGitDir(root) => write!(
                f,
                "the linked worktree's git directories followed from {}/.git",
                root.display()
            ),
        }
    }
}

fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(PINNED_ABI)
}

fn dir_write_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(PINNED_ABI)
}

fn file_write_access() -> BitFlags<AccessFs> {
    AccessFs::from_file(PINNED_ABI)
}

/// Builds the template ruleset: handled = all filesystem rights of the pinned ABI, scoped for
/// signals and abstract Unix sockets, denials logged as `log` says; `followed` adds the git
/// directories `verbd exec` followed out of the write roots.
pub(super) fn build_template(
    spec: &SandboxSpec,
    write_roots: WriteRoots,
    followed: &[GitLink],
    log: DenialLog,
) -> Result<RulesetCreated, SandboxError> {
    let grants = plan(spec, write_roots, followed)?;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(PINNED_ABI))
        .map_err(landlock_error)?
        .scope(Scope::from_all(PINNED_ABI))
        .map_err(landlock_error)?
        .create()
        .map_err(landlock_error)?;
    if log == DenialLog::Audit {
        ruleset = ruleset.log_new_exec(true).map_err(landlock_error)?;
    }
    for grant in grants {
        let fd = PathFd::new(&grant.path).map_err(|e| SandboxError::Path {
            profile: spec.name.clone(),
            path: grant.path.clone(),
            reason: e.to_string(),
        })?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, grant.access))
            .map_err(landlock_error)?;
    }
    Ok(ruleset)
}

fn landlock_error(err: landlock::RulesetError) -> SandboxError {
    SandboxError::Landlock(err.to_string())
}

/// Resolves and validates every path of the profile and lists the grants.
fn plan(
    spec: &SandboxSpec,
    mode: WriteRoots,
    followed: &[GitLink],
) -> Result<Vec<Grant>, SandboxError> {
    let mut grants = Vec::new();
    for path in &spec.read {
        let canonical = existing(spec, path)?;
        if let Some(private) = spec.private.iter().find(|p| canonical.starts_with(p)) {
            return Err(SandboxError::PrivateRoot {
                profile: spec.name.clone(),
                kind: "read root",
                root: path.clone(),
                private: private.clone(),
            });
        }
        let inside: Vec<&Path> = spec
            .private
            .iter()
            .filter(|p| p.starts_with(&canonical))
            .map(PathBuf::as_path)
            .collect();
        if inside.is_empty() {
            grants.push(Grant {
                access: read_grant(canonical.is_dir()),
                origin: Origin::ReadRoot(canonical.clone()),
                path: canonical,
            });
            continue;
        }
        let mut split = SplitRead {
            origin: Origin::ReadRootSplit(canonical.clone()),
            visited: 0,
            grants: &mut grants,
        };
        split.dir(&canonical, &inside).map_err(|e| match e {
            WalkError::TooLarge => SandboxError::WalkTooLarge {
                profile: spec.name.clone(),
                root: path.clone(),
                limit: WALK_ENTRY_LIMIT,
            },
            WalkError::Io(path, err) => path_error(spec, &path, &err),
        })?;
    }
    let mut write_roots = Vec::new();
    for path in &spec.write {
        let canonical = existing(spec, path)?;
        if let Some(private) = spec
            .private
            .iter()
            .find(|p| canonical.starts_with(p) || p.starts_with(&canonical))
        {
            return Err(SandboxError::PrivateRoot {
                profile: spec.name.clone(),
                kind: "write root",
                root: path.clone(),
                private: private.clone(),
            });
        }
        if let Some(hit) = spec.protected.match_path(&canonical) {
            return Err(SandboxError::ProtectedWriteRoot {
                profile: spec.name.clone(),
                path: path.clone(),
                rule: hit.rule,
            });
        }
        write_roots.push((path.clone(), canonical));
    }
    for (i, (outer_given, outer)) in write_roots.iter().enumerate() {
        for (j, (inner_given, inner)) in write_roots.iter().enumerate() {
            if i != j && inner.starts_with(outer) {
                return Err(SandboxError::NestedWriteRoots {
                    profile: spec.name.clone(),
                    inner: inner_given.clone(),
                    outer: outer_given.clone(),
                });
            }
        }
    }
    for (given, root) in &write_roots {
        let metadata = std::fs::metadata(root).map_err(|e| path_error(spec, given, &e))?;
        if !metadata.is_dir() {
            grants.push(Grant {
                path: root.clone(),
                access: file_write_access(),
                origin: Origin::WriteRoot(root.clone()),
            });
            continue;
        }
        if mode == WriteRoots::Whole {
            grants.push(Grant {
                path: root.clone(),
                access: dir_write_access(),
                origin: Origin::WriteRoot(root.clone()),
            });
            continue;
        }
        let mut walk = Walk {
            origin: Origin::WriteRootSplit(root.clone()),
            protected: &spec.protected,
            visited: 0,
            grants: Vec::new(),
        };
        walk.split_dir(root, 0).map_err(|e| match e {
            WalkError::TooLarge => SandboxError::WalkTooLarge {
                profile: spec.name.clone(),
                root: given.clone(),
                limit: WALK_ENTRY_LIMIT,
            },
            WalkError::Io(path, err) => path_error(spec, &path, &err),
        })?;
        grants.append(&mut walk.grants);
    }
    for link in followed {
        let Ok(followed) = &link.outcome else {
            continue;
        };
        // Read (git reads the config, `packed-refs`, `info/exclude`), write only where git
        // keeps the worktree's data; nothing in a git directory is the program's to execute.
        let origin = Origin::FollowedGitDir(link.write_root.clone());
        grants.push(Grant {
            path: followed.common_dir.clone(),
            access: read_access() & !AccessFs::Execute,
            origin: origin.clone(),
        });
        for area in followed.areas() {
            grants.push(Grant {
                path: area.dir,
                access: dir_write_access() & !AccessFs::Execute,
                origin: origin.clone(),
            });
        }
    }
    for entry in BASE_SET {
        let path = Path::new(entry.path);
        // A host without one (a container with no /dev/tty) simply lacks it.
        let Ok(metadata) = std::fs::metadata(path) else {
            continue;
        };
        let access = match entry.access {
            BaseAccess::ReadWrite => file_write_access() & !AccessFs::Execute,
            BaseAccess::Read => read_grant(metadata.is_dir()) & !AccessFs::Execute,
        };
        grants.push(Grant {
            path: path.to_path_buf(),
            access,
            origin: Origin::Base(entry.why),
        });
    }
    Ok(grants)
}

/// The read rights for a directory, or their file subset for anything else (e.g. /dev/zero):
/// Landlock refuses directory-only rights on a non-directory.
fn read_grant(is_dir: bool) -> BitFlags<AccessFs> {
    if is_dir {
        read_access()
    } else {
        read_access() & file_write_access()
    }
}

/// The walk of a read root split around private paths.
struct SplitRead<'a> {
    origin: Origin,
    visited: usize,
    grants: &'a mut Vec<Grant>,
}

impl SplitRead<'_> {
    /// Grants every entry of `dir` read access, except the private paths in `private` (all
    /// beneath `dir`): a private entry gets nothing, a directory leading to one is split the
    /// same way, a symlink gets nothing. `dir` itself gets `ReadDir` (its names can be listed)
    /// only when every private path beneath it is an existing non-directory: Landlock's
    /// `ReadDir` holds for every directory beneath, so a private directory (the state
    /// directory) would be listable.
    fn dir(&mut self, dir: &Path, private: &[&Path]) -> Result<(), WalkError> {
        let only_private_files = private
            .iter()
            .all(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir()));
        if only_private_files {
            self.grant(dir.to_path_buf(), AccessFs::ReadDir.into());
        }
        let entries = std::fs::read_dir(dir).map_err(|e| WalkError::Io(dir.to_path_buf(), e))?;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                // Vanished while walking: granting nothing is the safe answer.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(dir.to_path_buf(), e)),
            };
            self.visited += 1;
            if self.visited > WALK_ENTRY_LIMIT {
                return Err(WalkError::TooLarge);
            }
            let path = entry.path();
            if private.iter().any(|p| *p == path) {
                continue;
            }
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(path, e)),
            };
            if file_type.is_symlink() {
                continue;
            }
            let below: Vec<&Path> = private
                .iter()
                .copied()
                .filter(|p| p.starts_with(&path))
                .collect();
            if file_type.is_dir() && !below.is_empty() {
                self.dir(&path, &below)?;
                continue;
            }
            self.grant(path, read_grant(file_type.is_dir()));
        }
        Ok(())
    }

    fn grant(&mut self, path: PathBuf, access: BitFlags<AccessFs>) {
        self.grants.push(Grant {
            path,
            access,
            origin: self.origin.clone(),
        });
    }
}

fn existing(spec: &SandboxSpec, path: &Path) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(path).map_err(|e| path_error(spec, path, &e))
}

fn path_error(spec: &SandboxSpec, path: &Path, err: &io::Error) -> SandboxError {
    SandboxError::Path {
        profile: spec.name.clone(),
        path: path.to_path_buf(),
        reason: err.to_string(),
    }
}

enum WalkError {
    TooLarge,
    Io(PathBuf, io::Error),
}

struct Walk<'a> {
    origin: Origin,
    protected: &'a ProtectedNames,
    visited: usize,
    grants: Vec<Grant>,
}

impl Walk<'_> {
    /// Grants read on `dir` and the right access on each entry. Returns whether anything under
    /// `dir` is protected or leads to a protected rule (then `dir` must stay split).
    fn split_dir(&mut self, dir: &Path, depth: usize) -> Result<bool, WalkError> {
        let mut needs_split = leads_to_protected(self.protected, dir);
        let mark = self.grants.len();
        self.grants.push(Grant {
            path: dir.to_path_buf(),
            access: read_access(),
            origin: self.origin.clone(),
        });
        let entries = std::fs::read_dir(dir).map_err(|e| WalkError::Io(dir.to_path_buf(), e))?;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                // Vanished while walking: granting nothing is the safe answer.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(dir.to_path_buf(), e)),
            };
            self.visited += 1;
            if self.visited > WALK_ENTRY_LIMIT {
                return Err(WalkError::TooLarge);
            }
            let path = entry.path();
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(path, e)),
            };
            if self.protected.keeps_read_only(&path, file_type.is_dir()) {
                needs_split = true;
                continue;
            }
            if file_type.is_symlink() {
                continue;
            }
            if !file_type.is_dir() {
                self.grants.push(Grant {
                    path,
                    access: file_write_access(),
                    origin: self.origin.clone(),
                });
                continue;
            }
            let look_inside = depth + 1 < SPLIT_DEPTH || leads_to_protected(self.protected, &path);
            if look_inside && self.split_dir(&path, depth + 1)? {
                needs_split = true;
                continue;
            }
            self.grants.push(Grant {
                path,
                access: dir_write_access(),
                origin: self.origin.clone(),
            });
        }
        // The root (depth 0) is always split: otherwise protected names could be created in it.
        // Any other directory without protected entries is granted whole by the caller instead.
        if depth > 0 && !needs_split {
            self.grants.truncate(mark);
            return Ok(false);
        }
        Ok(true)
    }
}

/// A bind mount `verbd exec` makes in its own mount namespace over an existing entry of a write
/// root (module `namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedMount {
    pub path: PathBuf,
    pub kind: MountKind,
}

/// The read-only bind of `mounts` that `path` lies in, described.
fn read_only_mount(mounts: &[ProtectedMount], path: &Path) -> Option<String> {
    mounts
        .iter()
        .find(|m| m.kind == MountKind::ReadOnly && path.starts_with(&m.path))
        .map(|m| format!("the read-only bind mount of {} (EROFS)", m.path.display()))
}

/// What a [`ProtectedMount`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountKind {
    /// A read-only bind of the entry onto itself (recursively): it cannot be modified, and as a
    /// mount point it cannot be removed, renamed or replaced.
    ReadOnly,
    /// A writable bind of a directory onto itself: its content stays writable, but as a mount
    /// point it cannot be removed, renamed or replaced — so a protected entry inside cannot be
    /// moved away with it (`.git` itself, and every directory leading to a protected entry).
    Pin,
}

/// The mounts that keep the protected entries existing in `spec`'s write roots (within
/// [`SPLIT_DEPTH`] levels, deeper along prefixes of protected rules) unmodifiable and in place,
/// outer ones first (a bind made later inside one stays visible). Symlinks are skipped (a mount
/// cannot sit on a symlink): they are returned as the second list.
pub(super) fn protected_mounts(
    spec: &SandboxSpec,
) -> Result<(Vec<ProtectedMount>, Vec<PathBuf>), SandboxError> {
    let mut finder = MountFinder {
        protected: &spec.protected,
        visited: 0,
        mounts: Vec::new(),
        symlinks: Vec::new(),
    };
    for given in &spec.write {
        // A protected write root is refused by `plan`; a file root has no entries.
        let root = existing(spec, given)?;
        if !root.is_dir() {
            continue;
        }
        finder.find(&root, 0).map_err(|e| match e {
            WalkError::TooLarge => SandboxError::WalkTooLarge {
                profile: spec.name.clone(),
                root: given.clone(),
                limit: WALK_ENTRY_LIMIT,
            },
            WalkError::Io(path, err) => path_error(spec, &path, &err),
        })?;
    }
    Ok((finder.mounts, finder.symlinks))
}

struct MountFinder<'a> {
    protected: &'a ProtectedNames,
    visited: usize,
    mounts: Vec<ProtectedMount>,
    symlinks: Vec<PathBuf>,
}

impl MountFinder<'_> {
    /// Adds the mounts for the protected entries under `dir`; whether there were any.
    fn find(&mut self, dir: &Path, depth: usize) -> Result<bool, WalkError> {
        let entries = std::fs::read_dir(dir).map_err(|e| WalkError::Io(dir.to_path_buf(), e))?;
        let mut found = false;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(dir.to_path_buf(), e)),
            };
            self.visited += 1;
            if self.visited > WALK_ENTRY_LIMIT {
                return Err(WalkError::TooLarge);
            }
            let path = entry.path();
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalkError::Io(path, e)),
            };
            if file_type.is_symlink() {
                if self.protected.match_path(&path).is_some() {
                    self.symlinks.push(path);
                }
                continue;
            }
            if self.protected.keeps_read_only(&path, file_type.is_dir()) {
                self.mounts.push(ProtectedMount {
                    path,
                    kind: MountKind::ReadOnly,
                });
                found = true;
                continue;
            }
            if !file_type.is_dir() {
                continue;
            }
            // An entry-only protected directory (`.git`) stays in place with its content
            // writable; so does every directory leading to a protected entry.
            let entry_only = self.protected.match_path(&path).is_some();
            let look_inside =
                entry_only || depth + 1 < SPLIT_DEPTH || leads_to_protected(self.protected, &path);
            let mark = self.mounts.len();
            let inside = look_inside && self.find(&path, depth + 1)?;
            if entry_only || inside {
                self.mounts.insert(
                    mark,
                    ProtectedMount {
                        path,
                        kind: MountKind::Pin,
                    },
                );
                found = true;
            }
        }
        Ok(found)
    }
}

/// Is `path` a proper prefix of a protected rule: it ends with the first components of a
/// multi-component name (`…/.git` for `.git/hooks`), or it is an ancestor of a protected absolute
/// path? Then granting it whole would let the protected entry be created or replaced.
fn leads_to_protected(protected: &ProtectedNames, path: &Path) -> bool {
    protected.leads_to(path)
}

/// An access `verbd sandbox why` asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// Read a file, or list a directory.
    Read,
    /// Modify a file (and remove or replace it), create a file in a directory, or create a
    /// path that does not exist yet.
    Write,
    /// Execute a file.
    Exec,
}

/// One right the kernel checks for an access, where it checks it, and what decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightCheck {
    /// What the right lets the program do (`read`, `modify`, `create it`, …).
    pub action: &'static str,
    /// The path Landlock checks the right on (the target, or its directory for creating and
    /// removing entries).
    pub checked_on: PathBuf,
    /// The grants that give the right: their origin and the path each is attached to. Empty:
    /// denied.
    pub granted_by: Vec<String>,
    /// A bind mount of `verbd exec`'s mount namespace that refuses it although Landlock grants
    /// it (read-only: `EROFS`; a mount point cannot be removed or renamed: `EBUSY`).
    pub blocked_by: Option<String>,
}

impl RightCheck {
    fn allowed(&self) -> bool {
        !self.granted_by.is_empty() && self.blocked_by.is_none()
    }
}

/// What a profile's Landlock rules decide for one access to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The path as given and as resolved (symlinks followed, as the kernel would).
    pub given: PathBuf,
    pub resolved: PathBuf,
    pub access: FsAccess,
    /// The first check decides; the others (removing or replacing what is written) are shown
    /// because a split write root decides them differently.
    pub checks: Vec<RightCheck>,
    /// Why nothing grants it, when that is known: a private path, a protected entry.
    pub notes: Vec<String>,
}

impl Explanation {
    /// Does the profile allow the access (its first check)?
    pub fn allowed(&self) -> bool {
        self.checks.first().is_some_and(RightCheck::allowed)
    }
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let access = match self.access {
            FsAccess::Read => "read",
            FsAccess::Write => "write",
            FsAccess::Exec => "exec",
        };
        write!(f, "{access} {}", self.given.display())?;
        if self.resolved != self.given {
            write!(f, " (resolves to {})", self.resolved.display())?;
        }
        writeln!(f, ": {}", if self.allowed() { "ALLOWED" } else { "DENIED" })?;
        for check in &self.checks {
            write!(
                f,
                "  {} (checked on {}): ",
                check.action,
                check.checked_on.display()
            )?;
            match (&check.blocked_by, check.granted_by.is_empty()) {
                (_, true) => writeln!(f, "denied, no rule grants it")?,
                (Some(mount), false) => writeln!(
                    f,
                    "denied by {mount}, although {} grants it",
                    check.granted_by.join("; ")
                )?,
                (None, false) => writeln!(f, "allowed by {}", check.granted_by.join("; "))?,
            }
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}

/// Explains what the profile's Landlock rules (as `plan` builds them for `mode`) and the bind
/// mounts of `verbd exec`'s mount namespace (`mounts`, empty otherwise) decide for `access` to
/// `path`: which rights the kernel checks where, and which grants give them. Filesystem rules
/// only: the seccomp filters and the connect broker decide other things.
pub fn explain(
    spec: &SandboxSpec,
    mode: WriteRoots,
    mounts: &[ProtectedMount],
    path: &Path,
    access: FsAccess,
) -> Result<Explanation, SandboxError> {
    explain_with(spec, mode, mounts, path, access, false)
}

/// [`explain`] as `verbd exec` decides: also what its create broker refuses — a new protected
/// name anywhere in a write root (module `create_broker`).
pub fn explain_exec(
    spec: &SandboxSpec,
    mode: WriteRoots,
    mounts: &[ProtectedMount],
    path: &Path,
    access: FsAccess,
) -> Result<Explanation, SandboxError> {
    explain_with(spec, mode, mounts, path, access, true)
}

fn explain_with(
    spec: &SandboxSpec,
    mode: WriteRoots,
    mounts: &[ProtectedMount],
    path: &Path,
    access: FsAccess,
    creates_brokered: bool,
) -> Result<Explanation, SandboxError> {
    // `verbd exec` follows a linked worktree's git directories out of its write roots.
    let followed = if creates_brokered {
        super::git_dirs::follow(spec)
    } else {
        Vec::new()
    };
    let grants = plan(spec, mode, &followed)?;
    let missing = |e: io::Error| path_error(spec, path, &e);
    let (resolved, metadata) = match std::fs::canonicalize(path) {
        Ok(resolved) => {
            let metadata = std::fs::metadata(&resolved).map_err(missing)?;
            (resolved, Some(metadata))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && access == FsAccess::Write => {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(missing(e));
            };
            (
                std::fs::canonicalize(parent).map_err(missing)?.join(name),
                None,
            )
        }
        Err(e) => return Err(missing(e)),
    };
    let parent = resolved.parent().unwrap_or(Path::new("/")).to_path_buf();
    let is_dir = metadata.as_ref().is_some_and(|m| m.is_dir());
    // Each right, where Landlock checks it, and what a bind mount would refuse: writing beneath
    // a read-only bind, or moving an entry that is itself a mount point.
    let writes = |p: &Path| read_only_mount(mounts, p);
    let moves = |entry: &Path, dir: &Path| {
        mounts
            .iter()
            .find(|m| m.path == entry)
            .map(|m| format!("the mount point {} (EBUSY)", m.path.display()))
            .or_else(|| read_only_mount(mounts, dir))
    };
    // What `verbd exec`'s create broker refuses on a protected name at any depth.
    let protected_here = if creates_brokered {
        super::create_broker::CreatePolicy::of(
            spec,
            mounts.iter().map(|m| m.path.as_path()),
            &followed,
        )
        .protected(&resolved)
    } else {
        None
    };
    let broker = |which: &str| {
        protected_here
            .as_ref()
            .map(|hit| format!("the create broker of `verbd exec`: {which} {hit} (EACCES)"))
    };
    let wanted: Vec<(&'static str, &Path, AccessFs, Option<String>)> = match (access, &metadata) {
        (FsAccess::Read, _) if is_dir => vec![("list", &resolved, AccessFs::ReadDir, None)],
        (FsAccess::Read, _) => vec![("read", &resolved, AccessFs::ReadFile, None)],
        (FsAccess::Exec, _) => vec![("execute", &resolved, AccessFs::Execute, None)],
        (FsAccess::Write, None) => vec![(
            "create it",
            &parent,
            AccessFs::MakeReg,
            writes(&parent).or(broker("a new")),
        )],
        (FsAccess::Write, Some(_)) if is_dir => vec![
            (
                "create a file in it",
                &resolved,
                AccessFs::MakeReg,
                writes(&resolved),
            ),
            (
                "remove or rename it",
                &parent,
                AccessFs::RemoveDir,
                moves(&resolved, &parent).or(broker("the")),
            ),
        ],
        (FsAccess::Write, Some(_)) => vec![
            (
                "modify",
                &resolved,
                AccessFs::WriteFile,
                writes(&resolved).or(broker("the")),
            ),
            (
                "remove or replace it",
                &parent,
                AccessFs::RemoveFile,
                moves(&resolved, &parent).or(broker("the")),
            ),
        ],
    };
    // `verbd exec` lists the directories above the roots itself (module `ancestor_listing`).
    let listed_as_ancestor = creates_brokered
        && access == FsAccess::Read
        && is_dir
        && super::ancestor_listing::AncestorListing::of(spec).names(&resolved);
    let checks = wanted
        .into_iter()
        .map(|(action, checked_on, right, blocked_by)| {
            let mut granted_by: Vec<String> = grants
                .iter()
                .filter(|g| checked_on.starts_with(&g.path) && g.access.contains(right))
                .map(|g| format!("{} (rule on {})", g.origin, g.path.display()))
                .collect();
            if listed_as_ancestor && right == AccessFs::ReadDir {
                granted_by.push(
                    "the ancestor listing of `verbd exec` (a directory above a root: its entry names only)"
                        .into(),
                );
            }
            RightCheck {
                action,
                checked_on: checked_on.to_path_buf(),
                granted_by,
                blocked_by,
            }
        })
        .collect();
    let mut notes = Vec::new();
    if let Some(private) = spec.private.iter().find(|p| resolved.starts_with(p)) {
        notes.push(format!(
            "{} is a private path of the daemon (policy, secret source, credentials or state directory): no child reaches it",
            private.display()
        ));
    }
    if mode == WriteRoots::ProtectedReadOnly
        && let Some(root) = spec
            .write
            .iter()
            .filter_map(|w| std::fs::canonicalize(w).ok())
            .find(|w| resolved.starts_with(w))
    {
        if let Some(hit) = spec.protected.match_path(&resolved) {
            notes.push(format!(
                "a {hit} inside write root {}: the split keeps it read-only",
                root.display()
            ));
        } else if access == FsAccess::Write && metadata.is_none() {
            notes.push(format!(
                "write root {} is split around protected names: new entries can be created only inside its subdirectories granted whole",
                root.display()
            ));
        }
    }
    Ok(Explanation {
        given: path.to_path_buf(),
        resolved,
        access,
        checks,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{Network, Rlimits};

    fn spec_with_write(root: &Path) -> SandboxSpec {
        SandboxSpec {
            name: "t".into(),
            read: vec![],
            write: vec![root.to_path_buf()],
            private: vec![],
            protected: ProtectedNames::builtin(),
            network: Network::None,
            keep_capabilities: vec![],
            rlimits: Rlimits::default(),
            umask: None,
            run_as: None,
            unix_sockets: vec![],
            keep_env: vec![],
        }
    }

    fn granted(grants: &[Grant], path: &Path) -> Option<BitFlags<AccessFs>> {
        grants.iter().find(|g| g.path == path).map(|g| g.access)
    }

    #[test]
    fn split_skips_protected_and_descends_into_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in [".git/hooks", ".git/objects/ab", "src/deep/er", "docs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "CLAUDE.md",
            ".git/config",
            ".git/HEAD",
            "src/lib.rs",
            "docs/AGENTS.md",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let grants = plan(&spec_with_write(&root), WriteRoots::ProtectedReadOnly, &[]).unwrap();
        assert_eq!(granted(&grants, &root), Some(read_access()));
        assert_eq!(granted(&grants, &root.join("CLAUDE.md")), None);
        assert_eq!(granted(&grants, &root.join("link")), None);
        assert_eq!(granted(&grants, &root.join(".git")), Some(read_access()));
        assert_eq!(granted(&grants, &root.join(".git/hooks")), None);
        assert_eq!(granted(&grants, &root.join(".git/config")), None);
        assert_eq!(
            granted(&grants, &root.join(".git/objects")),
            Some(dir_write_access())
        );
        assert_eq!(
            granted(&grants, &root.join(".git/HEAD")),
            Some(file_write_access())
        );
        assert_eq!(
            granted(&grants, &root.join("src")),
            Some(dir_write_access())
        );
        assert_eq!(
            granted(&grants, &root.join("src/lib.rs")),
            None,
            "covered by src"
        );
        assert_eq!(granted(&grants, &root.join("docs")), Some(read_access()));
        assert_eq!(granted(&grants, &root.join("docs/AGENTS.md")), None);
    }

    #[test]
    fn whole_write_roots_get_one_grant_with_every_right() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join("CLAUDE.md"), "x").unwrap();
        let grants = plan(&spec_with_write(&root), WriteRoots::Whole, &[]).unwrap();
        assert_eq!(granted(&grants, &root), Some(dir_write_access()));
        assert_eq!(granted(&grants, &root.join(".git")), None);
        assert_eq!(granted(&grants, &root.join("CLAUDE.md")), None);
    }

    #[test]
    fn read_roots_are_split_around_private_paths_and_write_roots_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["etc/verbd/secrets", "etc/ssl", "state"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "etc/passwd",
            "etc/verbd/policy.toml",
            "etc/verbd/pack.toml",
            "etc/verbd/secrets/pg",
            "state/journal.jsonl",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join("state"), root.join("etc/state-link")).unwrap();
        let mut spec = spec_with_write(&root.join("etc/ssl"));
        spec.read = vec![root.clone(), root.join("state/../etc/ssl")];
        spec.private = vec![
            root.join("etc/verbd/policy.toml"),
            root.join("etc/verbd/secrets/pg"),
            root.join("state"),
        ];
        let grants = plan(&spec, WriteRoots::Whole, &[]).unwrap();
        let read_dir = BitFlags::from(AccessFs::ReadDir);
        assert_eq!(
            granted(&grants, &root),
            None,
            "the state directory is beneath"
        );
        assert_eq!(granted(&grants, &root.join("etc")), Some(read_dir));
        assert_eq!(granted(&grants, &root.join("etc/verbd")), Some(read_dir));
        assert_eq!(
            granted(&grants, &root.join("etc/verbd/secrets")),
            Some(read_dir)
        );
        assert_eq!(granted(&grants, &root.join("etc/verbd/policy.toml")), None);
        assert_eq!(granted(&grants, &root.join("etc/verbd/secrets/pg")), None);
        assert_eq!(granted(&grants, &root.join("etc/state-link")), None);
        assert_eq!(
            granted(&grants, &root.join("etc/verbd/pack.toml")),
            Some(read_grant(false))
        );
        assert_eq!(
            granted(&grants, &root.join("etc/passwd")),
            Some(read_grant(false))
        );
        assert!(
            grants
                .iter()
                .all(|g| !g.path.starts_with(root.join("state")))
        );

        spec.read = vec![root.join("state")];
        assert!(matches!(
            plan(&spec, WriteRoots::Whole, &[]),
            Err(SandboxError::PrivateRoot {
                kind: "read root",
                ..
            })
        ));
        spec.read = vec![];
        for write in [root.clone(), root.join("state")] {
            spec.write = vec![write];
            let err = plan(&spec, WriteRoots::Whole, &[]).err().unwrap();
            assert!(
                matches!(
                    err,
                    SandboxError::PrivateRoot {
                        kind: "write root",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn explain_names_the_deciding_rule_and_the_reason_for_a_denial() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("repo/src")).unwrap();
        std::fs::write(root.join("repo/CLAUDE.md"), "x").unwrap();
        std::fs::write(root.join("policy.toml"), "x").unwrap();
        let mut spec = spec_with_write(&root.join("repo"));
        spec.read = vec![root.clone()];
        spec.private = vec![root.join("policy.toml")];
        let memory = root.join("repo/CLAUDE.md");

        let whole = explain(&spec, WriteRoots::Whole, &[], &memory, FsAccess::Write).unwrap();
        assert!(whole.allowed(), "{whole}");
        assert!(
            whole.checks[0].granted_by[0].starts_with("write root"),
            "{whole}"
        );

        let split = explain(
            &spec,
            WriteRoots::ProtectedReadOnly,
            &[],
            &memory,
            FsAccess::Write,
        )
        .unwrap();
        assert!(!split.allowed(), "{split}");
        assert!(
            split.to_string().contains("protected name `claude.md`"),
            "{split}"
        );
        let new = root.join("repo/new.py");
        let top = explain(
            &spec,
            WriteRoots::ProtectedReadOnly,
            &[],
            &new,
            FsAccess::Write,
        )
        .unwrap();
        assert!(
            !top.allowed() && top.to_string().contains("split around"),
            "{top}"
        );
        let nested = root.join("repo/src/new.rs");
        assert!(
            explain(
                &spec,
                WriteRoots::ProtectedReadOnly,
                &[],
                &nested,
                FsAccess::Write
            )
            .unwrap()
            .allowed()
        );

        let policy = explain(
            &spec,
            WriteRoots::Whole,
            &[],
            &root.join("policy.toml"),
            FsAccess::Read,
        )
        .unwrap();
        assert!(!policy.allowed(), "{policy}");
        assert!(
            policy.to_string().contains("private path of the daemon"),
            "{policy}"
        );
        let read = explain(&spec, WriteRoots::Whole, &[], &memory, FsAccess::Read).unwrap();
        assert!(read.allowed(), "{read}");
        let exec = explain(&spec, WriteRoots::Whole, &[], &memory, FsAccess::Exec).unwrap();
        assert!(exec.allowed(), "the read root grants execute: {exec}");
        let outside = explain(
            &spec,
            WriteRoots::Whole,
            &[],
            Path::new("/etc/hostname"),
            FsAccess::Read,
        )
        .unwrap();
        assert!(!outside.allowed(), "{outside}");

        // verbd exec's mount namespace: Landlock grants the write, the read-only bind refuses it
        // and the mount point cannot be moved; a new file beside it is allowed.
        let (mounts, _) = protected_mounts(&spec).unwrap();
        let bound = explain(&spec, WriteRoots::Whole, &mounts, &memory, FsAccess::Write).unwrap();
        assert!(!bound.allowed(), "{bound}");
        assert!(
            bound.checks.iter().all(|c| c.blocked_by.is_some()),
            "{bound}"
        );
        assert!(
            bound.to_string().contains("read-only bind mount of"),
            "{bound}"
        );
        assert!(bound.to_string().contains("EBUSY"), "{bound}");
        assert!(
            explain(&spec, WriteRoots::Whole, &mounts, &new, FsAccess::Write)
                .unwrap()
                .allowed()
        );
    }

    #[test]
    fn protected_mounts_pin_the_way_to_each_protected_entry_outer_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in [".git/hooks", ".git/objects", "docs/deep", "src"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "CLAUDE.md",
            ".git/config",
            "docs/deep/AGENTS.md",
            "src/lib.rs",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("CLAUDE.md", root.join("GEMINI.md")).unwrap();
        let (mounts, symlinks) = protected_mounts(&spec_with_write(&root)).unwrap();
        let kind = |rel: &str| {
            mounts
                .iter()
                .position(|m| m.path == root.join(rel))
                .map(|i| (i, mounts[i].kind))
        };
        assert_eq!(kind("CLAUDE.md").map(|k| k.1), Some(MountKind::ReadOnly));
        assert_eq!(kind(".git/hooks").map(|k| k.1), Some(MountKind::ReadOnly));
        assert_eq!(kind(".git/config").map(|k| k.1), Some(MountKind::ReadOnly));
        assert_eq!(kind(".git/objects"), None);
        assert_eq!(kind("src"), None);
        let (git, _) = kind(".git").unwrap();
        let (docs, _) = kind("docs").unwrap();
        let (deep, _) = kind("docs/deep").unwrap();
        let (agents, _) = kind("docs/deep/AGENTS.md").unwrap();
        assert_eq!(mounts[git].kind, MountKind::Pin);
        assert!(git < kind(".git/hooks").unwrap().0);
        assert!(docs < deep && deep < agents, "{mounts:?}");
        assert_eq!(symlinks, vec![root.join("GEMINI.md")]);
    }

    #[test]
    fn bad_roots_are_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = plan(&spec_with_write(&missing), WriteRoots::Whole, &[])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("nope"), "{err}");
        std::fs::create_dir(dir.path().join(".claude")).unwrap();
        let err = plan(
            &spec_with_write(&dir.path().join(".claude")),
            WriteRoots::Whole,
            &[],
        )
        .err()
        .unwrap();
        assert!(
            matches!(err, SandboxError::ProtectedWriteRoot { .. }),
            "{err}"
        );
        let mut spec = spec_with_write(dir.path());
        std::fs::create_dir(dir.path().join("in")).unwrap();
        spec.write.push(dir.path().join("in"));
        for mode in [WriteRoots::Whole, WriteRoots::ProtectedReadOnly] {
            assert!(matches!(
                plan(&spec, mode, &[]),
                Err(SandboxError::NestedWriteRoots { .. })
            ));
        }
    }
}
