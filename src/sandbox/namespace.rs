//! The user and mount namespace of `verbd exec`: existing protected entries of the write roots
//! become read-only bind mounts, so the write roots themselves can be granted whole.
//!
//! How (as bwrap-based sandboxes do): the forked child, before Landlock and seccomp,
//! `unshare(CLONE_NEWUSER | CLONE_NEWNS)`, maps its own uid and gid to themselves (so files keep
//! their owner and the program sees its uid), makes every mount a slave (nothing propagates back
//! to the host), then binds each [`ProtectedMount`] onto itself: read-only (recursively, with
//! `mount_setattr`) for a protected entry, writable for a directory that must merely stay in
//! place. A mount point cannot be removed, renamed or replaced (`EBUSY`), a read-only one cannot
//! be written (`EROFS`). The child then drops every capability it holds in the new user
//! namespace (the `capabilities` stage), sets no_new_privs, and its seccomp filter refuses
//! `mount`, `umount2`, the new mount API, `unshare` and `setns`: the binds cannot be undone.
//!
//! Availability: [`probe`] tries the same steps in a throwaway child. Unprivileged user
//! namespaces may be switched off (`user.max_user_namespaces = 0`) or stripped of their
//! capabilities (Ubuntu 24.04's `kernel.apparmor_restrict_unprivileged_userns = 1`); the probe
//! then fails and names the setting, and `verbd exec` uses the Landlock-only split instead.
//!
//! Invariant: every step fails closed — a child whose namespace is not fully set up never execs.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::fs_rules::{MountKind, ProtectedMount};

/// A namespace step that failed, with the errno.
#[derive(Debug, thiserror::Error)]
#[error("user and mount namespace: {step} failed: {source}")]
pub struct NamespaceError {
    pub step: String,
    pub source: io::Error,
}

fn failed(step: impl Into<String>) -> NamespaceError {
    NamespaceError {
        step: step.into(),
        source: io::Error::last_os_error(),
    }
}

/// Enters a new user and mount namespace with the caller's uid and gid mapped to themselves and
/// makes the `mounts`, in order. For a single-threaded process (the forked child of `verbd
/// exec`, or the probe's): `unshare(CLONE_NEWUSER)` refuses a multithreaded one.
pub(super) fn enter(mounts: &[ProtectedMount]) -> Result<(), NamespaceError> {
    // SAFETY: getuid/getgid cannot fail and take no pointers.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: plain syscall without pointers.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(failed("unshare(CLONE_NEWUSER | CLONE_NEWNS)"));
    }
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    // SAFETY: null source, type and data are valid for a propagation change; the target is a
    // NUL-terminated literal.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(failed("making every mount a slave"));
    }
    for mount in mounts {
        bind(mount)?;
    }
    Ok(())
}

fn write_proc(path: &str, content: &str) -> Result<(), NamespaceError> {
    std::fs::write(path, content).map_err(|source| NamespaceError {
        step: format!("writing {path}"),
        source,
    })
}

fn bind(mount: &ProtectedMount) -> Result<(), NamespaceError> {
    let shown = mount.path.display();
    let path = CString::new(mount.path.as_os_str().as_bytes()).map_err(|_| NamespaceError {
        step: format!("binding {shown}"),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    let flags = match mount.kind {
        MountKind::ReadOnly => libc::MS_BIND | libc::MS_REC,
        MountKind::Pin => libc::MS_BIND,
    };
    // SAFETY: source and target are the same NUL-terminated path, alive for the call; a bind
    // takes no file system type or data.
    if unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(failed(format!("binding {shown} onto itself")));
    }
    if mount.kind == MountKind::ReadOnly {
        let attributes = libc::mount_attr {
            attr_set: libc::MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `path` is NUL-terminated and `attributes` a valid `struct mount_attr` of the
        // size passed; both outlive the call. Only the read-only attribute is added: the
        // attributes the host locked (nosuid, nodev, noexec) are left as they are.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                path.as_ptr(),
                (libc::AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW) as libc::c_uint,
                &attributes as *const libc::mount_attr,
                std::mem::size_of::<libc::mount_attr>(),
            )
        };
        if rc != 0 {
            return Err(failed(format!("making the bind of {shown} read-only")));
        }
    }
    Ok(())
}

/// Whether `verbd exec` can use a user and mount namespace on this host, as this uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    Available,
    /// Why not, naming the host setting when one explains it.
    Unavailable(String),
}

/// `user.max_user_namespaces`.
const MAX_USER_NAMESPACES: &str = "/proc/sys/user/max_user_namespaces";
/// Ubuntu's AppArmor restriction on unprivileged user namespaces.
const APPARMOR_RESTRICTION: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

/// Tries `enter` with a read-only bind of a fresh temporary file in a throwaway child, and checks
/// that a write to it is refused. Call from a single-threaded process (it forks).
pub fn probe() -> Support {
    let setting = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|v| v.trim().to_string())
    };
    if setting(MAX_USER_NAMESPACES).as_deref() == Some("0") {
        return Support::Unavailable(format!(
            "user namespaces are switched off ({MAX_USER_NAMESPACES} is 0)"
        ));
    }
    let hint = match setting(APPARMOR_RESTRICTION).as_deref() {
        Some("1") => format!(
            " ({APPARMOR_RESTRICTION} is 1: AppArmor gives unprivileged user namespaces no capabilities unless a profile allows them)"
        ),
        _ => String::new(),
    };
    match probe_child() {
        Ok(()) => Support::Available,
        Err(reason) => Support::Unavailable(format!("{reason}{hint}")),
    }
}

/// Exit codes of the probe child.
const PROBE_OK: i32 = 0;
const PROBE_NAMESPACE_FAILED: i32 = 1;
const PROBE_BIND_WRITABLE: i32 = 2;

fn probe_child() -> Result<(), String> {
    let target = probe_file().map_err(|e| format!("cannot create the probe file: {e}"))?;
    let mounts = [ProtectedMount {
        path: target.clone(),
        kind: MountKind::ReadOnly,
    }];
    // SAFETY: the caller is single-threaded; the child only runs `enter`, one open and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let _ = std::fs::remove_file(&target);
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match enter(&mounts) {
            Err(_) => PROBE_NAMESPACE_FAILED,
            Ok(()) => match std::fs::OpenOptions::new().append(true).open(&target) {
                Ok(_) => PROBE_BIND_WRITABLE,
                Err(_) => PROBE_OK,
            },
        };
        // SAFETY: ends the probe child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a writable int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    let _ = std::fs::remove_file(&target);
    if waited != pid {
        return Err(format!("waitpid: {}", io::Error::last_os_error()));
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, PROBE_OK) => Ok(()),
        (true, PROBE_NAMESPACE_FAILED) => {
            Err("creating a user and mount namespace with read-only binds failed".into())
        }
        (true, PROBE_BIND_WRITABLE) => {
            Err("a read-only bind mount in a user namespace stayed writable".into())
        }
        _ => Err(format!(
            "the probe child ended with wait status {status:#x}"
        )),
    }
}

/// A fresh empty file in the temporary directory, for the probe's bind.
fn probe_file() -> io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let path = std::env::temp_dir().join(format!(
        "verbd-namespace-probe-{}-{nanos}",
        std::process::id()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok(path)
}
