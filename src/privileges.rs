//! Dropping from root to the daemon user, for good, after the sockets are bound.
//!
//! Invariants: a daemon started as root either runs as `[daemon] user` (not root, existing) with
//! real, effective and saved ids all changed and no way back, or — only with `allow_root = true` —
//! stays root; every other case is a [`PrivilegeError`] and nothing is served. Capabilities: none,
//! unless a sandbox profile runs its children as another user (`run_as`), which needs
//! `CAP_SETUID`/`CAP_SETGID` (and `CAP_SETPCAP` to empty the children's bounding sets); not
//! `CAP_KILL`, since such children are killed as their own uid (module `sandbox::kill`). A daemon
//! holding `CAP_SETUID` or `CAP_SETGID` (dropped from root here, or started with them by systemd)
//! runs under the identity guard (module `sandbox::identity`): `no_new_privs`, and only its own
//! ids and the policy's `run_as` ids can be taken. The drop is verified by what it must
//! guarantee: the ids read back, no capability but the kept ones in any set (none inheritable or
//! ambient), and every way back to uid or gid 0 tried and failed. Root's file operations on the state
//! dir (which the daemon user can write) never follow a link: `O_NOFOLLOW` descriptors,
//! `AT_EMPTY_PATH` chown of the inode that was checked, and unexpected entries refused.
#![forbid(unsafe_code)]

use crate::policy::Policy;
use caps::{CapSet, Capability};
use nix::unistd::{Gid, Uid, User, getresgid, getresuid, setgroups, setresgid, setresuid};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why the daemon cannot take on its identity.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "refusing to run as root: set [daemon] user = \"verbd\" (the daemon drops to it after binding its socket), or allow_root = true if you really mean it"
    )]
    RootRefused,
    #[error(
        "daemon.user {0:?} does not exist (create it: systemd-sysusers systemd/sysusers.d/verbd.conf)"
    )]
    NoSuchUser(String),
    #[error("daemon.user {0:?} is root; choose an unprivileged user")]
    UserIsRoot(String),
    #[error("cannot give {path} to the daemon user: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} {what}: refusing to change its owner as root; remove it (the state dir holds only the daemon's own files and directories) and start again",
        path.display()
    )]
    UnexpectedEntry { path: PathBuf, what: String },
    #[error("{what} failed: {source}")]
    Syscall {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{0} could not be verified; refusing to serve")]
    NotVerified(String),
}

impl PrivilegeError {
    /// A mistake in the configuration or the state dir (fixed by the operator, not by a
    /// restart: a planted entry is still there at the next start).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            PrivilegeError::RootRefused
                | PrivilegeError::NoSuchUser(_)
                | PrivilegeError::UserIsRoot(_)
                | PrivilegeError::UnexpectedEntry { .. }
        )
    }
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> PrivilegeError {
    move |e| PrivilegeError::Syscall {
        what,
        source: e.into(),
    }
}

fn caps_err(what: &'static str) -> impl FnOnce(caps::errors::CapsError) -> PrivilegeError {
    move |e| PrivilegeError::Syscall {
        what,
        source: std::io::Error::other(e.to_string()),
    }
}

/// The daemon user's account, if the policy names one that may be used.
pub fn daemon_user(policy: &Policy) -> Result<Option<User>, PrivilegeError> {
    let Some(name) = &policy.daemon.user else {
        return Ok(None);
    };
    let user = User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| PrivilegeError::NoSuchUser(name.clone()))?;
    if user.uid.is_root() {
        return Err(PrivilegeError::UserIsRoot(name.clone()));
    }
    Ok(Some(user))
}

/// The uid the daemon will run as when started by the current user (for the offline self-test).
pub fn daemon_uid_for(policy: &Policy) -> u32 {
    let euid = nix::unistd::geteuid();
    match daemon_user(policy) {
        Ok(Some(user)) if euid.is_root() => user.uid.as_raw(),
        _ => euid.as_raw(),
    }
}

