//! `verbd mcp` against a real daemon: driven by the official MCP Python SDK in both protocol
//! eras (tests/mcp/driver.py), and by raw JSON-RPC for what a well-behaved client never sends.
//!
//! The SDK lives in a venv that `.ci/mcp-venv` installs (pinned in tests/mcp/requirements.txt);
//! `VERBD_MCP_PYTHON` may name another interpreter that has it. Without it the SDK tests skip
//! loudly, and under `CI=true` they fail.
use crate::common;
use common::policy::{Category, Param, ParamType, Policy, Stream, Verb};
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

const AGENT: u32 = 61501;
const SRE: u32 = 61502;
const OPS_AGENT: u32 = 61503;
const NO_ROLE: u32 = 61504;

/// The verbs the MCP tests list and call; a test adds its own with [`Policy::verb`].
fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .queue_timeout("500ms")
        .agents("agent", &[AGENT, HOSTILE])
        .agents("ops", &[OPS_AGENT])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .verb("echo", echo_for(&["agent"]))
        .verb(
            "logs.tail",
            Verb::command(
                Category::ReadOnly,
                "/bin/echo {unit} {lines} [ {level} ] {all}",
            )
            .description("Pretend to show a unit's journal")
            .roles(&["agent"])
            .param("unit", Param::of(ParamType::SystemdUnit))
            .param("lines", Param::int(1, 5000).default(200))
            .param("level", Param::one_of(&["info", "err"]).optional())
            .param("all", Param::flag("--all")),
        )
        .verb(
            "limited",
            Verb::command(Category::ReadOnly, "/bin/true")
                .description("Rate limited")
                .roles(&["agent"])
                .rate("1/h"),
        )
        .verb(
            "slow",
            Verb::command(Category::ReadOnly, "/bin/sleep 3")
                .description("Sleeps; one at a time")
                .roles(&["agent"])
                .max_concurrent(1),
        )
        .verb(
            "nap",
            Verb::command(Category::ReadOnly, "/bin/sleep {secs}")
                .description("Sleeps for a while")
                .roles(&["agent"])
                .timeout("20m")
                .param("secs", Param::int(1, 999)),
        )
        .verb(
            "failing",
            Verb::command(Category::ReadOnly, "/bin/cat /nonexistent-verbd-test")
                .description("Reads a file that is not there")
                .roles(&["agent"]),
        )
        .verb(
            "bump",
            Verb::command(Category::Mutating, "/bin/echo bumped {n}")
                .description("Pretend to change something")
                .roles(&["agent"])
                .param("n", Param::int(1, 9)),
        )
        .verb(
            "nuke",
            Verb::command(Category::Destructive, "/bin/echo deleted {name}")
                .description("Pretend to delete a pod")
                .roles(&["agent"])
                .dry_run("/bin/echo would delete {name}")
                .param("name", Param::of(ParamType::K8sName)),
        )
        .verb(
            "ops-only",
            Verb::command(Category::ReadOnly, "/bin/echo ops")
                .description("Only for the ops role")
                .roles(&["ops"]),
        )
}

/// `echo`, one word, for `roles`.
fn echo_for(roles: &[&str]) -> Verb {
    Verb::command(Category::ReadOnly, "/bin/echo {text}")
        .description("Echo one word")
        .roles(roles)
        .param(
            "text",
            Param::matching("[A-Za-z0-9._-]{1,64}")
                .max_length(64)
                .description("one word"),
        )
}

fn start() -> Daemon {
    let d = Daemon::start(&policy().render());
    d.open_socket();
    d
}

fn daemon_pid(d: &Daemon) -> u32 {
    d.child.as_ref().expect("daemon running").id()
}

// ---------------------------------------------------------------------------------------------
// The official Python SDK.

/// The interpreter with the MCP SDK, or `None` (skip loudly; under CI a failure).
fn python(test: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os("VERBD_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python")
        });
    let works = Command::new(&candidate)
        .args(["-c", "import mcp, mcp_types"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        return Some(candidate);
    }
    let why = format!(
        "{test}: the MCP Python SDK is not installed at {} (run .ci/mcp-venv, or set VERBD_MCP_PYTHON)",
        candidate.display()
    );
    common::skip::skip_or_fail(test, &why);
    None
}

/// Run the driver with `plan` and return its report.
fn drive(python: &PathBuf, d: &Daemon, uid: u32, mode: &str, steps: Value) -> Value {
    let plan = json!({
        "verbd": BIN,
        "socket": d.socket,
        "uid": uid,
        "mode": mode,
        "steps": steps,
    });
    let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/driver.py");
    let mut child = Command::new(python)
        .arg(driver)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "driver failed ({}):\n{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver report is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn text_of(step: &Value) -> String {
    step["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no result content: {step}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_error(step: &Value) -> bool {
    step["result"]["isError"]
        .as_bool()
        .unwrap_or_else(|| panic!("no isError: {step}"))
}

fn structured(step: &Value) -> &Value {
    &step["result"]["structuredContent"]
}

fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools}"))
}

