//! What `verbd hook claude-code` adds to a Bash tool call: the wall time from spawning the hook
//! (as Claude Code does, the tool call as JSON on stdin) to its exit, against a real daemon on a
//! policy of 50+ verbs (the systemd, journald, files and git packs) whose agent role has
//! `commands = "rewrite"`. Three answers, interleaved so machine load hits them alike: `pass`
//! (the agent's own `cargo test`), `rewrite` (`sudo journalctl … | grep -i error`, journaled)
//! and `refuse` (`sudo rm -rf …`, journaled). Beside each, the daemon's share: the same
//! `command` request sent from this process (no process start). Two baselines run in the same
//! rounds with the same stdin: `/bin/true` (what any hook process costs) and `verbd --version`
//! (this binary's start and exit, no socket). Prints a Markdown table of p50/p99/max in
//! milliseconds, one run.
//!
//! Each round acts as the next of [`AGENT_UIDS`] (every process it spawns, and the daemon's-share
//! request, sent from a thread whose ids alone are changed): a uid past its share of full
//! records in a window (20 per 10 s) has its further mappings and refusals only counted, and one
//! uid at this bench's pace would pass it in a second. With 64 uids each makes a few calls per
//! 10 s, like an agent making a Bash call every few seconds, so every `rewrite` and `refuse`
//! timed is journaled in full. The run ends by counting the journal's records to show it.
//!
//! `cargo bench --bench hook`. Needs root (the daemon runs as root with `allow_root`; the
//! journal lives in a temporary directory). Knobs: `VERBD_BENCH_ITERATIONS` (default 300);
//! `VERBD_BENCH_BIN`, the `verbd` binary the daemon, the hook rows and `verbd --version` run
//! (default the one built with this bench); `VERBD_BENCH_BEFORE`, another `verbd` binary (an
//! older build) whose hook runs in the same rounds against the same daemon, its rows marked
//! `(before)`: a before/after comparison in one run.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use verbd::protocol::{Request, Response};

/// The `verbd` binary under test: `VERBD_BENCH_BIN`, or the one built with this bench.
fn bin() -> String {
    std::env::var("VERBD_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_verbd").to_string())
}

const POLICY: &str = r#"
version = 1
include = [
  "@PACKS@/systemd.toml",
  "@PACKS@/journald.toml",
  "@PACKS@/files.toml",
  { path = "@PACKS@/git.toml", values = { repo = ["/srv/app"] } },
]
[daemon]
allow_root = true
[roles.agent]
uids = [0, @AGENTS@]
commands = "rewrite"
[roles.sre]
kind = "human"
uids = [63399]
[approvals]
approvers = ["sre"]
[commands]
privileged_paths = ["/var/log", "/var/lib"]
"#;

const CASES: &[(&str, &str)] = &[
    ("pass", "cargo test --lib 2>&1 | tail -n 20"),
    (
        "rewrite",
        "sudo journalctl -u nginx.service -n 50 --no-pager | grep -i error",
    ),
    ("refuse", "sudo rm -rf /var/lib/app/cache"),
];

/// The agent uids the rounds act as in turn (see the module docs).
const AGENT_UIDS: std::ops::Range<u32> = 63400..63464;

/// Send `request` from a thread running as `uid` (its own ids only, changed by raw syscalls:
/// glibc's wrappers would change every thread's) and time it there.
fn request_as(uid: u32, socket: &Path, request: Request) -> (Response, Duration) {
    let socket = socket.to_owned();
    std::thread::spawn(move || {
        // SAFETY: raw id syscalls on this thread only; it does nothing after the request.
        let dropped = unsafe {
            libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
                && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
        };
        assert!(dropped, "cannot act as uid {uid}");
        let begin = Instant::now();
        let answer = verbd::client::request(&socket, &request, Duration::from_secs(5)).unwrap();
        (answer, begin.elapsed())
    })
    .join()
    .unwrap()
}

fn bash_call(command: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "session_id": "bench",
        "transcript_path": "/tmp/bench.jsonl",
        "cwd": "/srv/app",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": { "command": command, "description": "bench" },
        "tool_use_id": "toolu_bench"
    }))
    .unwrap()
}

