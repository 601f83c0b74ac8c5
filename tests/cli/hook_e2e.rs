//! The Claude Code hook binary against the real daemon: real PreToolUse fixtures are allowed or
//! denied by the daemon's `check` op (and journaled); every failure exits 2 with the deny JSON.
use crate::common;
use common::policy::{Category, Policy, Verb};
use common::*;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn policy() -> String {
    Policy::new()
        .allow_root()
        .humans("agent", &[0])
        .verb(
            "note",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/root"])
                .description("write notes")
                .without_approval()
                .roles(&["agent"]),
        )
        .render()
}

fn hook(socket: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(BIN)
        .args(["hook", "claude-code", "--socket"])
        .arg(socket)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hook that fails before reading (a forced panic) may close its stdin first: what it
    // answers is what the tests look at.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

fn fixture(name: &str, root: &Path, outside: &Path) -> Vec<u8> {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/claude")
            .join(name),
    )
    .unwrap()
    .replace("@ROOT@", root.to_str().unwrap())
    .replace("@OUTSIDE@", outside.to_str().unwrap())
    .into_bytes()
}

fn assert_denied(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}: {out:?}"));
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecision"], "deny",
        "{what}"
    );
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PreToolUse");
    assert!(
        !out.stderr.is_empty(),
        "{what}: the reason goes to stderr too"
    );
}

#[test]
fn fixtures_against_the_real_daemon() {
    if !require_root("hook e2e") {
        return;
    }
    let d = Daemon::start_with(&policy(), |dir| {
        for sub in [
            "root/notes",
            "root/docs",
            "root/repo/.git/hooks",
            "root/.claude",
            "outside",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(dir.join("outside"), dir.join("root/escape")).unwrap();
    });
    let base = std::fs::canonicalize(d.dir.path()).unwrap();
    let (root, outside) = (base.join("root"), base.join("outside"));
    for allowed in [
        "write_allowed.json",
        "edit_allowed.json",
        "multiedit_allowed.json",
        "notebookedit_allowed_relative.json",
        "bash_no_path.json",
        "read_outside_root.json",
    ] {
        let out = hook(&d.socket, &fixture(allowed, &root, &outside), &[]);
        assert_eq!(out.status.code(), Some(0), "{allowed}: {out:?}");
        assert!(out.stdout.is_empty(), "{allowed}: {out:?}");
    }
    for denied in [
        "write_denied_outside_root.json",
        "write_denied_memory_file.json",
        "write_denied_symlink_escape.json",
        "edit_denied_git_hook.json",
        "multiedit_denied_settings.json",
        "notebookedit_denied_outside_root.json",
        "unknown_tool_with_path.json",
    ] {
        assert_denied(
            &hook(&d.socket, &fixture(denied, &root, &outside), &[]),
            denied,
        );
    }
    // The daemon journaled its decisions.
    let checks: Vec<bool> = d
        .journal_events()
        .iter()
        .filter(|e| e["kind"] == "check")
        .map(|e| e["allowed"].as_bool().unwrap())
        .collect();
    assert!(
        checks.contains(&true) && checks.contains(&false),
        "{checks:?}"
    );
}

#[test]
fn every_failure_denies() {
    if !require_root("hook e2e") {
        return;
    }
    let mut d = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir_all(dir.join("root")).unwrap();
    });
    let root = std::fs::canonicalize(d.dir.path()).unwrap().join("root");
    let write = fixture("write_allowed.json", &root, &root);
    assert_denied(&hook(&d.socket, b"{not json", &[]), "malformed JSON");
    assert_denied(&hook(&d.socket, b"", &[]), "empty stdin");
    assert_denied(
        &hook(&d.socket, &write, &[("VERBD_HOOK_TEST_PANIC", "1")]),
        "a panic inside the hook",
    );
    d.stop();
    assert_denied(&hook(&d.socket, &write, &[]), "daemon stopped");
    // A "daemon" that accepts and never answers: denied at the deadline, not hung.
    let hang = d.dir.path().join("hang.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&hang).unwrap();
    let started = std::time::Instant::now();
    assert_denied(&hook(&hang, &write, &[]), "daemon hanging");
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}

