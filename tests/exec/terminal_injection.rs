//! Terminal injection out of `verbd exec` (issue: a confined program pushed a command into the
//! shared terminal with `ioctl(TIOCSTI)`; the user's shell ran it after the program exited).
//! A real pty, a real interactive shell of an unprivileged uid: the program under `verbd exec`
//! gets EPERM from the seccomp filter and the injected command never runs; the same program
//! outside `verbd exec` is the positive control (where the kernel allows TIOCSTI at all). Verbs
//! get the same refusal.
use crate::common;
use common::policy::{Sandbox, write_exec_policy};
use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

const UID: u32 = 61710;
const PYTHON: &str = "/usr/bin/python3";

/// Pushes `argv[1]` + newline into fd 0's terminal with TIOCSTI, then tries TIOCLINUX; prints
/// `tiocsti ERRNO` and `tioclinux ERRNO` (0 = the call succeeded).
const INJECT: &str = r#"
import fcntl, struct, sys, termios
def attempt(request, arg):
    try:
        fcntl.ioctl(0, request, arg)
        return 0
    except OSError as e:
        return e.errno
results = [attempt(termios.TIOCSTI, bytes([c])) for c in (sys.argv[1] + "\n").encode()]
print("tiocsti", results[0], flush=True)
# TIOCLINUX subcode 2 = set selection; a pty answers ENOTTY/EINVAL, never EPERM.
print("tioclinux", attempt(0x541C, bytes([2]) + bytes(10)), flush=True)
"#;

/// Runs `line` in an interactive `sh` on a fresh pty, then `exit`; returns everything the
/// terminal showed.
const DRIVER: &str = r#"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execve("/bin/sh", ["sh", "-i"], {"PATH": "/usr/bin:/bin", "PS1": "$ ", "HOME": os.getcwd()})
out = b""
def drain(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                out += os.read(fd, 4096)
            except OSError:
                return
drain(0.5)
os.write(fd, (sys.argv[1] + "\n").encode())
drain(4)
os.write(fd, b"exit\n")
drain(1)
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
"#;

fn in_pty(dir: &Path, line: &str) -> String {
    let out = Command::new(PYTHON)
        .args(["-c", DRIVER, line])
        .current_dir(dir.join("work"))
        .uid(UID)
        .gid(UID)
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn legacy_tiocsti() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() == "1")
        .unwrap_or(true)
}

#[test]
fn tiocsti_from_verbd_exec_is_refused_and_the_injected_command_never_runs() {
    if !require_root("tiocsti_from_verbd_exec_is_refused_and_the_injected_command_never_runs") {
        return;
    }
    let dir = open_tempdir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(UID), Some(UID)).unwrap();
    let policy = dir.path().join("policy.toml");
    write_exec_policy(
        &policy,
        Sandbox::new(
            &["/usr", "/lib", "/etc", "/bin", "/dev"],
            &[work.to_str().unwrap()],
        ),
    );
    let injected = work.join("INJECTED");
    let control = work.join("CONTROL");
    let quoted = |s: &str| format!("'{s}'");

    let confined = format!(
        "{BIN} exec --policy {} --profile agent -- {PYTHON} -c {} {}",
        policy.display(),
        quoted(INJECT),
        quoted(&format!("echo pwned > {}", injected.display()))
    );
    let screen = in_pty(dir.path(), &confined);
    println!("confined run:\n{screen}");
    assert!(
        screen.contains(&format!("tiocsti {}", libc::EPERM)),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("tioclinux {}", libc::EPERM)),
        "{screen}"
    );
    assert!(!injected.exists(), "the injected command ran:\n{screen}");

    // Positive control: the same program outside verbd exec.
    let unconfined = format!(
        "{PYTHON} -c {} {}",
        quoted(INJECT),
        quoted(&format!("echo pwned > {}", control.display()))
    );
    let screen = in_pty(dir.path(), &unconfined);
    println!("control run:\n{screen}");
    assert!(
        !screen.contains(&format!("tioclinux {}", libc::EPERM)),
        "{screen}"
    );
    if legacy_tiocsti() {
        assert!(screen.contains("tiocsti 0"), "{screen}");
        assert!(
            control.exists(),
            "control: the shell should have run the injected line:\n{screen}"
        );
    } else {
        // The kernel refuses TIOCSTI itself, with EIO: the EPERM above was the filter's.
        eprintln!(
            "dev.tty.legacy_tiocsti=0: the control cannot inject; checking the kernel's errno"
        );
        assert!(
            screen.contains(&format!("tiocsti {}", libc::EIO)),
            "{screen}"
        );
    }
}

#[test]
fn verbs_get_the_same_refusal() {
    if !require_root("verbs_get_the_same_refusal") {
        return;
    }
    let mut spec = verbd::sandbox::SandboxSpec::new("verb");
    spec.read = ["/usr", "/lib", "/etc", "/bin", "/dev"]
        .iter()
        .map(Into::into)
        .collect();
    let prepared = verbd::sandbox::PreparedSandbox::prepare(spec).unwrap();
    let run = |sandboxed: bool| {
        let mut cmd = Command::new(PYTHON);
        cmd.args(["-c", INJECT, "true"])
            .stdin(std::fs::File::open("/dev/null").unwrap());
        if sandboxed {
            prepared.install_std(&mut cmd).unwrap();
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let confined = run(true);
    let control = run(false);
    println!("verb child: {confined}control: {control}");
    assert!(
        confined.contains(&format!("tiocsti {}", libc::EPERM)),
        "{confined}"
    );
    assert!(
        confined.contains(&format!("tioclinux {}", libc::EPERM)),
        "{confined}"
    );
    // /dev/null is no terminal: the kernel's own answer is ENOTTY.
    assert!(
        control.contains(&format!("tiocsti {}", libc::ENOTTY)),
        "{control}"
    );
}
