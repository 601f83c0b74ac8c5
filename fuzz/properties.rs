//! The properties the fuzz targets assert, one function per parser an agent or an agent-written
//! file reaches. Shared by the libFuzzer targets (`fuzz/fuzz_targets/*.rs`) and by the stable
//! test `tests/policy/fuzz_properties.rs`, which runs the committed corpora and a bounded number of
//! mutations of them on every `cargo test`. Each function panics when its property breaks;
//! "does not panic" alone is never the whole property.
#![allow(dead_code)] // each fuzz target uses one of them

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use verbd::policy::sql::{BUILTIN_DENIED_FUNCTIONS, SqlOptions, validate};
use verbd::policy::{OfflineVerdict, Policy, Role, compile, text_args};
use verbd::protocol::{Response, decode_request, encode_request};

/// A property: panics when it breaks for this input.
pub type Property = fn(&[u8]);

/// Every target by name, for the stable harness.
pub const TARGETS: &[(&str, Property)] = &[
    ("wire_request", wire_request),
    ("wire_response", wire_response),
    ("policy_loader", policy_loader),
    ("params", params),
    ("template_render", template_render),
    ("sql", sql),
    ("journal_reader", journal_reader),
    ("shell_parser", shell_parser),
    ("transcript_reader", transcript_reader),
    ("hook_input", hook_input),
    ("mcp_session", mcp_session),
];

/// Wire protocol, requests: decoding never panics, and a decoded request survives its own
/// encoding unchanged (what the daemon acts on is what the line said, and nothing else).
pub fn wire_request(data: &[u8]) {
    if let Ok(request) = decode_request(data) {
        let line = encode_request(&request);
        assert_eq!(line.last(), Some(&b'\n'));
        assert!(
            !line[..line.len() - 1].contains(&b'\n'),
            "an encoded request spans lines"
        );
        let again = decode_request(&line).expect("an encoded request decodes");
        assert_eq!(again, request, "request changed across encode/decode");
    }
}

/// Wire protocol, responses (what clients and `verbd mcp` read): the same round trip.
pub fn wire_response(data: &[u8]) {
    if let Ok(response) = Response::decode(data) {
        let line = response.encode();
        assert!(
            !line[..line.len().saturating_sub(1)].contains(&b'\n'),
            "an encoded response spans lines"
        );
        let again = Response::decode(&line).expect("an encoded response decodes");
        assert_eq!(again, response, "response changed across encode/decode");
    }
}

/// The policy loader: never panics; a policy it accepts compiles the same way twice, and every
/// verb names only roles the policy defines.
pub fn policy_loader(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = compile(text, "fuzz.toml") else {
        return;
    };
    let again = compile(text, "fuzz.toml").expect("an accepted policy compiles again");
    assert_eq!(
        policy.verbs.keys().collect::<Vec<_>>(),
        again.verbs.keys().collect::<Vec<_>>()
    );
    for verb in policy.verbs.values() {
        for role in &verb.roles {
            assert!(
                policy.roles.contains_key(role),
                "verb `{}` names undefined role `{role}`",
                verb.name
            );
        }
    }
}

/// One verb per parameter type, each passing its value as one whole argv element.
const PARAMS_POLICY: &str = r#"
version = 1
[roles.agent]
uids = [63590]
[verb.p-string]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "string", pattern = "[a-z0-9 ;|&$`'\"-]+", max_length = 64 }
[verb.p-int]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "int", min = -5, max = 500 }
[verb.p-enum]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "enum", values = ["a", "b c"] }
[verb.p-k8s]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "k8s-name" }
[verb.p-host]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "hostname" }
[verb.p-unit]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "systemd-unit" }
[verb.p-path]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "{v}"]
params.v = { type = "path", roots = ["/srv/data"] }
[verb.p-sql]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "-c", "{v}"]
params.v = { type = "sql" }
"#;

pub fn params_policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| compile(PARAMS_POLICY, "params.toml").expect("the fixture compiles"))
}

