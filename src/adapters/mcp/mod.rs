//! `verbd mcp`: a stdio MCP server that agent runtimes spawn (Claude Code, Codex, Gemini CLI,
//! Cursor, the OpenAI Agents SDK, LangChain), in front of the daemon's socket.
//!
//! Each verb the caller's roles may call is a tool ([`catalog`]); a tool call is one `call`
//! request on a new connection to the daemon, and its answer becomes the tool result
//! ([`results`]). Both protocol eras are served (by `rmcp`): the `initialize` handshake
//! (2025-06-18, 2025-11-25; Claude Code uses it for stdio servers) and 2026-07-28
//! (`server/discover`, per-request `_meta`, `subscriptions/listen`).
//!
//! Invariants (the MCP layer adds no way around the daemon):
//! - Identity is the kernel's: the daemon reads the peer uid of each connection, which is this
//!   process's uid — the one the agent runtime started it as. Nothing in MCP (`clientInfo`,
//!   `_meta`, arguments) is sent as identity; arguments go to the daemon as the verb's parameters
//!   and it refuses any it does not know.
//! - The daemon decides and validates everything, every time: no decision, result or approval is
//!   cached here. The only thing kept is the tool-name → verb map of the last `list` (and it
//!   cannot send a call to another verb than the one listed under that name: see [`catalog`]). A
//!   name not in the map goes to the daemon as it is, which refuses and journals it.
//! - Only MCP messages reach stdout (rmcp's framing); logs go to stderr. A closed or restarting
//!   daemon gives a JSON-RPC error (`-32603`, `data.verbd` = `unavailable`), never a hang: every
//!   daemon request has a deadline. Unparsable input lines are ignored (as every official MCP SDK
//!   does, to avoid error storms between two confused peers); JSON that is not a JSON-RPC message
//!   gets `-32600 Invalid Request`; so does a line over `MAX_LINE_BYTES` (without an id), which is
//!   dropped as it arrives, so memory stays bounded whatever stdin sends (`stdio`).
//! - Memory stays bounded whatever the client reads, too: answers wait for stdout in order and
//!   none is dropped, but past [`OUTPUT_BACKLOG_BYTES`] unread, or with [`MAX_IN_FLIGHT`]
//!   requests being handled, no more of stdin is read until the client catches up (`stdio`).
//! - A `tools/call` with a `progressToken` asks the daemon for a streaming verb's output as it
//!   comes: each chunk is sent as `notifications/progress` (that token, a progress count that
//!   rises by one per chunk, the chunk's text as `message`), all before the call's result, which
//!   is built as for any call. Without a token the daemon answers once.
//! - A `tools/call` the client cancels closes its daemon connection: the daemon cancels the run
//!   (and journals it), as when a `verbd call` is interrupted.
//! - `notifications/tools/list_changed` is sent when what the daemon lists for this caller
//!   changes: once the client has listed the tools, the daemon's `list` is asked again every
//!   [`POLL_INTERVAL`] (backing off to [`MAX_POLL_INTERVAL`] while the caller is refused, since
//!   the daemon journals each refusal), and the tools built from it are compared with what the
//!   client last received. Legacy sessions get the notification on the session; 2026-07-28
//!   clients get it on their `subscriptions/listen` stream.
#![forbid(unsafe_code)]

pub mod catalog;
pub mod config;
pub mod results;
mod stdio;

pub use stdio::{MAX_IN_FLIGHT, OUTPUT_BACKLOG_BYTES};

use crate::client::{ClientError, request_async, request_async_streaming};
use crate::exit::{EXIT_ERROR, EXIT_SUCCESS};
use crate::protocol::{Request, Response, StreamAsk};
use catalog::{Catalog, CatalogError, MAX_WAIT_SECS, RESULT_TOOL, WAIT_TOOL};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the tools are re-checked once the client has listed them.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// The longest pause between checks while the daemon refuses the caller.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(60);
/// Deadline for a `list` (and `result`) request.
const LIST_DEADLINE: Duration = Duration::from_secs(10);
/// Deadline for a verb call: verbs may run long (as `verbd call`'s).
const CALL_DEADLINE: Duration = Duration::from_secs(15 * 60);
/// Largest JSON-RPC line read from stdin, newline included; a longer one is dropped as it
/// arrives (never buffered whole) and answered `-32600` without an id (the daemon's own request
/// limit is 1 MiB by default).
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// How many bytes of whole lines may wait between the stdin reader and the MCP session (small:
/// lines that are no message are answered as the session reads them, without a place among
/// `MAX_IN_FLIGHT`, so this bounds their unread answers).
const LINE_PIPE_BYTES: usize = 8 * 1024;

