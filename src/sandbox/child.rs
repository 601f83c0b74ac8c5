//! The steps that confine a process, run in the forked child before `execve` (or in the current
//! process for `verbd exec`).
//!
//! Invariant: async-signal-safe. Everything was computed in the parent; this code runs raw
//! syscalls only, never allocates, never panics, never takes a lock. A failure is reported as one
//! integer ([`StageFailure::code`]) that encodes the stage and the errno, because only an errno
//! travels from a forked child back to `spawn()`. The order is fixed: the
//! bounding set is dropped before `setresuid`, `PR_SET_PDEATHSIG` is set after it (a uid change
//! clears it), and seccomp comes last so its filter could deny any syscall used before.

use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use seccompiler::BpfProgram;

use super::{seccomp, unix_broker};

/// One step of confinement. Each has its own code, so a failed spawn names the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// `setsid()`: the child leads its own session and process group.
    Setsid = 1,
    /// `setrlimit` for CPU, address space, file size, processes, core; and open files, set last
    /// (after the seccomp listener, the last descriptor the stages open).
    Rlimits = 2,
    /// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`: no inherited descriptor survives exec, except
    /// the plan's keep-list (cleared of close-on-exec one by one).
    CloseFds = 3,
    /// `setgroups(0, NULL)`.
    Groups = 4,
    /// `setresgid`.
    Gid = 5,
    /// `PR_CAPBSET_DROP` for every capability not kept.
    CapBounding = 6,
    /// `PR_SET_KEEPCAPS` before the uid change, when capabilities are kept.
    KeepCaps = 7,
    /// `setresuid`.
    Uid = 8,
    /// `capset`: effective, permitted and inheritable reduced to the kept set.
    Caps = 9,
    /// Ambient set cleared (and the kept capabilities raised).
    Ambient = 10,
    /// `PR_SET_PDEATHSIG(SIGKILL)` and the check that the parent is still there.
    DeathSignal = 11,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 12,
    /// `landlock_restrict_self`, fully enforced.
    Landlock = 13,
    /// seccomp filters.
    Seccomp = 14,
}

impl Stage {
    /// Every stage, in the order they run.
    pub const ALL: [Stage; 14] = [
        Stage::Setsid,
        Stage::Rlimits,
        Stage::CloseFds,
        Stage::Groups,
        Stage::Gid,
        Stage::CapBounding,
        Stage::KeepCaps,
        Stage::Uid,
        Stage::Caps,
        Stage::Ambient,
        Stage::DeathSignal,
        Stage::NoNewPrivs,
        Stage::Landlock,
        Stage::Seccomp,
    ];

    /// The stage's name as shown in errors and the journal.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Setsid => "setsid",
            Stage::Rlimits => "rlimits",
            Stage::CloseFds => "close-fds",
            Stage::Groups => "setgroups",
            Stage::Gid => "setresgid",
            Stage::CapBounding => "capability-bounding-set",
            Stage::KeepCaps => "keep-caps",
            Stage::Uid => "setresuid",
            Stage::Caps => "capabilities",
            Stage::Ambient => "ambient-capabilities",
            Stage::DeathSignal => "parent-death-signal",
            Stage::NoNewPrivs => "no-new-privs",
            Stage::Landlock => "landlock",
            Stage::Seccomp => "seccomp",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Codes at or above this value are stage failures: `BASE + stage * 1000 + errno`. `execve` and
/// everything else in std's spawn path only produce small errnos, so the ranges cannot collide.
const STAGE_CODE_BASE: i32 = 1_000_000;

/// A stage that failed, with the errno of the failing syscall (`ECANCELED` for a failure forced
/// by a test, `EOPNOTSUPP` when Landlock was not fully enforced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageFailure {
    pub stage: Stage,
    pub errno: i32,
}

impl StageFailure {
    /// The integer the child hands back to `spawn()` as its "errno".
    pub fn code(self) -> i32 {
        STAGE_CODE_BASE + i32::from(self.stage as u8) * 1000 + self.errno.clamp(0, 999)
    }

    /// Decodes [`StageFailure::code`].
    pub fn from_code(code: i32) -> Option<StageFailure> {
        let offset = code.checked_sub(STAGE_CODE_BASE)?;
        if offset < 0 {
            return None;
        }
        let stage = Stage::ALL
            .into_iter()
            .find(|s| i32::from(*s as u8) == offset / 1000)?;
        Some(StageFailure {
            stage,
            errno: offset % 1000,
        })
    }
}

impl fmt::Display for StageFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sandbox stage `{}` failed: {}",
            self.stage,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

