//! A file lease cannot hold a file verb. An agent that owns a file beneath a file verb's root
//! may take a write lease on it (`fcntl(F_SETLEASE, F_WRLCK)`); every later open by anyone
//! else then waits until the holder lets go or the kernel breaks the lease
//! (`/proc/sys/fs/lease-break-time`, 45 s by default). The daemon runs file verbs itself, so a
//! verb that waited would spend a daemon worker on the agent's say, call after call. The
//! daemon opens with `O_NONBLOCK`: the open fails at once (EAGAIN) and the call is refused with
//! the reason. The attack comes from the hostile uid 63512, which holds the lease in the very
//! process that calls; the control releases the lease and the same calls succeed.
use crate::common;
use crate::hostile;

use common::*;
use std::os::fd::AsRawFd;
use verbd::protocol::Response;

const AGENT: u32 = 63512;
const LEASED: &str = "is under a lease another process holds";

#[test]
fn an_agent_s_lease_on_a_file_is_refused_at_once_never_waited_on() {
    if !require_root("file_leases") {
        return;
    }
    let d = Daemon::start_with(&super::files_symlinks::file_verbs_for(AGENT), |dir| {
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("held.txt"), "one\n").unwrap();
        std::os::unix::fs::chown(work.join("held.txt"), Some(AGENT), Some(AGENT)).unwrap();
    });
    d.open_socket();
    let held = d.path("work/held.txt");
    let path = held.display().to_string();
    let requests = [
        hostile::call("get", &[("path", &path)]),
        hostile::call("add", &[("path", &path), ("content", "two\n")]),
        // The lease is being broken now; it still holds until the holder lets go.
        hostile::call("get", &[("path", &path)]),
        // Control: the holder released it.
        hostile::call("add", &[("path", &path), ("content", "two\n")]),
        hostile::call("get", &[("path", &path)]),
    ];
    let mut lease: Option<std::fs::File> = None;
    let started = std::time::Instant::now();
    let answers = hostile::requests_as_with(AGENT, &d.socket, &requests, |i| match i {
        0 => {
            // SAFETY: ignoring SIGIO (the lease-break notice) in this single-threaded child.
            unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
            let Ok(file) = std::fs::File::open(&held) else {
                // SAFETY: terminates the child, which could not open its own file.
                unsafe { libc::_exit(95) }
            };
            // SAFETY: fcntl on a descriptor this child owns.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) } != 0 {
                // SAFETY: terminates the child (the parent sees the status).
                unsafe { libc::_exit(96) };
            }
            lease = Some(file);
        }
        3 => {
            let file = lease.take().expect("the lease is held");
            // SAFETY: fcntl on a descriptor this child owns.
            unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
        }
        _ => {}
    });
    let answered_in = started.elapsed();
    let texts: Vec<String> = answers
        .iter()
        .map(|a| format!("{:?}", hostile::decode(a)))
        .collect();
    for (i, text) in texts[..3].iter().enumerate() {
        assert!(
            text.contains(LEASED) && text.contains("held.txt"),
            "call {i} under the agent's lease was not refused for it: {text}"
        );
    }
    assert!(
        matches!(hostile::decode(&answers[3]), Response::Ok { .. }),
        "control append: {}",
        texts[3]
    );
    // One `two`: the append under the lease did not land, the control's did.
    assert_eq!(stdout_of(&hostile::decode(&answers[4])), "one\ntwo\n");
    // Nothing above waited on the lease: a wait lasts the lease-break time.
    let lease_break: u64 = std::fs::read_to_string("/proc/sys/fs/lease-break-time")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        answered_in.as_secs() < lease_break,
        "the calls took {answered_in:?}, as long as the kernel's lease break ({lease_break} s)"
    );
}