/// What the server tells the model about itself (`instructions`).
pub const INSTRUCTIONS: &str = "Each tool is a verb an operator allowed you, run by the verbd daemon with its own credentials; verbd validates and decides every call. If a call returns CONFIRM_REQUIRED, do not retry it: a human must approve it, then call verbd_wait with its id. A DENIED answer is final: do not try to achieve the same thing another way. REQUIRES_CLARIFICATION names parameters you must ask the user for.";

/// Why the tools could not be listed.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error("{0}")]
    Unavailable(ClientError),
    #[error("verbd denied the request: {0}")]
    Denied(String),
    #[error("{0}")]
    Catalog(CatalogError),
    #[error("verbd error: {0}")]
    Daemon(String),
}

impl ListError {
    fn to_error_data(&self) -> ErrorData {
        let kind = match self {
            ListError::Unavailable(_) => "unavailable",
            ListError::Denied(_) => "denied",
            ListError::Catalog(_) => "catalog",
            ListError::Daemon(_) => "error",
        };
        ErrorData::new(
            ErrorCode::INTERNAL_ERROR,
            self.to_string(),
            Some(json!({ "verbd": kind })),
        )
    }
}

fn unavailable(e: &ClientError) -> ErrorData {
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        format!("{e}; nothing was done through verbd"),
        Some(json!({ "verbd": "unavailable" })),
    )
}

/// What the client last saw of the tool list, to know when to tell it the list changed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// The tools (by [`Catalog::fingerprint`]).
    Tools(String),
    /// A definite refusal (denied, colliding names, a daemon error), by its message.
    Refused(String),
    /// The daemon could not be reached when the client listed.
    Unavailable,
}

struct Shared {
    socket: PathBuf,
    /// The last catalog the daemon's `list` gave: tool names → verbs (no decisions).
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// `None` until the client's first `tools/list`.
    seen: Mutex<Option<Seen>>,
    /// Open 2026-07-28 `subscriptions/listen` streams.
    subscriptions: Mutex<Vec<SubscriptionSink>>,
}

