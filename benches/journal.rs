//! Journal benchmarks (results in docs/PERFORMANCE.md):
//!
//! - **restart after 1 GiB of daemon history**: the exact start-up path of `verbd serve` after
//!   the privilege drop, `serve::open_journal` (`Journal::open`: the start-up check from the last
//!   seal against the witness; then the proposal book from the latest state snapshot and the
//!   records after it), on 1 GiB of history in 64 MiB segments written the way the daemon writes
//!   it: `Event`s through the daemon's `Ledger` (group commit, `Book::apply`, a book snapshot
//!   every 8 MiB). Timed by criterion; the peak RSS of one restart is measured in a fresh child
//!   process (`VmHWM`) and printed.
//! - **append with forward-secure sealing**: one fdatasync'd append with epochs of 1000 records
//!   (the default), of one record (a seal and a key evolution after every record: the worst
//!   case), and with epochs that never close during the run (no sealing): the sealing cost per
//!   record is the difference.
//!
//! The history: verb calls (`exec` + `result`, ~1 KiB), refusals, `check`s and, spread over it,
//! the live state a busy daemon holds at the end — 1,000 proposals (100 still pending), 10,000
//! idempotency keys, rate history of 5 verbs × 3 callers at the 10,000-run cap. The records are
//! written within minutes, so nothing in them is past its retention; the history stands for a
//! month of a busy daemon whose older keys and ended proposals the book already dropped.
//!
//! It is made once on tmpfs (`/dev/shm`, where an fdatasync costs nothing, so it takes a minute
//! instead of hours), copied to `target/bench-journal/` on disk, and reused. The restarts are
//! measured on disk with a warm page cache.
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::Criterion;
use serde_json::json;
use std::collections::BTreeMap;
use verbd::approvals::Book;
use verbd::events::{
    Bounded, CallerRecord, Event, OutputRecord, RefusalKind, RefusedArgs, RunDecision,
};
use verbd::journal::{self, Journal, Witness};
use verbd::proposal::{Decider, PROPOSAL_VERSION, Proposal, RequesterRecord, State};
use verbd::server::ledger::Ledger;

const HISTORY_BYTES: u64 = 1024 * 1024 * 1024;
const PROPOSALS: u64 = 1_000;
const PENDING: u64 = 100;
const KEYS: u64 = 10_000;

fn bench_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-journal")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

fn caller(uid: u32) -> CallerRecord {
    CallerRecord {
        uid,
        gid: uid,
        pid: 4242,
        user: Some(format!("agent{uid}")),
        roles: vec!["agent".into()],
    }
}

fn output() -> OutputRecord {
    OutputRecord {
        bytes: 18_342,
        kept: 18_342,
        truncated: false,
        sha256: "ab".repeat(32),
    }
}

fn exec(index: u64, proposal: Option<u64>, key: Option<String>) -> Event {
    let verb = format!("logs{}", index % 5);
    let unit = format!("svc{}.service", index % 997);
    Event::Exec {
        caller: caller(1000 + (index % 3) as u32),
        decision: if proposal.is_some() {
            RunDecision::Approved
        } else {
            RunDecision::Run
        },
        args: BTreeMap::from([
            ("unit".into(), unit.clone()),
            ("lines".into(), "200".into()),
            ("since".into(), "1h".into()),
        ]),
        args_hash: format!("{:064x}", index),
        argv: [
            "/usr/bin/journalctl",
            "--no-pager",
            "-u",
            &unit,
            "-n",
            "200",
            "--since=-1h",
            "-o",
            "short-iso",
        ]
        .map(String::from)
        .to_vec(),
        verb,
        proposal,
        idempotency_key: key,
    }
}

fn result(index: u64, exec_seq: u64, proposal: Option<u64>) -> Event {
    Event::Result {
        verb: format!("logs{}", index % 5),
        exec_seq,
        proposal,
        exit_code: Some(0),
        signal: None,
        timed_out: false,
        duration_ms: 37,
        stdout: output(),
        stderr: OutputRecord {
            bytes: 0,
            kept: 0,
            ..output()
        },
        error: None,
        ended_by: None,
    }
}

