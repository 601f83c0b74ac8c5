//! The stdio side of `verbd mcp`: what it reads from the client and what waits for the client
//! to read, both bounded, whatever the client does.
//!
//! Invariants:
//! - Only whole lines of at most `max` bytes (newline included) reach the MCP session; a longer
//!   line is dropped as it arrives (never buffered whole) and replaced by [`OVERSIZED_LINE`], so
//!   the client gets an answer instead of waiting for one ([`forward_lines`]).
//! - Nothing is dropped for being unread: every byte the session writes waits in the
//!   [`Outbox`] until stdout takes it, in order.
//! - Backpressure instead of growth: while more than [`OUTPUT_BACKLOG_BYTES`] wait in the
//!   outbox, the session reads no message and no line is passed on from stdin; and at most
//!   [`MAX_IN_FLIGHT`] requests are handled at once ([`Paced`]: a request holds its place from
//!   when the session reads it until its handler returns, whatever happens to it — answered,
//!   refused, cancelled). A client that writes requests and never reads stdout therefore makes
//!   `verbd mcp` stop reading stdin (the client's own writes then block), holding at most the
//!   backlog, the answers of the requests in flight, and the lines waiting in the pipes between
//!   (the answers to lines that are no message, read without a place, are bounded by the pipe).
#![forbid(unsafe_code)]

use rmcp::RoleServer;
use rmcp::model::{GetExtensions, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Past this many bytes of answers the client has not read, `verbd mcp` stops reading stdin
/// until the client reads.
pub const OUTPUT_BACKLOG_BYTES: usize = 1024 * 1024;
/// How many requests are handled at once; the next one is read when one of them is done. An
/// open `subscriptions/listen` stream holds one of these places while it is open.
pub const MAX_IN_FLIGHT: usize = 64;
/// Once stdin has closed, how long the answers still queued wait for a client that reads
/// nothing before `verbd mcp` exits without them (as long as it reads, they are all written).
pub const DRAIN_PATIENCE: Duration = Duration::from_secs(5);

/// The line `verbd mcp` hands the MCP session in place of a dropped over-long one: JSON that is
/// no JSON-RPC message, so the session answers it `-32600 Invalid Request` without an id, and the
/// client learns its message was not read instead of waiting for an answer that never comes.
pub(super) const OVERSIZED_LINE: &[u8] =
    b"{\"verbd\":\"a line over the 8 MiB limit was dropped\"}\n";

/// Copies `input` to `output` one whole line at a time, at most `max` bytes a line (newline
/// included), each only once `outbox` holds no more than [`OUTPUT_BACKLOG_BYTES`]. A longer line
/// is never buffered whole: as soon as it passes `max` its bytes are dropped up to its newline,
/// and `OVERSIZED_LINE` is written in its place. An unfinished line at the end of `input` is
/// dropped. Returns at the end of `input` (or an error on either side).
pub(super) async fn forward_lines<R, W>(
    input: R,
    mut output: W,
    max: usize,
    outbox: &Outbox,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = tokio::io::BufReader::new(input);
    let mut line = Vec::new();
    let mut discarding = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(());
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        let mut complete = None;
        if discarding {
            discarding = newline.is_none();
        } else if line.len() + take > max {
            line = Vec::new();
            discarding = newline.is_none();
            complete = Some(OVERSIZED_LINE.to_vec());
        } else {
            line.extend_from_slice(&available[..take]);
            if newline.is_some() {
                complete = Some(std::mem::take(&mut line));
            }
        }
        input.consume(take);
        if let Some(complete) = complete {
            outbox.backlog_at_most(OUTPUT_BACKLOG_BYTES).await;
            output.write_all(&complete).await?;
            output.flush().await?;
        }
    }
}

/// What the MCP session wrote and stdout has not yet taken, in order.
#[derive(Default)]
pub(super) struct Outbox {
    state: Mutex<OutboxState>,
    /// Woken when there is something to write, or the session is done.
    to_write: Notify,
    /// Woken when bytes left the outbox (written, or stdout is gone).
    drained: Notify,
    /// Bytes written to stdout so far: progress, for [`DRAIN_PATIENCE`].
    written: AtomicU64,
}

#[derive(Default)]
struct OutboxState {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes in `chunks` plus the chunk being written.
    queued: usize,
    /// stdout failed (the client closed it): writes fail with this from then on.
    broken: Option<std::io::ErrorKind>,
    /// The session will write nothing more.
    finished: bool,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, OutboxState> {
        self.state.lock().expect("outbox lock")
    }

    /// Bytes waiting for the client to read them.
    pub(super) fn backlog(&self) -> usize {
        self.lock().queued
    }

