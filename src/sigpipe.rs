//! The `SIGPIPE` disposition of the command-line tools.
//!
//! The Rust runtime ignores `SIGPIPE`, so a write to a pipe whose reader went away fails with
//! `EPIPE`, and `println!` panics on that: `verbd completions bash | head -1` printed a panic.
//! A tool whose output is read by a pipeline should instead end quietly when nobody reads any
//! more, as `cat` and `grep` do: [`die_on_closed_pipe`] restores the default disposition. The
//! processes that keep ignoring it print with the `*_lossy!` macros here, which drop what cannot
//! be written instead of panicking.
//!
//! Invariants: only the command-line tools that write nothing but their output and requests on
//! a `MSG_NOSIGNAL` socket (`client`) call it, before any thread starts. The daemon (`serve`),
//! and every command that writes to another process's pipe or socket it does not own (`exec`
//! and its brokers, `selftest` and its canaries, `mcp`, `notify`, the hook) keep ignoring
//! `SIGPIPE`: a reader that went away is an error they handle, never their death.

use nix::sys::signal::{SigHandler, Signal, signal};

/// Restore the default `SIGPIPE` disposition: a write to a closed pipe ends the process.
#[allow(unsafe_code)]
pub fn die_on_closed_pipe() -> nix::Result<()> {
    // SAFETY: `SigDfl` installs no handler, so no code of ours ever runs in signal context; the
    // call only changes how this process reacts to SIGPIPE, made before any thread exists.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) }.map(drop)
}

/// `eprintln!` for the processes that keep `SIGPIPE` ignored: a closed standard error loses the
/// text, never the process (`eprintln!` panics on a write error).
#[macro_export]
macro_rules! eprintln_lossy {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` without the panic: see [`eprintln_lossy!`](crate::eprintln_lossy).
#[macro_export]
macro_rules! eprint_lossy {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` without the panic: output nobody reads any more is dropped (the exit status still
/// says what happened).
#[macro_export]
macro_rules! println_lossy {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` without the panic: see [`println_lossy!`](crate::println_lossy).
#[macro_export]
macro_rules! print_lossy {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}
