//! A spawn order: one sandboxed child, described completely enough to be started by another
//! process (the daemon's spawner, module `crate::spawner`), and the child side that carries it
//! out.
//!
//! The daemon renders everything — the program, argv, environment, working directory and the
//! `ChildPlan` of the profile (rlimits, ids, capabilities, the Landlock rulesets, the BPF
//! programs) — into bytes, and every descriptor the child needs (stdio, the rulesets, the broker
//! channel, the exec report pipe, the pinned path parameters and secret copies) into a list sent
//! alongside with `SCM_RIGHTS`. The spawner decodes it (it may allocate: it is a small
//! single-threaded process, not a fork of the daemon) and forks; the child runs
//! [`SpawnOrder::exec_in_child`]: raw syscalls only, the same `ChildPlan::apply` every
//! in-process spawn runs, then `execve`.
//!
//! Invariants:
//! - the child applies exactly the stages an in-process spawn applies, in the same order, and
//!   fails closed the same way: a stage that fails ends the child before `execve`, and the
//!   failure's code (`StageFailure::code`) reaches the daemon through the exec report pipe;
//! - the child's first act is to write its own pid to the exec report pipe, before any stage,
//!   and it never execs without having done so: the daemon learns every child's pid even when
//!   the spawner dies before answering (module `crate::spawner`);
//! - a descriptor the daemon hands to the child (a pinned path, a secret copy) gets the number
//!   it had in the daemon, since argv names it as `/proc/self/fd/N`;
//! - a malformed order is refused whole ([`WireError`]), never half applied.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use seccompiler::{BpfProgram, sock_filter};

use super::child::ChildPlan;
use super::{PreparedSandbox, SandboxError, Stage, connect_hub, notify, unix_broker};

/// Why an order could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("malformed spawn order: {0}")]
pub struct WireError(&'static str);

/// Bytes being written: little-endian integers and length-prefixed byte strings.
#[derive(Default)]
pub struct Wire {
    bytes: Vec<u8>,
}

impl Wire {
    fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }
    fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    fn i32(&mut self, value: i32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }
    fn bytes(&mut self, value: &[u8]) {
        self.u32(value.len() as u32);
        self.bytes.extend_from_slice(value);
    }
    fn program(&mut self, program: &BpfProgram) {
        self.u32(program.len() as u32);
        for instruction in program {
            self.bytes
                .extend_from_slice(&instruction.code.to_le_bytes());
            self.u8(instruction.jt);
            self.u8(instruction.jf);
            self.u32(instruction.k);
        }
    }
}

/// Bytes being read, in the order [`Wire`] wrote them.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError("truncated"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError("bad boolean")),
        }
    }
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let len = self.u32()? as usize;
        self.take(len)
    }
    fn c_string(&mut self) -> Result<CString, WireError> {
        CString::new(self.bytes()?).map_err(|_| WireError("NUL inside a string"))
    }
    fn program(&mut self) -> Result<BpfProgram, WireError> {
        let len = self.u32()? as usize;
        if len > 4096 {
            return Err(WireError("BPF program too long"));
        }
        (0..len)
            .map(|_| {
                Ok(sock_filter {
                    code: self.u16()?,
                    jt: self.u8()?,
                    jf: self.u8()?,
                    k: self.u32()?,
                })
            })
            .collect()
    }
    /// An index into the order's descriptor list.
    fn fd_index(&mut self, count: usize) -> Result<usize, WireError> {
        let index = self.u32()? as usize;
        if index >= count {
            return Err(WireError("descriptor index out of range"));
        }
        Ok(index)
    }
}

/// What a child is started with, rendered by the daemon.
#[derive(Clone, Copy)]
pub struct SpawnRequest<'a> {
    /// Absolute path of the program.
    pub program: &'a [u8],
    /// argv, `argv[0]` included.
    pub argv: &'a [Vec<u8>],
    /// `NAME=value` entries: the whole environment.
    pub env: &'a [Vec<u8>],
    pub cwd: &'a [u8],
    /// The child's descriptors 0, 1 and 2.
    pub stdio: [RawFd; 3],
    /// Descriptors that stay open across `execve`, at these same numbers.
    pub keep_fds: &'a [RawFd],
}

/// A child's sandbox, rendered for another process: the plan, and the broker channel's child end
/// it refers to (kept open until the order is sent).
pub struct RemotePlan {
    plan: ChildPlan,
    _broker_child_end: OwnedFd,
}

impl RemotePlan {
    /// The uid the child runs as (`run_as`), when not the daemon's.
    pub fn run_as_uid(&self) -> Option<u32> {
        self.plan.run_as.map(|(uid, _)| uid)
    }
}