    /// Returns once at most `limit` bytes wait (or stdout is gone: nothing will wait then).
    async fn backlog_at_most(&self, limit: usize) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let state = self.lock();
                if state.queued <= limit || state.broken.is_some() {
                    return;
                }
            }
            drained.await;
        }
    }

    /// The session will write nothing more: the writer ends once the outbox is empty.
    pub(super) fn finish(&self) {
        self.lock().finished = true;
        self.to_write.notify_one();
    }

    /// Writes the outbox to `stdout` in order until the session is finished and the outbox is
    /// empty, or stdout fails (then everything queued is dropped: no one can read it).
    pub(super) async fn write_to<W: AsyncWrite + Unpin>(self: Arc<Self>, mut stdout: W) {
        loop {
            let (next, finished) = {
                let mut state = self.lock();
                (state.chunks.pop_front(), state.finished)
            };
            let Some(chunk) = next else {
                if finished {
                    let _ = stdout.shutdown().await;
                    return;
                }
                self.to_write.notified().await;
                continue;
            };
            let written = async {
                stdout.write_all(&chunk).await?;
                stdout.flush().await
            }
            .await;
            let mut state = self.lock();
            let broken = match written {
                Ok(()) => {
                    state.queued -= chunk.len();
                    self.written
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    false
                }
                Err(e) => {
                    tracing::debug!(error = %e, "stdout closed");
                    state.broken = Some(e.kind());
                    state.chunks.clear();
                    state.queued = 0;
                    true
                }
            };
            drop(state);
            self.drained.notify_waiters();
            if broken {
                return;
            }
        }
    }

    /// Waits for `writer` (the [`Outbox::write_to`] task) to write everything, as long as the
    /// client keeps reading: after [`DRAIN_PATIENCE`] without a byte taken it is stopped.
    pub(super) async fn drained_or_stalled(&self, mut writer: tokio::task::JoinHandle<()>) {
        let mut seen = self.written.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                _ = &mut writer => return,
                () = tokio::time::sleep(DRAIN_PATIENCE) => {
                    let now = self.written.load(Ordering::Relaxed);
                    if now == seen {
                        tracing::warn!(
                            unread = self.backlog(),
                            "stdin closed and stdout unread for {DRAIN_PATIENCE:?}: exiting without the last answers"
                        );
                        writer.abort();
                        return;
                    }
                    seen = now;
                }
            }
        }
    }
}

/// The MCP session's writing end of an [`Outbox`]: takes every write at once (the session
/// never waits on the client), and finishes the outbox when dropped.
pub(super) struct OutboxWriter(pub(super) Arc<Outbox>);

impl AsyncWrite for OutboxWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut state = self.0.lock();
        if let Some(kind) = state.broken {
            return Poll::Ready(Err(kind.into()));
        }
        state.chunks.push_back(buf.to_vec());
        state.queued += buf.len();
        drop(state);
        self.0.to_write.notify_one();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.0.finish();
        Poll::Ready(Ok(()))
    }
}

impl Drop for OutboxWriter {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A request's place among the [`MAX_IN_FLIGHT`], carried in its extensions: freed when the
/// request and its handler's context are dropped, whatever the outcome.
#[derive(Clone)]
struct Place {
    _held: Arc<OwnedSemaphorePermit>,
}

/// A transport that reads the next message only when the outbox is at most
/// [`OUTPUT_BACKLOG_BYTES`] and a request could take a place.
pub(super) struct Paced<T> {
    inner: T,
    outbox: Arc<Outbox>,
    places: Arc<Semaphore>,
}

impl<T> Paced<T> {
    pub(super) fn new(inner: T, outbox: Arc<Outbox>) -> Paced<T> {
        Paced {
            inner,
            outbox,
            places: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Paced<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        // Cancel-safe: a place taken and then dropped with this future is given back; the inner
        // transport keeps a partly read line for the next call.
        self.outbox.backlog_at_most(OUTPUT_BACKLOG_BYTES).await;
        let place = self.places.clone().acquire_owned().await.ok()?;
        let mut message = self.inner.receive().await?;
        if let JsonRpcMessage::Request(request) = &mut message {
            request.request.extensions_mut().insert(Place {
                _held: Arc::new(place),
            });
        }
        Some(message)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn forwarded(input: &[u8], max: usize) -> Vec<u8> {
        let mut output = Vec::new();
        forward_lines(input, &mut output, max, &Outbox::default())
            .await
            .unwrap();
        output
    }

    #[tokio::test]
    async fn whole_lines_pass_and_an_over_long_one_is_replaced() {
        let mut expected = b"short\n".to_vec();
        expected.extend_from_slice(OVERSIZED_LINE);
        expected.extend_from_slice(b"1234567\n");
        // Over the limit without its newline yet, then its tail; a last line never finished.
        let input = b"short\n0123456789abcdef\n1234567\nunfin";
        assert_eq!(forwarded(input, 8).await, expected);
        // A line of exactly the limit (newline included) passes.
        assert_eq!(forwarded(b"1234567\n", 8).await, b"1234567\n");
    }

    #[tokio::test]
    async fn no_line_passes_while_the_backlog_is_over_the_limit() {
        let outbox = Arc::new(Outbox::default());
        let mut session = OutboxWriter(outbox.clone());
        session
            .write_all(&vec![b'x'; OUTPUT_BACKLOG_BYTES + 1])
            .await
            .unwrap();
        let (client, mut reader) = tokio::io::duplex(1024);
        let forwarder = {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                let mut passed = Vec::new();
                forward_lines(&b"a\nb\n"[..], &mut passed, 8, &outbox)
                    .await
                    .unwrap();
                passed
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!forwarder.is_finished(), "a line passed over the backlog");
        // The client reads: the backlog drains, in order, and the lines pass.
        let writer = tokio::spawn(outbox.clone().write_to(client));
        let mut read = vec![0; OUTPUT_BACKLOG_BYTES + 1];
        tokio::io::AsyncReadExt::read_exact(&mut reader, &mut read)
            .await
            .unwrap();
        assert!(read.iter().all(|b| *b == b'x'));
        assert_eq!(forwarder.await.unwrap(), b"a\nb\n");
        drop(session);
        writer.await.unwrap();
        assert_eq!(outbox.backlog(), 0);
    }
}
