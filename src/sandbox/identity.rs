//! The daemon's own identity guard, for a daemon that keeps `CAP_SETUID`/`CAP_SETGID` so that
//! `run_as` profiles can run their children as another user.
//!
//! Holding those capabilities, the daemon could otherwise take any uid, root's included. The
//! guard is a seccomp filter on the daemon itself, on every thread (`TSYNC`) and inherited by
//! every child (module `seccomp`, `identity_program`): an identity-changing call
//! succeeds only towards the daemon's own ids and the `run_as` ids of the policy it started with,
//! and `setgroups` only with an empty list. `no_new_privs` is set first (required to install a
//! filter without `CAP_SYS_ADMIN`, and it keeps a set-id program from handing root back).
//!
//! Invariants: installed once, never removed (the kernel cannot remove a filter); [`permits`]
//! answers for exactly the ids installed; [`root_unreachable`] tries each way to uid or gid 0
//! with raw syscalls on the calling thread only, so a probe that succeeded changes nothing for
//! the other threads, and the caller refuses to serve.

use std::io;
use std::sync::OnceLock;

use super::seccomp;

/// The ids the installed guard lets the daemon switch to (none installed: `None`).
static GUARDED: OnceLock<(Vec<u32>, Vec<u32>)> = OnceLock::new();

/// Installs the guard on every thread of this process: from now on only `uids` and `gids` (and
/// "unchanged") can be taken, and supplementary groups can only be emptied.
pub fn guard(uids: &[u32], gids: &[u32]) -> io::Result<()> {
    let mut uids = uids.to_vec();
    uids.sort_unstable();
    uids.dedup();
    let mut gids = gids.to_vec();
    gids.sort_unstable();
    gids.dedup();
    if uids.contains(&0) || gids.contains(&0) {
        return Err(io::Error::other(
            "the identity guard never lets uid or gid 0 in",
        ));
    }
    let program =
        seccomp::identity_program(&uids, &gids).map_err(|e| io::Error::other(e.to_string()))?;
    nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
    match seccomp::install(&program, libc::SECCOMP_FILTER_FLAG_TSYNC) {
        Ok(0) => {}
        Ok(thread) => {
            return Err(io::Error::other(format!(
                "thread {thread} could not take the filter"
            )));
        }
        Err(errno) => return Err(io::Error::from_raw_os_error(errno)),
    }
    // A second install in the same process would have failed above only if it were refused;
    // keep the first set of ids: the kernel enforces both, so the first is the upper bound.
    let _ = GUARDED.set((uids, gids));
    Ok(())
}

/// Whether the installed guard lets a child switch to `uid`/`gid` (`true` without a guard: then
/// only the capabilities decide).
pub fn permits(uid: u32, gid: u32) -> bool {
    match GUARDED.get() {
        Some((uids, gids)) => uids.contains(&uid) && gids.contains(&gid),
        None => true,
    }
}

/// The ids the guard allows, for messages (`None` without a guard).
pub fn guarded_ids() -> Option<(&'static [u32], &'static [u32])> {
    GUARDED
        .get()
        .map(|(uids, gids)| (uids.as_slice(), gids.as_slice()))
}

/// Tries every way back to root on the calling thread: `Err` names the first that worked.
pub fn root_unreachable() -> Result<(), String> {
    let root_groups: [libc::gid_t; 1] = [0];
    let attempts: [(&str, libc::c_long, [libc::c_ulong; 3]); 8] = [
        ("setresuid(0, 0, 0)", libc::SYS_setresuid, [0, 0, 0]),
        ("setuid(0)", libc::SYS_setuid, [0, 0, 0]),
        ("setreuid(0, 0)", libc::SYS_setreuid, [0, 0, 0]),
        ("setresgid(0, 0, 0)", libc::SYS_setresgid, [0, 0, 0]),
        ("setgid(0)", libc::SYS_setgid, [0, 0, 0]),
        ("setregid(0, 0)", libc::SYS_setregid, [0, 0, 0]),
        (
            "setgroups([0])",
            libc::SYS_setgroups,
            [1, root_groups.as_ptr() as libc::c_ulong, 0],
        ),
        (
            "setresuid(-1, 0, -1)",
            libc::SYS_setresuid,
            [
                libc::c_ulong::from(u32::MAX),
                0,
                libc::c_ulong::from(u32::MAX),
            ],
        ),
    ];
    for (name, nr, [a, b, c]) in attempts {
        // SAFETY: raw identity syscalls with integer arguments, except setgroups, whose list
        // points at `root_groups`, alive for the call. Raw syscalls change only this thread.
        let rc = unsafe { libc::syscall(nr, a, b, c) };
        if rc == 0 {
            return Err(format!("{name} succeeded"));
        }
    }
    // setfsuid/setfsgid answer the previous id whatever happens: ask again to see the current.
    for (name, nr) in [
        ("setfsuid(0)", libc::SYS_setfsuid),
        ("setfsgid(0)", libc::SYS_setfsgid),
    ] {
        // SAFETY: raw syscalls with integer arguments, on this thread only.
        let now = unsafe {
            libc::syscall(nr, 0 as libc::c_ulong);
            libc::syscall(nr, libc::c_ulong::from(u32::MAX))
        };
        if now == 0 {
            return Err(format!("{name} succeeded"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (root): drop to `uid` keeping CAP_SETUID/CAP_SETGID, as the daemon does
    /// for `run_as`, optionally guard, then report what the child could still do. Exit code bits:
    /// 1 = a way to root worked, 2 = the run_as uid could not be taken.
    fn drop_keep_caps_and_try(guarded: bool) -> i32 {
        use caps::{CapSet, Capability};
        let daemon = 62701;
        let run_as = 62702;
        let keep: caps::CapsHashSet = [Capability::CAP_SETUID, Capability::CAP_SETGID].into();
        // SAFETY: the test process may be multi-threaded; the child only makes syscalls (glibc
        // resets its allocator locks in a forked child) and leaves by _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                nix::unistd::setgroups(&[]).ok()?;
                nix::unistd::setresgid(daemon.into(), daemon.into(), daemon.into()).ok()?;
                nix::sys::prctl::set_keepcaps(true).ok()?;
                nix::unistd::setresuid(daemon.into(), daemon.into(), daemon.into()).ok()?;
                caps::set(None, CapSet::Permitted, &keep).ok()?;
                caps::set(None, CapSet::Effective, &keep).ok()?;
                if guarded {
                    guard(&[daemon, run_as], &[daemon, run_as]).ok()?;
                }
                let mut code = 0;
                if root_unreachable().is_err() {
                    code |= 1;
                }
                // SAFETY: raw syscalls, this thread only.
                let switched = unsafe {
                    libc::syscall(libc::SYS_setresgid, run_as, run_as, run_as) == 0
                        && libc::syscall(libc::SYS_setresuid, run_as, run_as, run_as) == 0
                };
                if !switched {
                    code |= 2;
                }
                Some(code)
            })()
            .unwrap_or(99);
            // SAFETY: leaves the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        match status {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("child: {other:?}"),
        }
    }

    #[test]
    fn guard_leaves_only_the_run_as_path() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP guard_leaves_only_the_run_as_path: needs root");
            assert!(
                std::env::var_os("CI").is_none_or(|v| v != "true"),
                "needs root under CI"
            );
            return;
        }
        // Control: with CAP_SETUID kept and no guard, root is one syscall away.
        assert_eq!(drop_keep_caps_and_try(false), 1, "unguarded");
        // Guarded: root is not, the run_as uid still is.
        assert_eq!(drop_keep_caps_and_try(true), 0, "guarded");
    }
}