/// The MCP server (one per `verbd mcp` process, so one per agent session and uid).
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl McpServer {
    pub fn new(socket: PathBuf) -> McpServer {
        McpServer {
            shared: Arc::new(Shared {
                socket,
                catalog: Mutex::new(None),
                seen: Mutex::new(None),
                subscriptions: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Ask the daemon for the caller's verbs and build the tools; keep the catalog for names.
    async fn fetch(&self) -> Result<Arc<Catalog>, ListError> {
        let response = request_async(&self.shared.socket, &Request::List {}, LIST_DEADLINE)
            .await
            .map_err(ListError::Unavailable)?;
        let catalog = match response {
            Response::Verbs { verbs } => {
                Arc::new(Catalog::build(&verbs).map_err(ListError::Catalog)?)
            }
            Response::Denied { reason } => return Err(ListError::Denied(reason)),
            Response::Error { message } | Response::Busy { message } => {
                return Err(ListError::Daemon(message));
            }
            other => {
                return Err(ListError::Daemon(format!(
                    "unexpected answer to list: {}",
                    String::from_utf8_lossy(&other.encode()).trim_end()
                )));
            }
        };
        *self.shared.catalog.lock().expect("catalog lock") = Some(catalog.clone());
        Ok(catalog)
    }

    fn seen_of(result: &Result<Arc<Catalog>, ListError>) -> Seen {
        match result {
            Ok(catalog) => Seen::Tools(catalog.fingerprint()),
            Err(ListError::Unavailable(_)) => Seen::Unavailable,
            Err(e) => Seen::Refused(e.to_string()),
        }
    }

    /// The verb behind a tool name: from the last catalog, else from a fresh one; a name no
    /// catalog knows goes to the daemon unchanged (it refuses it, and journals the attempt).
    async fn verb_for(&self, tool: &str) -> Result<String, CallToolResult> {
        let known = self.shared.catalog.lock().expect("catalog lock").clone();
        if let Some(verb) = known.as_ref().and_then(|c| c.verb_of(tool)) {
            return Ok(verb.to_string());
        }
        match self.fetch().await {
            Ok(catalog) => Ok(catalog.verb_of(tool).unwrap_or(tool).to_string()),
            Err(ListError::Catalog(e)) => Err(results::tool_result(Response::Error {
                message: e.to_string(),
            })),
            Err(_) => Ok(tool.to_string()),
        }
    }

    /// Re-check the tools while the session lives; tell the client when they changed.
    async fn watch(self, peer: Peer<RoleServer>) {
        let mut pause = POLL_INTERVAL;
        loop {
            tokio::time::sleep(pause).await;
            let Some(seen) = self.shared.seen.lock().expect("seen lock").clone() else {
                continue;
            };
            let result = self.fetch().await;
            let now = Self::seen_of(&result);
            pause = match &result {
                Err(ListError::Denied(_)) => (pause * 2).min(MAX_POLL_INTERVAL),
                _ => POLL_INTERVAL,
            };
            if now == Seen::Unavailable || now == seen {
                continue;
            }
            *self.shared.seen.lock().expect("seen lock") = Some(now);
            self.notify_list_changed(&peer).await;
        }
    }

    async fn notify_list_changed(&self, peer: &Peer<RoleServer>) {
        // A session opened with `initialize` takes notifications on the session; 2026-07-28
        // clients only on the streams they opened with `subscriptions/listen`.
        if peer.peer_info().is_some()
            && let Err(e) = peer.notify_tool_list_changed().await
        {
            tracing::warn!(error = %e, "cannot send tools/list_changed");
        }
        let sinks = self
            .shared
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .clone();
        for sink in sinks {
            if let Err(e) = sink.notify_tool_list_changed().await {
                tracing::debug!(error = %e, "subscription gone");
            }
        }
    }

    async fn proposal_request(
        &self,
        tool: &str,
        args: &serde_json::Map<String, Value>,
    ) -> Result<(Request, Duration), CallToolResult> {
        let invalid = |message: String| {
            results::tool_result(Response::Invalid {
                param: None,
                rule: "tool-arguments".into(),
                message,
                missing: Vec::new(),
            })
        };
        let allowed: &[&str] = if tool == WAIT_TOOL {
            &["id", "timeout_s"]
        } else {
            &["id"]
        };
        if let Some(unknown) = args.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown parameter `{unknown}` ({tool} takes: {})",
                allowed.join(", ")
            )));
        }
        let Some(id) = args.get("id").and_then(Value::as_u64) else {
            return Err(invalid(format!(
                "REQUIRES_CLARIFICATION: {tool} needs `id`, the proposal id (a positive integer) from CONFIRM_REQUIRED"
            )));
        };
        if tool == RESULT_TOOL {
            return Ok((Request::Result { id }, LIST_DEADLINE));
        }
        let timeout_s = match args.get("timeout_s") {
            None => MAX_WAIT_SECS,
            Some(v) => match v.as_u64() {
                Some(secs) => secs.min(MAX_WAIT_SECS),
                None => {
                    return Err(invalid(format!(
                        "parameter `timeout_s`: {v} is not an integer from 0 to {MAX_WAIT_SECS}"
                    )));
                }
            },
        };
        Ok((
            Request::Wait {
                id,
                timeout_ms: timeout_s * 1000,
            },
            Duration::from_secs(timeout_s) + LIST_DEADLINE,
        ))
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::new("verbd", env!("CARGO_PKG_VERSION"));
        implementation.title = Some("verbd: operator-approved verbs".into());
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(implementation)
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let result = self.fetch().await;
        *self.shared.seen.lock().expect("seen lock") = Some(Self::seen_of(&result));
        match result {
            Ok(catalog) => Ok(ListToolsResult::with_all_items(catalog.tools().to_vec())),
            Err(e) => {
                tracing::warn!("tools/list: {e}");
                Err(e.to_error_data())
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let (daemon_request, deadline) = if tool == WAIT_TOOL || tool == RESULT_TOOL {
            match self.proposal_request(&tool, &args).await {
                Ok(r) => r,
                Err(refused) => return Ok(refused.into()),
            }
        } else {
            let verb = match self.verb_for(&tool).await {
                Ok(verb) => verb,
                Err(refused) => return Ok(refused.into()),
            };
            let args: BTreeMap<String, Value> = args.into_iter().collect();
            let call = Request::Call {
                verb,
                args,
                reason: None,
                idempotency_key: None,
                stream: context
                    .meta
                    .get_progress_token()
                    .map(|_| StreamAsk::default()),
            };
            (call, CALL_DEADLINE)
        };
        // A streaming verb's chunks go to the client as progress, in order, before the result.
        let (chunks, mut delivered) = tokio::sync::mpsc::unbounded_channel::<String>();
        let progress = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let mut sent = 0u64;
                while let Some(text) = delivered.recv().await {
                    sent += 1;
                    let note = ProgressNotificationParam::new(token.clone(), sent as f64)
                        .with_message(text);
                    if peer.notify_progress(note).await.is_err() {
                        return;
                    }
                }
            })
        });
        let socket = &self.shared.socket;
        let exchange = async move {
            // Owned here: the chunk sender closes when the exchange ends.
            let mut on_chunk = move |_stream, text: String| {
                let _ = chunks.send(text);
            };
            request_async_streaming(socket, &daemon_request, deadline, &mut on_chunk).await
        };
        let response = tokio::select! {
            answer = exchange => {
                if let Some(progress) = progress {
                    let _ = progress.await;
                }
                answer.map_err(|e| unavailable(&e))?
            }
            () = context.ct.cancelled() => {
                // Dropping the request closed the connection: the daemon cancels the run.
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    "cancelled by the client; verbd cancels the run (a run cut short may have partly acted)",
                )])
                .into());
            }
        };
        Ok(results::tool_result(response).into())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let sink = context.sink().clone();
        let id = sink.id().clone();
        self.shared
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .push(sink);
        context.cancelled().await;
        self.shared
            .subscriptions
            .lock()
            .expect("subscriptions lock")
            .retain(|s| s.id() != &id);
        Ok(())
    }
}