/// Spawn `command` as Claude Code spawns a hook: `input` on stdin, stdout captured.
fn spawn_with_stdin(command: &mut Command, input: &[u8]) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `/bin/true` may exit before reading: a broken pipe is part of that baseline.
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("hook bench: needs root; skipped");
        return;
    }
    let iterations: usize = std::env::var("VERBD_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::Builder::new()
        .prefix("verbd-hook-bench-")
        .tempdir()
        .unwrap();
    // The agent uids reach the socket in it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let packs = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/packs");
    let policy = dir.path().join("policy.toml");
    let agents: Vec<String> = AGENT_UIDS.map(|uid| uid.to_string()).collect();
    std::fs::write(
        &policy,
        POLICY
            .replace("@PACKS@", packs.to_str().unwrap())
            .replace("@AGENTS@", &agents.join(", ")),
    )
    .unwrap();
    let socket = dir.path().join("verbd.sock");
    let bin = bin();
    let mut daemon = Command::new(&bin)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the daemon did not start: {}",
            std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    let inputs: Vec<Vec<u8>> = CASES.iter().map(|(_, c)| bash_call(c)).collect();
    // The hook binaries timed: this build's, and the one before it when asked.
    let mut hooks: Vec<(String, String)> = vec![(bin.clone(), String::new())];
    if let Some(before) = std::env::var_os("VERBD_BENCH_BEFORE") {
        hooks.push((before.to_string_lossy().into_owned(), " (before)".into()));
    }
    let baselines: [(&str, &str, &[&str]); 2] = [
        ("`/bin/true` (any hook process)", "/bin/true", &[]),
        ("`verbd --version` (binary start)", &bin, &["--version"]),
    ];
    let mut baseline_times: Vec<Vec<Duration>> = vec![Vec::new(); baselines.len()];
    let mut hook_times: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); CASES.len()]; hooks.len()];
    let mut daemon_times: Vec<Vec<Duration>> = vec![Vec::new(); CASES.len()];
    for round in 0..iterations + 10 {
        let uid = AGENT_UIDS.start + round as u32 % AGENT_UIDS.len() as u32;
        for (index, (_, program, args)) in baselines.iter().enumerate() {
            let begin = Instant::now();
            let output = spawn_with_stdin(
                Command::new(program).args(*args).uid(uid).gid(uid),
                &inputs[1],
            );
            let took = begin.elapsed();
            assert!(output.status.success(), "{program}: {output:?}");
            if round >= 10 {
                baseline_times[index].push(took);
            }
        }
        for (index, (name, command)) in CASES.iter().enumerate() {
            for (which, (binary, _)) in hooks.iter().enumerate() {
                let begin = Instant::now();
                let output = spawn_with_stdin(
                    Command::new(binary)
                        .args(["hook", "claude-code", "--socket"])
                        .arg(&socket)
                        .uid(uid)
                        .gid(uid),
                    &inputs[index],
                );
                let hook = begin.elapsed();
                let expected = match *name {
                    "pass" => output.status.code() == Some(0) && output.stdout.is_empty(),
                    "rewrite" => output.status.code() == Some(0) && !output.stdout.is_empty(),
                    _ => output.status.code() == Some(2),
                };
                assert!(expected, "{name}{}: {output:?}", hooks[which].1);
                if round >= 10 {
                    hook_times[which][index].push(hook);
                }
            }

            let (answer, in_daemon) = request_as(
                uid,
                &socket,
                Request::Command {
                    command: command.to_string(),
                    cwd: Some("/srv/app".into()),
                    tool: Some("bench".into()),
                },
            );
            assert!(matches!(answer, Response::Command { .. }), "{answer:?}");
            if round >= 10 {
                daemon_times[index].push(in_daemon);
            }
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = daemon.wait();
    // Every mapping and refusal timed was journaled in full, none only counted.
    let journal = std::fs::read_to_string(dir.path().join("state/journal.jsonl")).unwrap();
    let kinds: Vec<String> = journal
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|record| {
            let event = &record["event"];
            format!("{} {}", event["kind"], event["decision"])
        })
        .collect();
    let count = |kind: &str| kinds.iter().filter(|k| k.as_str() == kind).count();
    let counted =
        count("\"commands_coalesced\" \"rewrite\"") + count("\"refusals_coalesced\" null");
    println!(
        "journal: {} rewrite and {} refuse `command_mapped` records, {counted} coalesced counts",
        count("\"command_mapped\" \"rewrite\""),
        count("\"command_mapped\" \"refuse\""),
    );

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "verbd hook claude-code on Bash: {iterations} calls per answer, interleaved; load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!(
        "| answer | hook process p50 | p99 | max | daemon's share (request from a thread, no process start) p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|");
    for (index, (name, _, _)) in baselines.iter().enumerate() {
        let times = &mut baseline_times[index];
        times.sort();
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | – | – |",
            percentile(times, 0.5),
            percentile(times, 0.99),
            percentile(times, 1.0),
        );
    }
    for (index, (name, _)) in CASES.iter().enumerate() {
        daemon_times[index].sort();
        let d = &daemon_times[index];
        for (which, (_, label)) in hooks.iter().enumerate() {
            let h = &mut hook_times[which][index];
            h.sort();
            println!(
                "| {name}{label} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
                percentile(h, 0.5),
                percentile(h, 0.99),
                percentile(h, 1.0),
                percentile(d, 0.5),
                percentile(d, 0.99),
            );
        }
    }
}