/// The current thread's errno, without allocating.
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Resource limits as `(resource, value)`; a value above the current hard limit is lowered to it.
pub(super) type RlimitTable = [(libc::__rlimit_resource_t, u64); 6];

/// Everything the child needs, computed in the parent.
pub(super) struct ChildPlan {
    /// Start a new session (daemon children); `verbd exec` keeps the terminal.
    pub setsid: bool,
    pub rlimits: RlimitTable,
    /// `None`: keep the umask the process has (`verbd exec`: the caller's).
    pub umask: Option<libc::mode_t>,
    /// `(uid, gid)` to switch to.
    pub run_as: Option<(u32, u32)>,
    /// Drop the bounding set (needs CAP_SETPCAP; skipped without it, `no_new_privs` covers it).
    pub drop_bounding: bool,
    pub cap_last_cap: u32,
    /// Bit `n` set = keep capability `n`.
    pub keep_mask: u64,
    /// Parent pid to check after `PR_SET_PDEATHSIG`, or `None` to not set the death signal.
    pub death_signal_parent: Option<libc::pid_t>,
    /// The cloned template's descriptor, taken by the Landlock stage. Built with
    /// `HardRequirement` at the pinned ABI, so what it holds is fully enforced.
    pub ruleset: Option<OwnedFd>,
    /// The Landlock TCP port layer (`connect_tcp` profiles), stacked after `ruleset`.
    pub net_ruleset: Option<OwnedFd>,
    /// `landlock_restrict_self` flags (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` where the
    /// kernel logs denials).
    pub landlock_flags: u32,
    pub filters: Arc<Vec<BpfProgram>>,
    /// Installed last with `SECCOMP_FILTER_FLAG_NEW_LISTENER`; its listener goes to the broker.
    pub connect_filter: Arc<BpfProgram>,
    /// Where the listener is sent (module `unix_broker`).
    pub broker_channel: libc::c_int,
    pub seccomp_flags: libc::c_ulong,
    /// A stage made to fail (tests only; the child then never execs).
    pub forced_failure: Option<Stage>,
    /// Descriptors (≥ 3) that survive `execve` despite the close-on-exec sweep: pinned path
    /// parameters and secret copies meant for this child alone. Filled in the parent; only
    /// read here.
    pub keep_fds: Vec<libc::c_int>,
    /// Instead of `execve`: observe these accesses from inside the applied sandbox, report them
    /// and exit (the self-test's program probe).
    pub observe: Option<Observation>,
}

/// Accesses a confined child tries once every stage is applied, in place of `execve`
/// ([`ChildPlan::observe`]). Prepared in the parent; the child only reads it.
pub(super) struct Observation {
    /// NUL-terminated paths and whether each must be executable (else readable).
    pub checks: Vec<(std::ffi::CString, bool)>,
    /// Where the child writes one native-endian `i32` per check: 0, or the errno.
    pub report_fd: libc::c_int,
}

/// `AT_EXECVE_CHECK` (Linux 6.14): `execveat` performs every check of an `execve` of the file
/// (its execute permission, `noexec` mounts, LSMs such as Landlock) and returns without running it.
pub(super) const AT_EXECVE_CHECK: libc::c_int = 0x10000;

impl Observation {
    /// Runs every check and writes the results. Async-signal-safe: raw syscalls on data prepared
    /// in the parent.
    fn run(&self) {
        let empty: [*const libc::c_char; 1] = [std::ptr::null()];
        for (path, execute) in &self.checks {
            let errno = if *execute {
                let argv = [path.as_ptr(), std::ptr::null()];
                // SAFETY: `path` is NUL-terminated; `argv` and `empty` are null-terminated arrays
                // of NUL-terminated strings, alive for the call. With AT_EXECVE_CHECK the call
                // returns instead of replacing the process.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_execveat,
                        libc::AT_FDCWD,
                        path.as_ptr(),
                        argv.as_ptr(),
                        empty.as_ptr(),
                        AT_EXECVE_CHECK,
                    )
                };
                if rc == 0 { 0 } else { errno() }
            } else {
                // SAFETY: `path` is NUL-terminated.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    errno()
                } else {
                    // SAFETY: closes the descriptor just opened.
                    unsafe { libc::close(fd) };
                    0
                }
            };
            let bytes = errno.to_ne_bytes();
            // SAFETY: writes four bytes from a stack array to the report pipe. A short or
            // failed write leaves the parent with too few results, which it reports.
            unsafe { libc::write(self.report_fd, bytes.as_ptr().cast(), bytes.len()) };
        }
    }
}

#[repr(C)]
struct CapUserHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapUserData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

