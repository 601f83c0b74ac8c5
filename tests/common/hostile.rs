//! A hostile client: protocol requests sent by one forked child that has dropped to an
//! unprivileged uid, as an agent would send them — one after another, all at once, or held open
//! (slow senders, parked `wait`s) — returning each raw response line.
//!
//! The child is single-threaded after `fork`; it changes its ids with raw syscalls, uses only
//! the blocking socket client (glibc resets its allocator locks in a forked child) and leaves
//! with `_exit`. Responses travel back over a pipe, each framed by its length (u64, little
//! endian); a request that got no answer is framed with `u64::MAX`.
#![allow(dead_code)] // shared by several test crates, each of which uses only part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
    // As in `verbd::client::request`: a daemon that refuses at accept may answer and close
    // before the request is written; its answer is still there to read.
    let _ = stream.write_all(&encode_request(request));
    let mut line = Vec::new();
    BufReader::new(&stream).read_until(b'\n', &mut line).ok()?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    (!line.is_empty()).then_some(line)
}

/// Forks a child that drops to `uid` (and gid `uid`, no supplementary groups), runs `body` with
/// the write end of a pipe and leaves with `_exit(0)`. Returns the child's pid and the read end.
pub fn fork_as(uid: u32, body: impl FnOnce(std::fs::File)) -> (i32, std::fs::File) {
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
        body(std::fs::File::from(write_end));
        // SAFETY: terminates the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    drop(write_end);
    (pid, std::fs::File::from(read_end))
}

fn frame(answer: &RawAnswer) -> Vec<u8> {
    match answer {
        Some(line) => {
            let mut framed = (line.len() as u64).to_le_bytes().to_vec();
            framed.extend_from_slice(line);
            framed
        }
        None => u64::MAX.to_le_bytes().to_vec(),
    }
}

fn send_or_exit(out: &mut std::fs::File, bytes: &[u8]) {
    if out.write_all(bytes).is_err() {
        // SAFETY: terminates the child.
        unsafe { libc::_exit(97) };
    }
}

/// Reads `count` framed answers (fewer if the child stopped early).
fn read_answers(input: &mut std::fs::File, count: usize) -> Vec<RawAnswer> {
    let mut answers = Vec::with_capacity(count);
    for _ in 0..count {
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
    answers
}

fn reap(pid: i32, uid: u32) {
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the hostile client (uid {uid}) failed: wait status {status:#x} (98: could not drop ids)"
    );
}

/// Sends `requests` in order from a child running as `uid` (and gid `uid`, no supplementary
/// groups) and returns the raw answers in the same order.
pub fn requests_as(uid: u32, socket: &Path, requests: &[Request]) -> Vec<RawAnswer> {
    requests_as_with(uid, socket, requests, |_| {})
}

/// Like [`requests_as`], with `before(i)` run in the child (after it dropped its ids) before
/// request `i` is sent: for attacks where the agent changes what it holds between calls.
pub fn requests_as_with(
    uid: u32,
    socket: &Path,
    requests: &[Request],
    mut before: impl FnMut(usize),
) -> Vec<RawAnswer> {
    let (pid, mut input) = fork_as(uid, |mut out| {
        for (i, request) in requests.iter().enumerate() {
            before(i);
            send_or_exit(&mut out, &frame(&exchange(socket, request)));
        }
    });
    let answers = read_answers(&mut input, requests.len());
    reap(pid, uid);
    assert_eq!(answers.len(), requests.len(), "answers missing");
    answers
}

/// Sends every one of `requests` at once, each on its own connection, from a child running as
/// `uid`, then reads the answers: the raw answers in the same order.
pub fn concurrent_requests_as(uid: u32, socket: &Path, requests: &[Request]) -> Vec<RawAnswer> {
    let (pid, mut input) = fork_as(uid, |mut out| {
        let streams: Vec<Option<UnixStream>> = requests
            .iter()
            .map(|request| {
                let mut stream = UnixStream::connect(socket).ok()?;
                stream.write_all(&encode_request(request)).ok()?;
                Some(stream)
            })
            .collect();
        for stream in streams {
            let answer = stream.and_then(|stream| {
                stream
                    .set_read_timeout(Some(Duration::from_secs(120)))
                    .ok()?;
                let mut line = Vec::new();
                BufReader::new(&stream).read_until(b'\n', &mut line).ok()?;
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                (!line.is_empty()).then_some(line)
            });
            send_or_exit(&mut out, &frame(&answer));
        }
    });
    let answers = read_answers(&mut input, requests.len());
    reap(pid, uid);
    assert_eq!(answers.len(), requests.len(), "answers missing");
    answers
}

/// Connections a child running as `uid` holds open: each was sent `opening`; with `trickle`,
/// one more space every 500 ms, never a newline (a slow sender). `answered` holds what the
/// daemon answered within the settle time, per connection (`None`: nothing yet, the connection
/// is still held). Dropping it closes them all.
pub struct HeldConnections {
    pid: i32,
    uid: u32,
    /// Closing it tells the child to close its connections and leave.
    control: Option<OwnedFd>,
    pub answered: Vec<RawAnswer>,
}

impl HeldConnections {
    /// Connections the daemon has not answered (it holds them, parked or being read).
    pub fn unanswered(&self) -> usize {
        self.answered.iter().filter(|a| a.is_none()).count()
    }

    /// The answers the daemon gave at once.
    pub fn answers(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.answered.iter().flatten()
    }
}

impl Drop for HeldConnections {
    fn drop(&mut self) {
        // A byte, not only the end of the pipe: a child forked meanwhile by another test may
        // hold a copy of this end.
        if let Some(control) = self.control.take() {
            let _ = std::fs::File::from(control).write_all(b"x");
        }
        reap(self.pid, self.uid);
    }
}

/// Opens `count` connections to `socket` as `uid`, sends `opening` on each, waits `settle`, and
/// reports what was answered; the connections stay open until the result is dropped.
pub fn hold_connections_as(
    uid: u32,
    socket: &Path,
    count: usize,
    opening: &[u8],
    trickle: bool,
    settle: Duration,
) -> HeldConnections {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (control_read, control_write) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let control_write_fd = control_write.as_raw_fd();
    let (pid, mut input) = fork_as(uid, |mut out| {
        // SAFETY: the child's copy of the parent's end; only the parent writes to it.
        unsafe { libc::close(control_write_fd) };
        let mut streams: Vec<UnixStream> = Vec::with_capacity(count);
        for _ in 0..count {
            let Ok(mut stream) = UnixStream::connect(socket) else {
                // SAFETY: terminates the child.
                unsafe { libc::_exit(96) };
            };
            let _ = stream.write_all(opening);
            streams.push(stream);
        }
        std::thread::sleep(settle);
        for stream in &streams {
            let _ = stream.set_nonblocking(true);
            let mut line = Vec::new();
            let _ = BufReader::new(stream).read_until(b'\n', &mut line);
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            send_or_exit(&mut out, &frame(&(!line.is_empty()).then_some(line)));
        }
        drop(out);
        loop {
            let mut poll = libc::pollfd {
                fd: control_read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, 500) };
            if ready != 0 {
                return; // the parent said so (or poll failed): leave
            }
            if trickle {
                for stream in &streams {
                    // SAFETY: a valid socket fd and a one-byte buffer; MSG_NOSIGNAL: a closed
                    // connection gives EPIPE, not SIGPIPE.
                    unsafe {
                        libc::send(
                            stream.as_raw_fd(),
                            b" ".as_ptr().cast(),
                            1,
                            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                        )
                    };
                }
            }
        }
    });
    drop(control_read);
    let answered = read_answers(&mut input, count);
    let held = HeldConnections {
        pid,
        uid,
        control: Some(control_write),
        answered,
    };
    assert_eq!(
        held.answered.len(),
        count,
        "the holding child (uid {uid}) stopped early (96: could not connect)"
    );
    held
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
        stream: None,
    }
}

