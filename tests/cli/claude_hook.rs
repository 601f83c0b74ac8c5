//! The Claude Code PreToolUse hook against a real Unix socket: a stand-in daemon in a test
//! thread answers `check` requests the way verbd does (the file verbs' `check_write` under one
//! root). Real PreToolUse inputs from tests/fixtures/claude go through `decide`; every failure
//! mode must produce the deny answer and exit 2.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use verbd::adapters::claude_hook::{self, HookOutcome};
use verbd::files::check_write;
use verbd::protected::ProtectedNames;
use verbd::protocol::{self, CommandDecision, Request, Response};

const DEADLINE: Duration = Duration::from_secs(5);

/// The daemon at `socket`; a rewritten command would run the real verbd binary.
fn at(socket: &Path) -> claude_hook::Daemon<'_> {
    claude_hook::Daemon {
        socket,
        verbd: Path::new(env!("CARGO_BIN_EXE_verbd")),
    }
}

struct World {
    _dir: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    outside: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    for sub in ["notes", "docs", "repo/.git/hooks", ".claude"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    World {
        _dir: dir,
        base,
        root,
        outside,
    }
}

/// A listener that answers each request with `answer(request)`, recording the requests.
fn serve(
    socket: &Path,
    answer: impl Fn(&Request) -> Option<Response> + Send + 'static,
) -> Arc<Mutex<Vec<Request>>> {
    let listener = UnixListener::bind(socket).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            let mut line = Vec::new();
            BufReader::new(&stream)
                .read_until(b'\n', &mut line)
                .unwrap();
            let request = protocol::decode_request(&line).unwrap();
            let response = answer(&request);
            record.lock().unwrap().push(request);
            if let Some(response) = response {
                (&stream).write_all(&response.encode()).unwrap();
            }
        }
    });
    seen
}

/// The stand-in for the daemon's `check` op: writes allowed beneath `root`, protected names
/// refused, with the file verbs' own reasons.
fn stand_in_daemon(socket: &Path, root: &Path) -> Arc<Mutex<Vec<Request>>> {
    let roots = vec![root.to_path_buf()];
    let protected = ProtectedNames::builtin();
    serve(socket, move |request| {
        Some(match request {
            Request::Check { path, .. } => match check_write(&roots, &protected, Path::new(path)) {
                Ok(()) => Response::Check {
                    allowed: true,
                    reason: "beneath an allowed root".into(),
                },
                Err(refusal) => Response::Check {
                    allowed: false,
                    reason: refusal.to_string(),
                },
            },
            // The agent's own work (the real daemon's answer to `ls -la`).
            Request::Command { .. } => Response::Command {
                decision: CommandDecision::Pass { reason: None },
            },
            _ => Response::Error {
                message: "only check and command are served here".into(),
            },
        })
    })
}

fn fixture(world: &World, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("@ROOT@", world.root.to_str().unwrap())
        .replace("@OUTSIDE@", world.outside.to_str().unwrap())
        .into_bytes()
}

fn assert_no_objection(outcome: &HookOutcome, context: &str) {
    assert_eq!(outcome.exit_code, 0, "{context}: {outcome:?}");
    assert!(outcome.stdout.is_empty(), "{context}: {outcome:?}");
}

/// Exit 2, exactly the PreToolUse deny JSON on stdout, the same reason on stderr.
fn assert_deny(outcome: &HookOutcome, fragment: &str, context: &str) {
    assert_eq!(outcome.exit_code, 2, "{context}: {outcome:?}");
    let body: Value = serde_json::from_str(&outcome.stdout)
        .unwrap_or_else(|e| panic!("{context}: stdout is not JSON ({e}): {:?}", outcome.stdout));
    let specific = body["hookSpecificOutput"].as_object().unwrap();
    assert_eq!(body.as_object().unwrap().len(), 1, "{context}: {body}");
    assert_eq!(specific.len(), 3, "{context}: {body}");
    assert_eq!(specific["hookEventName"], "PreToolUse");
    assert_eq!(specific["permissionDecision"], "deny");
    let reason = specific["permissionDecisionReason"].as_str().unwrap();
    assert!(
        reason.contains(fragment),
        "{context}: reason {reason:?} should mention {fragment:?}"
    );
    assert_eq!(outcome.stderr, format!("{reason}\n"), "{context}");
}

