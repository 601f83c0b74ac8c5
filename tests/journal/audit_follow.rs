//! `verbd audit tail --follow` and the filters of `audit tail` (verb, caller, outcome, since),
//! through the real binary: on a real daemon's journal while it serves and across a restart, on a
//! journal that rotates its segments under the follower, and on a journal altered while followed
//! (the follower stops and names the problem instead of printing what comes after).
use crate::common;

use common::policy::{Category, Param, Policy, Verb};
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

fn policy() -> String {
    Policy::new()
        .allow_root()
        .agents("me", &[0])
        .verb(
            "echo",
            Verb::command(Category::ReadOnly, "/bin/echo {w}")
                .description("echo a word")
                .roles(&["me"])
                .param("w", Param::matching("[a-z]+")),
        )
        .verb(
            "other",
            Verb::command(Category::ReadOnly, "/bin/true")
                .description("something else")
                .roles(&["me"]),
        )
        .render()
}

/// A running `audit tail` and the lines it prints, as they come.
struct Tail {
    child: Child,
    lines: Receiver<String>,
}

impl Tail {
    fn spawn(state: &std::path::Path, args: &[&str]) -> Tail {
        let mut child = Command::new(BIN)
            .args(["audit", "tail", "--json", "--state-dir"])
            .arg(state)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Tail { child, lines }
    }