/// The list, every result kind, approval, busy and list_changed, in one era.
fn end_to_end(mode: &str, era: &str) {
    let test = format!("official_client_{mode}");
    let Some(python) = python(&test) else {
        return;
    };
    if !require_root(&test) {
        return;
    }
    let d = start();
    let mut added = policy()
        .verb(
            "added",
            Verb::command(Category::ReadOnly, "/bin/true")
                .description("Added by a reload")
                .roles(&["agent"]),
        )
        .render();
    added = added.replace("@DIR@", d.dir.path().to_str().unwrap());
    let steps = json!([
        { "op": "list" },                                                       // 0
        { "op": "call", "tool": "echo", "args": { "text": "hello" } },          // 1
        { "op": "call", "tool": "echo", "args": { "text": "$(id)" } },          // 2
        { "op": "call", "tool": "echo", "args": {} },                           // 3
        { "op": "call", "tool": "limited" },                                    // 4
        { "op": "call", "tool": "limited" },                                    // 5
        { "op": "call", "tool": "ops-only" },                                   // 6
        { "op": "call", "tool": "bump", "args": { "n": 3 } },                   // 7
        { "op": "call", "tool": "bump", "args": { "n": 3 } },                   // 8
        { "op": "approve", "uid": SRE, "from": 7 },                             // 9
        { "op": "call_from", "tool": "verbd_wait", "from": 7 },                 // 10
        { "op": "concurrent", "after_ms": 700,                                  // 11
          "first": { "tool": "slow" }, "second": { "tool": "slow" } },
        { "op": "call", "tool": "logs_tail", "args": { "unit": "nginx.service", "all": true } }, // 12
        { "op": "call", "tool": "failing" },                                    // 13
        { "op": "reload", "policy": d.policy, "text": added,                   // 14
          "daemon_pid": daemon_pid(&d), "timeout_s": 20 },
        { "op": "list" },                                                       // 15
    ]);
    let report = drive(&python, &d, AGENT, mode, steps);
    eprintln!("{mode}: {report:#}");
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(report["protocol_version"], era, "{report}");
    assert_eq!(report["server_name"], "verbd");
    assert_eq!(report["tools_list_changed"], true);

    // tools/list: one tool per verb of the caller's roles (not ops-only), names valid for
    // `mcp__verbd__<name>`, flat schemas, all four annotations from the category.
    let tools = &steps[0]["tools"];
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bump",
            "echo",
            "failing",
            "limited",
            "logs_tail",
            "nap",
            "nuke",
            "slow",
            "verbd_wait",
            "verbd_result"
        ]
    );
    for t in tools.as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert!(format!("mcp__verbd__{name}").len() <= 64);
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name}");
        for combinator in ["anyOf", "oneOf", "allOf"] {
            assert!(schema.get(combinator).is_none(), "{name}: {combinator}");
        }
        let hints = &t["annotations"];
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(hints[hint].is_boolean(), "{name}: {hint} not set: {hints}");
        }
    }
    let mut echo = tool(tools, "echo").clone();
    let output_schema = echo
        .as_object_mut()
        .unwrap()
        .remove("outputSchema")
        .unwrap();
    assert_eq!(
        echo,
        json!({
            "name": "echo",
            "title": "echo",
            "description": "Echo one word [verbd `echo`: read-only verb; runs at once]",
            "inputSchema": {
                "type": "object",
                "properties": { "text": {
                    "type": "string",
                    "pattern": "^(?:[A-Za-z0-9._-]{1,64})$",
                    "maxLength": 64,
                    "description": "one word (string /[A-Za-z0-9._-]{1,64}/ (max 64 bytes))",
                } },
                "required": ["text"],
                "additionalProperties": false,
            },
            "annotations": {
                "readOnlyHint": true, "destructiveHint": false,
                "idempotentHint": true, "openWorldHint": false,
            },
        })
    );
    assert_eq!(output_schema["type"], "object");
    assert_eq!(output_schema["required"], json!(["status"]));
    assert_eq!(
        tool(tools, "logs_tail")["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "all": { "type": "boolean", "description": "bool (true adds --all)" },
                "level": { "type": "string", "enum": ["info", "err"], "description": "enum(info|err)" },
                "lines": {
                    "type": "integer", "minimum": 1, "maximum": 5000, "default": 200,
                    "description": "int 1..=5000",
                },
                "unit": {
                    "type": "string", "maxLength": 256,
                    "pattern": r"^[A-Za-z0-9:_@\\][A-Za-z0-9:_.@\\-]*$",
                    "description": "systemd-unit",
                },
            },
            "required": ["unit"],
            "additionalProperties": false,
        })
    );
    assert_eq!(tool(tools, "logs_tail")["title"], "logs.tail");
    assert_eq!(
        tool(tools, "bump")["annotations"],
        json!({ "readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false })
    );
    assert!(tool(tools, "bump").get("_meta").is_none());
    let nuke = tool(tools, "nuke");
    assert_eq!(
        nuke["annotations"],
        json!({ "readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false })
    );
    assert_eq!(
        nuke["_meta"],
        json!({ "anthropic/requiresUserInteraction": true })
    );
    assert_eq!(
        tool(tools, "verbd_wait")["inputSchema"],
        json!({
            "type": "object",
            "properties": {
                "id": { "type": "integer", "minimum": 1, "description": "The proposal id from CONFIRM_REQUIRED" },
                "timeout_s": {
                    "type": "integer", "minimum": 0, "maximum": 50, "default": 50,
                    "description": "Seconds to wait for the decision (at most 50)",
                },
            },
            "required": ["id"],
            "additionalProperties": false,
        })
    );
    assert_eq!(
        tool(tools, "verbd_wait")["annotations"]["readOnlyHint"],
        true
    );

    // ran: stdout as text, the run in structuredContent.
    assert!(!is_error(&steps[1]), "{}", steps[1]);
    assert_eq!(text_of(&steps[1]), "hello\n");
    let ran = structured(&steps[1]);
    assert_eq!(ran["status"], "ran");
    assert_eq!(ran["exit_code"], 0);
    assert_eq!(ran["signal"], Value::Null);
    assert_eq!(ran["timed_out"], false);
    assert_eq!(ran["stdout"], "hello\n");
    assert_eq!(ran["stdout_truncated"], false);
    assert_eq!(ran["stderr_truncated"], false);

    // invalid, clarification: isError with the daemon's exact message.
    assert!(is_error(&steps[2]));
    assert_eq!(
        text_of(&steps[2]),
        r#"parameter `text`: "$(id)" does not match the pattern /[A-Za-z0-9._-]{1,64}/"#
    );
    assert_eq!(structured(&steps[2])["rule"], "pattern");
    assert!(is_error(&steps[3]));
    assert_eq!(
        text_of(&steps[3]),
        "REQUIRES_CLARIFICATION: missing required parameters: text"
    );

    // denied (rate limit; a verb of another role): the reason and "do not try another way".
    assert!(!is_error(&steps[4]), "{}", steps[4]);
    for (step, reason) in [
        (&steps[5], "rate limit"),
        (
            &steps[6],
            "verb `ops-only` does not exist or is not available to your roles",
        ),
    ] {
        assert!(is_error(step), "{step}");
        let text = text_of(step);
        assert!(text.starts_with("DENIED: "), "{text}");
        assert!(text.contains(reason), "{text}");
        assert!(
            text.contains("do not try to achieve this another way"),
            "{text}"
        );
        assert_eq!(structured(step)["status"], "denied");
    }

    // needs approval: not an error, CONFIRM_REQUIRED with the id, and the same proposal again.
    assert!(!is_error(&steps[7]), "{}", steps[7]);
    let pending = structured(&steps[7]);
    let id = pending["id"].as_u64().unwrap();
    assert_eq!(pending["status"], "pending_approval");
    assert_eq!(pending["args_hash"].as_str().unwrap().len(), 64);
    assert!(pending["expires_at"].as_str().unwrap().ends_with('Z'));
    let text = text_of(&steps[7]);
    assert!(
        text.starts_with(&format!("CONFIRM_REQUIRED {id}: ")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Do not retry; a human must approve; call `verbd_wait` with {{\"id\": {id}}}."
        )),
        "{text}"
    );
    assert_eq!(
        structured(&steps[8])["id"],
        id,
        "a repeat makes no new proposal"
    );
    // a human approves; verbd_wait returns the result.
    assert_eq!(steps[9]["exit"], 0, "{}", steps[9]);
    assert!(!is_error(&steps[10]), "{}", steps[10]);
    assert_eq!(text_of(&steps[10]), "bumped 3\n");
    assert_eq!(structured(&steps[10])["proposal"], id);

    // busy: the second concurrent call of a max_concurrent = 1 verb.
    let busy = &steps[11];
    assert!(!is_error(&busy["first"]), "{busy}");
    assert!(is_error(&busy["second"]), "{busy}");
    assert_eq!(
        text_of(&busy["second"]),
        "BUSY: verb `slow` is already running its maximum of 1 (max_concurrent), and none freed within 500ms (daemon.queue_timeout); retry shortly. Nothing ran; retry later."
    );

    // defaults and bools travel as JSON and the daemon renders them.
    assert_eq!(text_of(&steps[12]), "nginx.service 200 --all\n");
    // a run that failed: isError, stderr and the exit code.
    assert!(is_error(&steps[13]));
    assert_eq!(
        text_of(&steps[13]),
        "stderr:\n/bin/cat: /nonexistent-verbd-test: No such file or directory\n\n[verbd: exit code 1]"
    );
    assert_eq!(structured(&steps[13])["exit_code"], 1);

    // a reload that adds a verb: notifications/tools/list_changed, then the new tool.
    assert_eq!(steps[14]["notified"], true, "{}", steps[14]);
    tool(&steps[15]["tools"], "added");
}

/// A verb that streams three ticks, half a second apart.
fn ticks() -> Verb {
    Verb::argv(
        Category::ReadOnly,
        &[
            "/bin/sh",
            "-c",
            "for i in 1 2 3; do echo tick $i; sleep 0.5; done",
        ],
    )
    .description("Streams three ticks, half a second apart")
    .roles(&["agent"])
    .allow_interpreter()
    .stream(Stream {
        max_duration: "30s".into(),
        max_lines: None,
    })
}

/// A streaming verb called with a progress token: each chunk arrives as
/// `notifications/progress` (the text as `message`, the count rising) while the verb runs, the
/// result is the usual one; without a token, one result and no progress.
fn streaming_progress(mode: &str) {
    let test = format!("streaming_progress_{mode}");
    let Some(python) = python(&test) else {
        return;
    };
    if !require_root(&test) {
        return;
    }
    let d = Daemon::start(&policy().verb("ticks", ticks()).render());
    d.open_socket();
    let steps = json!([
        { "op": "list" },
        { "op": "call_progress", "tool": "ticks" },
        { "op": "call", "tool": "ticks" },
    ]);
    let report = drive(&python, &d, AGENT, mode, steps);
    let steps = report["steps"].as_array().unwrap();
    let streamed = &steps[1];
    let progress = streamed["progress"].as_array().unwrap();
    let messages: Vec<&str> = progress
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.concat(), "tick 1\ntick 2\ntick 3\n", "{streamed}");
    let counts: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    let first_at = progress[0]["at_s"].as_f64().unwrap();
    let result_at = streamed["result_at_s"].as_f64().unwrap();
    assert!(
        first_at + 0.7 < result_at,
        "the first tick came {first_at}s in, the result {result_at}s: not as it came"
    );
    assert_eq!(text_of(streamed), "tick 1\ntick 2\ntick 3\n");
    assert!(!is_error(streamed));
    let once = &steps[2];
    assert_eq!(text_of(once), "tick 1\ntick 2\ntick 3\n");
}

#[test]
fn streaming_progress_legacy_era() {
    streaming_progress("legacy");
}

#[test]
fn streaming_progress_2026_era() {
    streaming_progress("auto");
}

#[test]
fn official_client_legacy_era() {
    end_to_end("legacy", "2025-11-25");
}

#[test]
fn official_client_2026_era() {
    end_to_end("auto", "2026-07-28");
}

#[test]
fn a_second_uid_sees_only_its_verbs_and_a_roleless_uid_none() {
    let Some(python) = python("a_second_uid_sees_only_its_verbs_and_a_roleless_uid_none") else {
        return;
    };
    if !require_root("a_second_uid_sees_only_its_verbs_and_a_roleless_uid_none") {
        return;
    }
    let d = start();
    let steps = json!([
        { "op": "list" },
        { "op": "call", "tool": "ops-only" },
        { "op": "call", "tool": "echo", "args": { "text": "hi" } },
    ]);
    let ops = drive(&python, &d, OPS_AGENT, "legacy", steps.clone());
    let ops_steps = ops["steps"].as_array().unwrap();
    let names: Vec<&Value> = ops_steps[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("ops-only")]);
    assert_eq!(text_of(&ops_steps[1]), "ops\n");
    assert!(
        text_of(&ops_steps[2]).contains("verb `echo` does not exist or is not available"),
        "{}",
        ops_steps[2]
    );

    let nobody = drive(&python, &d, NO_ROLE, "auto", steps);
    let nobody_steps = nobody["steps"].as_array().unwrap();
    let error = &nobody_steps[0]["error"];
    assert_eq!(error["code"], -32603, "{nobody}");
    assert_eq!(error["data"], json!({ "verbd": "denied" }));
    assert_eq!(
        error["message"],
        format!(
            "verbd denied the request: uid {NO_ROLE} (no user name) matches no role in the verbd policy; ask the operator to add it to a [roles.*] table"
        )
    );
    assert!(is_error(&nobody_steps[2]));
    assert!(
        text_of(&nobody_steps[2]).contains("matches no role"),
        "{}",
        nobody_steps[2]
    );
}

// ---------------------------------------------------------------------------------------------
// Raw JSON-RPC: what a well-behaved client never sends.

/// `verbd mcp` as uid `uid`, fed and read line by line; every stdout line must be JSON-RPC.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Raw {
    fn start(d: &Daemon, uid: u32) -> Raw {
        let mut child = Command::new(BIN)
            .args(["mcp", "--socket"])
            .arg(&d.socket)
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                let text = String::from_utf8(line).expect("stdout carries UTF-8 JSON only");
                if tx.send(text).is_err() {
                    break;
                }
            }
        });
        Raw {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(bytes).unwrap();
        self.stdin.as_mut().unwrap().flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The next stdout message (asserted to be JSON-RPC 2.0), or `None` after `wait`.
    fn next(&self, wait: Duration) -> Option<Value> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => {
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line:?}"));
                assert_eq!(message["jsonrpc"], "2.0", "{line}");
                Some(message)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Send request `id` and return its response (notifications in between are skipped).
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(message) = self.next(Duration::from_secs(60)) {
                if message["id"] == id {
                    return message;
                }
                continue;
            }
            break;
        }
        panic!("no answer to {method} (id {id}) within 60 s");
    }

    fn initialize(&mut self) {
        let answer = self.request(
            0,
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "root", "version": "0" },
            }),
        );
        assert_eq!(
            answer["result"]["protocolVersion"], "2025-06-18",
            "{answer}"
        );
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({ "name": tool, "arguments": args }))
    }

    /// Close stdin; the process must exit 0 promptly, with nothing more on stdout.
    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "verbd mcp exited with {status}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "verbd mcp did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(extra) = self.next(Duration::from_millis(200)) {
            panic!("unexpected message after close: {extra}");
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn result_text(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {answer}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn garbage_on_stdin_gets_json_rpc_errors_and_nothing_else() {
    if !require_root("garbage_on_stdin_gets_json_rpc_errors_and_nothing_else") {
        return;
    }
    let d = start();
    let mut raw = Raw::start(&d, AGENT);
    raw.initialize();
    // Unparsable lines are dropped without an answer (no error storm between confused peers);
    // the session goes on.
    raw.send_raw(b"not json at all\n\x00\xff\xfe binary\n{\"unterminated\": \n\n");
    // Valid JSON that is not a JSON-RPC message: -32600.
    for junk in [
        "{\"foo\":1}",
        "[]",
        "42",
        "{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1}}",
    ] {
        raw.send_raw(format!("{junk}\n").as_bytes());
        let answer = raw.next(Duration::from_secs(10)).expect("an answer");
        assert_eq!(answer["error"]["code"], -32600, "{junk}: {answer}");
    }
    // A line over the 8 MiB limit is dropped; the session goes on.
    let mut huge =
        b"{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"tools/list\",\"params\":{\"x\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9 * 1024 * 1024));
    huge.extend(b"\"}}\n");
    raw.send_raw(&huge);
    let unknown = raw.request(1, "no/such/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    // A tools/call whose params do not parse is not routed (rmcp answers "method not found").
    let bad_params = raw.request(2, "tools/call", json!({ "arguments": 5 }));
    assert_eq!(bad_params["error"]["code"], -32601, "{bad_params}");
    // A well-formed call still works after all that.
    let ok = raw.call(3, "echo", json!({ "text": "still-here" }));
    assert_eq!(result_text(&ok), "still-here\n", "{ok}");
    raw.finish();

    // A notification before any request breaks the lifecycle: the session ends at once (exit
    // 70, the reason on stderr), with nothing on stdout and nothing left waiting.
    let mut early = Raw::start(&d, AGENT);
    early.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = early.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "verbd mcp hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(70));
    assert!(early.next(Duration::from_millis(200)).is_none());
    let mut stderr = String::new();
    std::io::Read::read_to_string(early.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr
            .starts_with("verbd mcp: the MCP session could not start: expect initialized request"),
        "{stderr}"
    );
}

/// A client that cancels a tools/call (the user pressed Esc) gets the run cancelled, as when a
/// `verbd call` is interrupted: the connection closes, the daemon kills the process group and
/// journals the cancellation.
#[test]
fn a_cancelled_tool_call_cancels_the_run() {
    if !require_root("a_cancelled_tool_call_cancels_the_run") {
        return;
    }
    let d = start();
    let mut raw = Raw::start(&d, AGENT);
    raw.initialize();
    raw.send(json!({
        "jsonrpc": "2.0", "id": 30, "method": "tools/call",
        "params": { "name": "nap", "arguments": { "secs": 517 } },
    }));
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_matching("sleep 517").is_empty() {
        assert!(Instant::now() < deadline, "the verb never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    raw.send(json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 30, "reason": "user pressed Esc" },
    }));
    while !processes_matching("sleep 517").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the run outlived its cancelled call"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let cancelled = loop {
        let found: Vec<Value> = d
            .journal_events()
            .into_iter()
            .filter(|e| e["kind"] == "cancelled")
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(cancelled.len(), 1, "{}", d.journal());
    assert_eq!(cancelled[0]["cause"], "client_hung_up");
    // The session goes on.
    let ok = raw.call(31, "echo", json!({ "text": "after" }));
    assert_eq!(result_text(&ok), "after\n");
    raw.finish();
}

#[test]
fn a_closed_daemon_and_a_restart_mid_session_give_json_rpc_errors_then_recover() {
    if !require_root("a_closed_daemon_and_a_restart_mid_session_give_json_rpc_errors_then_recover")
    {
        return;
    }
    let mut d = start();
    let mut raw = Raw::start(&d, AGENT);
    raw.initialize();
    assert!(raw.request(1, "tools/list", json!({}))["result"]["tools"].is_array());
    d.stop();
    let started = Instant::now();
    let list = raw.request(2, "tools/list", json!({}));
    let call = raw.call(3, "echo", json!({ "text": "x" }));
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    for answer in [&list, &call] {
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert_eq!(answer["error"]["data"], json!({ "verbd": "unavailable" }));
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "cannot connect to verbd at {}",
                d.socket.display()
            )),
            "{message}"
        );
    }
    assert!(
        call["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("nothing was done through verbd")
    );
    d.respawn();
    d.open_socket();
    let again = raw.call(4, "echo", json!({ "text": "back" }));
    assert_eq!(result_text(&again), "back\n", "{again}");
    raw.finish();
}

