//! One state machine (invariants 4, 6 and 9): the daemon's live proposal book and the book a
//! restart rebuilds from the journal never disagree; every run the daemon starts reaches a
//! journaled end whether or not its client stays; an approval is never spent by a busy limit; and
//! text a requester wrote reaches approvers only escaped.
//!
//! Each test is an attack or a divergence found in an earlier version, run against a real
//! `verbd serve` with real uids and sockets. Speaks only the wire protocol and the CLI.
use crate::common;
use common::policy::{Category, Command, Param, Policy, Sandbox, Verb};
use common::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const AGENT: u32 = 61201;
const SRE: u32 = 61202;

fn policy() -> Policy {
    Policy::new()
        .allow_root()
        .shutdown_grace("1s")
        .agents("agent", &[AGENT, 0])
        .humans("sre", &[SRE])
        .approvers(&["sre"])
        .approvals_expire("30m")
        .sandbox(
            "default",
            Sandbox {
                read: Some(
                    ["/usr", "/bin", "/lib", "/lib64", "/etc"]
                        .map(String::from)
                        .to_vec(),
                ),
                write: Some(vec!["@DIR@/notes".into()]),
                ..Sandbox::default()
            },
        )
        .verb(
            "count",
            Verb::builtin(Category::Mutating, "file.append", &["@DIR@/out"])
                .description("append a line to the counter file (needs approval)")
                .roles(&["agent"]),
        )
        .verb(
            "put",
            Verb::builtin(Category::Mutating, "file.write", &["@DIR@/out"])
                .description("write a file at once")
                .without_approval()
                .roles(&["agent"]),
        )
        .verb(
            "sleepy",
            Verb::command(Category::Mutating, "/bin/sleep {secs}")
                .description("a long mutation")
                .roles(&["agent"])
                .timeout("120s")
                .param("secs", Param::int(1, 999)),
        )
        .verb(
            "nap",
            Verb::command(Category::ReadOnly, "/bin/sleep {secs}")
                .description("a long read")
                .roles(&["agent"])
                .timeout("120s")
                .param("secs", Param::int(1, 999)),
        )
}