    /// The next `count` records it prints (panics after 20 s).
    fn next(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        (0..count)
            .map(|i| {
                let left = deadline.saturating_duration_since(Instant::now());
                let line = self
                    .lines
                    .recv_timeout(left)
                    .unwrap_or_else(|e| panic!("record {} of {count} did not come: {e}", i + 1));
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }

    /// Nothing more within `wait`.
    fn silent_for(&self, wait: Duration) {
        if let Ok(line) = self.lines.recv_timeout(wait) {
            panic!("unexpected record: {line}");
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["event"]["kind"].as_str().unwrap().to_string())
        .collect()
}

/// `audit tail` (without --follow) with `args` (`-n 100` unless they say): the records printed.
fn tail_once(state: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let n = if args.contains(&"-n") {
        &[][..]
    } else {
        &["-n", "100"][..]
    };
    let out = Command::new(BIN)
        .args(["audit", "tail", "--json"])
        .args(n)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn follow_prints_a_live_daemons_records_through_a_restart_with_filters() {
    if !require_root("audit tail --follow on a daemon's journal") {
        return;
    }
    let mut d = Daemon::start(&policy());
    assert_eq!(stdout_of(&d.call("echo", &[("w", "alpha")])), "alpha\n");
    assert!(matches!(
        d.call("echo", &[("w", "NOT-A-WORD")]),
        verbd::protocol::Response::Invalid { .. }
    ));
    d.call("other", &[]);
    let tail = Tail::spawn(&d.state, &["--follow", "--verb", "echo", "-n", "10"]);
    // What was journaled for `echo`: the run (exec, its result) and the refusal.
    let first = tail.next(3);
    assert_eq!(kinds(&first), ["exec", "result", "refused"], "{first:?}");
    // New records as they are journaled; `other` is not `echo`.
    assert_eq!(stdout_of(&d.call("echo", &[("w", "beta")])), "beta\n");
    d.call("other", &[]);
    let beta = tail.next(2);
    assert_eq!(kinds(&beta), ["exec", "result"]);
    assert_eq!(beta[0]["event"]["args"]["w"], "beta");
    assert_eq!(beta[1]["seq"], beta[0]["seq"].as_u64().unwrap() + 1);
    // A restart closes an epoch and begins another (stop, seal, start): the chain and the MACs
    // are still checked, and the next call comes through.
    d.respawn();
    assert_eq!(stdout_of(&d.call("echo", &[("w", "gamma")])), "gamma\n");
    let gamma = tail.next(2);
    assert_eq!(kinds(&gamma), ["exec", "result"]);
    assert_eq!(gamma[0]["event"]["args"]["w"], "gamma");
    tail.silent_for(Duration::from_millis(500));
    drop(tail);

    // The filters on their own and together.
    let refused = tail_once(&d.state, &["--outcome", "refused"]);
    assert_eq!(kinds(&refused), ["refused"]);
    let succeeded = tail_once(&d.state, &["--outcome", "succeeded", "--verb", "echo"]);
    assert_eq!(kinds(&succeeded), ["result", "result", "result"]);
    let other = tail_once(&d.state, &["--caller", "0", "--verb", "other"]);
    assert_eq!(kinds(&other), ["exec", "result", "exec", "result"]);
    let root_by_name = tail_once(&d.state, &["--caller", "root", "--verb", "other"]);
    assert_eq!(root_by_name.len(), 4);
    assert!(tail_once(&d.state, &["--caller", "61999"]).is_empty());
    assert!(tail_once(&d.state, &["--since", "2999-01-01T00:00:00Z"]).is_empty());
    let recent = tail_once(&d.state, &["--since", "1h", "--verb", "echo"]);
    assert_eq!(recent.len(), 7);
    let last_two = tail_once(&d.state, &["--verb", "echo", "-n", "2"]);
    assert_eq!(kinds(&last_two), ["exec", "result"]);
    assert_eq!(last_two[0]["event"]["args"]["w"], "gamma");
    let bad = Command::new(BIN)
        .args(["audit", "tail", "--since", "yesterday", "--state-dir"])
        .arg(&d.state)
        .output()
        .unwrap();
    assert_ne!(bad.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since \"yesterday\""));

    // An altered journal while followed: the follower stops and names it.
    let mut tail = Tail::spawn(&d.state, &["--follow", "-n", "0"]);
    std::thread::sleep(Duration::from_millis(500));
    let journal = d.state.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let last = text.lines().last().unwrap().replace("gamma", "gammb");
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    writeln!(file, "{last}").unwrap();
    drop(file);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = tail.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the follower did not notice");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(tail.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("journal.jsonl"), "{stderr}");
    assert!(
        tail.lines.try_recv().is_err(),
        "a record after the altered one was printed"
    );
    d.kill9();
}

#[test]
fn follow_verifies_every_record_across_segment_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = verbd::journal::Journal::open_with(verbd::journal::JournalConfig {
        segment_bytes: 4096,
        ..verbd::journal::JournalConfig::new(dir.path())
    })
    .unwrap();
    let event = |i: usize| json!({"kind": "note", "index": i, "pad": "x".repeat(100)});
    for i in 0..5 {
        journal.append(&event(i)).unwrap();
    }
    let tail = Tail::spawn(dir.path(), &["--follow", "-n", "1000"]);
    let mut seen = Vec::new();
    let mut last_seq = 0;
    let mut take = |records: Vec<Value>, seen: &mut Vec<u64>| {
        for r in records {
            let seq = r["seq"].as_u64().unwrap();
            assert_eq!(seq, last_seq + 1, "records out of order or missing: {r}");
            last_seq = seq;
            if r["event"]["kind"] == "note" {
                seen.push(r["event"]["index"].as_u64().unwrap());
            }
        }
    };
    // Everything up to now, then 200 more in small batches while it follows.
    let start = journal_lines(dir.path());
    take(tail.next(start), &mut seen);
    for batch in 0..20 {
        let before = journal_lines(dir.path());
        for i in 0..10 {
            journal.append(&event(5 + batch * 10 + i)).unwrap();
        }
        let added = journal_lines(dir.path()) - before;
        take(tail.next(added), &mut seen);
    }
    assert_eq!(seen, (0..205).collect::<Vec<u64>>());
    let archives = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("journal-"))
        .count();
    assert!(archives >= 5, "only {archives} rotations happened");
    tail.silent_for(Duration::from_millis(500));
}

/// Lines in every segment of the journal in `dir`.
fn journal_lines(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("journal") && name.ends_with(".jsonl")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap().lines().count())
        .sum()
}