impl PreparedSandbox {
    /// The sandbox of one daemon child as a plan another process can apply (module
    /// `crate::spawner`). Hands this child's broker channel to the connect hub, as an in-process
    /// spawn does: a serving thread starts only if the child makes a brokered call.
    pub fn remote_plan(&self) -> Result<RemotePlan, SandboxError> {
        self.remote_plan_reporting(notify::Reporter::Log)
    }

    /// [`remote_plan`](Self::remote_plan) for the self-test's canary, whose refused connects
    /// are the point of the check: the broker logs them at debug level only.
    pub fn remote_canary_plan(&self) -> Result<RemotePlan, SandboxError> {
        self.remote_plan_reporting(notify::Reporter::Expected)
    }

    fn remote_plan_reporting(
        &self,
        reporter: notify::Reporter,
    ) -> Result<RemotePlan, SandboxError> {
        let (broker_end, child_end) = unix_broker::channel_pair().map_err(SandboxError::Broker)?;
        let plan = self.plan(
            super::seccomp::FilterUse::DaemonChild,
            child_end.as_raw_fd(),
        )?;
        let identity = self.spec.run_as.map(|r| notify::ThreadIdentity {
            uid: r.uid,
            gid: r.gid,
        });
        connect_hub::watch(
            broker_end,
            connect_hub::Brokering {
                policy: Arc::clone(&self.connect_policy_shared),
                identity,
                reporter,
            },
        )
        .map_err(SandboxError::Broker)?;
        Ok(RemotePlan {
            plan,
            _broker_child_end: child_end,
        })
    }
}

/// Encodes one order: the bytes, and the descriptors to send with them (in index order).
/// `exec_report` is the exec report pipe's write end. The child writes its own pid there first
/// of all (one native-endian `i32`, before any sandbox stage), and a second `i32` only if it
/// fails before `execve` (a [`StageFailure::code`](super::StageFailure::code) or an errno); it
/// must be close-on-exec, so it reads as end of file once the program runs.
pub fn encode(
    request: &SpawnRequest<'_>,
    exec_report: RawFd,
    remote: &RemotePlan,
) -> (Vec<u8>, Vec<RawFd>) {
    let plan = &remote.plan;
    let mut fds: Vec<RawFd> = Vec::new();
    let mut fd = |wire: &mut Wire, raw: RawFd| {
        wire.u32(fds.len() as u32);
        fds.push(raw);
    };
    let mut w = Wire::default();
    w.bytes(request.program);
    w.u32(request.argv.len() as u32);
    for arg in request.argv {
        w.bytes(arg);
    }
    w.u32(request.env.len() as u32);
    for entry in request.env {
        w.bytes(entry);
    }
    w.bytes(request.cwd);
    for raw in request.stdio {
        fd(&mut w, raw);
    }
    fd(&mut w, exec_report);
    w.u32(request.keep_fds.len() as u32);
    for &raw in request.keep_fds {
        fd(&mut w, raw);
        w.i32(raw);
    }
    // The plan.
    w.u8(plan.setsid.into());
    for &(resource, value) in &plan.rlimits {
        w.u32(resource);
        w.u64(value);
    }
    match plan.umask {
        Some(mask) => {
            w.u8(1);
            w.u32(mask);
        }
        None => w.u8(0),
    }
    match plan.run_as {
        Some((uid, gid)) => {
            w.u8(1);
            w.u32(uid);
            w.u32(gid);
        }
        None => w.u8(0),
    }
    w.u8(plan.drop_bounding.into());
    w.u32(plan.cap_last_cap);
    w.u64(plan.keep_mask);
    match plan.death_signal_parent {
        Some(pid) => {
            w.u8(1);
            w.i32(pid);
        }
        None => w.u8(0),
    }
    let ruleset = plan
        .ruleset
        .as_ref()
        .expect("a plan fresh from PreparedSandbox::plan holds its ruleset");
    fd(&mut w, ruleset.as_raw_fd());
    match &plan.net_ruleset {
        Some(net) => {
            w.u8(1);
            fd(&mut w, net.as_raw_fd());
        }
        None => w.u8(0),
    }
    w.u32(plan.landlock_flags);
    w.u32(plan.filters.len() as u32);
    for program in plan.filters.iter() {
        w.program(program);
    }
    w.program(&plan.connect_filter);
    fd(&mut w, plan.broker_channel);
    w.u64(plan.seccomp_flags);
    w.u8(plan.forced_failure.map_or(0, |stage| stage as u8));
    (w.bytes, fds)
}