pub fn offline_argv(policy: &Policy, verb: &str, args: &[(&str, &str)]) -> Option<Vec<String>> {
    let roles: Vec<&Role> = vec![&policy.roles["agent"]];
    let args: BTreeMap<String, String> = args
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    match policy.evaluate_offline(&roles, verb, &text_args(&args)) {
        OfflineVerdict::Run { display_argv } | OfflineVerdict::Propose { display_argv } => {
            Some(display_argv)
        }
        _ => None,
    }
}

/// Each parameter type's validator: a value it accepts reaches the argv as exactly one element,
/// byte for byte (ints canonical), with no NUL, CR or LF (LF and TAB only in `sql`); a path
/// stays under its root with no `..`.
pub fn params(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    let verbs = [
        "p-string", "p-int", "p-enum", "p-k8s", "p-host", "p-unit", "p-path", "p-sql",
    ];
    let verb = verbs[usize::from(selector) % verbs.len()];
    let Some(argv) = offline_argv(params_policy(), verb, &[("v", value)]) else {
        return;
    };
    let element = argv.last().expect("an argv");
    let expected_len = if verb == "p-sql" { 3 } else { 2 };
    assert_eq!(argv.len(), expected_len, "{verb} {value:?} → {argv:?}");
    assert!(
        !element.contains(['\0', '\r']) && (verb == "p-sql" || !element.contains('\n')),
        "{verb}: a control character reached the argv: {element:?}"
    );
    match verb {
        "p-int" => {
            let n: i64 = element.parse().expect("an int element");
            assert!((-5..=500).contains(&n), "{n} outside its range");
        }
        "p-path" => {
            let path = Path::new(element);
            assert!(path.starts_with("/srv/data"), "{element} escapes its root");
            assert!(
                !path
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir)),
                "{element} keeps a `..`"
            );
        }
        "p-enum" => assert!(["a", "b c"].contains(&element.as_str()), "{element}"),
        // Host names are case-insensitive and may end with the root's dot: the validator
        // passes them in lower case, without it.
        "p-host" => {
            let lower = value.to_ascii_lowercase();
            assert_eq!(
                element,
                lower.strip_suffix('.').unwrap_or(&lower),
                "p-host: {value:?}"
            );
        }
        _ => assert_eq!(element, value, "{verb}: the value changed on its way"),
    }
}

const TEMPLATE_POLICY: &str = r#"
version = 1
[roles.agent]
uids = [63590]
[verb.render]
description = "d"
category = "read-only"
roles = ["agent"]
command = ["/bin/echo", "--name={a}", "{b}", "x{a}y{b}z"]
params.a = { type = "string", pattern = "[^\u0000]{0,40}", max_length = 40 }
params.b = { type = "string", pattern = "[^\u0000]{0,40}", max_length = 40 }
"#;

/// Template render: every placeholder becomes exactly the value given, inside exactly the
/// element the template put it in; the argv never gains, loses or splits an element, whatever
/// the values hold (spaces, quotes, `$`, `;`, braces, newlines).
pub fn template_policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| compile(TEMPLATE_POLICY, "t.toml").expect("the fixture compiles"))
}

pub fn template_render(data: &[u8]) {
    let policy = template_policy();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = text.split_once('\u{1}').unwrap_or((text, ""));
    let Some(argv) = offline_argv(policy, "render", &[("a", a), ("b", b)]) else {
        return;
    };
    assert_eq!(
        argv,
        vec![
            "/bin/echo".to_owned(),
            format!("--name={a}"),
            b.to_owned(),
            format!("x{a}y{b}z"),
        ],
        "values {a:?} {b:?}"
    );
}

/// The denylist entry that names `function`: the last part of a function's name as PostgreSQL's
/// parser gives it (its schema dropped), so a quoted name that holds a dot, such as
/// `"pg_x.pg_read_file"`, stays one name and is judged whole, as PostgreSQL looks it up.
fn denied(function: &str) -> Option<&'static str> {
    let last = function.to_ascii_lowercase();
    BUILTIN_DENIED_FUNCTIONS
        .iter()
        .copied()
        .find(|entry| match entry.strip_suffix('*') {
            Some(prefix) => last.starts_with(prefix),
            None => last == *entry,
        })
}