fn proposal(id: u64) -> Proposal {
    Proposal {
        id,
        version: PROPOSAL_VERSION,
        verb: "restart".into(),
        description: "restart a service".into(),
        category: "mutating".into(),
        args: BTreeMap::from([("unit".into(), format!("svc{id}.service"))]),
        args_hash: format!("{:064x}", id),
        argv: vec![
            "/usr/bin/systemctl".into(),
            "restart".into(),
            format!("svc{id}.service"),
        ],
        pins: Vec::new(),
        dry_run_argv: None,
        dry_run_output: None,
        requester: RequesterRecord {
            uid: 1000 + (id % 5) as u32,
            gid: 1000,
            user: None,
            pid: 4242,
        },
        reason: Some("the service stopped answering health checks".into()),
        policy_hash: "cd".repeat(32),
        verb_fingerprint: "ef".repeat(32),
        created_ms: 1_800_000_000_000,
        expires_ms: u64::MAX,
        idempotency_key: None,
        state: State::Pending,
        quorum: None,
        approvals: Vec::new(),
        break_glass: false,
        decided_by: None,
        note: None,
        outcome: None,
        exec_seq: None,
        exit_code: None,
        signal: None,
    }
}

/// Writes 1 GiB of daemon history through the daemon's ledger (see the module docs).
fn write_history(state_dir: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let journal = Journal::open(state_dir).unwrap();
    let ledger = Ledger::new(journal, Book::new());
    let total_calls_estimate = HISTORY_BYTES / 1300;
    runtime.block_on(async {
        let record = |event: Event| ledger.record(event);
        record(Event::Start {
            version: "bench".into(),
            policy: "/etc/verbd/policy.toml".into(),
            policy_hash: "cd".repeat(32),
            pid: 1,
            uid: 999,
        })
        .await
        .unwrap();
        let (mut index, mut proposals, mut keys) = (0u64, 0u64, 0u64);
        let bytes = || ledger.journal_stats().bytes;
        while bytes() < HISTORY_BYTES {
            index += 1;
            // Spread the live state over the whole history.
            let key = (keys < KEYS && index % (total_calls_estimate / KEYS).max(1) == 0).then(|| {
                keys += 1;
                format!("request-{keys}")
            });
            let exec_seq = record(exec(index, None, key)).await.unwrap().seq;
            record(result(index, exec_seq, None)).await.unwrap();
            if index % 50 == 0 {
                let args: BTreeMap<String, serde_json::Value> =
                    BTreeMap::from([("unit".into(), json!("ssh.service"))]);
                record(Event::Refused {
                    caller: caller(1001),
                    verb: Bounded::new("restart-everything"),
                    args: RefusedArgs::new(&args),
                    decision: RefusalKind::Denied,
                    reason: Bounded::new("verb `restart-everything` does not exist or is not available to your roles (run `verbd list`)"),
                })
                .await
                .unwrap();
            }
            if index % 20 == 0 {
                record(Event::Check {
                    caller: caller(1002),
                    path: Bounded::new(&format!("/srv/app/notes/{index}.md")),
                    tool: Some(Bounded::new("Write")),
                    allowed: true,
                    reason: Bounded::new(&format!("/srv/app/notes/{index}.md is beneath an allowed root")),
                })
                .await
                .unwrap();
            }
            if proposals < PROPOSALS && index % (total_calls_estimate / PROPOSALS).max(1) == 0 {
                proposals += 1;
                let id = proposals;
                record(Event::ProposalCreated { id, proposal: Box::new(proposal(id)) })
                    .await
                    .unwrap();
                if id > PENDING {
                    let by = Decider { uid: 2000, user: Some("sre".into()) };
                    record(Event::ProposalApproved {
                        id,
                        by,
                        hash: format!("{:064x}", id),
                        role: None,
                    })
                        .await
                        .unwrap();
                    let seq = record(exec(index, Some(id), None)).await.unwrap().seq;
                    record(result(index, seq, Some(id))).await.unwrap();
                }
            }
        }
        let (proposals, keys, runs) = ledger.read(Book::sizes);
        eprintln!("live state at the end: {proposals} proposals, {keys} idempotency keys, {runs} runs of rate history");
    });
}