impl ChildPlan {
    fn begin(&self, stage: Stage) -> Result<(), StageFailure> {
        if self.forced_failure == Some(stage) {
            return Err(StageFailure {
                stage,
                errno: libc::ECANCELED,
            });
        }
        Ok(())
    }

    /// Applies every stage in order. Async-signal-safe.
    pub fn apply(&mut self) -> Result<(), StageFailure> {
        let fail = |stage: Stage| StageFailure {
            stage,
            errno: errno(),
        };

        self.begin(Stage::Setsid)?;
        // SAFETY: plain syscall without pointers.
        if self.setsid && unsafe { libc::setsid() } < 0 {
            return Err(fail(Stage::Setsid));
        }

        self.begin(Stage::Rlimits)?;
        // The descriptor limit comes last (below): the seccomp listener is a new descriptor, and
        // the lowest free number in a child of a busy daemon can be above the verb's limit.
        for &(resource, value) in &self.rlimits {
            if resource != libc::RLIMIT_NOFILE {
                set_rlimit(resource, value).map_err(|()| fail(Stage::Rlimits))?;
            }
        }
        if let Some(mask) = self.umask {
            // SAFETY: umask cannot fail.
            unsafe { libc::umask(mask) };
        }

        self.begin(Stage::CloseFds)?;
        // SAFETY: plain syscall without pointers; marks descriptors 3.. close-on-exec.
        if unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        } != 0
        {
            return Err(fail(Stage::CloseFds));
        }
        for &fd in &self.keep_fds {
            // SAFETY: fcntl without pointers; clears close-on-exec on a descriptor the parent
            // opened for this child (its number is the same here after fork).
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
                return Err(fail(Stage::CloseFds));
            }
        }

        self.begin(Stage::Groups)?;
        self.begin(Stage::Gid)?;
        if let Some((_, gid)) = self.run_as {
            // SAFETY: raw syscall; a zero-length list with a null pointer is valid.
            if unsafe {
                libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>())
            } != 0
            {
                return Err(fail(Stage::Groups));
            }
            // SAFETY: raw syscall without pointers (the process is single-threaded here).
            if unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) } != 0 {
                return Err(fail(Stage::Gid));
            }
        }

        self.begin(Stage::CapBounding)?;
        if self.drop_bounding {
            for cap in 0..=self.cap_last_cap {
                if cap < 64 && self.keep_mask & (1u64 << cap) != 0 {
                    continue;
                }
                // Reading is cheap, dropping rebuilds the credentials: drop only what is there
                // (a daemon confined by systemd's CapabilityBoundingSet= has little to drop).
                // SAFETY: prctl without pointers.
                let present = unsafe {
                    libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0)
                };
                if present < 0 {
                    return Err(fail(Stage::CapBounding));
                }
                if present == 1 {
                    // SAFETY: prctl without pointers.
                    let dropped = unsafe {
                        libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0)
                    };
                    if dropped != 0 {
                        return Err(fail(Stage::CapBounding));
                    }
                }
            }
        }

        self.begin(Stage::KeepCaps)?;
        if self.run_as.is_some() && self.keep_mask != 0 {
            // SAFETY: prctl without pointers.
            if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) } != 0 {
                return Err(fail(Stage::KeepCaps));
            }
        }

        self.begin(Stage::Uid)?;
        if let Some((uid, _)) = self.run_as {
            // SAFETY: raw syscall without pointers (the process is single-threaded here).
            if unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) } != 0 {
                return Err(fail(Stage::Uid));
            }
        }

        self.begin(Stage::Caps)?;
        let low = self.keep_mask as u32;
        let high = (self.keep_mask >> 32) as u32;
        let header = CapUserHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [
            CapUserData {
                effective: low,
                permitted: low,
                inheritable: low,
            },
            CapUserData {
                effective: high,
                permitted: high,
                inheritable: high,
            },
        ];
        // SAFETY: header and the two data words (version 3 layout) are valid for the call.
        if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
            return Err(fail(Stage::Caps));
        }

        self.begin(Stage::Ambient)?;
        // SAFETY: prctl without pointers.
        if unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        } != 0
        {
            return Err(fail(Stage::Ambient));
        }
        for cap in 0..64u32 {
            if self.keep_mask & (1u64 << cap) == 0 {
                continue;
            }
            // SAFETY: prctl without pointers.
            if unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE,
                    libc::c_ulong::from(cap),
                    0,
                    0,
                )
            } != 0
            {
                return Err(fail(Stage::Ambient));
            }
        }

        self.begin(Stage::DeathSignal)?;
        if let Some(parent) = self.death_signal_parent {
            // SAFETY: prctl without pointers.
            if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
                return Err(fail(Stage::DeathSignal));
            }
            // SAFETY: getppid cannot fail.
            if unsafe { libc::getppid() } != parent {
                return Err(StageFailure {
                    stage: Stage::DeathSignal,
                    errno: libc::ESRCH,
                });
            }
        }

        self.begin(Stage::NoNewPrivs)?;
        // SAFETY: prctl without pointers.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(fail(Stage::NoNewPrivs));
        }

        self.begin(Stage::Landlock)?;
        let Some(ruleset) = self.ruleset.take() else {
            // `apply` already ran in this process: fail closed rather than skip Landlock.
            return Err(StageFailure {
                stage: Stage::Landlock,
                errno: libc::EBADF,
            });
        };
        restrict_self(&ruleset, self.landlock_flags).map_err(|()| fail(Stage::Landlock))?;
        if let Some(net_ruleset) = self.net_ruleset.take() {
            restrict_self(&net_ruleset, self.landlock_flags).map_err(|()| fail(Stage::Landlock))?;
        }

        self.begin(Stage::Seccomp)?;
        let seccomp_failure = |errno| StageFailure {
            stage: Stage::Seccomp,
            errno,
        };
        for program in self.filters.iter() {
            seccomp::install(program, self.seccomp_flags).map_err(seccomp_failure)?;
        }
        let listener = seccomp::install(
            &self.connect_filter,
            self.seccomp_flags | libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
        )
        .map_err(seccomp_failure)?;
        let sent = unix_broker::send_listener(self.broker_channel, listener);
        // SAFETY: closes the listener fd this process just got; the broker holds its copy.
        unsafe { libc::close(listener) };
        sent.map_err(seccomp_failure)?;
        // Every descriptor the stages open is open: now the verb's descriptor limit.
        for &(resource, value) in &self.rlimits {
            if resource == libc::RLIMIT_NOFILE {
                set_rlimit(resource, value).map_err(|()| fail(Stage::Rlimits))?;
            }
        }
        if let Some(observation) = &self.observe {
            observation.run();
            // SAFETY: ends the probe child here, fully confined, without exec and without
            // running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        Ok(())
    }
}

