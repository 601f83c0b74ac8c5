//! The overhead bench of issue 16, in one run, side by side: what a verb call costs next to a
//! raw spawn of the same program, next to `sudo -n` and `bwrap`, how throughput scales with
//! concurrent clients, the daemon's memory, and the journal's appends/s with and without group
//! commit. Prints a Markdown report (docs/PERFORMANCE.md's headline table is made from it).
//!
//! Every comparison interleaves its variants (latency: each iteration runs every variant once,
//! in turn; throughput and journal: A-B-B-A phases), so machine load hits all of them alike and
//! the ratios stay meaningful on a busy machine; the load average is printed with the results.
//!
//! Run with `benches/overhead.sh` (installs sudo and bubblewrap when missing) or
//! `cargo bench --bench overhead`. Needs root (the daemon drops to `nobody`; proposals come from
//! real uids). Knobs: `VERBD_BENCH_ITERATIONS` (latency samples per variant, default 300),
//! `VERBD_BENCH_SECONDS` (per throughput/journal measurement, default 4),
//! `VERBD_BENCH_REQUESTER_UIDS` (`FIRST-LAST`, default 61900-61949: 20 pending proposals each),
//! `VERBD_BENCH_BIN` (the `verbd` binary the daemon and the CLI rows run, default the one this
//! bench was built with: a before/after comparison runs one bench binary against two daemons).
//! The last table checks every target of the spawner work (issue 31) from this one run.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use verbd::journal::{GroupCommit, Journal};
use verbd::protocol::{Request, Response};

/// The `verbd` binary under test: `VERBD_BENCH_BIN`, or the one built with this bench.
fn bin() -> PathBuf {
    std::env::var_os("VERBD_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_verbd")))
}

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

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// RSS of `pid` and of every process below it (the daemon's helper processes), in KiB. A
/// child belongs to the *thread* that started it (the spawner to the daemon's spawner keeper
/// thread), so every task's `children` is read.
fn rss_tree_kib(pid: u32) -> u64 {
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
                .flat_map(|text| {
                    text.split_whitespace()
                        .filter_map(|child| child.parse().ok())
                        .collect::<Vec<u32>>()
                })
                .collect()
        })
        .unwrap_or_default();
    rss_kib(pid) + children.into_iter().map(rss_tree_kib).sum::<u64>()
}

fn installed(program: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.exists())
}