/// A decoded order, ready to fork for. Owns the received descriptors (closed on drop, in the
/// spawner after its fork).
pub struct SpawnOrder {
    program: CString,
    /// Kept alive for the pointer arrays below.
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    fds: Vec<OwnedFd>,
    stdio: [usize; 3],
    exec_report: usize,
    /// (index into `fds`, the number it must have in the child).
    keep: Vec<(usize, RawFd)>,
    ruleset: usize,
    net_ruleset: Option<usize>,
    broker_channel: usize,
    plan: ChildPlan,
}

impl SpawnOrder {
    /// Decodes an order. `fds` are the descriptors that came with it, in order.
    pub fn decode(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<SpawnOrder, WireError> {
        let count = fds.len();
        let mut r = Reader { rest: bytes };
        let program = r.c_string()?;
        let mut strings = Vec::new();
        let argc = r.u32()? as usize;
        for _ in 0..argc {
            strings.push(r.c_string()?);
        }
        let envc = r.u32()? as usize;
        for _ in 0..envc {
            strings.push(r.c_string()?);
        }
        let mut argv: Vec<*const libc::c_char> =
            strings[..argc].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> =
            strings[argc..].iter().map(|s| s.as_ptr()).collect();
        envp.push(std::ptr::null());
        let cwd = r.c_string()?;
        let stdio = [r.fd_index(count)?, r.fd_index(count)?, r.fd_index(count)?];
        let exec_report = r.fd_index(count)?;
        let keep_count = r.u32()? as usize;
        let mut keep = Vec::with_capacity(keep_count.min(count));
        for _ in 0..keep_count {
            let index = r.fd_index(count)?;
            let target = r.i32()?;
            if target < 3 {
                return Err(WireError("a kept descriptor below 3"));
            }
            keep.push((index, target));
        }
        let setsid = r.bool()?;
        let mut rlimits = [(0, 0); 6];
        for slot in &mut rlimits {
            *slot = (r.u32()?, r.u64()?);
        }
        let umask = match r.bool()? {
            true => Some(r.u32()?),
            false => None,
        };
        let run_as = match r.bool()? {
            true => Some((r.u32()?, r.u32()?)),
            false => None,
        };
        let drop_bounding = r.bool()?;
        let cap_last_cap = r.u32()?;
        let keep_mask = r.u64()?;
        let death_signal_parent = match r.bool()? {
            true => Some(r.i32()?),
            false => None,
        };
        let ruleset = r.fd_index(count)?;
        let net_ruleset = match r.bool()? {
            true => Some(r.fd_index(count)?),
            false => None,
        };
        let landlock_flags = r.u32()?;
        let filter_count = r.u32()? as usize;
        if filter_count > 16 {
            return Err(WireError("too many seccomp filters"));
        }
        let filters = (0..filter_count)
            .map(|_| r.program())
            .collect::<Result<Vec<_>, _>>()?;
        let connect_filter = r.program()?;
        let broker_channel = r.fd_index(count)?;
        let seccomp_flags = r.u64()?;
        let forced_failure = match r.u8()? {
            0 => None,
            n => Some(
                Stage::ALL
                    .into_iter()
                    .find(|stage| *stage as u8 == n)
                    .ok_or(WireError("unknown stage"))?,
            ),
        };
        if !r.rest.is_empty() {
            return Err(WireError("trailing bytes"));
        }
        let plan = ChildPlan {
            setsid,
            rlimits,
            umask,
            run_as,
            drop_bounding,
            cap_last_cap,
            keep_mask,
            death_signal_parent,
            // Filled in the child, once every descriptor has its final number.
            ruleset: None,
            net_ruleset: None,
            landlock_flags,
            filters: Arc::new(filters),
            connect_filter: Arc::new(connect_filter),
            broker_channel: -1,
            seccomp_flags,
            forced_failure,
            keep_fds: keep.iter().map(|&(_, target)| target).collect(),
            observe: None,
        };
        Ok(SpawnOrder {
            program,
            _strings: strings,
            argv,
            envp,
            cwd,
            fds,
            stdio,
            exec_report,
            keep,
            ruleset,
            net_ruleset,
            broker_channel,
            plan,
        })
    }

    /// In the forked child of a single-threaded spawner: gives every descriptor its number,
    /// changes to the working directory, applies the plan and execs. Never returns; a failure
    /// is written to the exec report pipe and ends the child with status 127.
    /// Async-signal-safe: raw syscalls on what [`decode`](Self::decode) prepared.
    pub fn exec_in_child(&mut self) -> ! {
        // First of all, the child's pid, so the daemon can find (and kill) this child even if
        // the spawner dies before it answers. A child that cannot say it never runs anything.
        report_own_pid(self.fds[self.exec_report].as_raw_fd());
        let report = |code: i32, fd: RawFd| -> ! {
            let bytes = code.to_ne_bytes();
            // SAFETY: writes four bytes from the stack to the report pipe, then ends the child
            // without running destructors.
            unsafe {
                libc::write(fd, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127)
            }
        };
        // Move every received descriptor above every number it must end up at, so placing one
        // never closes another still needed.
        let above = self
            .keep
            .iter()
            .map(|&(_, target)| target)
            .max()
            .unwrap_or(2)
            .max(2)
            + 1;
        let mut numbers = [0 as RawFd; 256];
        if self.fds.len() > numbers.len() {
            report(
                super::StageFailure {
                    stage: Stage::CloseFds,
                    errno: libc::EMFILE,
                }
                .code(),
                self.fds[self.exec_report].as_raw_fd(),
            );
        }
        for (slot, fd) in numbers.iter_mut().zip(&self.fds) {
            // SAFETY: fcntl without pointers on a descriptor this process owns.
            let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) };
            if moved < 0 {
                report(errno_code(), self.fds[self.exec_report].as_raw_fd());
            }
            *slot = moved;
        }
        let report_fd = numbers[self.exec_report];
        for (target, &index) in self.stdio.iter().enumerate() {
            // SAFETY: dup2 without pointers; the new descriptor is not close-on-exec.
            if unsafe { libc::dup2(numbers[index], target as RawFd) } < 0 {
                report(errno_code(), report_fd);
            }
        }
        for &(index, target) in &self.keep {
            // SAFETY: as above; the close-on-exec stage keeps `target` open (`keep_fds`).
            if unsafe { libc::dup2(numbers[index], target) } < 0 {
                report(errno_code(), report_fd);
            }
        }
        // What std's spawn does too: no blocked signals, and SIGPIPE (which Rust programs such
        // as the spawner ignore) back to its default, since an ignored disposition survives
        // `execve`.
        // SAFETY: `empty` is a valid signal set on the stack; signal() without pointers.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        // SAFETY: `cwd` is NUL-terminated.
        if unsafe { libc::chdir(self.cwd.as_ptr()) } != 0 {
            report(errno_code(), report_fd);
        }
        // SAFETY: each number is a descriptor this child just made and nothing else owns.
        unsafe {
            self.plan.ruleset = Some(OwnedFd::from_raw_fd(numbers[self.ruleset]));
            self.plan.net_ruleset = self
                .net_ruleset
                .map(|index| OwnedFd::from_raw_fd(numbers[index]));
        }
        self.plan.broker_channel = numbers[self.broker_channel];
        if let Err(failure) = self.plan.apply() {
            report(failure.code(), report_fd);
        }
        // SAFETY: `program`, `argv` and `envp` point at NUL-terminated strings owned by `self`;
        // both arrays end with a null pointer.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            )
        };
        report(errno_code(), report_fd)
    }
}