#[test]
fn print_settings_is_valid_json_with_the_matcher() {
    let out = Command::new(BIN)
        .args(["hook", "claude-code", "--print-settings"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let rendered = v.to_string();
    assert!(
        rendered.contains("Write|Edit|MultiEdit|NotebookEdit"),
        "{rendered}"
    );
    assert!(rendered.contains("PreToolUse"));
    assert!(rendered.contains("claude-code"));
}

#[test]
fn file_verbs_through_the_daemon_journal_hashes_not_content() {
    if !require_root("file verbs") {
        return;
    }
    let d = Daemon::start_with(&policy(), |dir| {
        std::fs::create_dir_all(dir.join("root/docs")).unwrap();
        // The protected paths' directories exist, so a refusal cannot be "not found".
        std::fs::create_dir_all(dir.join("root/sub/.git/hooks")).unwrap();
    });
    let root = std::fs::canonicalize(d.dir.path()).unwrap().join("root");
    let content = "incident notes: the-unique-content-marker\nline two\n";
    let path = root.join("docs/notes.md");
    let r = d.call(
        "note",
        &[("path", path.to_str().unwrap()), ("content", content)],
    );
    let receipt: serde_json::Value = serde_json::from_str(&stdout_of(&r)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
    assert_eq!(receipt["size"], content.len());
    let journal = d.journal();
    assert!(
        !journal.contains("the-unique-content-marker"),
        "content reached the journal"
    );
    let write = d
        .journal_events()
        .into_iter()
        .find(|e| e["kind"] == "file_write")
        .expect("write journaled");
    assert_eq!(write["sha256"], receipt["sha256"]);
    assert_eq!(write["size"], content.len());
    // Protected names at any depth, and paths outside the roots, are refused; nothing written.
    for bad in ["docs/CLAUDE.md", "Claude.md", "sub/.git/hooks/pre-commit"] {
        let p = root.join(bad);
        let r = d.call("note", &[("path", p.to_str().unwrap()), ("content", "x")]);
        match &r {
            verbd::protocol::Response::Denied { reason } => assert!(
                reason.contains("is or is inside the")
                    && reason.contains("never written by file verbs"),
                "{bad}: not refused as a protected name: {reason}"
            ),
            other => panic!("{bad}: {other:?}"),
        }
        assert!(!p.exists());
    }
    let r = d.call("note", &[("path", "/etc/verbd-test"), ("content", "x")]);
    assert!(
        matches!(r, verbd::protocol::Response::Invalid { .. }),
        "{r:?}"
    );
}

/// A hook whose input never ends (the runtime keeps stdin open and writes nothing) is stuck
/// where no request deadline reaches: the process's own hard deadline answers deny, in the
/// runtime's terms, with exit 2 and nothing else on stdout.
#[test]
fn a_hook_whose_input_never_ends_denies_at_its_hard_deadline() {
    for (runtime, denied) in [
        ("claude-code", "/hookSpecificOutput/permissionDecision"),
        ("gemini-cli", "/decision"),
        ("cursor", "/permission"),
    ] {
        let started = std::time::Instant::now();
        let mut child = Command::new(BIN)
            .args(["hook", runtime, "--socket", "/nonexistent/verbd.sock"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(2), "{runtime}: {out:?}");
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{runtime}: {e}: {out:?}"));
        assert_eq!(
            answer.pointer(denied).unwrap(),
            "deny",
            "{runtime}: {answer}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("did not finish within 5s"),
            "{runtime}: {stderr}"
        );
        assert!(
            took >= std::time::Duration::from_secs(5) && took < std::time::Duration::from_secs(9),
            "{runtime}: {took:?}"
        );
    }
}
