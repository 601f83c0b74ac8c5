//! seccomp filters of a sandbox profile, compiled once in the parent.
//!
//! Two classic-BPF programs, stacked in the child (the kernel runs every installed filter and the
//! most restrictive answer wins):
//!
//! 1. a hand-built **number filter**: the architecture must be x86_64 (otherwise the process is
//!    killed); syscall numbers with the x32 bit (`nr >= 0x40000000`) are refused with EPERM —
//!    seccompiler's architecture check cannot express this, and without it every rule could be
//!    bypassed through the x32 table on kernels built with `CONFIG_X86_X32_ABI`; `clone3` answers
//!    ENOSYS (its flags sit behind a pointer a filter cannot read; libc falls back to `clone`);
//!    and the deny set — syscalls that widen the kernel attack surface or leave the sandbox
//!    (ptrace, mounts, namespaces, bpf, keyrings, io_uring, modules, …) — answers EPERM, found by
//!    a **balanced binary search** on the syscall number. For children of the daemon (not for
//!    `verbd exec`) `setsid` and `setpgid` are denied too, so a child cannot leave the process
//!    group the executor kills on timeout;
//! 2. the **argument filter**, built with seccompiler, answering EPERM for: `clone` with any
//!    `CLONE_NEW*` flag; `ioctl` with `TIOCSTI` or `TIOCLINUX` (pushing characters into, or
//!    pasting a selection into, a terminal the child shares with the user's shell: the injected
//!    command would run after the child exits); `socket`/`socketpair` of an `AF_UNIX`
//!    socket of any type but stream and seqpacket — an allowlist, because the kernel turns
//!    `SOCK_RAW` into `SOCK_DGRAM` for `AF_UNIX` (a datagram's destination travels in
//!    `sendmsg`'s `msg_name`, behind a pointer no filter can read, so a datagram socket, even one
//!    of a `socketpair`, could reach any datagram service; stream sockets refuse an address in
//!    `sendmsg`, seqpacket sockets ignore it, so both send only to the peer their `connect`
//!    reached); and, by network mode, `socket` of any family
//!    other than `AF_UNIX` (`none`) or other than `AF_UNIX` and TCP over `AF_INET`/`AF_INET6`
//!    (`connect_tcp`; the Landlock TCP port rules of module `net_rules` govern the ports); and,
//!    in every mode but `full`, `sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN` (TCP Fast Open
//!    connects inside the send call, where neither the connect broker nor Landlock's TCP rule,
//!    which hooks only `connect(2)`, would see it; `TCP_FASTOPEN_CONNECT` stays allowed: the
//!    brokered `connect` fixes the destination and a later send's address is ignored);
//! 3. the **connect filter**: `connect` answers `SECCOMP_RET_USER_NOTIF`, so every connect waits
//!    for the broker outside the sandbox (module `unix_broker`), which decides on its own copy of
//!    the address and connects on the child's behalf. Installed last, with
//!    `SECCOMP_FILTER_FLAG_NEW_LISTENER`. For `verbd exec` it is the **broker filter**
//!    ([`exec_program`]) instead: `connect` and every syscall that gives a new name (`open`/
//!    `openat` with `O_CREAT`, `creat`, `mkdir`, `mknod`, `symlink`, `link`, `rename` in all
//!    forms), and every one that changes an entry by name (`unlink`, `truncate`, `chmod`,
//!    `chown`, `utimensat` in all forms) notify, for the connect broker and the create broker
//!    (module `create_broker`), and so does `open`/`openat` of a directory to list
//!    (`O_DIRECTORY` without `O_PATH`), for the ancestor listing (module `ancestor_listing`); `openat2` answers `ENOSYS`, the extended
//!    attribute calls `EOPNOTSUPP`, and `ioctl` setting inode flags (`chattr`) `EPERM`.
//!
//! Why this shape (measured on a 2-vCPU VM, fork + attach + `_exit`, medians of
//! 2000): attaching a filter makes the kernel precompute its action cache by emulating the filter
//! for every syscall number (`seccomp_cache_prepare`), so the attach cost grows with the *path
//! length* through the filter — about 4 µs per instruction on the path of an allowed syscall.
//! seccompiler emits a linear chain; with the whole deny set in it (347 instructions, ~110 on the
//! path) attaching cost +258–289 µs per child. This shape (109 + 77 instructions, ≤ 20 on any path)
//! costs +81–113 µs. `SECCOMP_FILTER_FLAG_SPEC_ALLOW` made no difference (that CPU's
//! speculative-store-bypass mitigation is off), so it stays unset: on kernels booted with
//! `spec_store_bypass_disable=seccomp` it would switch the mitigation off for the child.
//!
//! Invariant: a program here is immutable once compiled and is only read in the child (its
//! address and length go to seccomp(2) on the stack); nothing in the child allocates.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use super::{Network, SandboxError};

/// `TIOCSTI` (push a byte into the terminal's input queue) and `TIOCLINUX` (console selection
/// paste, among others), from `<asm-generic/ioctls.h>`.
pub(super) const TIOCSTI: u64 = 0x5412;
pub(super) const TIOCLINUX: u64 = 0x541C;

