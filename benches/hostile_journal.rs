//! Journal growth under one hostile agent (issue 12, item 3; results in docs/PERFORMANCE.md), in
//! two floods of `VERBD_BENCH_SECONDS` (default 10) each: one agent uid floods the daemon from 16
//! connections at once with refused calls and denied `check` requests, first of about 0.5 MB
//! each (long verb names, parameter names, 40,000 parameters, long paths and tool names), then
//! small ones (as many per second as the daemon answers), while a uid without a role connects in
//! a loop. Prints how fast the journal grew, what was sent, and what the journal holds for it
//! after a clean stop (journaled refusals plus the counts of coalesced ones), so "bounded" never
//! means "lost".
//!
//! A plain binary printing Markdown: `cargo bench --bench hostile_journal`. Needs root (the
//! role-less client runs as uid 61990).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verbd::protocol::{Request, Response};

const BIN: &str = env!("CARGO_BIN_EXE_verbd");
const STRANGER: u32 = 61990;
const CONNECTIONS: usize = 16;
const HALF_MB: usize = 500_000;

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.agent]
uids = [0]

[verb.echo]
description = "echo a word"
category = "read-only"
roles = ["agent"]
command = "/bin/echo {text}"
params.text = { type = "string", pattern = "[a-z]{1,8}" }

[verb.save]
description = "write a file beneath data"
builtin = "file.write"
category = "mutating"
approval = "none"
roles = ["agent"]
roots = ["@DIR@/data"]
"#;

fn journal_bytes(state: &Path) -> u64 {
    std::fs::read_dir(state)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.starts_with("journal") && name.ends_with(".jsonl")
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn call(verb: String, args: BTreeMap<String, Value>) -> Request {
    Request::Call {
        verb,
        args,
        reason: None,
        idempotency_key: None,
        stream: None,
    }
}

fn small_requests() -> Vec<Request> {
    (0..64)
        .map(|n| call(format!("no-such-verb-{n}"), BTreeMap::new()))
        .chain((0..64).map(|n| Request::Check {
            path: format!("/etc/forbidden-{n}"),
            tool: Some("Write".into()),
        }))
        .collect()
}

fn hostile_requests() -> Vec<Request> {
    vec![
        call("v".repeat(HALF_MB), BTreeMap::new()),
        call(
            "echo".into(),
            BTreeMap::from([("p".repeat(HALF_MB), json!("hi"))]),
        ),
        call(
            "echo".into(),
            (0..40_000)
                .map(|n| (format!("param{n:06}"), json!("x")))
                .collect(),
        ),
        call(
            "echo".into(),
            BTreeMap::from([("text".into(), json!("Z".repeat(60_000)))]),
        ),
        Request::Check {
            path: format!("/{}", "d/".repeat(HALF_MB / 2)),
            tool: Some("t".repeat(HALF_MB)),
        },
    ]
}

/// What the journal holds for the flood: refusal records, and the counts of coalesced ones.
fn journaled_refusals(state: &Path) -> (u64, u64, u64) {
    let (mut records, mut coalesced, mut coalesced_records) = (0, 0, 0);
    for record in verbd::journal::replay(state).expect("the journal reads back") {
        match record.event["kind"].as_str() {
            Some("refused" | "connect_refused") => records += 1,
            Some("check") if record.event["allowed"] == false => records += 1,
            Some("refusals_coalesced") => {
                coalesced_records += 1;
                coalesced += record.event["count"].as_u64().unwrap_or(0);
            }
            _ => {}
        }
    }
    (records, coalesced, coalesced_records)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "run as root: the role-less client drops to uid {STRANGER}"
    );
    let seconds: u64 = std::env::var("VERBD_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::Builder::new()
        .prefix("verbd-bench-hostile-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        POLICY.replace("@DIR@", dir.path().to_str().unwrap()),
    )
    .unwrap();
    let socket = dir.path().join("verbd.sock");
    let state = dir.path().join("state");
    let mut daemon = Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .env("VERBD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start verbd serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    let mut sent_total = 0;
    for (name, requests) in [
        ("requests of ≈ 0.5 MB", hostile_requests()),
        ("small requests", small_requests()),
    ] {
        sent_total += flood(name, requests, &socket, &state, seconds);
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    daemon.wait().unwrap();
    let (records, coalesced, coalesced_records) = journaled_refusals(&state);
    println!(
        "\nJournaled after the stop: {records} refusal records + {coalesced_records} `refusals_coalesced` records counting {coalesced} more = {} of the {sent_total} refusals sent. Load average {}.",
        records + coalesced,
        load_average()
    );
    // A refusal whose answer the client did not read (a CLI stopped mid-answer) is journaled
    // but not counted as sent, so the journal may hold more, never less.
    assert!(
        records + coalesced >= sent_total,
        "every refusal is in the journal, one by one or counted"
    );
}

/// One flood of `requests` for `seconds`; prints its table row and returns the refusals sent.
fn flood(name: &str, requests: Vec<Request>, socket: &Path, state: &Path, seconds: u64) -> u64 {
    let requests = Arc::new(requests);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let request_bytes: u64 = requests
        .iter()
        .map(|r| verbd::protocol::encode_request(r).len() as u64)
        .sum::<u64>()
        / requests.len() as u64;
    let before = journal_bytes(state);
    let started = Instant::now();
    let mut threads = Vec::new();
    for thread in 0..CONNECTIONS {
        let (requests, stop, sent, socket) = (
            requests.clone(),
            stop.clone(),
            sent.clone(),
            socket.to_path_buf(),
        );
        threads.push(std::thread::spawn(move || {
            let mut n = thread;
            while !stop.load(Ordering::Relaxed) {
                let request = &requests[n % requests.len()];
                n += 1;
                match verbd::client::request(&socket, request, Duration::from_secs(60)) {
                    Ok(Response::Denied { .. } | Response::Invalid { .. }) => {}
                    Ok(Response::Check { allowed: false, .. }) => {}
                    Ok(Response::Busy { .. }) => continue,
                    other => panic!("expected a refusal, got {other:?}"),
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let stranger_sent = Arc::new(AtomicU64::new(0));
    let stranger = {
        let (stop, count, socket) = (stop.clone(), stranger_sent.clone(), socket.to_path_buf());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new(BIN)
                    .args(["list", "--socket"])
                    .arg(&socket)
                    .uid(STRANGER)
                    .gid(STRANGER)
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&out.stderr).contains("matches no role") {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(seconds));
    let after = journal_bytes(state);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    stranger.join().unwrap();
    let sent = sent.load(Ordering::Relaxed);
    let stranger_sent = stranger_sent.load(Ordering::Relaxed);
    println!(
        "\n## One hostile agent flooding refusals: {name} ({} s)\n",
        elapsed.as_secs()
    );
    println!("| measure | value |\n|---|---|");
    println!(
        "| requests refused | {sent} from the agent over {CONNECTIONS} connections ({:.0}/s, ≈ {request_bytes} bytes each) + {stranger_sent} from a uid without a role |",
        sent as f64 / elapsed.as_secs_f64()
    );
    println!(
        "| request bytes received | {:.2} MB/s |",
        (sent * request_bytes) as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "| **journal growth** | **{:.3} MB/s** ({} bytes in {:.1} s) |",
        (after - before) as f64 / elapsed.as_secs_f64() / 1e6,
        after - before,
        elapsed.as_secs_f64()
    );
    sent + stranger_sent
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