/// Serve MCP on stdin/stdout until the client closes stdin. Returns the process exit code:
/// 0 when the client went away, 70 when the session could not start.
pub fn run(socket: PathBuf) -> u8 {
    // Logs go to stderr only: stdout carries nothing but protocol messages.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(crate::terminal::stderr_wants_colour())
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VERBD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    // A panicking handler would leave its request unanswered and the client waiting: end the
    // process instead, so the client sees the server close.
    std::panic::set_hook(Box::new(|info| {
        crate::eprintln_lossy!("verbd mcp: internal error: {info}");
        std::process::exit(i32::from(EXIT_ERROR));
    }));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            crate::eprintln_lossy!("verbd mcp: cannot start the async runtime: {e}");
            return EXIT_ERROR;
        }
    };
    let code = runtime.block_on(serve(socket));
    // A read from stdin may still be parked on the blocking pool: do not wait for it.
    runtime.shutdown_background();
    code
}

async fn serve(socket: PathBuf) -> u8 {
    // Non-blocking pipes when stdin/stdout are pipes (as every runtime starts MCP servers): no
    // hand-off to a blocking thread per message.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    match serve_on(socket, stdin, stdout).await {
        Ok(()) => EXIT_SUCCESS,
        Err(e) => {
            crate::eprintln_lossy!("verbd mcp: the MCP session could not start: {e}");
            EXIT_ERROR
        }
    }
}

/// Serve one MCP session on `input`/`output` (newline-delimited JSON-RPC, lines up to 8 MiB)
/// until the client closes `input`, asking the daemon at `socket`. `Err` when the session could
/// not start; a client that closes before the handshake ends it as `Ok`. `verbd mcp` runs it on
/// stdin/stdout; the `mcp_session` fuzz property on in-memory pipes.
pub async fn serve_on<R, W>(
    socket: PathBuf,
    input: R,
    output: W,
) -> Result<(), rmcp::service::ServerInitializeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let server = McpServer::new(socket);
    // Everything the session writes waits in the outbox until `output` takes it; while too much
    // waits, no more input is read (see `stdio`).
    let outbox = Arc::new(stdio::Outbox::default());
    let writer = tokio::spawn(outbox.clone().write_to(output));
    // Whole lines only reach the session, none over the limit: an over-long one gets an answer.
    let (lines, line_feed) = tokio::io::duplex(LINE_PIPE_BYTES);
    let reader_outbox = outbox.clone();
    tokio::spawn(async move {
        if let Err(e) = stdio::forward_lines(input, line_feed, MAX_LINE_BYTES, &reader_outbox).await
        {
            tracing::warn!(error = %e, "reading stdin");
        }
    });
    let transport = stdio::Paced::new(
        AsyncRwTransport::new(lines, stdio::OutboxWriter(outbox.clone()))
            .with_max_line_length(MAX_LINE_BYTES),
        outbox.clone(),
    );
    let started = server.clone().serve(transport).await;
    let session = match started {
        Ok(running) => {
            let watcher = tokio::spawn(server.watch(running.peer().clone()));
            let _ = running.waiting().await;
            watcher.abort();
            Ok(())
        }
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(e),
    };
    outbox.finish();
    outbox.drained_or_stalled(writer).await;
    session
}