/// Every spelling of a socket type the kernel accepts in `socket`'s second argument: the type
/// with or without `SOCK_NONBLOCK` and `SOCK_CLOEXEC` (any other bit is `EINVAL`).
const fn type_args(sock_type: libc::c_int) -> [u64; 4] {
    [
        sock_type as u64,
        (sock_type | libc::SOCK_NONBLOCK) as u64,
        (sock_type | libc::SOCK_CLOEXEC) as u64,
        (sock_type | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64,
    ]
}
/// "stream", in every accepted spelling.
const STREAM_TYPE_ARGS: [u64; 4] = type_args(libc::SOCK_STREAM);
/// "seqpacket", in every accepted spelling.
const SEQPACKET_TYPE_ARGS: [u64; 4] = type_args(libc::SOCK_SEQPACKET);

/// `MSG_FASTOPEN`: send the data with the SYN of a connect made by the send call itself.
const MSG_FASTOPEN: u64 = libc::MSG_FASTOPEN as u64;

/// The send calls that take message flags, with the index of their flags argument:
/// `sendto(fd, buf, len, flags, addr, addrlen)`, `sendmsg(fd, msg, flags)`,
/// `sendmmsg(fd, msgvec, vlen, flags)` (the kernel overwrites each message's own `msg_flags`
/// with the argument).
const FLAGS_ARGUMENT_OF_SEND: [(i64, u8); 3] = [
    (libc::SYS_sendto, 3),
    (libc::SYS_sendmsg, 2),
    (libc::SYS_sendmmsg, 3),
];

/// `AUDIT_ARCH_X86_64`: EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

/// First syscall number of the x32 ABI (`__X32_SYSCALL_BIT`).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Syscalls refused with EPERM in every profile, whatever their arguments.
const DENIED_SYSCALLS: &[libc::c_long] = &[
    // Inspecting or changing other processes.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_process_madvise,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    // Mounts and root changes.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    // Namespaces.
    libc::SYS_unshare,
    libc::SYS_setns,
    // Kernel attack surface reachable without privileges.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    // File handles bypass path-based checks.
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    // Kernel, modules, hardware, system state.
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_fanotify_init,
    libc::SYS_lookup_dcookie,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    libc::SYS_uselib,
    libc::SYS__sysctl,
];

/// Syscalls additionally refused for children of the daemon: leaving the process group would let
/// a child survive the executor's group kill.
const DENIED_FOR_DAEMON_CHILDREN: &[libc::c_long] = &[libc::SYS_setsid, libc::SYS_setpgid];

/// `clone` flags that create a namespace. `CLONE_NEWTIME` (0x80) is left out: in `clone`'s first
/// argument that bit belongs to the exit signal, and `clone3`/`unshare` are refused whole.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// Whom the filters are for: the daemon's children also lose `setsid`/`setpgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FilterUse {
    DaemonChild,
    ExecWrapper,
}

/// The compiled programs, in installation order (the connect filter, installed after them, is
/// [`connect_program`]).
pub(super) fn compile(
    network: &Network,
    usage: FilterUse,
) -> Result<Vec<BpfProgram>, SandboxError> {
    let mut denied: Vec<u32> = DENIED_SYSCALLS.iter().map(|&nr| nr as u32).collect();
    if usage == FilterUse::DaemonChild {
        denied.extend(DENIED_FOR_DAEMON_CHILDREN.iter().map(|&nr| nr as u32));
    }
    Ok(vec![number_program(denied)?, argument_program(network)?])
}