/// The MCP layer adds no way around the daemon: everything a hostile agent can put into MCP is
/// either a verb parameter the daemon validates or ignored, and every answer is the daemon's.
#[test]
fn the_mcp_layer_adds_no_way_around_the_daemon() {
    if !require_root("the_mcp_layer_adds_no_way_around_the_daemon") {
        return;
    }
    let d = start();
    let mut raw = Raw::start(&d, AGENT);
    raw.initialize();
    raw.request(1, "tools/list", json!({}));

    // What the schema refuses, sent anyway: the daemon refuses it, with its message.
    let injected = raw.call(2, "echo", json!({ "text": "$(id)" }));
    assert_eq!(injected["result"]["isError"], true);
    assert!(
        result_text(&injected).contains("does not match the pattern"),
        "{injected}"
    );
    let float = raw.call(3, "bump", json!({ "n": 3.5 }));
    assert_eq!(
        result_text(&float),
        "parameter `n`: must be a string, an integer or a bool"
    );
    let out_of_range = raw.call(4, "bump", json!({ "n": "10" }));
    assert!(
        result_text(&out_of_range).contains("outside the allowed range 1..=9"),
        "{out_of_range}"
    );

    // Identity claims: as arguments they are unknown parameters; in _meta and clientInfo
    // ("root", above) they are never sent. The journal shows the kernel's uid.
    let claim = raw.call(5, "echo", json!({ "text": "hi", "uid": 0 }));
    assert_eq!(
        result_text(&claim),
        "unknown parameter `uid` (this verb takes: text)"
    );
    let meta = raw.request(
        6,
        "tools/call",
        json!({
            "name": "echo",
            "arguments": { "text": "meta" },
            "_meta": { "uid": 0, "user": "root", "io.modelcontextprotocol/clientInfo": { "name": "root" } },
        }),
    );
    assert_eq!(result_text(&meta), "meta\n");
    let record = d
        .journal_events()
        .into_iter()
        .rev()
        .find(|e| e.to_string().contains("\"meta\""))
        .expect("the call is journaled");
    assert!(
        record.to_string().contains(&format!("\"uid\":{AGENT}")),
        "{record}"
    );

    // A verb of another role, by its name: the daemon refuses it and journals the attempt.
    let other = raw.call(7, "ops-only", json!({}));
    assert!(
        result_text(&other).starts_with(
            "DENIED: verb `ops-only` does not exist or is not available to your roles"
        ),
        "{other}"
    );
    assert!(d.journal().contains("ops-only"));

    // Another uid's proposal: verbd_wait and verbd_result see nothing.
    let mut ops = Raw::start(&d, OPS_AGENT);
    ops.initialize();
    let pending = raw.call(8, "bump", json!({ "n": 2 }));
    let id = pending["result"]["structuredContent"]["id"]
        .as_u64()
        .unwrap();
    for (tool, args) in [
        ("verbd_wait", json!({ "id": id, "timeout_s": 0 })),
        ("verbd_result", json!({ "id": id })),
    ] {
        let peek = ops.call(1, tool, args);
        assert_eq!(
            result_text(&peek).lines().next().unwrap(),
            format!("DENIED: no proposal {id} visible to you"),
            "{peek}"
        );
    }
    let bad_wait = raw.call(9, "verbd_wait", json!({ "id": id, "timeout_s": "forever" }));
    assert_eq!(
        result_text(&bad_wait),
        "parameter `timeout_s`: \"forever\" is not an integer from 0 to 50"
    );
    let own = raw.call(10, "verbd_result", json!({ "id": id }));
    assert_eq!(
        own["result"]["structuredContent"]["status"],
        "pending_approval"
    );

    // No decision is cached: a verb removed by a reload is refused at once, even though the
    // client still has the old list.
    let without_echo = policy().verb("echo", echo_for(&["ops"])).render();
    assert_ne!(without_echo, policy().render());
    std::fs::write(&d.policy, without_echo).unwrap();
    let reload = d.cli_as(SRE, &["reload"]);
    assert!(reload.status.success(), "{reload:?}");
    let after = raw.call(11, "echo", json!({ "text": "cached" }));
    assert!(
        result_text(&after)
            .starts_with("DENIED: verb `echo` does not exist or is not available to your roles"),
        "{after}"
    );
    ops.finish();
    raw.finish();
}