/// The SQL validator: never panics; what it accepts is, to PostgreSQL's own parser (or refused
/// by it whole), exactly one SELECT or EXPLAIN without INTO, locking or data-modifying parts,
/// calling no denied function.
pub fn sql(data: &[u8]) {
    use pg_query::NodeRef;
    use pg_query::protobuf::node::Node as NodeEnum;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if validate(text, &SqlOptions::default()).is_err() {
        return;
    }
    let Ok(parsed) = pg_query::parse(text, pg_query::ParserOptions::default()) else {
        return;
    };
    assert_eq!(parsed.protobuf.stmts.len(), 1, "{text:?}");
    for kind in parsed.statement_types() {
        assert!(
            matches!(kind, "SelectStmt" | "ExplainStmt"),
            "{kind}: {text:?}"
        );
    }
    for (node, _, _, _) in parsed.protobuf.nodes() {
        match node {
            NodeRef::SelectStmt(select) => {
                assert!(select.into_clause.is_none(), "INTO: {text:?}");
                assert!(select.locking_clause.is_empty(), "locking: {text:?}");
            }
            NodeRef::InsertStmt(_)
            | NodeRef::UpdateStmt(_)
            | NodeRef::DeleteStmt(_)
            | NodeRef::MergeStmt(_) => panic!("data-modifying statement accepted: {text:?}"),
            NodeRef::FuncCall(call) => {
                let parts: Vec<&str> = call
                    .funcname
                    .iter()
                    .filter_map(|part| match &part.node {
                        Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
                        _ => None,
                    })
                    .collect();
                let function = parts.last().copied().unwrap_or_default();
                assert!(
                    denied(function).is_none(),
                    "denied {parts:?} accepted: {text:?}"
                );
            }
            _ => {}
        }
    }
}

/// A journal written by the real writer, with its key, witness and checkpoint: every file of
/// its state directory (kept in memory; the directory is removed) and the journal's bytes.
type StateFiles = (Vec<(std::ffi::OsString, Vec<u8>)>, Vec<u8>);

fn reference_journal() -> &'static StateFiles {
    static JOURNAL: OnceLock<StateFiles> = OnceLock::new();
    JOURNAL.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("verbd-fuzz-journal-")
            .tempdir()
            .unwrap();
        let mut journal = verbd::journal::Journal::open(dir.path()).expect("open a journal");
        for index in 0..6 {
            journal
                .append(&serde_json::json!({
                    "kind": "exec", "verb": "restart", "caller": {"uid": 1000},
                    "args": {"unit": format!("svc{index}.service")}
                }))
                .unwrap();
        }
        drop(journal);
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                files.push((entry.file_name(), std::fs::read(entry.path()).unwrap()));
            }
        }
        let bytes = std::fs::read(dir.path().join(verbd::journal::JOURNAL_FILE)).unwrap();
        // Control: the unchanged copy verifies intact, so a finding below is the damage's.
        let copy = state_dir_with(&files, &bytes);
        let report =
            verbd::journal::verify(&verbd::journal::VerifyOptions::for_state_dir(copy.path()))
                .expect("the copied journal verifies");
        assert!(report.is_intact(), "the copied journal is not intact");
        (files, bytes)
    })
}

/// A fresh state directory holding `files` (as the writer made them) with `journal` as the
/// journal's bytes.
fn state_dir_with(files: &[(std::ffi::OsString, Vec<u8>)], journal: &[u8]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("verbd-fuzz-")
        .tempdir()
        .unwrap();
    for (name, bytes) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    std::fs::write(dir.path().join(verbd::journal::JOURNAL_FILE), journal).unwrap();
    dir
}