/// `landlock_restrict_self(ruleset, flags)`. Async-signal-safe; on failure errno says why.
fn restrict_self(ruleset: &OwnedFd, flags: u32) -> Result<(), ()> {
    // SAFETY: raw syscall without pointers on a ruleset descriptor this process owns.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), flags) };
    if rc == 0 { Ok(()) } else { Err(()) }
}

/// Lowers `resource` (soft and hard) to `value`, or to the hard limit when that is lower.
/// Usually one syscall: `prlimit64` sets `value` and returns the limit it replaced, and when
/// `value` was not above the old hard limit that is all. When it was, a process with
/// `CAP_SYS_RESOURCE` has just raised its hard limit, and a second call lowers both to the old
/// hard limit; a process without it got `EPERM` and nothing changed, so the limit is read and
/// the lower value set. Either way the result is the same as reading first. Async-signal-safe:
/// syscalls on stack values; on failure errno says why.
fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> Result<(), ()> {
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if prlimit(resource, value, Some(&mut old)).is_ok() {
        return if value <= old.rlim_max {
            Ok(())
        } else {
            prlimit(resource, old.rlim_max, None)
        };
    }
    // SAFETY: `old` is a valid, writable rlimit64 on the stack.
    if unsafe { libc::getrlimit64(resource, &mut old) } != 0 {
        return Err(());
    }
    prlimit(resource, value.min(old.rlim_max), None)
}

/// `prlimit64` on this process: soft and hard limit of `resource` set to `value`, the limit it
/// replaced written to `old` when given. Async-signal-safe.
fn prlimit(
    resource: libc::__rlimit_resource_t,
    value: u64,
    old: Option<&mut libc::rlimit64>,
) -> Result<(), ()> {
    let new = libc::rlimit64 {
        rlim_cur: value,
        rlim_max: value,
    };
    let old = old.map_or(std::ptr::null_mut(), |old| old as *mut libc::rlimit64);
    // SAFETY: `new` is a valid rlimit64 on the stack and `old` is null or a valid, writable one;
    // pid 0 is this process.
    if unsafe { libc::prlimit64(0, resource, &new, old) } == 0 {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_do_not_collide_with_errnos() {
        for stage in Stage::ALL {
            for errno in [0, libc::EPERM, libc::EACCES, 133] {
                let failure = StageFailure { stage, errno };
                assert_eq!(StageFailure::from_code(failure.code()), Some(failure));
            }
        }
        for errno in [0, libc::ENOENT, libc::EACCES, libc::ENOEXEC, 4095] {
            assert_eq!(StageFailure::from_code(errno), None);
        }
    }
}
