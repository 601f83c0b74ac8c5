//! Journal benchmarks (results in docs/PERFORMANCE.md):
//!
//! - **restart after 1 GiB of history**: `Journal::open` (the start-up check: from the last seal,
//!   against the witness) plus a streaming replay from the latest state snapshot, on a journal
//!   of 1 GiB in 64 MiB segments with a snapshot every 8 MiB. Timed by criterion; the peak RSS
//!   of one restart is measured in a fresh child process (`VmHWM`) and printed.
//! - **append with forward-secure sealing**: one fdatasync'd append with epochs of 1000 records
//!   (the default), of one record (a seal and a key evolution after every record: the worst
//!   case), and with epochs that never close during the run (no sealing): the sealing cost per
//!   record is the difference.
//!
//! The 1 GiB history is made once on tmpfs (`/dev/shm`, where an fdatasync costs nothing, so it
//! takes seconds instead of most of an hour), copied to `target/bench-journal/` on disk, and
//! reused. The restarts are measured on disk with a warm page cache.
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::Criterion;
use serde::{Deserialize, Serialize};
use serde_json::json;
use verbd::journal::{self, Journal, JournalConfig};

const HISTORY_BYTES: u64 = 1024 * 1024 * 1024;

/// The live state a daemon would snapshot: a few hundred pending items.
#[derive(Serialize, Deserialize)]
struct LiveState {
    pending: Vec<(u64, String)>,
}

fn bench_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-journal")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

fn record(index: u64) -> serde_json::Value {
    // About 2 KiB: an exec record with a realistic argv and arguments.
    json!({
        "kind": "exec",
        "caller": {"uid": 1000, "gid": 1000, "pid": 4242, "user": "agent", "roles": ["agent"]},
        "decision": "run",
        "verb": "logs",
        "args": {"unit": format!("svc{index}.service"), "lines": "200", "filler": "x".repeat(1700)},
        "argv": ["/usr/bin/journalctl", "--no-pager", "-u", format!("svc{index}.service"), "-n", "200"],
    })
}

fn live_state(index: u64) -> LiveState {
    LiveState {
        pending: (0..300)
            .map(|n| (index + n, format!("proposal {n} for svc{index}")))
            .collect(),
    }
}

/// Makes (once) a journal of at least 1 GiB with snapshots every 8 MiB.
fn history() -> PathBuf {
    let dir = bench_dir("history-1gib");
    let done = dir.join("complete");
    if done.exists() {
        return dir;
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    eprintln!(
        "making 1 GiB of journal history for {} (once)…",
        dir.display()
    );
    let scratch = tempfile::Builder::new()
        .prefix("verbd-bench-history-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let mut journal = Journal::open(scratch.path()).unwrap();
    let mut index = 0u64;
    while journal.stats().bytes < HISTORY_BYTES {
        index += 1;
        journal.append(&record(index)).unwrap();
        if journal.snapshot_due() {
            journal.write_snapshot(&live_state(index)).unwrap();
        }
    }
    for tail in 0..500 {
        journal.append(&record(index + tail)).unwrap();
    }
    let stats = journal.stats();
    drop(journal);
    for entry in std::fs::read_dir(scratch.path()).unwrap() {
        let path = entry.unwrap().path();
        let target = dir.join(path.file_name().unwrap());
        std::fs::copy(&path, &target).unwrap();
        std::fs::File::open(&target).unwrap().sync_all().unwrap();
    }
    eprintln!(
        "history: {} bytes in {} segments, last seq {}",
        stats.bytes, stats.segments, stats.last_seq
    );
    std::fs::write(done, b"").unwrap();
    dir
}

/// One restart: open (start-up check) and replay from the latest snapshot.
fn restart(dir: &Path) -> (usize, u64) {
    let journal = Journal::open_with(JournalConfig::new(dir)).unwrap();
    let mut replay = journal.replay::<LiveState>().unwrap();
    let snapshot = replay.snapshot.take().expect("a snapshot");
    let mut applied = 0u64;
    for record in replay.by_ref() {
        applied += record.seq & 1;
    }
    replay.finish().unwrap();
    (snapshot.state.pending.len(), applied)
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
        "restart after 1 GiB of history (open + replay from snapshot)",
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
    let event = record(1);
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
        let (pending, _) = restart(Path::new(&dir));
        println!(
            "{:?}, peak RSS {} KiB (snapshot of {pending} pending items)",
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