fn argument_program(network: &Network) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut clone_rules = Vec::new();
    for &flag in CLONE_NAMESPACE_FLAGS {
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(seccomp_error)?;
        clone_rules.push(SeccompRule::new(vec![condition]).map_err(seccomp_error)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(
        libc::SYS_ioctl,
        [TIOCSTI, TIOCLINUX]
            .into_iter()
            .map(|request| rule(&[(1, SeccompCmpOp::Eq, request)]))
            .collect::<Result<_, _>>()?,
    );
    let socket_rules = socket_rules(network)?;
    rules.insert(libc::SYS_socket, socket_rules.clone());
    rules.insert(libc::SYS_socketpair, socket_rules);
    if *network != Network::Full {
        // TCP Fast Open connects inside the send call, to the address it carries: neither the
        // connect broker nor Landlock's TCP rule (it hooks `connect(2)` only) would see it.
        for (syscall, flags_arg) in FLAGS_ARGUMENT_OF_SEND {
            rules.insert(
                syscall,
                vec![rule(&[(
                    flags_arg,
                    SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
                    MSG_FASTOPEN,
                )])?],
            );
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(seccomp_error)?;
    BpfProgram::try_from(filter).map_err(seccomp_error)
}

/// One rule: every `(argument, op, value)` condition holds. 32-bit comparisons: every argument
/// filtered here is an `int` (or an `unsigned int` ioctl request) for the kernel.
fn rule(conditions: &[(u8, SeccompCmpOp, u64)]) -> Result<SeccompRule, SandboxError> {
    let conditions = conditions
        .iter()
        .map(|(arg, op, value)| {
            SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *value)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(seccomp_error)?;
    SeccompRule::new(conditions).map_err(seccomp_error)
}

/// The `socket`/`socketpair` calls refused (any rule matching refuses).
fn socket_rules(network: &Network) -> Result<Vec<SeccompRule>, SandboxError> {
    let unix = libc::AF_UNIX as u64;
    let inet = libc::AF_INET as u64;
    let inet6 = libc::AF_INET6 as u64;
    // An allowlist, not a denylist: `AF_UNIX` with any type but stream or seqpacket is refused.
    // The kernel turns `SOCK_RAW` into `SOCK_DGRAM` for `AF_UNIX`, so refusing `SOCK_DGRAM`
    // alone let a datagram socket be created anyway.
    let mut not_connection_oriented = vec![(0, SeccompCmpOp::Eq, unix)];
    not_connection_oriented.extend(
        STREAM_TYPE_ARGS
            .iter()
            .chain(&SEQPACKET_TYPE_ARGS)
            .map(|&t| (1, SeccompCmpOp::Ne, t)),
    );
    let mut rules = vec![rule(&not_connection_oriented)?];
    match network {
        Network::Full => {}
        Network::None => rules.push(rule(&[(0, SeccompCmpOp::Ne, unix)])?),
        Network::ConnectTcp(_) => {
            rules.push(rule(&[
                (0, SeccompCmpOp::Ne, unix),
                (0, SeccompCmpOp::Ne, inet),
                (0, SeccompCmpOp::Ne, inet6),
            ])?);
            for family in [inet, inet6] {
                let mut not_stream = vec![(0, SeccompCmpOp::Eq, family)];
                not_stream.extend(STREAM_TYPE_ARGS.map(|t| (1, SeccompCmpOp::Ne, t)));
                rules.push(rule(&not_stream)?);
                rules.push(rule(&[
                    (0, SeccompCmpOp::Eq, family),
                    (2, SeccompCmpOp::Ne, 0),
                    (2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64),
                ])?);
            }
        }
    }
    Ok(rules)
}

fn seccomp_error(err: seccompiler::BackendError) -> SandboxError {
    SandboxError::Seccomp(err.to_string())
}

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// offsetof(struct seccomp_data, nr) and (…, arch).
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
/// Binary-search leaves hold at most this many numbers, compared one by one.
const LEAF_SIZE: usize = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn ret_errno(errno: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA)
}

/// Arch check, x32 guard, `clone3` → ENOSYS, then EPERM for every number in `denied`.
fn number_program(mut denied: Vec<u32>) -> Result<BpfProgram, SandboxError> {
    denied.sort_unstable();
    denied.dedup();
    let mut program = vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
        insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, ret_errno(libc::EPERM)),
        insn(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        insn(RET_K, 0, 0, ret_errno(libc::ENOSYS)),
    ];
    search(&denied, &mut program)?;
    Ok(program)
}

/// Emits a balanced search over the sorted `numbers` (the accumulator holds the syscall number):
/// EPERM when found, ALLOW otherwise. Every path ends in its own `ret`.
fn search(numbers: &[u32], program: &mut Vec<sock_filter>) -> Result<(), SandboxError> {
    if numbers.len() <= LEAF_SIZE {
        // jeq n_i → the EPERM at the end; fall through to the next comparison otherwise.
        let count = numbers.len();
        for (i, &nr) in numbers.iter().enumerate() {
            let to_deny = u8::try_from(count - i).map_err(|_| jump_too_far())?;
            program.push(insn(JEQ_K, to_deny, 0, nr));
        }
        program.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
        program.push(insn(RET_K, 0, 0, ret_errno(libc::EPERM)));
        return Ok(());
    }
    let middle = numbers.len() / 2;
    let branch = program.len();
    program.push(insn(JGE_K, 0, 0, numbers[middle]));
    search(&numbers[..middle], program)?;
    let over_lower_half = program.len() - branch - 1;
    program[branch].jt = u8::try_from(over_lower_half).map_err(|_| jump_too_far())?;
    search(&numbers[middle..], program)
}

/// The connect filter: arch check, then `connect` answers `SECCOMP_RET_USER_NOTIF`, everything
/// else is allowed (the other filters still apply).
pub(super) fn connect_program() -> BpfProgram {
    vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
        insn(JEQ_K, 0, 1, libc::SYS_connect as u32),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Syscalls that give a new name to something, or remove, truncate, re-mode, re-own or re-time
/// an entry, each
/// answered by `verbd exec`'s create broker (module `create_broker`); `open` and `openat` only
/// when they create, write or truncate ([`BROKERED_OPEN_FLAGS`], tested in the filter).
const NAMING_SYSCALLS: &[i64] = &[
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rmdir,
    libc::SYS_truncate,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_futimesat,
    libc::SYS_utimes,
    libc::SYS_utime,
];

/// `setxattrat` and `removexattrat` (Linux 6.13), not yet in the `libc` crate.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Syscalls that set or remove an extended attribute: POSIX ACLs (`system.posix_acl_access`
/// grants another uid write or execute where `chmod` may not), `security.*` (capabilities, LSM
/// labels), `trusted.*`, `user.*`. `verbd exec` answers each `EOPNOTSUPP`, as a file system
/// without extended attributes would, in every mode and on every path: the family is closed
/// whole, not judged name by name (tools such as `cp -a` fall back to `chmod`, which the create
/// broker judges). Reading them (`getxattr`, `listxattr`) stays allowed.
const XATTR_CHANGING_SYSCALLS: &[i64] = &[
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    SYS_SETXATTRAT,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_REMOVEXATTRAT,
];

/// `ioctl` requests that set inode flags or attributes, answered `EPERM` by `verbd exec`'s
/// broker filter on every file: `FS_IOC_SETFLAGS` (`chattr`: an owner may set e.g. `nodump`,
/// `noatime`, `nocow` on any file it owns, in a read root too; immutable and append-only need
/// `CAP_LINUX_IMMUTABLE`), its 32-bit spelling `FS_IOC32_SETFLAGS`, and `FS_IOC_FSSETXATTR`
/// (the same flags, and the project id an owner may change to leave a project quota); and two
/// that change an inode for good where the file system offers them: `FS_IOC_ENABLE_VERITY`
/// (a file anyone may write becomes read-only forever) and `FS_IOC_SET_ENCRYPTION_POLICY`
/// (an empty directory the program owns would encrypt what a human later puts there with the
/// program's key). A request sits in a register, so the filter decides without the broker;
/// reading the flags (`FS_IOC_GETFLAGS`, `FS_IOC_FSGETXATTR`) stays allowed.
const INODE_FLAG_SETTING_IOCTLS: &[u32] = &[
    0x4008_6602,
    0x4004_6602,
    0x401c_5820,
    0x4080_6685,
    0x800c_6613,
];

/// `open`/`openat` flags that make the call brokered: creating, writing or truncating.
const BROKERED_OPEN_FLAGS: u32 =
    (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u32;

/// offsetof(struct seccomp_data, args[i]), low 32 bits (little-endian).
const fn offset_arg(i: u32) -> u32 {
    16 + 8 * i
}

const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;

/// `verbd exec`'s broker filter: arch check, then every [`XATTR_CHANGING_SYSCALLS`] answers
/// `EOPNOTSUPP` and `ioctl` with any of [`INODE_FLAG_SETTING_IOCTLS`] `EPERM`; `connect`, every [`NAMING_SYSCALLS`], `open`/`openat` with any of
/// [`BROKERED_OPEN_FLAGS`], and `open`/`openat` of a directory to list (`O_DIRECTORY` without
/// `O_PATH`, for the ancestor listing of module `ancestor_listing`) answer
/// `SECCOMP_RET_USER_NOTIF`; `openat2` answers `ENOSYS` (its flags sit behind a pointer: libc
/// falls back to `openat`); everything else is allowed (the other filters still apply). An
/// `open` of a file without `O_DIRECTORY` never leaves the kernel.
pub(super) fn exec_program() -> BpfProgram {
    let always = NAMING_SYSCALLS.len() as u32 + 1;
    // Positions: 4 prefix, two per xattr call, the ioctl block (four more than its requests),
    // openat2 (2), open (3), openat (3), then the `always` comparisons.
    let ioctls = INODE_FLAG_SETTING_IOCTLS.len() as u32;
    let refusals = 2 * XATTR_CHANGING_SYSCALLS.len() as u32 + ioctls + 4;
    let compare_start = 12 + refusals;
    let allow_after_compares = compare_start + always;
    let check = allow_after_compares + 1;
    let notify = check + 4;
    let mut program = vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
    ];
    for &nr in XATTR_CHANGING_SYSCALLS {
        program.push(insn(JEQ_K, 0, 1, nr as u32));
        program.push(insn(RET_K, 0, 0, ret_errno(libc::EOPNOTSUPP)));
    }
    // ioctl: load the request (an `unsigned int` for the kernel: the low half), refuse the
    // listed ones, allow every other (nothing later in this filter concerns ioctl).
    program.extend([
        insn(JEQ_K, 0, (ioctls + 3) as u8, libc::SYS_ioctl as u32),
        insn(LD_W_ABS, 0, 0, offset_arg(1)),
    ]);
    for (i, &request) in INODE_FLAG_SETTING_IOCTLS.iter().enumerate() {
        program.push(insn(JEQ_K, (ioctls - i as u32) as u8, 0, request));
    }
    program.extend([
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        insn(RET_K, 0, 0, ret_errno(libc::EPERM)),
    ]);
    program.extend([
        insn(JEQ_K, 0, 1, libc::SYS_openat2 as u32),
        insn(RET_K, 0, 0, ret_errno(libc::ENOSYS)),
        insn(JEQ_K, 0, 2, libc::SYS_open as u32),
        insn(LD_W_ABS, 0, 0, offset_arg(1)),
        insn(JA, 0, 0, check - 9 - refusals),
        insn(JEQ_K, 0, 2, libc::SYS_openat as u32),
        insn(LD_W_ABS, 0, 0, offset_arg(2)),
        insn(JA, 0, 0, check - 12 - refusals),
    ]);
    let numbers = std::iter::once(libc::SYS_connect).chain(NAMING_SYSCALLS.iter().copied());
    for (i, nr) in numbers.enumerate() {
        let at = compare_start + i as u32;
        program.push(insn(JEQ_K, (notify - at - 1) as u8, 0, nr as u32));
    }
    program.extend([
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        // check: creating, writing, truncating → notify; else a directory opened for reading
        // (not `O_PATH`, which lists nothing) → notify; else allow.
        insn(JSET_K, 3, 0, BROKERED_OPEN_FLAGS),
        insn(JSET_K, 0, 1, libc::O_DIRECTORY as u32),
        insn(JSET_K, 0, 1, libc::O_PATH as u32),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
    ]);
    debug_assert_eq!(program.len() as u32, notify + 1);
    program
}

/// offsetof(struct seccomp_data, args[i]), low 32 bits on little-endian x86_64: uids, gids and
/// `setgroups`' count are 32-bit in the kernel, which reads only this half.
fn offset_of_arg_low(index: u8) -> u32 {
    16 + 8 * u32::from(index)
}

/// "Unchanged" in `setresuid` and friends: `(uid_t) -1`.
const UNCHANGED_ID: u32 = u32::MAX;

/// The identity guard of a daemon that keeps `CAP_SETUID`/`CAP_SETGID` for `run_as` (module
/// `identity`): arch check, every x32 number EPERM, then each identity-changing call answers
/// EPERM unless every id it sets is in `uids` (`gids` for the group calls) or "unchanged", and
/// `setgroups` unless its list is empty. So no thread of the daemon, and no child before its own
/// filters, can take uid 0, gid 0, root's groups, or any id but these, whatever it holds.
pub(super) fn identity_program(uids: &[u32], gids: &[u32]) -> Result<BpfProgram, SandboxError> {
    let mut uids = uids.to_vec();
    uids.push(UNCHANGED_ID);
    let mut gids = gids.to_vec();
    gids.push(UNCHANGED_ID);
    let guarded: [(i64, &[u8], &[u32]); 9] = [
        (libc::SYS_setuid, &[0], &uids),
        (libc::SYS_setreuid, &[0, 1], &uids),
        (libc::SYS_setresuid, &[0, 1, 2], &uids),
        (libc::SYS_setfsuid, &[0], &uids),
        (libc::SYS_setgid, &[0], &gids),
        (libc::SYS_setregid, &[0, 1], &gids),
        (libc::SYS_setresgid, &[0, 1, 2], &gids),
        (libc::SYS_setfsgid, &[0], &gids),
        (libc::SYS_setgroups, &[0], &[0]),
    ];
    let mut program = vec![
        insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFFSET_NR),
        insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, ret_errno(libc::EPERM)),
    ];
    for (nr, args, allowed) in guarded {
        // Per argument: load it, jump past the EPERM when it equals an allowed value.
        let mut body = Vec::new();
        for &arg in args {
            body.push(insn(LD_W_ABS, 0, 0, offset_of_arg_low(arg)));
            let count = allowed.len();
            for (i, &id) in allowed.iter().enumerate() {
                let past_eperm = u8::try_from(count - i).map_err(|_| jump_too_far())?;
                body.push(insn(JEQ_K, past_eperm, 0, id));
            }
            body.push(insn(RET_K, 0, 0, ret_errno(libc::EPERM)));
        }
        body.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
        let past_body = u8::try_from(body.len()).map_err(|_| jump_too_far())?;
        program.push(insn(JEQ_K, 0, past_body, nr as u32));
        program.extend(body);
    }
    program.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    Ok(program)
}

fn jump_too_far() -> SandboxError {
    SandboxError::Seccomp("syscall search tree needs a jump beyond 255 instructions".into())
}

/// Installs `program` on the calling thread. Async-signal-safe: no allocation, one syscall.
/// Returns the syscall's result (the listener fd with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, else
/// 0), or the errno on failure.
pub(super) fn install(program: &[sock_filter], flags: libc::c_ulong) -> Result<i32, i32> {
    let fprog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the kernel copies the
    // instructions and keeps no reference. seccompiler's `sock_filter` has the layout of the
    // kernel's `struct sock_filter` (u16, u8, u8, u32), as libc's does.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc >= 0 {
        Ok(rc as i32)
    } else {
        // errno, read without allocating (as the child's other stages do).
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a program the way the kernel does for the instructions used here.
    fn run(program: &[sock_filter], arch: u32, nr: u32) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let i = &program[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => acc = if i.k == OFFSET_ARCH { arch } else { nr },
                JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                JGE_K => pc += usize::from(if acc >= i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    /// Runs any program seccompiler emits on `seccomp_data` for an x86_64 call `nr(args)`.
    fn run_call(program: &[sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        let word = |offset: u32| -> u32 {
            match offset {
                OFFSET_NR => nr as u32,
                OFFSET_ARCH => AUDIT_ARCH_X86_64,
                16..=63 => {
                    let arg = args[(offset as usize - 16) / 8];
                    if offset.is_multiple_of(8) {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                other => panic!("load of offset {other}"),
            }
        };
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let i = &program[pc];
            pc += 1;
            let code = u32::from(i.code);
            // BPF_CLASS (low 3 bits) and BPF_OP (bits 4-7) of the opcode.
            match (code & 0x07, code & 0xf0) {
                (libc::BPF_LD, _) => acc = word(i.k),
                (libc::BPF_ALU, libc::BPF_AND) => acc &= i.k,
                (libc::BPF_JMP, libc::BPF_JA) => pc += i.k as usize,
                (libc::BPF_JMP, op) => {
                    let taken = match op {
                        libc::BPF_JEQ => acc == i.k,
                        libc::BPF_JGE => acc >= i.k,
                        libc::BPF_JGT => acc > i.k,
                        libc::BPF_JSET => acc & i.k != 0,
                        other => panic!("jump op {other:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                (libc::BPF_RET, _) => return i.k,
                other => panic!("unexpected instruction {other:?}"),
            }
        }
    }

    #[test]
    fn fast_open_sends_are_refused_unless_the_network_is_full() {
        let eperm = ret_errno(libc::EPERM);
        let fastopen = libc::MSG_FASTOPEN as u64;
        for network in [
            Network::None,
            Network::Full,
            Network::ConnectTcp(vec![5432]),
        ] {
            let program = argument_program(&network).unwrap();
            for (nr, flags_arg) in FLAGS_ARGUMENT_OF_SEND {
                for flags in [0, libc::MSG_NOSIGNAL as u64, libc::MSG_DONTWAIT as u64] {
                    let call = |flags: u64| {
                        let mut args = [3, 0, 0, 0, 0, 0];
                        args[usize::from(flags_arg)] = flags;
                        run_call(&program, nr, args)
                    };
                    assert_eq!(call(flags), libc::SECCOMP_RET_ALLOW, "{network:?} {nr}");
                    let want = if network == Network::Full {
                        libc::SECCOMP_RET_ALLOW
                    } else {
                        eperm
                    };
                    assert_eq!(call(flags | fastopen), want, "{network:?} {nr} fastopen");
                }
            }
        }
    }

    #[test]
    fn unix_sockets_are_stream_or_seqpacket_only_in_every_mode() {
        let eperm = ret_errno(libc::EPERM);
        let unix = libc::AF_UNIX as u64;
        for network in [
            Network::None,
            Network::Full,
            Network::ConnectTcp(vec![5432]),
        ] {
            let program = argument_program(&network).unwrap();
            for nr in [libc::SYS_socket, libc::SYS_socketpair] {
                for sock_type in 0..=15u64 {
                    for flags in [0, libc::SOCK_NONBLOCK, libc::SOCK_CLOEXEC] {
                        let arg = sock_type | flags as u64;
                        let want = if [libc::SOCK_STREAM, libc::SOCK_SEQPACKET]
                            .contains(&(sock_type as i32))
                        {
                            libc::SECCOMP_RET_ALLOW
                        } else {
                            eperm
                        };
                        assert_eq!(
                            run_call(&program, nr, [unix, arg, 0, 0, 0, 0]),
                            want,
                            "{network:?}: syscall {nr} AF_UNIX type {arg:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn identity_program_lets_only_the_listed_ids_through() {
        let program = identity_program(&[1000, 101], &[1000, 104]).unwrap();
        let eperm = ret_errno(libc::EPERM);
        let allow = libc::SECCOMP_RET_ALLOW;
        let none = u32::MAX as u64;
        let call = |nr: i64, a: [u64; 3]| run_call(&program, nr, [a[0], a[1], a[2], 0, 0, 0]);
        assert_eq!(call(libc::SYS_setresuid, [101, 101, 101]), allow);
        assert_eq!(call(libc::SYS_setresuid, [1000, none, none]), allow);
        // Root, another uid, and root hidden in any position or in the upper half's neighbour.
        for args in [
            [0, 0, 0],
            [none, 0, none],
            [none, none, 0],
            [1000, 1000, 0],
            [102, 102, 102],
        ] {
            assert_eq!(call(libc::SYS_setresuid, args), eperm, "{args:?}");
        }
        assert_eq!(call(libc::SYS_setuid, [0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setuid, [101, 0, 0]), allow);
        assert_eq!(call(libc::SYS_setreuid, [101, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setfsuid, [0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setfsuid, [1000, 0, 0]), allow);
        // The uid list does not open the gid calls, nor the other way round.
        assert_eq!(call(libc::SYS_setresgid, [101, 101, 101]), eperm);
        assert_eq!(call(libc::SYS_setresgid, [104, 104, 104]), allow);
        assert_eq!(call(libc::SYS_setgid, [0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setregid, [none, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setfsgid, [0, 0, 0]), eperm);
        assert_eq!(call(libc::SYS_setresuid, [104, 104, 104]), eperm);
        // setgroups: only the empty list.
        assert_eq!(call(libc::SYS_setgroups, [0, 0, 0]), allow);
        assert_eq!(call(libc::SYS_setgroups, [1, 0x7fff_0000, 0]), eperm);
        // Everything else is this filter's business no more.
        assert_eq!(call(libc::SYS_getuid, [0, 0, 0]), allow);
        assert_eq!(call(libc::SYS_capset, [0, 0, 0]), allow);
        // The x32 table and a foreign architecture.
        assert_eq!(
            run(
                &program,
                AUDIT_ARCH_X86_64,
                X32_SYSCALL_BIT + libc::SYS_setresuid as u32
            ),
            eperm
        );
        assert_eq!(
            run(&program, 3 | 0x4000_0000, 0),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn number_program_denies_exactly_the_deny_set() {
        let denied: Vec<u32> = DENIED_SYSCALLS.iter().map(|&n| n as u32).collect();
        let program = number_program(denied.clone()).unwrap();
        let eperm = ret_errno(libc::EPERM);
        for nr in 0..600u32 {
            let want = if nr == libc::SYS_clone3 as u32 {
                ret_errno(libc::ENOSYS)
            } else if denied.contains(&nr) {
                eperm
            } else {
                libc::SECCOMP_RET_ALLOW
            };
            assert_eq!(run(&program, AUDIT_ARCH_X86_64, nr), want, "syscall {nr}");
        }
        assert_eq!(
            run(&program, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT + 39),
            eperm
        );
        assert_eq!(run(&program, AUDIT_ARCH_X86_64, u32::MAX), eperm);
        let i386 = 3 | 0x4000_0000;
        assert_eq!(run(&program, i386, 39), libc::SECCOMP_RET_KILL_PROCESS);
    }

    /// The reviewed deny set as literal x86_64 syscall numbers (arch/x86/entry/syscalls/
    /// syscall_64.tbl), written independently of `DENIED_SYSCALLS`: dropping an entry from the
    /// list, or adding one, fails here until this snapshot is reviewed too.
    #[cfg(target_arch = "x86_64")]
    const REVIEWED_DENY_SET_X86_64: &[(u32, &str)] = &[
        (101, "ptrace"),
        (310, "process_vm_readv"),
        (311, "process_vm_writev"),
        (440, "process_madvise"),
        (438, "pidfd_getfd"),
        (312, "kcmp"),
        (165, "mount"),
        (166, "umount2"),
        (430, "fsopen"),
        (431, "fsconfig"),
        (432, "fsmount"),
        (433, "fspick"),
        (429, "move_mount"),
        (428, "open_tree"),
        (442, "mount_setattr"),
        (155, "pivot_root"),
        (161, "chroot"),
        (272, "unshare"),
        (308, "setns"),
        (321, "bpf"),
        (298, "perf_event_open"),
        (323, "userfaultfd"),
        (425, "io_uring_setup"),
        (426, "io_uring_enter"),
        (427, "io_uring_register"),
        (250, "keyctl"),
        (248, "add_key"),
        (249, "request_key"),
        (304, "open_by_handle_at"),
        (303, "name_to_handle_at"),
        (246, "kexec_load"),
        (320, "kexec_file_load"),
        (175, "init_module"),
        (313, "finit_module"),
        (176, "delete_module"),
        (172, "iopl"),
        (173, "ioperm"),
        (169, "reboot"),
        (167, "swapon"),
        (168, "swapoff"),
        (163, "acct"),
        (179, "quotactl"),
        (103, "syslog"),
        (300, "fanotify_init"),
        (212, "lookup_dcookie"),
        (164, "settimeofday"),
        (227, "clock_settime"),
        (170, "sethostname"),
        (171, "setdomainname"),
        (153, "vhangup"),
        (134, "uselib"),
        (156, "_sysctl"),
    ];
    /// Refused only for the daemon's children (leaving the process group).
    #[cfg(target_arch = "x86_64")]
    const REVIEWED_DAEMON_CHILD_EXTRA_X86_64: &[(u32, &str)] = &[(112, "setsid"), (109, "setpgid")];
    /// Syscalls every program needs: they must stay allowed.
    #[cfg(target_arch = "x86_64")]
    const MUST_STAY_ALLOWED_X86_64: &[(u32, &str)] = &[
        (0, "read"),
        (1, "write"),
        (3, "close"),
        (9, "mmap"),
        (39, "getpid"),
        (56, "clone"),
        (59, "execve"),
        (60, "exit"),
        (231, "exit_group"),
        (257, "openat"),
    ];

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn compiled_filters_match_the_reviewed_literal_snapshot() {
        let eperm = ret_errno(libc::EPERM);
        for (usage, extra_denied, extra_allowed) in [
            (
                FilterUse::DaemonChild,
                REVIEWED_DAEMON_CHILD_EXTRA_X86_64,
                &[][..],
            ),
            (
                FilterUse::ExecWrapper,
                &[][..],
                REVIEWED_DAEMON_CHILD_EXTRA_X86_64,
            ),
        ] {
            let programs = compile(&Network::None, usage).unwrap();
            let numbers = &programs[0];
            let mut expected_denied = 0;
            for &(nr, name) in REVIEWED_DENY_SET_X86_64.iter().chain(extra_denied) {
                assert_eq!(
                    run(numbers, AUDIT_ARCH_X86_64, nr),
                    eperm,
                    "{usage:?}: {name} ({nr}) is not refused with EPERM"
                );
                expected_denied += 1;
            }
            for &(nr, name) in MUST_STAY_ALLOWED_X86_64.iter().chain(extra_allowed) {
                assert_eq!(
                    run(numbers, AUDIT_ARCH_X86_64, nr),
                    libc::SECCOMP_RET_ALLOW,
                    "{usage:?}: {name} ({nr}) must stay allowed"
                );
            }
            assert_eq!(
                run(numbers, AUDIT_ARCH_X86_64, 435),
                ret_errno(libc::ENOSYS),
                "{usage:?}: clone3 must answer ENOSYS (libc falls back to clone)"
            );
            let actually_denied = (0..600u32)
                .filter(|&nr| run(numbers, AUDIT_ARCH_X86_64, nr) == eperm)
                .count();
            assert_eq!(
                actually_denied, expected_denied,
                "{usage:?}: the filter refuses syscalls the reviewed snapshot does not list"
            );
        }
    }

    #[test]
    fn the_path_through_the_number_program_stays_short() {
        let program = number_program(
            DENIED_SYSCALLS
                .iter()
                .chain(DENIED_FOR_DAEMON_CHILDREN)
                .map(|&n| n as u32)
                .collect(),
        )
        .unwrap();
        // Longest path: 8 prefix instructions, log2(n / LEAF_SIZE) branches, one leaf.
        let mut longest = 0;
        for nr in 0..600u32 {
            let mut pc = 0usize;
            let mut steps = 0;
            let mut acc = 0;
            loop {
                let i = &program[pc];
                steps += 1;
                pc += 1;
                match i.code {
                    LD_W_ABS => {
                        acc = if i.k == OFFSET_ARCH {
                            AUDIT_ARCH_X86_64
                        } else {
                            nr
                        }
                    }
                    JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                    JGE_K => pc += usize::from(if acc >= i.k { i.jt } else { i.jf }),
                    _ => break,
                }
            }
            longest = longest.max(steps);
        }
        assert!(longest <= 20, "longest path {longest}");
    }

    #[test]
    fn programs_compile_and_fit_the_kernel_limit() {
        for network in [
            Network::None,
            Network::Full,
            Network::ConnectTcp(vec![5432]),
        ] {
            for usage in [FilterUse::DaemonChild, FilterUse::ExecWrapper] {
                let programs = compile(&network, usage).unwrap();
                assert_eq!(programs.len(), 2);
                for program in &programs {
                    assert!(!program.is_empty() && program.len() <= 4096);
                }
            }
        }
        let connect = connect_program();
        let connect_nr = libc::SYS_connect as u32;
        assert_eq!(
            run(&connect, AUDIT_ARCH_X86_64, connect_nr),
            libc::SECCOMP_RET_USER_NOTIF
        );
        assert_eq!(
            run(&connect, AUDIT_ARCH_X86_64, libc::SYS_sendto as u32),
            libc::SECCOMP_RET_ALLOW
        );
    }

    #[test]
    fn the_exec_filter_brokers_exactly_the_naming_and_writing_calls() {
        let program = exec_program();
        let notify = libc::SECCOMP_RET_USER_NOTIF;
        let call = |nr: i64, args: [u64; 6]| run_call(&program, nr, args);
        let creat = libc::O_CREAT as u64;
        let rdwr = libc::O_RDWR as u64;
        assert_eq!(call(libc::SYS_open, [0, creat | rdwr, 0, 0, 0, 0]), notify);
        assert_eq!(call(libc::SYS_open, [0, rdwr, 0, 0, 0, 0]), notify);
        let read_only = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
        assert_eq!(
            call(libc::SYS_open, [0, read_only, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        // The flags of openat are its third argument: elsewhere they do not count.
        for flags in [creat, rdwr, libc::O_WRONLY as u64, libc::O_TRUNC as u64] {
            assert_eq!(call(libc::SYS_openat, [0, 0, flags, 0, 0, 0]), notify);
        }
        assert_eq!(
            call(libc::SYS_openat, [0, creat, read_only, creat, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        // A writable O_TMPFILE is brokered like any write (a read-only one the kernel refuses).
        assert_eq!(
            call(
                libc::SYS_openat,
                [0, 0, libc::O_TMPFILE as u64 | rdwr, 0, 0, 0]
            ),
            notify
        );
        // A directory opened to list it goes to the ancestor listing; `O_PATH` lists nothing and
        // stays in the kernel, as does every open of a file without `O_DIRECTORY`.
        let directory = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
        let nonblocking = directory | libc::O_NONBLOCK as u64;
        assert_eq!(call(libc::SYS_openat, [0, 0, directory, 0, 0, 0]), notify);
        assert_eq!(call(libc::SYS_openat, [0, 0, nonblocking, 0, 0, 0]), notify);
        assert_eq!(call(libc::SYS_open, [0, directory, 0, 0, 0, 0]), notify);
        assert_eq!(
            call(libc::SYS_openat, [0, 0, libc::O_TMPFILE as u64, 0, 0, 0]),
            notify
        );
        for flags in [
            directory | libc::O_PATH as u64,
            (libc::O_PATH | libc::O_NOFOLLOW) as u64,
            read_only,
            libc::O_NONBLOCK as u64,
        ] {
            assert_eq!(
                call(libc::SYS_openat, [0, 0, flags, 0, 0, 0]),
                libc::SECCOMP_RET_ALLOW,
                "openat flags {flags:#o}"
            );
            assert_eq!(
                call(libc::SYS_open, [0, flags, 0, 0, 0, 0]),
                libc::SECCOMP_RET_ALLOW,
                "open flags {flags:#o}"
            );
        }
        // Writing flags with O_DIRECTORY (or O_PATH) stay with the create broker.
        assert_eq!(
            call(
                libc::SYS_openat,
                [0, 0, directory | libc::O_PATH as u64 | rdwr, 0, 0, 0]
            ),
            notify
        );
        assert_eq!(call(libc::SYS_openat2, [0; 6]), ret_errno(libc::ENOSYS));
        for &nr in XATTR_CHANGING_SYSCALLS {
            assert_eq!(
                call(nr, [0; 6]),
                ret_errno(libc::EOPNOTSUPP),
                "syscall {nr}"
            );
        }
        for &request in INODE_FLAG_SETTING_IOCTLS {
            assert_eq!(
                call(libc::SYS_ioctl, [3, request as u64, 0, 0, 0, 0]),
                ret_errno(libc::EPERM),
                "ioctl {request:#x}"
            );
        }
        // The literal numbers, written independently of the list: FS_IOC_SETFLAGS,
        // FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR, FS_IOC_ENABLE_VERITY,
        // FS_IOC_SET_ENCRYPTION_POLICY.
        for request in [
            0x4008_6602u64,
            0x4004_6602,
            0x401c_5820,
            0x4080_6685,
            0x800c_6613,
        ] {
            assert_eq!(
                call(libc::SYS_ioctl, [3, request, 0, 0, 0, 0]),
                ret_errno(libc::EPERM),
                "ioctl {request:#x}"
            );
        }
        // FS_IOC_GETFLAGS, FS_IOC_FSGETXATTR, TCGETS, FIONREAD; and a request's upper half,
        // which the kernel ignores, does not hide one.
        for request in [0x8008_6601u64, 0x801c_581f, 0x5401, 0x541b] {
            assert_eq!(
                call(libc::SYS_ioctl, [3, request, 0, 0, 0, 0]),
                libc::SECCOMP_RET_ALLOW,
                "ioctl {request:#x}"
            );
        }
        assert_eq!(
            call(libc::SYS_ioctl, [3, 0x1_4008_6602, 0, 0, 0, 0]),
            ret_errno(libc::EPERM)
        );
        for nr in [
            libc::SYS_getxattr,
            libc::SYS_lgetxattr,
            libc::SYS_fgetxattr,
            libc::SYS_listxattr,
        ] {
            assert_eq!(call(nr, [0; 6]), libc::SECCOMP_RET_ALLOW, "syscall {nr}");
        }
        for &nr in NAMING_SYSCALLS.iter().chain(&[libc::SYS_connect]) {
            assert_eq!(call(nr, [0; 6]), notify, "syscall {nr}");
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_ftruncate,
            libc::SYS_execve,
            libc::SYS_bind,
        ] {
            assert_eq!(
                call(nr, [creat; 6]),
                libc::SECCOMP_RET_ALLOW,
                "syscall {nr}"
            );
        }
        assert!(program.len() <= 4096);
    }
}