fn start(policy: Policy) -> Daemon {
    let d = Daemon::start_with(&policy.render(), |dir| {
        for sub in ["out", "notes", "notes/in"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        std::fs::set_permissions(
            dir.join("notes/in"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
    });
    d.open_socket();
    d
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

/// Propose `count` as the agent (with `reason`); returns (id, hash).
fn propose(d: &Daemon, content: &str, reason: &str) -> (u64, String) {
    let path = d.path("out/counter");
    let proposed = d.propose_as(
        AGENT,
        &[
            "--reason",
            reason,
            "count",
            &format!("path={}", path.display()),
            &format!("content={content}"),
        ],
    );
    (proposed.id, proposed.hash)
}

fn events(d: &Daemon, kind: &str) -> Vec<serde_json::Value> {
    d.journal_events()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// Wait until `done` holds, or fail with the journal.
fn until(d: &Daemon, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; journal:\n{}\nlog:\n{}",
            d.journal(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Send one request on a raw connection (as this test process, uid 0, an agent in these
/// policies) and return it unread: dropping it is the client hanging up.
fn send_raw(d: &Daemon, request: serde_json::Value) -> UnixStream {
    let mut request = request;
    request["v"] = 1.into();
    let mut stream = UnixStream::connect(&d.socket).unwrap();
    stream.write_all(format!("{request}\n").as_bytes()).unwrap();
    stream
}

/// The exec record of each run, and whether the journal holds its end (`result`/`cancelled`).
fn unended_runs(d: &Daemon) -> Vec<serde_json::Value> {
    let records: Vec<serde_json::Value> = d
        .journal()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let ended: Vec<u64> = records
        .iter()
        .filter(|r| matches!(r["event"]["kind"].as_str(), Some("result" | "cancelled")))
        .filter_map(|r| r["event"]["exec_seq"].as_u64())
        .collect();
    records
        .into_iter()
        .filter(|r| r["event"]["kind"] == "exec")
        .filter(|r| !ended.contains(&r["seq"].as_u64().unwrap()))
        .collect()
}

// ---- Divergences between the live book and the replayed one ----

/// Live, a resolved proposal's note carried the outcome ("succeeded: checked"); after a restart
/// it lost it ("checked"). Now the outcome is its own field, the same live and replayed.
#[test]
fn a_resolved_proposal_reads_the_same_before_and_after_a_restart() {
    if !require_root("core state") {
        return;
    }
    let mut d = start(policy());
    let out = d.cli_as(AGENT, &["call", "--json", "sleepy", "secs=519"]);
    let v = json(&out);
    let id = v["id"].as_u64().unwrap();
    let hash = v["hash"].as_str().unwrap().to_string();
    let socket = d.socket.clone();
    let approver = std::thread::spawn(move || {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(BIN)
            .args(["approve", &id.to_string(), "--hash", &hash[..12]])
            .env("VERBD_SOCKET", &socket)
            .uid(SRE)
            .gid(SRE)
            .output()
            .unwrap()
    });
    until(&d, "the approved run", || {
        !processes_matching("sleep 519").is_empty()
    });
    d.kill9();
    let _ = approver.join();
    for pid in processes_matching("sleep 519") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    d.respawn();
    d.open_socket();
    let out = d.cli_as(
        SRE,
        &[
            "resolve",
            &id.to_string(),
            "--outcome",
            "succeeded",
            "--note",
            "checked the deployment by hand",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let live = json(&d.cli_as(SRE, &["result", "--json", &id.to_string()]));
    d.respawn();
    d.open_socket();
    let replayed = json(&d.cli_as(SRE, &["result", "--json", &id.to_string()]));
    println!(
        "live:     state={} note={} outcome={}",
        live["state"], live["note"], live["outcome"]
    );
    println!(
        "replayed: state={} note={} outcome={}",
        replayed["state"], replayed["note"], replayed["outcome"]
    );
    for field in ["state", "note", "outcome", "decided_by", "exit_code"] {
        assert_eq!(
            live[field], replayed[field],
            "{field}: live {live} / replayed {replayed}"
        );
    }
    assert_eq!(live["state"], "resolved");
    assert_eq!(live["outcome"], "succeeded", "{live}");
}

/// Live, a keyed call whose client hung up was forgotten (a retry ran it again); replayed, the
/// same key answered `busy: still running` for 24 h. Now the hang-up cancels the run through a
/// journaled `cancelled`, and a retry gets the same answer live and after a restart: never a
/// second run.
#[test]
fn a_hung_up_keyed_call_never_runs_twice_live_or_after_restart() {
    if !require_root("core state") {
        return;
    }
    let mut d = start(policy());
    let call = serde_json::json!({
        "op": "call", "verb": "nap", "args": {"secs": 523}, "idempotency_key": "nap-once"
    });
    let stream = send_raw(&d, call);
    until(&d, "the exec record", || !events(&d, "exec").is_empty());
    drop(stream);
    until(&d, "the child to go", || {
        processes_matching("sleep 523").is_empty()
    });
    std::thread::sleep(Duration::from_millis(300));
    let retry = |d: &Daemon| {
        d.cli_as(
            0,
            &["call", "--idempotency-key", "nap-once", "nap", "secs=523"],
        )
    };
    let live = retry(&d);
    // Never re-run: wait a little for a second child.
    std::thread::sleep(Duration::from_millis(300));
    let reran = !processes_matching("sleep 523").is_empty();
    for pid in processes_matching("sleep 523") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    d.stop();
    d.respawn();
    let replayed = retry(&d);
    println!(
        "live retry:     {:?} {}",
        live.status.code(),
        String::from_utf8_lossy(&live.stderr).trim()
    );
    println!(
        "replayed retry: {:?} {}",
        replayed.status.code(),
        String::from_utf8_lossy(&replayed.stderr).trim()
    );
    assert!(!reran, "the retry ran the call again");
    assert_eq!(events(&d, "exec").len(), 1, "{}", d.journal());
    assert_eq!(live.status.code(), replayed.status.code());
    assert_eq!(live.stderr, replayed.stderr);
    assert_eq!(live.status.code(), Some(77), "{live:?}");
    assert!(
        String::from_utf8_lossy(&live.stderr).contains("was cancelled"),
        "{live:?}"
    );
}

/// `Cancelled` was declared and never written: a hang-up killed the child and left its exec
/// record without an end. Now the cancellation is journaled like any event.
#[test]
fn a_hang_up_kills_the_run_and_journals_the_cancellation() {
    if !require_root("core state") {
        return;
    }
    let d = start(policy());
    let stream = send_raw(
        &d,
        serde_json::json!({"op": "call", "verb": "nap", "args": {"secs": 527}}),
    );
    until(&d, "the child", || {
        !processes_matching("sleep 527").is_empty()
    });
    drop(stream);
    until(&d, "the child to be killed", || {
        processes_matching("sleep 527").is_empty()
    });
    std::thread::sleep(Duration::from_millis(300));
    let exec = events(&d, "exec");
    let cancelled = events(&d, "cancelled");
    println!(
        "exec records: {}, cancelled records: {cancelled:?}",
        exec.len()
    );
    assert_eq!(cancelled.len(), 1, "{}", d.journal());
    assert_eq!(cancelled[0]["cause"], "client_hung_up");
    assert!(unended_runs(&d).is_empty(), "{}", d.journal());
}

/// `deny` changed the book before its record was durable, so a `result` at the same moment could
/// show `denied` for a decision the journal did not hold yet. Whenever anyone sees `denied`, the
/// journal must already hold the denial.
#[test]
fn a_denial_is_never_visible_before_it_is_journaled() {
    if !require_root("core state") {
        return;
    }
    let d = start(policy());
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    // Others keep the journal busy (each refused call is an fsync'd record), so a decision
    // waits for its turn to be written.
    let chatter: Vec<_> = (0..2)
        .map(|_| {
            let busy = busy.clone();
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                while busy.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = verbd::client::request(
                        &socket,
                        &verbd::protocol::Request::Call {
                            verb: "no-such-verb".into(),
                            args: Default::default(),
                            reason: None,
                            idempotency_key: None,
                            stream: None,
                        },
                        Duration::from_secs(5),
                    );
                }
            })
        })
        .collect();
    let mut early = Vec::new();
    for round in 0..20 {
        let (id, _) = propose(&d, &format!("r{round}\n"), "race");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchers: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                let socket = d.socket.clone();
                let journal = d.state.join("journal.jsonl");
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let req = verbd::protocol::Request::Result { id };
                        let Ok(answer) =
                            verbd::client::request(&socket, &req, Duration::from_secs(5))
                        else {
                            continue;
                        };
                        let text = String::from_utf8_lossy(&answer.encode()).into_owned();
                        if text.contains("\"state\":\"denied\"") {
                            let journal = std::fs::read_to_string(&journal).unwrap();
                            let durable = journal.lines().any(|l| {
                                l.contains("\"kind\":\"proposal_denied\"")
                                    && l.contains(&format!("\"id\":{id},"))
                            });
                            return Some(durable);
                        }
                    }
                    None
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        let out = d.cli_as(SRE, &["deny", &id.to_string(), "--reason", "no"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen: Vec<Option<bool>> = watchers.into_iter().map(|w| w.join().unwrap()).collect();
        if seen.contains(&Some(false)) {
            early.push(id);
        }
    }
    busy.store(false, std::sync::atomic::Ordering::Relaxed);
    for thread in chatter {
        thread.join().unwrap();
    }
    println!("proposals seen denied before the record was durable: {early:?}");
    assert!(early.is_empty(), "denied seen before durable for {early:?}");
}

// ---- Issue 12.5: a busy execution slot never spends an approval ----

#[test]
fn an_approval_waits_for_a_busy_execution_slot_and_runs_once() {
    if !require_root("core state") {
        return;
    }
    let d = start(policy().max_executions(1));
    let (id, hash) = propose(&d, "approved\n", "slot");
    // An agent takes the only execution slot for two seconds.
    let socket = d.socket.clone();
    let hog = std::thread::spawn(move || {
        verbd::client::request(
            &socket,
            &verbd::protocol::Request::Call {
                verb: "nap".into(),
                args: [("secs".to_string(), serde_json::json!(2))].into(),
                reason: None,
                idempotency_key: None,
                stream: None,
            },
            Duration::from_secs(30),
        )
    });
    until(&d, "the hog's child", || {
        !processes_matching("sleep 2").is_empty()
    });
    let out = d.cli_as(SRE, &["approve", &id.to_string(), "--hash", &hash[..12]]);
    println!(
        "approve while busy: {:?} {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("waits for a slot"),
        "{out:?}"
    );
    let _ = hog.join();
    let waited = d.cli_as(
        AGENT,
        &["wait", "--json", "--timeout", "30", &id.to_string()],
    );
    let v = json(&waited);
    assert_eq!(v["state"], "succeeded", "{v}");
    assert_eq!(
        std::fs::read_to_string(d.path("out/counter")).unwrap(),
        "approved\n"
    );
    let runs = events(&d, "exec")
        .into_iter()
        .filter(|e| e["proposal"] == id)
        .count();
    assert_eq!(runs, 1);
    assert_eq!(events(&d, "proposal_queued").len(), 1, "{}", d.journal());
}

// ---- Issue 12.6: a hang-up never leaves an action unjournaled ----

#[test]
fn hanging_up_2_to_20_ms_after_a_file_write_leaves_it_journaled() {
    if !require_root("core state") {
        return;
    }
    let d = start(policy());
    let content = "x".repeat(64 * 1024);
    for round in 0..3 {
        for delay_ms in (2..=20).step_by(2) {
            let path = d.path(&format!("out/w{round}-{delay_ms}"));
            let stream = send_raw(
                &d,
                serde_json::json!({
                    "op": "call", "verb": "put",
                    "args": {"path": path.to_str().unwrap(), "content": content}
                }),
            );
            std::thread::sleep(Duration::from_millis(delay_ms));
            drop(stream);
        }
    }
    // Let the daemon finish whatever it started.
    std::thread::sleep(Duration::from_secs(1));
    let unended = unended_runs(&d);
    let written: Vec<String> = std::fs::read_dir(d.path("out"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    let file_writes: Vec<String> = events(&d, "file_write")
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    let unrecorded: Vec<&String> = written
        .iter()
        .filter(|p| !file_writes.contains(p))
        .collect();
    println!(
        "{} exec records, {} without an end; {} files written, {} without a file_write record",
        events(&d, "exec").len(),
        unended.len(),
        written.len(),
        unrecorded.len()
    );
    assert!(!events(&d, "exec").is_empty());
    assert!(unended.is_empty(), "runs without an end: {unended:?}");
    assert!(
        unrecorded.is_empty(),
        "writes without a record: {unrecorded:?}"
    );
}

// ---- Issue 12.7: invisible characters never reach approvers raw ----

const HIDDEN: [char; 6] = [
    '\u{200F}', '\u{200B}', '\u{2028}', '\u{061C}', '\u{00AD}', '\u{202E}',
];

fn assert_no_hidden(what: &str, text: &str) {
    for c in HIDDEN {
        assert!(
            !text.contains(c),
            "{what} shows U+{:04X} raw:\n{text}",
            u32::from(c)
        );
    }
}

#[test]
fn a_notifier_that_succeeds_leaves_no_failure_record() {
    if !require_root("core state") {
        return;
    }
    // An operator reads `notify_failed` records to learn that approvers were not told; one for
    // a notifier that did its job (exit 0) would be a false alarm that hides the real ones.
    let d = start(policy().notify(Command::Line("/usr/bin/tee @DIR@/notes/in/n{id}".into())));
    let (id, _) = propose(&d, "n\n", "routine");
    let notified = d.path(&format!("notes/in/n{id}"));
    until(&d, "the notifier", || {
        std::fs::metadata(&notified).is_ok_and(|m| m.len() > 0)
    });
    // tee exits as soon as its stdin ends, right after writing; a failure record would follow
    // within milliseconds. Three seconds of none, then the proposal still stands.
    let quiet_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet_until {
        let failed: Vec<_> = events(&d, "notify_failed");
        assert!(
            failed.is_empty(),
            "a notifier that exited 0 was journaled as failed: {failed:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pending = json(&d.cli_as(SRE, &["pending", "--json"]));
    assert_eq!(pending[0]["id"], id, "the proposal stands");
}

#[test]
fn invisible_characters_reach_approvers_only_escaped() {
    if !require_root("core state") {
        return;
    }
    let d = start(policy().notify(Command::Line("/usr/bin/tee @DIR@/notes/in/n{id}".into())));
    let reason: String = format!(
        "routine{}fix{}see{}ticket{}ok{}go{}",
        HIDDEN[0], HIDDEN[1], HIDDEN[2], HIDDEN[3], HIDDEN[4], HIDDEN[5]
    );
    let content = format!("line{}\n", HIDDEN[1]);
    let (id, hash) = propose(&d, &content, &reason);
    let pending = d.cli_as(SRE, &["pending"]);
    let pending_text = String::from_utf8_lossy(&pending.stdout).into_owned();
    let notified = d.path(&format!("notes/in/n{id}"));
    until(&d, "the notifier", || {
        std::fs::metadata(&notified).is_ok_and(|m| m.len() > 0)
    });
    let payload = std::fs::read_to_string(&notified).unwrap();
    let out = d.cli_as(SRE, &["approve", &id.to_string(), "--hash", &hash[..12]]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let result = d.cli_as(AGENT, &["result", &id.to_string()]);
    let result_text = String::from_utf8_lossy(&result.stdout).into_owned();
    println!(
        "pending shows: {}",
        pending_text
            .lines()
            .find(|l| l.contains("reason"))
            .unwrap_or("")
    );
    println!("notifier got: {}", &payload[..payload.len().min(300)]);
    assert_no_hidden("verbd pending", &pending_text);
    assert_no_hidden("verbd result", &result_text);
    assert_no_hidden("the notifier payload", &payload);
    for shown in [&pending_text, &result_text] {
        for escaped in [
            "\\u{200f}",
            "\\u{200b}",
            "\\u{2028}",
            "\\u{61c}",
            "\\u{ad}",
            "\\u{202e}",
        ] {
            assert!(shown.contains(escaped), "{escaped} missing from:\n{shown}");
        }
    }
}
