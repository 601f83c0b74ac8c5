//! The hostile-load bench of issue 12: another caller's latency for a trivial verb
//! (`/bin/true`) while one agent attacks a real daemon with everything at once — 500 concurrent
//! connections that send slowly (slowloris), ten-minute `wait`s, 8 MiB request lines and a flood
//! of refused calls; and, alone, connections closed as soon as they are made. Prints a Markdown report: the caller's p50/p99/max idle, under each attack
//! alone, under all of them at once (also with the attacker's processes at nice 19), and what
//! the attacker got each time (target p99 ≤ 100 ms).
//!
//! Every party is a real process with its own uid: the bench re-executes itself as a worker
//! (`VERBD_LOAD_WORKER=<role>`) under the attacker's uid or the caller's, so the daemon sees
//! them by `SO_PEERCRED` exactly as it would see agents. A worker stops when its stdin closes
//! and prints one JSON line of counters.
//!
//! Run as root: `cargo bench --bench load`. Knobs: `VERBD_LOAD_CALLS` (the caller's calls per
//! phase, default 1000), `VERBD_LOAD_CONNECTIONS` (the attacker's concurrent connections,
//! default 500), `VERBD_LOAD_UIDS` (`ATTACKER,CALLER`, default 61960,61961),
//! `VERBD_LOAD_PHASES` (which rows, comma-separated, default all of them: `idle`, `waits`,
//! `slowloris`, `big-lines`, `refusals`, `churn`, `churn-nice`, `all`, `all-nice`).
//!
//! "All four at once" are the issue's four (waits, slow senders, big lines, refusals); the fifth
//! attack, `churn` (connect and close without waiting for an answer), is measured alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use verbd::protocol::{Request, Response, encode_request};

const BIN: &str = env!("CARGO_BIN_EXE_verbd");

const POLICY: &str = r#"
version = 1
[daemon]
user = "nobody"
[roles.agents]
uids = [@ATTACKER@]
[roles.callers]
uids = [@CALLER@]

[verb.true]
description = "does nothing"
category = "read-only"
roles = ["agents", "callers"]
command = "/bin/true"

[verb.private]
description = "not the attacker's: every call of it is a journaled refusal"
category = "read-only"
roles = ["callers"]
command = "/bin/true"

[verb.change]
description = "needs approval: the proposal the attacker waits on"
category = "mutating"
roles = ["agents"]
command = "/bin/echo changed"
"#;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn call(verb: &str) -> Request {
    Request::Call {
        verb: verb.into(),
        args: Default::default(),
        reason: None,
        idempotency_key: None,
        stream: None,
    }
}

/// The socket the workers are given.
fn socket() -> PathBuf {
    PathBuf::from(std::env::var("VERBD_SOCKET").expect("VERBD_SOCKET"))
}

/// Set once the worker's stdin closes.
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        flag.store(true, Ordering::Relaxed);
    });
    stop
}

