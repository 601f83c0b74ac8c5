//! A hostile client: many protocol requests sent by one forked child that has dropped to an
//! unprivileged uid, as an agent would send them, returning each raw response line.
//!
//! The child is single-threaded after `fork`; it changes its ids with raw syscalls, uses only
//! the blocking socket client (glibc resets its allocator locks in a forked child) and leaves
//! with `_exit`. Responses travel back over a pipe, each framed by its length (u64, little
//! endian); a request that got no answer is framed with `u64::MAX`.
#![allow(dead_code)] // shared by several test crates, each of which uses only part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use verbd::protocol::{Request, Response, encode_request};

/// The raw answer line to one request (without its newline), or `None` when none came.
pub type RawAnswer = Option<Vec<u8>>;

fn exchange(socket: &Path, request: &Request) -> RawAnswer {
    let mut stream = UnixStream::connect(socket).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .ok()?;
    stream.write_all(&encode_request(request)).ok()?;
    let mut line = Vec::new();
    BufReader::new(&stream).read_until(b'\n', &mut line).ok()?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    (!line.is_empty()).then_some(line)
}

/// Sends `requests` in order from a child running as `uid` (and gid `uid`, no supplementary
/// groups) and returns the raw answers in the same order.
pub fn requests_as(uid: u32, socket: &Path, requests: &[Request]) -> Vec<RawAnswer> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child only drops its ids with raw syscalls, talks to the socket with the
    // blocking client, writes to the pipe and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(read_end);
        // SAFETY: raw id syscalls; a uid change without KEEPCAPS clears every capability.
        let dropped = unsafe {
            libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
        };
        if !dropped {
            // SAFETY: terminates the child.
            unsafe { libc::_exit(98) };
        }
        let mut out = std::fs::File::from(write_end);
        for request in requests {
            let framed = match exchange(socket, request) {
                Some(line) => {
                    let mut framed = (line.len() as u64).to_le_bytes().to_vec();
                    framed.extend_from_slice(&line);
                    framed
                }
                None => u64::MAX.to_le_bytes().to_vec(),
            };
            if out.write_all(&framed).is_err() {
                // SAFETY: terminates the child.
                unsafe { libc::_exit(97) };
            }
        }
        drop(out);
        // SAFETY: terminates the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    drop(write_end);
    let mut input = std::fs::File::from(read_end);
    let mut answers = Vec::with_capacity(requests.len());
    for _ in requests {
        let mut len = [0u8; 8];
        if input.read_exact(&mut len).is_err() {
            break;
        }
        let len = u64::from_le_bytes(len);
        if len == u64::MAX {
            answers.push(None);
            continue;
        }
        let mut line = vec![0u8; len as usize];
        input.read_exact(&mut line).expect("a framed answer");
        answers.push(Some(line));
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the hostile client (uid {uid}) failed: wait status {status:#x} (98: could not drop ids)"
    );
    assert_eq!(answers.len(), requests.len(), "answers missing");
    answers
}

/// A `call` request with string arguments.
pub fn call(verb: &str, args: &[(&str, &str)]) -> Request {
    Request::Call {
        verb: verb.into(),
        args: args
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect(),
        reason: None,
        idempotency_key: None,
    }
}

/// Decodes a raw answer, panicking with it when there is none or it does not decode.
pub fn decode(answer: &RawAnswer) -> Response {
    let line = answer.as_ref().expect("the daemon answered");
    Response::decode(line).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
}