/// Writes this process's pid (native-endian `i32`) to the exec report pipe `fd`; ends the
/// process with status 127 if the four bytes do not go. Async-signal-safe.
fn report_own_pid(fd: RawFd) {
    // SAFETY: getpid without pointers.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    let bytes = pid.to_ne_bytes();
    loop {
        // SAFETY: writes four bytes from the stack to a descriptor this process owns.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if written == bytes.len() as isize {
            return;
        }
        if written < 0 && errno_code() == libc::EINTR {
            continue;
        }
        // SAFETY: ends the child without running destructors, before anything was applied.
        unsafe { libc::_exit(127) }
    }
}

/// The current errno as a report code (a small positive number, never a stage code).
fn errno_code() -> i32 {
    super::child::errno()
}

/// The current thread's errno, without allocating.
pub fn last_errno() -> i32 {
    super::child::errno()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_or_padded_order_is_refused() {
        let mut w = Wire::default();
        w.bytes(b"/bin/true");
        assert!(SpawnOrder::decode(&w.bytes, Vec::new()).is_err());
        let mut program = Wire::default();
        program.program(&vec![
            sock_filter {
                code: 6,
                jt: 1,
                jf: 2,
                k: 0x7fff_0000,
            };
            3
        ]);
        let mut r = Reader {
            rest: &program.bytes,
        };
        let decoded = r.program().unwrap();
        assert_eq!(decoded.len(), 3);
        assert_eq!(
            (decoded[0].code, decoded[0].jt, decoded[0].jf, decoded[0].k),
            (6, 1, 2, 0x7fff_0000)
        );
        assert!(r.rest.is_empty());
    }
}
