//! Client for the daemon socket: blocking ([`request`], the CLI and the hook adapter) and async
//! ([`request_async`], `verbd mcp`), with the same errors.
//!
//! One connection per request. Every call has a deadline covering connect, write and read, so a
//! hung daemon can never hang a caller (the hook adapter relies on this to fail closed). The
//! client never half-closes its side after the request line: the daemon reads the end of the
//! stream as the client hanging up and cancels the work (so dropping an async request, or a CLI
//! killed mid-call, cancels the run it asked for).
#![forbid(unsafe_code)]

use crate::protocol::{self, OutputStream, Request, Response};
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot connect to verbd at {path}: {source} (is the daemon running? start it with `verbd serve`, or `systemctl start verbd.socket verbd-approve.socket` on a packaged host, whose sockets /run/verbd/verbd.sock and /run/verbd/approve.sock only members of verbd-agents and verbd-approvers may reach; or pass --socket / set VERBD_SOCKET)"
    )]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("verbd at {path} did not answer within {deadline:?}")]
    Timeout { path: PathBuf, deadline: Duration },
    #[error("connection to verbd at {path} failed: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("verbd closed the connection without an answer")]
    NoAnswer,
    /// The caller's chunk handler asked to stop; the connection is closed, which the daemon
    /// takes as the caller hanging up (it ends the run).
    #[error("the caller stopped reading the answer")]
    Stopped,
    #[error("verbd sent an answer this client cannot read: {0}")]
    BadAnswer(protocol::DecodeError),
    #[error(
        "refusing to send an approver's request through {path}: the socket belongs to uid {owner}, neither root nor you (a socket another account put at that path would answer in the daemon's place: invent proposals, swallow decisions). Use the daemon's approver socket, or an SSH forward you start in a directory only you can write (docs/fleet.md)"
    )]
    ForeignSocket { path: PathBuf, owner: u32 },
}

/// Whether `req` is one only approvers send (`pending`, `approve`, `deny`, `resolve`,
/// `reload`): what the answer says is what a person decides on.
fn is_approvers(req: &Request) -> bool {
    matches!(
        req,
        Request::Pending {}
            | Request::Approve { .. }
            | Request::Deny { .. }
            | Request::Resolve { .. }
            | Request::Reload {}
    )
}

/// An approver's request goes only to a socket owned by root or by the caller: the daemon's
/// sockets are root's (bound before it drops privileges, or by systemd), a daemon run by hand
/// is its user's, and an SSH forward's end is made by the approver's own ssh. A socket of
/// another account at the path (planted where a forward's end was), or a symlink of another
/// account (which it could turn elsewhere between this check and the connection), is refused
/// before anything is sent; so is a symlink to such a socket. A path that cannot be examined is
/// left to `connect`, which says why.
fn check_approver_socket(socket: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    for examined in [std::fs::symlink_metadata(socket), std::fs::metadata(socket)] {
        let Ok(meta) = examined else {
            return Ok(());
        };
        let owner = meta.uid();
        if owner != 0 && owner != me {
            return Err(ClientError::ForeignSocket {
                path: socket.to_path_buf(),
                owner,
            });
        }
    }
    Ok(())
}

/// Send one request and wait for its response, all within `deadline`. An approver's request
/// goes only to a socket owned by root or the caller ([`ClientError::ForeignSocket`]).
pub fn request(socket: &Path, req: &Request, deadline: Duration) -> Result<Response, ClientError> {
    request_streaming(socket, req, deadline, &mut |_, _| ControlFlow::Continue(()))
}

/// [`request`] for a call that asked for `stream`: each `chunk` answer goes to `on_chunk` as it
/// arrives; the last answer is returned. `on_chunk` answering `Break` closes the connection
/// ([`ClientError::Stopped`]): the daemon ends the run, as a shell pipeline's producer dies when
/// its reader is gone.
pub fn request_streaming(
    socket: &Path,
    req: &Request,
    deadline: Duration,
    on_chunk: &mut dyn FnMut(OutputStream, &str) -> ControlFlow<()>,
) -> Result<Response, ClientError> {
    let started = Instant::now();
    if is_approvers(req) {
        check_approver_socket(socket)?;
    }
    let stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.to_path_buf(),
        source,
    })?;
    let io_err = |source: std::io::Error| {
        if matches!(
            source.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            ClientError::Timeout {
                path: socket.to_path_buf(),
                deadline,
            }
        } else {
            ClientError::Io {
                path: socket.to_path_buf(),
                source,
            }
        }
    };
    let remaining = || {
        deadline
            .checked_sub(started.elapsed())
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_millis(1))
    };
    stream
        .set_write_timeout(Some(remaining()))
        .map_err(io_err)?;
    // A daemon that refuses the caller may answer and close before reading everything: a
    // failed write is not final, the answer may already be waiting.
    let written = send_all(&stream, &protocol::encode_request(req));
    let mut reader = BufReader::new(&stream);
    loop {
        stream.set_read_timeout(Some(remaining())).map_err(io_err)?;
        let mut line = Vec::new();
        let read = reader.read_until(b'\n', &mut line);
        if line.is_empty() {
            written.map_err(io_err)?;
            read.map_err(io_err)?;
            return Err(ClientError::NoAnswer);
        }
        match Response::decode(&line).map_err(ClientError::BadAnswer)? {
            Response::Chunk { stream, text } => {
                if on_chunk(stream, &text).is_break() {
                    return Err(ClientError::Stopped);
                }
            }
            last => return Ok(last),
        }
    }
}

/// Writes `bytes` with `MSG_NOSIGNAL`: a daemon that closed the connection gives `EPIPE`, never
/// a `SIGPIPE` — the command-line tools die of that signal (so `verbd list | head` ends quietly),
/// and a connection the daemon closed must still let them read its answer.
fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    use nix::sys::socket::{MsgFlags, send};
    use std::os::fd::AsRawFd;
    while !bytes.is_empty() {
        match send(stream.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// [`request`] on the async runtime: the same connection, deadline and errors. Dropping the
/// future closes the connection, which the daemon takes as the client hanging up.
pub async fn request_async(
    socket: &Path,
    req: &Request,
    deadline: Duration,
) -> Result<Response, ClientError> {
    request_async_streaming(socket, req, deadline, &mut |_, _| {}).await
}

/// [`request_async`] for a call that asked for `stream`: each `chunk` answer goes to
/// `on_chunk` as it arrives; the last answer is returned.
pub async fn request_async_streaming(
    socket: &Path,
    req: &Request,
    deadline: Duration,
    on_chunk: &mut (dyn FnMut(OutputStream, String) + Send),
) -> Result<Response, ClientError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|source| ClientError::Connect {
                path: socket.to_path_buf(),
                source,
            })?;
        let io_err = |source: std::io::Error| ClientError::Io {
            path: socket.to_path_buf(),
            source,
        };
        let (read_half, mut write_half) = stream.split();
        // As in `request`: a refusal may be answered before the request is read.
        let written = write_half.write_all(&protocol::encode_request(req)).await;
        let mut reader = tokio::io::BufReader::new(read_half);
        loop {
            let mut line = Vec::new();
            let read = reader.read_until(b'\n', &mut line).await;
            if line.is_empty() {
                written.map_err(io_err)?;
                read.map_err(io_err)?;
                return Err(ClientError::NoAnswer);
            }
            match Response::decode(&line).map_err(ClientError::BadAnswer)? {
                Response::Chunk { stream, text } => on_chunk(stream, text),
                last => return Ok(last),
            }
        }
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::Timeout {
                path: socket.to_path_buf(),
                deadline,
            })
        })
}