/// The journal reader: `data` is a patch (2 bytes offset, 1 byte delete length, the rest
/// inserted) applied to a journal the real writer made. Verifying never panics, and a journal
/// whose bytes changed never verifies as intact (its key and witness are in place).
pub fn journal_reader(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let (files, original) = reference_journal();
    let offset = usize::from(u16::from_le_bytes([data[0], data[1]])) % (original.len() + 1);
    let delete = usize::from(data[2]).min(original.len() - offset);
    let mut damaged = original[..offset].to_vec();
    damaged.extend_from_slice(&data[3..]);
    damaged.extend_from_slice(&original[offset + delete..]);
    if damaged == *original {
        return;
    }
    let dir = state_dir_with(files, &damaged);
    let report = verbd::journal::verify(&verbd::journal::VerifyOptions::for_state_dir(dir.path()));
    if let Ok(report) = report {
        assert!(
            !report.is_intact(),
            "a damaged journal verified intact (offset {offset}, deleted {delete}, inserted {:?})",
            String::from_utf8_lossy(&data[3..])
        );
    }
}

/// `policy coverage`'s shell parser: never panics; every span it reports lies inside the text
/// on character boundaries, stages inside their pipeline.
pub fn shell_parser(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(pipelines) = verbd::policy_tools::shell::parse(text) else {
        return;
    };
    for pipeline in &pipelines {
        let span = &pipeline.span;
        assert!(
            span.start <= span.end
                && span.end <= text.len()
                && text.is_char_boundary(span.start)
                && text.is_char_boundary(span.end),
            "pipeline span {span:?} in {text:?}"
        );
        for stage in &pipeline.stages {
            assert!(
                stage.span.start >= span.start && stage.span.end <= span.end,
                "stage span {:?} outside its pipeline {span:?} in {text:?}",
                stage.span
            );
            assert!(
                text.is_char_boundary(stage.span.start) && text.is_char_boundary(stage.span.end)
            );
        }
    }
}

/// The transcript readers (shell history, Claude Code and Codex JSONL): never panic; every
/// command they collect is text of the input (or of a JSON string in it), and nothing is
/// collected from an input with no non-blank line.
pub fn transcript_reader(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut collected = verbd::policy_tools::sources::Collected::default();
    verbd::policy_tools::sources::read_text(text, "fuzz", &mut collected);
    if text.trim().is_empty() {
        assert!(collected.entries.is_empty(), "{:?}", collected.entries);
    }
    assert!(
        collected.entries.len() <= text.lines().count() * 64 + 1,
        "more entries than the input can hold"
    );
}

/// The tools the Claude Code hook must hear the daemon on before letting them through.
const HOOK_GUARDED_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"];