#[test]
fn fixtures_are_decided_as_the_policy_says() {
    let world = world();
    let socket = world.base.join("verbd.sock");
    let seen = stand_in_daemon(&socket, &world.root);
    let root = world.root.display().to_string();
    let outside = world.outside.display().to_string();

    // (fixture, None = no objection | Some(fragment of the deny reason), path sent to verbd)
    let cases: &[(&str, Option<&str>, Option<String>)] = &[
        (
            "write_allowed.json",
            None,
            Some(format!("{root}/notes/incident-2026-11-30.md")),
        ),
        (
            "edit_allowed.json",
            None,
            Some(format!("{root}/notes/todo.md")),
        ),
        (
            "multiedit_allowed.json",
            None,
            Some(format!("{root}/notes/runbook.md")),
        ),
        (
            "notebookedit_allowed_relative.json",
            None,
            Some(format!("{root}/notes/analysis.ipynb")),
        ),
        ("bash_no_path.json", None, None),
        ("read_outside_root.json", None, None),
        (
            "write_denied_outside_root.json",
            Some("outside the allowed roots"),
            Some(format!("{outside}/report.md")),
        ),
        (
            "write_denied_memory_file.json",
            Some("protected name `claude.md`"),
            Some(format!("{root}/docs/CLAUDE.md")),
        ),
        (
            "write_denied_symlink_escape.json",
            Some("outside the allowed roots"),
            Some(format!("{outside}/authorized_keys")),
        ),
        (
            "edit_denied_git_hook.json",
            Some("protected name `.git/hooks`"),
            Some(format!("{root}/repo/.git/hooks/pre-commit")),
        ),
        (
            "multiedit_denied_settings.json",
            Some("protected name `.claude`"),
            Some(format!("{root}/.claude/settings.json")),
        ),
        (
            "notebookedit_denied_outside_root.json",
            Some("outside the allowed roots"),
            Some(format!("{outside}/analysis.ipynb")),
        ),
        (
            "unknown_tool_with_path.json",
            Some("not one verbd knows"),
            None,
        ),
    ];

    let mut on_disk: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    on_disk.sort();
    let mut covered: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    covered.sort();
    assert_eq!(on_disk, covered, "every fixture must have an expectation");

    for (name, expected_denial, sent_path) in cases {
        seen.lock().unwrap().clear();
        let outcome = claude_hook::decide(&fixture(&world, name), at(&socket), DEADLINE);
        match expected_denial {
            None => assert_no_objection(&outcome, name),
            Some(fragment) => assert_deny(&outcome, fragment, name),
        }
        let mut requests = seen.lock().unwrap().clone();
        if *name == "bash_no_path.json" {
            // A Bash call asks what its command stands for, with the session's directory.
            assert_eq!(
                requests.remove(0),
                Request::Command {
                    command: "ls -la".into(),
                    cwd: Some(root.clone()),
                    tool: Some("claude-code Bash".into()),
                },
                "{name}"
            );
        }
        match sent_path {
            None => assert!(requests.is_empty(), "{name}: no check expected"),
            Some(path) => {
                let tool =
                    serde_json::from_slice::<Value>(&fixture(&world, name)).unwrap()["tool_name"]
                        .as_str()
                        .unwrap()
                        .to_string();
                assert_eq!(
                    requests,
                    [Request::Check {
                        path: path.clone(),
                        tool: Some(tool)
                    }],
                    "{name}"
                );
            }
        }
    }
    assert!(
        std::fs::read_dir(&world.outside).unwrap().next().is_none(),
        "the hook itself never writes"
    );
}