#[test]
fn print_config_gives_each_client_its_snippet() {
    for (client, needle) in [
        ("claude", "\"type\": \"stdio\""),
        ("cursor", "\"mcpServers\""),
        ("gemini", "\"timeout\": 60000"),
        ("codex", "[mcp_servers.verbd]"),
    ] {
        let out = Command::new(BIN)
            .args([
                "mcp",
                "--print-config",
                client,
                "--socket",
                "/run/verbd/verbd.sock",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{client}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(needle), "{client}: {text}");
        assert!(
            text.contains(BIN),
            "{client}: the absolute binary path: {text}"
        );
        assert!(text.contains("/run/verbd/verbd.sock"), "{client}: {text}");
    }
}

/// An agent runtime that is hostile on `verbd mcp`'s stdin (uid 63010 of the agent role).
const HOSTILE: u32 = 63010;

/// The largest amount of memory `verbd mcp` may have used at its peak (`VmHWM`), after a
/// 100 MB line: its line limit (8 MiB) twice, and the runtime around it.
const MCP_PEAK_BYTES: u64 = 64 * 1024 * 1024;

/// A memory figure of /proc/PID/status (`VmRSS:` now, `VmHWM:` the peak), in bytes.
fn memory(child: &Child, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// What a hostile client can do on stdin: frames split across writes with pauses, nesting
/// deeper than any parser's stack, invalid UTF-8 inside a string, and a 100 MB line with no
/// newline for a long time. `verbd mcp` answers every framed request it can read, keeps its
/// memory bounded, and tells the client (a JSON-RPC error without an id) when it dropped an over-long
/// line instead of leaving it waiting for an answer that never comes.
#[test]
fn a_hostile_stdin_is_bounded_and_answered() {
    if !require_root("a_hostile_stdin_is_bounded_and_answered") {
        return;
    }
    let d = start();
    let mut raw = Raw::start(&d, HOSTILE);
    raw.initialize();
    // One request in three pieces, 300 ms apart.
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "pieces" } } })
    .to_string();
    let (a, rest) = request.split_at(10);
    let (b, c) = rest.split_at(rest.len() / 2);
    for piece in [a, b, c] {
        raw.send_raw(piece.as_bytes());
        std::thread::sleep(Duration::from_millis(300));
    }
    raw.send_raw(b"\n");
    let answer = raw
        .next(Duration::from_secs(30))
        .expect("the split request's answer");
    assert_eq!(result_text(&answer), "pieces\n", "{answer}");
    // Nesting a million deep, as an argument and as the whole message: no stack overflow.
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":{}{}}}}}}}\n{}{}\n",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000),
        "[".repeat(1_000_000),
        "]".repeat(1_000_000),
    );
    raw.send_raw(deep.as_bytes());
    // Invalid UTF-8 inside a string.
    raw.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"\xff\xfe\"}}}\n");
    let still = raw.call(4, "echo", json!({ "text": "alive" }));
    assert_eq!(result_text(&still), "alive\n", "{still}");
    // A 100 MB line, written in pieces; the newline comes only at the end.
    let mut stdin = raw.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        stdin
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"x\":\"",
            )
            .unwrap();
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..100 {
            stdin.write_all(&chunk).unwrap();
        }
        stdin.write_all(b"\"}}\n").unwrap();
        stdin
    });
    let dropped = raw.next(Duration::from_secs(60));
    raw.stdin = Some(writer.join().unwrap());
    let peak = memory(&raw.child, "VmHWM:");
    println!(
        "after a 100 MB line: answer {dropped:?}, peak memory of verbd mcp {} MiB",
        peak / 1024 / 1024
    );
    assert!(
        peak < MCP_PEAK_BYTES,
        "verbd mcp peaked at {peak} bytes on a 100 MB line"
    );
    let dropped = dropped.expect("a JSON-RPC error for the over-long line");
    assert_eq!(dropped["id"], Value::Null, "{dropped}");
    assert_eq!(dropped["error"]["code"], -32600, "{dropped}");
    let after = raw.call(6, "echo", json!({ "text": "after" }));
    assert_eq!(result_text(&after), "after\n", "{after}");
    raw.finish();
}