/// Decodes a raw answer, panicking with it when there is none or it does not decode.
pub fn decode(answer: &RawAnswer) -> Response {
    let line = answer.as_ref().expect("the daemon answered");
    Response::decode(line).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
}

/// What a child running as `uid` got from `count` connections that each reconnect the moment
/// the daemon answers, for `duration`: (`busy` answers, other answers, connections the daemon
/// closed without a word).
pub fn reconnect_loop_as(
    uid: u32,
    socket: &Path,
    count: usize,
    opening: &[u8],
    duration: Duration,
) -> (u64, u64, u64) {
    let (pid, mut input) = fork_as(uid, |mut out| {
        let open = || {
            let mut stream = UnixStream::connect(socket).ok()?;
            let _ = stream.write_all(opening);
            stream.set_nonblocking(true).ok()?;
            Some(stream)
        };
        let mut streams: Vec<Option<UnixStream>> = (0..count).map(|_| open()).collect();
        let (mut busy, mut other, mut silent) = (0u64, 0u64, 0u64);
        let started = std::time::Instant::now();
        while started.elapsed() < duration {
            let mut polls: Vec<libc::pollfd> = streams
                .iter()
                .flatten()
                .map(|stream| libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `polls` is a valid array of pollfds for the duration of the call.
            unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, 10) };
            for slot in streams.iter_mut() {
                if let Some(stream) = slot {
                    let mut buffer = [0u8; 1024];
                    match (&*stream).read(&mut buffer) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Ok(0) | Err(_) => silent += 1,
                        Ok(n) => match Response::decode(buffer[..n].trim_ascii_end()) {
                            Ok(Response::Busy { .. }) => busy += 1,
                            _ => other += 1,
                        },
                    }
                }
                *slot = open();
            }
        }
        let mut report = Vec::new();
        for n in [busy, other, silent] {
            report.extend_from_slice(&n.to_le_bytes());
        }
        send_or_exit(&mut out, &report);
    });
    let mut report = [0u8; 24];
    input
        .read_exact(&mut report)
        .expect("the reconnecting child's report");
    reap(pid, uid);
    let at = |i: usize| u64::from_le_bytes(report[i * 8..i * 8 + 8].try_into().unwrap());
    (at(0), at(1), at(2))
}