#[test]
fn unusable_input_is_denied() {
    let world = world();
    let socket = world.base.join("verbd.sock");
    stand_in_daemon(&socket, &world.root);
    let big = vec![b' '; claude_hook::MAX_HOOK_INPUT_BYTES + 1];
    let write_without_path =
        br#"{"hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{"content":"x"}}"#;
    let relative_without_cwd = br#"{"hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{"file_path":"notes/x","content":"x"}}"#;
    let dotdot_past_missing = format!(
        r#"{{"hook_event_name":"PreToolUse","tool_name":"Write","cwd":"{}","tool_input":{{"file_path":"missing/../../outside/x","content":"x"}}}}"#,
        world.root.display()
    );
    let cases: &[(&str, &[u8], &str)] = &[
        ("malformed JSON", b"{\"tool_name\": \"Write\", ", "not valid JSON"),
        ("empty stdin", b"", "no input"),
        ("whitespace stdin", b" \n", "no input"),
        ("oversized stdin", &big, "larger than"),
        ("not an object", b"[1,2]", "not a PreToolUse"),
        ("no tool_name", br#"{"tool_input":{}}"#, "no tool_name"),
        ("write without path", write_without_path, "no `file_path`"),
        ("relative without cwd", relative_without_cwd, "no absolute `cwd`"),
        (
            "dotdot past a missing dir",
            dotdot_past_missing.as_bytes(),
            "does not exist",
        ),
        (
            "another event",
            br#"{"hook_event_name":"PostToolUse","tool_name":"Write","tool_input":{"file_path":"/x"}}"#,
            "not a PreToolUse",
        ),
    ];
    for (context, input, fragment) in cases {
        assert_deny(
            &claude_hook::decide(input, at(&socket), DEADLINE),
            fragment,
            context,
        );
    }
}

#[test]
fn a_stopped_daemon_blocks_edits() {
    let world = world();
    let input = fixture(&world, "write_allowed.json");
    let outcome = claude_hook::decide(&input, at(&world.base.join("no-such.sock")), DEADLINE);
    assert_deny(&outcome, "verbd is not running", "socket missing");

    // A socket file left behind by a daemon that exited: connection refused.
    let stale = world.base.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let outcome = claude_hook::decide(&input, at(&stale), DEADLINE);
    assert_deny(&outcome, "verbd is not running", "stale socket");
}

#[test]
fn a_hanging_daemon_is_cut_off_at_the_deadline() {
    let world = world();
    let socket = world.base.join("hang.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let held: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
    let keep = held.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            keep.lock().unwrap().push(stream.unwrap());
        }
    });
    let started = Instant::now();
    let outcome = claude_hook::decide(
        &fixture(&world, "write_allowed.json"),
        at(&socket),
        Duration::from_millis(300),
    );
    let elapsed = started.elapsed();
    assert_deny(&outcome, "did not answer in time", "hanging daemon");
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(2),
        "took {elapsed:?}"
    );
    assert_eq!(held.lock().unwrap().len(), 1, "the hook did connect");
}

#[test]
fn daemon_errors_and_odd_answers_block_edits() {
    let world = world();
    let input = fixture(&world, "write_allowed.json");
    let cases: Vec<(&str, Option<Response>, &str)> = vec![
        (
            "error",
            Some(Response::Error {
                message: "journal unavailable".into(),
            }),
            "journal unavailable",
        ),
        (
            "denied",
            Some(Response::Denied {
                reason: "uid 1000 has no role".into(),
            }),
            "uid 1000 has no role",
        ),
        (
            "busy",
            Some(Response::Busy {
                message: "too many calls".into(),
            }),
            "too many calls",
        ),
        (
            "unexpected",
            Some(Response::Verbs { verbs: vec![] }),
            "does not understand",
        ),
        ("no answer", None, "verbd is not running or not reachable"),
    ];
    for (i, (context, answer, fragment)) in cases.into_iter().enumerate() {
        let socket = world.base.join(format!("odd-{i}.sock"));
        serve(&socket, move |_| answer.clone());
        assert_deny(
            &claude_hook::decide(&input, at(&socket), DEADLINE),
            fragment,
            context,
        );
    }
}

#[test]
fn print_settings_snippet_is_a_valid_pretooluse_hook() {
    let text = claude_hook::settings_snippet(Path::new("/usr/local/bin/verbd"), None, DEADLINE);
    let value: Value = serde_json::from_str(&text).unwrap();
    let group = &value["hooks"]["PreToolUse"][0];
    assert_eq!(group["matcher"], "Write|Edit|MultiEdit|NotebookEdit|Bash");
    let hook = &group["hooks"][0];
    assert_eq!(hook["type"], "command");
    assert_eq!(hook["command"], "/usr/local/bin/verbd");
    assert!(hook["timeout"].as_u64().unwrap() > DEADLINE.as_secs());
}