/// The most `verbd mcp` may hold at its peak (`VmHWM`) for a client that sent 2000 calls of
/// about 30 KiB of answer each (60 MB in all) and read none: the unread backlog
/// (`OUTPUT_BACKLOG_BYTES`), the answers of the requests in flight (`MAX_IN_FLIGHT`), the pipes,
/// and the runtime around them.
const MCP_UNREAD_PEAK_BYTES: u64 = 40 * 1024 * 1024;

/// How many calls the client that never reads stdout sends.
const UNREAD_CALLS: u64 = 2000;

/// A client that writes tool calls (in 1000-byte pieces, frames split anywhere) and never reads
/// stdout. `verbd mcp` stops reading stdin once the unread answers pass its backlog limit (the
/// client's writes block), so its memory stays bounded; the daemon never waits on it — it holds
/// no connection of the blocked client and serves another agent at once. Then the client reads,
/// slowly at first: every call is answered, exactly once, with its own output, and the client's
/// remaining writes go through.
#[test]
fn a_client_that_never_reads_stdout_is_paused_and_loses_nothing() {
    if !require_root("a_client_that_never_reads_stdout_is_paused_and_loses_nothing") {
        return;
    }
    // Room at the daemon for every call `verbd mcp` has in flight, and time to queue for a run,
    // so each gets its own output (as configured for the other tests, some would be `busy`).
    let d = Daemon::start(
        &policy()
            .verb(
                "count",
                Verb::command(Category::ReadOnly, "/usr/bin/seq {n}")
                    .description("Count up to n")
                    .roles(&["agent"])
                    .param("n", Param::int(1, 99999)),
            )
            .max_connections_per_uid(128)
            .queue_timeout("60s")
            .render(),
    );
    d.open_socket();
    let mut child = Command::new(BIN)
        .args(["mcp", "--socket"])
        .arg(&d.socket)
        .uid(HOSTILE)
        .gid(HOSTILE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stream = String::new();
    for message in [
        json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "hostile", "version": "0" } } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    ] {
        stream.push_str(&format!("{message}\n"));
    }
    // Call `id` counts to 5000 + id: about 30 KiB of answer, ending in its own number.
    for id in 1..=UNREAD_CALLS {
        let call = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "count", "arguments": { "n": 5000 + id } } });
        stream.push_str(&format!("{call}\n"));
    }
    let total = stream.len();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            for piece in stream.as_bytes().chunks(1000) {
                stdin.write_all(piece).unwrap();
                written.fetch_add(piece.len(), std::sync::atomic::Ordering::SeqCst);
            }
            stdin
        })
    };
    // Wait until the writes stop going through with the daemon idle: `verbd mcp` is paused on
    // its unread answers, not busy with calls (or all went through: the bound did not hold).
    let load = || written.load(std::sync::atomic::Ordering::SeqCst);
    let daemon_idle = || {
        let status = d.cli_as(SRE, &["status", "--json"]);
        serde_json::from_slice::<Value>(&status.stdout)
            .is_ok_and(|s| s["metrics"]["connections_in_flight"] == 1)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (load(), Instant::now());
    while load() < total && (last.1.elapsed() < Duration::from_secs(3) || !daemon_idle()) {
        assert!(
            Instant::now() < deadline,
            "the writes neither ended nor stopped"
        );
        std::thread::sleep(Duration::from_millis(100));
        if load() != last.0 {
            last = (load(), Instant::now());
        }
    }
    let stopped_at = load();
    let (resident, peak) = (memory(&child, "VmRSS:"), memory(&child, "VmHWM:"));
    // The daemon serves another agent at once, and holds no connection of the blocked client.
    let started = Instant::now();
    let other = d.cli_as(AGENT, &["call", "echo", "text=other"]);
    assert_eq!(
        String::from_utf8_lossy(&other.stdout),
        "other\n",
        "{other:?}"
    );
    let took = started.elapsed();
    let status = d.cli_as(SRE, &["status", "--json"]);
    let status: Value =
        serde_json::from_slice(&status.stdout).unwrap_or_else(|e| panic!("{e}: {status:?}"));
    println!(
        "stdout never read: the client's writes stopped at {stopped_at} of {total} bytes; verbd \
         mcp memory {} MiB now, {} MiB peak; another agent's call took {took:?}; daemon \
         connections in flight {}",
        resident / 1024 / 1024,
        peak / 1024 / 1024,
        status["metrics"]["connections_in_flight"],
    );
    assert!(
        peak < MCP_UNREAD_PEAK_BYTES,
        "verbd mcp peaked at {} MiB holding answers nobody read",
        peak / 1024 / 1024
    );
    assert!(
        stopped_at < total,
        "verbd mcp read all of stdin while nobody read stdout"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(status["metrics"]["connections_in_flight"], 1, "{status}");

    // The client reads now, the first 200 lines one every 5 ms: everything arrives, in whole
    // lines, each call answered once with its own output.
    let mut lines = BufReader::new(stdout).lines();
    let mut answered = std::collections::BTreeMap::new();
    let mut read = 0;
    while answered.len() < UNREAD_CALLS as usize + 1 {
        let line = lines
            .next()
            .expect("stdout ended before every call was answered")
            .unwrap();
        read += 1;
        if read <= 200 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if message.get("method").is_some() {
            continue;
        }
        let id = message["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("{message}"));
        if id > 0 {
            let text = result_text(&message);
            assert!(
                text.starts_with("1\n2\n") && text.ends_with(&format!("\n{}\n", 5000 + id)),
                "call {id} answered with {}",
                &text[text.len().saturating_sub(40)..]
            );
        }
        assert!(answered.insert(id, ()).is_none(), "{id} answered twice");
    }
    let stdin = writer.join().unwrap();
    assert_eq!(load(), total);
    drop(stdin);
    let exited = child.wait().unwrap();
    assert!(exited.success(), "{exited}");
    assert!(
        lines.next().is_none(),
        "more on stdout after every call was answered"
    );
}