/// Started as root: give the state dir to the daemon user, then drop to it for good. A no-op for
/// a daemon started unprivileged.
pub fn drop_to_daemon_user(policy: &Policy, state_dir: &Path) -> Result<(), PrivilegeError> {
    if !nix::unistd::geteuid().is_root() {
        return guard_kept_identity_caps(policy);
    }
    let Some(user) = daemon_user(policy)? else {
        if policy.daemon.allow_root {
            tracing::warn!("running as root because the policy sets daemon.allow_root = true");
            return Ok(());
        }
        return Err(PrivilegeError::RootRefused);
    };
    give_state_dir(state_dir, &user)?;
    let keep: caps::CapsHashSet = if policy.sandboxes.values().any(|s| s.run_as.is_some()) {
        [
            Capability::CAP_SETUID,
            Capability::CAP_SETGID,
            Capability::CAP_SETPCAP,
        ]
        .into()
    } else {
        caps::CapsHashSet::new()
    };
    for cap in caps::runtime::thread_all_supported() {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(caps_err("dropping a capability from the bounding set"))?;
        }
    }
    setgroups(&[user.gid]).map_err(sys("setgroups"))?;
    setresgid(user.gid, user.gid, user.gid).map_err(sys("setresgid"))?;
    if !keep.is_empty() {
        nix::sys::prctl::set_keepcaps(true).map_err(sys("PR_SET_KEEPCAPS"))?;
    }
    setresuid(user.uid, user.uid, user.uid).map_err(sys("setresuid"))?;
    if !keep.is_empty() {
        nix::sys::prctl::set_keepcaps(false).map_err(sys("PR_SET_KEEPCAPS"))?;
        caps::set(None, CapSet::Permitted, &keep)
            .map_err(caps_err("keeping CAP_SETUID/SETGID/SETPCAP"))?;
        caps::set(None, CapSet::Effective, &keep)
            .map_err(caps_err("keeping CAP_SETUID/SETGID/SETPCAP"))?;
    }
    caps::clear(None, CapSet::Inheritable)
        .map_err(caps_err("clearing inheritable capabilities"))?;
    caps::clear(None, CapSet::Ambient).map_err(caps_err("clearing ambient capabilities"))?;
    if !keep.is_empty() {
        install_identity_guard(policy, user.uid, user.gid)?;
    }
    let not_verified = |why: String| {
        PrivilegeError::NotVerified(format!("the privilege drop to {} ({why})", user.name))
    };
    for (name, set, want) in [
        ("bounding", CapSet::Bounding, &keep),
        ("permitted", CapSet::Permitted, &keep),
        ("effective", CapSet::Effective, &keep),
        (
            "inheritable",
            CapSet::Inheritable,
            &caps::CapsHashSet::new(),
        ),
        ("ambient", CapSet::Ambient, &caps::CapsHashSet::new()),
    ] {
        let held = caps::read(None, set).map_err(caps_err("reading a capability set"))?;
        if &held != want {
            return Err(not_verified(format!(
                "the {name} set holds {} capabilities, not {}",
                held.len(),
                want.len()
            )));
        }
    }
    let uids = getresuid().map_err(sys("getresuid"))?;
    let gids = getresgid().map_err(sys("getresgid"))?;
    if [uids.real, uids.effective, uids.saved] != [user.uid; 3]
        || [gids.real, gids.effective, gids.saved] != [user.gid; 3]
    {
        return Err(not_verified("the ids read back differ".into()));
    }
    if !keep.is_empty() && !nix::sys::prctl::get_no_new_privs().unwrap_or(false) {
        return Err(not_verified("no_new_privs is not set".into()));
    }
    crate::sandbox::identity::root_unreachable().map_err(not_verified)
}

/// The ids a guarded daemon may take: its own and every `run_as` of the policy.
fn install_identity_guard(policy: &Policy, uid: Uid, gid: Gid) -> Result<(), PrivilegeError> {
    let run_as: Vec<_> = policy.sandboxes.values().filter_map(|s| s.run_as).collect();
    let uids: Vec<u32> = std::iter::once(uid.as_raw())
        .chain(run_as.iter().map(|r| r.uid))
        .collect();
    let gids: Vec<u32> = std::iter::once(gid.as_raw())
        .chain(run_as.iter().map(|r| r.gid))
        .collect();
    crate::sandbox::identity::guard(&uids, &gids).map_err(|source| PrivilegeError::Syscall {
        what: "installing the identity guard",
        source,
    })
}

/// A daemon started unprivileged but handed `CAP_SETUID`/`CAP_SETGID` (systemd's
/// `AmbientCapabilities=` for `run_as`) takes the identity guard too, and proves it.
fn guard_kept_identity_caps(policy: &Policy) -> Result<(), PrivilegeError> {
    let permitted =
        caps::read(None, CapSet::Permitted).map_err(caps_err("reading the permitted set"))?;
    if !permitted.contains(&Capability::CAP_SETUID) && !permitted.contains(&Capability::CAP_SETGID)
    {
        return Ok(());
    }
    install_identity_guard(policy, nix::unistd::geteuid(), nix::unistd::getegid())?;
    crate::sandbox::identity::root_unreachable()
        .map_err(|why| PrivilegeError::NotVerified(format!("the identity guard ({why})")))
}