/// The Claude Code hook's JSON input: the hook fails closed. With no daemon to ask, the answer
/// is either the deny answer (exit 2, one line of deny JSON on stdout, its reason on stderr) or
/// no objection (exit 0, no output) — and the latter only for a `PreToolUse` call of a tool that
/// neither writes a file nor runs a command. A rewritten command quotes every word: what the
/// shell splits it into is exactly the `verbd call` words, whatever the verb and values hold.
pub fn hook_input(data: &[u8]) {
    use serde_json::Value;
    use verbd::adapters::claude_hook::{Daemon, decide, verb_call_command};
    let socket = Path::new("/nonexistent/verbd-fuzz/verbd.sock");
    let verbd = Path::new("/usr/bin/verbd");
    let daemon = Daemon { socket, verbd };
    let outcome = decide(data, daemon, std::time::Duration::from_secs(5));
    let input: Option<Value> = serde_json::from_slice(data).ok();
    match outcome.exit_code {
        2 => {
            let line = outcome
                .stdout
                .strip_suffix('\n')
                .expect("the deny JSON ends its line");
            assert!(!line.contains('\n'), "deny JSON spans lines");
            let body: Value = serde_json::from_str(line).expect("the deny answer is JSON");
            let specific = &body["hookSpecificOutput"];
            assert_eq!(specific["hookEventName"], "PreToolUse");
            assert_eq!(specific["permissionDecision"], "deny");
            let reason = specific["permissionDecisionReason"]
                .as_str()
                .expect("a reason");
            assert!(!reason.is_empty());
            assert_eq!(outcome.stderr, format!("{reason}\n"));
        }
        0 => {
            assert!(
                outcome.stdout.is_empty() && outcome.stderr.is_empty(),
                "no daemon, yet an answer: {outcome:?}"
            );
            let input = input.as_ref().expect("exit 0 only for JSON input");
            let tool = input["tool_name"]
                .as_str()
                .expect("exit 0 only with a tool");
            assert!(
                !HOOK_GUARDED_TOOLS.contains(&tool),
                "{tool} let through with no daemon to ask: {input}"
            );
            assert!(
                input.get("hook_event_name").is_none() || input["hook_event_name"] == "PreToolUse"
            );
        }
        other => panic!("exit code {other}: {outcome:?}"),
    }
    // The rewrite's quoting, with the input's tool name as the verb and its string fields as
    // the values.
    let Some(Value::Object(fields)) = input else {
        return;
    };
    let verb = fields
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("verb");
    let args: BTreeMap<String, String> = fields
        .get("tool_input")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    let call = verbd::protocol::VerbCall {
        verb: verb.to_owned(),
        args: args.clone(),
        client_side: None,
        needs_approval: false,
    };
    let line = verb_call_command(verbd, socket, &call);
    let mut expected = vec![
        verbd.display().to_string(),
        "call".to_owned(),
        "--socket".to_owned(),
        socket.display().to_string(),
        "--".to_owned(),
        verb.to_owned(),
    ];
    expected.extend(args.iter().map(|(k, v)| format!("{k}={v}")));
    assert_eq!(
        shell_words::split(&line).expect("the rewritten command splits"),
        expected,
        "the shell splits the rewritten command otherwise: {line:?}"
    );
}

/// The one verb the fake daemon lists for `mcp_session`.
const MCP_VERB: &str = "echo";

/// A daemon stand-in for `mcp_session`: records each request line, answers `list` with one verb
/// and everything else with an error (so no tool call can succeed).
async fn fake_daemon(
    listener: tokio::net::UnixListener,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use verbd::protocol::{Request, VerbInfo};
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let seen = seen.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = Vec::new();
            let _ = tokio::io::BufReader::new(read)
                .read_until(b'\n', &mut line)
                .await;
            if line.is_empty() {
                // Closed before sending anything: a request the session dropped unsent when its
                // input ended (a cancelled call or list poll), which the daemon never hears.
                return;
            }
            let answer = match decode_request(&line) {
                Ok(Request::List {}) => Response::Verbs {
                    verbs: vec![VerbInfo {
                        name: MCP_VERB.to_owned(),
                        description: "echo".to_owned(),
                        category: "read".to_owned(),
                        needs_approval: false,
                        params: Vec::new(),
                    }],
                },
                _ => Response::Error {
                    message: "the fuzz daemon runs nothing".to_owned(),
                },
            };
            seen.lock().unwrap().push(line);
            let _ = write.write_all(&answer.encode()).await;
        });
    }
}

/// The JSON-RPC requests of an input: each line's object, or each object of a line's array. A
/// line may begin with a UTF-8 byte order mark, which the transport ignores (RFC 8259 §8.1 lets
/// a parser do so; some Windows clients write one).
fn json_rpc_requests(data: &[u8]) -> Vec<serde_json::Value> {
    const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";
    let mut requests = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(serde_json::Value::Array(items)) => requests.extend(items),
            Ok(value) => requests.push(value),
            Err(_) => {}
        }
    }
    requests
}