/// What the daemon sent so far, read without waiting (`None`: nothing yet; `Some(empty)`: it
/// closed the connection without an answer). One read: an answer is one short line.
fn answered(mut stream: &UnixStream) -> Option<Vec<u8>> {
    let mut buffer = [0u8; 1024];
    match stream.read(&mut buffer) {
        Ok(n) => Some(buffer[..n].to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(_) => Some(Vec::new()),
    }
}

fn is_busy(answer: &[u8]) -> bool {
    let line = answer.strip_suffix(b"\n").unwrap_or(answer);
    matches!(Response::decode(line), Ok(Response::Busy { .. }))
}

/// Keeps `count` connections open that send a partial request and then one byte a second,
/// never a newline; a connection the daemon answers or closes is opened again at once.
fn worker_slowloris(count: usize) -> Value {
    let (stop, socket) = (stop_flag(), socket());
    let (mut opened, mut busy, mut closed) = (0u64, 0u64, 0u64);
    // A write that fails is no reason to stop: a refused connection's `busy` is there to read.
    let open = |opened: &mut u64| {
        let mut stream = UnixStream::connect(&socket).ok()?;
        let _ = stream.write_all(b"{\"v\":1,\"op\":");
        stream.set_nonblocking(true).ok()?;
        *opened += 1;
        Some(stream)
    };
    let mut streams: Vec<Option<UnixStream>> = (0..count).map(|_| open(&mut opened)).collect();
    let mut last_trickle = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for slot in streams.iter_mut() {
            if let Some(stream) = slot
                && let Some(line) = answered(stream)
            {
                if is_busy(&line) {
                    busy += 1;
                } else {
                    closed += 1;
                }
                *slot = None;
            }
            if slot.is_none() {
                *slot = open(&mut opened);
            }
        }
        if last_trickle.elapsed() >= Duration::from_secs(1) {
            for stream in streams.iter_mut().flatten() {
                let _ = stream.write(b" ");
            }
            last_trickle = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    json!({"connections": count, "opened": opened, "busy": busy, "dropped_by_daemon": closed})
}

/// Proposes once, then keeps `count` ten-minute `wait`s on the proposal open.
fn worker_waits(count: usize) -> Value {
    let (stop, socket) = (stop_flag(), socket());
    // The other attacks may hold every one of the attacker's connection places: ask until one
    // is free.
    let id = loop {
        match verbd::client::request(&socket, &call("change"), Duration::from_secs(30)) {
            Ok(Response::ConfirmRequired { id, .. }) => break id,
            Ok(Response::Busy { .. }) => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("the attacker's proposal: {other:?}"),
        }
    };
    let wait = encode_request(&Request::Wait {
        id,
        timeout_ms: 600_000,
    });
    let (mut opened, mut busy) = (0u64, 0u64);
    let open = |opened: &mut u64| {
        let mut stream = UnixStream::connect(&socket).ok()?;
        let _ = stream.write_all(&wait);
        stream.set_nonblocking(true).ok()?;
        *opened += 1;
        Some(stream)
    };
    let mut streams: Vec<Option<UnixStream>> = (0..count).map(|_| open(&mut opened)).collect();
    while !stop.load(Ordering::Relaxed) {
        for slot in streams.iter_mut() {
            if let Some(stream) = slot
                && let Some(line) = answered(stream)
            {
                busy += u64::from(is_busy(&line));
                *slot = None;
            }
            if slot.is_none() {
                *slot = open(&mut opened);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    json!({"waits": count, "opened": opened, "busy": busy})
}

/// Sends 8 MiB request lines, one connection after another.
fn worker_big_lines() -> Value {
    let (stop, socket) = (stop_flag(), socket());
    let mut line = vec![b'x'; 8 << 20];
    *line.last_mut().unwrap() = b'\n';
    let (mut sent, mut too_large, mut busy) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = UnixStream::connect(&socket) else {
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        // The daemon stops reading past its limit and answers: the write fails, the answer waits.
        let _ = stream.write_all(&line);
        sent += 1;
        let mut answer = Vec::new();
        let _ = BufReader::new(&stream).read_until(b'\n', &mut answer);
        match Response::decode(&answer) {
            Ok(Response::Error { message }) if message.contains("larger than") => too_large += 1,
            Ok(Response::Busy { .. }) => busy += 1,
            _ => {}
        }
    }
    json!({"sent": sent, "refused_as_too_large": too_large, "busy": busy})
}

/// Four threads calling a verb the attacker may not call: every answer a journaled refusal.
fn worker_refusals() -> Value {
    let (stop, socket) = (stop_flag(), socket());
    let (denied, busy, failed) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let first_failure = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    match verbd::client::request(&socket, &call("private"), Duration::from_secs(30))
                    {
                        Ok(Response::Denied { .. }) => denied.fetch_add(1, Ordering::Relaxed),
                        Ok(Response::Busy { .. }) => busy.fetch_add(1, Ordering::Relaxed),
                        other => {
                            first_failure
                                .lock()
                                .unwrap()
                                .get_or_insert_with(|| format!("{other:?}"));
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            });
        }
    });
    json!({
        "denied": denied.into_inner(),
        "busy": busy.into_inner(),
        "no_answer": failed.into_inner(),
        "first_no_answer": first_failure.into_inner().unwrap(),
    })
}

/// Four threads that connect and close at once, never waiting for an answer: an attacker who
/// read the source and knows a refusal is paced only for those who wait for it.
fn worker_churn() -> Value {
    let (stop, socket) = (stop_flag(), socket());
    let (connected, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    match UnixStream::connect(&socket) {
                        Ok(stream) => {
                            drop(stream);
                            connected.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
    });
    json!({"connected_and_closed": connected.into_inner(), "connect_failed": failed.into_inner()})
}

/// The other caller: `calls` calls of the `/bin/true` verb one after another; each latency.
fn worker_caller(calls: usize) -> Value {
    let socket = socket();
    let mut micros = Vec::with_capacity(calls);
    let mut not_ok = Vec::new();
    for _ in 0..calls {
        let started = Instant::now();
        let answer = verbd::client::request(&socket, &call("true"), Duration::from_secs(60));
        micros.push(started.elapsed().as_micros() as u64);
        match answer {
            Ok(Response::Ok { result, .. }) if result.exit.code == Some(0) => {}
            other => not_ok.push(format!("{other:?}")),
        }
    }
    json!({"micros": micros, "not_ok": not_ok})
}

fn worker(role: &str) {
    let report = match role.split_once(':') {
        Some(("slowloris", n)) => worker_slowloris(n.parse().unwrap()),
        Some(("waits", n)) => worker_waits(n.parse().unwrap()),
        Some(("caller", n)) => worker_caller(n.parse().unwrap()),
        _ if role == "big-lines" => worker_big_lines(),
        _ if role == "refusals" => worker_refusals(),
        _ if role == "churn" => worker_churn(),
        _ => panic!("unknown worker {role}"),
    };
    println!("{report}");
}

/// A worker process: this bench binary again, as `uid`; `niceness` (0–19) lowers its CPU share,
/// as an agent's own slice with a lower `CPUWeight=` would.
fn spawn_worker(role: &str, uid: u32, socket: &Path, niceness: u8) -> Child {
    Command::new("nice")
        .arg(format!("-n{niceness}"))
        .arg(std::env::current_exe().unwrap())
        .env("VERBD_LOAD_WORKER", role)
        .env("VERBD_SOCKET", socket)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a worker")
}

/// Tells a worker to stop (closes its stdin) and returns its report.
fn finish(mut child: Child) -> Value {
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "a worker failed: {output:?}");
    serde_json::from_slice(&output.stdout).expect("a worker's report")
}

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(attacker: u32, caller: u32) -> Daemon {
    let dir = tempfile::Builder::new()
        .prefix("verbd-load-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        POLICY
            .replace("@ATTACKER@", &attacker.to_string())
            .replace("@CALLER@", &caller.to_string()),
    )
    .unwrap();
    let socket = dir.path().join("verbd.sock");
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("VERBD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start verbd serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    Daemon {
        child,
        socket,
        _dir: dir,
    }
}

/// (p50, p99, max) in milliseconds, and the number of calls that did not run.
fn summary(report: &Value) -> (f64, f64, f64, usize) {
    let mut micros: Vec<u64> = report["micros"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    micros.sort_unstable();
    let at = |per_mille: usize| {
        micros[(micros.len() * per_mille / 1000).min(micros.len() - 1)] as f64 / 1000.0
    };
    let not_ok = report["not_ok"].as_array().unwrap();
    if let Some(first) = not_ok.first() {
        eprintln!("{} calls did not run; the first: {first}", not_ok.len());
    }
    (at(500), at(990), at(1000), not_ok.len())
}

fn main() {
    if let Ok(role) = std::env::var("VERBD_LOAD_WORKER") {
        return worker(&role);
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "run as root: the attacker and the caller are processes with uids of their own"
    );
    let calls = env_number("VERBD_LOAD_CALLS", 1000);
    let connections = env_number("VERBD_LOAD_CONNECTIONS", 500);
    let (attacker, caller) = std::env::var("VERBD_LOAD_UIDS")
        .ok()
        .and_then(|uids| {
            let (a, c) = uids.split_once(',')?;
            Some((a.parse().ok()?, c.parse().ok()?))
        })
        .unwrap_or((61960u32, 61961u32));

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("# verbd hostile-load bench (issue 12)\n");
    println!(
        "{} · {} × {} · kernel {} · load average at start {}\n",
        verbd::journal::format_rfc3339(SystemTime::now()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu,
        kernel.trim(),
        load_average()
    );

    let daemon = start_daemon(attacker, caller);
    let socket = daemon.socket.clone();
    let caller_role = format!("caller:{calls}");
    let measure = || finish(spawn_worker(&caller_role, caller, &socket, 0));
    let attacks = [
        (
            "waits:300".to_string(),
            "300 ten-minute `wait`s on its own proposal, each reopened as soon as the daemon answers",
        ),
        (
            format!("slowloris:{connections}"),
            "concurrent slow senders (partial line, a byte a second), reopened likewise",
        ),
        (
            "big-lines".to_string(),
            "8 MiB request lines, one after another",
        ),
        (
            "refusals".to_string(),
            "calls of a verb it may not call, from 4 threads (each a journaled refusal)",
        ),
        (
            "churn".to_string(),
            "connects and closes at once from 4 threads, never waiting for an answer",
        ),
    ];
    // One attack or all of them (the waits first, so that they are parked before the others take
    // the attacker's places), then the other caller's calls.
    let attack = |which: &[usize], niceness: u8| {
        let mut attackers = Vec::new();
        for &index in which {
            attackers.push(spawn_worker(&attacks[index].0, attacker, &socket, niceness));
            std::thread::sleep(Duration::from_secs(1));
        }
        std::thread::sleep(Duration::from_secs(2));
        let load = load_average();
        let measured = measure();
        let reports: Vec<Value> = attackers.into_iter().map(finish).collect();
        (measured, load, reports)
    };

    println!("## Another caller's `/bin/true` verb ({calls} calls one after another)\n");
    println!("| phase | p50 | p99 | max | calls that did not run | what the attacker got |");
    println!("|---|---|---|---|---|---|");
    let row = |phase: &str, report: &Value, load: &str, attacker_got: &str| {
        let (p50, p99, max, failed) = summary(report);
        println!(
            "| {phase} (load average {load}) | {p50:.2} ms | {p99:.2} ms | {max:.2} ms | {failed} | {attacker_got} |"
        );
        p99
    };
    let phases = std::env::var("VERBD_LOAD_PHASES").unwrap_or_else(|_| {
        "idle,waits,slowloris,big-lines,refusals,churn,churn-nice,all,all-nice".into()
    });
    let wanted = |phase: &str| phases.split(',').any(|p| p.trim() == phase);
    if wanted("idle") {
        let idle = measure();
        row("idle daemon", &idle, &load_average(), "");
    }
    let mut alone = Vec::new();
    for (index, (role, name)) in attacks.iter().enumerate() {
        if !wanted(role.split(':').next().unwrap_or(role)) {
            continue;
        }
        let (measured, load, reports) = attack(&[index], 0);
        let name = if role.starts_with("slowloris") {
            format!("{connections} {name}")
        } else {
            name.to_string()
        };
        alone.push(row(
            &format!("one agent: {name}"),
            &measured,
            &load,
            &format!("`{}`", reports[0]),
        ));
    }
    let churn_nice = wanted("churn-nice").then(|| {
        let (measured, load, reports) = attack(&[4], 19);
        row(
            "the churn alone, the attacker's processes at nice 19",
            &measured,
            &load,
            &format!("`{}`", reports[0]),
        )
    });
    let all_of_them = [0, 1, 2, 3];
    let all_at_once = |phase: &str, niceness: u8| {
        let (measured, load, reports) = attack(&all_of_them, niceness);
        let got: Vec<String> = reports.iter().map(|r| format!("`{r}`")).collect();
        row(phase, &measured, &load, &got.join("<br>"))
    };
    let all = wanted("all").then(|| all_at_once("one agent: all four at once", 0));
    let nice = wanted("all-nice")
        .then(|| all_at_once("the same, the attacker's processes at nice 19", 19));
    let worst_alone = alone.iter().copied().reduce(f64::max);
    let said = |p99: Option<f64>| match p99 {
        Some(p99) => format!("{} ({p99:.2} ms)", verdict(p99)),
        None => "not measured".into(),
    };
    println!(
        "\nTarget p99 ≤ 100 ms under attack: {} for the worst attack alone; {} for all four at \
         once; {} for all four at once and {} for the churn with the attacker's CPU share limited.",
        said(worst_alone),
        said(all),
        said(nice),
        said(churn_nice)
    );
}

fn verdict(p99: f64) -> &'static str {
    if p99 <= 100.0 {
        "**met**"
    } else {
        "**not met**"
    }
}