/// A daemon on a temp socket, killed on drop.
struct Daemon {
    child: std::process::Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// `policy`: `None` for the embedded demo policy.
    fn start(policy: Option<&str>) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("verbd-bench-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("verbd.sock");
        let mut command = Command::new(bin());
        command.arg("serve");
        if let Some(text) = policy {
            let path = dir.path().join("policy.toml");
            std::fs::write(&path, text).unwrap();
            command.arg("--policy").arg(path);
        }
        let child = command
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .env("VERBD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start verbd serve");
        let daemon = Daemon {
            child,
            socket,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&daemon.socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        daemon
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn echo_request() -> Request {
    Request::Call {
        verb: "echo".into(),
        args: [("text".to_string(), Value::from("x"))]
            .into_iter()
            .collect(),
        reason: None,
        idempotency_key: None,
        stream: None,
    }
}

/// One verb call; `true` when it ran, `false` for `busy` (anything else is a bench failure).
fn call(socket: &Path, request: &Request) -> bool {
    match verbd::client::request(socket, request, Duration::from_secs(60)) {
        Ok(Response::Ok { result, .. }) => {
            assert_eq!(result.stdout, "x\n");
            true
        }
        Ok(Response::Busy { .. }) => false,
        other => panic!("echo verb: {other:?}"),
    }
}

/// posix_spawn of `/bin/echo x` with stdout on /dev/null, then waitpid: the least a spawn costs.
fn posix_spawn_echo() {
    let program = CString::new("/bin/echo").unwrap();
    let arg = CString::new("x").unwrap();
    let devnull = CString::new("/dev/null").unwrap();
    let argv = [program.as_ptr(), arg.as_ptr(), std::ptr::null()];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let mut actions = std::mem::MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
    let mut pid: libc::pid_t = 0;
    // SAFETY: `actions` is initialized by posix_spawn_file_actions_init before use and destroyed
    // after; every string outlives the call; argv and envp are null-terminated arrays.
    let spawned = unsafe {
        assert_eq!(libc::posix_spawn_file_actions_init(actions.as_mut_ptr()), 0);
        libc::posix_spawn_file_actions_addopen(
            actions.as_mut_ptr(),
            1,
            devnull.as_ptr(),
            libc::O_WRONLY,
            0,
        );
        let spawned = libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            actions.as_ptr(),
            std::ptr::null(),
            argv.as_ptr() as *const *mut libc::c_char,
            envp.as_ptr() as *const *mut libc::c_char,
        );
        libc::posix_spawn_file_actions_destroy(actions.as_mut_ptr());
        spawned
    };
    assert_eq!(spawned, 0, "posix_spawn failed");
    let mut status = 0;
    // SAFETY: waits for the child spawned above; `status` is a valid int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
}

fn std_spawn_echo() {
    let status = Command::new("/bin/echo")
        .arg("x")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

fn micros(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

type Variant<'a> = (String, Box<dyn FnMut() + 'a>);

/// Each variant once per iteration, in turn; p50 and p99 per variant.
fn latencies(variants: &mut [Variant<'_>], iterations: usize) -> Vec<(String, Duration, Duration)> {
    for _ in 0..20 {
        for (_, run) in variants.iter_mut() {
            run();
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(iterations); variants.len()];
    for _ in 0..iterations {
        for (index, (_, run)) in variants.iter_mut().enumerate() {
            let started = Instant::now();
            run();
            samples[index].push(started.elapsed());
        }
    }
    variants
        .iter()
        .zip(samples)
        .map(|((name, _), mut times)| {
            times.sort_unstable();
            (
                name.clone(),
                percentile(&times, 500),
                percentile(&times, 990),
            )
        })
        .collect()
}

/// What `clients` threads running `work` for a while did.
struct Phase {
    per_second: f64,
    refused: u64,
    /// The time of every completed call.
    latencies: Vec<Duration>,
}

/// `clients` threads running `work` for `duration`.
fn throughput(clients: usize, duration: Duration, work: &(dyn Fn() -> bool + Sync)) -> Phase {
    let refused = AtomicU64::new(0);
    let latencies = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..clients {
            scope.spawn(|| {
                let mut own = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let call_started = Instant::now();
                    if work() {
                        own.push(call_started.elapsed());
                    } else {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies.lock().unwrap().extend(own);
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = started.elapsed().as_secs_f64();
    let latencies = latencies.into_inner().unwrap();
    Phase {
        per_second: latencies.len() as f64 / elapsed,
        refused: refused.load(Ordering::Relaxed),
        latencies,
    }
}

/// A-B-B-A: (A, B), each phase pair merged (rates averaged, latencies pooled).
fn side_by_side(
    clients: usize,
    seconds: u64,
    a: &(dyn Fn() -> bool + Sync),
    b: &(dyn Fn() -> bool + Sync),
) -> (Phase, Phase) {
    let half = Duration::from_millis(seconds * 500);
    let a1 = throughput(clients, half, a);
    let b1 = throughput(clients, half, b);
    let b2 = throughput(clients, half, b);
    let a2 = throughput(clients, half, a);
    let merge = |mut first: Phase, second: Phase| {
        first.latencies.extend(second.latencies);
        first.latencies.sort_unstable();
        Phase {
            per_second: (first.per_second + second.per_second) / 2.0,
            refused: first.refused + second.refused,
            latencies: first.latencies,
        }
    };
    (merge(a1, a2), merge(b1, b2))
}

const PROPOSAL_POLICY: &str = r#"
version = 1
[daemon]
user = "nobody"
[roles.ops]
kind = "human"
uids = [0]
[roles.agents]
uids = [@UIDS@]
[approvals]
approvers = ["ops"]

[verb.restart]
description = "needs approval"
category = "mutating"
roles = ["agents"]
command = "/bin/echo restart {n}"
params.n = { type = "int", min = 0, max = 1000000 }
"#;

/// Fills a daemon with pending proposals (20 per requester uid, the fixed cap) through the CLI
/// run as each uid; returns (RSS KiB before them, RSS KiB with them, proposals counted). The
/// first requester's 20 are made before the baseline is read: they bring back the proposal
/// path's pages the daemon handed back after its start, which are not the proposals' memory.
fn proposals_rss(uids: std::ops::RangeInclusive<u32>) -> (u64, u64, u64) {
    let list: Vec<String> = uids.clone().map(|uid| uid.to_string()).collect();
    let daemon = Daemon::start(Some(&PROPOSAL_POLICY.replace("@UIDS@", &list.join(", "))));
    let created = AtomicU64::new(0);
    let propose = |uid: u32| {
        for n in 0..20 {
            let output = Command::new(bin())
                .args(["call", "restart", &format!("n={n}")])
                .env("VERBD_SOCKET", &daemon.socket)
                .uid(uid)
                .gid(uid)
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(73), "{output:?}");
            created.fetch_add(1, Ordering::Relaxed);
        }
    };
    let uids: Vec<u32> = uids.collect();
    let (first, rest) = uids.split_first().expect("at least one requester uid");
    std::thread::sleep(Duration::from_millis(500));
    propose(*first);
    std::thread::sleep(Duration::from_millis(500));
    let idle = rss_kib(daemon.pid());
    let warm = created.load(Ordering::Relaxed);
    std::thread::scope(|scope| {
        for chunk in rest.chunks(rest.len().div_ceil(8).max(1)) {
            let propose = &propose;
            scope.spawn(move || chunk.iter().for_each(|&uid| propose(uid)));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    (
        idle,
        rss_kib(daemon.pid()),
        created.load(Ordering::Relaxed) - warm,
    )
}

fn call_event(index: u64) -> Value {
    json!({
        "kind": "exec",
        "caller": {"uid": 61900, "user": "agent", "pid": 4242, "roles": ["agents"]},
        "verb": "echo",
        "args": {"text": format!("x{index}")},
        "argv_sha256": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
    })
}

/// Journal appends/s at `appenders` threads: one journal behind a mutex (an fdatasync per
/// record) and one behind [`GroupCommit`], A-B-B-A. Returns (plain/s, group/s, records per
/// fdatasync in the group run).
fn journal_appends(root: &Path, appenders: usize, seconds: u64) -> (f64, f64, f64) {
    let plain_dir = tempfile::tempdir_in(root).unwrap();
    let group_dir = tempfile::tempdir_in(root).unwrap();
    let plain = Mutex::new(Journal::open(&plain_dir.path().join("state")).unwrap());
    let group = GroupCommit::new(
        Journal::open(&group_dir.path().join("state")).unwrap(),
        |_: &Value, _: &verbd::journal::Appended| {},
    );
    let counter = AtomicU64::new(0);
    let plain_append = || {
        let index = counter.fetch_add(1, Ordering::Relaxed);
        plain.lock().unwrap().append(&call_event(index)).unwrap();
        true
    };
    let group_append = || {
        let index = counter.fetch_add(1, Ordering::Relaxed);
        group.append(call_event(index)).unwrap();
        true
    };
    let syncs_before = group.lock().unwrap().stats();
    let (plain, group_phase) = side_by_side(appenders, seconds, &plain_append, &group_append);
    let (plain_rate, group_rate) = (plain.per_second, group_phase.per_second);
    let syncs_after = group.lock().unwrap().stats();
    let records = syncs_after.appended_records - syncs_before.appended_records;
    let syncs = syncs_after.record_syncs - syncs_before.record_syncs;
    (plain_rate, group_rate, records as f64 / syncs.max(1) as f64)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported (the run is one table).
    assert!(
        nix::unistd::geteuid().is_root(),
        "run as root: the daemon drops to nobody and proposals come from real uids"
    );
    let iterations = env_number("VERBD_BENCH_ITERATIONS", 300) as usize;
    let seconds = env_number("VERBD_BENCH_SECONDS", 4);
    let requester_uids = std::env::var("VERBD_BENCH_REQUESTER_UIDS")
        .ok()
        .and_then(|range| {
            let (first, last) = range.split_once('-')?;
            Some(first.parse::<u32>().ok()?..=last.parse::<u32>().ok()?)
        })
        .unwrap_or(61900..=61949);

    let load_before = load_average();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("# verbd overhead bench (issue 16)\n");
    println!(
        "{} · {} × {} · kernel {} · load average at start {}\n",
        verbd::journal::format_rfc3339(SystemTime::now()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu,
        kernel.trim(),
        load_before
    );

    let daemon = Daemon::start(None);
    std::thread::sleep(Duration::from_millis(300));
    let idle_rss = rss_kib(daemon.pid());
    let idle_rss_tree = rss_tree_kib(daemon.pid());

    // Latency, interleaved.
    let demo = verbd::policy::compile(verbd::policy::DEMO_POLICY, "demo").unwrap();
    let sandbox =
        verbd::sandbox::PreparedSandbox::prepare(demo.sandboxes["default"].clone()).unwrap();
    let request = echo_request();
    let socket = daemon.socket.clone();
    let mut variants: Vec<Variant<'_>> = vec![
        (
            "raw posix_spawn `/bin/echo x`".into(),
            Box::new(posix_spawn_echo),
        ),
        (
            "raw `std::process::Command` `/bin/echo x`".into(),
            Box::new(std_spawn_echo),
        ),
        (
            "sandboxed spawn (the daemon's `pre_exec`, demo `default` profile)".into(),
            Box::new(|| {
                let mut command = Command::new("/bin/echo");
                command.arg("x").env_clear().stdout(Stdio::null());
                sandbox.install_std(&mut command).unwrap();
                assert!(command.status().unwrap().success());
            }),
        ),
        (
            "verb round trip in-process (`verbd::client::request`, `echo text=x`)".into(),
            Box::new(|| assert!(call(&socket, &request))),
        ),
        (
            "`verbd call echo text=x` (whole CLI process)".into(),
            Box::new(|| {
                let status = Command::new(bin())
                    .args(["call", "echo", "text=x"])
                    .env("VERBD_SOCKET", &socket)
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
            }),
        ),
    ];
    variants.push((
        "`verbd --version` (the CLI binary's start alone)".into(),
        Box::new(|| {
            let status = Command::new(bin())
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }),
    ));
    variants.push((
        "`/bin/true`".into(),
        Box::new(|| assert!(Command::new("/bin/true").status().unwrap().success())),
    ));
    if let Some(sudo) = installed("sudo") {
        variants.push((
            "`sudo -n /bin/echo x`".into(),
            Box::new(move || {
                let status = Command::new(&sudo)
                    .args(["-n", "/bin/echo", "x"])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
            }),
        ));
    }
    if let Some(bwrap) = installed("bwrap") {
        variants.push((
            "`bwrap --ro-bind / / --unshare-net /bin/echo x`".into(),
            Box::new(move || {
                let status = Command::new(&bwrap)
                    .args(["--ro-bind", "/", "/", "--unshare-net", "/bin/echo", "x"])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
            }),
        ));
    }
    let results = latencies(&mut variants, iterations);
    drop(variants);
    // The idle figure that counts: after calls, not only before the first one (the daemon and
    // the spawner hand back the start-up's pages; what a call uses comes back). Read 1 s after
    // the runs, and again once a quiet spell has passed (the daemon then hands back the pages
    // the calls touched, `server::idle`); then the call after a quiet spell, three times.
    std::thread::sleep(Duration::from_secs(1));
    let served_rss_tree = rss_tree_kib(daemon.pid());
    let quiet = verbd::server::idle::IDLE_RELEASE_AFTER + Duration::from_secs(2);
    std::thread::sleep(quiet - Duration::from_secs(1));
    let quiet_rss_tree = rss_tree_kib(daemon.pid());
    let mut after_quiet = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        assert!(call(&socket, &request));
        after_quiet.push(started.elapsed());
        std::thread::sleep(quiet);
    }
    let std_p50 = results[1].1;
    println!("## Latency ({iterations} iterations, variants interleaved)\n");
    println!("| variant | p50 | p99 | p50 vs raw std spawn |");
    println!("|---|---|---|---|");
    for (name, p50, p99) in &results {
        println!(
            "| {name} | {} | {} | {:.2}× |",
            micros(*p50),
            micros(*p99),
            p50.as_secs_f64() / std_p50.as_secs_f64()
        );
    }
    let find = |prefix: &str| results.iter().find(|(name, ..)| name.starts_with(prefix));
    if let (Some(cli), Some(sudo)) = (find("`verbd call"), find("`sudo")) {
        println!(
            "\n`verbd call` vs `sudo -n`: **{:.2}×** (p50)",
            cli.1.as_secs_f64() / sudo.1.as_secs_f64()
        );
    }
    if let (Some(sandboxed), Some(round_trip)) = (find("sandboxed"), find("verb round trip")) {
        println!(
            "verb round trip vs raw std spawn: **{:.2}×**; sandbox set-up per child (sandboxed − \
             raw std spawn, the most pre-restricted spawners could save): **{}**",
            round_trip.1.as_secs_f64() / std_p50.as_secs_f64(),
            micros(sandboxed.1.saturating_sub(std_p50))
        );
    }

    // Throughput, A-B-B-A.
    println!("\n## Throughput ({seconds} s per variant, verb calls vs raw spawns, A-B-B-A)\n");
    println!(
        "| concurrent clients | verb calls/s | `busy` answers | raw spawns/s | ratio | verb call p50 | p99 | p99/p50 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut by_clients = Vec::new();
    for clients in [1, 8, 16, 32, 128] {
        let verb = || call(&daemon.socket, &request);
        let raw = || {
            std_spawn_echo();
            true
        };
        let (calls, spawns) = side_by_side(clients, seconds, &verb, &raw);
        let (p50, p99) = (
            percentile(&calls.latencies, 500),
            percentile(&calls.latencies, 990),
        );
        let ratio = calls.per_second / spawns.per_second;
        println!(
            "| {clients} | {:.0} | {} | {:.0} | {ratio:.2}× | {} | {} | {:.2}× |",
            calls.per_second,
            calls.refused,
            spawns.per_second,
            micros(p50),
            micros(p99),
            p99.as_secs_f64() / p50.as_secs_f64()
        );
        by_clients.push((clients, ratio, calls.refused, p50, p99));
    }
    std::thread::sleep(Duration::from_millis(500));
    let after_rss = rss_kib(daemon.pid());
    drop(daemon);

    // Memory.
    let (proposal_idle, with_proposals, proposals) = proposals_rss(requester_uids);
    let per_proposal =
        (with_proposals.saturating_sub(proposal_idle)) as f64 * 1024.0 / proposals.max(1) as f64;
    println!("\n## Daemon memory (VmRSS)\n");
    println!("| state | RSS |");
    println!("|---|---|");
    println!(
        "| idle, demo policy, just started | {:.1} MiB |",
        idle_rss as f64 / 1024.0
    );
    println!(
        "| the same, with the daemon's helper processes (spawner) summed | {:.1} MiB |",
        idle_rss_tree as f64 / 1024.0
    );
    println!(
        "| the same, 1 s after the latency runs ({iterations} iterations) | {:.1} MiB |",
        served_rss_tree as f64 / 1024.0
    );
    println!(
        "| the same, after a quiet spell of {} s following them | {:.1} MiB |",
        quiet.as_secs(),
        quiet_rss_tree as f64 / 1024.0
    );
    println!(
        "| idle after the throughput runs | {:.1} MiB |",
        after_rss as f64 / 1024.0
    );
    println!(
        "| {proposals} more pending proposals (before them, with a first requester's 20: {:.1} MiB) | {:.1} MiB, {:.0} bytes per proposal |",
        proposal_idle as f64 / 1024.0,
        with_proposals as f64 / 1024.0,
        per_proposal
    );
    println!(
        "| 10,000 pending proposals, extrapolated from that | {:.1} MiB |",
        (proposal_idle as f64 * 1024.0 + per_proposal * 10_000.0) / 1024.0 / 1024.0
    );

    // Journal.
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    println!(
        "\n## Journal appends/s ({seconds} s per variant, A-B-B-A, fdatasync'd, on {})\n",
        root.display()
    );
    println!(
        "| appenders | one fdatasync per record | group commit | ratio | records per fdatasync |"
    );
    println!("|---|---|---|---|---|");
    for appenders in [1, 8, 32] {
        let (plain, group, per_sync) = journal_appends(&root, appenders, seconds);
        println!(
            "| {appenders} | {plain:.0} | {group:.0} | {:.2}× | {per_sync:.1} |",
            group / plain
        );
    }

    // The targets, each from the figures above.
    let ratio_of = |a: &str, b: &str| match (find(a), find(b)) {
        (Some(a), Some(b)) => Some(a.1.as_secs_f64() / b.1.as_secs_f64()),
        _ => None,
    };
    let verdict = |met: bool| if met { "met" } else { "**not met**" };
    let row =
        |measure: &str, value: Option<f64>, target: &str, limit: f64, at_most: bool| match value {
            Some(v) => println!(
                "| {measure} | {v:.2}× | {target} | {} |",
                verdict(if at_most { v <= limit } else { v >= limit })
            ),
            None => println!("| {measure} | not measured (missing tool) | {target} | |"),
        };
    println!("\n## Targets (issue 31), from this run\n");
    println!("| measure | measured | target | verdict |");
    println!("|---|---|---|---|");
    row(
        "verb round trip p50 / raw std spawn p50",
        ratio_of("verb round trip", "raw `std"),
        "≤ 1.25×",
        1.25,
        true,
    );
    for (clients, ratio, busy, p50, p99) in &by_clients {
        if *clients == 16 || *clients == 32 {
            println!(
                "| throughput at {clients} clients / raw spawns from {clients} threads | {ratio:.2}×, {busy} `busy` | ≥ 0.8×, 0 `busy` | {} |",
                verdict(*ratio >= 0.8 && *busy == 0)
            );
        }
        if *clients == 32 {
            let spread = p99.as_secs_f64() / p50.as_secs_f64();
            println!(
                "| p99 / p50 of verb calls at 32 clients | {spread:.2}× ({} / {}) | ≤ 3× | {} |",
                micros(*p99),
                micros(*p50),
                verdict(spread <= 3.0)
            );
        }
    }
    row(
        "`verbd call` CLI / `sudo -n /bin/echo`",
        ratio_of("`verbd call", "`sudo"),
        "≤ 0.4×",
        0.4,
        true,
    );
    row(
        "`verbd call` CLI / `bwrap --ro-bind / / --unshare-net /bin/echo`",
        ratio_of("`verbd call", "`bwrap"),
        "≤ 0.8×",
        0.8,
        true,
    );
    let idle_mib = quiet_rss_tree as f64 / 1024.0;
    println!(
        "| idle RSS, daemon + spawner summed, {} s after the latency runs ({:.1} MiB 1 s after) | {idle_mib:.1} MiB | ≤ 10 MiB | {} |",
        quiet.as_secs(),
        served_rss_tree as f64 / 1024.0,
        verdict(idle_mib <= 10.0)
    );
    println!(
        "| the verb round trip right after a quiet spell (its pages mapped again), 3 spells | {} | (informative) | |",
        after_quiet
            .iter()
            .map(|took| micros(*took))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let (Some(version), Some(truth)) = (find("`verbd --version`"), find("`/bin/true`")) {
        println!(
            "| `verbd --version` − `/bin/true` (the CLI binary's own start, p50) | {} | (informative) | |",
            micros(version.1.saturating_sub(truth.1))
        );
    }
    println!("\nload average at end {}", load_average());
}