/// Makes (once) 1 GiB of daemon history.
fn history() -> PathBuf {
    let dir = bench_dir("daemon-history-1gib");
    let done = dir.join("complete");
    if done.exists() {
        return dir;
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    eprintln!(
        "making 1 GiB of daemon history for {} (once)…",
        dir.display()
    );
    let scratch = tempfile::Builder::new()
        .prefix("verbd-bench-history-")
        .tempdir_in("/dev/shm")
        .unwrap();
    write_history(scratch.path());
    for entry in std::fs::read_dir(scratch.path()).unwrap() {
        let path = entry.unwrap().path();
        let target = dir.join(path.file_name().unwrap());
        std::fs::copy(&path, &target).unwrap();
        std::fs::File::open(&target).unwrap().sync_all().unwrap();
    }
    let stats = Journal::open(&dir).unwrap().stats();
    eprintln!(
        "history: {} bytes in {} segments, last seq {}",
        stats.bytes, stats.segments, stats.last_seq
    );
    std::fs::write(done, b"").unwrap();
    dir
}

/// One restart, as `verbd serve` does it after the privilege drop.
fn restart(dir: &Path) -> (usize, usize) {
    let witness = Witness::open(dir).unwrap();
    let (_journal, book) = verbd::serve::open_journal(dir, witness).unwrap();
    let (proposals, keys, _) = book.sizes();
    (proposals, keys)
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn restart_after_history(c: &mut Criterion) {
    let dir = history();
    // Peak RSS of one restart, in a fresh process.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("VERBD_BENCH_RESTART_CHILD", &dir)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stderr)
    );
    eprintln!(
        "restart after 1 GiB of history, in a fresh process: {}",
        String::from_utf8_lossy(&child.stdout).trim()
    );
    let mut group = c.benchmark_group("journal");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(20));
    group.bench_function(
        "restart after 1 GiB of daemon history (serve::open_journal: open + book from snapshot)",
        |b| b.iter(|| black_box(restart(&dir))),
    );
    group.finish();
}

fn append_with_sealing(c: &mut Criterion) {
    // The three journals are appended to in turn within every iteration, so a busy disk slows
    // all of them alike; each variant's time counts only its own appends.
    let variants = [
        ("epochs of 1000 records (default)", 1000),
        ("no seal during the run", u64::MAX / 2),
        ("a seal after every record (worst case)", 1),
    ];
    let mut journals: Vec<Journal> = variants
        .iter()
        .map(|(_, epoch_records)| {
            let dir = bench_dir(&format!("append-{epoch_records}"));
            for entry in std::fs::read_dir(&dir).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
            journal::setup_keys(&dir, None, *epoch_records, 24 * 3600).unwrap();
            Journal::open(&dir).unwrap()
        })
        .collect();
    let event = exec(1, None, None);
    let mut group = c.benchmark_group("journal append (fdatasync), interleaved");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(20));
    for (measured, (name, _)) in variants.iter().enumerate() {
        group.bench_function(*name, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    for (index, journal) in journals.iter_mut().enumerate() {
                        let started = std::time::Instant::now();
                        black_box(journal.append(&event).unwrap());
                        if index == measured {
                            total += started.elapsed();
                        }
                    }
                }
                total
            })
        });
    }
    group.finish();
}

fn main() {
    if let Ok(dir) = std::env::var("VERBD_BENCH_RESTART_CHILD") {
        let started = std::time::Instant::now();
        let (proposals, keys) = restart(Path::new(&dir));
        println!(
            "{:?}, peak RSS {} KiB (book: {proposals} proposals, {keys} idempotency keys)",
            started.elapsed(),
            peak_rss_kib()
        );
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    restart_after_history(&mut criterion);
    append_with_sealing(&mut criterion);
    criterion.final_summary();
}
