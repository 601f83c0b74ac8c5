//! The audit half of the journal through the real binary: `audit verify` names an edited,
//! deleted, inserted or reordered record; `audit tail` is readable; a journal that cannot be
//! written denies every call (fail closed) and the daemon serves again once space is back.
mod common;
use common::*;
use std::process::Command;
use verbd::protocol::Response;

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.me]
uids = [0]
[verb.echo]
description = "echo a word"
category = "read-only"
roles = ["me"]
command = "/bin/echo {w}"
params.w = { type = "string", pattern = "[a-z0-9]+", max_length = 200 }
"#;

fn journal_with_calls() -> Option<(Daemon, std::path::PathBuf)> {
    if !require_root("audit") {
        return None;
    }
    let mut d = Daemon::start(POLICY);
    for w in ["alpha", "beta", "gamma", "delta"] {
        assert_eq!(stdout_of(&d.call("echo", &[("w", w)])), format!("{w}\n"));
    }
    d.stop();
    let state = d.state.clone();
    Some((d, state))
}

fn verify(state: &std::path::Path) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["audit", "verify", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn edit_lines(state: &std::path::Path, f: impl FnOnce(&mut Vec<String>)) {
    let path = state.join("journal.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    f(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

fn line_of(state: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(state.join("journal.jsonl"))
        .unwrap()
        .lines()
        .position(|l| l.contains(needle))
        .unwrap()
}

#[test]
fn intact_journal_verifies_and_tails_readably() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("intact"), "{out}");
    let tail = Command::new(BIN)
        .args(["audit", "tail", "-n", "3", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&tail.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("delta") || text.contains("result") || text.contains("stop"),
        "{text}"
    );
}

#[test]
fn edited_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"beta\"");
    edit_lines(&state, |l| l[n] = l[n].replace("\"beta\"", "\"bet4\""));
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(out.contains(&format!("line {}", n + 1)), "{out}");
}

#[test]
fn deleted_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"gamma\"");
    edit_lines(&state, |l| {
        l.remove(n);
    });
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(
        out.to_lowercase().contains("missing") || out.contains("gap") || out.contains("deleted"),
        "{out}"
    );
}

#[test]
fn swapped_records_are_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let a = line_of(&state, "\"alpha\"");
    let b = line_of(&state, "\"delta\"");
    edit_lines(&state, |l| l.swap(a, b));
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("line {}", a + 1)) || out.contains(&format!("line {}", b + 1)),
        "{out}"
    );
}

#[test]
fn inserted_record_is_named() {
    let Some((_d, state)) = journal_with_calls() else {
        return;
    };
    let n = line_of(&state, "\"beta\"");
    edit_lines(&state, |l| {
        let forged = l[n].replace("\"beta\"", "\"evil\"");
        l.insert(n + 1, forged);
    });
    let (code, out) = verify(&state);
    assert_eq!(code, 1);
    assert!(out.contains(&format!("line {}", n + 2)), "{out}");
}

struct Tmpfs(std::path::PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("/bin/umount").arg(&self.0).status();
    }
}

#[test]
fn full_journal_denies_calls_and_recovers() {
    if !require_root("journal full") {
        return;
    }
    let dir = open_tempdir();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let status = Command::new("/bin/mount")
        .args(["-t", "tmpfs", "-o", "size=128k,mode=0700", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(status.success(), "mount tmpfs");
    let mount = Tmpfs(state.clone());
    let d = Daemon::spawn_in(dir, POLICY, &[]);
    d.wait_ready();
    // Fill the file system with a ballast file, leaving almost nothing (the journal's own
    // files — segment, witness, sealing key, checkpoint — take a few pages already).
    let ballast = state.join("ballast");
    let mut bytes = Vec::new();
    bytes.resize(64 * 1024, b'x');
    std::fs::write(&ballast, &bytes).unwrap();
    let mut filler = 0;
    while std::fs::write(state.join(format!("fill{filler}")), [b'y'; 512]).is_ok() {
        filler += 1;
        assert!(filler < 1000);
    }
    let long = "a".repeat(150);
    let mut denied = None;
    for _ in 0..50 {
        match d.call("echo", &[("w", &long)]) {
            Response::Ok { .. } => continue,
            Response::Denied { reason } => {
                denied = Some(reason);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let reason = denied.expect("calls kept running with a full journal");
    assert!(reason.contains("journal"), "{reason}");
    // Space is back: the daemon serves again, and the chain is intact.
    std::fs::remove_file(&ballast).unwrap();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "back")])), "back\n");
    let (code, out) = verify(&state);
    assert_eq!(code, 0, "{out}");
    // Stop, unmount, then let the temp dir go (it cannot be removed while mounted).
    let mut d = d;
    d.stop();
    drop(mount);
    drop(d);
}
