//! A process's hard deadline without a thread: `SIGALRM`, whose handler prints an answer
//! prepared in advance and exits.
//!
//! The agent-runtime hooks must answer "deny" however they fail, a hang included: a runtime
//! lets the call through when a hook times out. A watchdog thread did this, but a second thread
//! made every hook's exit wait until the kernel had scheduled it to die (`exit_group` reaps the
//! process only when all its threads are gone), milliseconds on a loaded machine; a timer costs
//! one system call.
//!
//! Invariants: the answer is prepared (and [`arm`] called) before the timer can fire, never
//! changed after; the handler does only async-signal-safe work (one atomic swap, `write(2)` of
//! the prepared bytes, `_exit(2)`); whichever of the handler and the process's own path claims
//! the output first ([`claim_output`]) is the only one that prints, so an answer is never
//! interleaved with another. Called by single-threaded processes only (a timer signal goes to
//! any thread of the process; here there is one).

use crate::exit::EXIT_HOOK_DENIED;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What the process prints and exits with when its deadline passes.
pub struct LastWord {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

static LAST_WORD: OnceLock<LastWord> = OnceLock::new();

/// Set once by whoever prints the process's answer.
static OUTPUT_CLAIMED: AtomicBool = AtomicBool::new(false);

/// Claim the right to print the process's answer: true once, for the first caller (the
/// process's own path, its panic hook, or the deadline's handler).
pub fn claim_output() -> bool {
    !OUTPUT_CLAIMED.swap(true, Ordering::SeqCst)
}

/// Print `last_word` and exit with its code once `after` has passed, unless the output was
/// claimed before (then exit with its code without printing). Call once, before any other
/// thread exists.
#[allow(unsafe_code)]
pub fn arm(after: Duration, last_word: LastWord) -> std::io::Result<()> {
    if LAST_WORD.set(last_word).is_err() {
        return Err(std::io::Error::other("the hard deadline is armed already"));
    }
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_deadline),
        SaFlags::empty(),
        SigSet::all(),
    );
    // SAFETY: the handler is async-signal-safe (see `on_deadline`), and it reads only
    // `LAST_WORD`, set above and never written again, and the atomic `OUTPUT_CLAIMED`.
    unsafe { sigaction(Signal::SIGALRM, &action) }.map_err(std::io::Error::from)?;
    // At least 1 µs: a zero `it_value` would disarm the timer instead.
    let after = after.max(Duration::from_micros(1));
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: after.as_secs().try_into().unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(after.subsec_micros()),
        },
    };
    // SAFETY: `setitimer` reads the `itimerval` given by reference and writes nothing (the old
    // value pointer is null); it only arranges a SIGALRM, whose handler is installed above.
    let armed = unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
    if armed != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The SIGALRM handler: the prepared answer (unless someone else claimed the output), then
/// `_exit`. Async-signal-safe: an atomic swap, `write(2)`, `_exit(2)`; no allocation, no lock.
extern "C" fn on_deadline(_signal: libc::c_int) {
    let Some(last_word) = LAST_WORD.get() else {
        exit_now(EXIT_HOOK_DENIED.into());
    };
    if claim_output() {
        write_all(libc::STDOUT_FILENO, &last_word.stdout);
        write_all(libc::STDERR_FILENO, &last_word.stderr);
    }
    exit_now(last_word.exit_code)
}

/// `write(2)` until `bytes` are written or the descriptor fails (a closed pipe loses the text;
/// the exit code still says what happened).
#[allow(unsafe_code)]
fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice; write(2) reads at most its length from it.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(written) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(_) if nix::errno::Errno::last() == nix::errno::Errno::EINTR => {}
            Err(_) => return,
        }
    }
}

#[allow(unsafe_code)]
fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: `_exit` ends the process at once, running no handler and touching no lock, which
    // is what a signal handler may do.
    unsafe { libc::_exit(code) }
}