/// The state dir is made 0700 through a descriptor opened with `O_NOFOLLOW`: a symlink put in
/// its place is refused, never followed.
pub fn prepare_state_dir(state_dir: &Path) -> Result<(), PrivilegeError> {
    let dir = open_state_dir(state_dir)?;
    rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700)).map_err(|e| PrivilegeError::StateDir {
        path: state_dir.to_path_buf(),
        source: e.into(),
    })
}

fn open_state_dir(state_dir: &Path) -> Result<OwnedFd, PrivilegeError> {
    rustix::fs::open(
        state_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => PrivilegeError::UnexpectedEntry {
            path: state_dir.to_path_buf(),
            what: "is a symlink or not a directory".into(),
        },
        e => PrivilegeError::StateDir {
            path: state_dir.to_path_buf(),
            source: e.into(),
        },
    })
}

/// The state dir and its direct entries become the daemon user's. Nothing is followed: each
/// entry is opened `O_PATH | O_NOFOLLOW` beneath the state dir's descriptor, checked through
/// that descriptor (a directory, or a regular file with one link, owned by root or the daemon
/// user) and chowned through it (`AT_EMPTY_PATH`), so the inode checked is the inode chowned.
/// Sockets (the ones this process bound) are skipped, never chowned. A symlink, FIFO, device, a
/// file with other hard links or a foreign owner is refused:
/// the daemon user can write the state dir and could have planted it to make root give away a
/// file that is not the daemon's.
fn give_state_dir(state_dir: &Path, user: &User) -> Result<(), PrivilegeError> {
    let dir = open_state_dir(state_dir)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: Errno| PrivilegeError::StateDir {
            path,
            source: e.into(),
        }
    };
    check_owner(
        state_dir,
        &rustix::fs::fstat(&dir).map_err(io(state_dir))?,
        user,
    )?;
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir).map_err(io(state_dir))? {
        let entry = entry.map_err(io(state_dir))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        // The journal witness and a gap acknowledgement stay root's: the daemon user may only
        // append to the witness through the descriptor opened before this drop.
        if crate::journal::ROOT_OWNED_FILES
            .iter()
            .any(|root_owned| name == root_owned.as_bytes())
        {
            continue;
        }
        entries.push(std::ffi::OsStr::from_bytes(name).to_os_string());
    }
    for name in entries {
        let path = state_dir.join(&name);
        let entry = rustix::fs::openat(
            &dir,
            name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io(&path))?;
        let stat = rustix::fs::fstat(&entry).map_err(io(&path))?;
        let unexpected = |what: String| PrivilegeError::UnexpectedEntry {
            path: path.clone(),
            what,
        };
        match FileType::from_raw_mode(stat.st_mode) {
            // The sockets this process bound here a moment ago (the default socket is
            // `state_dir/verbd.sock`): the daemon keeps their listening descriptors and needs no
            // ownership of the names. Left as they are, never chowned, so a socket the daemon
            // user planted gains nothing either.
            FileType::Socket => continue,
            FileType::Directory => {}
            FileType::RegularFile if stat.st_nlink == 1 => {}
            FileType::RegularFile => {
                return Err(unexpected(format!(
                    "is a file with {} hard links (another name elsewhere could be a file that is not the daemon's)",
                    stat.st_nlink
                )));
            }
            FileType::Symlink => return Err(unexpected("is a symlink".into())),
            other => {
                return Err(unexpected(format!(
                    "is a {other:?}, not a file or directory"
                )));
            }
        }
        check_owner(&path, &stat, user)?;
        rustix::fs::chownat(
            &entry,
            "",
            Some(rustix::fs::Uid::from_raw(user.uid.as_raw())),
            Some(rustix::fs::Gid::from_raw(user.gid.as_raw())),
            AtFlags::EMPTY_PATH,
        )
        .map_err(io(&path))?;
    }
    rustix::fs::fchown(
        &dir,
        Some(rustix::fs::Uid::from_raw(user.uid.as_raw())),
        Some(rustix::fs::Gid::from_raw(user.gid.as_raw())),
    )
    .map_err(io(state_dir))
}

fn check_owner(path: &Path, stat: &rustix::fs::Stat, user: &User) -> Result<(), PrivilegeError> {
    if stat.st_uid == 0 || stat.st_uid == user.uid.as_raw() {
        return Ok(());
    }
    Err(PrivilegeError::UnexpectedEntry {
        path: path.to_path_buf(),
        what: format!(
            "is owned by uid {}, neither root nor the daemon user {}",
            stat.st_uid, user.name
        ),
    })
}