/// `verbd mcp`'s JSON-RPC framing and dispatch (rmcp's transport, verbd's handlers), on a
/// session whose input is `data`, in front of a daemon stand-in that lists one verb and runs
/// nothing. The session ends when the input does (never hangs); everything written is one
/// JSON-RPC 2.0 message per line; every response answers a request the input made, no id more
/// often than the input used it; the daemon hears only well-formed requests, no more calls than
/// the input's `tools/call`s, each for the listed verb or a name the input sent; and since the
/// daemon ran nothing, no `tools/call` answer claims success.
pub fn mcp_session(data: &[u8]) {
    use serde_json::Value;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use verbd::protocol::Request;

    let dir = tempfile::Builder::new()
        .prefix("verbd-fuzz-mcp-")
        .tempdir()
        .unwrap();
    let socket = dir.path().join("verbd.sock");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let output = runtime.block_on(async {
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(fake_daemon(listener, seen.clone()));
        let (mut client_in, server_in) = tokio::io::duplex(64 * 1024);
        let (server_out, mut client_out) = tokio::io::duplex(64 * 1024);
        let input = data.to_vec();
        tokio::spawn(async move {
            let _ = client_in.write_all(&input).await;
            let _ = client_in.shutdown().await;
        });
        let collect = tokio::spawn(async move {
            let mut output = Vec::new();
            let _ = client_out.read_to_end(&mut output).await;
            output
        });
        let session = verbd::adapters::mcp::serve_on(socket.clone(), server_in, server_out);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), session).await;
        assert!(ended.is_ok(), "the session did not end with its input");
        collect.await.unwrap()
    });
    drop(runtime);

    let requests = json_rpc_requests(data);
    let mut ids: Vec<(Value, Option<String>, usize)> = Vec::new();
    for request in &requests {
        let (Some(id), Some(method)) = (request.get("id"), request.get("method")) else {
            continue;
        };
        let method = method.as_str().map(str::to_owned);
        match ids.iter_mut().find(|(seen, _, _)| seen == id) {
            Some(entry) => {
                entry.2 += 1;
                if entry.1 != method {
                    entry.1 = None;
                }
            }
            None => ids.push((id.clone(), method, 1)),
        }
    }
    let tool_calls: Vec<&Value> = requests
        .iter()
        .filter(|r| r["method"] == "tools/call")
        .collect();

    let text = String::from_utf8(output).expect("the session writes UTF-8");
    let mut answered: Vec<(Value, usize)> = Vec::new();
    for line in text.lines() {
        let message: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        if message.get("method").is_some() {
            continue; // the server's own notification or request
        }
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        if id.is_null() {
            assert!(message.get("error").is_some(), "a result for no id: {line}");
            continue;
        }
        let Some((_, method, sent)) = ids.iter().find(|(seen, _, _)| *seen == id) else {
            panic!("a response to an id the input never sent: {line}");
        };
        let count = match answered.iter_mut().find(|(seen, _)| *seen == id) {
            Some(entry) => {
                entry.1 += 1;
                entry.1
            }
            None => {
                answered.push((id.clone(), 1));
                1
            }
        };
        assert!(count <= *sent, "id answered more often than sent: {line}");
        if method.as_deref() == Some("tools/call")
            && let Some(result) = message.get("result")
        {
            assert_eq!(
                result["isError"], true,
                "a tool call succeeded with a daemon that runs nothing: {line}"
            );
        }
    }

    let heard = seen.lock().unwrap().clone();
    let mut calls = 0;
    for line in &heard {
        let request = decode_request(line).unwrap_or_else(|e| {
            panic!(
                "the daemon got a malformed request ({e}): {:?}",
                String::from_utf8_lossy(line)
            )
        });
        match request {
            Request::List {} => {}
            Request::Call { verb, .. } => {
                calls += 1;
                assert!(
                    verb == MCP_VERB || tool_calls.iter().any(|c| c["params"]["name"] == verb),
                    "a call of `{verb}`, a name no tools/call sent"
                );
            }
            Request::Wait { .. } | Request::Result { .. } => calls += 1,
            other => panic!("the MCP layer sent {other:?}"),
        }
    }
    assert!(
        calls <= tool_calls.len(),
        "{calls} daemon calls for {} tools/call requests",
        tool_calls.len()
    );
}
